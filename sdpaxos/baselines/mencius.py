"""Mencius (Mao, Junqueira, Marzullo, OSDI 2008) as a pure core, for the paper's comparison.

The global instance sequence ``0, 1, 2, ...`` is partitioned round robin:
instance ``i`` is owned by replica ``i mod N``. Every replica is the
coordinator of its own instances (the paper's Coordinated Paxos). Its rules
and optimizations, as this module implements them:

* **Propose (rule 1).** A replica puts a batch of queued commands (at most
  ``config.c_batch_max``) in its next own instance at ballot 0 and goes straight
  to phase 2: ``Accept`` to every peer (Mencius needs every replica to hear of
  the instance, so there is no thrifty quorum). It starts as many instances per
  :meth:`ready` turn as its queue fills, as SDPaxos's command leader does, at
  most ``config.c_inflight_max`` in flight.
* **Learn (optimization 3: no waiting for the owner's word).** Only the owner
  proposes at ballot 0, so a majority of ballot-0 acceptances chooses its value,
  and any replica that counts them knows it. With N = 3 the owner's acceptance
  and an acceptor's own are that majority: an acceptor knows the value chosen as
  soon as it accepts it, and answers ``Accepted`` to the owner alone. With N >= 5
  an acceptor sends its ``Accepted`` to every replica, and each counts the owner
  (whose acceptance precedes its ``Accept``), itself and the others
  (:meth:`MenciusReplica._count`). Nobody waits for a ``Commit`` from the owner,
  which would come half a round trip later; there is none in the normal case
  (``Commit`` carries revocation outcomes and answers retransmissions).
* **Skip (rule 2, optimizations 1 and 2).** A replica that hears of instance
  ``j`` of another owner (its ``Accept``, an ``Accepted`` of it, or a
  ``Commit``) beyond its own next index skips its own instances below ``j`` at
  once: they become no-ops, and its next index moves past ``j`` (durably,
  :class:`OwnNext`, before anyone may hear of it). Skips travel as two numbers
  on every message a replica sends, ``(last_valued, next_own)``: "my instances
  strictly between these are no-ops". So the ``Accepted`` answering ``j``
  carries the skips ``j`` caused (optimization 1); the other replicas hear of
  them lazily, with the next message that goes to them anyway, or an explicit
  :class:`Skip` at most :data:`SKIP_INTERVAL_TICKS` ticks later (optimization
  2), and every ``heartbeat_ms / 2`` (a heartbeat for failure detection). An
  ``Accept`` of the owner's instance ``k`` also carries ``prev``, its previous
  valued instance, so the instances between them are no-ops ("accept implies
  skip"). Only the owner ever proposes a value at ballot 0 and revocation
  proposes only what it finds accepted, so a skipped instance can only ever be
  chosen as a no-op: learning it from the owner is learning it chosen.
* **Execution** runs instances strictly in order, a no-op executing nothing;
  ``(client_id, seq)`` sessions (:mod:`sdpaxos.core.sessions`) make it
  exactly-once. ``Executed.slot`` and ``Executed.c_index`` are the global
  instance number, ``owner`` its owner.
* **Ready.** A command is answered READY only when its instance is chosen and
  every lower instance is decided (chosen or skipped), i.e. when its owner
  executes it: before that, a command proposed later at a lagging owner could
  still take a lower instance and break real-time order. A command proposed
  with ``Wait.EXECUTED`` is answered once, EXECUTED.
* **Revocation (rules 3 and 4).** A replica whose execution waits on an
  instance of an owner it has heard nothing from for ``lease_ms +
  election_margin_ms`` plus a jitter in ``[0, election_jitter_ms]`` (from the
  rng) runs phase 1 at a higher ballot on that owner's instances ``[blocked,
  blocked + N * recovery_batch_max)``, adopts the highest-ballot value any
  promise reports (a value some promiser knows chosen wins outright), and
  otherwise proposes a no-op; chosen values go out as ``Commit``. It repeats
  while the owner stays silent, so the others keep executing. The owner, when it
  hears a ``Prepare`` or learns an own instance decided without it, moves its
  next index past it and proposes again the commands of any own instance that
  became a no-op (rule 4). A restarted replica rebuilds its acceptor state, its
  next index and its last valued instance from its records
  (:class:`~sdpaxos.core.storage.CAccepted`,
  :class:`~sdpaxos.core.storage.CPromised`, :class:`OwnNext`), drives its last
  own instances again, and learns the rest (revoked instances included) with
  ``LearnRequest``; it continues beyond all of it.
* **Reads** go through the log in Mencius (no replica can serve a linearizable
  local read without it): :meth:`MenciusReplica.read` always answers
  ``ok=False``.

**Latency** (``d`` one-way delays, ``RTT = 2d``). A command proposed at ``o`` in
instance ``k`` is READY when ``k`` is chosen there, ``M_o`` (the round trip to
its nearest majority, as for SDPaxos), and every lower instance is decided
there. Another owner ``q`` skips its instances below ``k`` when it hears of
``k`` and says so in its ``Accepted``: by ``RTT(o, q)``. An instance ``q``
filled below ``k`` was proposed before that, and ``o`` knows a value of ``q``
chosen ``K(q, o)`` after ``q`` proposed it: ``d(q, o)`` with N = 3, and with
N >= 5 when the earliest relayed acceptance arrives, ``max(d(q, o), min over r
of d(q, r) + d(r, o))``. So every command, without faults::

    M_o <= latency(o) <= max(M_o, max over q != o of d(o, q) + K(q, o))

(paper3: 52, 68, 68 ms at CA, OR, OH; paper5: 149.5, 149.5, 197.5, 243.5,
243.5). Where in between depends on the load, through how far each other owner
trails ``o`` in the instance space. In a quiet cluster whose last instance was
``s``'s, ``o`` waits exactly for the owners after ``s`` and before ``o`` in the
round-robin order, ``max(M_o, max RTT(o, q))`` over them. Under load the owners
advance together, the remote ones a little behind (they hear of the others'
instances last), and ``o`` waits for ``d(q, o)`` plus how far ``q`` trails. Both
sides of the bound per command and the quiet formula exactly are asserted per
region in ``tests/baselines/test_mencius.py``; bench/README.md ("latency")
gives the figures under the bench's load.

**Simplified, plainly:** no thrifty quorums (Mencius's skips need every replica
to hear every instance); no out-of-order execution of commuting commands (the
paper's remedy for the wait on lagging owners: every instance executes in
order); no snapshots or log compaction (chosen values and skip marks are kept
for learners, memory grows with the instances); revocation does not wait for
the suspect to be "really" dead (a false suspicion costs the suspect's in-flight
instances a retry, never safety); a revoked instance runs phase 1 even when its
owner had skipped it.
"""

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, TypeAlias

