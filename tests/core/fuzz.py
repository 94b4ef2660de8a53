"""A seeded fuzzer over the explicit-delivery harness, and reusable history checkers.

Why: the recovery code is exercised by hand-written scenarios, each one an
interleaving somebody thought of. This fuzzer picks the interleaving itself:
every step it delivers ANY pending message (not FIFO), drops or duplicates one,
ticks one replica or all, proposes (clients retry at another replica), crashes
(at most F down), restarts from storage, hands the sequencer role over, or
reads. After every step :class:`HistoryChecker` judges what a driver can see.

Three layers, so the fuzzer can be pointed at a redesigned core:

* :class:`HarnessAdapter`: the only code that touches the harness (``Net``) or
  the core. Messages are chosen by type name, source and destination only,
  never by field values.
* :class:`HistoryChecker`: agreement, integrity, real-time order, READY
  durability, read freshness, alarm counters. It is fed plain events.
* :func:`run_seed` / :func:`replay`: the engine. A run is a pure function of
  ``(n, seed, steps)``, and the action list it records replays without the
  seed (actions name messages as "the k-th pending message of this type from
  src to dst"), so a trace can be cut down by hand and replayed.

Replay a failure: ``python -m tests.core.fuzz --n 3 --seed 17`` (prints the
trace), or ``FUZZ_N=3 FUZZ_SEED=17 python -m pytest tests/core/test_fuzz.py -k
replay``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sdpaxos.core import (
    Command,
    Executed,
    LocalProtocolError,
    MemoryStorage,
    Overloaded,
    Reply,
    Wait,
)
from tests.core.harness import Net, uniform_rtt_ms

#: (client_id, seq): what identifies a command for exactly-once execution.
CommandId = tuple[int, int]
#: What must agree across replicas at one position of the executed sequence.
ExecKey = tuple[int, int, int, int, int]

KEYS: tuple[bytes, ...] = (b"a", b"b", b"c")


class FuzzViolation(AssertionError):
    """A checked property failed; the message says which, with the replay recipe."""


# --------------------------------------------------------------------------- checker


@dataclass
class _Log:
    """One incarnation of one replica: what it executed, in order."""

    replica: int
    incarnation: int
    length: int = 0
    applied: set[CommandId] = field(default_factory=set)


class HistoryChecker:
    """Judges a run from the outside, event by event (no core internals).

    Inputs are plain events: proposals, replies, executed commands (per
    incarnation of a replica), read requests and read results, and alarm
    counters. Time is the caller's step counter: "a before b" means an event
    with a smaller counter. :meth:`violations` lists what failed; the engine
    stops at the first one.
    """

    def __init__(self) -> None:
        #: The union of every executed log: each log must be a prefix of it.
        self.reference: list[ExecKey] = []
        #: Which log first wrote each reference position (for the report).
        self.reference_from: list[str] = []
        self.logs: dict[tuple[int, int], _Log] = {}
        self.proposed: dict[CommandId, Command] = {}
        self.first_proposed: dict[CommandId, int] = {}
        #: (time, command) for every first READY (or EXECUTED) answer, in time order.
        self.ready: list[tuple[int, CommandId]] = []
        self.ready_at: dict[CommandId, int] = {}
        self.reads: dict[tuple[int, int], tuple[bytes | None, int]] = {}
        self.read_results: list[tuple[int, int, bool]] = []
        self.problems: list[str] = []

    # -- events ---------------------------------------------------------------

    def on_propose(self, time: int, replica: int, command: Command) -> None:
        cid = (command.client_id, command.seq)
        old = self.proposed.get(cid)
        if old is not None and old != command:
            raise ValueError(f"fuzzer bug: {cid} proposed with two payloads")
        self.proposed[cid] = command
        self.first_proposed.setdefault(cid, time)

    def on_reply(self, time: int, replica: int, reply: Reply) -> None:
        cid = (reply.client_id, reply.seq)
        if cid not in self.proposed:
            self._fail(f"R{replica} answered {cid}, which was never proposed")
            return
        if cid not in self.ready_at:
            self.ready_at[cid] = time
            self.ready.append((time, cid))

    def on_executed(self, time: int, replica: int, incarnation: int, e: Executed) -> None:
        log = self.logs.setdefault((replica, incarnation), _Log(replica, incarnation))
        cid = (e.command.client_id, e.command.seq)
        key: ExecKey = (e.slot, e.owner, e.c_index, cid[0], cid[1])
        name = f"R{replica}#{incarnation}"
        pos = log.length
        log.length += 1
        if pos < len(self.reference):
            if self.reference[pos] != key:
                self._fail(
                    f"agreement: {name} executed {key} at position {pos}, "
                    f"{self.reference_from[pos]} executed {self.reference[pos]} there "
                    "(slot, owner, c_index, client_id, seq)"
                )
        else:
            self.reference.append(key)
            self.reference_from.append(name)
        if self.proposed.get(cid) != e.command:
            self._fail(f"integrity: {name} executed {e.command!r}, never proposed")
        if e.duplicate:
            if cid not in log.applied:
                self._fail(
                    f"integrity: {name} skipped {cid} as a duplicate without having applied "
                    "it (a later command of that client was applied first: it is lost)"
                )
            return
        if cid in log.applied:
            self._fail(f"exactly-once: {name} applied {cid} twice")
            return
        # Real-time order: every command READY before cid was first proposed
        # must already be applied here.
        proposed_at = self.first_proposed.get(cid, -1)
        for t, earlier in self.ready:
            if t >= proposed_at:
                break
            if earlier not in log.applied:
                self._fail(
                    f"real-time order: {name} executed {cid} (first proposed at step "
                    f"{proposed_at}) before {earlier} (READY at step {t})"
                )
                break
        log.applied.add(cid)

    def on_read(self, time: int, replica: int, read_id: int, key: bytes | None) -> None:
        self.reads[(replica, read_id)] = (key, time)

    def on_read_result(self, time: int, replica: int, incarnation: int, read_id: int, ok: bool):
        self.read_results.append((replica, read_id, ok))
        asked = self.reads.get((replica, read_id))
        if asked is None or not ok:
            return
        key, t0 = asked
        log = self.logs.get((replica, incarnation))
        applied = log.applied if log is not None else set()
        for t, cid in self.ready:
            if t >= t0:
                break
            cmd = self.proposed[cid]
            if (key is None or cmd.key is None or cmd.key == key) and cid not in applied:
                self._fail(
                    f"read freshness: R{replica} served read {read_id} of {key!r} "
                    f"(asked at step {t0}) without {cid}, a write of {cmd.key!r} READY at step {t}"
                )
                return

    def on_alarms(self, replica: int, alarms: int) -> None:
        if alarms:
            self._fail(f"invariant alarm: R{replica} stats.invariant_alarms = {alarms}")

    def on_exception(self, where: str, exc: BaseException) -> None:
        self._fail(f"exception in {where}: {type(exc).__name__}: {exc}")

    # -- end of run -----------------------------------------------------------

    def missing_ready(self, live: Iterable[tuple[int, int]]) -> dict[str, list[CommandId]]:
        """READY commands not applied yet by each live incarnation ``(replica, inc)``."""
        out: dict[str, list[CommandId]] = {}
        for r, inc in live:
            log = self.logs.get((r, inc))
            applied = log.applied if log is not None else set()
            miss = [cid for _, cid in self.ready if cid not in applied]
            if miss:
                out[f"R{r}#{inc}"] = miss
        return out

    def check_durable(self, live: Iterable[tuple[int, int]]) -> None:
        missing = self.missing_ready(live)
        if missing:
            shown = {k: v[:4] for k, v in missing.items()}
            self._fail(f"READY durability/liveness: READY commands never executed: {shown}")

    def _fail(self, text: str) -> None:
        self.problems.append(text)

    def violations(self) -> list[str]:
        return list(self.problems)


# --------------------------------------------------------------------------- adapter


#: Timers scaled down (10 ms ticks) so that a few thousand random steps hold
#: several elections, leases and C-instance recoveries.
FAST_TIMERS: dict[str, object] = {
    "heartbeat_ms": 100.0,
    "lease_ms": 100.0,
    "lease_drift_ms": 10.0,
    "retransmit_ms": 60.0,
    "learn_ms": 60.0,
    "recover_ms": 120.0,
    "candidate_timeout_ms": 100.0,
    "successor_stagger_ms": 30.0,
    "election_jitter_ms": 20.0,
    "election_margin_ms": 10.0,
    "suspect_min_ms": 30.0,
    "straggler_window_ms": 100.0,
    "straggler_min_interval_ms": 1000.0,
}


class HarnessAdapter:
    """Everything the fuzzer needs from the harness and the core, in one place.

    Port this class to a new core; the engine and the checker stay as they are.
    Messages are only ever described as ``(type name, src, dst)``.
    """

    def __init__(self, n: int, rtt_ms: float = 100.0, **config: object) -> None:
        self.net = Net.build(n, sequencer=0, rtt_ms=uniform_rtt_ms(n, rtt_ms), **config)
        self.n = n
        #: Ticks given to these replicas are skipped with the given percentage.
        self.slow: dict[int, int] = {}
        #: Planted fault for testing the fuzzer itself: restarts forget storage.
        self.amnesia = False
        self._slow_rng = random.Random(n)
        self.incarnation = [0] * n
        self._seen_exec = [0] * n
        self._seen_replies = [0] * n
        self._seen_reads = [0] * n

    # -- what is there --------------------------------------------------------

    @property
    def down(self) -> set[int]:
        return self.net.down

    def pending(self) -> list[tuple[str, int, int]]:
        return [(type(m).__name__, s, d) for s, d, m in self.net.pending]

    def sequencer_of(self, r: int) -> int | None:
        seq = self.net.replicas[r].status().sequencer
        return seq if isinstance(seq, int) else None

    def alarms(self, r: int) -> int:
        return self.net.replicas[r].stats.invariant_alarms

    # -- actions --------------------------------------------------------------

    def deliver(self, i: int) -> None:
        src, dst, _msg = self.net.pending[i]
        if dst in self.net.down or src in self.net.down or (src, dst) in self.net.cut:
            self.net.pending.pop(i)  # to or from a crashed or cut-off replica: lost
            return
        self.net.deliver_one(i)

    def run(self, ticks: int) -> None:
        """A calm spell: tick everyone, then deliver everything in FIFO order."""
        for _ in range(ticks):
            self.tick(None)
            budget = 100_000
            while self.net.pending and budget:
                budget -= 1
                self.deliver(0)

    def partition(self, side: set[int]) -> None:
        """Cut ``side`` off from the others (messages across are lost) until healed."""
        self.net.partition(side, set(range(self.n)) - side)

    def heal(self) -> None:
        self.net.heal()

    def drop(self, i: int) -> None:
        self.net.pending.pop(i)

    def duplicate(self, i: int) -> None:
        self.net.pending.append(self.net.pending[i])

    def tick(self, r: int | None) -> None:
        """Virtual time moves on by one ``tick_ms`` (every replica's clock reads it);
        ``r``, or every live replica, gets a ``tick()`` call. A replica that is not
        ticked (slow, or not chosen) simply sees a later time at its next call, as a
        starved process does."""
        self.net.now_ms += self.net.config.tick_ms
        for x in range(self.n) if r is None else (r,):
            if x in self.net.down or x in self.net.paused:
                continue
            if x in self.slow and self._slow_rng.randrange(100) < self.slow[x]:
                continue
            self.net.replicas[x].tick(self.net.now_ms)
            self.net.flush(x)

    def propose(self, r: int, command: Command) -> bool:
        try:
            self.net.replicas[r].propose(command, Wait.READY)
        except Overloaded:
            return False
        self.net.flush(r)
        return True

    def crash(self, r: int) -> None:
        self.net.crash(r)

    def restart(self, r: int) -> None:
        self.incarnation[r] += 1
        self._seen_exec[r] = 0
        if self.amnesia:
            self.net.storages[r] = MemoryStorage()  # a broken driver: nothing was durable
        self.net.restart(r)

    def transfer(self, r: int, target: int) -> bool:
        try:
            self.net.replicas[r].transfer_sequencer(target)
        except LocalProtocolError:
            return False
        self.net.flush(r)
        return True

    def read(self, r: int, read_id: int, key: bytes | None) -> None:
        self.net.replicas[r].read(read_id, key, self.net.now_ms)
        self.net.flush(r)

    # -- what happened --------------------------------------------------------

    def drain(
        self,
    ) -> tuple[list[tuple[int, Executed]], list[tuple[int, Reply]], list[tuple[int, int, bool]]]:
        """New executed entries, replies and read results since the last call."""
        execs: list[tuple[int, Executed]] = []
        replies: list[tuple[int, Reply]] = []
        reads: list[tuple[int, int, bool]] = []
        net = self.net
        for r in range(self.n):
            ex = net.executed[r]
            execs.extend((r, e) for e in ex[self._seen_exec[r] :])
            self._seen_exec[r] = len(ex)
            rp = net.replies[r]
            replies.extend((r, x) for x in rp[self._seen_replies[r] :])
            self._seen_replies[r] = len(rp)
            rd = net.reads[r]
            reads.extend((r, rid, ok) for rid, ok, _ in rd[self._seen_reads[r] :])
            self._seen_reads[r] = len(rd)
        return execs, replies, reads


# --------------------------------------------------------------------------- engine

#: One recorded action. Message actions name ``(type, src, dst, k)``: the k-th
#: pending message matching type/src/dst, so a trace survives edits.
Action = tuple[object, ...]

#: Rates of the non-message actions, per tick of the whole cluster; each run
#: scales them by its profile (swarm testing). Messages are delivered with a
#: constant hazard per pending message (see :meth:`_Chooser.next`), so their
#: delays are exponential, reordering is free, and the queue stays bounded.
RATES: dict[str, float] = {
    "tick": 1.0,
    "tick1": 1.0,
    "propose": 0.3,
    "crash": 0.01,
    "restart": 0.02,
    "transfer": 0.005,
    "read": 0.15,
    "partition": 0.01,
    "heal": 0.02,
    "crash_mid_send": 0.005,
    "bounce": 0.005,
    "lose_type": 0.01,
    "run": 0.02,
    "pause": 0.005,
    "resume": 0.01,
}

#: Message types a run may make lossy (dropped far more often than the rest).
LOSSY_TYPES: tuple[str, ...] = (
    "CAccept",
    "CAck",
    "CCommit",
    "CRequest",
    "OAccept",
    "OAck",
    "OCommit",
    "Heartbeat",
    "LeaseGrant",
    "VRequest",
    "Vote",
    "NewView",
    "CPrepare",
    "CPromise",
    "LearnRequest",
)


@dataclass(frozen=True)
class Profile:
    """Per-run configuration and fault mood, drawn from the seed (swarm testing:
    each run leaves some actions rare and others frequent, which reaches corners a
    single fixed mix does not)."""

    weights: tuple[tuple[str, float], ...]
    #: Mean message delay, in ticks of the cluster.
    delay_ticks: float
    drop_pct: int
    dup_pct: int
    #: Share of deliveries that favour recent messages (so old ones linger).
    lifo_pct: int
    #: If set, messages are handled at this fixed rate per tick whatever the queue
    #: length (the queue then grows under load: very late messages).
    msg_weight: float
    timers: str
    rtt_ms: float
    thrifty: bool
    crash_sequencer_pct: int
    lossy: tuple[str, ...]
    lossy_pct: int
    #: Pausing a replica (``pause`` action) makes it skip this share of its ticks
    #: until resumed: a stopped (100) or CPU-starved process whose clock lags.
    slow_pct: int

    @classmethod
    def draw(cls, rng: random.Random, n: int) -> Profile:
        w = dict(RATES)
        w["tick1"] = rng.choice((0.5, 1.0, 3.0))
        w["propose"] = rng.choice((0.1, 0.3, 1.0))
        w["crash"] = rng.choice((0.003, 0.01, 0.03, 0.1))
        w["restart"] = w["crash"] * rng.choice((1.0, 2.0, 4.0))
        w["transfer"] = rng.choice((0.0, 0.005, 0.02))
        w["read"] = rng.choice((0.05, 0.15, 0.5))
        w["partition"] = rng.choice((0.0, 0.005, 0.02))
        w["heal"] = w["partition"] * rng.choice((0.5, 1.0, 3.0))
        w["crash_mid_send"] = rng.choice((0.0, 0.005, 0.02))
        w["bounce"] = rng.choice((0.0, 0.005, 0.02))
        w["lose_type"] = rng.choice((0.0, 0.01, 0.04))
        w["run"] = rng.choice((0.0, 0.02, 0.1))
        w["pause"] = rng.choice((0.0, 0.005, 0.02))
        w["resume"] = w["pause"] * rng.choice((0.5, 1.0, 3.0))
        return cls(
            weights=tuple(w.items()),
            delay_ticks=rng.choice((0.5, 2.0, 5.0, 20.0)),
            lifo_pct=rng.choice((0, 50, 90)),
            msg_weight=rng.choice((0.0, 0.0, 10.0, 20.0)),
            drop_pct=rng.choice((0, 2, 5, 15)),
            dup_pct=rng.choice((0, 2, 5)),
            timers=rng.choice(("fast", "fast", "fast2", "paper")),
            rtt_ms=rng.choice((20.0, 100.0)),
            thrifty=rng.choice((True, True, False)),
            crash_sequencer_pct=rng.choice((20, 50, 80)),
            lossy=tuple(sorted(rng.sample(LOSSY_TYPES, rng.choice((0, 1, 2, 3))))),
            lossy_pct=rng.choice((30, 60, 90)),
            slow_pct=rng.choice((80, 100)),
        )

    def config(self) -> dict[str, object]:
        """Keyword arguments for the cluster configuration."""
        timers: dict[str, object] = {}
        if self.timers != "paper":
            scale = 1.0 if self.timers == "fast" else 2.0
            timers = {
                k: (v * scale if isinstance(v, float) and k != "lease_drift_ms" else v)
                for k, v in FAST_TIMERS.items()
            }
        return {"thrifty": self.thrifty, **timers}


@dataclass
class FuzzResult:
    n: int
    seed: int
    steps: int
    actions: list[Action]
    violations: list[str]
    checker: HistoryChecker

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self, last: int = 40) -> str:
        lines = [
            f"fuzz N={self.n} seed={self.seed} steps={self.steps}: "
            f"{len(self.violations)} violation(s) after {len(self.actions)} actions",
            *("  - " + v for v in self.violations[:5]),
            *(f"  {a[1]}" for a in self.actions[:1] if a[0] == "profile"),
            f"last {min(last, len(self.actions))} actions (of {len(self.actions)}):",
            *("  " + format_action(a) for a in self.actions[-last:]),
            "replay: python -m tests.core.fuzz "
            f"--n {self.n} --seed {self.seed} --steps {self.steps} --trace",
            f"   or: FUZZ_N={self.n} FUZZ_SEED={self.seed} FUZZ_STEPS={self.steps} "
            "python -m pytest tests/core/test_fuzz.py -k replay",
        ]
        return "\n".join(lines)


def format_action(a: Action) -> str:
    return " ".join(str(x) for x in a)


class _Engine:
    """Applies actions to an adapter and feeds the checker after each one."""

    def __init__(self, n: int, profile: Profile | None = None) -> None:
        self.n = n
        self.f = (n - 1) // 2
        if profile is None:
            self.h = HarnessAdapter(n)
        else:
            self.h = HarnessAdapter(n, profile.rtt_ms, **profile.config())
        self.c = HistoryChecker()
        self.time = 0
        self.read_id = 0
        self.actions: list[Action] = []

    # -- observation ------------------------------------------------------------

    def observe(self) -> None:
        execs, replies, reads = self.h.drain()
        t = self.time
        for r, e in execs:
            self.c.on_executed(t, r, self.h.incarnation[r], e)
        for r, x in replies:
            self.c.on_reply(t, r, x)
        for r, rid, ok in reads:
            self.c.on_read_result(t, r, self.h.incarnation[r], rid, ok)
        for r in range(self.n):
            self.c.on_alarms(r, self.h.alarms(r))

    # -- applying one action ----------------------------------------------------

    def find(self, kind: str, src: int, dst: int, k: int) -> int | None:
        hits = [i for i, p in enumerate(self.h.pending()) if p == (kind, src, dst)]
        return hits[k] if k < len(hits) else None

    def apply(self, a: Action) -> None:
        """Carry out one recorded action (skipped if it no longer applies)."""
        self.time += 1
        op = a[0]
        h = self.h
        try:
            if op in ("deliver", "drop", "dup"):
                _, kind, src, dst, k = a
                i = self.find(str(kind), int(src), int(dst), int(k))  # type: ignore[call-overload]
                if i is None:
                    return
                {"deliver": h.deliver, "drop": h.drop, "dup": h.duplicate}[str(op)](i)
            elif op == "tick":
                h.tick(None)
            elif op == "run":
                h.run(int(a[1]))  # type: ignore[call-overload]
            elif op == "tick1":
                h.tick(int(a[1]))  # type: ignore[call-overload]
            elif op == "propose":
                _, r, cid, seq, payload, key = a
                if r in h.down:
                    return
                cmd = Command(int(cid), int(seq), bytes(payload), key)  # type: ignore[arg-type,call-overload]
                self.c.on_propose(self.time, int(r), cmd)  # type: ignore[call-overload]
                h.propose(int(r), cmd)  # type: ignore[call-overload]
            elif op == "crash":
                r = int(a[1])  # type: ignore[call-overload]
                if r in h.down or len(h.down) >= self.f:
                    return
                self.observe()
                h.crash(r)
            elif op == "restart":
                r = int(a[1])  # type: ignore[call-overload]
                if r not in h.down:
                    return
                self.observe()
                h.restart(r)
            elif op == "transfer":
                _, r, target = a
                if r not in h.down:
                    h.transfer(int(r), int(target))  # type: ignore[call-overload]
            elif op == "partition":
                h.partition({int(x) for x in a[1:]})  # type: ignore[call-overload]
            elif op == "heal":
                h.heal()
            elif op == "pause":
                h.slow[int(a[1])] = int(a[2])  # type: ignore[call-overload]
            elif op == "resume":
                h.slow.pop(int(a[1]), None)  # type: ignore[call-overload]
            elif op == "lose":
                # Every pending message of one type (from one sender) is lost.
                _, kind, src = a
                for i in reversed(range(len(h.pending()))):
                    if h.pending()[i][0] == kind and h.pending()[i][1] == src:
                        h.drop(i)
            elif op == "read":
                _, r, rid, key = a
                if r in h.down:
                    return
                self.c.on_read(self.time, int(r), int(rid), key)  # type: ignore[arg-type,call-overload]
                h.read(int(r), int(rid), key)  # type: ignore[arg-type,call-overload]
            else:
                raise ValueError(f"unknown action {a!r}")
        except (AssertionError, Exception) as exc:
            self.c.on_exception(format_action(a), exc)
        finally:
            self.actions.append(a)
            self.observe()

    # -- the end: heal and check durability -------------------------------------

    def settle(self, rounds: int) -> None:
        """Restart everyone, then tick and deliver everything (FIFO) until every
        READY command executed everywhere, or ``rounds`` ticks passed (a stall)."""
        self.actions.append(("settle", rounds))
        self.h.heal()
        self.h.slow.clear()
        for r in sorted(self.h.down):
            self.apply(("restart", r))
        net = self.h.net
        for k in range(rounds):
            self.time += 1
            try:
                net.tick()
                net.deliver_all(limit=200_000)
            except (AssertionError, Exception) as exc:
                self.c.on_exception(f"settle round {k}", exc)
            self.observe()
            if self.c.violations():
                return
            if k % 25 == 0 and not self.c.missing_ready(self.live()):
                return
        self.c.check_durable(self.live())

    def live(self) -> list[tuple[int, int]]:
        return [(r, self.h.incarnation[r]) for r in range(self.n) if r not in self.h.down]


class _Chooser:
    """Draws the next action from the seeded rng and the current state."""

    def __init__(self, eng: _Engine, rng: random.Random, profile: Profile) -> None:
        self.eng = eng
        self.rng = rng
        self.clients: dict[int, tuple[int, int]] = {}  # client -> (seq, leader last used)
        self.open: dict[int, Command] = {}  # client -> outstanding command
        self.next_client = 1
        self.profile = profile
        macros = ("crash_mid_send", "bounce", "lose_type")
        self.names = [name for name, _ in profile.weights if name not in macros]
        self.weights = [weight for name, weight in profile.weights if name not in macros]
        self.macro_weights = {name: w for name, w in profile.weights if name in macros}
        self.queue: list[Action] = []

    def next(self) -> Action:
        if self.queue:
            return self.queue.pop(0)
        eng, rng, h = self.eng, self.rng, self.eng.h
        n = eng.n
        live = [r for r in range(n) if r not in h.down]
        while True:
            if op_macro := self._macro(live):
                self.queue.extend(op_macro[1:])
                return op_macro[0]
            pending = h.pending()
            # Each pending message is delivered (or lost) at rate 1/delay per tick.
            hazard = len(pending) / self.profile.delay_ticks
            if self.profile.msg_weight:
                hazard = self.profile.msg_weight if pending else 0.0
            op = rng.choices([*self.names, "msg"], [*self.weights, hazard])[0]
            if op == "msg":
                if rng.randrange(100) < self.profile.lifo_pct:
                    # Favour recent messages: old ones linger (a heavy-tailed delay).
                    i = len(pending) - 1 - int(len(pending) * rng.random() ** 4)
                else:
                    i = rng.randrange(len(pending))
                kind, src, dst = pending[i]
                k = sum(1 for p in pending[:i] if p == (kind, src, dst))
                roll = rng.randrange(100)
                drop = self.profile.drop_pct
                if kind in self.profile.lossy:
                    drop = max(drop, self.profile.lossy_pct)
                if roll < drop:
                    op = "drop"
                elif roll < drop + self.profile.dup_pct:
                    op = "dup"
                else:
                    op = "deliver"
                return (op, kind, src, dst, k)
            if op == "tick":
                return ("tick",)
            if op == "run":
                return ("run", rng.randint(1, 10))
            if op == "tick1":
                return ("tick1", rng.choice(live))
            if op == "propose":
                return self._propose(live)
            if op == "crash":
                if len(h.down) >= eng.f:
                    continue
                seqs = [r for r in live if h.sequencer_of(r) == r]
                if seqs and rng.randrange(100) < self.profile.crash_sequencer_pct:
                    return ("crash", rng.choice(seqs))
                return ("crash", rng.choice(live))
            if op == "restart":
                if not h.down:
                    continue
                return ("restart", rng.choice(sorted(h.down)))
            if op == "partition":
                # A minority: one replica (often the sequencer) or, at N = 5, two.
                size = rng.randint(1, eng.f)
                side = set(rng.sample(range(n), size))
                seqs = [r for r in live if h.sequencer_of(r) == r]
                if seqs and rng.random() < 0.5:
                    side = {rng.choice(seqs)} | set(list(side)[: size - 1])
                return ("partition", *sorted(side))
            if op == "heal":
                return ("heal",)
            if op == "pause":
                seqs = [r for r in live if h.sequencer_of(r) == r]
                r = rng.choice(seqs) if seqs and rng.random() < 0.7 else rng.choice(live)
                return ("pause", r, self.profile.slow_pct)
            if op == "resume":
                if not h.slow:
                    continue
                return ("resume", rng.choice(sorted(h.slow)))
            if op == "transfer":
                seqs = [r for r in live if h.sequencer_of(r) == r]
                if not seqs:
                    continue
                r = rng.choice(seqs)
                return ("transfer", r, rng.choice([p for p in range(n) if p != r]))
            if op == "read":
                eng.read_id += 1
                return ("read", rng.choice(live), eng.read_id, rng.choice(KEYS))

    def _macro(self, live: list[int]) -> list[Action]:
        """Composite faults, recorded as the primitive actions they consist of:

        * crash_mid_send: a replica crashes while its messages are in flight; each
          reaches its destination or not (a crash in the middle of a broadcast);
        * bounce: crash and restart at once (the usual process restart);
        * lose_type: every pending message of one type from one sender is lost.
        """
        rng, h, eng = self.rng, self.eng.h, self.eng
        total = sum(self.weights) + len(h.pending()) / self.profile.delay_ticks
        for name in ("crash_mid_send", "bounce", "lose_type"):
            if rng.random() * total >= self.macro_weights[name]:
                continue
            pending = h.pending()
            if name == "lose_type" and pending:
                kind, src, _ = rng.choice(pending)
                return [("lose", kind, src)]
            if name == "bounce":
                r = rng.choice(live)
                return [("crash", r), ("restart", r)] if len(h.down) < eng.f else []
            if name == "crash_mid_send" and len(h.down) < eng.f:
                seqs = [r for r in live if h.sequencer_of(r) == r]
                r = rng.choice(seqs) if seqs and rng.random() < 0.5 else rng.choice(live)
                out: list[Action] = []
                seen: dict[tuple[str, int, int], int] = {}
                for kind, src, dst in pending:
                    if src != r:
                        continue
                    k = seen.get((kind, src, dst), 0)
                    if rng.random() < 0.5:
                        out.append(("deliver", kind, src, dst, k))
                    else:
                        seen[(kind, src, dst)] = k + 1
                out.append(("crash", r))
                return out
        return []

    def _propose(self, live: list[int]) -> Action:
        rng, c = self.rng, self.eng.c
        # Clients whose outstanding command was answered move on to their next seq.
        for client, cmd in list(self.open.items()):
            if (cmd.client_id, cmd.seq) in c.ready_at:
                del self.open[client]
        if self.open and rng.random() < 0.3:
            client = rng.choice(sorted(self.open))
            cmd = self.open[client]  # a retry, usually at another replica
        else:
            idle = [x for x in self.clients if x not in self.open]
            if idle and rng.random() < 0.7:
                client = rng.choice(idle)
            else:
                client = self.next_client
                self.next_client += 1
            seq = self.clients.get(client, (0, -1))[0] + 1
            key = rng.choice((*KEYS, None))
            cmd = Command(client, seq, b"%d.%d" % (client, seq), key)
            self.open[client] = cmd
        r = rng.choice(live)
        self.clients[client] = (cmd.seq, r)
        return ("propose", r, cmd.client_id, cmd.seq, cmd.payload, cmd.key)


def run_seed(
    n: int, seed: int, steps: int = 3000, settle_rounds: int = 1500, *, amnesia: bool = False
) -> FuzzResult:
    """One fuzz run: ``steps`` random actions, then heal and check durability.

    ``amnesia`` plants a driver bug (restarts lose their storage) so that tests can
    show the checkers catch what they should; it is not a protocol fault.
    """
    rng = random.Random(seed * 1_000_003 + n)
    profile = Profile.draw(rng, n)
    eng = _Engine(n, profile)
    eng.h.amnesia = amnesia
    eng.actions.append(("profile", profile))
    eng.apply(("run", 20))  # a calm start: the view-0 sequencer holds its lease
    chooser = _Chooser(eng, rng, profile)
    for _ in range(steps):
        eng.apply(chooser.next())
        if eng.c.violations():
            break
    else:
        eng.settle(settle_rounds)
    return FuzzResult(n, seed, steps, eng.actions, eng.c.violations(), eng.c)


def replay(n: int, actions: Sequence[Action], settle_rounds: int = 1500) -> FuzzResult:
    """Re-run a recorded (possibly hand-shortened) action list; no rng involved."""
    profile = next((a[1] for a in actions if a[0] == "profile"), None)
    assert profile is None or isinstance(profile, Profile)
    eng = _Engine(n, profile)
    for a in actions:
        if a[0] == "profile":
            eng.actions.append(a)
            continue
        if a[0] == "settle":
            eng.settle(int(a[1]))  # type: ignore[call-overload]
            break
        eng.apply(a)
        if eng.c.violations():
            break
    return FuzzResult(n, -1, len(actions), list(eng.actions), eng.c.violations(), eng.c)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--seed", type=int, nargs="+", default=[1])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--trace", action="store_true", help="print every action of a failure")
    args = p.parse_args(argv)
    bad = 0
    for seed in args.seed:
        res = run_seed(args.n, seed, args.steps)
        if res.ok:
            print(f"N={args.n} seed={seed}: ok ({len(res.actions)} actions)")
            continue
        bad += 1
        print(res.report(last=len(res.actions) if args.trace else 40))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
