"""Network namespaces for a test network: an address per node on a private bridge.

Theory of operation
-------------------
On loopback every node is 127.0.0.1, so pongs, ``X-Try-Ultrapeers`` and host caches
carry one address and differ only in ports, which is not how an overlay looks. With
``--netns`` (Linux, root) each node runs in a network namespace of its own:

* a bridge ``grtXXXXbr`` in the controller's namespace holds the run's private IPv4
  /16 (chosen among 10.64.0.0/10 so as not to clash with any address already on the
  machine); the bridge has the first address, ``.0.1``, so the controller (its
  GWebCache and load client) reaches every node, and nothing routes beyond the /16:
  namespaces get no default route, so their traffic stays on the bridge;
* node i gets namespace ``grtXXXX-n<i>`` with loopback up and one end of a veth pair
  (``grtXXXXh<i>`` on the bridge, ``eth0`` inside) addressed ``.<(i+2)//256>.<(i+2)%256>``,
  so every node listens on the same port at an address of its own, as hosts do;
* neighbour (ARP) entries are written ahead, permanent: the bridge's for every node, and
  each node's for the bridge and for the hosts it is planned to talk to (``pairs``: its
  planned peers, and the servents linked with it).

Every address's link-layer address is fixed in advance, drawn from the run's id and the
node's index (:meth:`NamespaceNetwork.mac`), so that those entries can be written before
anyone speaks. The kernel keeps one neighbour table for every namespace of the machine
and drops new entries past ``net.ipv4.neigh.default.gc_thresh3`` (1024 by default),
which 200 nodes that each resolve the bridge and a few peers, plus the bridge resolving
200 nodes, would pass: connects then fail for want of an address ("neighbor table
overflow"), and a thousand nodes would fail at once. Permanent entries are not counted
against that limit (Linux 4.20 and later) and go with the namespaces and the bridge, so
nothing is changed on the machine; any other peer is still resolved the usual way.

``XXXX`` is four hex digits drawn per run: two runs on one machine do not collide, and
everything a run made carries its prefix, so :func:`remove_leftovers` (``testnet
--cleanup``) can find what a run killed with ``kill -9`` left behind, and nothing else.
The bridge's alias names the controller's pid (:func:`owner`); a run whose controller
still runs is no leftover, and ``--cleanup`` leaves it alone (several runs may share a
machine).
:meth:`NamespaceNetwork.remove` deletes the namespaces (which takes their veths) and
the bridge; it is called on every exit path of a run, and it stops first any process
still inside one of the run's namespaces or holding one open (a process that runs
several routers opens their sockets in their namespaces from its own:
:mod:`gnutella_router.net.namespace_sockets`), found by reading ``/proc``.

All of it is done with ``ip`` from iproute2, in batches (``ip -batch``: one process for
all the links, one per namespace for its inside, one for all the deletions), so that a
thousand nodes are set up and taken down in seconds; the commands a run issues are kept
in order (:attr:`NamespaceNetwork.commands`) for the log. A Linux bridge takes at most
:data:`MAX_BRIDGE_PORTS` ports, so a run has at most that many nodes and servents.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

PREFIX = "grt"
NAME_PATTERN = re.compile(r"^grt[0-9a-f]{4}(?:br|h\d+|-n\d+)$")
"""Every bridge, veth and namespace name a run makes, and no other."""
POOL = ipaddress.IPv4Network("10.64.0.0/10")
INNER_INTERFACE = "eth0"
IP_TIMEOUT = 20.0
VETH_GONE_SECONDS = 20.0
"""Longest wait for the kernel to take a deleted namespace's veth with it."""
NETNS_DIRECTORY = Path("/run/netns")
OWNER_ALIAS = "gnutella-router testnet, controller pid "
"""The start of the alias of a run's bridge; the controller's pid follows."""
PREFIX_LENGTH = len(PREFIX) + 4
"""``grtXXXX``: the part of a name that says which run it belongs to."""
MAX_BRIDGE_PORTS = 1023
"""A Linux bridge takes at most 1023 ports (port numbers are 10 bits, 0 is reserved):
one run's nodes and servents together, each with a veth on the run's bridge."""


