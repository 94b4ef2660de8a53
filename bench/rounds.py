"""A round-based in-memory driver for any protocol: batched throughput, its CPU and its bytes.

Why not the simulator: :class:`~sdpaxos.sim.cluster.SimCluster` hands a replica
one event at a time and drains its effects right away, so no protocol ever
batches there, and CPU per command measured in it is the unbatched cost. A
real node under load handles everything that arrived since its last turn and
then sends one batch; this driver does that, for every protocol by name
(:func:`sdpaxos.protocols.protocol`). It is the one in-memory driver of the
benchmarks: the throughput and straggler experiments run it as described
below, and ``python -m bench.core_micro`` (and ``bench.compaction``) runs it
for the SDPaxos core alone with ``kv=False`` (its fixed load of ``(client,
seq)`` writes on digests only), ``exact=True`` (exactly ``commands``
commands), ``round_ms=0`` with ``quiet_ticks`` (time stands still while the
cluster is busy) and the codec optional (without one the messages travel as
objects).

One run (:func:`run_rounds`):

* ``replicas`` replicas of the protocol, each with the benchmarks' state
  machine as the paper's in-memory key-value store
  (``bench.runtime_app.BenchLog(store=True)``; a put is one dict store).
* Closed-loop sessions, ``sessions`` per replica (or, with ``clients_at =
  "leader"``, all of them at the leader: the paper's Multi-Paxos throughput
  setup); each has one operation outstanding and issues its next one as soon
  as the answer comes back. Operations come from :class:`bench.workloads.OpStream`
  (read share, payload, conflict rate: the share of writes to one hot key). A
  write is ``propose(Wait.READY)`` of a put of its key (``Command.key`` names
  it, so EPaxos's interference and SDPaxos's read history see it) and completes
  at READY. A read uses the protocol's ``read()``: ``ok`` completes it, not
  ``ok`` sends a get through the log as a command (``Wait.EXECUTED``).
* Rounds: replicas in a seeded shuffled order; each decodes and steps every
  frame in its FIFO inbox, calls ``ready()`` once and carries the batch out with
  :func:`sdpaxos.sim.driver.carry_out`; its messages are grouped per destination
  and encoded with the protocol's codec (split at ``MESSAGES_PER_BATCH_MAX``),
  one frame per group, appended to the destination's inbox; a message sent to
  several peers is packed once (``encode_batch``'s ``packed``, as the runtime
  does). The next operations of the sessions that completed are proposed (or
  read) right after. A logical clock moves ``round_ms`` per round (and a
  ``tick_ms`` after a quiet round with ``quiet_ticks``); a replica ticks in
  its turn once the clock moved ``tick_ms`` since its last tick (and in its
  first turn if the clock moves every round), so heartbeats and leases work.
* ``slow = (replica, every)``: that replica takes its turn only every
  ``every``-th round (a straggler with a fraction of a CPU; its backlog waits
  in its inbox), and its CPU counts ``every`` times in the capacity.

CPU: the thread's CPU clock (``time.thread_time``) around each replica's
decoding of one round's frames, its stepping of their messages, its
``ready()`` (execution, hence the state machine, runs in it), the encoding of
its frames, its proposals of one turn (one interval), its reads of one turn
(another), and its ticks. A read of that clock costs 0.5 to 0.8 us of CPU
here, as much as a proposal, so nothing is timed per command or per frame.
The driver's own bookkeeping (building commands' payloads, matching the
executed payloads to their operations, counting bytes, folding the executed
payloads into the state machines' digests) is not charged; the state
machine's record of the order, one list append per command (13 ns,
``python -m timeit -s "o = []; p = b'x' * 24" "o.append(p)"``), is, inside
``ready()``, at every replica of every protocol alike. The garbage collector is off
during the run (a collection would be charged to whichever call triggers it;
:func:`drive` leaves it as it is: ``core_micro``'s ``--no-gc`` decides).
After ``warmup`` completed operations the counters restart; the window
closes when ``commands`` more completed.

Bytes: every frame a replica sends counts, with its length prefix
(:data:`sdpaxos.wire.framing.LENGTH_PREFIX_BYTES`), as egress of the sender and
ingress of the receiver; every client request counts as ingress of the replica
it is sent to and every answer as its egress, each sized as the runtime's
client frames carry it (:mod:`sdpaxos.runtime.frames`: a ``SUBMIT`` item, a
``READ``, a ``REPLY`` item). TCP/IP headers are not counted. From them,
:meth:`RoundResult.nic_capacity_per_s` is the capacity with ``nic_mbps`` each
way per replica (full duplex): the busiest link direction of any replica sets
it, as the busiest CPU sets the CPU capacity.

Verification (``problems``; a run with any is not a number): every payload is
unique (it holds its key and its operation's id), and the driver records, after
each turn and outside the timed code, which operation every replica executed,
in order. Then: every operation completed exactly once (``exact``: all of
them were issued); every replica executed as many commands as were proposed,
each at most once and none the driver did not propose; the state machines'
order digests are equal (the executed sequences are identical;
:data:`PER_KEY_ORDER` protocols, i.e. EPaxos: their order-free sums are, and
the subsequence of every key is identical, the order EPaxos guarantees for
interfering commands); the final key-value states are equal; no replica
rejected a peer message; and the run was not stuck (no operation completed
in :data:`STUCK_ROUNDS` rounds).

Experiments run their cells through :class:`ProtocolWorkers`: each protocol's
runs in one process of its own, kept for the whole experiment, as a replica
is a long-running process of one protocol.

The parts: :mod:`bench.round_spec` (the spec), :mod:`bench.round_outlet` (the
sessions and the links), :mod:`bench.round_result` (the result, the capacity
model and the checks); this module, the loop.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from bench.round_outlet import Driver
from bench.round_result import (
    BYTE_COUNTERS,
    RoundResult,
    agree,
    check_orders,
    nic_capacity,
    read_bytes,
    reply_bytes,
    submit_bytes,
)
from bench.round_spec import (
    HEARTBEATS_PER_LEASE,
    LAN_RTT_MS,
    NIC_MBPS_DEFAULT,
    PER_KEY_ORDER,
    STUCK_ROUNDS,
    RoundSpec,
    lease_overrides,
)
from bench.runtime_app import BenchLog
from sdpaxos.core.config import ClusterConfig
from sdpaxos.protocols import MakeReplica, protocol
from sdpaxos.sim.driver import carry_out

__all__ = [
    "BYTE_COUNTERS",
    "HEARTBEATS_PER_LEASE",
    "LAN_RTT_MS",
    "NIC_MBPS_DEFAULT",
    "PER_KEY_ORDER",
    "STUCK_ROUNDS",
    "Driver",
    "ProtocolWorkers",
    "RoundResult",
    "RoundSpec",
    "Watch",
    "agree",
    "check_orders",
    "drive",
    "lease_overrides",
    "nic_capacity",
    "read_bytes",
    "reply_bytes",
    "run_rounds",
    "run_with",
    "submit_bytes",
    "verify",
]

Progress = Callable[[str], None]


class Watch(Protocol):
    """Looks at a run as it goes (``python -m bench.core_micro``: wall-clock
    milestones, peak RSS, progress)."""

    def started(self, d: Driver) -> None:
        """The first operations are issued; the first round comes next."""

    def round_done(self, d: Driver, rounds: int) -> None:
        """Round ``rounds`` is over (every replica that runs in it had its turn)."""


class ProtocolWorkers:
    """Runs each protocol's rounds in a worker process of its own.

    Why: a process that has run other protocols' cells runs a protocol slower
    than one that has run only its own, and not every protocol alike. Measured
    at commit f8f9346 (stop 27), SDPaxos at 5 replicas, 16 B, 5 % conflict:
    0.93 to 1.08 ms of busiest-replica CPU per 1,000 commands in eight runs in
    a process of its own, 1.15 to 1.30 over the eleven runs of a full
    throughput run, where it followed a hundred cells of every protocol;
    EPaxos's cell took 1.74 to 2.10 alone and 1.81 to 2.04 there, so the ratio
    between them fell from about 1.9 to 1.55 (bench/README.md, throughput).

    One worker per protocol (a one-process pool of a spawned interpreter), kept until
    :meth:`close`: a protocol's cells run one after another in it, and the
    experiment still runs one cell at a time, in the order it chooses.
    ``isolated=False`` runs everything in this process instead (to profile
    a run, say).
    """

    def __init__(self, isolated: bool = True) -> None:
        self.isolated = isolated
        self._pools: dict[str, ProcessPoolExecutor] = {}

    def run(self, spec: RoundSpec, progress: Progress | None = None) -> RoundResult:
        """``run_rounds(spec, progress)`` in ``spec.protocol``'s worker:
        ``progress`` goes to it by pickling (a :class:`bench.common.Context`'s
        ``progress`` does: the worker prints on the same stderr and clock)."""
        return self._run(spec, progress)

    def warm_up(self, spec: RoundSpec) -> RoundResult:
        """Run ``spec`` in its protocol's worker, so that its heap has grown to
        that size before any measured run (no page faults of first touching
        memory in a measurement). Its figures are not a measurement."""
        return self._run(spec, None)

    def _run(self, spec: RoundSpec, progress: Progress | None) -> RoundResult:
        if not self.isolated:
            return run_rounds(spec, progress=progress)
        pool = self._pools.get(spec.protocol)
        if pool is None:
            pool = self._pools[spec.protocol] = ProcessPoolExecutor(1, mp_context=_mp_context())
        try:
            return pool.submit(run_rounds, spec, progress).result()
        except BrokenProcessPool as exc:
            self._pools.pop(spec.protocol, None)
            raise RuntimeError(
                f"the {spec.protocol} worker process died ({exc}). Called from a script?"
                " A spawned worker imports the script again: guard its top level with"
                ' `if __name__ == "__main__":`.'
            ) from exc

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        for pool in self._pools.values():
            pool.shutdown(cancel_futures=True)
        self._pools.clear()

    def __enter__(self) -> ProtocolWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _mp_context() -> Any:
    """Spawn: a fresh interpreter per worker. Not fork: forking a process that
    runs other threads (pytest's background TLC runs, an experiment's thread
    pool) can leave a lock held forever in the child; and a spawned worker's
    heap starts clean, not as a copy of the experiment's. It costs the
    worker's imports once: a tiny run took 0.24 s as a new worker's first and
    0.02 s after, here."""
    return multiprocessing.get_context("spawn")


def run_rounds(spec: RoundSpec, progress: Progress | None = None) -> RoundResult:
    """Run ``spec`` to completion and verify it (see the module docstring)."""
    proto = protocol(spec.protocol)
    return run_with(spec, proto.make_replica, proto.codec, progress)


def run_with(
    spec: RoundSpec, make: MakeReplica, codec: Any, progress: Progress | None = None
) -> RoundResult:
    """:func:`run_rounds` with the replicas and codec given (tests use doubles).

    The garbage collector is off during the run: a collection would be charged
    to whichever replica's call triggers it."""
    gc_was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        return drive(spec, make, codec, progress)[0]
    finally:
        if gc_was:
            gc.enable()


