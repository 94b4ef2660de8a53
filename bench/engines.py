"""Engines: run a workload on a protocol and return every operation it recorded.

Why engines: the experiments say *what* to measure (regions, clients, faults,
workload); an engine says *where*: in the simulator's virtual time
(:class:`SimEngine`) or on real node processes behind the delay emulator
(:class:`bench.runtime_engine.RuntimeEngine`). Both take a
:class:`RunSpec` and return a :class:`RunOutput` holding per-operation records,
so statistics, tables and histories are computed one way for both. Their one
difference in what a record means: the simulator measures latency at the
replica, the runtime at the client (the loopback hop and TLS included).

Protocols are looked up by name in :mod:`sdpaxos.protocols`; a baseline whose
module does not import yet is reported by :func:`protocol_status` as "not
built" and skipped by the experiments rather than crashing them.
"""

from __future__ import annotations

import functools
import gc
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from bench.cputime import CpuMeter, TimedCodec, TimedReplica
from bench.rounds import lease_overrides
from bench.workloads import OpRecord, OpStream, Workload, arrivals_us
from sdpaxos.core.ready import ReadResult, Reply, ReplyKind
from sdpaxos.core.types import Command, Wait
from sdpaxos.profiles import DelayProfile
from sdpaxos.protocols import PROTOCOL_NAMES, ProtocolError, protocol
from sdpaxos.sim.checkers import LivenessViolation, SafetyViolation
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.statemachine import keyed_payload

Progress = Callable[[str], None]

#: Events one simulator run may process before it is declared runaway.
RUN_EVENTS_MAX = 50_000_000
#: Virtual time between two progress checks of a simulator run.
STEP_MS = 100.0
#: Client ids of one run's operations start here (0 is "no session" in the core).
CLIENT_ID_BASE = 1


class EngineUnsupported(RuntimeError):
    """The engine cannot run this spec (e.g. the runtime and a baseline)."""


def protocol_status(name: str) -> str | None:
    """``None`` when ``name`` can run; otherwise why not (``"not built: ..."``).

    Why catch ImportError: the baselines arrive as separate modules; until one
    is merged, the experiments must still run every protocol that exists.
    """
    if name not in PROTOCOL_NAMES:
        return f"unknown protocol (choose from {', '.join(PROTOCOL_NAMES)})"
    try:
        protocol(name)
    except (ProtocolError, ImportError) as exc:
        return f"not built ({type(exc).__name__}: {exc})"
    return None


@dataclass(frozen=True, slots=True)
class Clients:
    """Who issues operations: per replica, how many clients of which loop.

    ``open``: each client issues at ``rate_per_s`` (Poisson or fixed interval)
    whatever the answers (latency at a given load). ``closed``: each client
    has one operation outstanding and issues the next one a client round trip
    after the answer (peak throughput).
    """

    mode: Literal["open", "closed"]
    per_region: tuple[int, ...]
    rate_per_s: float = 0.0
    poisson: bool = True

    def __post_init__(self) -> None:
        if self.mode == "open" and not self.rate_per_s > 0:
            raise ValueError("open-loop clients need rate_per_s > 0")
        if any(c < 0 for c in self.per_region):
            raise ValueError("client counts must be >= 0")