from sdpaxos.baselines.common import (
    DUPLICATE,
    EXECUTED,
    EXPIRED,
    READY,
    SESSION_EXPIRED,
    WAIT_EXECUTED,
    BaselineReplica,
    all_commands,
)
from sdpaxos.core.app import StateMachine
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import LocalProtocolError, Overloaded
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply
from sdpaxos.core.sessions import Outcome, Sessions
from sdpaxos.core.storage import CAccepted, CPromised
from sdpaxos.core.types import (
    BALLOT_STRIDE,
    Ballot,
    CIndex,
    Command,
    ReplicaId,
    Slot,
    Wait,
    ballot_round,
    make_ballot,
)

__all__ = [
    "MESSAGE_TYPES",
    "TITLE",
    "Accept",
    "Accepted",
    "Commit",
    "Decided",
    "LearnRequest",
    "MenciusReplica",
    "MenciusStats",
    "OwnNext",
    "Prepare",
    "Promise",
    "Skip",
    "make_replica",
]

TITLE = "Mencius"

#: The value of a skipped (or revoked) instance: no command.
NOOP: tuple[Command, ...] = ()
#: An explicit Skip goes out at most this many ticks after a replica's skips moved.
SKIP_INTERVAL_TICKS = 1
#: A promise reports a value the promiser knows chosen at this ballot (above any real one).
CHOSEN_BALLOT = 1 << 62


# -- messages ----------------------------------------------------------------
# Every message carries its sender's skips: ``(last_valued, next_own)``, its
# instances strictly between the two are no-ops (``last_valued`` is
# ``sender - N`` before its first valued instance).


@dataclass(frozen=True, slots=True)
class Accept:
    """Phase 2: accept ``commands`` for ``instance`` at ``ballot``. At ballot 0
    only the owner sends it, and ``prev`` is its previous valued instance."""

    sender: int
    instance: int
    ballot: int
    commands: tuple[Command, ...]
    prev: int
    last_valued: int
    next_own: int


@dataclass(frozen=True, slots=True)
class Accepted:
    """Answer to an :class:`Accept`: ``ok`` (accepted at ``ballot``) or refused
    (``ballot`` is the higher one promised)."""

    sender: int
    instance: int
    ballot: int
    ok: bool
    last_valued: int
    next_own: int


@dataclass(frozen=True, slots=True)
class Commit:
    """``commands`` is chosen for ``instance`` (a no-op if empty)."""

    sender: int
    instance: int
    commands: tuple[Command, ...]
    last_valued: int
    next_own: int


@dataclass(frozen=True, slots=True)
class Skip:
    """Only the sender's skips (and a sign of life)."""

    sender: int
    last_valued: int
    next_own: int


@dataclass(frozen=True, slots=True)
class Prepare:
    """Revocation phase 1 on ``owner``'s instances ``start, start+N, ... < end``."""

    sender: int
    ballot: int
    owner: int
    start: int
    end: int
    last_valued: int
    next_own: int


@dataclass(frozen=True, slots=True)
class Promise:
    """Answer to a :class:`Prepare`. ``ok``: promised; ``accepted`` lists
    ``(instance, ballot)`` of what the sender accepted (or knows chosen, at
    :data:`CHOSEN_BALLOT`) in the range, ``values`` the values, in the same order.
    Not ``ok``: ``ballot`` is a higher ballot promised."""

    sender: int
    ballot: int
    owner: int
    start: int
    ok: bool
    accepted: tuple[tuple[int, int], ...]
    values: tuple[tuple[Command, ...] | None, ...]
    last_valued: int
    next_own: int


