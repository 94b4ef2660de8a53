"""Multi-Paxos: one stable leader, phase 2 only in the normal case (the paper's baseline).

The SDPaxos paper (section 5) measures itself against classic Multi-Paxos from
the EPaxos code base (``docs/PEERS.md`` 2.1): a single leader orders every
command. This module is that protocol as a pure core with the driving API of
:class:`sdpaxos.core.replica.Replica` (``propose``, ``step``, ``tick``,
``ready``, ``observe_rtt``, ``read``), so that the simulator, the runtime and
the benchmarks run it by name (:func:`sdpaxos.protocols.protocol`).

Normal case. The leader (``config.sequencer`` until a failure) puts every
proposal waiting at it, up to ``config.c_batch_max`` commands, into its next
instance, and sends ``Accept`` to the nearest majority (``config.thrifty``; to
everyone otherwise, and to everyone on a retransmission). A majority of
``Accepted`` (the leader counts itself) commits the instance; the leader then
sends ``Commit`` to everyone, without the commands to those that accepted them.
At most ``config.c_inflight_max`` instances are in flight. Another replica
forwards its clients' proposals to the leader (``Forward``). Every replica
answers its clients READY when it learns the instance that holds their command
committed; a command proposed with ``Wait.EXECUTED`` is answered once,
EXECUTED, when this replica executed it (as SDPaxos's core does). Commit
latency at replica ``r``: RTT(r, leader) + the leader's nearest-majority RTT
(0 + that at the leader).

Execution follows instance order. A command's ``(client_id, seq)`` executes
once (:class:`~sdpaxos.core.sessions.Sessions`); a duplicate is reported as such.

Failures. The leader sends a heartbeat every ``heartbeat_ms``; a replica that
answers one promises not to support another leader for ``lease_ms`` (the
lease). A replica that hears nothing from the leader for ``lease_ms +
election_margin_ms`` plus a random jitter runs phase 1 with a higher ballot
(``round * 256 + id``) over every instance from its first uncommitted one:
it adopts the highest-ballot accepted value per instance, fills holes with
no-ops (empty instances) and proposes them again in phase 2. A message of a
stale ballot is answered with a ``Nack`` carrying the higher ballot, so an old
leader steps down. A replica re-forwards its clients' proposals that were not
committed within ``retransmit_ms`` of leaving (exactly-once makes that safe; a
deposed leader hands its clients' uncommitted commands to the next one), and a
replica that falls behind asks for the commits it is missing (``LearnRequest``).

Reads. The leader answers ``read`` with ``ok=True`` only while a majority
lease holds (granted by heartbeat acknowledgements, shortened by
``lease_hold_ms`` for clock drift), once it has executed every instance it
started; anything else is ``ok=False`` (the client goes through the log).
Pending reads wait in arrival order (each waits for the instances started
before it, so the oldest is always answered first): O(1) per read.

Durability: a promise is a :class:`~sdpaxos.core.storage.ViewPromised` record
(its ``view`` is the ballot) and an acceptance a
:class:`~sdpaxos.core.storage.CAccepted` of owner ``config.sequencer`` (the
one log) and index the instance, so the simulator's checker verifies that no
instance has two chosen values. A restarted replica keeps those and re-learns
commits from its peers; it re-executes from instance 0.

Simplified on purpose (said plainly): no log compaction or snapshots (the log
and a promise cover every instance from the requester's first uncommitted one,
unbounded); membership is fixed; a promise reports accepted instances whole
(no paging).
"""

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, cast

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
from sdpaxos.core.errors import LocalProtocolError, Overloaded, PeerMessageError
from sdpaxos.core.proximity import Proximity
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply
from sdpaxos.core.sessions import REGISTRATION_SEQ, Outcome, Sessions
from sdpaxos.core.storage import CAccepted, Record, ViewPromised
from sdpaxos.core.types import (
    BALLOT_STRIDE,
    Ballot,
    CIndex,
    Command,
    ReplicaId,
    Slot,
    View,
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
    "Forward",
    "Heartbeat",
    "HeartbeatAck",
    "LearnReply",
    "LearnRequest",
    "MultiPaxosReplica",
    "Nack",
    "Prepare",
    "Promise",
    "Stats",
    "Status",
    "make_replica",
]

TITLE = "Multi-Paxos"

#: Lease grants kept per heartbeat stamp at most this many heartbeats back.
HEARTBEATS_TRACKED_MAX = 16


# --------------------------------------------------------------------- messages


@dataclass(frozen=True, slots=True)
class Forward:
    """A non-leader hands its clients' ``commands`` to the leader of ``ballot``."""

    src: int
    ballot: int
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class Accept:
    """Phase 2a: accept ``commands`` for ``instance`` at ``ballot``."""

    src: int
    ballot: int
    instance: int
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class Accepted:
    """Phase 2b: ``src`` accepted the leader's value of ``instance`` at ``ballot``."""

    src: int
    ballot: int
    instance: int


