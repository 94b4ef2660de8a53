"""Micro-benchmark of the SDPaxos core alone: one process, no I/O, no clock in the core.

What runs
---------

An N-replica cluster of :class:`sdpaxos.core.Replica` objects (N = 3 by
default) in one process. Every replica hosts ``--sessions`` closed-loop client
sessions, each with exactly one command outstanding: the moment a command's
READY reply comes back from its command leader, the session proposes its next
command (until ``--commands`` have been proposed in total). Replicas are
serviced in rounds, in an order shuffled by ``--seed`` each round; servicing a
replica means stepping every message in its inbox (a *step batch*), calling
:meth:`Replica.ready` once and carrying out the batch with the shared in-memory
driver (:func:`sdpaxos.sim.driver.carry_out`): counting the records to persist
(kept nowhere: the benchmark measures the core, not storage), appending each
outgoing message to the destination's FIFO inbox, and proposing the follow-up
commands of the sessions whose commands became ready. Nothing is lost, duplicated or
reordered per link, so :meth:`Replica.tick` is never needed; it is called only
as a fallback when the cluster goes quiet before finishing (counted as
``ticks``; a healthy run shows 0).

With ``--codec`` every ready batch is encoded per destination with
:func:`sdpaxos.wire.codec.encode_batch` (split at ``MESSAGES_PER_BATCH_MAX``;
a message sent to several peers is packed once, as the runtime does) and
decoded with :func:`~sdpaxos.wire.codec.decode_batch` at delivery.

What it reports (per run; the table shows the median of ``--repeat`` runs and
the best, after one untimed warm-up run of ``--warmup`` commands):

* messages stepped / s: calls to :meth:`Replica.step` per wall second;
* commands committed / s: READY replies at the command leaders, over the time
  until the last one;
* commands executed / s: per replica, commands applied to that replica's state
  machine over the time until it had applied all of them, and "everywhere":
  the total over the time until the slowest replica had applied all of them.

Correctness, checked after every run (exit status 1 if any check fails): every
command got exactly one READY reply at its leader, every replica applied
exactly ``--commands`` commands, every replica's state-machine digest (BLAKE2b
over the payloads in execution order) is the same, and no replica rejected a
peer message.

Run ``python -m bench.core_micro --help`` (from the repository root) for the knobs.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import resource
import statistics
import struct
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sdpaxos.core import ClusterConfig, Command, Message, Record, Replica, Reply, ReplyKind
from sdpaxos.core.storage import MemoryStorage, Snapshot
from sdpaxos.sim.driver import Node, Outlet

if TYPE_CHECKING:  # the codec itself is imported only with --codec
    from sdpaxos.wire.codec import PackedMessages

_CORE_DEFAULTS = ClusterConfig(replicas=3)

#: Consecutive quiet rounds (nothing stepped, sent or proposed) tolerated, each
#: followed by one tick of every replica, before the run is declared stuck.
QUIET_ROUNDS_MAX = 1000

#: Payload of a command: ``(client_id, seq)``, fixed width so that the digest of
#: the concatenated payloads names the execution order unambiguously.
_PAYLOAD = struct.Struct(">IQ")

_RESULT = b"ok"


class DigestMachine:
    """Deterministic state machine: a BLAKE2b chain over the applied payloads.

    Chained (each step hashes the previous digest with the payload), not one
    running hash object, so that its state is bytes a snapshot can carry.
    """

    __slots__ = ("_state", "count")

    def __init__(self) -> None:
        self.count = 0
        self._state = b""

    def apply(self, payload: bytes) -> bytes:
        self.count += 1
        self._state = hashlib.blake2b(self._state + payload, digest_size=16).digest()
        return _RESULT

    def digest(self) -> str:
        return self._state.hex()

    def snapshot(self) -> bytes:
        return self.count.to_bytes(8, "big") + self._state

    def restore(self, data: bytes) -> None:
        self.count = int.from_bytes(data[:8], "big")
        self._state = data[8:]


@dataclass(frozen=True, slots=True)
class Settings:
    """One benchmark configuration (the CLI knobs)."""

    replicas: int = 3
    sessions: int = 2000
    commands: int = 200_000
    c_batch_max: int = _CORE_DEFAULTS.c_batch_max
    o_batch_max: int = _CORE_DEFAULTS.o_batch_max
    c_inflight_max: int = _CORE_DEFAULTS.c_inflight_max
    seed: int = 1
    codec: bool = False
    #: Compaction: a snapshot every this many executed slots (None: off).
    snapshot_slots: int | None = None
    #: Also tick every this many rounds (0: only in quiet rounds). Heartbeats carry
    #: the majority-executed point compaction waits for, so a run under constant
    #: load that never goes quiet needs the clock to move.
    tick_rounds: int = 0
    #: Where records go: "counting" (counted, kept nowhere) or "memory"
    #: (``MemoryStorage``: kept, and truncated behind each snapshot).
    storage: str = "counting"
    #: Record the process's peak RSS when this many commands are READY.
    rss_at: tuple[int, ...] = ()
    #: The sequencer's heartbeat period (and lease), None: the core's default.
    #: Heartbeats announce the majority-executed point, so this sets how often
    #: compaction can happen.
    heartbeat_ms: float | None = None

    def cluster_config(self) -> ClusterConfig:
        return ClusterConfig(
            replicas=self.replicas,
            c_batch_max=self.c_batch_max,
            o_batch_max=self.o_batch_max,
            c_inflight_max=self.c_inflight_max,
            propose_queue_max=max(_CORE_DEFAULTS.propose_queue_max, self.sessions),
            snapshot_slots_min=self.snapshot_slots,
            **(
                {"heartbeat_ms": self.heartbeat_ms, "lease_ms": self.heartbeat_ms}
                if self.heartbeat_ms is not None
                else {}
            ),
        )


@dataclass(slots=True)
class RunResult:
    """What one run measured and what its verification found."""

    settings: Settings
    #: Until every command is READY at its leader and executed at every replica.
    elapsed_s: float = 0.0
    #: Process CPU time over the same span (the "one core" time).
    cpu_s: float = 0.0
    #: ``cpu_s / elapsed_s``; well below 1 means the machine was busy.
    cpu_share: float = 0.0
    #: Until the last READY reply.
    commit_elapsed_s: float = 0.0
    #: Per replica: until it had executed every command.
    exec_elapsed_s: list[float] = field(default_factory=list)
    steps: int = 0
    rounds: int = 0
    ready_calls: int = 0
    messages_sent: int = 0
    frames: int = 0
    wire_bytes: int = 0
    persist_records: int = 0
    c_instances: int = 0
    o_instances: int = 0
    ticks: int = 0
    committed: int = 0
    executed: list[int] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    rejected: int = 0
    stale: int = 0
    retransmissions: int = 0
    learn_requests: int = 0
    #: Snapshots taken, over every replica.
    snapshots: int = 0
    #: READY commands -> the process's peak RSS (kB) once that many were READY.
    rss_peak_kb: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def committed_per_s(self) -> float:
        return self.committed / self.commit_elapsed_s if self.commit_elapsed_s > 0 else 0.0

    @property
    def executed_per_s(self) -> list[float]:
        return [
            c / t if t > 0 else 0.0 for c, t in zip(self.executed, self.exec_elapsed_s, strict=True)
        ]

    @property
    def executed_everywhere_per_s(self) -> float:
        slowest = max(self.exec_elapsed_s, default=0.0)
        return min(self.executed, default=0) / slowest if slowest > 0 else 0.0

    def rates(self) -> dict[str, float]:
        per_cpu = 1 / self.cpu_s if self.cpu_s > 0 else 0.0
        return {
            "steps_per_s": self.steps_per_s,
            "committed_per_s": self.committed_per_s,
            "executed_everywhere_per_s": self.executed_everywhere_per_s,
            # Whole run (until executed everywhere) over process CPU time: what one
            # core does when the benchmark is not descheduled by other load.
            "steps_per_cpu_s": self.steps * per_cpu,
            "commands_per_cpu_s": self.committed * per_cpu,
            **{f"executed_per_s_r{r}": v for r, v in enumerate(self.executed_per_s)},
        }

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            name: getattr(self, name) for name in self.__slots__ if name != "settings"
        }
        out.update(self.rates())
        out["ok"] = self.ok
        return out


def verify(
    total: int,
    committed: int,
    executed: Sequence[int],
    digests: Sequence[str],
    rejected: int,
) -> list[str]:
    """The correctness checks of one run; an empty list means it passed."""
    problems: list[str] = []
    if committed != total:
        problems.append(f"{committed} commands READY at their leaders, expected {total}")
    for r, count in enumerate(executed):
        if count != total:
            problems.append(f"replica {r} executed {count} commands, expected {total}")
    if len(set(digests)) > 1:
        problems.append(
            "replicas diverged: state-machine digests "
            + ", ".join(f"r{r}={d}" for r, d in enumerate(digests))
        )
    if rejected:
        problems.append(f"{rejected} peer messages rejected in a fault-free run")
    return problems


def _load_codec() -> tuple[
    Callable[[list[Message], PackedMessages], bytes], Callable[[bytes], list[Message]], int
]:
    from sdpaxos.wire import codec

    return codec.encode_batch, codec.decode_batch, codec.MESSAGES_PER_BATCH_MAX


def codec_unavailable_reason() -> str | None:
    """``None`` if ``sdpaxos.wire.codec`` imports, else why not (absent or broken)."""
    try:
        _load_codec()
    except Exception as exc:  # ImportError if absent; anything if mid-edit
        return f"{type(exc).__name__}: {exc}"
    return None


def codec_available() -> bool:
    return codec_unavailable_reason() is None


class CountingStorage:
    """Counts the records a batch asks to persist and keeps none of them.

    The benchmark measures the core, not storage; the durability order is still
    the shared driver's (:func:`sdpaxos.sim.driver.carry_out`).
    """

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records = 0

    def append(self, records: list[Record]) -> None:
        self.records += len(records)

    def load(self) -> list[Record]:
        return []

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Nothing is kept, so nothing is truncated."""

    def load_snapshot(self) -> Snapshot | None:
        return None


