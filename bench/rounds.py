"""A round-based in-memory driver for any protocol: batched throughput and its CPU cost.

Why not the simulator: :class:`~sdpaxos.sim.cluster.SimCluster` hands a replica
one event at a time and drains its effects right away, so no protocol ever
batches there, and CPU per command measured in it is the unbatched cost. A
real node under load handles everything that arrived since its last turn and
then sends one batch; this driver does that, for every protocol by name
(:func:`sdpaxos.protocols.protocol`), the way ``bench/core_micro.py`` does for
the SDPaxos core alone.

One run (:func:`run_rounds`):

* ``replicas`` replicas of the protocol, each with a state machine that chains
  BLAKE2b over the payloads it applies, in order (:class:`DigestMachine`).
* Closed-loop sessions, ``sessions`` per replica (or, with ``clients_at =
  "leader"``, all of them at the leader: the paper's Multi-Paxos throughput
  setup); each has one operation outstanding and issues its next one as soon
  as the answer comes back. Operations come from :class:`bench.workloads.OpStream`
  (read share, payload, conflict rate). A write is ``propose(Wait.READY)`` and
  completes at READY. A read uses the protocol's ``read()``: ``ok`` completes it,
  not ``ok`` sends it through the log as a command (``Wait.EXECUTED``).
* Rounds: replicas in a seeded shuffled order; each decodes and steps every
  frame in its FIFO inbox, calls ``ready()`` once and carries the batch out with
  :func:`sdpaxos.sim.driver.carry_out`; its messages are grouped per destination
  and encoded with the protocol's codec (split at ``MESSAGES_PER_BATCH_MAX``),
  one frame per group, appended to the destination's inbox. The next
  operations of the sessions that completed are proposed (or read) right
  after. A logical clock moves ``round_ms`` per round; a replica ticks whenever
  it crosses a ``tick_ms`` boundary, so heartbeats and leases work.
* ``slow = (replica, every)``: that replica takes its turn only every
  ``every``-th round (a straggler with a fraction of a CPU; its backlog waits
  in its inbox), and its CPU counts ``every`` times in the capacity.

CPU: the thread's CPU clock (``time.thread_time``) around each replica's
decode+step of one round, its ``ready()``, the encoding of its frames, its
proposals and reads, and its ticks; the driver's own bookkeeping is not
charged. The garbage collector is off during the run (a collection would be
charged to whichever call triggers it). After ``warmup`` completed operations
the counters restart; the window closes when ``commands`` more completed.

Verification (``problems``; a run with any is not a number): every replica
executed the same number of commands, which is every command proposed, and
their digests are equal (so the executed sequences are identical); every
operation completed exactly once; no replica rejected a peer message.
"""

from __future__ import annotations

import gc
import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.core_micro import CountingStorage
from bench.cputime import TIMED_CALLS
from bench.workloads import OpStream, Workload
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.ready import ReadResult, Reply, ReplyKind
from sdpaxos.core.storage import CAccepted, Record
from sdpaxos.core.types import Command, ReplicaId, Wait
from sdpaxos.profiles import uniform
from sdpaxos.protocols import MakeReplica, protocol
from sdpaxos.sim.driver import Outlet, carry_out
from sdpaxos.wire.codec import MESSAGES_PER_BATCH_MAX

#: The runtime's rule (``sdpaxos.runtime.config.HEARTBEATS_PER_LEASE``): three
#: heartbeats per lease, so a lease is renewed well before it lapses.
HEARTBEATS_PER_LEASE = 3
#: Rounds without a completed operation before a run is declared stuck.
STUCK_ROUNDS = 5_000
#: Round trip between replicas given to thrifty quorums (a LAN), ms.
LAN_RTT_MS = 0.2

Progress = Callable[[str], None]


