"""Two attacks on peer discovery, on loopback: a host cache eclipse and GWebCache poisoning.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/attack_discovery.py                            # this checkout
    .venv/bin/python scripts/attack_discovery.py --before b09555b           # that revision first
    .venv/bin/python scripts/attack_discovery.py --before b09555b --write  # also docs/robustness.md

**Host cache eclipse.** A router (``Daemon`` in a process of its own, on 127.0.0.1, on
its defaults) is joined by two peers: an honest one, from 127.2.0.1, whose pongs name
300 public hosts in 300 networks, and then an attacker, from 127.66.0.1, whose 10,000
pongs name 3,000 addresses in 10.0.0.0/8, 3,000 in 192.168.0.0/16, 3,912 public
addresses and one victim address on 88 ports, in a shuffled order. The pongs go in
chunks of 200, each chunk once the catcher has taken in the last (its queue would
otherwise drop most of a burst). Then the router runs ``--seconds`` more, dialling to
reach its four outgoing connections. **Nothing is dialled**: the router's
``server.dial`` is replaced by a recorder that notes the address and fails, as an
unreachable host would, so the figures count dial *attempts* and no packet leaves
loopback. A router after this change runs with ``network.local_networks = []``: its
default names loopback local, and the attacker, on loopback here, would then be the
operator's own host rather than a stranger on the internet.

**GWebCache poisoning.** A GWebCache service (``GWebCacheServer`` on 127.0.0.1, on its
defaults; after this change with ``trusted = ()``, for the same reason) is registered
with by 20 honest clients, each from an address of its own (127.10.0.1, 127.11.0.1...:
loopback is a /8, so each has its own /16). Then one address (127.66.0.1) registers 400
hosts of its own as fast as it can; a newcomer asks ``get=1``; another address asks to
list ``url=http://169.254.169.254/latest/meta-data/``; and the attacker opens 300
connections that send nothing while 20 honest clients, each from its own address, ask
``get=1`` (at most 5 s each).

``--before REV`` measures ``REV``'s code first, from ``git archive``, its hot path not
compiled (discovery is not on it). Each side runs in a child process bounded by
``--timeout`` (which also ends itself if left alone), killed on every way out of this
one (Ctrl-C, SIGTERM, SIGHUP: exit status 130). Exit status 0 when the last side holds
the attacker to its shares (at most 5 % of the cache, no dial outside the public
ranges, at most 2 of the victim's ports, at most 2 of 20 hosts of a ``get`` answer, no
metadata URL, no honest client refused), 1 when it does not or a run failed, 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import random
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "robustness.md"
SECTION = "discovery-attacks"
HONEST_PEER = "127.2.0.1"
ATTACKER = "127.66.0.1"
VICTIM = "20.250.1.1"
VICTIM_PORTS = range(6000, 6088)
HONEST_HOSTS = 300
ATTACK_PONGS = 10_000
CHUNK = 200
GWC_HONEST = 20
GWC_FLOOD = 400
GWC_IDLE = 300
METADATA_URL = "http://169.254.169.254/latest/meta-data/"


# --------------------------------------------------------------------------- the plan


def honest_hosts() -> list[tuple[str, int]]:
    """300 public hosts, each in a /16 of its own (first octets 20..89 are public)."""
    return [(f"{20 + n % 70}.{200 + n // 70}.1.1", 6346) for n in range(HONEST_HOSTS)]


def attack_hosts() -> list[tuple[str, int]]:
    """The attacker's 10,000, shuffled: private, public, and one victim on 88 ports."""
    hosts = [(f"10.{n // 250}.{n % 250}.1", 6346) for n in range(3000)]
    hosts += [(f"192.168.{n // 250}.{n % 250 + 1}", 6346) for n in range(3000)]
    public = ATTACK_PONGS - 6000 - len(VICTIM_PORTS)
    hosts += [(f"{20 + n % 70}.{n // 70}.2.1", 6346) for n in range(public)]
    hosts += [(VICTIM, port) for port in VICTIM_PORTS]
    random.Random(20261128).shuffle(hosts)
    return hosts


def is_public(host: str) -> bool:
    address = ipaddress.ip_address(host)
    return address.is_global and not address.is_multicast


# --------------------------------------------------------------------------- the child
# Runs with the code under test first on the path: only the APIs both sides have.


