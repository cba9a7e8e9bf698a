"""The fuzzer: its frame and handshake generators (fast, deterministic), and the script as
a user runs it, cut to about 25 s, against a real router process.

The end-to-end run is the fuzzer's own verdict: the router stays alive and exits 0 on
SIGTERM, its log has no traceback, its RSS stays bounded and every routing check between
the two good peers passes. A failure here is a robustness bug in the router (the run's
problems say which), unless the fuzzer itself broke.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from gnutella_router.config import load_config
from protocol.codec import encode_message, parse_payload
from protocol.constants import DEFAULT_MAX_PAYLOAD, HEADER_SIZE, MessageType
from protocol.errors import HandshakeError
from protocol.framing import FrameDecoder, FrameTooLargeError
from protocol.handshake import NEED_DATA, Acceptor
from protocol.messages import Bye, Message, QrpPatch, QrpReset, random_guid
from protocol.qrp import Intake, QrpReceiver
from scripts import fuzz_router

ROOT = Path(__file__).resolve().parents[2]

TEMPLATES = fuzz_router.build_templates(random.Random("test templates"))


def fuzzer(seed: int) -> fuzz_router.FrameFuzzer:
    return fuzz_router.FrameFuzzer(random.Random(seed), TEMPLATES)


def test_the_same_seed_gives_the_same_frames() -> None:
    first = [f.data for f in fuzzer(7).frames(2_000)]
    assert first == [f.data for f in fuzzer(7).frames(2_000)]
    assert first != [f.data for f in fuzzer(8).frames(2_000)]


def test_templates_are_valid_messages_of_their_kind() -> None:
    for kind, templates in TEMPLATES.items():
        for template in templates:
            assert len(template.payload) <= DEFAULT_MAX_PAYLOAD, kind
            parse_payload(template.payload_type, template.payload)  # raises if not valid


def test_mutated_frames_keep_the_stream_in_step() -> None:
    """Every mutation keeps the length field true: the router reads each frame, and only
    a session's ending may break the stream."""
    source = fuzzer(1)
    frames = source.frames(10_000)
    decoded = FrameDecoder().receive_data(b"".join(f.data for f in frames))
    assert len(decoded) == len(frames)
    heavy = {kind for kind, weight in fuzz_router.KIND_WEIGHTS.items() if weight >= 1}
    assert heavy <= {f.kind for f in frames}
    assert set(fuzz_router.MUTATIONS) <= {f.mutation for f in frames}
    assert sum(f.mutation != "valid" for f in frames) > len(frames) * 0.7


def test_a_mild_session_sends_mostly_valid_frames_of_peaceful_kinds() -> None:
    source = fuzzer(2)
    source.start_session(0.05)
    frames = source.frames(5_000)
    assert sum(f.mutation == "valid" for f in frames) > len(frames) * 0.9
    peaceful = [f for f in frames if f.mutation == "valid"]
    assert not {f.kind for f in peaceful} & fuzz_router.HOSTILE_KINDS


def test_a_session_sends_valid_qrp_tables() -> None:
    """Peaceful QRP frames follow one another as whole RESET and PATCH sequences, from
    the start of each connection, and a receiver installs the tables they carry."""
    source = fuzzer(6)
    source.start_session(0.0)
    receiver = QrpReceiver()
    qrp = [f for f in source.frames(20_000) if f.kind == "qrp 0x30"]
    assert isinstance(parse_payload(MessageType.QRP, qrp[0].data[HEADER_SIZE:]), QrpReset)
    completed = 0
    for frame in qrp:
        message = parse_payload(MessageType.QRP, frame.data[HEADER_SIZE:])
        assert isinstance(message, QrpReset | QrpPatch)
        # raises QrpError if out of sequence
        completed += receiver.receive(message) is Intake.COMPLETED
    assert completed >= 2