@dataclass(frozen=True, slots=True)
class Commit:
    """``instance`` is chosen. ``commands`` is ``None`` when the receiver accepted the
    value at ``ballot`` (it has them); otherwise the chosen commands."""

    src: int
    ballot: int
    instance: int
    commands: tuple[Command, ...] | None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The leader of ``ballot`` is alive; ``stamp`` numbers it for the lease,
    ``commit_upto`` is its first uncommitted instance (followers behind it learn)."""

    src: int
    ballot: int
    stamp: int
    commit_upto: int


@dataclass(frozen=True, slots=True)
class HeartbeatAck:
    """``src`` grants the lease of heartbeat ``stamp`` of ``ballot``."""

    src: int
    ballot: int
    stamp: int


@dataclass(frozen=True, slots=True)
class Prepare:
    """Phase 1a: promise ``ballot`` and report accepted instances from ``start``."""

    src: int
    ballot: int
    start: int


@dataclass(frozen=True, slots=True)
class Promise:
    """Phase 1b: ``src`` promised ``ballot``. Per accepted instance at or above
    ``start``: its number, the ballot it was accepted at, the value, and whether
    ``src`` knows it is committed."""

    src: int
    ballot: int
    start: int
    instances: tuple[int, ...]
    ballots: tuple[int, ...]
    values: tuple[tuple[Command, ...] | None, ...]
    committed: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class Nack:
    """``src`` has promised ``ballot``, higher than the one the sender used."""

    src: int
    ballot: int


@dataclass(frozen=True, slots=True)
class LearnRequest:
    """``src`` asks for the committed instances from ``start`` on."""

    src: int
    start: int


@dataclass(frozen=True, slots=True)
class LearnReply:
    """Committed values of instances ``start ..`` (contiguous); ``more``: the
    sender knows committed instances beyond them."""

    src: int
    start: int
    values: tuple[tuple[Command, ...] | None, ...]
    more: bool


#: Append-only: a message's wire tag is its index here.
MESSAGE_TYPES: tuple[type, ...] = (
    Forward,
    Accept,
    Accepted,
    Commit,
    Heartbeat,
    HeartbeatAck,
    Prepare,
    Promise,
    Nack,
    LearnRequest,
    LearnReply,
)

MultiPaxosMessage = (
    Forward
    | Accept
    | Accepted
    | Commit
    | Heartbeat
    | HeartbeatAck
    | Prepare
    | Promise
    | Nack
    | LearnRequest
    | LearnReply
)


# ------------------------------------------------------------------ state types


@dataclass(slots=True)
class Stats:
    """Counters (the simulator sums them over incarnations)."""

    steps: int = 0
    rejected: int = 0
    stale: int = 0
    nacks_sent: int = 0
    proposals: int = 0
    forwarded: int = 0
    forward_retries: int = 0
    forwards_dropped: int = 0
    instances_started: int = 0
    instances_committed: int = 0
    accept_retransmits: int = 0
    commands_executed: int = 0
    duplicates: int = 0
    elections_started: int = 0
    elections_won: int = 0
    stepped_down: int = 0
    promises_refused_in_lease: int = 0
    learn_requests: int = 0
    reads_ok: int = 0
    reads_refused: int = 0


@dataclass(frozen=True, slots=True)
class Status:
    """Where a replica stands, for humans and tests."""

    id: ReplicaId
    ballot: Ballot
    leader: ReplicaId | None
    is_leader: bool
    candidate: bool
    has_lease: bool
    commit_upto: int
    executed_upto: int
    next_instance: int
    inflight: int
    queued: int
    waiting: int


@dataclass(slots=True)
class _Entry:
    """One instance as this replica knows it."""

    #: Ballot of the accepted (or learned) value; -1: no value here.
    ballot: int = -1
    commands: tuple[Command, ...] | None = None
    committed: bool = False


@dataclass(slots=True)
class _Inflight:
    """An instance the leader proposed and has not committed yet."""

    commands: tuple[Command, ...]
    acks: set[int]
    sent_ms: float
    sent_to: tuple[ReplicaId, ...]


@dataclass(slots=True)
class _Candidacy:
    ballot: int
    start: int
    started_ms: float
    promised: set[int] = field(default_factory=set)
    #: instance -> (ballot, value, committed), the best reported so far.
    best: dict[int, tuple[int, tuple[Command, ...], bool]] = field(default_factory=dict)


Key = tuple[int, int]


def _key(command: Command) -> Key:
    return (command.client_id, command.seq)


def _owner(ballot: int) -> ReplicaId:
    return ReplicaId(ballot % BALLOT_STRIDE)


def _is_int(value: object) -> bool:
    return type(value) is int


def _check_commands(value: object, what: str) -> None:
    if not all_commands(value):
        raise PeerMessageError(f"{what} is not a tuple of commands")


# ---------------------------------------------------------------------- replica


class MultiPaxosReplica(BaselineReplica):
    """One Multi-Paxos replica, driven like :class:`sdpaxos.core.replica.Replica`."""

    def __init__(
        self,
        config: ClusterConfig,
        replica_id: int,
        state_machine: StateMachine,
        *,
        rng: random.Random | None = None,
        observe: bool = False,
        records: list[Record] | None = None,
    ) -> None:
        super().__init__(
            config,
            replica_id,
            state_machine,
            rng if rng is not None else random.Random(replica_id),
            observe,
        )
        self.stats = Stats()
        #: The log owner named in records and Executed entries (there is one log).
        self.log_owner = ReplicaId(config.sequencer)
        self.prox = Proximity(self.id, self.n, self.majority, config.thrifty, config.rtt_ms)
        # -- acceptor (durable: promised, accepted values)
        initial = make_ballot(0, ReplicaId(config.sequencer))
        self.promised: int = initial
        self.log: dict[int, _Entry] = {}
        # -- learner and executor (volatile)
        self.commit_upto = 0  # every instance below is committed here
        self.exec_upto = 0  # every instance below is executed here
        self.commit_hint = 0  # someone knows instances committed up to here
        self.sessions = Sessions(config.session_lifetime_slots, config.sessions_max)
        self.learn_ms = 0.0  # when commit_upto last moved, or we last asked
        self.learn_full = False  # the last LearnReply said there is more
        # -- leader
        self.leader: ReplicaId | None = ReplicaId(config.sequencer)
        self.is_leader = False
        self.ballot: int = initial  # our ballot while leading
        self.max_seen: int = initial
        self.next_instance = 0
        self.inflight: dict[int, _Inflight] = {}
        self.queue: list[Command] = []
        self.in_log: set[Key] = set()  # (leader) commands queued or in flight
        self.hb_stamp = 0
        self.hb_sent_ms = -math.inf
        self.hb_grants: dict[int, tuple[float, set[int]]] = {}
        self.lease_valid_until_ms = -math.inf
        # -- election
        self.candidacy: _Candidacy | None = None
        #: The highest Prepare we could not promise yet (our lease held).
        self.deferred: Prepare | None = None
        self.last_contact_ms = 0.0  # last message of the leader at its ballot
        self.lease_until_ms = -math.inf  # promised not to support another leader until
        self.jitter_ms = self._jitter()
        # -- clients of this replica
        #: Commands proposed here whose commit this replica has not seen yet.
        self.waiting: dict[Key, Command] = {}
        #: Commands proposed here with ``Wait.EXECUTED``: answered once, at execution.
        self.exec_waiters: set[Key] = set()
        #: ``(when, key)`` of our clients' commands as they left for the leader,
        #: oldest first: retried if not committed ``retransmit_ms`` later.
        self.forwarded: deque[tuple[float, Key]] = deque()
        #: Leader reads in arrival order: ``(read_id, instance to have executed)``
        #: (that instance never decreases while this replica leads), and their ids.
        self.reads: deque[tuple[int, int]] = deque()
        self.read_ids: set[int] = set()
        # -- effects
        self._dirty = False
        self._handlers: dict[type, Callable[[Any], None]] = {
            Forward: self._on_forward,
            Accept: self._on_accept,
            Accepted: self._on_accepted,
            Commit: self._on_commit,
            Heartbeat: self._on_heartbeat,
            HeartbeatAck: self._on_heartbeat_ack,
            Prepare: self._on_prepare,
            Promise: self._on_promise,
            Nack: self._on_nack,
            LearnRequest: self._on_learn_request,
            LearnReply: self._on_learn_reply,
        }
        if records is None:
            self.is_leader = self.id == config.sequencer
            if self.is_leader:
                self.lease_until_ms = 0.0
        else:
            self._restore(records)

    # ------------------------------------------------------------------- API

    @property
    def sequencer(self) -> ReplicaId | None:
        """The leader as this replica believes (the simulator's name for it)."""
        return self.id if self.is_leader else self.leader

    @property
    def view(self) -> int:
        """The promised ballot (grows with every leader change)."""
        return self.promised

    @property
    def executed_upto(self) -> int:
        return self.exec_upto

    @property
    def is_sequencer(self) -> bool:
        """Is this replica the leader (the runtime's and the simulator's name)?"""
        return self.is_leader

    @property
    def proposals_waiting(self) -> int:
        """Proposals queued here, not yet in an instance or forwarded (backpressure)."""
        return len(self.queue)

    def has_lease(self) -> bool:
        return self.is_leader and self.now_ms < self.lease_valid_until_ms

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None:
        if not isinstance(command, Command):
            raise LocalProtocolError(f"propose() takes a Command, got {type(command).__name__}")
        queue = self.queue
        if len(queue) >= self.config.propose_queue_max:
            raise Overloaded(f"{len(queue)} proposals are already queued")
        self.stats.proposals += 1
        key = (command.client_id, command.seq)
        if wait == WAIT_EXECUTED:
            self.exec_waiters.add(key)
        if key not in self.waiting:
            done = self._executed_result(command)
            if done is not None:
                # Already executed here (a client's retry): answer at once.
                self._answer_executed(key, done[0], False)
                return
            self.waiting[key] = command
        in_log = self.in_log
        if key not in in_log:  # (a client's retry of a command forwarded already goes again)
            in_log.add(key)
            queue.append(command)

    def step(self, message: Any, now_ms: float) -> None:
        """Handle one message from a peer. Never raises for bad peer input."""
        self._advance_clock(now_ms)
        self.stats.steps += 1
        try:
            handler = self._handlers.get(type(message))
            if handler is None:
                raise PeerMessageError(f"unknown message type {type(message).__name__}")
            src = message.src
            if not _is_int(src) or not 0 <= src < self.n or src == self.id:
                raise PeerMessageError(f"bad sender {src!r}")
            handler(message)
        except PeerMessageError:
            self.stats.rejected += 1

    def tick(self, now_ms: float) -> None:
        self._advance_clock(now_ms)
        now = self.now_ms
        cfg = self.config
        deferred = self.deferred
        if deferred is not None:
            if deferred.ballot <= self.promised or self.is_leader:
                self.deferred = None
            elif self._may_promise(deferred.src):
                self._on_prepare(deferred)
        if self.is_leader:
            if now - self.hb_sent_ms >= cfg.heartbeat_ms:
                self._send_heartbeats()
            self._retransmit_accepts(now)
        elif self.candidacy is not None:
            if now - self.candidacy.started_ms >= cfg.candidate_timeout_ms + self.jitter_ms:
                self._start_election()
        elif (
            now - self.last_contact_ms >= cfg.lease_ms + cfg.election_margin_ms + self.jitter_ms
            and now >= self.lease_until_ms
        ):
            self._start_election()
        self._retry_waiting(now)
        self._maybe_learn(now)

    def ready(self) -> Ready:
        if self.queue:
            self._dispatch_queue()
        if self._dirty:
            self._dirty = False
            self._execute()
        if self.reads:
            self._serve_reads()
        return self.hand_over()

    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None:
        """A linearizable local read: ``ok`` at the leader under a majority lease,
        once it executed every instance it started; otherwise not ``ok``."""
        self._advance_clock(now_ms)
        if read_id in self.read_ids:
            raise LocalProtocolError(f"read {read_id} is already waiting")
        if len(self.reads) >= self.config.reads_pending_max:
            raise Overloaded("too many reads are waiting")
        if self.has_lease():
            self.reads.append((read_id, self.next_instance))
            self.read_ids.add(read_id)
        else:
            self.stats.reads_refused += 1
            self._reads.append(ReadResult(read_id, False))

    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None:
        if not _is_int(peer) or not 0 <= peer < self.n or peer == self.id or not rtt_ms >= 0:
            raise LocalProtocolError(f"bad rtt observation {peer!r} {rtt_ms!r}")
        self.prox.observe(peer, rtt_ms)

    def status(self) -> Status:
        return Status(
            id=self.id,
            ballot=Ballot(self.promised),
            leader=self.sequencer,
            is_leader=self.is_leader,
            candidate=self.candidacy is not None,
            has_lease=self.has_lease(),
            commit_upto=self.commit_upto,
            executed_upto=self.exec_upto,
            next_instance=self.next_instance,
            inflight=len(self.inflight),
            queued=len(self.queue),
            waiting=len(self.waiting),
        )

    # ----------------------------------------------------------- proposals

    def _enqueue(self, command: Command) -> None:
        key = (command.client_id, command.seq)
        if key in self.in_log:
            return
        self.in_log.add(key)
        self.queue.append(command)

    def _executed_result(self, command: Command) -> tuple[bytes | None] | None:
        """``(result,)`` if ``command`` already executed here, else ``None``."""
        if command.client_id == 0 or command.seq == REGISTRATION_SEQ:
            return None
        got = self.sessions.get(command.client_id)
        if got is None or command.seq > got[0]:
            return None
        return (got[1] if command.seq == got[0] else None,)

    def _dispatch_queue(self) -> None:
        """Leader: start instances from the queue (batched). Others: forward it."""
        if self.is_leader:
            cfg = self.config
            batch_max = cfg.c_batch_max
            queue = self.queue
            while queue and len(self.inflight) < cfg.c_inflight_max:
                if len(queue) <= batch_max:
                    batch = tuple(queue)
                    queue.clear()
                else:
                    batch = tuple(queue[:batch_max])
                    del queue[:batch_max]
                self._propose_instance(self.next_instance, batch, self._accept_targets())
                self.next_instance += 1
            return
        leader = self.leader
        if leader is None or leader == self.id or self.candidacy is not None:
            return  # held until a leader is known
        now = self.now_ms
        waiting = self.waiting
        forwarded = self.forwarded
        for c in self.queue:
            key = (c.client_id, c.seq)
            if key in waiting:
                forwarded.append((now, key))
        self.stats.forwarded += len(self.queue)
        self._send(leader, Forward(self.id, self.promised, tuple(self.queue)))
        self.queue = []
        self.in_log.clear()

    def _accept_targets(self) -> tuple[ReplicaId, ...]:
        return self.prox.c_quorum if self.config.thrifty else tuple(self.prox.near)

    def _propose_instance(
        self, instance: int, commands: tuple[Command, ...], targets: tuple[ReplicaId, ...]
    ) -> None:
        """Phase 2 at our ballot: accept it ourselves (durably), send Accepts."""
        self.stats.instances_started += 1
        self._accept_locally(instance, self.ballot, commands)
        self.inflight[instance] = _Inflight(commands, {self.id}, self.now_ms, targets)
        msg = Accept(self.id, self.ballot, instance, commands)
        for p in targets:
            self._send(p, msg)
        if self.majority == 1:
            self._commit_as_leader(instance)

    def _accept_locally(self, instance: int, ballot: int, commands: tuple[Command, ...]) -> None:
        entry = self.log.get(instance)
        if entry is None:
            entry = self.log[instance] = _Entry()
        if not entry.committed:
            entry.commands = commands
        entry.ballot = ballot
        self._persist.append(CAccepted(self.log_owner, CIndex(instance), Ballot(ballot), commands))

    def _retransmit_accepts(self, now: float) -> None:
        retransmit = self.config.retransmit_ms
        for instance, inf in self.inflight.items():
            if now - inf.sent_ms < retransmit:
                continue
            # Peers we asked that did not answer are probably down: leave them
            # out of thrifty quorums until heard from; resend to everyone.
            for p in inf.sent_to:
                if p not in inf.acks:
                    self.prox.suspect(p)
            inf.sent_ms = now
            inf.sent_to = tuple(self.prox.near)
            msg = Accept(self.id, self.ballot, instance, inf.commands)
            self.stats.accept_retransmits += 1
            for p in self.prox.near:
                if p not in inf.acks:
                    self._send(p, msg)

    def _retry_waiting(self, now: float) -> None:
        """Re-forward (or re-queue, if we lead now) our clients' proposals that
        were not committed within a retransmission period of leaving."""
        forwarded = self.forwarded
        retransmit = self.config.retransmit_ms
        while forwarded and now - forwarded[0][0] >= retransmit:
            key = forwarded.popleft()[1]
            command = self.waiting.get(key)
            if command is None or key in self.in_log:
                continue  # committed, or queued here again (it leaves again later)
            self.stats.forward_retries += 1
            self._enqueue(command)

    # -------------------------------------------------------------- leader

    def _on_forward(self, m: Forward) -> None:
        _check_commands(m.commands, "Forward.commands")
        if not _is_int(m.ballot):
            raise PeerMessageError("bad ballot")
        if not self.is_leader:
            self.stats.forwards_dropped += len(m.commands)
            if m.ballot < self.promised:
                self._nack(m.src)
            elif self.leader is not None and self.leader not in (self.id, m.src):
                # Pass it on: the sender's idea of the leader is behind ours.
                self._send(self.leader, Forward(self.id, self.promised, m.commands))
            return
        room = self.config.propose_queue_max - len(self.queue)
        for c in m.commands:
            if room <= 0:
                self.stats.forwards_dropped += 1
                continue
            if self._executed_result(c) is not None:
                continue  # already executed: the sender learns its commit
            before = len(self.queue)
            self._enqueue(c)
            room -= len(self.queue) - before

    def _on_accepted(self, m: Accepted) -> None:
        if not (_is_int(m.ballot) and _is_int(m.instance)):
            raise PeerMessageError("bad Accepted")
        self.prox.heard_from(ReplicaId(m.src))
        if not self.is_leader or m.ballot != self.ballot:
            self.stats.stale += 1
            return
        inf = self.inflight.get(m.instance)
        if inf is None:
            return  # committed already, or never ours
        inf.acks.add(m.src)
        if len(inf.acks) >= self.majority:
            self._commit_as_leader(m.instance)

    def _commit_as_leader(self, instance: int) -> None:
        inf = self.inflight.pop(instance)
        self._learn_committed(instance, self.ballot, inf.commands)
        # One Commit with the commands for the peers that did not accept them,
        # one without for those that did: each a single object, as a broadcast
        # is, so the codec packs it once per send (``encode_batch``'s ``packed``).
        full: Commit | None = None
        brief: Commit | None = None
        for p in self.prox.near:
            if p in inf.acks:
                if brief is None:
                    brief = Commit(self.id, self.ballot, instance, None)
                self._send(p, brief)
            else:
                if full is None:
                    full = Commit(self.id, self.ballot, instance, inf.commands)
                self._send(p, full)

    def _send_heartbeats(self) -> None:
        now = self.now_ms
        self.hb_sent_ms = now
        self.hb_stamp += 1
        stamp = self.hb_stamp
        # We promise ourselves too: no support for another leader meanwhile.
        self.lease_until_ms = now + self.config.lease_ms
        self.hb_grants[stamp] = (now, {self.id})
        for old in [s for s in self.hb_grants if s <= stamp - HEARTBEATS_TRACKED_MAX]:
            del self.hb_grants[old]
        msg = Heartbeat(self.id, self.ballot, stamp, self.commit_upto)
        for p in self.prox.near:
            self._send(p, msg)
        if self.majority == 1:
            self.lease_valid_until_ms = now + self.config.lease_hold_ms

    def _on_heartbeat_ack(self, m: HeartbeatAck) -> None:
        if not (_is_int(m.ballot) and _is_int(m.stamp)):
            raise PeerMessageError("bad HeartbeatAck")
        self.prox.heard_from(ReplicaId(m.src))
        if not self.is_leader or m.ballot != self.ballot:
            self.stats.stale += 1
            return
        grant = self.hb_grants.get(m.stamp)
        if grant is None:
            return
        sent_ms, grantors = grant
        grantors.add(m.src)
        if len(grantors) >= self.majority:
            until = sent_ms + self.config.lease_hold_ms
            if until > self.lease_valid_until_ms:
                self.lease_valid_until_ms = until

    def _step_down(self, ballot: int) -> None:
        """A higher ballot exists: stop leading or running."""
        if self.is_leader:
            self.stats.stepped_down += 1
            self.is_leader = False
            self.inflight.clear()
            self.in_log.clear()
            self.hb_grants.clear()
            self.lease_valid_until_ms = -math.inf
            # The lease we promised ourselves protected our own reads only, and
            # they stop here: release it, so that a successor need not wait.
            self.lease_until_ms = min(self.lease_until_ms, self.now_ms)
            # Our clients' uncommitted commands, queued or in our instances, go
            # to the new leader; others' are retried by the replicas that
            # forwarded them.
            self.queue = list(self.waiting.values())
            self.in_log = set(self.waiting)
            self._fail_reads()
        self.candidacy = None
        self.leader = _owner(ballot)
        self.last_contact_ms = self.now_ms
        self.jitter_ms = self._jitter()

    def _on_nack(self, m: Nack) -> None:
        if not _is_int(m.ballot) or m.ballot < 0:
            raise PeerMessageError("bad Nack")
        self.prox.heard_from(ReplicaId(m.src))
        if m.ballot > self.max_seen:
            self.max_seen = m.ballot
        if self.is_leader:
            if m.ballot > self.ballot:
                self._step_down(m.ballot)
        elif self.candidacy is not None:
            if m.ballot > self.candidacy.ballot:
                self._step_down(m.ballot)  # retry later, above it
        elif m.ballot > self.promised:
            self.leader = _owner(m.ballot)  # a hint for forwarding

    # ------------------------------------------------------------ acceptor

    def _check_ballot_instance(self, ballot: object, instance: object) -> None:
        if not _is_int(ballot) or cast(int, ballot) < 0:
            raise PeerMessageError(f"bad ballot {ballot!r}")
        if not _is_int(instance) or not (
            0 <= cast(int, instance) < self.commit_upto + self.config.c_index_window_max
        ):
            raise PeerMessageError(f"bad instance {instance!r}")

    def _nack(self, dst: int) -> None:
        self.stats.nacks_sent += 1
        self.stats.stale += 1
        self._send(ReplicaId(dst), Nack(self.id, self.promised))

    def _raise_promise(self, ballot: int) -> None:
        if ballot > self.promised:
            self.promised = ballot
            self._persist.append(ViewPromised(View(ballot)))
        if ballot > self.max_seen:
            self.max_seen = ballot

    def _follow(self, ballot: int, src: int) -> None:
        """A message of the leader of ``ballot`` (>= our promise) arrived."""
        if self.is_leader and ballot > self.ballot:
            self._step_down(ballot)
        if self.candidacy is not None and ballot >= self.candidacy.ballot:
            self.candidacy = None
        self._raise_promise(ballot)
        if not self.is_leader:
            self.leader = ReplicaId(src)
            self.last_contact_ms = self.now_ms

    def _on_accept(self, m: Accept) -> None:
        self._check_ballot_instance(m.ballot, m.instance)
        _check_commands(m.commands, "Accept.commands")
        if _owner(m.ballot) != m.src:
            raise PeerMessageError("Accept from a replica that does not own the ballot")
        entry = self.log.get(m.instance)
        if entry is not None and entry.committed and entry.commands != m.commands:
            # A correct leader never re-proposes another value for a chosen instance.
            raise PeerMessageError(f"Accept contradicts committed instance {m.instance}")
        self.prox.heard_from(ReplicaId(m.src))
        if m.ballot < self.promised:
            self._nack(m.src)
            return
        self._follow(m.ballot, m.src)
        self._accept_locally(m.instance, m.ballot, m.commands)
        self._send(ReplicaId(m.src), Accepted(self.id, m.ballot, m.instance))

    def _on_prepare(self, m: Prepare) -> None:
        if not (_is_int(m.ballot) and _is_int(m.start)) or m.ballot < 0 or m.start < 0:
            raise PeerMessageError("bad Prepare")
        if _owner(m.ballot) != m.src:
            raise PeerMessageError("Prepare of a ballot the sender does not own")
        self.prox.heard_from(ReplicaId(m.src))
        if m.ballot < self.promised:
            self._nack(m.src)
            return
        if m.ballot > self.promised:
            now = self.now_ms
            if not self._may_promise(m.src):
                # Our lease (or a live leader) forbids it for now: promise when
                # it no longer does (tick), unless a leader shows up meanwhile.
                self.stats.promises_refused_in_lease += 1
                if not self.is_leader and (
                    self.deferred is None or m.ballot > self.deferred.ballot
                ):
                    self.deferred = m
                return
            self.deferred = None
            if self.candidacy is not None:
                self.candidacy = None
            self._raise_promise(m.ballot)
            self.leader = ReplicaId(m.src)
            self.last_contact_ms = now
            self.jitter_ms = self._jitter()
        instances, ballots, values, committed = [], [], [], []
        for i in sorted(i for i in self.log if i >= m.start):
            e = self.log[i]
            if e.commands is None:
                continue
            instances.append(i)
            ballots.append(e.ballot)
            values.append(e.commands)
            committed.append(e.committed)
        self._send(
            ReplicaId(m.src),
            Promise(
                self.id,
                m.ballot,
                m.start,
                tuple(instances),
                tuple(ballots),
                tuple(values),
                tuple(committed),
            ),
        )

    def _may_promise(self, src: int) -> bool:
        """May we promise a new ballot of ``src``? Not while our lease binds us,
        nor while the leader we follow is heard from (a false suspicion of one
        replica must not depose a live leader; Raft's pre-vote idea)."""
        if self.is_leader:
            return False
        now = self.now_ms
        quiet = (
            self.leader is None
            or self.leader == src
            or now - self.last_contact_ms >= self.config.lease_ms + self.config.election_margin_ms
        )
        return quiet and now >= self.lease_until_ms

    # ------------------------------------------------------------ election

    def _jitter(self) -> float:
        return self.rng.random() * self.config.election_jitter_ms

    def _start_election(self) -> None:
        """Phase 1 with a ballot above any seen, from our first uncommitted instance."""
        top = max(self.promised, self.max_seen)
        ballot = make_ballot(ballot_round(Ballot(top)) + 1, self.id)
        old = self.leader
        if old is not None and old != self.id:
            self.prox.suspect(old)
        self.stats.elections_started += 1
        self._raise_promise(ballot)
        self.leader = None
        self.jitter_ms = self._jitter()
        start = self.commit_upto
        c = self.candidacy = _Candidacy(ballot, start, self.now_ms, {self.id})
        for i, e in self.log.items():
            if i >= start and e.commands is not None:
                c.best[i] = (e.ballot, e.commands, e.committed)
        msg = Prepare(self.id, ballot, start)
        for p in self.prox.near:
            self._send(p, msg)
        if self.majority == 1:
            self._win()

    def _on_promise(self, m: Promise) -> None:
        if not (_is_int(m.ballot) and _is_int(m.start)):
            raise PeerMessageError("bad Promise")
        for part in (m.instances, m.ballots, m.values, m.committed):
            if type(part) is not tuple:
                raise PeerMessageError("Promise field is not a tuple")
        k = len(m.instances)
        if not (len(m.ballots) == len(m.values) == len(m.committed) == k):
            raise PeerMessageError("Promise fields of different lengths")
        window = self.commit_upto + self.config.c_index_window_max
        for i, b, v, c in zip(m.instances, m.ballots, m.values, m.committed, strict=True):
            if not (_is_int(i) and _is_int(b)) or not 0 <= i < window or type(c) is not bool:
                raise PeerMessageError("bad Promise entry")
            if v is None:
                raise PeerMessageError("Promise entry without a value")
            _check_commands(v, "Promise.values")
        self.prox.heard_from(ReplicaId(m.src))
        cand = self.candidacy
        if cand is None or m.ballot != cand.ballot or m.start != cand.start:
            self.stats.stale += 1
            return
        cand.promised.add(m.src)
        best = cand.best
        for i, b, v, c in zip(m.instances, m.ballots, m.values, m.committed, strict=True):
            assert v is not None
            if i < cand.start:
                continue
            have = best.get(i)
            if have is None or (c and not have[2]) or (not have[2] and b > have[0]):
                best[i] = (b, v, c)
        if len(cand.promised) >= self.majority:
            self._win()

    def _win(self) -> None:
        cand = self.candidacy
        assert cand is not None
        self.candidacy = None
        self.stats.elections_won += 1
        self.is_leader = True
        self.ballot = cand.ballot
        self.leader = self.id
        self.inflight.clear()
        held = self.queue
        self.queue = []
        self.in_log.clear()
        self.lease_valid_until_ms = -math.inf
        self.hb_grants.clear()
        top = max([cand.start - 1, *cand.best, *(i for i in self.log if i >= cand.start)])
        self.next_instance = top + 1
        everyone = tuple(self.prox.near)
        for i in range(cand.start, top + 1):
            entry = self.log.get(i)
            if entry is not None and entry.committed:
                continue
            got = cand.best.get(i)
            if got is not None and got[2]:
                self._learn_committed(i, got[0], got[1])
                continue
            value: tuple[Command, ...] = () if got is None else got[1]
            for c in value:
                self.in_log.add(_key(c))
            self._propose_instance(i, value, everyone)
        self._send_heartbeats()
        # Commands held during the election go into new instances (unless
        # they are in one already).
        for c in held:
            self._enqueue(c)

    def _on_heartbeat(self, m: Heartbeat) -> None:
        if not (_is_int(m.ballot) and _is_int(m.stamp) and _is_int(m.commit_upto)):
            raise PeerMessageError("bad Heartbeat")
        if _owner(m.ballot) != m.src or m.commit_upto < 0:
            raise PeerMessageError("bad Heartbeat")
        self.prox.heard_from(ReplicaId(m.src))
        if m.ballot < self.promised:
            self._nack(m.src)
            return
        self._follow(m.ballot, m.src)
        self.deferred = None
        self.jitter_ms = self._jitter()
        self.lease_until_ms = self.now_ms + self.config.lease_ms
        if m.commit_upto > self.commit_hint:
            self.commit_hint = m.commit_upto
        self._send(ReplicaId(m.src), HeartbeatAck(self.id, m.ballot, m.stamp))

    # ------------------------------------------------------------- learner

    def _on_commit(self, m: Commit) -> None:
        self._check_ballot_instance(m.ballot, m.instance)
        if m.commands is not None:
            _check_commands(m.commands, "Commit.commands")
        self.prox.heard_from(ReplicaId(m.src))
        if m.ballot >= self.promised and not self.is_leader and _owner(m.ballot) == m.src:
            self._follow(m.ballot, m.src)
        entry = self.log.get(m.instance)
        if entry is not None and entry.committed:
            return
        if m.commands is None:
            if entry is None or entry.ballot != m.ballot or entry.commands is None:
                if m.instance + 1 > self.commit_hint:
                    self.commit_hint = m.instance + 1
                return  # we do not hold that value: learn it later
            self._learn_committed(m.instance, m.ballot, entry.commands)
        else:
            self._learn_committed(m.instance, m.ballot, m.commands)

    def _learn_committed(self, instance: int, ballot: int, commands: tuple[Command, ...]) -> None:
        entry = self.log.get(instance)
        if entry is None:
            entry = self.log[instance] = _Entry(ballot, commands)
        elif entry.committed:
            return
        elif entry.commands != commands or entry.ballot < 0:
            entry.commands = commands
            entry.ballot = ballot
        entry.committed = True
        self.stats.instances_committed += 1
        if instance + 1 > self.commit_hint:
            self.commit_hint = instance + 1
        # The READY of our clients' commands in it (not of those waiting for
        # EXECUTED: they are answered once, at execution).
        waiting = self.waiting
        if waiting:
            exec_waiters = self.exec_waiters
            reply = self._replies.append
            for c in commands:
                key = (c.client_id, c.seq)
                if waiting.pop(key, None) is not None and key not in exec_waiters:
                    reply(Reply(key[0], key[1], READY))
        if instance == self.commit_upto:
            upto = instance
            log = self.log
            while True:
                e = log.get(upto)
                if e is None or not e.committed:
                    break
                upto += 1
            self.commit_upto = upto
            self.learn_ms = self.now_ms
            self._dirty = True

    def _maybe_learn(self, now: float) -> None:
        """Ask for commits we miss: behind what we heard of, and stuck for ``learn_ms``."""
        if self.is_leader or self.commit_upto >= self.commit_hint:
            self.learn_ms = now
            return
        if now - self.learn_ms < self.config.learn_ms:
            return
        self._send_learn_request()

    def _send_learn_request(self) -> None:
        self.learn_ms = self.now_ms
        target = self.leader
        if target is None or target == self.id:
            near = self.prox.near
            if not near:
                return
            target = near[self.rng.randrange(len(near))]
        self.stats.learn_requests += 1
        self._send(target, LearnRequest(self.id, self.commit_upto))

    def _on_learn_request(self, m: LearnRequest) -> None:
        if not _is_int(m.start) or m.start < 0:
            raise PeerMessageError("bad LearnRequest")
        values: list[tuple[Command, ...] | None] = []
        i = m.start
        limit = m.start + self.config.learn_c_max
        while i < limit:
            e = self.log.get(i)
            if e is None or not e.committed:
                break
            values.append(e.commands)
            i += 1
        more = i >= limit and self.commit_upto > i
        if values or more:
            self._send(ReplicaId(m.src), LearnReply(self.id, m.start, tuple(values), more))

    def _on_learn_reply(self, m: LearnReply) -> None:
        if (
            not _is_int(m.start)
            or m.start < 0
            or type(m.more) is not bool
            or type(m.values) is not tuple
        ):
            raise PeerMessageError("bad LearnReply")
        if m.start + len(m.values) > self.commit_upto + self.config.c_index_window_max:
            raise PeerMessageError("LearnReply beyond the window")
        for v in m.values:
            if v is None:
                raise PeerMessageError("LearnReply with a hole")
            _check_commands(v, "LearnReply.values")
        for k, v in enumerate(m.values):
            assert v is not None
            entry = self.log.get(m.start + k)
            if entry is None or not entry.committed:
                self._learn_committed(m.start + k, -1, v)
        if m.more:
            end = m.start + len(m.values) + 1
            if end > self.commit_hint:
                self.commit_hint = end
            self._send_learn_request()  # catching up: go on at the pace of answers

    # ------------------------------------------------------------- execute

    def _execute(self) -> None:
        log = self.log
        sessions = self.sessions
        sm_apply = self.sm.apply
        expiring = sessions.lifetime_slots is not None
        leading, in_log = self.is_leader, self.in_log
        waiting, exec_waiters = self.waiting, self.exec_waiters
        observe, owner = self.observe, self.log_owner
        duplicate, expired = DUPLICATE, EXPIRED
        stats = self.stats
        duplicates_before = sessions.duplicates
        i = self.exec_upto
        while i < self.commit_upto:
            commands = log[i].commands or ()
            if not (leading or waiting or exec_waiters or observe):
                sessions.run_batch(commands, i, sm_apply)  # no per-command outcome needed
            else:
                results: list[tuple[bytes | None, Outcome]] = []
                sessions.run_batch(commands, i, sm_apply, results)
                for cmd, (result, outcome) in zip(commands, results, strict=True):
                    key = (cmd.client_id, cmd.seq)
                    if leading:
                        in_log.discard(key)
                    if waiting and waiting.pop(key, None) is not None and key not in exec_waiters:
                        # Proposed here again after its commit: READY now.
                        self._replies.append(Reply(key[0], key[1], READY))
                    if exec_waiters and key in exec_waiters:
                        self._answer_executed(key, result, outcome is expired)
                    if observe:
                        self._executed.append(
                            Executed(
                                Slot(i),
                                owner,
                                i,
                                cmd,
                                result,
                                outcome is duplicate,
                                outcome is expired,
                            )
                        )
            stats.commands_executed += len(commands)
            if expiring:
                sessions.slot_executed(i)
            i += 1
            self.exec_upto = i
        stats.duplicates += sessions.duplicates - duplicates_before

    def _answer_executed(self, key: Key, result: bytes | None, expired: bool) -> None:
        """``key`` executed here: EXECUTED (or SESSION_EXPIRED) to a client waiting
        for it, READY to one waiting for that only."""
        if key in self.exec_waiters:
            self.exec_waiters.discard(key)
            kind = SESSION_EXPIRED if expired else EXECUTED
            self._replies.append(Reply(key[0], key[1], kind, result))
        else:
            self._replies.append(Reply(key[0], key[1], READY))

    # ---------------------------------------------------------------- reads

    def _serve_reads(self) -> None:
        if not self.is_leader:
            self._fail_reads()
            return
        reads, done = self.reads, self.exec_upto
        while reads and reads[0][1] <= done:
            read_id = reads.popleft()[0]
            self.read_ids.discard(read_id)
            self.stats.reads_ok += 1
            self._reads.append(ReadResult(read_id, True))

    def _fail_reads(self) -> None:
        for read_id, _ in self.reads:
            self.stats.reads_refused += 1
            self._reads.append(ReadResult(read_id, False))
        self.reads.clear()
        self.read_ids.clear()

    # ------------------------------------------------------------ internals

    def _send(self, dst: ReplicaId, message: MultiPaxosMessage) -> None:
        self._messages.append((dst, message))

    def _restore(self, records: list[Record]) -> None:
        """Rebuild from durable records: the promise and the accepted values."""
        for rec in records:
            if isinstance(rec, ViewPromised):
                if rec.view > self.promised:
                    self.promised = rec.view
            elif isinstance(rec, CAccepted):
                entry = self.log.get(rec.index)
                if entry is None:
                    entry = self.log[rec.index] = _Entry()
                if rec.ballot >= entry.ballot:
                    entry.ballot = rec.ballot
                    entry.commands = rec.commands
        self.max_seen = self.promised
        self.ballot = self.promised
        # Not leader (volatile state is gone): a leader comes from phase 1, at a
        # ballot above any we used. We may have granted a lease just before the
        # crash: honour it, from our first clock reading.
        self.is_leader = False
        self.leader = None
        self.lease_until_ms = self.config.lease_ms
        self.commit_hint = 0


def make_replica(
    config: ClusterConfig,
    replica_id: int,
    state_machine: StateMachine,
    rng: random.Random,
    observe: bool,
    records: list[Record] | None,
) -> MultiPaxosReplica:
    """The registry's factory (:data:`sdpaxos.protocols.MakeReplica`)."""
    return MultiPaxosReplica(
        config, replica_id, state_machine, rng=rng, observe=observe, records=records
    )


#: Names of the integer counters of :class:`Stats` (for status pages).
STAT_NAMES = tuple(f.name for f in fields(Stats))