def drive(
    spec: RoundSpec,
    make: MakeReplica,
    codec: Any,
    progress: Progress | None = None,
    *,
    config: ClusterConfig | None = None,
    machine: Callable[[bool], Any] = BenchLog,
    watch: Watch | None = None,
) -> tuple[RoundResult, Driver]:
    """The loop: ``spec`` to completion, verified, with the garbage collector
    as the caller left it. ``config``: the cluster's (default
    :meth:`RoundSpec.cluster_config`); ``machine(store)`` builds each replica's
    state machine; ``codec`` None: messages travel as objects. Returns the
    result and the driver (its replicas and machines, to look at)."""
    if spec.clients_at not in ("all", "leader"):
        raise ValueError(f"clients_at must be 'all' or 'leader', got {spec.clients_at!r}")
    if spec.commands < 1 or spec.sessions < 1 or spec.warmup < 0:
        raise ValueError("commands and sessions must be >= 1, warmup >= 0")
    if not spec.nic_mbps > 0:
        raise ValueError(f"nic_mbps must be > 0, got {spec.nic_mbps}")
    if spec.read_pct and not spec.kv:
        raise ValueError("reads need the key-value workload (kv=True)")
    d = Driver(spec, make, codec, config, machine)
    n = d.n
    order = list(range(n))
    order_rng = random.Random(spec.seed)
    tick_ms = d.config.tick_ms
    slow_r, slow_every = spec.slow if spec.slow is not None else (-1, 1)
    # A clock that moves every round ticks every replica in its first turn; one
    # that stands still ticks a replica once a quiet round moved it.
    last_tick = [-tick_ms if spec.round_ms else 0.0] * n
    ticks = [0] * n
    turns = [0] * n
    d.load()
    d.restart_counters()  # warm-up (re)starts below
    measuring = spec.warmup == 0
    start_round = 0
    start_completed = 0
    measured = 0
    measured_at: tuple[list[dict[str, float]], list[dict[str, int]]] | None = None
    measured_rounds = 0
    rounds = 0
    idle_rounds = 0
    quiet_moves = 0
    clock = d.clock
    wall0 = time.perf_counter()
    last_report = wall0
    if watch is not None:
        watch.started(d)
    while True:
        rounds += 1
        d.now_ms = rounds * spec.round_ms + quiet_moves * tick_ms
        order_rng.shuffle(order)
        before = d.completed
        d.activity = 0
        for r in order:
            if r == slow_r and rounds % slow_every:
                continue
            turns[r] += 1
            rep = d.replicas[r]
            sec = d.seconds[r]
            if d.now_ms - last_tick[r] >= tick_ms:
                last_tick[r] = d.now_ms
                ticks[r] += 1
                t0 = clock()
                rep.tick(d.now_ms)
                sec["tick"] += clock() - t0
            inbox = d.inboxes[r]
            if inbox:
                d.inboxes[r] = []
                d.activity += 1
                now = d.now_ms
                step = rep.step
                decode = d.decode
                if decode is None:
                    t0 = clock()
                    for m in inbox:
                        step(m, now)
                    sec["step"] += clock() - t0
                    d.steps += len(inbox)
                else:
                    # Every frame decoded, then every message stepped: two
                    # clock reads in all, not two per frame (decoding is pure).
                    t0 = clock()
                    batches = [decode(frame) for frame in inbox]
                    t1 = clock()
                    for batch in batches:
                        for m in batch:
                            step(m, now)
                    sec["step"] += clock() - t1
                    sec["decode"] += t1 - t0
                    d.steps += sum(map(len, batches))
            t0 = clock()
            rd = rep.ready()
            sec["ready"] += clock() - t0
            carry_out(r, rd, d.storages[r], d)  # encode is timed in send()
            d.take_orders(r)
            d.issue(r)
        if watch is not None:
            watch.round_done(d, rounds)
        if not measuring and d.completed >= spec.warmup:
            measuring = True
            start_round = rounds
            start_completed = d.completed
            d.restart_counters()
        if measuring and measured_at is None and d.completed - start_completed >= spec.commands:
            measured_at = ([dict(x) for x in d.seconds], [dict(x) for x in d.bytes])
            measured_rounds = rounds - start_round
            measured = d.completed - start_completed
            d.limit = d.issued  # no new operations: the run drains
        if measured_at is not None and _settled(d):
            break
        idle_rounds = 0 if d.completed > before else idle_rounds + 1
        if idle_rounds > STUCK_ROUNDS:
            # Nothing completes any more: stuck, or (settled) nothing is
            # issued and the measured window can no longer close.
            d.problems.append(
                f"stuck: no operation completed in {STUCK_ROUNDS} rounds;"
                f" {d.completed}/{d.issued} completed, executed"
                f" {[m.applied for m in d.machines]} of {d.proposed} proposed,"
                f" {'the window closed' if measured_at else 'the window never closed'}"
            )
            break
        if spec.quiet_ticks and not d.activity:
            quiet_moves += 1
        if progress is not None:
            now_wall = time.perf_counter()
            if now_wall - last_report >= 2.0:
                last_report = now_wall
                target = spec.warmup + spec.commands
                progress(f"  {spec.protocol}: {d.completed:,}/{target:,} ops, round {rounds}")
    seconds, counted = measured_at if measured_at is not None else (d.seconds, d.bytes)
    res = RoundResult(spec, seconds, counted)
    res.measured = measured
    res.measured_rounds = measured_rounds
    res.rounds = rounds
    res.wall_s = time.perf_counter() - wall0
    res.problems = d.problems
    res.problems.extend(verify(d))  # folds the machines' digests first
    res.proposed = d.proposed
    res.executed = [m.applied for m in d.machines]
    res.digests = [m.digest() for m in d.machines]
    res.reads_ok = d.reads_ok
    res.reads_via_log = d.reads_via_log
    res.reads_checked = d.reads_checked
    res.instances = len(d.instances)
    res.instance_commands = sum(d.instances.values())
    res.frames = d.frames
    res.wire_bytes = d.wire_bytes
    res.codec_bytes = d.codec_bytes
    res.steps = d.steps
    res.messages_sent = d.sent
    res.persist_records = sum(storage.records for storage in d.storages)
    res.ticks = ticks
    res.write_payload_bytes = d.write_payload_sum / d.writes if d.writes else 0.0
    res.leaders = [getattr(rep, "sequencer", None) for rep in d.replicas]
    res.turns = turns
    res.pid = os.getpid()
    return res, d


