"""Handshake fuzzing: hostile header blocks and request lines, endless lines,
slowloris connections, drippers, the crowd at ``max_connections`` (503) and the burst
beyond the per-address limit (429). Apart from the frame fuzzing because none of it
gets as far as sending messages, bar the drippers.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator

import trio

from gnutella_router.net.handshaking import next_handshake_event
from protocol.errors import HandshakeError
from protocol.handshake import (
    HandshakeRejected,
    Initiator,
)
from protocol.messages import random_guid
from scripts.router_fuzz.frames import session_headers
from scripts.router_fuzz.mutations import FrameFuzzer
from scripts.router_fuzz.payloads import Template
from scripts.router_fuzz.settings import (
    ATTEMPTS_PER_IP_PER_MINUTE,
    CROWD_SOURCE,
    FLOOD_CONCURRENCY,
    FLOOD_EXTRA_ATTEMPTS,
    FLOOD_LISTEN_SECONDS,
    FLOOD_SOURCE,
    FUZZ_SOURCES,
    HANDSHAKE_TIMEOUT,
    HELD_TOO_LONG,
    ROUTER_HANDSHAKE_TIMEOUT,
    SLOWLORIS_DRIP_SECONDS,
    Figures,
    Settings,
)
from scripts.router_fuzz.wire import (
    STREAM_ERRORS,
    RouterTarget,
    close_quietly,
    open_from,
    reset,
    status_code,
)

REQUEST_LINE = b"GNUTELLA CONNECT/0.6\r\n"


def random_header_lines(rng: random.Random) -> bytes:
    """A head whose header lines are random: bad names, control bytes, folding, no colon,
    repeated names, high bytes, overlong lines. Sometimes a well-formed line or two."""
    makers: list[Callable[[], bytes]] = [
        lambda: b"User-Agent: fuzz/1.0",
        lambda: rng.randbytes(rng.randint(0, 60)).translate(None, b"\r\n"),
        lambda: b"No colon here at all",
        lambda: b": empty name",
        lambda: b"Bad Name: spaces in the name",
        lambda: b"X-Control: \x01\x02\x7f\x00",
        lambda: b"  folded continuation " + rng.randbytes(10).translate(None, b"\r\n"),
        lambda: b"\tX-Tab-Folded: yes",
        lambda: b"X-High: \xff\xfe\xe9",
        lambda: b"X-Long: " + b"y" * rng.choice((4000, 4100, 9000)),
        lambda: b"Content-Encoding: " + rng.choice((b"gzip", b"deflate", b"br", b"")),
        lambda: b"Accept-Encoding: deflate, gzip, \xff",
        lambda: b"X-Try-Ultrapeers: " + b"1.2.3.4:5," * rng.randint(0, 300),
        lambda: b"GUID: " + rng.choice((b"00", b"z" * 32, b"0" * 64)),
        lambda: b"Listen-IP: " + rng.choice((b"999.1.1.1:1", b"1.2.3.4:99999", b"[::1]:6346", b"")),
        lambda: b"X-Max-TTL: " + rng.choice((b"-5", b"99999999999999999999", b"0x10")),
    ]  # fmt: skip
    lines = [rng.choice(makers)() for _ in range(rng.randint(1, 30))]
    terminator = rng.choice((b"\r\n", b"\n", b"\r\n", b"\r"))
    return REQUEST_LINE + b"".join(line + terminator for line in lines) + b"\r\n"


def garbage_request(rng: random.Random) -> bytes:
    return rng.choice(
        (
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GNUTELLA CONNECT/9.9\r\n\r\n",
            b"GNUTELLA CONNECT/0.4\r\nUser-Agent: x\r\n\r\n",
            b"GNUTELLA CONNECT/0.6.1\r\n\r\n",
            b"GNUTELLA/0.6 200 OK\r\n\r\n",
            b"\x00" * 64,
            b"\r\n\r\n",
            rng.randbytes(rng.randint(1, 2000)),
            b"GNUTELLA CONNECT/0.6\r\n" + bytes(range(256)) + b"\r\n\r\n",
        )
    )


def many_header_lines(count: int) -> bytes:
    return REQUEST_LINE + b"".join(b"X-H%d: v\r\n" % n for n in range(count)) + b"\r\n"


def header_block_of(size: int) -> Iterator[bytes]:
    """About ``size`` bytes of header lines, in pieces, never held whole."""
    yield REQUEST_LINE
    piece = b"".join(b"X-Filler-%06d: %s\r\n" % (n, b"f" * 80) for n in range(600))
    sent = len(REQUEST_LINE)
    while sent < size:
        yield piece
        sent += len(piece)
    yield b"\r\n"


def endless_line(size: int) -> Iterator[bytes]:
    """A request line that never ends: no CR or LF, ever."""
    piece = b"GNUTELLA CONNECT/0.6 " + b"A" * 65_000
    sent = 0
    while sent < size:
        yield piece
        sent += len(piece)


def valid_request(deflate: bool = False) -> bytes:
    headers = [("User-Agent", "fuzz/1.0"), ("X-Ultrapeer", "True"), ("GUID", random_guid().hex())]
    if deflate:
        headers.append(("Accept-Encoding", "deflate"))
    return Initiator().start(headers)


HANDSHAKE_SCENARIOS = (
    "random header lines",
    "garbage request line",
    "10 MB header block",
    "10,000 header lines",
    "no CRLF ever",
    "bad third step",
    "0.4 handshake",
    "reset mid-handshake",
    "reset at once",
    "close at once",
)
HANDSHAKE_WEIGHTS = (30, 15, 0.5, 3, 1, 20, 8, 15, 5, 8)


class HandshakeFuzzing:
    """Hostile handshakes, slow ones, a crowd and a burst of attempts."""

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
        self.stopping = False

    def count(self, what: str, outcome: str) -> None:
        self.figures.handshakes[f"{what}: {outcome}"] += 1

    async def worker(self, index: int) -> None:
        rng = random.Random(f"{self.settings.seed}/handshakes/{index}")
        # Every scenario early in the run, then at random.
        order = list(HANDSHAKE_SCENARIOS[index % len(HANDSHAKE_SCENARIOS) :])
        order += HANDSHAKE_SCENARIOS[: index % len(HANDSHAKE_SCENARIOS)]
        while True:
            scenario = (
                order.pop(0) if order else rng.choices(HANDSHAKE_SCENARIOS, HANDSHAKE_WEIGHTS)[0]
            )
            await self.one(scenario, rng)

    async def one(self, scenario: str, rng: random.Random) -> None:
        try:
            stream = await open_from(self.target, rng.choice(FUZZ_SOURCES))
        except OSError:
            self.count(scenario, "could not connect")
            await trio.sleep(0.05)
            return
        self.figures.connections_opened += 1
        try:
            outcome = await self.play(scenario, stream, rng)
        except STREAM_ERRORS as exc:
            outcome = f"stream error ({exc.__class__.__name__})"
        finally:
            await close_quietly(stream)
        self.count(scenario, outcome)

    async def play(self, scenario: str, stream: trio.SocketStream, rng: random.Random) -> str:
        if scenario == "random header lines":
            return await self.send_and_read(stream, [random_header_lines(rng)])
        if scenario == "garbage request line":
            return await self.send_and_read(stream, [garbage_request(rng)])
        if scenario == "10 MB header block":
            return await self.send_and_read(stream, header_block_of(10_000_000))
        if scenario == "10,000 header lines":
            return await self.send_and_read(stream, [many_header_lines(10_000)])
        if scenario == "no CRLF ever":
            return await self.send_and_read(stream, endless_line(2_000_000))
        if scenario == "bad third step":
            return await self.bad_third_step(stream, rng)
        if scenario == "0.4 handshake":
            return await self.legacy(stream, rng)
        if scenario == "reset mid-handshake":
            head = valid_request()
            await stream.send_all(head[: rng.randrange(1, len(head))])
            await trio.sleep(rng.random() * 0.2)
            reset(stream)
            return "reset by us"
        if scenario == "reset at once":
            reset(stream)
            return "reset by us"
        # "close at once"
        return "closed by us"

    async def send_and_read(
        self, stream: trio.SocketStream, pieces: Iterator[bytes] | list[bytes]
    ) -> str:
        """Send the pieces while reading the router's answer; the answer's code, or how
        the connection ended. A router must answer or close well within its timeout."""
        answer = bytearray()
        ended: list[str] = []
        started = trio.current_time()

        async def read() -> None:
            try:
                while len(answer) < 4096:
                    data = await stream.receive_some(4096)
                    if not data:
                        ended.append("closed")
                        return
                    answer.extend(data)
                    if b"\n\n" in answer or b"\r\n\r\n" in answer:
                        return
            except STREAM_ERRORS:
                ended.append("reset")

        async def send() -> None:
            with contextlib.suppress(*STREAM_ERRORS):
                for piece in pieces:
                    await stream.send_all(piece)

        with trio.move_on_after(HELD_TOO_LONG) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await read()
                nursery.cancel_scope.cancel()
        return self.outcome(answer, ended, scope.cancelled_caught, trio.current_time() - started)

    def outcome(
        self, answer: bytes | bytearray, ended: list[str], held: bool, seconds: float
    ) -> str:
        code = status_code(bytes(answer))
        if code is not None:
            self.figures.answers_from_router[code] += 1
            return f"answered {code}"
        if held:
            self.figures.problem(
                f"the router held a hostile handshake open for over {HELD_TOO_LONG:g} s"
            )
            return f"held open over {HELD_TOO_LONG:g} s"
        self.figures.connections_closed_by_router += 1
        how = ended[0] if ended else "closed"
        return f"{how} by the router" + (
            " after its handshake timeout" if seconds >= ROUTER_HANDSHAKE_TIMEOUT - 1 else ""
        )

    async def bad_third_step(self, stream: trio.SocketStream, rng: random.Random) -> str:
        await stream.send_all(valid_request(deflate=True))
        first = await self.read_head(stream)
        code = status_code(first)
        if code != 200:
            return self.outcome(first, ["closed"], False, 0.0)
        self.figures.answers_from_router[200] += 1
        third = rng.choice(
            (
                b"GNUTELLA/0.6 503 Busy\r\n\r\n",
                b"GNUTELLA/0.6 200 OK\r\nContent-Encoding: gzip\r\n\r\n",
                b"GNUTELLA/0.6 2000 OK\r\n\r\n",
                b"GNUTELLA/1.0 200 OK\r\n\r\n",
                b"HTTP/1.1 200 OK\r\n\r\n",
                b"GNUTELLA/0.6 200 OK\r\n" + b"X: y\r\n" * 500 + b"\r\n",
                b"GNUTELLA/0.6 200 OK\r\nContent-Encoding: deflate\r\n\r\n" + rng.randbytes(500),
                rng.randbytes(rng.randint(1, 500)),
            )
        )
        return "after 200, " + await self.send_and_read(stream, [third])

    async def read_head(self, stream: trio.SocketStream) -> bytes:
        data = bytearray()
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data.extend(chunk)
        return bytes(data)

    async def legacy(self, stream: trio.SocketStream, rng: random.Random) -> str:
        """The headerless 0.4 handshake, then a few frames."""
        await stream.send_all(b"GNUTELLA CONNECT/0.4\n\n")
        answer = await self.read_head_04(stream)
        code = status_code(answer)
        if code is not None:
            self.figures.answers_from_router[code] += 1
        if code == 200:
            fuzzer = FrameFuzzer(rng, self.templates)
            await stream.send_all(b"".join(f.data for f in fuzzer.frames(20)))
            return "answered GNUTELLA OK, took frames"
        return self.outcome(answer, ["closed"], False, 0.0)

    async def read_head_04(self, stream: trio.SocketStream) -> bytes:
        data = bytearray()
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            while b"\n\n" not in data and b"\r\n\r\n" not in data and len(data) < 4096:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data.extend(chunk)
        return bytes(data)

    # -- slow peers

    async def slowloris(self, index: int) -> None:
        """Drip a valid handshake a byte a second; when the router drops it, start again."""
        head = valid_request()
        while not self.stopping:
            try:
                stream = await open_from(self.target, FUZZ_SOURCES[index % len(FUZZ_SOURCES)])
            except OSError:
                self.count("slowloris", "could not connect")
                await trio.sleep(1.0)
                continue
            self.figures.connections_opened += 1
            started = trio.current_time()
            outcome = "still dripping at the end"
            try:
                for position in range(len(head) - 2):  # never the final CRLF
                    await stream.send_all(head[position : position + 1])
                    with trio.move_on_after(SLOWLORIS_DRIP_SECONDS):
                        data = await stream.receive_some(4096)
                        held = trio.current_time() - started
                        outcome = self.outcome(data, ["closed"], False, held)
                        self.figures.slowloris_hold_seconds.append(held)
                        break
                    if trio.current_time() - started > HELD_TOO_LONG:
                        self.figures.problem(
                            "the router held a slowloris handshake open for over "
                            f"{HELD_TOO_LONG:g} s"
                        )
                        outcome = f"held open over {HELD_TOO_LONG:g} s"
                        break
            except STREAM_ERRORS:
                held = trio.current_time() - started
                self.figures.slowloris_hold_seconds.append(held)
                self.figures.connections_closed_by_router += 1
                outcome = "reset by the router"
            finally:
                await close_quietly(stream)
            self.count("slowloris", outcome)

    async def dripper(self, index: int) -> None:
        """Handshake properly, then drip one frame a byte a second and never read: the
        router's queue towards it fills with broadcasts."""
        rng = random.Random(f"{self.settings.seed}/drippers/{index}")
        try:
            stream = await open_from(self.target, FUZZ_SOURCES[-1 - index % len(FUZZ_SOURCES)])
        except OSError:
            self.count("dripper", "could not connect")
            return
        self.figures.connections_opened += 1
        outcome = "still open at the end"
        try:
            initiator = Initiator()
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                await stream.send_all(initiator.start(session_headers(rng, False)))
                event = await next_handshake_event(stream, initiator)
                if isinstance(event, HandshakeRejected):
                    self.figures.answers_from_router[event.status_code] += 1
                    outcome = f"refused {event.status_code}"
                    return
                self.figures.answers_from_router[200] += 1
                await stream.send_all(initiator.confirm())
                await next_handshake_event(stream, initiator)
            frame = FrameFuzzer(rng, self.templates).good_frame() * 1000
            for position in range(len(frame)):
                await stream.send_all(frame[position : position + 1])
                await trio.sleep(SLOWLORIS_DRIP_SECONDS)
        except (trio.TooSlowError, HandshakeError):
            outcome = "no handshake"
        except STREAM_ERRORS:
            self.figures.connections_closed_by_router += 1
            outcome = "closed by the router"
        finally:
            await close_quietly(stream)
            self.count("dripper", outcome)

    # -- crowds

    async def crowd(self) -> None:
        """As many handshakes at once as the router takes connections: the ones over
        its limit must get 503."""

        async def one() -> None:
            try:
                stream = await open_from(self.target, CROWD_SOURCE)
            except OSError:
                self.count("crowd", "could not connect")
                return
            self.figures.connections_opened += 1
            try:
                initiator = Initiator()
                with trio.fail_after(HANDSHAKE_TIMEOUT):
                    await stream.send_all(initiator.start(session_headers(random.Random(0), False)))
                    event = await next_handshake_event(stream, initiator)
                if isinstance(event, HandshakeRejected):
                    self.figures.answers_from_router[event.status_code] += 1
                    self.count("crowd", f"answered {event.status_code}")
                    return
                self.figures.answers_from_router[200] += 1
                await stream.send_all(initiator.confirm())
                self.count("crowd", "answered 200")
                await trio.sleep(1.0)
            except (trio.TooSlowError, HandshakeError, *STREAM_ERRORS):
                self.count("crowd", "closed during the handshake")
            finally:
                await close_quietly(stream)

        async with trio.open_nursery() as nursery:
            for _ in range(self.settings.max_connections):
                nursery.start_soon(one)

    async def flood(self) -> None:
        """More connection attempts from one address than the router allows a minute,
        fast: each only connects and listens for a moment. A refused attempt is answered
        429 at once; one let in hears nothing (the router waits for its request)."""
        limiter = trio.CapacityLimiter(FLOOD_CONCURRENCY)

        async def one() -> None:
            async with limiter:
                try:
                    stream = await open_from(self.target, FLOOD_SOURCE)
                except OSError:
                    self.count("attempt burst", "could not connect")
                    return
                self.figures.connections_opened += 1
                answer = b""
                try:
                    with trio.move_on_after(FLOOD_LISTEN_SECONDS):
                        answer = bytes(await stream.receive_some(4096))
                except STREAM_ERRORS:
                    pass
                finally:
                    await close_quietly(stream)
                code = status_code(answer)
                if code is not None:
                    self.figures.answers_from_router[code] += 1
                    self.count("attempt burst", f"answered {code}")
                else:
                    wait = f"{FLOOD_LISTEN_SECONDS:g} s"
                    self.count("attempt burst", f"no answer within {wait} (let in)")

        async with trio.open_nursery() as nursery:
            for _ in range(ATTEMPTS_PER_IP_PER_MINUTE + FLOOD_EXTRA_ATTEMPTS):
                nursery.start_soon(one)