class Script(Protocol):
    """Actions on a runtime cluster during a run (``RunSpec.script``): what a
    kill or a slowdown cannot say, such as membership changes
    (:mod:`bench.experiments.reconfig_runtime`). Runtime engine only.

    ``prepare`` runs in the main thread before the load starts (a process
    started there dies with this process: see :func:`bench.runtime_procs.spawn`);
    ``run`` runs in a thread of its own from the run's origin on (``origin_s``,
    a ``time.monotonic()`` value) and must return by the end of the drain;
    ``check`` runs after the engine's verification, for what it cannot see
    (nodes the script started): ``{"ok": bool, "verdict": str}``.
    """

    def prepare(self, cluster: Any) -> None: ...
    def run(self, cluster: Any, origin_s: float) -> None: ...
    def check(self, cluster: Any) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One run: a protocol, a cluster, clients, a workload, a measured window, faults.

    Times are from the start of the run. Operations invoked before
    ``warmup_ms`` are warm-up; the window is ``[warmup_ms, warmup_ms +
    duration_ms)``. ``slow``: ``(replica, factor, at_ms)`` makes that replica's
    CPU ``factor`` times slower (needs ``processing_us``). ``kill``:
    ``(replica, at_ms)`` crashes it for good. ``cpu``: time each replica's calls
    (:mod:`bench.cputime`). ``sample_ms``: record the believed sequencer/leader
    that often (straggler detection). ``script``: actions on a runtime
    cluster during the run (:class:`Script`; the simulator refuses it).
    """

    protocol: str
    profile: DelayProfile
    workload: Workload
    clients: Clients
    duration_ms: float
    warmup_ms: float = 0.0
    leader: int = 0
    processing_us: int = 0
    slow: tuple[int, float, float] | None = None
    kill: tuple[int, float] | None = None
    config_overrides: dict[str, Any] = field(default_factory=dict)
    cpu: bool = False
    sample_ms: float | None = None
    drain_ms: float = 10_000.0
    seed: int = 1
    tick_ms: float = 10.0
    script: Script | None = None

    @property
    def window_us(self) -> tuple[int, int]:
        start = round(self.warmup_ms * 1000)
        return start, start + round(self.duration_ms * 1000)


@dataclass(slots=True)
class RunOutput:
    """What a run recorded."""

    spec: RunSpec
    records: list[OpRecord]
    ok: bool = True
    verdict: str = "ok"
    virtual_ms: float = 0.0
    events: int = 0
    wall_s: float = 0.0
    cpu: CpuMeter | None = None
    #: ``(time_us, believed leader)`` every ``spec.sample_ms``.
    leader_samples: list[tuple[int, int | None]] = field(default_factory=list)
    #: What an engine measured beside the records (the runtime: CPU per
    #: process, node-side latency, status samples, the verification).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def regions(self) -> list[str]:
        return list(self.spec.profile.regions)


class Engine(Protocol):
    """Runs a :class:`RunSpec`; raises :class:`EngineUnsupported` when it cannot."""

    name: str

    def run(self, spec: RunSpec, progress: Progress | None = None) -> RunOutput: ...


# -- the simulator ------------------------------------------------------------------


@dataclass(slots=True)
class _Pending:
    record: OpRecord
    replica: int
    client: int  # index into _SimClients.clients
    wait: ReplyKind


class _SimClients:
    """The clients of one simulator run; every operation becomes an :class:`OpRecord`.

    Each operation is its own command with a fresh client id and ``seq`` 1, so
    a client may have any number outstanding (open loop) without tripping the
    core's one-outstanding-per-session rule. Latency is measured at the
    replica, from ``propose`` (or ``read``) to READY (or the read's answer), as
    ``sdpaxos.sim.workload`` does: the client hop is the profile's diagonal and
    the paper's formula leaves it out.
    """

    def __init__(self, cluster: SimCluster, spec: RunSpec) -> None:
        self.cluster = cluster
        self.spec = spec
        self.records: list[OpRecord] = []
        self.by_cid: dict[int, _Pending] = {}
        self.by_read: dict[int, _Pending] = {}
        self.clients: list[tuple[int, OpStream]] = []  # (replica, stream)
        self._next_cid = CLIENT_ID_BASE
        self.end_us = spec.window_us[1]
        for r, count in enumerate(spec.clients.per_region):
            for _ in range(count):
                self.clients.append((r, OpStream(spec.workload, len(self.clients))))
        cluster.reply_listeners.append(self._on_reply)
        cluster.read_listeners.append(self._on_read)

    def start(self) -> None:
        spec = self.spec
        for index, (r, _) in enumerate(self.clients):
            hop_us = self.cluster.profile.client_rtt_us(r) // 2
            if spec.clients.mode == "closed":
                self._issue(index, hop_us)
            else:
                rng = random.Random(f"{spec.workload.seed}:arrivals:{index}")
                times = arrivals_us(
                    spec.clients.rate_per_s,
                    hop_us,
                    self.end_us,
                    poisson=spec.clients.poisson,
                    rng=rng,
                )
                for at_us in times:
                    self.cluster.call_at(at_us, functools.partial(self._issue_now, index), "op")

    def _payload(self, key: bytes, body: bytes) -> bytes:
        """``body`` as the cluster's state machine must see it.

        A protocol that orders only interfering commands (EPaxos) runs the
        per-key state machine, which must be told the key in the payload
        (:func:`~sdpaxos.sim.statemachine.keyed_payload`); otherwise it treats
        the command as writing every object, whose result then depends on the
        order of commands on other keys, which such a protocol leaves free.
        """
        return keyed_payload(key, body) if self.cluster.per_key_order else body

    def _issue_now(self, index: int) -> None:
        self._issue(index, self.cluster.now_us)

    def _issue(self, index: int, at_us: int) -> None:
        if at_us >= self.end_us:
            return
        r, stream = self.clients[index]
        op = stream.next()
        cid = self._next_cid
        self._next_cid += 1
        client = index + 1 if self.spec.clients.mode == "closed" else cid
        rec = OpRecord(
            op_id=len(self.records),
            client=client,
            region=self.cluster.profile.regions[r],
            kind=op.kind,
            key=op.key,
            invoke_us=at_us,
            value=f"v{cid}",
        )
        self.records.append(rec)
        if op.kind == "write":
            pending = _Pending(rec, r, index, ReplyKind.READY)
            self.by_cid[cid] = pending
            payload = self._payload(op.key, op.payload)
            self.cluster.propose_at(at_us, r, Command(cid, 1, payload, op.key), Wait.READY)
            return
        replica = self.cluster.replicas[r]
        if replica is not None and getattr(replica, "read", None) is not None:
            rec.path = "local"
            read_id = self.cluster.new_read_id()
            self.by_read[read_id] = _Pending(rec, r, index, ReplyKind.READY)
            self.cluster.read_at(at_us, r, read_id, op.key)
        else:
            self._read_through_log(_Pending(rec, r, index, ReplyKind.EXECUTED), at_us, cid)

    def _read_through_log(self, pending: _Pending, at_us: int, cid: int | None = None) -> None:
        if cid is None:
            cid = self._next_cid
            self._next_cid += 1
        pending.record.path = "log"
        pending.wait = ReplyKind.EXECUTED
        self.by_cid[cid] = pending
        key = pending.record.key
        command = Command(cid, 1, self._payload(key, b"r" + key), key)
        self.cluster.propose_at(at_us, pending.replica, command, Wait.EXECUTED)

    def _on_reply(self, replica: int, reply: Reply, now_us: int) -> None:
        pending = self.by_cid.get(reply.client_id)
        if pending is None or reply.kind is not pending.wait or replica != pending.replica:
            return
        del self.by_cid[reply.client_id]
        self._complete(pending, now_us)

    def _on_read(self, replica: int, result: ReadResult, now_us: int) -> None:
        pending = self.by_read.pop(result.read_id, None)
        if pending is None:
            return
        if result.ok:
            self._complete(pending, now_us)
        else:
            self._read_through_log(pending, now_us)

    def _complete(self, pending: _Pending, now_us: int) -> None:
        pending.record.complete_us = now_us
        if self.spec.clients.mode == "closed":
            rtt_us = self.cluster.profile.client_rtt_us(pending.replica)
            self._issue(pending.client, now_us + rtt_us)

    @property
    def open_count(self) -> int:
        return len(self.by_cid) + len(self.by_read)


class SimEngine:
    """The simulator (:class:`sdpaxos.sim.cluster.SimCluster`), in virtual time."""

    name = "sim"

    def run(self, spec: RunSpec, progress: Progress | None = None) -> RunOutput:
        if spec.script is not None:
            raise EngineUnsupported("a script acts on real node processes: --engine runtime")
        proto = protocol(spec.protocol)
        n = spec.profile.size
        if len(spec.clients.per_region) != n:
            raise ValueError(f"clients.per_region needs {n} entries")
        meter: CpuMeter | None = None
        extra: dict[str, Any] = {}
        if spec.cpu:
            meter = CpuMeter(n)
            timed = meter

            def factory(*args: Any) -> Any:
                return TimedReplica(proto.make_replica(*args), args[1], timed)

            extra = {"replica_factory": factory, "codec": TimedCodec(proto.codec, meter)}
        started = time.perf_counter()
        cluster = SimCluster(
            spec.profile,
            SeededChooser(random.Random(spec.seed)),
            sequencer=spec.leader,
            tick_ms=spec.tick_ms,
            # Three heartbeats per lease, as the runtime's config (bench.rounds).
            config_overrides=lease_overrides(spec.config_overrides),
            processing_us=spec.processing_us,
            protocol=spec.protocol,
            **extra,
        )
        clients = _SimClients(cluster, spec)
        out = RunOutput(spec, clients.records, cpu=meter)
        start_us, end_us = spec.window_us
        if meter is not None and start_us > 0:
            cluster.call_at(start_us, meter.reset, "warm-up over")
        if spec.slow is not None:
            victim, factor, at_ms = spec.slow
            cluster.call_at(round(at_ms * 1000), lambda: cluster.slow(victim, factor), "slow")
        if spec.kill is not None:
            dead, kill_ms = spec.kill
            cluster.call_at(round(kill_ms * 1000), lambda: cluster.crash(dead), "kill")
        if spec.sample_ms is not None:
            sample_us = round(spec.sample_ms * 1000)

            def sample() -> None:
                out.leader_samples.append((cluster.now_us, cluster.believed_sequencer()))
                if cluster.now_us + sample_us < end_us:
                    cluster.call_at(cluster.now_us + sample_us, sample, "sample")

            cluster.call_at(0, sample, "sample")
        clients.start()
        # CPU-timed runs: no cyclic garbage collection while measuring. A
        # collection is charged to whichever call happens to trigger it, which
        # made one replica look several times busier than its peers in a short
        # run; real nodes tune their collector down for the same reason
        # (bench/README.md, "node processes: young GC generation ...").
        gc_was_enabled = gc.isenabled()
        if spec.cpu:
            gc.collect()
            gc.disable()
        step_us = round(STEP_MS * 1000)
        drain_end_us = end_us + (round(spec.drain_ms * 1000) if spec.clients.mode == "open" else 0)
        next_report_us = 0
        try:
            while cluster.now_us < drain_end_us:
                if cluster.now_us >= end_us and clients.open_count == 0:
                    break
                cluster.run_until(
                    min(drain_end_us, cluster.now_us + step_us), events_max=RUN_EVENTS_MAX
                )
                if progress is not None and cluster.now_us >= next_report_us:
                    progress(
                        f"{spec.protocol}: {cluster.now_us / 1e6:.1f}/{end_us / 1e6:.1f} s virtual,"
                        f" {len(clients.records)} ops"
                    )
                    next_report_us += max(step_us, end_us // 5)
        except (SafetyViolation, LivenessViolation) as exc:
            out.ok = False
            out.verdict = f"{type(exc).__name__} at {cluster.now_us} us: {exc}"
        finally:
            if gc_was_enabled:
                gc.enable()
        out.virtual_ms = cluster.now_us / 1000
        out.events = cluster.events_processed
        out.wall_s = time.perf_counter() - started
        return out


def close_engine(engine: Engine) -> None:
    """End what ``engine`` holds (the runtime's processes); nothing for the simulator."""
    close = getattr(engine, "close", None)
    if close is not None:
        close()