class KeepingStorage(MemoryStorage):
    """``MemoryStorage`` (records kept, truncated behind each snapshot), counting appends."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        super().__init__()
        self.records = 0

    def append(self, records: list[Record]) -> None:
        self.records += len(records)
        super().append(records)


def peak_rss_kb() -> int:
    """The process's peak resident set size so far (``VmHWM``, kB; Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class _Loop(Outlet):
    """Where the replicas' batches go: FIFO inboxes, and the closed-loop sessions.

    ``activity`` counts the batches that sent or answered something (the quiet
    detection of :func:`run_once`).
    """

    __slots__ = (
        "activity",
        "committed",
        "inboxes",
        "nodes",
        "outstanding",
        "problems",
        "remaining",
        "sent",
    )

    def __init__(
        self,
        nodes: list[Node[DigestMachine]],
        outstanding: list[int],
        remaining: int,
        problems: list[str],
    ) -> None:
        self.nodes = nodes
        self.inboxes: list[list[Any]] = [[] for _ in nodes]
        self.outstanding = outstanding
        self.remaining = remaining
        self.problems = problems
        self.activity = 0
        self.committed = 0
        self.sent = 0

    def send(self, replica: int, messages: list[tuple[int, Message]]) -> bool:
        if messages:
            self.sent += len(messages)
            self.activity += 1
            inboxes = self.inboxes
            for dst, m in messages:
                inboxes[dst].append(m)
        return False

    def replies(self, replica: int, replies: list[Reply]) -> None:
        self.activity += 1
        outstanding = self.outstanding
        propose = self.nodes[replica].replica.propose
        pack = _PAYLOAD.pack
        ready_kind = ReplyKind.READY
        committed = self.committed  # locals in the per-reply loop, stored back below
        remaining = self.remaining
        for reply in replies:
            cid = reply.client_id
            seq = reply.seq
            if reply.kind != ready_kind or outstanding[cid] != seq:
                self.problems.append(f"unexpected reply {reply!r} at replica {replica}")
                continue
            committed += 1
            if remaining:
                remaining -= 1
                seq += 1
                outstanding[cid] = seq
                propose(Command(cid, seq, pack(cid, seq)))
            else:
                outstanding[cid] = 0
        self.committed = committed
        self.remaining = remaining