async def _connect_from(source: str, where: tuple[str, int]) -> Any:
    import trio

    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    try:
        await sock.bind((source, 0))
        await sock.connect(where)
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


async def _handshaken(source: str, where: tuple[str, int]) -> Any:
    from gnutella_router.net.handshaking import next_handshake_event
    from protocol.handshake import HandshakeComplete, HandshakeResponse, Initiator
    from protocol.messages import random_guid

    stream = await _connect_from(source, where)
    initiator = Initiator()
    headers = [
        ("User-Agent", "attack-discovery/1"),
        ("X-Ultrapeer", "True"),
        ("GUID", random_guid().hex()),
    ]
    await stream.send_all(initiator.start(headers))
    response = await next_handshake_event(stream, initiator)
    if not isinstance(response, HandshakeResponse):
        raise RuntimeError(f"handshake refused: {response!r}")
    await stream.send_all(initiator.confirm())
    complete = await next_handshake_event(stream, initiator)
    assert isinstance(complete, HandshakeComplete)
    return stream


async def _drain(stream: Any) -> None:
    """Read (and forget) what the router sends, so that it never waits on us."""
    import trio

    try:
        while await stream.receive_some(65536):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


def _taken_in(daemon: Any) -> int:
    """Hosts the catcher has dealt with: cached, refreshed, refused, or dropped."""
    catcher = daemon.catcher
    stats = catcher.hosts.statistics()
    return int(
        stats.added
        + stats.refreshed
        + sum(stats.rejected.values())
        + catcher.dropped_hosts
        + catcher.own_addresses_skipped
    )


async def _send_pongs(daemon: Any, stream: Any, hosts: list[tuple[str, int]]) -> None:
    import trio

    from protocol.codec import encode_message
    from protocol.messages import Message, Pong, random_guid

    for start in range(0, len(hosts), CHUNK):
        chunk = hosts[start : start + CHUNK]
        target = _taken_in(daemon) + len(chunk)
        await stream.send_all(
            b"".join(
                encode_message(Message(random_guid(), 1, 0, Pong(port, host)))
                for host, port in chunk
            )
        )
        while _taken_in(daemon) < target:  # noqa: ASYNC110 - the router's counters
            await trio.sleep(0.01)


async def _eclipse(after: bool, state: Path, seconds: float) -> dict[str, Any]:
    import trio

    from gnutella_router.config import load_config
    from gnutella_router.daemon import Daemon
    from gnutella_router.stages.server import DialError

    overrides: dict[str, object] = {
        "node.listen": "127.0.0.1:0",
        "admin.listen": "127.0.0.1:0",
        "node.state_dir": str(state),
        "log.level": "warning",
    }
    if after:
        overrides["network.local_networks"] = []
    daemon = Daemon(load_config(None, overrides))
    dials: list[tuple[str, int, float]] = []
    began = trio.current_time()

    async def record(host: str, port: int, *, timeout: float) -> None:  # noqa: ASYNC109
        dials.append((host, port, trio.current_time() - began))
        raise DialError("recorded by attack_discovery.py, not dialled")

    daemon.server.dial = record  # type: ignore[method-assign,assignment]  # no dial leaves
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        honest = await _handshaken(HONEST_PEER, daemon.address)
        attacker = await _handshaken(ATTACKER, daemon.address)
        nursery.start_soon(_drain, honest)
        nursery.start_soon(_drain, attacker)
        await _send_pongs(daemon, honest, honest_hosts())
        flood_began = trio.current_time()
        await _send_pongs(daemon, attacker, attack_hosts())
        flood_seconds = trio.current_time() - flood_began
        await trio.sleep(seconds)
        cache = daemon.catcher.hosts
        stats = cache.statistics()
        result = {
            "capacity": stats.capacity,
            "cached": [[r.host, r.port] for r in cache.hosts()],
            "rejected": dict(stats.rejected),
            "evicted": stats.evicted,
            "replaced": getattr(stats, "replaced", None),
            "dropped": daemon.catcher.dropped_hosts,
            "dials": dials,
            "flood_seconds": flood_seconds,
            "seconds": seconds,
        }
        daemon.request_stop()
        await daemon.stopped.wait()
        await honest.aclose()
        await attacker.aclose()
        nursery.cancel_scope.cancel()
    return result


