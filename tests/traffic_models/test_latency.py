"""The load report's reconciliation with the router's own counters."""

from __future__ import annotations

from traffic_models.latency import RouterCounts


def test_messages_shed_at_the_routers_door_are_not_called_unread() -> None:
    counts = RouterCounts(
        admin="127.0.0.1:6347",
        received={"query": 5},
        dropped={"shed-admission": {"query": 10}},
    )
    (line,) = [text for text in counts.lines({"query": 20}) if "sent" in text]
    assert line == (
        "  query: sent 20, the router routed 5 and shed 10 at its door "
        "(5 not read when the client stopped)"
    )
    (plain,) = [
        text
        for text in RouterCounts(admin="a", received={"ping": 3}).lines({"ping": 3})
        if "sent" in text
    ]
    assert plain == "  ping: sent 3, the router routed 3"
