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
  so every node listens on the same port at an address of its own, as hosts do.

Every address's link-layer address is fixed in advance (:meth:`NamespaceNetwork.mac`),
so the run writes the neighbour entries its hosts need as permanent ones: each node
knows the bridge's address and its planned peers' (``pairs``), and the bridge knows
every node's. The kernel keeps one ARP table for every namespace of the machine and
drops new entries past ``net.ipv4.neigh.default.gc_thresh3`` (1024 by default), which
200 nodes that each resolve the bridge and a few peers, plus the bridge resolving 200
nodes, would pass: connects then fail for want of an address ("neighbor table
overflow"). Permanent entries are not counted against that limit (Linux 4.20 and
later) and go with the namespaces and the bridge, so nothing is changed on the
machine; any other peer is still resolved the usual way.

``XXXX`` is four hex digits drawn per run: two runs on one machine do not collide, and
everything a run made carries its prefix, so :func:`remove_leftovers` (``testnet
--cleanup``) can find what a run killed with ``kill -9`` left behind, and nothing else.
The bridge's alias names the controller's pid; a run whose controller still runs is
no leftover, and ``--cleanup`` leaves it alone (several runs may share a machine).
:meth:`NamespaceNetwork.remove` deletes the namespaces (which takes their veths) and
the bridge; it is called on every exit path of a run, and it stops first any process
still inside one of the run's namespaces.

All of it is done with ``ip`` from iproute2; the commands a run issues are kept in
order (:attr:`NamespaceNetwork.commands`) for the log.
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
from collections.abc import Iterable, Sequence
from pathlib import Path

PREFIX = "grt"
NAME_PATTERN = re.compile(r"^grt[0-9a-f]{4}(?:br|h\d+|-n\d+)$")
"""Every bridge, veth and namespace name a run makes, and no other."""
POOL = ipaddress.IPv4Network("10.64.0.0/10")
MAX_NODES = 65_000
INNER_INTERFACE = "eth0"
IP_TIMEOUT = 20.0
OWNER_ALIAS = "gnutella-router testnet, controller pid "
"""The start of the alias of a run's bridge; the controller's pid follows."""
PREFIX_LENGTH = len(PREFIX) + 4


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


def _ip(*arguments: str, check: bool = True, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(
            ["ip", *arguments],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=IP_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NamespaceError(f"ip {' '.join(arguments)}: {exc}") from exc
    if check and done.returncode != 0:
        raise NamespaceError(f"ip {' '.join(arguments)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


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
        self, nodes: int, *, run_id: str | None = None, pairs: Iterable[tuple[int, int]] = ()
    ) -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise NamespaceError(f"--netns takes 1 to {MAX_NODES} nodes")
        self.nodes = nodes
        self.peers: dict[int, set[int]] = {}
        """For each node, the nodes it will talk to (both ways of each pair)."""
        for a, b in pairs:
            if not (0 <= a < nodes and 0 <= b < nodes):
                raise NamespaceError(f"a pair of nodes outside 0..{nodes - 1}: {a}, {b}")
            self.peers.setdefault(a, set()).add(b)
            self.peers.setdefault(b, set()).add(a)
        self.run_id = run_id or secrets.token_hex(2)
        self.prefix = f"{PREFIX}{self.run_id}"
        self.bridge = f"{self.prefix}br"
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
        locally administered, and unique to the run and the node."""
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
        for index in range(self.nodes):
            namespace, outside = self.namespace(index), self.host_interface(index)
            self._run("netns", "add", namespace)
            self.created.append(namespace)
            self._run(
                "link", "add", outside, "type", "veth",
                "peer", "name", INNER_INTERFACE, "address", self.mac(index), "netns", namespace,
            )  # fmt: skip
            self._run("link", "set", outside, "master", self.bridge, "up")
            self._run("-n", namespace, "link", "set", "lo", "up")
            self._run(
                "-n", namespace, "addr", "add", f"{self.address(index)}/{length}",
                "dev", INNER_INTERFACE,
            )  # fmt: skip
            self._run("-n", namespace, "link", "set", INNER_INTERFACE, "up")
        self._add_neighbours()

    def _add_neighbours(self) -> None:
        """The permanent neighbour entries of the module docstring: one ``ip -batch`` on
        the bridge's side, one in each namespace."""
        entry = "neigh replace {} lladdr {} dev {} nud permanent"
        bridge_side = [
            entry.format(self.address(i), self.mac(i), self.bridge) for i in range(self.nodes)
        ]
        self._batch(None, bridge_side)
        for index in range(self.nodes):
            lines = [entry.format(self.gateway, self.mac(None), INNER_INTERFACE)]
            lines += [
                entry.format(self.address(peer), self.mac(peer), INNER_INTERFACE)
                for peer in sorted(self.peers.get(index, ()))
            ]
            self._batch(self.namespace(index), lines)

    def _batch(self, namespace: str | None, lines: Sequence[str]) -> None:
        where = () if namespace is None else ("-n", namespace)
        self.commands.extend(" ".join(("ip", *where, line)) for line in lines)
        _ip(*where, "-batch", "-", stdin="\n".join(lines) + "\n")

    def remove(self) -> list[str]:
        """Stop what still runs in the namespaces, then delete them and the bridge;
        problems met on the way (each a sentence), never an exception."""
        problems = []
        for namespace in reversed(self.created):
            problems += _remove_namespace(namespace)
            # A namespace's veths go with it, but later, from a kernel work queue: the
            # host side is deleted now so that nothing is left when this returns.
            index = int(namespace.rsplit("-n", 1)[1])
            with contextlib.suppress(NamespaceError):
                _ip("link", "del", self.host_interface(index), check=False)
            if _link_exists(self.host_interface(index)):
                problems.append(f"veth {self.host_interface(index)} could not be deleted")
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


def _remove_namespace(namespace: str, grace: float = 3.0) -> list[str]:
    """Stop the processes inside (SIGTERM, then SIGKILL), then delete the namespace."""
    problems = []
    try:
        pids = [int(p) for p in _ip("netns", "pids", namespace, check=False).split()]
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
        _ip("netns", "del", namespace, check=False)
        if namespace in list_namespaces():
            problems.append(f"namespace {namespace} could not be deleted")
    except NamespaceError as exc:
        problems.append(str(exc))
    return problems


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
    links = []
    for line in _ip("-o", "link", "show", check=False).splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            name = parts[1].strip().split("@")[0]
            if NAME_PATTERN.match(name):
                links.append(name)
    return namespaces, links


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
    alone because their controller still runs.

    Raises:
        NamespaceError: namespaces cannot be handled here (see :func:`check_available`).
    """
    check_available()
    namespaces, links = list_leftovers()
    live = {
        prefix: pid
        for prefix in {name[:PREFIX_LENGTH] for name in namespaces + links}
        if (pid := owner(prefix)) is not None and _alive(pid)
    }
    kept = [f"run {prefix} (its controller, pid {pid}, still runs)" for prefix, pid in live.items()]
    removed: list[str] = []
    problems: list[str] = []
    for namespace in namespaces:
        if namespace[:PREFIX_LENGTH] in live:
            continue
        trouble = _remove_namespace(namespace)
        problems += trouble
        if not trouble:
            removed.append(f"namespace {namespace}")
    for link in links:
        if link[:PREFIX_LENGTH] in live:
            continue
        if _link_exists(link):  # a veth went with its namespace
            _ip("link", "del", link, check=False)
            if _link_exists(link):
                problems.append(f"link {link} could not be deleted")
                continue
        removed.append(f"link {link}")
    return removed, problems, kept