class NamespaceError(Exception):
    """Namespaces cannot be used here or an ``ip`` command failed; the message says why."""


def check_available() -> None:
    """Raise :class:`NamespaceError` with one plain sentence unless namespaces can be made."""
    if not sys.platform.startswith("linux"):
        raise NamespaceError("--netns needs Linux network namespaces")
    if os.geteuid() != 0:
        raise NamespaceError("--netns needs root (it creates network namespaces and a bridge)")
    if shutil.which("ip") is None:
        raise NamespaceError("--netns needs the ip command from iproute2")


def _ip(*arguments: str, check: bool = True) -> str:
    try:
        done = subprocess.run(
            ["ip", *arguments], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NamespaceError(f"ip {' '.join(arguments)}: {exc}") from exc
    if check and done.returncode != 0:
        raise NamespaceError(f"ip {' '.join(arguments)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _ip_batch(lines: Sequence[str], where: Sequence[str] = (), *, force: bool = False) -> None:
    """Several ``ip`` commands in one process (``ip -batch``); ``where`` goes before
    them (``("-n", NAME)``: inside a namespace); ``force`` goes on past failures."""
    if not lines:
        return
    arguments = ["ip", *where, *(["-force"] if force else []), "-batch", "-"]
    try:
        done = subprocess.run(
            arguments,
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            timeout=IP_TIMEOUT + len(lines) * 0.05,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NamespaceError(f"{' '.join(arguments)}: {exc}") from exc
    if done.returncode != 0 and not force:
        raise NamespaceError(f"{' '.join(arguments)}: {done.stderr.strip() or done.returncode}")


def _run_links() -> list[str]:
    """Links named as runs name theirs."""
    links = []
    for line in _ip("-o", "link", "show", check=False).splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            name = parts[1].strip().split("@")[0]
            if NAME_PATTERN.match(name):
                links.append(name)
    return links


def _used_networks() -> list[ipaddress.IPv4Network]:
    used = []
    for line in _ip("-o", "-4", "addr", "show").splitlines():
        match = re.search(r"\binet (\S+)", line)
        if match:
            used.append(ipaddress.IPv4Interface(match.group(1)).network)
    return used


def choose_subnet(used: Sequence[ipaddress.IPv4Network], start: int) -> ipaddress.IPv4Network:
    """A /16 of :data:`POOL` that overlaps none of ``used``, looking from ``start`` on."""
    candidates = list(POOL.subnets(new_prefix=16))
    for step in range(len(candidates)):
        subnet = candidates[(start + step) % len(candidates)]
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise NamespaceError(f"every /16 of {POOL} is in use on this machine")


class NamespaceNetwork:
    """One run's bridge and namespaces; see the module docstring."""

    def __init__(
        self,
        nodes: int,
        *,
        run_id: str | None = None,
        pairs: Iterable[tuple[int, int]] = (),
        after_create: Callable[[NamespaceNetwork], None] | None = None,
    ) -> None:
        """``pairs`` are the hosts (by index) that will talk to each other: both get
        permanent neighbour entries for the other (see :meth:`create`). ``after_create``
        is called at the end of :meth:`create` (to put qdiscs into the namespaces, say)."""
        if not 1 <= nodes <= MAX_BRIDGE_PORTS:
            raise NamespaceError(
                f"--netns takes 1 to {MAX_BRIDGE_PORTS} nodes and servents in all (a Linux "
                f"bridge has at most {MAX_BRIDGE_PORTS} ports), not {nodes}"
            )
        self.nodes = nodes
        self.peers: dict[int, set[int]] = {}
        """For each node, the nodes it will talk to (both ways of each pair)."""
        for a, b in pairs:
            if not (0 <= a < nodes and 0 <= b < nodes):
                raise NamespaceError(f"a pair of nodes outside 0..{nodes - 1}: {a}, {b}")
            if a != b:
                self.peers.setdefault(a, set()).add(b)
                self.peers.setdefault(b, set()).add(a)
        self.run_id = run_id or secrets.token_hex(2)
        self.prefix = f"{PREFIX}{self.run_id}"
        self.bridge = f"{self.prefix}br"
        self.after_create = after_create
        self.subnet: ipaddress.IPv4Network | None = None
        self.created: list[str] = []
        """Namespaces made so far (removed even when setting up failed half way)."""
        self.bridge_made = False
        self.commands: list[str] = []

    def namespace(self, index: int) -> str:
        return f"{self.prefix}-n{index}"

    def host_interface(self, index: int) -> str:
        return f"{self.prefix}h{index}"

    @property
    def gateway(self) -> str:
        """The bridge's address: where the controller's services listen for the nodes."""
        return str(self._subnet()[1])

    def address(self, index: int) -> str:
        """Node ``index``'s address."""
        return str(self._subnet()[index + 2])

    def mac(self, index: int | None) -> str:
        """The link-layer address of node ``index``'s ``eth0`` (None: the bridge's):
        locally administered, and unique to the run and the node, so that neighbour
        entries can be written ahead."""
        run = int(self.run_id, 16)
        host = 0xFFFF if index is None else index
        return ":".join(
            f"{b:02x}" for b in (0x02, 0x67, run >> 8, run & 0xFF, host >> 8, host & 0xFF)
        )

    def exec_prefix(self, index: int) -> tuple[str, ...]:
        """Put before a command to run it in node ``index``'s namespace."""
        return ("ip", "netns", "exec", self.namespace(index))

    def _subnet(self) -> ipaddress.IPv4Network:
        if self.subnet is None:
            raise NamespaceError("the namespaces are not set up")
        return self.subnet

    def _run(self, *arguments: str) -> str:
        self.commands.append("ip " + " ".join(arguments))
        return _ip(*arguments)

    def create(self) -> None:
        """Make the bridge and every node's namespace and veth, addressed and up.

        The links are made by one ``ip -batch`` and each namespace's inside by one more
        (``ip -n NAME -batch``): a thousand nodes take a few seconds, where a command
        each took minutes.

        Raises:
            NamespaceError: an ``ip`` command failed; what was made is still recorded,
                so :meth:`remove` takes it away.
        """
        check_available()
        self.subnet = choose_subnet(_used_networks(), int(self.run_id, 16))
        length = self.subnet.prefixlen
        self._run("link", "add", self.bridge, "address", self.mac(None), "type", "bridge")
        self.bridge_made = True
        self._run("link", "set", self.bridge, "alias", f"{OWNER_ALIAS}{os.getpid()}")
        self._run("addr", "add", f"{self.gateway}/{length}", "dev", self.bridge)
        self._run("link", "set", self.bridge, "up")
        # Recorded before they are made: a batch that fails half way leaves some.
        self.created = [self.namespace(index) for index in range(self.nodes)]
        outside = []
        for index in range(self.nodes):
            namespace, veth = self.namespace(index), self.host_interface(index)
            outside += [
                f"netns add {namespace}",
                f"link add {veth} type veth peer name {INNER_INTERFACE} "
                f"address {self.mac(index)} netns {namespace}",
                f"link set {veth} master {self.bridge} up",
                f"neigh replace {self.address(index)} lladdr {self.mac(index)} "
                f"dev {self.bridge} nud permanent",
            ]
        self._batch(outside)
        gateway = f"neigh replace {self.gateway} lladdr {self.mac(None)}"
        for index in range(self.nodes):
            inside = [
                "link set lo up",
                f"addr add {self.address(index)}/{length} dev {INNER_INTERFACE}",
                f"link set {INNER_INTERFACE} up",
                f"{gateway} dev {INNER_INTERFACE} nud permanent",
                *(
                    f"neigh replace {self.address(other)} lladdr "
                    f"{self.mac(other)} dev {INNER_INTERFACE} nud permanent"
                    for other in sorted(self.peers.get(index, ()))
                ),
            ]
            self._batch(inside, namespace=self.namespace(index))
        if self.after_create is not None:
            self.after_create(self)

    def _batch(self, lines: Sequence[str], *, namespace: str | None = None) -> None:
        where = () if namespace is None else ("-n", namespace)
        for line in lines:
            self.commands.append(" ".join(("ip", *where, line)))
        _ip_batch(lines, where)

    def remove(self) -> list[str]:
        """Stop what still runs in the namespaces, then delete them and the bridge;
        problems met on the way (each a sentence), never an exception."""
        problems = _remove_namespaces(list(reversed(self.created)))
        self.created.clear()
        if self.bridge_made:
            with contextlib.suppress(NamespaceError):
                _ip("link", "del", self.bridge, check=False)
            if _link_exists(self.bridge):
                problems.append(f"bridge {self.bridge} could not be deleted")
            self.bridge_made = False
        return problems


def _link_exists(name: str) -> bool:
    try:
        return bool(_ip("-o", "link", "show", "dev", name, check=False).strip())
    except NamespaceError:
        return False


def _remove_namespaces(namespaces: Sequence[str], grace: float = 3.0) -> list[str]:
    """Stop the processes inside the namespaces or holding them open (SIGTERM, then
    SIGKILL), delete the namespaces, and wait until their veths are gone; the problems
    met, each a sentence."""
    if not namespaces:
        return []
    problems: list[str] = []
    pids = sorted(processes_in(namespaces))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            time.sleep(0.05)
        if not pids:
            break
    problems += [f"process {pid} in a test network namespace did not stop" for pid in pids]
    try:
        _ip_batch([f"netns del {namespace}" for namespace in namespaces], force=True)
    except NamespaceError as exc:
        problems.append(str(exc))
    # A deleted namespace takes its veths with it, a moment later, from a kernel work
    # queue that handles many namespaces at once (a thousand in about a second, where
    # deleting the veths one by one takes a minute): wait for that, then delete what
    # is still there, so that nothing is left when this returns.
    veths = {veth for namespace in namespaces if (veth := _veth_of(namespace)) is not None}
    deadline = time.monotonic() + VETH_GONE_SECONDS
    left = veths & set(_run_links())
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left &= set(_run_links())
    if left:
        with contextlib.suppress(NamespaceError):
            _ip_batch([f"link del {veth}" for veth in sorted(left)], force=True)
        left &= set(_run_links())
    problems += [f"veth {veth} could not be deleted" for veth in sorted(left)]
    still = set(namespaces) & set(list_namespaces())
    problems += [f"namespace {namespace} could not be deleted" for namespace in sorted(still)]
    return problems


def _veth_of(namespace: str) -> str | None:
    """The host side of a namespace's veth, by the names runs give them."""
    prefix, separator, index = namespace.rpartition("-n")
    return f"{prefix}h{index}" if separator and index.isdigit() else None


def processes_in(namespaces: Sequence[str]) -> set[int]:
    """Processes in any of ``namespaces``, or holding one open (a process that runs
    several routers makes their sockets in their namespaces, from its own, and keeps
    each namespace open: :mod:`gnutella_router.net.namespace_sockets`)."""
    wanted: set[tuple[int, int]] = set()
    for namespace in namespaces:
        with contextlib.suppress(OSError):
            found = os.stat(NETNS_DIRECTORY / namespace)
            wanted.add((found.st_dev, found.st_ino))
    holders: set[int] = set()
    if not wanted:
        return holders
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        with contextlib.suppress(OSError):  # gone, or not ours to read
            if _same_file(entry / "ns" / "net", wanted) or any(
                _same_file(descriptor, wanted)
                for descriptor in (entry / "fd").iterdir()
                if _may_be_namespace(descriptor)
            ):
                holders.add(int(entry.name))
    return holders


def _may_be_namespace(descriptor: Path) -> bool:
    """Whether an open file may be a network namespace (read off its link, which is
    cheap, before the file itself is looked at)."""
    try:
        target = os.readlink(descriptor)
    except OSError:
        return False
    return target.startswith(("net:[", str(NETNS_DIRECTORY)))


def _same_file(path: Path, wanted: set[tuple[int, int]]) -> bool:
    try:
        found = os.stat(path)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) in wanted


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    return True


def list_namespaces() -> list[str]:
    """Names of the network namespaces on this machine."""
    return [line.split()[0] for line in _ip("netns", "list", check=False).splitlines() if line]


def list_leftovers() -> tuple[list[str], list[str]]:
    """Namespaces and links of test network runs (by their names), still here."""
    namespaces = [n for n in list_namespaces() if NAME_PATTERN.match(n)]
    return namespaces, _run_links()


def owner(prefix: str) -> int | None:
    """The pid of the controller of the run named ``prefix`` (``grtXXXX``), from its
    bridge's alias; None when the bridge or the alias is gone."""
    try:
        alias = Path(f"/sys/class/net/{prefix}br/ifalias").read_text().strip()
    except OSError:
        return None
    pid = alias.removeprefix(OWNER_ALIAS)
    return int(pid) if alias.startswith(OWNER_ALIAS) and pid.isdigit() else None


def remove_leftovers() -> tuple[list[str], list[str], list[str]]:
    """Remove what killed runs left: their namespaces (and the processes in them), then
    their bridges and veths; what was removed, the problems met, and the runs left
    alone because their controller still runs (:func:`running_runs`).

    Raises:
        NamespaceError: namespaces cannot be handled here (see :func:`check_available`).
    """
    check_available()
    namespaces, links = list_leftovers()
    live = running_runs(namespaces + links)
    kept = [f"run {prefix} (its controller, pid {pid}, still runs)" for prefix, pid in live.items()]
    namespaces = [n for n in namespaces if _run_prefix(n) not in live]
    links = [link for link in links if _run_prefix(link) not in live]
    removed: list[str] = []
    problems: list[str] = []
    problems += _remove_namespaces(namespaces)
    removed += [f"namespace {n}" for n in namespaces if not any(n in p for p in problems)]
    for link in links:
        if _link_exists(link):  # a veth went with its namespace
            _ip("link", "del", link, check=False)
            if _link_exists(link):
                problems.append(f"link {link} could not be deleted")
                continue
        removed.append(f"link {link}")
    return removed, problems, kept


def abandoned_leftovers() -> list[str]:
    """Namespaces and links of runs that are over: neither with a controller still
    running (:func:`running_runs`) nor with a process in or holding one of their
    namespaces (a run of an older version goes on beside us, say). What a check that a
    run left nothing behind looks at, on a machine where other runs may be going."""
    namespaces, links = list_leftovers()
    live = running_runs(namespaces + links)
    runs: dict[str, list[str]] = {}
    for name in namespaces + links:
        if _run_prefix(name) not in live:
            runs.setdefault(_run_prefix(name), []).append(name)
    left = []
    for found in runs.values():
        spaces = [name for name in found if "-n" in name]
        if spaces and processes_in(spaces):
            continue
        left += sorted(found)
    return left


def _run_prefix(name: str) -> str:
    """``grtXXXX``: the run a namespace or link belongs to."""
    return name[:PREFIX_LENGTH]


def running_runs(names: Iterable[str]) -> dict[str, int]:
    """The runs among those ``names`` belong to whose controller is alive, by prefix,
    with its pid: their namespaces are in use (by a run going on beside a ``--cleanup``,
    say), not left behind. This very process is no other run: what it made and still
    has is its own to answer for."""
    live = {}
    for prefix in {_run_prefix(name) for name in names}:
        pid = owner(prefix)
        if pid is not None and pid != os.getpid() and _alive(pid):
            live[prefix] = pid
    return live