@dataclass(frozen=True, slots=True)
class LearnRequest:
    """Execution is stuck at ``start``; the sender knows of instances up to ``upto``."""

    sender: int
    start: int
    upto: int
    last_valued: int
    next_own: int


@dataclass(frozen=True, slots=True)
class Decided:
    """Answer to a :class:`LearnRequest`: ``values[k]`` is chosen for ``start + k``
    (``None``: not known here)."""

    sender: int
    start: int
    values: tuple[tuple[Command, ...] | None, ...]
    last_valued: int
    next_own: int


#: Append-only: a message's wire tag is its index here.
MESSAGE_TYPES: tuple[type, ...] = (
    Accept,
    Accepted,
    Commit,
    Skip,
    Prepare,
    Promise,
    LearnRequest,
    Decided,
)

Message: TypeAlias = Accept | Accepted | Commit | Skip | Prepare | Promise | LearnRequest | Decided


# -- records -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OwnNext:
    """This replica's next own instance is ``next_own``: those below it that
    carry no value of its own are no-ops, and it never proposes in them."""

    next_own: int


#: Records of Mencius's own, beyond the shared ones (the runtime's log appends
#: them to its table; append-only).
RECORD_TYPES: tuple[type, ...] = (OwnNext,)


@dataclass(slots=True)
class MenciusStats:
    """Counters (the simulator sums every int field over incarnations)."""

    steps: int = 0
    rejected: int = 0
    stale: int = 0
    instances_proposed: int = 0
    instances_revoked: int = 0
    revocations: int = 0
    skips_sent: int = 0
    learn_requests: int = 0
    commands_executed: int = 0
    commands_requeued: int = 0
    invariant_alarms: int = 0


class _Bad(Exception):
    """A peer message that is malformed or impossible: ignored, counted."""


@dataclass(slots=True)
class _Own:
    """One of our ballot-0 instances on its way to a majority (its acceptors are
    counted in :attr:`MenciusReplica.acks`, as every learner counts them)."""

    commands: tuple[Command, ...]
    prev: int
    sent_ms: float


@dataclass(slots=True)
class _Revocation:
    owner: int
    ballot: int
    start: int
    end: int
    sent_ms: float
    promises: dict[int, Promise] = field(default_factory=dict)
    #: Phase 2: instance -> (value, acceptors).
    accepts: dict[int, tuple[tuple[Command, ...], set[int]]] | None = None