class _CodecLoop(_Loop):
    """:class:`_Loop` with every batch encoded per destination and counted on the wire."""

    __slots__ = ("batch_max", "encode_batch", "frames", "wire_bytes")

    def __init__(
        self,
        nodes: list[Node[DigestMachine]],
        outstanding: list[int],
        remaining: int,
        problems: list[str],
        encode_batch: Callable[[list[Message], PackedMessages], bytes],
        batch_max: int,
    ) -> None:
        super().__init__(nodes, outstanding, remaining, problems)
        self.encode_batch = encode_batch
        self.batch_max = batch_max
        self.frames = 0
        self.wire_bytes = 0

    def send(self, replica: int, messages: list[tuple[int, Message]]) -> bool:
        if not messages:
            return False
        self.sent += len(messages)
        self.activity += 1
        per_dst: dict[int, list[Message]] = {}
        for dst, m in messages:
            bucket = per_dst.get(dst)
            if bucket is None:
                per_dst[dst] = [m]
            else:
                bucket.append(m)
        encode_batch = self.encode_batch
        batch_max = self.batch_max
        inboxes = self.inboxes
        packed: PackedMessages = {}  # a broadcast is packed once, as the runtime does
        for dst, bucket in per_dst.items():
            for lo in range(0, len(bucket), batch_max):
                frame = encode_batch(bucket[lo : lo + batch_max], packed)
                self.frames += 1
                self.wire_bytes += len(frame)
                inboxes[dst].append(frame)
        return False


