"""Frame fuzzing: connections that handshake with random well-formed headers, send
a session of frames from :mod:`router_fuzz.mutations`, end it in one of the ways that
break the stream, and start again.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Callable

import trio

from gnutella_router.net.handshaking import next_handshake_event
from protocol.codec import encode_message
from protocol.compression import DeflateCompressor
from protocol.errors import HandshakeError
from protocol.handshake import (
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
)
from protocol.messages import (
    Bye,
    Message,
    random_guid,
)
from scripts.router_fuzz.mutations import (
    DEFLATE_ENDINGS,
    ENDINGS,
    FrameFuzzer,
    FuzzFrame,
    oversized_header,
    wrong_length_frames,
)
from scripts.router_fuzz.payloads import Template, random_host, random_ip
from scripts.router_fuzz.settings import (
    BOMB_BYTES,
    ENDING_PAUSE,
    ENDING_WAIT,
    FUZZ_SOURCES,
    HANDSHAKE_TIMEOUT,
    MAX_SESSION_FRAMES,
    MEAN_SESSION_FRAMES,
    POLITE_CLOSE_WAIT,
    SEND_CHUNK_BYTES,
    SEND_CHUNK_FRAMES,
    Figures,
    Settings,
)
from scripts.router_fuzz.wire import (
    STREAM_ERRORS,
    Drain,
    RouterTarget,
    close_quietly,
    open_from,
    reset,
)

SESSION_HEADER_CHOICES: tuple[tuple[str, Callable[[random.Random], str]], ...] = (
    ("Bye-Packet", lambda rng: rng.choice(("0.1", "1.0", "nope"))),
    ("GGEP", lambda rng: rng.choice(("0.5", "0.1", "9"))),
    ("Pong-Caching", lambda rng: rng.choice(("0.1", "0.2"))),
    ("Vendor-Message", lambda rng: rng.choice(("0.1", "0.2", "x"))),
    ("X-Max-TTL", lambda rng: rng.choice(("0", "1", "3", "255", "-1", "seven"))),
    ("X-Degree", lambda rng: str(rng.randrange(1000))),
    ("X-Query-Routing", lambda rng: "0.1"),
    ("X-Dynamic-Querying", lambda rng: "0.1"),
    ("Listen-IP", lambda rng: rng.choice((random_host(rng), "::1", "x:y"))),
    ("X-Try-Ultrapeers", lambda rng: ",".join(random_host(rng) for _ in range(rng.randint(0, 30)))),
    ("Remote-IP", lambda rng: random_ip(rng)),
    ("X-Ultrapeer-Needed", lambda rng: rng.choice(("True", "False"))),
    ("X-Requeries", lambda rng: "False"),
)  # fmt: skip


def session_headers(rng: random.Random, deflate: bool) -> list[tuple[str, str]]:
    """Well-formed handshake headers in random combinations (the handshake fuzzer is
    what sends malformed ones)."""
    headers = [
        ("User-Agent", rng.choice(("fuzz/1.0", "gtk-gnutella/1.2.3", "LimeWire/5.5", "x" * 200))),
        ("X-Ultrapeer", rng.choice(("True", "True", "False", "maybe"))),
        ("GUID", random_guid().hex() if rng.random() < 0.9 else "not-a-guid"),
    ]
    headers += [(name, make(rng)) for name, make in SESSION_HEADER_CHOICES if rng.random() < 0.4]
    if deflate:
        headers.append(("Accept-Encoding", "deflate"))
    return headers


class FrameFuzzing:
    """The frame-fuzzing workers, sharing the budget of frames and the figures."""

    def __init__(
        self,
        target: RouterTarget,
        templates: dict[str, list[Template]],
        settings: Settings,
        figures: Figures,
    ) -> None:
        self.target = target
        self.templates = templates
        self.settings = settings
        self.figures = figures

    def budget_left(self) -> int:
        return self.settings.frames - self.figures.frames_sent

    async def worker(self, index: int) -> None:
        rng = random.Random(f"{self.settings.seed}/frames/{index}")
        fuzzer = FrameFuzzer(rng, self.templates)
        while self.budget_left() > 0:
            await self.session(rng, fuzzer)

    async def session(self, rng: random.Random, fuzzer: FrameFuzzer) -> None:
        figures = self.figures
        deflate = rng.random() < 0.15
        try:
            stream = await open_from(self.target, rng.choice(FUZZ_SOURCES))
        except OSError as exc:
            figures.sessions[f"could not connect ({errno.errorcode.get(exc.errno or 0, exc)})"] += 1
            await trio.sleep(0.05)
            return
        figures.connections_opened += 1
        figures.sessions["opened"] += 1
        try:
            complete = await self.handshake(stream, rng, deflate)
            if complete is None:
                return
            drain = Drain(stream, complete.decompress_incoming, complete.trailing_data)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain.run)
                await self.send_frames(stream, drain, rng, fuzzer, complete.compress_outgoing)
                nursery.cancel_scope.cancel()
        finally:
            await close_quietly(stream)

    async def handshake(
        self, stream: trio.SocketStream, rng: random.Random, deflate: bool
    ) -> HandshakeComplete | None:
        figures = self.figures
        initiator = Initiator()
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                await stream.send_all(initiator.start(session_headers(rng, deflate)))
                event = await next_handshake_event(stream, initiator)
                if isinstance(event, HandshakeRejected):
                    figures.answers_from_router[event.status_code] += 1
                    figures.sessions[f"refused {event.status_code} {event.reason}"] += 1
                    return None
                assert isinstance(event, HandshakeResponse)
                figures.answers_from_router[200] += 1
                await stream.send_all(initiator.confirm(deflate=deflate))
                complete = await next_handshake_event(stream, initiator)
                assert isinstance(complete, HandshakeComplete)
        except trio.TooSlowError:
            figures.sessions["no handshake answer within 5 s"] += 1
            return None
        except (HandshakeError, *STREAM_ERRORS):
            figures.sessions["closed by the router during the handshake"] += 1
            figures.connections_closed_by_router += 1
            return None
        figures.sessions["handshaken"] += 1
        if complete.compress_outgoing:
            figures.sessions["handshaken with deflate"] += 1
        return complete

    async def send_frames(
        self,
        stream: trio.SocketStream,
        drain: Drain,
        rng: random.Random,
        fuzzer: FrameFuzzer,
        deflate: bool,
    ) -> None:
        figures = self.figures
        compressor = DeflateCompressor() if deflate else None
        share = rng.choice(list(MEAN_SESSION_FRAMES))
        planned = min(MAX_SESSION_FRAMES, 1 + int(rng.expovariate(1 / MEAN_SESSION_FRAMES[share])))
        fuzzer.start_session(share)
        endings = {**ENDINGS, **(DEFLATE_ENDINGS if deflate else {})}
        ending = rng.choices(list(endings), weights=list(endings.values()))[0]
        try:
            while planned > 0 and self.budget_left() > 0:
                if drain.ended.is_set():
                    raise trio.BrokenResourceError
                frames: list[FuzzFrame] = []
                size = 0
                while len(frames) < min(planned, SEND_CHUNK_FRAMES) and size < SEND_CHUNK_BYTES:
                    frame = fuzzer.next_frame()
                    frames.append(frame)
                    size += len(frame.data)
                data = b"".join(f.data for f in frames)
                await stream.send_all(compressor.compress(data) if compressor else data)
                planned -= len(frames)
                figures.frames_sent += len(frames)
                figures.bytes_sent += size
                for frame in frames:
                    figures.frames_by_type[frame.kind] += 1
                    figures.frames_by_mutation[frame.mutation] += 1
            if self.budget_left() <= 0:
                ending = "close"
            await self.end_session(stream, drain, rng, fuzzer, compressor, ending)
        except STREAM_ERRORS:
            figures.sessions["closed by the router before its end"] += 1
            await self.note_close(drain)

    async def end_session(
        self,
        stream: trio.SocketStream,
        drain: Drain,
        rng: random.Random,
        fuzzer: FrameFuzzer,
        compressor: DeflateCompressor | None,
        ending: str,
    ) -> None:
        def framed(data: bytes) -> bytes:
            return compressor.compress(data) if compressor is not None else data

        if ending != "close":
            # Let the router reach what came before, or it goes with the connection.
            await trio.sleep(ENDING_PAUSE)
        last = b""
        if ending in ("reset mid-frame (SO_LINGER 0)", "half a frame, then close"):
            frame = fuzzer.good_frame()
            last = framed(frame[: rng.randrange(1, len(frame))])
        elif ending == "our Bye":
            last = framed(encode_message(Message(random_guid(), 1, 0, Bye(200, "fuzz over"))))
        elif ending == "length beyond 64 KiB":
            last = framed(oversized_header(rng) + rng.randbytes(rng.randint(0, 100)))
        elif ending == "wrong length, then more frames":
            last = framed(wrong_length_frames(rng, fuzzer))
        elif ending == "random bytes":
            last = framed(rng.randbytes(rng.randint(1, 8192)))
        elif ending == "garbage in the deflate stream":
            last = rng.randbytes(rng.randint(1, 2048))
        elif ending == "deflate bomb (1 MiB of zeros)":
            last = framed(bytes(BOMB_BYTES))
        if last:
            await stream.send_all(last)
        self.figures.endings[ending] += 1
        if ending == "reset mid-frame (SO_LINGER 0)":
            reset(stream)
        elif ending in ("close", "half a frame, then close"):
            # A polite close: our side first, then read until the router closes its own.
            # Closing at once with its messages unread would make our kernel send a
            # reset, and the router would drop what it has not yet routed of ours.
            await stream.send_eof()
            with trio.move_on_after(POLITE_CLOSE_WAIT):
                await drain.ended.wait()
        else:
            # The router should close the connection now (or, after our Bye, we do).
            with trio.move_on_after(ENDING_WAIT):
                await drain.ended.wait()
            if drain.ended.is_set():
                await self.note_close(drain)

    async def note_close(self, drain: Drain) -> None:
        """Count a close by the router, with its Bye code when the last bytes hold one."""
        with trio.move_on_after(ENDING_WAIT):
            await drain.ended.wait()
        self.figures.connections_closed_by_router += 1
        code = drain.bye_code()
        if code is not None:
            self.figures.byes_from_router[code] += 1
            self.figures.sessions[f"closed by the router with Bye {code}"] += 1
        else:
            self.figures.sessions[
                f"closed by the router without a Bye ({drain.how or 'no end seen'})"
            ] += 1