async def _get(source: str, where: tuple[str, int], target: str, limit: float = 5.0) -> bytes:
    """One request from ``source``; the whole answer, or b"" if none came within ``limit``."""
    import trio

    answer = b""
    with trio.move_on_after(limit):
        try:
            stream = await _connect_from(source, where)
            try:
                await stream.send_all(f"GET {target} HTTP/1.1\r\nHost: gwc\r\n\r\n".encode())
                while chunk := await stream.receive_some(65536):
                    answer += chunk
            finally:
                await stream.aclose()
        except (OSError, trio.BrokenResourceError):
            pass
    return answer


def _body(answer: bytes) -> str:
    return answer.partition(b"\r\n\r\n")[2].decode(errors="replace")


async def _poisoning(after: bool) -> dict[str, Any]:
    import trio

    from gnutella_router.discovery.gwebcache_server import GWebCacheServer
    from gnutella_router.discovery.gwebcache_service import GWebCacheService, ServiceSettings

    settings = ServiceSettings(trusted=()) if after else ServiceSettings()
    service = GWebCacheService(settings, clock=trio.current_time)
    server = GWebCacheServer(service)
    async with trio.open_nursery() as nursery:
        where = (await nursery.start(server.serve, "127.0.0.1", 0))[0]
        for n in range(GWC_HONEST):
            client = f"127.{10 + n}.0.1"
            await _get(client, where, f"/?update=1&ip={client}:6346&client=TEST&version=1")
        began = trio.current_time()
        accepted = 0
        for port in range(10_000, 10_000 + GWC_FLOOD):
            body = _body(await _get(ATTACKER, where, f"/?update=1&ip={ATTACKER}:{port}"))
            accepted += body.strip() == "OK"
        flood_seconds = trio.current_time() - began
        listed = [
            line.split("|")[1]
            for line in _body(await _get("127.99.0.1", where, "/?get=1&net=gnutella")).split()
            if line.startswith("H|")
        ]
        url_answer = _body(await _get("127.67.0.1", where, f"/?update=1&url={METADATA_URL}"))
        urls = _body(await _get("127.99.0.2", where, "/?urlfile=1")).split()
        idle = []
        for _ in range(GWC_IDLE):
            try:
                idle.append(await _connect_from(ATTACKER, where))
            except OSError:
                break
        await trio.sleep(0.5)  # the server has taken them all in
        statuses = []
        for n in range(GWC_HONEST):
            answer = await _get(f"127.{120 + n}.0.1", where, "/?get=1&net=gnutella")
            statuses.append(answer.split(b" ", 2)[1].decode() if answer else "none")
        for stream in idle:
            await stream.aclose()
        nursery.cancel_scope.cancel()
    return {
        "accepted": accepted,
        "flood_seconds": flood_seconds,
        "listed": listed,
        "url_answer": url_answer.strip(),
        "url_listed": METADATA_URL in urls,
        "idle_opened": len(idle),
        "statuses": statuses,
    }


def child(side: str, out: Path, seconds: float, timeout: float) -> None:
    """Both attacks against the code on the path; the figures as JSON in ``out``."""
    import trio

    signal.alarm(int(timeout) + 30)  # a backstop should trio itself ever hang
    after = side == "after"

    async def both() -> dict[str, Any]:
        with trio.fail_after(timeout), tempfile.TemporaryDirectory() as state:
            return {
                "eclipse": await _eclipse(after, Path(state), seconds),
                "poisoning": await _poisoning(after),
            }

    out.write_text(json.dumps(trio.run(both)))


# --------------------------------------------------------------------------- the parent


def run_side(label: str, side: str, tree: Path, seconds: float, timeout: float) -> dict[str, Any]:
    """Run one side's child, with ``tree`` first on its path; kill it whatever happens."""
    from scripts.router_bench.trees import tree_first
    from scripts.runner import Child

    with tempfile.TemporaryDirectory(prefix="attack-discovery-") as folder:
        out, log = Path(folder) / "figures.json", Path(folder) / "child.log"
        argv = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--out", str(out)]
        argv += ["--seconds", str(seconds), "--timeout", str(timeout)]
        print(f"{label}: attacking ...", flush=True)
        child = Child(
            f"{label}'s run", argv, log, env=tree_first(tree), cwd=Path(folder), own_session=True
        )
        try:
            status = child.wait(timeout + 60)
        finally:
            child.close()
        if status != 0 or not out.exists():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise RuntimeError(f"{label}: the run failed (exit status {status}):\n{tail}")
        figures: dict[str, Any] = json.loads(out.read_text())
    figures["label"] = label
    return figures


