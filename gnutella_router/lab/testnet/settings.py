"""What a test network run is asked to do, checked before anything starts.

:class:`NetworkSettings` holds the command line's choices and refuses nonsense (a typo
in a mix, a port range that does not fit, too many nodes for the mode) in a second,
before any router starts; it also decides what ``mode="auto"`` means for a network of
that size.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from gnutella_router.lab.testnet.churn import ChurnSettings
from gnutella_router.lab.testnet.emulated_links import MAX_DELAY_MS, LinkPlan, check_bandwidth
from gnutella_router.lab.testnet.leaves import LeafSettings
from gnutella_router.lab.testnet.namespaces import MAX_BRIDGE_PORTS
from gnutella_router.lab.testnet.topology import (
    TOPOLOGIES,
    Topology,
    load_topology,
    plan_topology,
)
from traffic_models.arrival_text import parse_arrivals
from traffic_models.mix import mix_by_name_or_path

DEFAULT_RESULTS = Path(".gnutella-router") / "testnet"
MODES = ("auto", "in-process", "processes", "shared")
AUTO_PROCESSES_ABOVE = 8
"""``mode="auto"``: up to this many nodes share this process (they start in a moment);
more get a process each (each has a core to itself, as far as the machine has cores)."""
MAX_NODES = {"in-process": 500, "processes": 300, "shared": 2000}
ON_NODE_FAILURE = ("stop", "continue")
MAX_SERVENTS = 50
SERVENT_START_TIMEOUT = 60.0
"""Seconds a foreign servent gets to listen: gtk-gnutella takes several seconds to start
(it loads its caches and checks its shared files), more on a busy machine."""
STOP_TIMEOUT = 10.0
"""Seconds a node is given to stop its own way before it is killed."""
COLLECT_SECONDS_PER_NODE = 0.15
"""Added per node to the time the final collection may take: each node's route table
and dump are large pages, read 16 at a time, on a machine the routers keep busy."""
STARTING_AT_ONCE = 4
"""Child processes starting with an interpreter of their own at the same time (where
there is no fork server): Python's start-up is CPU work, and more at once only makes
each slower to listen."""
SHARED_STARTING_AT_ONCE = 16
"""Routers starting at the same time in ``shared`` mode: a router in a host process
starts in a few milliseconds, so this only keeps every host busy."""
START_TIMEOUT = 60.0
"""Longest a node process may take to listen once it is started."""


class NetworkError(Exception):
    """The network could not be started or did not form."""


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkSettings:
    nodes: int = 5
    topology: str = "random"
    degree: int = 1
    topology_file: Path | None = None
    """A planned graph read from a file (edge list or GraphML) instead of ``topology``;
    ``nodes`` must be its number of nodes."""
    traffic: str = "paper"
    """A mix name (``paper``, ``trace``, ...) or a mix file."""
    rate: float = 200.0
    arrivals: str | None = None
    """An arrival process (``poisson:500``, ...) instead of a constant ``rate``."""
    duration: float = 20.0
    """Seconds of traffic; 0 forms the network and waits for Ctrl-C."""
    seeds: tuple[str, ...] = ()
    """Servents outside the test network that every node also dials."""
    results: Path = DEFAULT_RESULTS
    base_port: int | None = None
    """Node i listens on ``base_port + i``; ``None`` lets the system pick."""
    seed: int = 1
    form_timeout: float | None = None
    """Seconds for every planned link to come up once every node has started; None: 30 s
    plus a second per 10 nodes (0.15 s a node when routers share processes)."""
    late_threshold_ms: float = 1.0
    mode: str = "auto"
    """``in-process``, ``processes``, ``shared`` (set by ``routers_per_process``), or
    ``auto`` (processes above a handful of nodes)."""
    routers_per_process: int | None = None
    """``shared`` mode: this many routers share each OS process (:mod:`.shared`)."""
    netns: bool = False
    """Every node in a network namespace of its own, with its own address (Linux, root;
    implies processes)."""
    servent: str | None = None
    """A foreign servent's command, with ``{port}``, ``{dir}`` (and ``{host}``)."""
    servents: int = 0
    """How many foreign servents to start with ``servent`` (1 when it is given alone)."""
    servent_timeout: float = SERVENT_START_TIMEOUT
    """Seconds a servent has to accept connections on its port (or it is stopped, with
    everything it started, and named)."""
    churn: ChurnSettings | None = None
    """Nodes leave and come back on a seeded schedule (implies processes)."""
    on_node_failure: str = "stop"
    """What a node process dying does to the run: ``stop`` it, or ``continue`` without it."""
    leaves: LeafSettings | None = None
    """Leaf servents of this process, attached to the ultrapeers (:mod:`.leaves`)."""
    link_delay_ms: float = 0.0
    """Every planned link's one-way delay (a topology file's own values win)."""
    link_jitter_ms: float = 0.0
    link_bandwidth_kbps: float | None = None
    """Every planned link's rate each way (needs ``netns``: tc's tbf)."""
    console: bool = False
    """Once formed, open the console (``gnutella-router console``) on the network
    instead of driving traffic; the run ends when the console is left."""
    console_script: Path | None = None
    """With ``console``: run the console's commands from this file, not a terminal."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}")
        if self.routers_per_process is not None:
            if self.routers_per_process < 1:
                raise ValueError("--routers-per-process must be 1 or more")
            if self.mode not in ("auto", "shared"):
                raise ValueError(f"--routers-per-process and --{self.mode} exclude each other")
            if self.churn is not None:
                raise ValueError("--churn is not available with --routers-per-process")
        elif self.mode == "shared":
            raise ValueError("shared mode needs --routers-per-process")
        if self.on_node_failure not in ON_NODE_FAILURE:
            raise ValueError(f"--on-node-failure must be one of {', '.join(ON_NODE_FAILURE)}")
        most = MAX_NODES[self.node_mode]
        if not 1 <= self.nodes <= most:
            raise ValueError(f"--nodes must be from 1 to {most} in {self.node_mode} mode")
        if self.topology_file is None and self.topology not in TOPOLOGIES:
            raise ValueError(f"--topology must be one of {', '.join(TOPOLOGIES)}")
        if self.degree < 0:
            raise ValueError("--degree must be 0 or more")
        if not (math.isfinite(self.duration) and self.duration >= 0):
            raise ValueError("--duration must be 0 or more seconds")
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError("--rate must be a positive number of messages/s")
        if self.base_port is not None and not (
            self.base_port >= 1 and self.base_port + self.nodes - 1 <= 65535
        ):
            raise ValueError(f"--base-port: ports {self.base_port}..+{self.nodes - 1} do not fit")
        if self.netns and self.mode == "in-process":
            raise ValueError("--netns runs every node as a process: drop --in-process")
        if self.churn is not None and self.mode == "in-process":
            raise ValueError("--churn restarts node processes: drop --in-process")
        if self.netns and self.nodes + self.servent_count > MAX_BRIDGE_PORTS:
            raise ValueError(
                f"--netns takes at most {MAX_BRIDGE_PORTS} nodes and servents in all (the "
                "ports of one Linux bridge)"
            )
        if self.netns and self.base_port is not None:
            raise ValueError(
                "--netns gives every node its own address and port 6346: drop --base-port"
            )
        if self.servents and not self.servent:
            raise ValueError("--servents needs --servent 'COMMAND with {port} and {dir}'")
        if not 0 <= self.servents <= MAX_SERVENTS:
            raise ValueError(f"--servents must be from 0 to {MAX_SERVENTS}")
        if self.servent is not None and "{port}" not in self.servent:
            raise ValueError("--servent: the command must take {port}, where it listens")
        if not (math.isfinite(self.servent_timeout) and self.servent_timeout > 0):
            raise ValueError("--servent-timeout must be a positive number of seconds")
        if self.console_script is not None and not self.console:
            raise ValueError("a console script needs the console")
        if self.form_timeout is not None and self.form_timeout <= 0:
            raise ValueError("the formation timeout must be positive")
        for name in ("link_delay_ms", "link_jitter_ms"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= MAX_DELAY_MS):
                raise ValueError(f"--link-delay: milliseconds from 0 to {MAX_DELAY_MS:g}")
        if self.link_bandwidth_kbps is not None:
            check_bandwidth(self.link_bandwidth_kbps)
        if self.topology_file is not None:
            self.plan()  # a file that is no usable graph is refused now
        if not self.netns and (
            self.link_bandwidth_kbps is not None
            or (self.topology_file is not None and self.link_plan().bandwidths)
        ):
            raise ValueError(
                "link bandwidths (--link-bandwidth, or a topology file's) are shaped with tc "
                "in network namespaces: add --netns"
            )
        # The mix and the arrival process are checked here, before any router starts,
        # so a typo is refused in a second rather than after the network has formed.
        try:
            mix_by_name_or_path(self.traffic)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--traffic {self.traffic}: {exc}") from None
        if self.arrivals is not None:
            try:
                parse_arrivals(self.arrivals, seed=self.seed)
            except ValueError as exc:
                raise ValueError(f"--arrivals: {exc}") from None

    def plan(self) -> Topology:
        """The planned topology (read from the file, when there is one).

        Raises:
            ValueError: the file is no usable graph, or has another number of nodes.
        """
        if self.topology_file is None:
            return plan_topology(self.topology, self.nodes, degree=self.degree, seed=self.seed)
        planned = load_topology(self.topology_file)
        if planned.nodes != self.nodes:
            raise ValueError(
                f"--topology-file {self.topology_file} has {planned.nodes} nodes, not {self.nodes}"
            )
        return planned

    def link_plan(self, topology: Topology | None = None) -> LinkPlan:
        """The planned links' emulated delays and rates (:mod:`.emulated_links`)."""
        return LinkPlan(
            self.plan() if topology is None else topology,
            delay_ms=self.link_delay_ms,
            jitter_ms=self.link_jitter_ms,
            bandwidth_kbps=self.link_bandwidth_kbps,
        )

    def describe(self) -> dict[str, object]:
        """The settings as ``summary.json`` records them."""
        return {
            "nodes": self.nodes,
            "topology": self.topology,
            "degree": self.degree,
            "traffic": self.traffic,
            "rate": self.rate,
            "arrivals": self.arrivals,
            "duration": self.duration,
            "seeds": list(self.seeds),
            "base_port": self.base_port,
            "seed": self.seed,
            "on_node_failure": self.on_node_failure,
            "netns": self.netns,
            "routers_per_process": self.routers_per_process,
            "servent": self.servent,
            "servents": self.servent_count,
            "servent_timeout": self.servent_timeout,
            "leaves": None if self.leaves is None else dataclasses.asdict(self.leaves),
            "link_delay_ms": self.link_delay_ms,
            "link_jitter_ms": self.link_jitter_ms,
            "link_bandwidth_kbps": self.link_bandwidth_kbps,
        }

    def ultrapeers(self, topology: Topology) -> list[int]:
        """The nodes leaves attach to: all of them, but the nodes a two-tier plan made
        leaves."""
        return [n for n in range(self.nodes) if n not in topology.leaves]

    @property
    def leaf_count(self) -> int:
        return 0 if self.leaves is None else self.leaves.count

    @property
    def servent_count(self) -> int:
        return self.servents or (1 if self.servent else 0)

    @property
    def node_mode(self) -> str:
        """``in-process``, ``processes`` or ``shared``: what ``auto`` means for this many
        nodes."""
        if self.routers_per_process is not None:
            return "shared"
        if self.netns or self.churn is not None:
            return "processes"
        if self.mode != "auto":
            return self.mode
        return "processes" if self.nodes > AUTO_PROCESSES_ABOVE else "in-process"

    @property
    def collect_timeout(self) -> float:
        """Seconds for reading every node's pages at the end (state, routes, counters):
        a thousand nodes' pages are a few hundred MB of JSON."""
        return STOP_TIMEOUT + COLLECT_SECONDS_PER_NODE * self.nodes

    @property
    def formation_timeout(self) -> float:
        """Seconds for every planned link to come up, counted from when every node has
        been started: every router dials its planned peers at once then, and retries
        those that did not answer within a few seconds."""
        if self.form_timeout is not None:
            return self.form_timeout
        if self.node_mode == "shared":
            # Every router's links take handshakes on the few cores the host processes
            # share, a thousand routers' worth of them at once.
            return 30.0 + 0.15 * self.nodes
        return 30.0 + self.nodes / 10

    @property
    def start_timeout(self) -> float:
        """Longest one node may take to listen once it is started."""
        return START_TIMEOUT