def run_once(settings: Settings, progress: Callable[[str], None] | None = None) -> RunResult:
    """Build a fresh cluster, run ``settings.commands`` commands to completion, verify."""
    s = settings
    if s.commands < 1 or s.sessions < 1:
        raise ValueError("commands and sessions must be >= 1")
    n = s.replicas
    cfg = s.cluster_config()
    storages: list[CountingStorage | KeepingStorage] = [
        KeepingStorage() if s.storage == "memory" else CountingStorage() for _ in range(n)
    ]
    nodes: list[Node[DigestMachine]] = []
    for r in range(n):
        machine = DigestMachine()
        replica = Replica(cfg, r, machine, rng=random.Random(s.seed * 1_000_003 + r))
        nodes.append(Node(r, replica, storages[r], machine))
    machines = [node.machine for node in nodes]
    order_rng = random.Random(s.seed)
    res = RunResult(settings=s)
    problems = res.problems

    total = s.commands
    pack = _PAYLOAD.pack
    # Session ``cid`` (1-based, unique cluster-wide) lives at replica
    # ``(cid - 1) // sessions``; ``outstanding[cid]`` is its command in flight.
    outstanding = [0] * (n * s.sessions + 1)
    order = list(range(n))

    # Initial load: one command per session, dealt round-robin over the replicas
    # so that a small --commands still loads every replica.
    remaining = total
    for i in range(s.sessions):
        for r in range(n):
            if not remaining:
                break
            cid = r * s.sessions + i + 1
            outstanding[cid] = 1
            nodes[r].replica.propose(Command(cid, 1, pack(cid, 1)))
            remaining -= 1

    loop: _Loop
    decode_batch: Callable[[bytes], list[Message]] | None = None
    if s.codec:
        encode_batch, decode_batch, batch_max = _load_codec()
        loop = _CodecLoop(nodes, outstanding, remaining, problems, encode_batch, batch_max)
    else:
        loop = _Loop(nodes, outstanding, remaining, problems)
    inboxes = loop.inboxes

    milestones = sorted(m for m in s.rss_at if m <= total)
    perf = time.perf_counter
    cpu0 = time.process_time()
    t0 = perf()
    last_progress = t0
    exec_done: list[float | None] = [None] * n
    commit_done: float | None = None
    steps = 0
    rounds = 0
    ticks = 0
    quiet = 0

    while True:
        rounds += 1
        order_rng.shuffle(order)
        loop.activity = 0
        for r in order:
            node = nodes[r]
            inbox = inboxes[r]
            if inbox:
                inboxes[r] = []
                step = node.replica.step
                now_ms = ticks * cfg.tick_ms  # the logical clock (see the ticks below)
                if decode_batch is None:
                    for m in inbox:
                        step(m, now_ms)
                    steps += len(inbox)
                else:
                    for frame in inbox:
                        batch = decode_batch(frame)
                        for m in batch:
                            step(m, now_ms)
                        steps += len(batch)
                loop.activity += 1
            # ready() once; records counted, messages to the inboxes, replies to
            # the sessions (which propose their next commands).
            node.flush(loop)

        committed = loop.committed
        now = perf()
        if commit_done is None and committed >= total:
            commit_done = now
        finished = commit_done is not None
        for r in range(n):
            if exec_done[r] is None:
                if machines[r].count >= total:
                    exec_done[r] = now
                else:
                    finished = False
        if finished or problems:
            break
        while milestones and committed >= milestones[0]:
            res.rss_peak_kb[milestones.pop(0)] = peak_rss_kb()
        if s.tick_rounds and rounds % s.tick_rounds == 0:
            ticks += 1
            for node in nodes:
                node.replica.tick(ticks * cfg.tick_ms)
        if loop.activity:
            quiet = 0
        else:
            quiet += 1
            if quiet > QUIET_ROUNDS_MAX:
                problems.append(
                    f"stuck: {QUIET_ROUNDS_MAX} quiet rounds with ticks, "
                    f"{committed}/{total} READY, executed {[m.count for m in machines]}"
                )
                break
            ticks += 1
            for node in nodes:
                node.replica.tick(ticks * cfg.tick_ms)  # a logical clock: one tick per quiet round
        if progress is not None and now - last_progress >= 1.0:
            last_progress = now
            progress(
                f"  {committed:>10,}/{total:,} READY, "
                f"executed min {min(m.count for m in machines):,}, "
                f"{committed / (now - t0):,.0f} cmd/s, {steps / (now - t0):,.0f} steps/s"
            )

    end = perf()
    cpu = time.process_time() - cpu0
    res.elapsed_s = end - t0
    res.cpu_s = cpu
    res.cpu_share = cpu / res.elapsed_s if res.elapsed_s > 0 else 0.0
    res.commit_elapsed_s = (commit_done if commit_done is not None else end) - t0
    res.exec_elapsed_s = [(t if t is not None else end) - t0 for t in exec_done]
    res.steps = steps
    res.rounds = rounds
    res.ready_calls = rounds * n
    res.messages_sent = loop.sent
    if isinstance(loop, _CodecLoop):
        res.frames = loop.frames
        res.wire_bytes = loop.wire_bytes
    res.persist_records = sum(storage.records for storage in storages)
    if total in milestones:
        res.rss_peak_kb[total] = peak_rss_kb()
    res.ticks = ticks
    res.committed = loop.committed
    res.executed = [m.count for m in machines]
    res.digests = [m.digest() for m in machines]
    for node in nodes:
        st = node.replica.stats
        res.c_instances += st.c_instances_started
        res.o_instances += st.o_instances_allocated
        res.rejected += st.rejected
        res.stale += st.stale
        res.retransmissions += st.retransmissions
        res.learn_requests += st.learn_requests
        res.snapshots += st.snapshots_taken
    problems.extend(verify(total, loop.committed, res.executed, res.digests, res.rejected))
    return res