def figures_of(run: dict[str, Any]) -> dict[str, Any]:
    """The figures the report shows, from what the child recorded."""
    eclipse, gwc = run["eclipse"], run["poisoning"]
    attack = set(map(tuple, attack_hosts()))
    honest = set(honest_hosts())
    cached = [tuple(h) for h in eclipse["cached"]]
    dials = [(h, p) for h, p, _ in eclipse["dials"]]
    outside = [(h, p) for h, p in dials if not is_public(h)]
    listed_attacker = sum(entry.startswith(f"{ATTACKER}:") for entry in gwc["listed"])
    refused = sum(status != "200" for status in gwc["statuses"])
    return {
        "size": len(cached),
        "capacity": eclipse["capacity"],
        "attacker_cached": sum(h in attack for h in cached),
        "honest_cached": sum(h in honest for h in cached),
        "non_public_cached": sum(not is_public(h) for h, _ in cached),
        "victim_cached": sum(h == VICTIM for h, _ in cached),
        "dials": len(dials),
        "dials_outside": len(outside),
        "outside_examples": sorted({_network(h) for h, _ in outside}),
        "victim_ports_dialled": len({p for h, p in dials if h == VICTIM}),
        "attacker_dials": sum((h, p) in attack for h, p in dials),
        "seconds": eclipse["seconds"],
        "flood_seconds": eclipse["flood_seconds"],
        "refused": {k: v for k, v in eclipse["rejected"].items() if v},
        "evicted": eclipse["evicted"],
        "replaced": eclipse["replaced"],
        "gwc_accepted": gwc["accepted"],
        "gwc_flood_seconds": gwc["flood_seconds"],
        "gwc_listed": len(gwc["listed"]),
        "gwc_listed_attacker": listed_attacker,
        "url_listed": gwc["url_listed"],
        "url_answer": gwc["url_answer"],
        "idle_opened": gwc["idle_opened"],
        "honest_refused": refused,
    }


def _network(host: str) -> str:
    address = ipaddress.ip_address(host)
    for network in ("10.0.0.0/8", "192.168.0.0/16", "172.16.0.0/12", "127.0.0.0/8"):
        if address in ipaddress.ip_network(network):
            return network
    return host


def holds(figures: dict[str, Any]) -> bool:
    """Whether the attacker was held to its shares (see the module docstring)."""
    return bool(
        figures["attacker_cached"] <= 0.05 * figures["capacity"]
        and figures["dials_outside"] == 0
        and figures["victim_ports_dialled"] <= 2
        and figures["gwc_listed_attacker"] <= 2
        and not figures["url_listed"]
        and figures["honest_refused"] == 0
    )


def rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    f = figures
    held = f["attacker_cached"] / max(1, f["size"])
    share = f["attacker_cached"] / f["capacity"]
    outside = ", ".join(f["outside_examples"][:4]) or "none"
    return [
        ("host cache: hosts held, of capacity", f"{f['size']:,} of {f['capacity']:,}"),
        (
            "... named by the attacker",
            f"{f['attacker_cached']:,} ({share:.0%} of capacity, {held:.0%} of the hosts held)",
        ),
        ("... of the honest peer's 300", f"{f['honest_cached']:,}"),
        ("... in non-public ranges", f"{f['non_public_cached']:,}"),
        ("... ports of the victim address", f"{f['victim_cached']}"),
        ("refused by the cache, by reason", _counts(f["refused"]) or "none"),
        (
            "replaced within the attacker's share / evicted",
            f"{'-' if f['replaced'] is None else format(f['replaced'], ',')} / {f['evicted']:,}",
        ),
        (f"dial attempts in {f['seconds']:g} s after the flood", f"{f['dials']:,}"),
        ("... to non-public addresses", f"{f['dials_outside']:,} ({outside})"),
        ("... to the victim, distinct ports", f"{f['victim_ports_dialled']}"),
        ("... to hosts the attacker named", f"{f['attacker_dials']:,}"),
        (
            "GWebCache: attacker's 400 registrations accepted",
            f"{f['gwc_accepted']} (in {f['gwc_flood_seconds']:.1f} s)",
        ),
        (
            "... attacker hosts in a get=1 answer",
            f"{f['gwc_listed_attacker']} of {f['gwc_listed']}",
        ),
        ("... url=169.254.169.254 listed", "yes" if f["url_listed"] else "no"),
        (
            f"... honest clients refused during {f['idle_opened']} idle connections",
            f"{f['honest_refused']} of {GWC_HONEST}",
        ),
    ]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {count:,}" for reason, count in sorted(counts.items()))