class MenciusReplica(BaselineReplica):
    """One Mencius replica; the driving API of :class:`sdpaxos.core.replica.Replica`."""

    def __init__(
        self,
        config: ClusterConfig,
        replica_id: int,
        state_machine: StateMachine,
        rng: random.Random,
        observe: bool = False,
        records: list[Any] | None = None,
    ) -> None:
        super().__init__(config, replica_id, state_machine, rng, observe)
        n, me = self.n, int(self.id)
        self.stats = MenciusStats()
        self.sessions = Sessions(config.session_lifetime_slots, config.sessions_max)
        # Acceptor.
        self.promised: dict[int, int] = {}
        self.accepted: dict[int, tuple[int, tuple[Command, ...]]] = {}
        # Learner.
        self.chosen: dict[int, tuple[Command, ...]] = {}
        #: Ballot-0 instances not decided here -> the acceptors heard of (their
        #: ``Accepted``, and the owner, whose acceptance any of them implies).
        self.acks: dict[int, set[int]] = {}
        #: (owner, its last valued instance) -> no-ops already filled up to here.
        self._filled: dict[tuple[int, int], int] = {}
        self.exec_next = 0
        self.max_known = -1
        # Coordinator of our own instances.
        self.next_own = me
        self.last_valued = me - n
        self._persisted_next = me
        self.queue: deque[Command] = deque()
        self.exec_waiters: set[tuple[int, int]] = set()
        self.inflight: dict[int, _Own] = {}
        #: Own instances this incarnation proposed for clients (answered on execution).
        self.mine: dict[int, tuple[Command, ...]] = {}
        # Failure detection and revocation (times count from the first clock reading).
        self.last_heard = [0.0] * n
        self.suspect_ms = [self._draw_suspect() for _ in range(n)]
        self.round = 0
        self.revocations: dict[int, _Revocation] = {}
        #: Owner -> no revocation of ours before this time (someone else runs one).
        self._hold_until: dict[int, float] = {}
        # Skips told to each peer, and when we last sent it anything.
        self._told = [me] * n
        self._told_ms = [0.0] * n
        self._skip_ticks = 0
        # Learning.
        #: Where execution was blocked at the last tick, and since when.
        self._blocked_at = -1
        self._blocked_since = 0.0
        self._learn_sent_ms = -1e18
        self._handlers: dict[type, Callable[[Any], None]] = {
            Accept: self._on_accept,
            Accepted: self._on_accepted,
            Commit: self._on_commit,
            Skip: self._on_skip,
            Prepare: self._on_prepare,
            Promise: self._on_promise,
            LearnRequest: self._on_learn_request,
            Decided: self._on_decided,
        }
        if records:
            self._restore(records)

    # ------------------------------------------------------------------ API

    @property
    def executed_upto(self) -> int:
        """Every instance below this is executed here (no-ops included)."""
        return self.exec_next

    @property
    def proposals_waiting(self) -> int:
        """Proposals queued here and not in an own instance yet (backpressure)."""
        return len(self.queue)

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None:
        """Queue ``command``; answered READY (or EXECUTED) when its owner executes it."""
        if not isinstance(command, Command):
            raise LocalProtocolError(f"propose() takes a Command, got {type(command).__name__}")
        if len(self.queue) >= self.config.propose_queue_max:
            raise Overloaded(f"{len(self.queue)} proposals are already queued")
        self.queue.append(command)
        if wait == WAIT_EXECUTED:
            self.exec_waiters.add((command.client_id, command.seq))

    def step(self, message: Any, now_ms: float) -> None:
        """Handle one peer message; bad input is counted (``stats.rejected``), never raised."""
        self._advance_clock(now_ms)
        self.stats.steps += 1
        handler = self._handlers.get(type(message))
        try:
            if handler is None:
                raise _Bad(f"not a Mencius message: {type(message).__name__}")
            sender = message.sender
            if type(sender) is not int or not 0 <= sender < self.n or sender == self.id:
                raise _Bad(f"unknown sender {sender!r}")
            self._check_facts(sender, message)
            self.last_heard[sender] = self.now_ms
            handler(message)
            self._learn_facts(sender, message.last_valued, message.next_own)
        except _Bad:
            self.stats.rejected += 1
        self._execute()

    def tick(self, now_ms: float) -> None:
        """Timers: retransmission, explicit skips and heartbeats, learning, revocation."""
        self._advance_clock(now_ms)
        now = self.now_ms
        cfg = self.config
        for k, own in self.inflight.items():
            if now - own.sent_ms >= cfg.retransmit_ms:
                own.sent_ms = now
                acks = self.acks.get(k, ())
                for p in self._peers():
                    if p not in acks:
                        self._send(p, self._accept(k, 0, own.commands, own.prev))
        # Explicit skips (when ours moved) and heartbeats.
        self._skip_ticks += 1
        moved = self._skip_ticks >= SKIP_INTERVAL_TICKS
        if moved:
            self._skip_ticks = 0
        for p in self._peers():
            if (moved and self._told[p] < self.next_own) or (
                now - self._told_ms[p] >= cfg.heartbeat_ms / 2
            ):
                self.stats.skips_sent += 1
                self._send(p, Skip(self.id, self.last_valued, self.next_own))
        # Learning: execution waits on something we know is past.
        x = self.exec_next
        if x % self.n == self.id and x >= self.next_own and x < self.max_known:
            self._heard_of(self.max_known)  # we hold the others back: skip
            self._execute()
            x = self.exec_next
        if x <= self.max_known and x not in self.chosen:
            if x != self._blocked_at:
                # Blocked here since now (not since the last execution, which
                # may be long ago in a quiet cluster): ask after learn_ms.
                self._blocked_at = x
                self._blocked_since = now
            if (
                now - self._blocked_since >= cfg.learn_ms
                and now - self._learn_sent_ms >= cfg.learn_ms
            ):
                self._learn_sent_ms = now
                self.stats.learn_requests += 1
                for p in self._peers():
                    self._send(
                        p,
                        LearnRequest(self.id, x, self.max_known, self.last_valued, self.next_own),
                    )
            owner = x % self.n
            if owner != self.id:
                self._maybe_revoke(owner, x)
        for rev in list(self.revocations.values()):
            if now - rev.sent_ms >= cfg.retransmit_ms:
                self._retransmit_revocation(rev)
        self._execute()

    def ready(self) -> Ready:
        """Propose what waits (batches of c_batch_max), then hand over the effects batch."""
        self._execute()
        while self.queue and len(self.inflight) < self.config.c_inflight_max:
            self._propose_batch()
        if self.next_own > self._persisted_next:
            self._persisted_next = self.next_own
            self._persist.append(OwnNext(self.next_own))
        return self.hand_over()  # persist: CAccepted, CPromised and OwnNext records

    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None:
        """Proximity does not matter: every instance goes to every replica."""

    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None:
        """Never a local read: in Mencius reads go through the log (``ok=False``)."""
        self._advance_clock(now_ms)
        self._reads.append(ReadResult(read_id, False))

    def status(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "next_own": self.next_own,
            "last_valued": self.last_valued,
            "exec_next": self.exec_next,
            "max_known": self.max_known,
            "inflight": len(self.inflight),
            "queued": len(self.queue),
            "revoking": sorted(self.revocations),
        }

    # ------------------------------------------------------------ internals

    def _draw_suspect(self) -> float:
        cfg = self.config
        return cfg.lease_ms + cfg.election_margin_ms + self.rng.uniform(0, cfg.election_jitter_ms)

    def _peers(self) -> list[int]:
        return [p for p in range(self.n) if p != self.id]

    def _send(self, dst: int, message: Any) -> None:
        self._messages.append((ReplicaId(dst), message))
        self._told[dst] = self.next_own
        self._told_ms[dst] = self.now_ms

    def _broadcast(self, message: Any) -> None:
        for p in range(self.n):
            if p != self.id:
                self._send(p, message)

    def _accept(self, k: int, ballot: int, commands: tuple[Command, ...], prev: int) -> Accept:
        return Accept(self.id, k, ballot, commands, prev, self.last_valued, self.next_own)

    def _commit(self, k: int, commands: tuple[Command, ...]) -> Commit:
        return Commit(self.id, k, commands, self.last_valued, self.next_own)

    def _window_end(self) -> int:
        return self.exec_next + self.n * self.config.c_index_window_max

    def _check_instance(self, x: object) -> int:
        if type(x) is not int or not 0 <= x < self._window_end():
            raise _Bad(f"instance {x!r} out of range")
        return x

    def _check_facts(self, sender: int, m: Any) -> None:
        a, b = m.last_valued, m.next_own
        n = self.n
        if (
            type(a) is not int
            or type(b) is not int
            or a % n != sender
            or b % n != sender
            or not sender - n <= a < b <= self._window_end()
        ):
            raise _Bad(f"bad skips ({a!r}, {b!r}) from {sender}")

    def _check_commands(self, commands: object) -> tuple[Command, ...]:
        if not all_commands(commands):
            raise _Bad("commands must be a tuple of Command")
        assert isinstance(commands, tuple)
        if len(commands) > self.config.c_batch_max:
            raise _Bad("more commands than c_batch_max")
        return commands

    def _check_ballot(self, sender: int, ballot: object) -> int:
        if type(ballot) is not int or ballot < BALLOT_STRIDE or ballot % BALLOT_STRIDE != sender:
            raise _Bad(f"bad ballot {ballot!r} from {sender}")
        if ballot_round(Ballot(ballot)) > self.round:
            self.round = ballot_round(Ballot(ballot))
        return ballot

    # -- skips and learning ------------------------------------------------

    def _heard_of(self, j: int) -> None:
        """Instance ``j`` of another owner exists: skip our own instances below it."""
        if j > self.max_known:
            self.max_known = j
        if j > self.next_own:
            n = self.n
            new = j + 1 + ((self.id - j - 1) % n)
            for x in range(self.next_own, new, n):
                self._decide(x, NOOP)
            self.next_own = new

    def _learn_facts(self, q: int, a: int, b: int) -> None:
        """Owner ``q``'s instances strictly between ``a`` and ``b`` are no-ops."""
        n = self.n
        if b - n > self.max_known:
            self.max_known = b - n  # (``a`` < ``b``; an instance we may need to learn)
        key = (q, a)
        start = self._filled.get(key, a)
        if b - n <= start:
            return
        self._filled[key] = b - n
        chosen = self.chosen
        for x in range(start + n, b, n):
            if x not in chosen:
                self._decide(x, NOOP)

    def _decide(self, x: int, value: tuple[Command, ...]) -> None:
        old = self.chosen.get(x)
        if old is not None:
            if old != value:
                self.stats.invariant_alarms += 1
            return
        self.chosen[x] = value
        self.acks.pop(x, None)
        if x > self.max_known:
            self.max_known = x
        if x % self.n == self.id:
            if x >= self.next_own:
                self.next_own = x + self.n
            self.inflight.pop(x, None)
            mine = self.mine.get(x)
            if mine is not None and mine != value:
                # Revoked while ours was in flight: propose those commands again.
                del self.mine[x]
                self.stats.commands_requeued += len(mine)
                self.queue.extendleft(reversed(mine))

    def _execute(self) -> None:
        chosen = self.chosen
        x = self.exec_next
        if x not in chosen:
            return
        n = self.n
        me = self.id
        sessions = self.sessions
        expiring = sessions.lifetime_slots is not None
        apply = self.sm.apply
        while x in chosen:
            commands = chosen[x]
            mine = self.mine.pop(x, None) if x % n == me else None
            waiters = self.exec_waiters
            if mine is None and not self.observe:
                sessions.run_batch(commands, x, apply)  # no per-command outcome needed
            else:
                results: list[tuple[bytes | None, Outcome]] = []
                sessions.run_batch(commands, x, apply, results)
                for cmd, (result, outcome) in zip(commands, results, strict=True):
                    cid = cmd.client_id
                    if mine is not None:
                        key = (cid, cmd.seq)
                        if key in waiters:
                            waiters.discard(key)
                            kind = SESSION_EXPIRED if outcome is EXPIRED else EXECUTED
                            self._replies.append(Reply(cid, cmd.seq, kind, result))
                        else:
                            self._replies.append(Reply(cid, cmd.seq, READY))
                    if self.observe:
                        self._executed.append(
                            Executed(
                                Slot(x),
                                ReplicaId(x % n),
                                x,
                                cmd,
                                result,
                                outcome is DUPLICATE,
                                outcome is EXPIRED,
                            )
                        )
            self.stats.commands_executed += len(commands)
            if expiring:
                sessions.slot_executed(x)
            x += 1
        self.exec_next = x

    # -- proposing ----------------------------------------------------------

    def _propose_batch(self) -> None:
        n = self.n
        k = self.next_own
        while k in self.chosen or self.promised.get(k, 0) > 0:
            k += n  # revoked (or being revoked): not ours to fill any more
        queue = self.queue
        if len(queue) <= self.config.c_batch_max:
            batch = tuple(queue)
            queue.clear()
        else:
            batch = tuple(queue.popleft() for _ in range(self.config.c_batch_max))
        prev = self.last_valued
        self.last_valued = k
        self.next_own = k + n
        self.promised[k] = 0
        self.accepted[k] = (0, batch)
        self._persist.append(CAccepted(ReplicaId(self.id), CIndex(k), Ballot(0), batch))
        self.mine[k] = batch
        self.stats.instances_proposed += 1
        if k > self.max_known:
            self.max_known = k
        if self.majority == 1:
            self._decide(k, batch)
            return
        self.inflight[k] = _Own(batch, prev, self.now_ms)
        self.acks[k] = {self.id}
        self._broadcast(self._accept(k, 0, batch, prev))

    # -- handlers -----------------------------------------------------------

    def _on_accept(self, m: Accept) -> None:
        k = self._check_instance(m.instance)
        commands = self._check_commands(m.commands)
        n = self.n
        q = k % n
        if m.ballot == 0:
            if q != m.sender:
                raise _Bad("a ballot-0 accept from another than the owner")
            prev = m.prev
            if type(prev) is not int or prev % n != q or not q - n <= prev < k:
                raise _Bad(f"bad prev {prev!r}")
            ballot = 0
        else:
            ballot = self._check_ballot(m.sender, m.ballot)
        if k in self.chosen:
            self._send(m.sender, self._commit(k, self.chosen[k]))
            if ballot == 0:
                self._learn_facts(q, m.prev, k)
                self._heard_of(k)
            return
        promised = self.promised.get(k, 0)
        if ballot < promised:
            self.stats.stale += 1
            self._send(
                m.sender, Accepted(self.id, k, promised, False, self.last_valued, self.next_own)
            )
            return
        if ballot == 0:
            self._learn_facts(q, m.prev, k)
        if self.accepted.get(k) != (ballot, commands):
            self.promised[k] = ballot
            self.accepted[k] = (ballot, commands)
            self._persist.append(CAccepted(ReplicaId(q), CIndex(k), Ballot(ballot), commands))
        if k > self.max_known:
            self.max_known = k
        if ballot != 0:
            # A revocation: answer its coordinator, which tells everyone the outcome.
            self._hold_until[q] = self.now_ms + 2 * self.config.retransmit_ms
            self._send(
                m.sender, Accepted(self.id, k, ballot, True, self.last_valued, self.next_own)
            )
            return
        self._heard_of(k)  # rule 2: skip ours below k first, so the answer carries it
        ok = Accepted(self.id, k, 0, True, self.last_valued, self.next_own)
        if self.majority <= 2:
            # The owner accepted it at ballot 0 too: with ours a majority (N <= 3),
            # so chosen here now; only the owner needs our answer.
            self._send(q, ok)
            self._decide(k, commands)
        else:
            # Every replica counts the acceptances itself and learns the
            # decision without waiting for the owner (optimization 3).
            self._broadcast(ok)
            self._count(k, self.id)

    def _on_accepted(self, m: Accepted) -> None:
        k = self._check_instance(m.instance)
        if type(m.ballot) is not int or type(m.ok) is not bool or m.ballot < 0:
            raise _Bad("bad accepted")
        if m.ok and m.ballot == 0:
            if k % self.n != self.id:
                self._heard_of(k)  # another owner's instance k exists (rule 2)
            self._count(k, m.sender)
            return
        if k in self.inflight:
            # Our ballot-0 instance is being revoked: stop driving it; its fate
            # comes with a Commit (or a learn).
            self.stats.stale += 1
            del self.inflight[k]
            return
        rev = self.revocations.get(k % self.n)
        if rev is None or rev.accepts is None or k not in rev.accepts:
            return
        if not m.ok:
            if m.ballot > rev.ballot:
                self.round = max(self.round, ballot_round(Ballot(m.ballot)))
                del self.revocations[rev.owner]
            return
        if m.ballot != rev.ballot:
            return
        value, acks = rev.accepts[k]
        acks.add(m.sender)
        if len(acks) >= self.majority:
            del rev.accepts[k]
            self._decide(k, value)
            self._broadcast(self._commit(k, value))
            if not rev.accepts:
                del self.revocations[rev.owner]

    def _count(self, k: int, acceptor: int) -> None:
        """``acceptor`` accepted the owner's ballot-0 value of ``k``: at a majority
        it is chosen (only the owner proposes at ballot 0, so there is one such
        value), and decided here once we hold it (we accepted it ourselves)."""
        if k in self.chosen:
            return
        acks = self.acks.get(k)
        if acks is None:
            # The owner accepted before sending its Accept, so before anyone else.
            acks = self.acks[k] = {k % self.n}
        acks.add(acceptor)
        if len(acks) >= self.majority:
            acc = self.accepted.get(k)
            if acc is not None and acc[0] == 0:
                self._decide(k, acc[1])

    def _on_commit(self, m: Commit) -> None:
        k = self._check_instance(m.instance)
        commands = self._check_commands(m.commands)
        self._decide(k, commands)
        if commands:
            self._heard_of(k)

    def _on_skip(self, m: Skip) -> None:
        pass  # the skips are learned for every message

    def _on_prepare(self, m: Prepare) -> None:
        ballot = self._check_ballot(m.sender, m.ballot)
        q, start, end = self._check_range(m.owner, m.start, m.end)
        if q != self.id:
            self._hold_until[q] = self.now_ms + 2 * self.config.retransmit_ms
        self._send(m.sender, self._promise(ballot, q, start, end))

    def _check_range(self, owner: object, start: object, end: object) -> tuple[int, int, int]:
        n = self.n
        if type(owner) is not int or not 0 <= owner < n:
            raise _Bad(f"bad owner {owner!r}")
        s = self._check_instance(start)
        if type(end) is not int or s % n != owner or end % n != owner:
            raise _Bad("bad range")
        if not s < end <= s + n * self.config.recovery_batch_max:
            raise _Bad("bad range length")
        return owner, s, end

    def _promise(self, ballot: int, q: int, start: int, end: int) -> Promise:
        n = self.n
        chosen = self.chosen
        for x in range(start, end, n):
            if x not in chosen and self.promised.get(x, 0) > ballot:
                self.stats.stale += 1
                return Promise(
                    self.id,
                    self.promised[x],
                    q,
                    start,
                    False,
                    (),
                    (),
                    self.last_valued,
                    self.next_own,
                )
        if q == self.id and end > self.next_own:
            # Our own instances are being revoked: leave them, continue beyond.
            self.next_own = end
        accepted: list[tuple[int, int]] = []
        values: list[tuple[Command, ...] | None] = []
        for x in range(start, end, n):
            if x in chosen:
                accepted.append((x, CHOSEN_BALLOT))
                values.append(chosen[x])
                continue
            if self.promised.get(x, 0) != ballot:
                self.promised[x] = ballot
                self._persist.append(CPromised(ReplicaId(q), CIndex(x), Ballot(ballot)))
            acc = self.accepted.get(x)
            if acc is not None:
                accepted.append((x, acc[0]))
                values.append(acc[1])
        return Promise(
            self.id,
            ballot,
            q,
            start,
            True,
            tuple(accepted),
            tuple(values),
            self.last_valued,
            self.next_own,
        )

    def _on_promise(self, m: Promise) -> None:
        rev = self.revocations.get(m.owner) if type(m.owner) is int else None
        if type(m.ballot) is not int or type(m.ok) is not bool:
            raise _Bad("bad promise")
        if not m.ok:
            if rev is not None and m.ballot > rev.ballot:
                self.round = max(self.round, ballot_round(Ballot(m.ballot)))
                del self.revocations[rev.owner]
            return
        if rev is None or rev.ballot != m.ballot or rev.start != m.start or rev.accepts is not None:
            return
        if len(m.accepted) != len(m.values):
            raise _Bad("promise entries and values differ in length")
        for (x, b), v in zip(m.accepted, m.values, strict=True):
            if type(x) is not int or type(b) is not int or v is None:
                raise _Bad("bad promise entry")
            if not rev.start <= x < rev.end or x % self.n != rev.owner:
                raise _Bad("promise entry outside the range")
            self._check_commands(v)
        rev.promises[m.sender] = m
        if len(rev.promises) >= self.majority:
            self._revocation_phase2(rev)

    def _on_learn_request(self, m: LearnRequest) -> None:
        start = self._check_instance(m.start)
        upto = m.upto
        if type(upto) is not int or not -1 <= upto < self._window_end():
            raise _Bad("bad upto")
        self._heard_of(upto)
        limit = min(start + self.n * self.config.learn_c_max, self.max_known + 1)
        chosen = self.chosen
        values = [chosen.get(x) for x in range(start, limit)]
        while values and values[-1] is None:
            values.pop()
        if values:
            self._send(
                m.sender, Decided(self.id, start, tuple(values), self.last_valued, self.next_own)
            )

    def _on_decided(self, m: Decided) -> None:
        start = self._check_instance(m.start)
        if type(m.values) is not tuple or start + len(m.values) > self._window_end():
            raise _Bad("bad decided")
        for v in m.values:
            if v is not None:
                self._check_commands(v)
        for i, v in enumerate(m.values):
            if v is not None:
                self._decide(start + i, v)
                if v:
                    self._heard_of(start + i)

    # -- revocation ---------------------------------------------------------

    def _maybe_revoke(self, q: int, x: int) -> None:
        now = self.now_ms
        if q in self.revocations or now < self._hold_until.get(q, -1e18):
            return
        wait = self.suspect_ms[q]
        if now - self.last_heard[q] < wait and now - self._blocked_since < wait:
            # The owner is heard from, and execution has not waited on x that
            # long. (An owner refused at ballot 0 leaves its instance to the
            # revocation that began it; if that one stopped, someone must finish
            # it although the owner is alive.)
            return
        self.suspect_ms[q] = self._draw_suspect()
        self.round += 1
        ballot = make_ballot(self.round, ReplicaId(self.id))
        end = x + self.n * self.config.recovery_batch_max
        rev = _Revocation(q, ballot, x, end, now)
        self.revocations[q] = rev
        self.stats.revocations += 1
        mine = self._promise(ballot, q, x, end)
        if not mine.ok:
            self.round = max(self.round, ballot_round(Ballot(mine.ballot)))
            del self.revocations[q]
            return
        rev.promises[self.id] = mine
        self._broadcast(Prepare(self.id, ballot, q, x, end, self.last_valued, self.next_own))

    def _retransmit_revocation(self, rev: _Revocation) -> None:
        rev.sent_ms = self.now_ms
        if rev.accepts is None:
            # Phase 1 did not gather a majority: try again later, higher.
            del self.revocations[rev.owner]
            return
        for x, (value, acks) in rev.accepts.items():
            for p in self._peers():
                if p not in acks:
                    self._send(p, self._accept(x, rev.ballot, value, -1))

    def _revocation_phase2(self, rev: _Revocation) -> None:
        n = self.n
        best: dict[int, tuple[int, tuple[Command, ...]]] = {}
        for promise in rev.promises.values():
            for (x, b), v in zip(promise.accepted, promise.values, strict=True):
                assert v is not None
                if x not in best or b > best[x][0]:
                    best[x] = (b, v)
        rev.accepts = {}
        for x in range(rev.start, rev.end, n):
            if x in self.chosen:
                continue
            b, value = best.get(x, (-1, NOOP))
            if b == CHOSEN_BALLOT:
                self._decide(x, value)
                self._broadcast(self._commit(x, value))
                continue
            if self.promised.get(x, 0) > rev.ballot:
                del self.revocations[rev.owner]
                return
            self.promised[x] = rev.ballot
            self.accepted[x] = (rev.ballot, value)
            self._persist.append(
                CAccepted(ReplicaId(rev.owner), CIndex(x), Ballot(rev.ballot), value)
            )
            self.stats.instances_revoked += 1
            rev.accepts[x] = (value, {self.id})
            self._broadcast(self._accept(x, rev.ballot, value, -1))
        rev.sent_ms = self.now_ms
        if not rev.accepts:
            del self.revocations[rev.owner]

    # -- restart ------------------------------------------------------------

    def _restore(self, records: list[Any]) -> None:
        me, n = self.id, self.n
        own: list[int] = []
        for rec in records:
            if isinstance(rec, CAccepted):
                x = int(rec.index)
                acc = self.accepted.get(x)
                if acc is None or rec.ballot >= acc[0]:
                    self.accepted[x] = (int(rec.ballot), rec.commands)
                if rec.ballot >= self.promised.get(x, 0):
                    self.promised[x] = int(rec.ballot)
                if x % n == me and rec.ballot == 0 and rec.owner == me:
                    own.append(x)
                    self.last_valued = max(self.last_valued, x)
                    self.next_own = max(self.next_own, x + n)
            elif isinstance(rec, CPromised):
                x = int(rec.index)
                if rec.ballot > self.promised.get(x, 0):
                    self.promised[x] = int(rec.ballot)
                if x % n == me:
                    self.next_own = max(self.next_own, x + n)
            elif isinstance(rec, OwnNext):
                self.next_own = max(self.next_own, rec.next_own)
        if self.promised:
            self.round = ballot_round(Ballot(max(self.promised.values())))
        self._persisted_next = self.next_own
        # Drive our last own instances again: they may be chosen nowhere yet.
        for x in sorted(set(own))[-self.config.c_inflight_max :]:
            acc = self.accepted[x]
            if acc[0] == 0 and self.promised.get(x, 0) == 0:
                prev = max((y for y in own if y < x), default=me - n)
                self.inflight[x] = _Own(acc[1], prev, -1e18)
                self.acks[x] = {me}
        self._learn_sent_ms = -1e18


def make_replica(
    config: ClusterConfig,
    replica_id: int,
    state_machine: StateMachine,
    rng: random.Random,
    observe: bool,
    records: list[Any] | None,
) -> MenciusReplica:
    """The registry's factory (:data:`sdpaxos.protocols.MakeReplica`)."""
    return MenciusReplica(config, replica_id, state_machine, rng, observe, records)


# Every counter is an int (the simulator sums them).
assert all(f.type in (int, "int") for f in fields(MenciusStats))