@dataclass(slots=True)
class Summary:
    settings: Settings
    repeat: int
    warmup: int
    gc_enabled: bool
    runs: list[RunResult]
    warmup_problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.warmup_problems and all(r.ok for r in self.runs)

    def stat(self, pick: Callable[[list[float]], float]) -> dict[str, float]:
        keys = self.runs[0].rates().keys()
        return {k: pick([r.rates()[k] for r in self.runs]) for k in keys}

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": "core_micro",
            "python": sys.version.split()[0],
            "settings": asdict(self.settings),
            "repeat": self.repeat,
            "warmup_commands": self.warmup,
            "gc_enabled": self.gc_enabled,
            "statistic": "median",
            "median": self.stat(statistics.median),
            "best": self.stat(max),
            "worst": self.stat(min),
            "ok": self.ok,
            "warmup_problems": self.warmup_problems,
            "runs": [r.to_json() for r in self.runs],
        }


def run_benchmark(
    settings: Settings,
    *,
    repeat: int = 5,
    warmup: int = 20_000,
    gc_enabled: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Summary:
    """One untimed warm-up run of ``warmup`` commands, then ``repeat`` timed runs."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    if warmup > 0:
        if progress is not None:
            progress(f"warm-up: {warmup:,} commands")
        warmup_problems = run_once(replace(settings, commands=warmup)).problems
    else:
        warmup_problems = []
    runs: list[RunResult] = []
    for i in range(repeat):
        if progress is not None:
            progress(f"run {i + 1}/{repeat}: {settings.commands:,} commands")
        gc.collect()
        was_enabled = gc.isenabled()
        if not gc_enabled:
            gc.disable()
        try:
            result = run_once(settings, progress)
        finally:
            if was_enabled:
                gc.enable()
        runs.append(result)
        if progress is not None:
            progress(
                f"  done in {result.elapsed_s:.3f} s: {result.committed_per_s:,.0f} committed/s, "
                f"{result.executed_everywhere_per_s:,.0f} executed/s, "
                f"{result.steps_per_s:,.0f} steps/s" + ("" if result.ok else "  FAILED")
            )
    return Summary(settings, repeat, warmup, gc_enabled, runs, warmup_problems)


def format_table(summary: Summary) -> str:
    s = summary.settings
    med, best, worst = (
        summary.stat(statistics.median),
        summary.stat(max),
        summary.stat(min),
    )
    lines = [
        "sdpaxos core micro-benchmark (one process, in-memory FIFO links, "
        + ("wire codec in the loop)" if s.codec else "no codec)"),
        f"  N={s.replicas}  sessions/replica={s.sessions:,}  commands={s.commands:,}  "
        f"c_batch_max={s.c_batch_max}  o_batch_max={s.o_batch_max}  "
        f"c_inflight_max={s.c_inflight_max}  seed={s.seed}",
        f"  Python {sys.version.split()[0]}, gc {'on' if summary.gc_enabled else 'off'}, "
        f"{summary.repeat} timed run(s) after a {summary.warmup:,}-command warm-up; "
        "median reported",
        "",
        f"  {'metric':<36}{'median':>14}{'best':>14}{'worst':>14}",
    ]

    def row(label: str, key: str) -> None:
        lines.append(f"  {label:<36}{med[key]:>14,.0f}{best[key]:>14,.0f}{worst[key]:>14,.0f}")

    row("messages stepped / s", "steps_per_s")
    row("commands committed (READY) / s", "committed_per_s")
    row("commands executed / s, everywhere", "executed_everywhere_per_s")
    for r in range(s.replicas):
        row(f"  executed / s at replica {r}", f"executed_per_s_r{r}")
    row("messages stepped / CPU s", "steps_per_cpu_s")
    row("commands done / CPU s", "commands_per_cpu_s")

    first = summary.runs[0]
    per_c = first.committed / first.c_instances if first.c_instances else 0.0
    shares = ", ".join(f"{r.cpu_share:.0%}" for r in summary.runs)
    lines += [
        "",
        f"  per run: {first.steps:,} steps in {first.rounds:,} rounds "
        f"({first.steps / max(first.ready_calls, 1):.1f} msgs per step batch, "
        f"{first.steps / max(first.committed, 1):.3f} per command), ticks {first.ticks}",
        f"           {first.c_instances:,} C-instances ({per_c:.1f} commands each), "
        f"{first.o_instances:,} O-instances, {first.persist_records:,} records to persist",
        f"  CPU share of wall time per run: {shares} (low = the machine was busy; "
        "the / CPU s rows discount that)",
    ]
    if s.codec:
        lines.append(
            f"  wire: {first.frames:,} frames, {first.wire_bytes:,} bytes "
            f"({first.wire_bytes / max(first.committed, 1):.1f} bytes per command)"
        )
    if summary.ok:
        lines.append(
            f"  verified: every run, all {s.replicas} replicas executed all "
            f"{s.commands:,} commands, same digest {first.digests[0]}"
        )
    else:
        lines += [f"  FAILED: {problem}" for problem in all_problems(summary)]
    return "\n".join(lines)


def all_problems(summary: Summary) -> list[str]:
    """Every failed check of the warm-up and the timed runs, labelled."""
    out = [f"warm-up: {p}" for p in summary.warmup_problems]
    for i, run in enumerate(summary.runs):
        out += [f"run {i + 1}: {p}" for p in run.problems]
    return out


def _code_names() -> dict[int, str]:
    """Qualified names of the methods of every class in sdpaxos and this module.

    Dataclass-generated ``__init__`` methods all live in ``<string>`` line 2, so
    :mod:`pstats` merges them into one row (and keeps only one of them); keying
    the raw profiler entries by code object and naming them here keeps
    ``Command.__init__`` apart from ``Reply.__init__``. Keys are ``id(code)``:
    code objects compare by value, and ``CAccept`` and ``CCommit`` (same fields)
    have equal ``__init__`` code.
    """
    names: dict[int, str] = {}
    for mod_name, module in list(sys.modules.items()):
        if module is None or not (mod_name.startswith("sdpaxos") or mod_name == __name__):
            continue
        for obj in list(vars(module).values()):
            if not isinstance(obj, type):
                continue
            for attr, value in vars(obj).items():
                code = getattr(value, "__code__", None)
                if code is not None:
                    names.setdefault(id(code), f"{obj.__qualname__}.{attr}")
    return names


def print_profile(
    settings: Settings, top: int, *, gc_enabled: bool = True, file: Any = None
) -> None:
    """Run once under :mod:`cProfile`; print the ``top`` functions by own time.

    Cyclic-GC pauses are charged to whatever function allocated when a
    collection started; compare with ``--no-gc`` to see how much that is.
    """
    import cProfile

    out = file if file is not None else sys.stderr
    gc.collect()
    was_enabled = gc.isenabled()
    if not gc_enabled:
        gc.disable()
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        result = run_once(settings)
    finally:
        profiler.disable()
        if was_enabled:
            gc.enable()
    names = _code_names()
    rows: dict[int, list[Any]] = {}
    for entry in profiler.getstats():
        code = entry.code
        row = rows.get(id(code))
        if row is None:
            if isinstance(code, str):
                label = code
            else:
                where = code.co_filename.split("/sdpaxos/")[-1].split("/bench/")[-1]
                name = names.get(id(code), code.co_qualname)
                label = f"{name} ({where}:{code.co_firstlineno})"
            row = rows[id(code)] = [label, 0, 0.0, 0.0]
        row[1] += entry.callcount
        row[2] += entry.inlinetime
        row[3] += entry.totaltime
    total = sum(row[2] for row in rows.values())
    print(
        f"cProfile of one run ({result.committed:,} commands, {total:.3f} s profiled, "
        f"gc {'on' if gc_enabled else 'off'}; profiling inflates call-heavy code: "
        "read shares, not rates):",
        file=out,
    )
    print(f"  {'own %':>6} {'cum %':>6} {'calls':>10}  function", file=out)
    for label, calls, own, cum in sorted(rows.values(), key=lambda r: r[2], reverse=True)[:top]:
        print(
            f"  {100 * own / total:6.1f} {100 * cum / total:6.1f} {calls:>10,}  {label}",
            file=out,
        )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    d = Settings()
    p = argparse.ArgumentParser(
        prog="python -m bench.core_micro",
        description="Micro-benchmark of the SDPaxos core: in-memory cluster, closed-loop load.",
    )
    p.add_argument("--replicas", type=_positive, default=d.replicas, help="N (odd; default 3)")
    p.add_argument(
        "--sessions", type=_positive, default=d.sessions, help="closed-loop sessions per replica"
    )
    p.add_argument(
        "--commands", type=_positive, default=d.commands, help="commands to commit in total"
    )
    p.add_argument("--c-batch-max", type=_positive, default=d.c_batch_max)
    p.add_argument("--o-batch-max", type=_positive, default=d.o_batch_max)
    p.add_argument("--c-inflight-max", type=_positive, default=d.c_inflight_max)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--codec", action="store_true", help="encode/decode every batch with sdpaxos.wire.codec"
    )
    p.add_argument("--repeat", type=_positive, default=5, help="timed runs (median reported)")
    p.add_argument(
        "--warmup", type=_non_negative, default=20_000, help="commands of the untimed warm-up run"
    )
    p.add_argument("--no-gc", action="store_true", help="disable the cyclic GC in timed runs")
    p.add_argument(
        "--profile",
        type=_non_negative,
        default=0,
        metavar="TOP",
        help="after the timed runs, run once more under cProfile and print the TOP "
        "functions by own time to stderr",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = codec_unavailable_reason() if args.codec else None
    if reason is not None:
        print(
            f"--codec: sdpaxos.wire.codec is not usable ({reason}); codec mode skipped",
            file=sys.stderr,
        )
        return 2
    settings = Settings(
        replicas=args.replicas,
        sessions=args.sessions,
        commands=args.commands,
        c_batch_max=args.c_batch_max,
        o_batch_max=args.o_batch_max,
        c_inflight_max=args.c_inflight_max,
        seed=args.seed,
        codec=args.codec,
    )
    try:
        settings.cluster_config()
    except ValueError as exc:
        print(f"bad settings: {exc}", file=sys.stderr)
        return 2

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    summary = run_benchmark(
        settings,
        repeat=args.repeat,
        warmup=args.warmup,
        gc_enabled=not args.no_gc,
        progress=None if args.quiet else progress,
    )
    if args.profile:
        print_profile(settings, args.profile, gc_enabled=not args.no_gc)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print(format_table(summary))
    if not summary.ok:
        for problem in all_problems(summary):
            print(f"FAILED {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
