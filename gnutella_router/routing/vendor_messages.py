"""The vendor messages the router acts on, and the ones it introduces itself with.

A peer's Messages Supported and Features Supported are kept on its link (dumps show
them); its Hops Flow is obeyed by the router's broadcasts; a leaf's Query Status guides
the dynamic querying of its queries (:func:`query_status`). Every other vendor message is
accepted quietly and goes no further. Our own Messages Supported lists exactly the
vendor messages acted on (:data:`UNDERSTOOD`), so it can never announce one we do not
act on; our Features Supported lists none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gnutella_router.routing.link import Link
from protocol.codec import encode_message
from protocol.messages import VendorMessage
from protocol.vendor import (
    FEATURES_SUPPORTED,
    HOPS_FLOW,
    MESSAGES_SUPPORTED,
    QUERY_STATUS_RESPONSE,
    VendorMessageId,
    features_supported,
    messages_supported,
    parse_features_supported,
    parse_hops_flow,
    parse_messages_supported,
    parse_query_status,
)

HANDLERS: Mapping[VendorMessageId, Callable[[Link, bytes], None]] = {
    MESSAGES_SUPPORTED: lambda link, body: link.received_messages_supported(
        parse_messages_supported(body)
    ),
    FEATURES_SUPPORTED: lambda link, body: link.received_features_supported(
        parse_features_supported(body)
    ),
    HOPS_FLOW: lambda link, body: link.received_hops_flow(parse_hops_flow(body)),
}
"""The vendor messages this router understands, and what it does with each."""

UNDERSTOOD = (*HANDLERS, QUERY_STATUS_RESPONSE)
"""What our Messages Supported lists: the handlers here, and a leaf's query status,
which the router's dynamic querying acts on."""

INTRODUCTIONS: tuple[bytes, ...] = tuple(
    encode_message(message) for message in (messages_supported(UNDERSTOOD), features_supported(()))
)
"""Messages Supported and Features Supported, encoded once."""


def handle(link: Link, message: VendorMessage) -> None:
    """Act on a vendor message of ``link``'s, if it is one we understand.

    Raises:
        MalformedPayloadError: its body does not parse.
    """
    handler = HANDLERS.get(VendorMessageId.of(message))
    if handler is not None:
        handler(link, message.body)


def query_status(message: VendorMessage) -> int | None:
    """The results a leaf says it kept, if ``message`` is a Query Status response.

    Raises:
        MalformedPayloadError: it is one, and its body does not parse.
    """
    if VendorMessageId.of(message) != QUERY_STATUS_RESPONSE:
        return None
    return parse_query_status(message.body)