def _settled(d: Driver) -> bool:
    """Every operation answered, and every replica executed every command proposed."""
    if d.completed < d.issued:
        return False
    return all(m.applied >= d.proposed for m in d.machines)


def verify(d: Driver) -> list[str]:
    """Everything the module docstring promises about a run; what failed, in words."""
    problems: list[str] = []
    spec = d.spec
    if d.completed != d.issued:
        problems.append(f"{d.completed} operations completed of {d.issued} issued")
    target = spec.warmup + spec.commands
    if spec.exact and d.issued != target:
        problems.append(f"{d.issued} operations issued, expected {target}")
    if d.stale_reads:
        problems.append(
            f"{d.stale_reads} of {d.reads_checked} reads missed a completed write;"
            f" {d.stale_example}"
        )
    for r in range(d.n):
        d.take_orders(r)  # and the machines fold their digests
    per_key = spec.protocol in PER_KEY_ORDER
    machines = d.machines
    digests = [f"{m.total:032x}" if per_key else m.digest() for m in machines]
    what = "executed command sets" if per_key else "executed sequences"
    problems += agree(d.proposed, [m.applied for m in machines], digests, what)
    if d.kv:
        problems += check_orders(d.orders, d.id_keys, per_key)
        data0 = machines[0].data
        for r, m in enumerate(machines[1:], start=1):
            if m.data != data0:
                keys = data0.keys() | m.data.keys()
                diff = sum(1 for k in keys if data0.get(k) != m.data.get(k))
                problems.append(
                    f"replica {r}'s key-value state differs from replica 0's: {diff} keys"
                )
    rejected = sum(int(getattr(getattr(rep, "stats", None), "rejected", 0)) for rep in d.replicas)
    if rejected:
        problems.append(f"{rejected} peer messages rejected in a fault-free run")
    return problems