def test_endings_break_the_stream_as_intended() -> None:
    rng = random.Random(3)
    with pytest.raises(FrameTooLargeError):
        FrameDecoder().receive_data(fuzz_router.oversized_header(rng))
    honest = fuzzer(3).good_frame()
    broken = fuzz_router.wrong_length_frames(rng, fuzzer(3))
    assert broken[:19] == honest[:19]  # the same frame, but for its length field
    assert broken[19:23] != honest[19:23]


def test_the_bye_that_ends_a_stream_is_found() -> None:
    bye = encode_message(Message(random_guid(), 1, 0, Bye(411, "malformed")))
    assert fuzz_router.trailing_bye(fuzzer(4).good_frame() + bye) == 411
    assert fuzz_router.trailing_bye(fuzzer(4).good_frame()) is None


def test_random_header_lines_only_ever_fail_as_handshake_errors() -> None:
    """What the handshake fuzzer sends is refused cleanly by the protocol's acceptor."""
    rng = random.Random(5)
    outcomes: set[str | int] = set()
    for _ in range(300):
        acceptor = Acceptor()
        try:
            acceptor.receive_data(fuzz_router.random_header_lines(rng))
            event = acceptor.next_event()
            outcomes.add("incomplete" if event is NEED_DATA else "accepted")
        except HandshakeError as exc:
            outcomes.add(exc.status_code)
    assert 400 in outcomes
    assert 413 in outcomes
    assert fuzz_router.random_header_lines(random.Random(9)) == fuzz_router.random_header_lines(
        random.Random(9)
    )


def test_status_codes_are_read_from_answers() -> None:
    assert fuzz_router.status_code(b"GNUTELLA/0.6 429 Too many\r\n\r\n") == 429
    assert fuzz_router.status_code(b"GNUTELLA OK\n\n") == 200
    assert fuzz_router.status_code(b"") is None
    assert fuzz_router.status_code(b"HTTP/1.1 200 OK\r\n") is None


def test_the_router_is_configured_to_let_the_fuzzer_in_and_never_dial_out(
    tmp_path: Path,
) -> None:
    """The generated file is one the router accepts; fuzzed pongs and headers name
    hosts all over the internet, and the router must not dial them (loopback only)."""
    settings, _ = fuzz_router.parse_args(["--quick"])
    (tmp_path / "router.toml").write_text(fuzz_router.router_config(settings, admin_port=6399))
    config = load_config(tmp_path / "router.toml")
    assert config.catcher.min_connections == 0
    assert config.catcher.seeds == ()
    assert not config.catcher.gwebcache
    assert config.network.max_connections == settings.max_connections
    assert config.network.connects_per_ip_per_minute == fuzz_router.ATTEMPTS_PER_IP_PER_MINUTE
    assert config.admin.listen == "127.0.0.1:6399"


@pytest.mark.e2e
@pytest.mark.timeout(150)
def test_a_short_fuzzing_run_leaves_the_router_alive_and_routing(tmp_path: Path) -> None:
    figures_path = tmp_path / "figures.json"
    doc = tmp_path / "robustness.md"
    arguments = ["--quick", "--seed", "7", "--json", str(figures_path), "--output", str(doc)]
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fuzz_router.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert figures_path.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    figures = json.loads(figures_path.read_text())
    assert figures["problems"] == [], figures["problems"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert figures["verdict"] == "pass"
    assert figures["frames_sent"] > 10_000
    assert figures["routing_checks"]["failed"] == 0
    assert figures["routing_checks"]["passed"] >= 20
    assert figures["router_exit_status_after_sigterm"] == 0
    assert figures["router_log"] == dict.fromkeys(fuzz_router.FATAL_LOG_TEXT, 0)
    assert figures["rss"]["peak_sampled"] < figures["rss"]["bound"]
    assert "Traceback" not in run.stderr
    text = doc.read_text()
    assert text.startswith("# Robustness")
    assert "## Fuzzing" in text
    assert "scripts/fuzz_router.py --seed 7 --quick" in text