def lease_overrides(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """``overrides`` with ``heartbeat_ms = lease_ms / 3`` unless it sets a heartbeat.

    The core's defaults have ``heartbeat_ms == lease_ms``, so a lease lapses for
    about a round trip before each renewal (reads refused in bursts); the
    runtime's config already uses three heartbeats per lease.
    """
    out = dict(overrides or {})
    if "heartbeat_ms" not in out:
        lease = float(out.get("lease_ms", ClusterConfig(replicas=1).lease_ms))
        out["heartbeat_ms"] = lease / HEARTBEATS_PER_LEASE
    return out


class DigestMachine:
    """The state machine: a count and a BLAKE2b chain over the applied payloads."""

    __slots__ = ("_state", "count")

    def __init__(self) -> None:
        self.count = 0
        self._state = b""

    def apply(self, payload: bytes) -> bytes:
        self.count += 1
        self._state = hashlib.blake2b(self._state + payload, digest_size=16).digest()
        return b"ok"

    def digest(self) -> str:
        return self._state.hex()

    def snapshot(self) -> bytes:
        return self.count.to_bytes(8, "big") + self._state

    def restore(self, data: bytes) -> None:
        self.count = int.from_bytes(data[:8], "big")
        self._state = data[8:]


@dataclass(frozen=True, slots=True)
class RoundSpec:
    """One round-based run; see the module docstring."""

    protocol: str
    replicas: int = 3
    sessions: int = 500
    commands: int = 20_000
    warmup: int = 5_000
    read_pct: float = 0.0
    payload_bytes: int = 16
    conflict_pct: float = 0.0
    #: "all": ``sessions`` at every replica; "leader": all of them at ``leader``.
    clients_at: str = "all"
    leader: int = 0
    seed: int = 1
    round_ms: float = 1.0
    #: ``(replica, every)``: that replica takes a turn only every ``every``-th round.
    slow: tuple[int, int] | None = None
    config_overrides: dict[str, Any] = field(default_factory=dict)

    def workload(self) -> Workload:
        return Workload(
            conflict_pct=self.conflict_pct,
            read_pct=self.read_pct,
            payload_bytes=self.payload_bytes,
            seed=self.seed,
        )


@dataclass(slots=True)
class RoundResult:
    spec: RoundSpec
    #: Per replica, per timed call: CPU seconds in the measured window.
    seconds: list[dict[str, float]]
    measured: int = 0
    rounds: int = 0
    measured_rounds: int = 0
    wall_s: float = 0.0
    proposed: int = 0
    executed: list[int] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    reads_ok: int = 0
    reads_via_log: int = 0
    instances: int = 0
    instance_commands: int = 0
    frames: int = 0
    wire_bytes: int = 0
    leaders: list[Any] = field(default_factory=list)
    #: Rounds in which each replica took its turn.
    turns: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def cpu_s(self, replica: int) -> float:
        return sum(self.seconds[replica].values())

    @property
    def factors(self) -> list[int]:
        f = [1] * self.spec.replicas
        if self.spec.slow is not None:
            f[self.spec.slow[0]] = self.spec.slow[1]
        return f

    def cpu_s_per_1000(self) -> list[float]:
        m = self.measured or 1
        return [self.cpu_s(r) / m * 1000 for r in range(self.spec.replicas)]

    @property
    def busiest(self) -> int:
        per = self.cpu_s_per_1000()
        f = self.factors
        return max(range(len(per)), key=lambda r: per[r] * f[r])

    @property
    def capacity_per_s(self) -> float:
        """Operations/s with one core per replica (a straggler's core a fraction)."""
        b = self.busiest
        cost = self.cpu_s_per_1000()[b] * self.factors[b]
        return 1000 / cost if cost > 0 else float("nan")

    @property
    def commands_per_instance(self) -> float:
        return self.instance_commands / self.instances if self.instances else 0.0

    @property
    def ops_per_round(self) -> float:
        return self.measured / self.measured_rounds if self.measured_rounds else 0.0

    def to_json(self) -> dict[str, Any]:
        per = self.cpu_s_per_1000()
        return {
            "completed": self.measured,
            "cpu_s_per_1000": [round(v, 6) for v in per],
            "busiest": self.busiest,
            "capacity_per_s": round(self.capacity_per_s, 1),
            "busiest_breakdown_s": {
                k: round(v, 6) for k, v in self.seconds[self.busiest].items() if v
            },
            "commands_per_instance": round(self.commands_per_instance, 2),
            "ops_per_round": round(self.ops_per_round, 2),
            "rounds": self.rounds,
            "reads_ok": self.reads_ok,
            "reads_via_log": self.reads_via_log,
            "frames": self.frames,
            "wire_bytes": self.wire_bytes,
            "wall_s": round(self.wall_s, 3),
            "digest": self.digests[0] if self.digests else None,
            "leaders_at_end": self.leaders,
            "problems": self.problems,
        }


class _Session:
    __slots__ = ("cid", "key", "replica", "seq", "stream", "waiting")

    def __init__(self, cid: int, replica: int, stream: OpStream) -> None:
        self.cid = cid
        self.replica = replica
        self.stream = stream
        self.seq = 0
        #: The key of the outstanding read (it may go through the log).
        self.key = b""
        #: What completes the outstanding op: ReplyKind, "read", or None (idle).
        self.waiting: Any = None


class _Driver(Outlet):
    """The outlet of every replica: frames to inboxes, answers to the sessions."""

    def __init__(self, spec: RoundSpec, make: MakeReplica, codec: Any) -> None:
        self.spec = spec
        n = spec.replicas
        self.n = n
        cfg = ClusterConfig(
            replicas=n,
            sequencer=ReplicaId(spec.leader),
            rtt_ms=uniform(n, LAN_RTT_MS).replica_rtt_ms(),
            propose_queue_max=max(100_000, spec.sessions * n * 2),
            **lease_overrides(spec.config_overrides),
        )
        self.config = cfg
        self.machines = [DigestMachine() for _ in range(n)]
        self.storages = [CountingStorage() for _ in range(n)]
        self.replicas = [
            make(cfg, r, self.machines[r], random.Random(spec.seed * 1_000_003 + r), False, None)
            for r in range(n)
        ]
        self.encode = codec.encode_batch
        self.decode = codec.decode_batch
        self.inboxes: list[list[bytes]] = [[] for _ in range(n)]
        self.seconds = [dict.fromkeys(TIMED_CALLS, 0.0) for _ in range(n)]
        self.clock = time.thread_time
        self.now_ms = 0.0
        workload = spec.workload()
        hosts = [spec.leader] * (n * spec.sessions) if spec.clients_at == "leader" else None
        self.sessions: list[_Session] = []
        self.by_cid: dict[int, _Session] = {}
        for i in range(n * spec.sessions):
            r = hosts[i] if hosts is not None else i % n
            s = _Session(i + 1, r, OpStream(workload, i + 1))
            self.sessions.append(s)
            self.by_cid[s.cid] = s
        self.reads_pending: dict[int, _Session] = {}
        self.read_ids = 0
        #: Sessions whose next operation is issued after the current turn.
        self.next_ops: list[list[_Session]] = [[] for _ in range(n)]
        self.completed = 0
        self.issued = 0
        self.proposed = 0
        self.reads_ok = 0
        self.reads_via_log = 0
        self.limit = spec.warmup + spec.commands
        self.instances: dict[tuple[int, int], int] = {}
        self.frames = 0
        self.wire_bytes = 0
        self.problems: list[str] = []
        self.has_read = [getattr(rep, "read", None) is not None for rep in self.replicas]

    # -- the outlet ---------------------------------------------------------

    def persisted(self, replica: int, records: list[Record]) -> None:
        instances = self.instances
        for rec in records:
            if type(rec) is CAccepted and rec.commands:
                instances[(rec.owner, rec.index)] = len(rec.commands)

    def send(self, replica: int, messages: Any) -> bool:
        if not messages:
            return False
        per_dst: dict[int, list[Any]] = {}
        for dst, m in messages:
            bucket = per_dst.get(dst)
            if bucket is None:
                per_dst[dst] = [m]
            else:
                bucket.append(m)
        clock = self.clock
        t0 = clock()
        frames = []
        encode = self.encode
        for dst, bucket in per_dst.items():
            for lo in range(0, len(bucket), MESSAGES_PER_BATCH_MAX):
                frames.append((dst, encode(bucket[lo : lo + MESSAGES_PER_BATCH_MAX])))
        self.seconds[replica]["encode"] += clock() - t0
        inboxes = self.inboxes
        for dst, frame in frames:
            self.frames += 1
            self.wire_bytes += len(frame)
            inboxes[dst].append(frame)
        return False

    def replies(self, replica: int, replies: list[Reply]) -> None:
        by_cid = self.by_cid
        nxt = self.next_ops[replica]
        for reply in replies:
            s = by_cid.get(reply.client_id)
            if s is None or s.seq != reply.seq or s.replica != replica:
                self.problems.append(f"unexpected reply {reply!r} at replica {replica}")
                continue
            if reply.kind is not s.waiting:
                continue  # READY of a read through the log: it waits for EXECUTED
            s.waiting = None
            self.completed += 1
            nxt.append(s)

    def reads(self, replica: int, results: list[ReadResult]) -> None:
        nxt = self.next_ops[replica]
        for result in results:
            s = self.reads_pending.pop(result.read_id, None)
            if s is None or s.replica != replica:
                self.problems.append(f"unexpected read result {result!r} at replica {replica}")
                continue
            if result.ok:
                self.reads_ok += 1
                s.waiting = None
                self.completed += 1
            else:
                self.reads_via_log += 1
                s.waiting = "log"  # proposed through the log after this turn
            nxt.append(s)

    # -- sessions -----------------------------------------------------------

    def issue(self, replica: int) -> None:
        """The next operations of ``replica``'s sessions that completed (timed)."""
        todo = self.next_ops[replica]
        if not todo:
            return
        self.next_ops[replica] = []
        rep = self.replicas[replica]
        seconds = self.seconds[replica]
        clock = self.clock
        t_prop = 0.0
        t_read = 0.0
        now = self.now_ms
        for s in todo:
            if s.waiting == "log":
                s.seq += 1
                cmd = Command(s.cid, s.seq, b"r" + s.key, s.key)
                s.waiting = ReplyKind.EXECUTED
                self.proposed += 1
                t0 = clock()
                rep.propose(cmd, Wait.EXECUTED)
                t_prop += clock() - t0
                continue
            if self.issued >= self.limit:
                continue
            self.issued += 1
            op = s.stream.next()
            if op.kind == "read" and self.has_read[replica]:
                self.read_ids += 1
                rid = self.read_ids
                s.waiting = "read"
                s.key = op.key
                self.reads_pending[rid] = s
                t0 = clock()
                rep.read(rid, op.key, now)
                t_read += clock() - t0
                continue
            s.seq += 1
            if op.kind == "read":
                cmd = Command(s.cid, s.seq, b"r" + op.key, op.key)
                s.waiting = ReplyKind.EXECUTED
                wait = Wait.EXECUTED
            else:
                cmd = Command(s.cid, s.seq, op.payload, op.key)
                s.waiting = ReplyKind.READY
                wait = Wait.READY
            self.proposed += 1
            t0 = clock()
            rep.propose(cmd, wait)
            t_prop += clock() - t0
        seconds["propose"] += t_prop
        seconds["read"] += t_read


def run_rounds(spec: RoundSpec, progress: Progress | None = None) -> RoundResult:
    """Run ``spec`` to completion and verify it (see the module docstring)."""
    proto = protocol(spec.protocol)
    return run_with(spec, proto.make_replica, proto.codec, progress)


def run_with(
    spec: RoundSpec, make: MakeReplica, codec: Any, progress: Progress | None = None
) -> RoundResult:
    """:func:`run_rounds` with the replicas and codec given (tests use doubles)."""
    if spec.clients_at not in ("all", "leader"):
        raise ValueError(f"clients_at must be 'all' or 'leader', got {spec.clients_at!r}")
    if spec.commands < 1 or spec.sessions < 1 or spec.warmup < 0:
        raise ValueError("commands and sessions must be >= 1, warmup >= 0")
    d = _Driver(spec, make, codec)
    n = d.n
    order = list(range(n))
    order_rng = random.Random(spec.seed)
    cfg = d.config
    tick_ms = cfg.tick_ms
    slow_r, slow_every = spec.slow if spec.slow is not None else (-1, 1)
    last_tick = [-tick_ms] * n
    turns = [0] * n  # every replica ticks in the first round it runs
    # Initial load: the first operation of every session.
    for s in d.sessions:
        d.next_ops[s.replica].append(s)
    for r in range(n):
        d.issue(r)
    for r in range(n):
        d.seconds[r] = dict.fromkeys(TIMED_CALLS, 0.0)  # warm-up (re)starts below
    measuring = spec.warmup == 0
    start_round = 0
    start_completed = 0
    measured = 0
    measured_at: list[dict[str, float]] | None = None
    measured_rounds = 0
    rounds = 0
    idle_rounds = 0
    clock = d.clock
    wall0 = time.perf_counter()
    last_report = wall0
    gc_was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        while True:
            rounds += 1
            d.now_ms = rounds * spec.round_ms
            order_rng.shuffle(order)
            before = d.completed
            for r in order:
                if r == slow_r and rounds % slow_every:
                    continue
                turns[r] += 1
                rep = d.replicas[r]
                sec = d.seconds[r]
                if d.now_ms - last_tick[r] >= tick_ms:
                    last_tick[r] = d.now_ms
                    t0 = clock()
                    rep.tick(d.now_ms)
                    sec["tick"] += clock() - t0
                inbox = d.inboxes[r]
                if inbox:
                    d.inboxes[r] = []
                    now = d.now_ms
                    step = rep.step
                    decode = d.decode
                    t0 = clock()
                    t_dec = 0.0
                    for frame in inbox:
                        t1 = clock()
                        batch = decode(frame)
                        t_dec += clock() - t1
                        for m in batch:
                            step(m, now)
                    sec["step"] += clock() - t0 - t_dec
                    sec["decode"] += t_dec
                t0 = clock()
                rd = rep.ready()
                sec["ready"] += clock() - t0
                carry_out(r, rd, d.storages[r], d)  # encode is timed in send()
                d.issue(r)
            if not measuring and d.completed >= spec.warmup:
                measuring = True
                start_round = rounds
                start_completed = d.completed
                d.limit = start_completed + spec.commands  # exactly ``commands`` measured
                for r in range(n):
                    d.seconds[r] = dict.fromkeys(TIMED_CALLS, 0.0)
            if measuring and measured_at is None and d.completed >= d.limit:
                measured_at = [dict(x) for x in d.seconds]
                measured_rounds = rounds - start_round
                measured = d.completed - start_completed
            if measured_at is not None and _settled(d):
                break
            idle_rounds = 0 if d.completed > before else idle_rounds + 1
            if idle_rounds > STUCK_ROUNDS and not _settled(d):
                d.problems.append(
                    f"stuck: no operation completed in {STUCK_ROUNDS} rounds;"
                    f" {d.completed}/{d.limit} completed, executed"
                    f" {[m.count for m in d.machines]} of {d.proposed} proposed"
                )
                break
            if progress is not None:
                now_wall = time.perf_counter()
                if now_wall - last_report >= 2.0:
                    last_report = now_wall
                    progress(f"  {spec.protocol}: {d.completed:,}/{d.limit:,} ops, round {rounds}")
    finally:
        if gc_was:
            gc.enable()
    res = RoundResult(spec, measured_at if measured_at is not None else d.seconds)
    res.measured = measured
    res.measured_rounds = measured_rounds
    res.rounds = rounds
    res.wall_s = time.perf_counter() - wall0
    res.proposed = d.proposed
    res.executed = [m.count for m in d.machines]
    res.digests = [m.digest() for m in d.machines]
    res.reads_ok = d.reads_ok
    res.reads_via_log = d.reads_via_log
    res.instances = len(d.instances)
    res.instance_commands = sum(d.instances.values())
    res.frames = d.frames
    res.wire_bytes = d.wire_bytes
    res.leaders = [getattr(rep, "sequencer", None) for rep in d.replicas]
    res.turns = turns
    res.problems = d.problems
    res.problems.extend(verify(d))
    return res


def _settled(d: _Driver) -> bool:
    """Every operation answered, and every replica executed every command proposed."""
    if d.completed < d.issued:
        return False
    return all(m.count >= d.proposed for m in d.machines)


def verify(d: _Driver) -> list[str]:
    problems: list[str] = []
    if d.completed != d.issued:
        problems.append(f"{d.completed} operations completed of {d.issued} issued")
    for r, m in enumerate(d.machines):
        if m.count != d.proposed:
            problems.append(f"replica {r} executed {m.count} commands, {d.proposed} were proposed")
    digests = {m.digest() for m in d.machines}
    if len(digests) > 1:
        problems.append(
            "executed sequences diverge: digests "
            + ", ".join(f"r{r}={m.digest()[:12]}" for r, m in enumerate(d.machines))
        )
    rejected = sum(int(getattr(getattr(rep, "stats", None), "rejected", 0)) for rep in d.replicas)
    if rejected:
        problems.append(f"{rejected} peer messages rejected in a fault-free run")
    return problems
