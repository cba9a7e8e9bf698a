"""Every process the scripts start: routers, the yardsticks, load and flood processes,
test networks; started, waited for and stopped one way, with nothing left running.

Theory of operation
-------------------
A :class:`Child` is a process with its output (stdout and stderr) in a log file of its
own, never a pipe nobody reads, and its working directory the repository root unless
told otherwise. From the moment it exists it is in a registry of live children, so that
a signal handler that must end a script at once can kill them all
(:func:`kill_live`), and every way out of its ``with`` block kills it: an exception, a
Ctrl-C while it starts (the interrupt is held back while ``fork`` and ``exec`` run, and
delivered once the child is registered), while it is waited for, or while it stops.
Stopping is SIGTERM (or another signal: a test network takes SIGINT), a grace period,
then SIGKILL; :func:`stop_all` stops several at once within one grace period. A child
that runs in a session of its own (``own_session``: Ctrl-C in the terminal reaches only
the script, which stops its children in order) is signalled as a whole process group,
so what it started goes with it. On Linux every child hears SIGHUP if the script dies
without stopping it (``die_with_parent``, on unless asked otherwise: a router, finding
itself reparented, takes it as its graceful stop; a yardstick or a load exits), so a
script killed outright, by a SIGTERM it does not catch or a SIGKILL, leaves nothing
running either.

A :class:`Server` is a child that serves on a loopback port, ready once it accepts
connections there (and on any other port named, e.g. an admin interface) or once a
probe says so; :func:`started` runs one for a ``with`` block. A :class:`Router` is a
``gnutella-router run`` server with its configuration, state directory and log in one
folder, and its profiler export read back after it stopped (:func:`router_started`).
A load or flood process that runs to its end beside a trio run is :func:`run_to_end`'s
(cancelled, it is killed).

A script that runs inside :func:`stopped_like_ctrl_c` also unwinds on SIGTERM and SIGHUP
as on Ctrl-C, stopping its children in order on the way out; :func:`leaf_exceptions`
opens the exception groups trio's nurseries wrap what went wrong in.

The command lines live here too, so that each kind of server is started the same way by
every script: :func:`router_argv` (the benchmarks' router: its console script, the
per-IP connection limit lifted), :func:`router_command` (``python -m gnutella_router
run`` with a state directory, as the experiments, the fuzzer, the attack suite and the
soak run it), :func:`reference_argv` and :func:`baseline_argv` (the two yardsticks).
Last, what the scripts read of a running process from /proc: CPU time, resident set,
the process listening on a port, and the machine's busy time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from scripts import ROOT

LOOPBACK = "127.0.0.1"
START_TIMEOUT = 20.0
"""Seconds a server has to accept connections once started."""
STOP_GRACE = 15.0
"""Seconds a child has to exit after SIGTERM before it is killed."""


class RunError(Exception):
    """A run could not be made: a process did not start or exited early, a run went
    wrong; the message says why."""


# --------------------------------------------------------------------------- ways out


def _as_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP become SIGINT: inside trio, trio turns that into a
    KeyboardInterrupt at a safe point; outside, Python raises it at once. Either way the
    run unwinds like a Ctrl-C and its children are stopped on the way out."""
    os.kill(os.getpid(), signal.SIGINT)


@contextlib.contextmanager
def stopped_like_ctrl_c() -> Iterator[None]:
    """For the block, Ctrl-C raises KeyboardInterrupt even when the script was started
    with SIGINT ignored (as a shell starts a background job), and SIGTERM and SIGHUP do
    what it does; the script's own handlers come back after it."""
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    previous.update({s: signal.signal(s, _as_ctrl_c) for s in (signal.SIGTERM, signal.SIGHUP)})
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def leaf_exceptions(error: BaseException) -> list[BaseException]:
    """The exceptions in ``error``, its nested groups (trio's nurseries make them)
    opened; ``[error]`` when it is not a group."""
    if not isinstance(error, BaseExceptionGroup):
        return [error]
    return [leaf for exc in error.exceptions for leaf in leaf_exceptions(exc)]


# --------------------------------------------------------------------------- children

_LIVE: set[Child] = set()
"""Children started and not yet closed, for :func:`kill_live`."""


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back for the block and deliver them, to the
    handlers the script had, as it ends.

    A KeyboardInterrupt raised inside :class:`subprocess.Popen` could leave its child
    running with no one holding it to stop it. Blocking the signals instead would not
    do: a child inherits the blocked mask through exec, and a router would ignore our
    SIGTERM; a handler that only takes note is reset to the default in the child. Only
    the main thread can set handlers: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    signums = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {s: signal.signal(s, lambda signum, frame: arrived.append(signum)) for s in signums}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    for number in dict.fromkeys(arrived):
        signal.raise_signal(number)