def section(runs: Sequence[dict[str, Any]], command: str, before: str | None) -> list[str]:
    from scripts.benchdocs import commit, machine

    today = datetime.date.today().isoformat()
    table = [f"| figure | {' | '.join(run['label'] for run in runs)} |"]
    table.append("|---|" + "---:|" * len(runs))
    columns = [rows(figures_of(run)) for run in runs]
    for index, (name, _) in enumerate(columns[-1]):
        table.append(f"| {name} | {' | '.join(column[index][1] for column in columns)} |")
    before_text = (
        f" Before is revision {before}, from `git archive`, on its defaults (private "
        "addresses allowed; no shares)."
        if before
        else ""
    )
    return [
        "## Discovery under attack",
        "",
        f"`scripts/attack_discovery.py`, {today}, on {machine()}; commit {commit()}. "
        "One router and one GWebCache service at a time, on 127.0.0.1, in a process of "
        "their own. The router's dials are recorded, not made: its `server.dial` is "
        "replaced by a recorder that fails each, so no packet left loopback. After this "
        "change, the router runs with `network.local_networks = []` and the GWebCache "
        "with no trusted network, as on the internet (on loopback, the attackers would "
        f"otherwise count as the operator's own hosts).{before_text} What each attack "
        "sends is in the script's docstring.",
        "",
        *table,
        "",
        "The router wants four outgoing connections and each recorded dial fails at "
        "once, so it dials four hosts a second. After this change it takes its dials one "
        "teller at a time: with one honest teller and one attacker, each got half "
        "of them here. In 20 s neither router came to the victim's ports; the "
        "router before held all 88, each to be dialled in turn, the router after 2.",
        "",
        "Rerun (about half a minute per side):",
        "",
        "```sh",
        f".venv/bin/python scripts/attack_discovery.py {command}",
        "```",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", metavar="REV", help="attack this revision's code first")
    parser.add_argument("--write", action="store_true", help=f"write the section of {DOC}")
    parser.add_argument(
        "--seconds", type=float, default=20.0, metavar="S",
        help="seconds the router runs (and dials) after the flood (20)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=240.0, metavar="S", help="per side (240)")
    parser.add_argument("--child", choices=("before", "after"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (0 < args.seconds <= 600 and 0 < args.timeout <= 3600):
        parser.error("--seconds must be in (0, 600] and --timeout in (0, 3600]")
    if args.child:
        child(args.child, args.out, args.seconds, args.timeout)
        return 0
    from scripts.runner import stopped_like_ctrl_c

    runs: list[dict[str, Any]] = []
    try:
        with (
            stopped_like_ctrl_c(),
            tempfile.TemporaryDirectory(prefix="attack-discovery-trees-") as folder,
        ):
            if args.before:
                from scripts.router_bench.trees import export

                tree = export(args.before, Path(folder) / "before")
                label = f"before ({args.before})"
                runs.append(run_side(label, "before", tree, args.seconds, args.timeout))
            from scripts.benchdocs import commit

            label = f"after ({commit()})"
            runs.append(run_side(label, "after", ROOT, args.seconds, args.timeout))
    except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: the runs were stopped", file=sys.stderr)
        return 130
    print()
    for run in runs:
        print(run["label"])
        for name, value in rows(figures_of(run)):
            print(f"  {name}: {value}")
    if args.write:
        command = f"--before {args.before} --write" if args.before else "--write"
        from scripts.benchdocs import replace_section

        print(f"wrote {replace_section(SECTION, section(runs, command, args.before), DOC)}")
    return 0 if holds(figures_of(runs[-1])) else 1


if __name__ == "__main__":
    raise SystemExit(main())
