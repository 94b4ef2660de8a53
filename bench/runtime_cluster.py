"""The ``runtime`` engine's cluster side: what a spec needs of its node processes.

:mod:`bench.runtime_engine` says what the engine does; this module holds the
part that is about the nodes alone, so that the runner
(:mod:`bench.runtime_runner`) and the engine's facade can import it without
importing each other: whether the runtime can run a spec at all
(:func:`check`), where a protocol serves a read (:func:`read_path`), when a
profile is a LAN (:func:`is_lan`), what makes two specs share a cluster
(:class:`ClusterKey`) and the cluster itself (:class:`LocalCluster`: node
processes in a temporary directory, each region's load generator), with every
live cluster ended at the interpreter's exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cluster import SdpaxosNodes, start_loader, stop_loaders
from bench.engines import EngineUnsupported, RunSpec, protocol_status
from bench.runtime_app import parse_query
from bench.runtime_procs import ChildLines, stop_processes
from sdpaxos.profiles import BUILTIN, DelayProfile
from sdpaxos.runtime.local import LOCAL_REPLICAS_MAX, make_local_cluster

#: Round trips between replicas below this are a LAN: no emulator.
LAN_RTT_MS = 1.0
#: The app every node runs (see :mod:`bench.runtime_app`).
APP = "bench.runtime_app:BenchLog"
#: The smallest status-sampling interval (each sample costs the node a status map).
SAMPLE_MS_MIN = 20.0
#: Where a protocol serves reads itself: "every" replica, the "leader" only, or
#: none (reads go through the log), as :mod:`bench.engines`'s simulator does it.
READ_PATHS = {"sdpaxos": "every", "multipaxos": "leader"}
#: SDPaxos trace events the nodes keep in runs that sample their status: a
#: command leader polls the others about a slow sequencer (``StragglerSuspect``),
#: a majority agreed and a view change starts (``StragglerViewChange``), a new
#: view is established (``Establish``, at each follower) and who won it
#: (``BecomeSequencer``, at the winner only).
TRACE_EVENTS = ("StragglerSuspect", "StragglerViewChange", "Establish", "BecomeSequencer")


def read_path(protocol: str, replica: int, leader: int) -> str:
    """``"local"`` when ``protocol`` serves a read at ``replica`` itself, else ``"log"``."""
    where = READ_PATHS.get(protocol)
    if where == "every" or (where == "leader" and replica == leader):
        return "local"
    return "log"


def is_lan(profile: DelayProfile) -> bool:
    n = profile.size
    return all(profile.rtt_ms[i][j] < LAN_RTT_MS for i in range(n) for j in range(n) if i != j)


def check(spec: RunSpec) -> None:
    """Raise :class:`EngineUnsupported` (saying why) unless the runtime can run ``spec``."""
    why = protocol_status(spec.protocol)
    if why is not None:
        raise EngineUnsupported(f"{spec.protocol}: {why}")
    n = spec.profile.size
    if not 1 <= n <= LOCAL_REPLICAS_MAX:
        raise EngineUnsupported(f"the runtime engine runs 1..{LOCAL_REPLICAS_MAX} nodes, not {n}")
    if len(spec.clients.per_region) != n:
        raise EngineUnsupported(f"clients.per_region needs {n} entries")
    if spec.processing_us:
        raise EngineUnsupported(
            "processing_us is the simulator's CPU model; real nodes have real CPUs"
            " (slow one with slow=(replica, factor, at_ms))"
        )
    for what, fault in (("slow", spec.slow), ("kill", spec.kill)):
        if fault is not None and not 0 <= fault[0] < n:
            raise EngineUnsupported(f"{what}: no replica {fault[0]} in a cluster of {n}")
    if spec.slow is not None and not spec.slow[1] >= 1:
        raise EngineUnsupported(f"slow: factor must be >= 1, got {spec.slow[1]}")
    if not 0 <= spec.leader < n:
        raise EngineUnsupported(f"leader {spec.leader} is not a replica of {n}")
    if spec.sample_ms is not None and spec.sample_ms < SAMPLE_MS_MIN:
        raise EngineUnsupported(f"sample_ms below {SAMPLE_MS_MIN:g} would load the nodes")
    if not sum(spec.clients.per_region) and spec.sample_ms is None:
        raise EngineUnsupported("no clients and no sampling: nothing to run")


@dataclass(frozen=True, slots=True)
class ClusterKey:
    """What makes two specs run on the same cluster."""

    protocol: str
    profile: DelayProfile
    leader: int
    overrides: tuple[tuple[str, Any], ...]
    fsync: bool
    metrics: bool
    #: Keep the straggler detection's trace events (SDPaxos runs that sample).
    trace: bool

    @classmethod
    def of(cls, spec: RunSpec, fsync: bool, metrics: bool) -> ClusterKey:
        overrides = tuple(sorted((k, _hashable(v)) for k, v in spec.config_overrides.items()))
        trace = spec.sample_ms is not None and spec.protocol == "sdpaxos"
        return cls(spec.protocol, spec.profile, spec.leader, overrides, fsync, metrics, trace)


def _hashable(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


class LocalCluster(SdpaxosNodes):
    """The node processes of one :class:`ClusterKey` in a temporary directory
    (:class:`bench.cluster.SdpaxosNodes`), with each region's load generator
    and what the runs on it did so far."""

    def __init__(self, key: ClusterKey) -> None:
        self.key = key
        root = Path(tempfile.mkdtemp(prefix="sdpaxos-bench-"))
        profile = key.profile
        protocol: dict[str, Any] = {
            "name": key.protocol,
            "rtt_ms": [list(row) for row in profile.replica_rtt_ms()],
        }
        protocol.update({k: _plain(v) for k, v in key.overrides})
        emulator: dict[str, Any] | None = None
        if not is_lan(profile):
            if BUILTIN.get(profile.name) == profile:
                emulator = {"profile": profile.name}
            else:
                (root / "profile.json").write_text(json.dumps(_profile_json(profile)))
                emulator = {"profile": "profile.json"}
        path = make_local_cluster(
            root,
            profile.size,
            regions=list(profile.regions),
            sequencer=key.leader,
            protocol=protocol,
            emulator=emulator,
        )
        super().__init__(
            path,
            app=APP,
            fsync=key.fsync,
            metrics=key.metrics,
            trace_events=TRACE_EVENTS if key.trace else (),
            own_dir=True,
        )
        self.n = self.size
        self.root = root
        self.emulated = emulator is not None
        #: Each region's load generator (:meth:`loader`).
        self.loaders: dict[int, ChildLines] = {}
        #: Commands every node should have executed so far (answered to loaders).
        self.commands_answered = 0
        self.runs = 0
        self.dirty = False
        #: Processes a run's script started beside the file's nodes (nodes added
        #: to the membership): ended with the cluster.
        self.others: list[subprocess.Popen[Any]] = []

    def kill(self, k: int) -> None:
        """SIGKILL node ``k`` (a fault); the cluster is not reused after."""
        super().kill(k)
        self.dirty = True

    def loader(self, k: int) -> ChildLines:
        """Region ``k``'s load generator: connected to node ``k`` once, kept for
        every run on this cluster (starting a Python process per run cost seconds)."""
        lines = self.loaders.get(k)
        if lines is not None and not lines.finished.is_set():
            return lines
        lines = start_loader(
            self.loader_conn([k], client_cert=k),
            self.root / f"loader{k}.json",
            self.root / f"loader{k}.log",
        )
        self.loaders[k] = lines
        return lines

    def loader_log(self, k: int) -> str:
        path = self.root / f"loader{k}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"

    def stop_loaders(self) -> None:
        stop_loaders(list(self.loaders.values()))
        self.loaders.clear()

    def close(self) -> None:
        self.stop_loaders()
        stop_processes(self.others)
        self.others.clear()
        super().close()

    async def digests(self, nodes: list[int]) -> dict[int, tuple[int, int, bytes, bytes] | None]:
        """Each node's ``BenchLog`` answer (a stale read: what it executed so far)."""
        out: dict[int, tuple[int, int, bytes, bytes] | None] = {}
        for k in nodes:
            value = await self.query(k, stale=True)
            try:
                out[k] = parse_query(value) if value is not None else None
            except ValueError:
                out[k] = None
        return out

    def commit_histograms(self) -> dict[int, tuple[float, float]]:
        """Each live node's ``sdpaxos_commit_latency_seconds`` (sum, count)."""
        out: dict[int, tuple[float, float]] = {}
        for k in self.alive():
            try:
                out[k] = self.commit_histogram(k)
            except OSError:
                continue
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _profile_json(profile: DelayProfile) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": profile.name,
        "regions": list(profile.regions),
        "rtt_ms": [list(r) for r in profile.rtt_ms],
    }
    if profile.one_way_ms is not None:
        out["one_way_ms"] = [list(r) for r in profile.one_way_ms]
    return out


#: Every cluster alive in this process, ended at exit whatever happened (the
#: runner adds the clusters it starts and discards those it closes).
LIVE: set[LocalCluster] = set()


@atexit.register
def _close_all() -> None:
    for cluster in list(LIVE):
        with contextlib.suppress(Exception):
            cluster.close()
        LIVE.discard(cluster)