class Child:
    """A process this script started, its output in ``log_path``; see the module's
    docstring for how it is stopped and killed."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path = ROOT,
        own_session: bool = False,
        die_with_parent: bool = True,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.own_session = own_session
        self.exit_status: int | None = None
        """Once it stopped: its exit status (None while it runs, or when it was killed)."""
        self.killed = False
        """Whether it was killed rather than left to exit."""
        prepare = None
        if die_with_parent:
            from gnutella_router.lab.testnet.process import parent_death_signal

            prepare = parent_death_signal()
        try:
            with interrupts_deferred(), log_path.open("wb") as log:
                self.process = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=cwd,
                    env={**os.environ, **env} if env else None,
                    start_new_session=own_session,
                    preexec_fn=prepare,
                )
                _LIVE.add(self)
        except BaseException:
            if hasattr(self, "process"):
                self.close()
            raise
        self.pid = self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, signum: int) -> None:
        """Send ``signum`` to the child, or to its whole group when it has a session of
        its own; nothing if it is gone."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            if self.own_session:
                os.killpg(self.pid, signum)
            else:
                self.process.send_signal(signum)

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``ready`` until it says yes; :class:`RunError` (with the log's tail) when
        the child exits first or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RunError(f"{self.name} exited with {self.process.returncode}{self.tail()}")
            if ready():
                return
            if time.monotonic() > deadline:
                raise RunError(f"{self.name} did not {what} within {timeout:g} s{self.tail()}")
            time.sleep(0.05)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to exit by itself (a load, a test network run); its exit status.
        ``subprocess.TimeoutExpired`` after ``timeout`` seconds, the child still running."""
        self.exit_status = self.process.wait(timeout)
        return self.exit_status

    def stop(self, grace: float = STOP_GRACE, signum: int = signal.SIGTERM) -> int | None:
        """``signum``, then SIGKILL after ``grace`` seconds; the exit status (None if it
        had to be killed). An interrupt while waiting kills it before going on."""
        if self.process.poll() is None:
            self.send(signum)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
            except BaseException:
                self.kill()
                raise
        self.exit_status = self.process.returncode
        return self.exit_status

    def kill(self) -> None:
        """SIGKILL (to its group, with a session of its own) and reap it."""
        if self.process.poll() is None:
            self.send(signal.SIGKILL)
            self.killed = True
        status = self.process.wait()
        if not self.killed:
            self.exit_status = status

    def close(self) -> None:
        """Kill it if it still runs; it leaves the registry of live children."""
        self.kill()
        _LIVE.discard(self)

    def tail(self, lines: int = 5) -> str:
        """The last lines of its log, as text to append to a message (or nothing)."""
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
            if text:
                return ":\n    " + "\n    ".join(text)
        return ""


def kill_live() -> list[int]:
    """SIGKILL every child still running and reap it; their process ids. For a signal
    handler that must end a script at once, wherever it is (an exception raised in a
    handler could land inside trio's own bookkeeping rather than unwind the ``with``
    blocks that stop the children)."""
    killed = []
    for child in list(_LIVE):
        if child.process.poll() is None:
            child.kill()
            killed.append(child.pid)
        _LIVE.discard(child)
    return killed


def stop_all(children: Iterable[Child], grace: float = STOP_GRACE) -> None:
    """SIGTERM to every child still running, up to ``grace`` seconds for all of them to
    exit, then SIGKILL to the rest; each one's ``exit_status`` and ``killed`` say how it
    ended. An interruption while waiting kills the rest at once before it goes on."""
    running = [child for child in children if child.alive()]
    try:
        for child in running:
            child.send(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in running:
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
    finally:
        for child in running:
            child.close()


async def run_to_end(argv: Sequence[str], what: str) -> str:
    """Run a process (a load or flood process) to its end from trio, its working
    directory the repository root; its standard output. Cancelled, it is terminated and
    then killed (trio's way); :class:`RunError` when it exits with a status other than
    0."""
    done = await trio.run_process(list(argv), capture_stdout=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RunError(f"{what} failed (exit status {done.returncode})")
    return done.stdout.decode()


class Server(Child):
    """A child serving on a loopback ``port``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        port: int,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(name, argv, log_path, env=env, **options)
        self.port = port
        self.address = (LOOPBACK, port)

    def wait_until_accepting(
        self, timeout: float = START_TIMEOUT, also: Sequence[int] = ()
    ) -> None:
        """Return once it accepts TCP connections on its port and on each of ``also``."""
        ports = (self.port, *also)
        self.wait_until(lambda: accepting(ports), timeout, "accept")


def accepting(ports: Iterable[int]) -> bool:
    """Whether something accepts TCP connections on each loopback port."""
    try:
        for port in ports:
            socket.create_connection((LOOPBACK, port), 1).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def started(
    name: str,
    argv: Sequence[str],
    port: int,
    workdir: Path,
    env: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """A server running for the ``with`` block, its log ``workdir/NAME-PORT.log``; ``env``
    adds to this process's environment. The block's end kills it if it still runs (a
    benchmark stops it first, judging its exit status: ``router_bench.servers``)."""
    server = Server(name, argv, port, workdir / f"{name}-{port}.log", env)
    try:
        server.wait_until_accepting()
        yield server
    finally:
        server.close()


# --------------------------------------------------------------------------- routers


class Router(Server):
    """A ``gnutella-router run`` child whose configuration (``router.toml``), state
    directory (``state/``) and log (``router.log``) are in one folder."""

    def __init__(
        self, workdir: Path, port: int, admin_port: int | None, argv: Sequence[str], **options: Any
    ) -> None:
        super().__init__("router", argv, port, workdir / "router.log", **options)
        self.workdir = workdir
        self.state = workdir / "state"
        self.admin_port = admin_port
        self.admin = (LOOPBACK, admin_port if admin_port is not None else port + 1)

    def profile(self) -> dict[str, Any]:
        """Its profiler's export (written as it stops): :class:`RunError` when there is
        none."""
        path = self.state / "profile.json"
        if not path.exists():
            raise RunError(f"no profiler export (router exit status {self.exit_status})")
        data: dict[str, Any] = json.loads(path.read_text())
        return data


def router_command(state_dir: Path, *arguments: str) -> list[str]:
    """``gnutella-router run`` with this interpreter (so the same installation), its state
    in ``state_dir``, and ``arguments``."""
    return [
        sys.executable,
        "-m",
        "gnutella_router",
        "run",
        "--state-dir",
        str(state_dir),
        *arguments,
    ]


@contextlib.contextmanager
def router_started(
    workdir: Path,
    config: str,
    *,
    port: int | None = None,
    admin_port: int | None = None,
    arguments: Sequence[str] = (),
    wait_for_admin: bool = False,
    grace: float = STOP_GRACE,
    **options: Any,
) -> Iterator[Router]:
    """A router for the ``with`` block: ``config`` as ``workdir/router.toml`` (``workdir``
    made if need be, its ``state`` folder fresh), listening on ``port`` (a free one by
    default), with ``arguments`` after its own; ready once it accepts there (and on
    ``admin_port`` with ``wait_for_admin``). The block's end stops it with SIGTERM (which
    writes its profiler export) and kills it after ``grace`` seconds; its
    ``exit_status`` then says how it went. ``options`` go to :class:`Child` (``env``,
    ``cwd``, ``own_session``, ``die_with_parent``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "state").mkdir()
    (workdir / "router.toml").write_text(config)
    port = free_port() if port is None else port
    argv = router_command(
        workdir / "state",
        "--config",
        str(workdir / "router.toml"),
        "--listen",
        f"{LOOPBACK}:{port}",
        *arguments,
    )
    env = {"PYTHONUNBUFFERED": "1", **(options.pop("env", None) or {})}
    router = Router(workdir, port, admin_port, argv, env=env, **options)
    try:
        router.wait_until_accepting(
            also=(admin_port,) if wait_for_admin and admin_port is not None else ()
        )
        yield router
    finally:
        try:
            router.stop(grace)
        finally:
            router.close()


def router_argv(
    port: int,
    state_dir: Path,
    max_connections: int | None,
    extra: Sequence[str] = (),
    network: str = "",
    tables: str = "",
) -> list[str]:
    """The benchmarks' router command line; ``network`` adds lines to its ``[network]``
    table, ``tables`` other tables after it. The benchmark's peers are on loopback, a
    trusted network by default, so neither the per-address slot limit nor the per-peer
    query rate (``router.peer_query_rate``) applies to a flood from one source."""
    config = state_dir / f"bench-{port}.toml"
    config.write_text(f"[network]\nconnects_per_ip_per_minute = 100000\n{network}{tables}")
    executable = Path(sys.executable).parent / "gnutella-router"
    command = (
        [str(executable)] if executable.exists() else [sys.executable, "-m", "gnutella_router"]
    )
    argv = [
        *command,
        "run",
        "--listen",
        f"{LOOPBACK}:{port}",
        "--log-level",
        "warning",
        "--state-dir",
        str(state_dir),
        "--config",
        str(config),
    ]
    if max_connections is not None:
        argv += ["--max-connections", str(max_connections)]
    return [*argv, *extra]


def baseline_argv(port: int) -> list[str]:
    """The plain forwarder (``scripts/baseline_forwarder.py``)."""
    script = ROOT / "scripts" / "baseline_forwarder.py"
    return [sys.executable, str(script), "--listen", f"{LOOPBACK}:{port}"]


def reference_argv(port: int, writes: str = "per-read") -> list[str]:
    """The naive router (``scripts/reference_router.py``), writing ``per-read`` or
    ``per-message``."""
    script = ROOT / "scripts" / "reference_router.py"
    return [sys.executable, str(script), "--listen", f"{LOOPBACK}:{port}", "--writes", writes]


# --------------------------------------------------------------------------- ports


def free_port() -> int:
    """A loopback port for a server, with the next one free too (a router's default
    admin port)."""
    from gnutella_router.lab.testnet.servents import free_router_port  # the daemon, imported

    return free_router_port()


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports: all held open while they are picked, so that no two
    are the same (picking them one after another can give the same port twice)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind((LOOPBACK, 0))
        return [int(probe.getsockname()[1]) for probe in probes]


# --------------------------------------------------------------------------- /proc


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of a process, from /proc/PID/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy (not idle or waiting), from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """A process's resident set (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RunError(f"no VmRSS for process {pid}")


def listener_pid(port: int) -> int | None:
    """The process listening on a loopback TCP port, if it is visible to us."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(parts[9])
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(proc.name)
    return None
