"""Replica: one SDPaxos replica as a pure state machine.

Theory of operation
===================

Every replica plays three roles at once (paper section 3):

* **command leader** of its own log of C-instances: :meth:`Replica.propose`
  queues a command; :meth:`Replica.ready` packs queued commands into the next
  C-instance and sends C-accepts to the nearest majority (thrifty), plus a
  C-request to the sequencer if that quorum leaves it out;
* **acceptor** of everyone's C-instances and of the sequencer's O-instances;
* **sequencer** (one replica per view): it turns C-accepts and C-requests into
  O-instances whose value is only a replica id (and, with O-instance batching, a
  count of that replica's C-instances).

The global order is derived by counting (section 3.1): slot ``j`` holding
``(n, c)`` runs the next ``c`` C-instances of replica ``n``. Nothing maps a
C-instance to a slot ahead of time (pitfall 2); the executor counts as it goes.

Rules this module keeps
-----------------------

1. *Allocation guard* (Fig. 5 line 13, pitfall 1). The sequencer allocates for
   ``n`` only while the C-instances of ``n`` it has covered are fewer than
   ``index + 1`` for the highest C-instance of ``n`` it has heard of. Duplicated
   or reordered C-accepts and C-requests can never over-allocate.
2. *Prefix O-accepts.* An O-accept carries every O-instance the recipient has
   not been sent, and an O-ACK acknowledges a prefix. This is the paper's
   piggy-backing for N = 5 (section 3.2), used for every N: a command leader
   knows the whole assignment prefix before it calls a command ready.
3. *Ready* (Fig. 5 lines 21, 26, 30). C-instance ``i`` of this replica is ready
   when it is committed and the O-instance the counting rule gives it lies in
   the *safe prefix*: every O-instance up to it is accepted by a majority, or,
   for N = 5 and a non-sequencer, by this replica and the sequencer once the
   view's rebuilt range is chosen.
4. *Views are established by their range.* A replica adopts a view only by
   accepting its whole rebuilt range (one durable record) or its NewView, and
   accepts the view's other O-accepts only after that, contiguously. Heartbeats
   never change what a replica reports in a vote (``docs/recovery.md`` section 2).
5. *Idempotence.* Every handler tolerates duplicates and reordering; counting
   acknowledgements uses sets, commits are flags, allocation is a guard.
6. *Bad input changes nothing.* Handlers validate first and raise
   :class:`PeerMessageError`; :meth:`step` drops the message and counts it. A
   message that would change an *executed* slot also counts an invariant alarm.
7. *Time comes from the driver.* :meth:`tick`, :meth:`step` and :meth:`read` each
   take the driver's monotonic time in milliseconds (``now_ms``); timers fire on
   it, and a lease is judged on the time a read or read request comes with
   (section 3.5).
"""

import math
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import (
    InvariantViolation,
    LocalProtocolError,
    Overloaded,
    PeerMessageError,
)
from sdpaxos.core.messages import (
    CAccept,
    CAck,
    CCommit,
    CPrepare,
    CPromise,
    CRequest,
    Heartbeat,
    LearnRequest,
    LeaseGrant,
    Message,
    NewView,
    OAccept,
    OAck,
    OCommit,
    RReply,
    RRequest,
    SequencerHandover,
    StragglerPoll,
    StragglerVote,
    Vote,
    VRequest,
)
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply, ReplyKind
from sdpaxos.core.storage import (
    CAccepted,
    CPromised,
    OAccepted,
    Record,
    ViewEstablished,
    ViewPromised,
)
from sdpaxos.core.types import (
    NO_CL,
    Ballot,
    Command,
    OValue,
    ReplicaId,
    Slot,
    View,
    Wait,
    ballot_round,
    make_ballot,
)
from sdpaxos.core.view_change import VoteEntry, VoteState, rebuild_assignment_log


class StateMachine(Protocol):
    """What an application gives a replica.

    ``apply`` must be deterministic: every replica applies the same payloads in
    the same order and must reach the same state and results. It must not have
    effects outside the process before the driver has carried out the
    :class:`Ready` batch of the same call (records first), because a crash in
    between re-executes the command after restart.
    """

    def apply(self, payload: bytes) -> bytes: ...


#: ``tracer(event, replica_id, fields)``; ``tla/README.md`` maps each event to its TLA+ action.
Tracer = Callable[[str, ReplicaId, dict[str, Any]], None]

_NO_BALLOT = -1
#: ``OAck.upto`` of a replica that has not accepted the view's rebuilt range.
NOT_ESTABLISHED = -1


class _CInstance:
    """One C-instance as this replica knows it (acceptor and, if own, leader state)."""

    __slots__ = ("acks", "ballot", "commands", "committed", "promised", "sent_ms", "started_ms")

    def __init__(self) -> None:
        self.promised: Ballot = _NO_BALLOT
        self.ballot: Ballot = _NO_BALLOT
        self.commands: tuple[Command, ...] | None = None
        self.committed = False
        #: Leader only: replicas that accepted ``ballot`` (self included).
        self.acks: set[ReplicaId] | None = None
        #: Leader only: time of the last (re)transmission, and of the first.
        self.sent_ms = 0.0
        self.started_ms = 0.0


@dataclass(slots=True)
class Stats:
    """Counters for observability; never consulted by the protocol."""

    steps: int = 0
    rejected: int = 0
    stale: int = 0
    c_instances_started: int = 0
    o_instances_allocated: int = 0
    commands_ready: int = 0
    commands_executed: int = 0
    retransmissions: int = 0
    learn_requests: int = 0
    view_changes_started: int = 0
    views_won: int = 0
    c_recoveries_started: int = 0
    c_instances_recovered: int = 0
    reads_served: int = 0
    reads_refused: int = 0
    #: Messages that would have revoked an executed slot, and reports that
    #: contradict a protocol invariant in a view change. Must stay 0: a non-zero
    #: value is a protocol bug, surfaced without crashing the node.
    invariant_alarms: int = 0


class _Candidacy:
    """A view change this replica started and has not yet won."""

    __slots__ = ("o_from", "sent_ms", "started_ms", "view", "votes")

    def __init__(self, view: View, o_from: Slot, now_ms: float) -> None:
        self.view = view
        self.o_from = o_from
        self.started_ms = now_ms
        self.sent_ms = now_ms
        self.votes: dict[ReplicaId, VoteState] = {}


class _Recovery:
    """Paxos phase 1 this replica runs on C-instances ``start .. end-1`` of ``owner``."""

    __slots__ = ("ballot", "end", "owner", "promises", "proposed", "start", "started_ms")

    def __init__(self, owner: ReplicaId, start: int, end: int, ballot: Ballot, now_ms: float):
        self.owner = owner
        self.start = start
        self.end = end
        self.ballot = ballot
        self.started_ms = now_ms
        self.promises: dict[ReplicaId, CPromise] = {}
        self.proposed = False


def _keys_of(commands: tuple[Command, ...]) -> tuple[bytes, ...]:
    """The objects a batch writes; ``b""`` stands for "some unnamed object"."""
    return tuple(sorted({c.key or b"" for c in commands}))


def _kth_highest(values: list[int], k: int) -> int:
    """The ``k``-th largest of ``values`` (1-based): what a quorum of ``k`` all reached."""
    return sorted(values, reverse=True)[k - 1]


#: Messages only the sequencer of their view sends.
_SEQUENCER_MESSAGES: frozenset[type] = frozenset({OAccept, Heartbeat, NewView})
#: Messages of an election: their view is the one being elected, not the sender's.
_ELECTION_MESSAGES: frozenset[type] = frozenset({VRequest, Vote})


class Replica:
    """One SDPaxos replica, driven by :meth:`step`, :meth:`tick` and :meth:`propose`.

    After any of those, call :meth:`ready` and carry out the returned
    :class:`~sdpaxos.core.ready.Ready` batch (persist, then send and reply).

    Args:
        config: the cluster's shared configuration.
        replica_id: this replica's id, ``0 .. N-1``.
        state_machine: the application; committed commands are applied to it in
            the global order, and its results answer clients that wait for
            execution.
        rng: the only source of randomness the core may use.
        observe: report every executed command in :attr:`Ready.executed`.
        tracer: optional hook called with trace events (``tla/README.md`` maps them
            to TLA+ actions).
        records: the durable records of a previous incarnation (a restart).
    """

    def __init__(
        self,
        config: ClusterConfig,
        replica_id: ReplicaId,
        state_machine: StateMachine,
        *,
        rng: random.Random | None = None,
        observe: bool = False,
        tracer: Tracer | None = None,
        records: list[Record] | None = None,
    ) -> None:
        if not isinstance(config, ClusterConfig):
            raise LocalProtocolError("config must be a ClusterConfig")
        if not 0 <= replica_id < config.replicas:
            raise LocalProtocolError(f"replica_id {replica_id} is not in 0..{config.replicas - 1}")
        n = config.replicas
        self.config = config
        self.id: ReplicaId = replica_id
        self.stats = Stats()
        self._n = n
        self._majority = config.majority
        self._sm = state_machine
        self._rng = rng if rng is not None else random.Random(replica_id)
        self._observe = observe
        self._tracer = tracer

        # Time: milliseconds since the first time the driver gave us, so that
        # every "since" below can start at 0 whatever clock the driver uses.
        self._clock_origin_ms: float | None = None
        self._now_ms = 0.0

        # Views. ``view`` is the promised view: messages of older views are
        # dropped. The replica is *established* in it once it accepted the view's
        # rebuilt range (``_est_view == view``); only then does it know the
        # sequencer and accept the view's O-accepts. View 0 is established by
        # the configuration, with an empty range.
        self.view: View = 0
        self.sequencer: ReplicaId | None = config.sequencer
        self._est_view: View = 0
        self._est_seq: ReplicaId = config.sequencer
        self._est_start: Slot = 0
        self._est_base: Slot = 0
        #: Established in ``view``: the view's range is known to be chosen.
        self._range_committed = True
        self._voted_for: ReplicaId | None = None
        self._voted_ms = 0.0
        self._new_view_msg: NewView | None = None
        self._candidate: _Candidacy | None = None
        self._deferred_vote: VRequest | None = None
        #: Replicas believed down: left out of thrifty quorums until heard from.
        self._suspected: set[ReplicaId] = set()

        # Failure detection and the sequencer lease, in our milliseconds.
        #: We granted a lease: no vote (our own candidacy included) before this.
        self._lease_until_ms = 0.0
        self._last_hb_ms = 0.0
        self._seq_contact_ms = 0.0
        self._election_jitter_ms = self._jitter_ms()
        self._hb_sent_ms = -math.inf
        self._hb_stamp = 0
        #: Sequencer: heartbeat stamp -> (when it was sent, who granted a lease).
        self._lease_grants: dict[int, tuple[float, set[ReplicaId]]] = {}
        #: Sequencer only: its lease holds while ``now < lease_valid_until_ms``.
        self.lease_valid_until_ms = -math.inf
        self._resync_wanted = False
        #: We stopped trusting the sequencer (straggler or hand-over): its
        #: heartbeats no longer renew our lease nor hold back our vote.
        self._distrust = False
        self._handing_over: ReplicaId | None = None

        # Reads (section 3.5): pending read -> (slot to wait for, or None while
        # asking the sequencer; when asked). Sequencer: the history table.
        self._reads: dict[int, tuple[Slot | None, float]] = {}
        self._reads_checked_ms = 0.0
        self._read_results: list[ReadResult] = []
        self._history: dict[bytes, Slot] = {}
        self._history_floor: Slot = -1
        self._pending_keys: dict[tuple[ReplicaId, int], tuple[bytes, ...]] = {}

        # Straggler detection (section 4).
        self._straggler_strikes = 0
        self._straggler_polling: set[ReplicaId] = set()
        self._straggler_last_ms = -math.inf
        self._sw_started_ms = 0.0
        self._sw_index_start = 0
        self._sw_safe_start = 0
        self._sw_need_start = 0

        # C-logs, one per owner; the acceptor state of every C-instance.
        self._c: list[dict[int, _CInstance]] = [{} for _ in range(n)]
        #: Per owner: the highest C-instance index accepted here (-1: none).
        self._c_max: list[int] = [-1] * n

        # Command-leader state.
        self._own_ballot: Ballot = make_ballot(0, replica_id)
        self._next_index = 0
        self._proposals: deque[Command] = deque()
        self._exec_waiters: set[tuple[int, int]] = set()
        #: Own C-instances started but not yet ready -> the commands proposed in
        #: them (insertion order is index order).
        self._inflight: dict[int, tuple[Command, ...]] = {}
        #: C-instances this replica is recovering, by owner.
        self._recoveries: dict[ReplicaId, _Recovery] = {}

        # Assignment log (O-instances), as this replica knows it. ``_o_ballot``
        # is the ballot of the durable value (-1: none); ``_o_committed`` is
        # volatile commit knowledge.
        self._o_owner: list[ReplicaId] = []
        self._o_count: list[int] = []
        self._o_ballot: list[Ballot] = []
        self._o_committed: list[bool] = []
        #: The ballot at which a committed slot was chosen (what relays report:
        #: the slot's accepted ballot may be a later range's, never chosen).
        self._o_cballot: list[Ballot] = []
        #: Established in ``view``: every slot from the range's start below this
        #: is accepted in ``view`` (-1: not established).
        self._acc_upto: Slot = 0
        #: Every slot below this has a value we know: executed, accepted in
        #: ``view``, or known committed (see ``_advance_known``).
        self._known_upto: Slot = 0
        #: Highest slot + 1 this replica has heard exists (for learning).
        self._o_heard_upto = 0
        #: O-accepts that arrived ahead of a gap, by start slot (bounded).
        self._o_pending: dict[Slot, tuple[OValue, ...]] = {}

        # Learner state for the O-instances this replica owns.
        #: Per replica: the prefix of O-instances it is known to have accepted
        #: in this view (-1: not established, or unknown).
        self._o_acked: list[Slot] = [0] * n
        self._o_acked_dirty = False
        self._o_safe_upto = 0
        #: Next slot to scan for own O-instances inside the safe prefix.
        self._own_scan = 0
        #: Own C-instances covered by own O-instances inside the safe prefix.
        self._own_safe_count = 0
        self._o_commit_out: list[tuple[Slot, Ballot, ReplicaId, int]] = []

        # Sequencer state (meaningful while self.id == self.sequencer).
        #: Per owner: C-instances covered by allocated O-instances.
        self._seq_covered: list[int] = [0] * n
        #: Owners with a pending allocation, in arrival order -> wanted coverage.
        self._seq_want: dict[ReplicaId, int] = {}
        #: Per peer: O-instances sent so far (prefix).
        self._o_sent_upto: list[Slot] = [0] * n
        self._o_resend: set[ReplicaId] = set()
        self._o_lazy_ms = 0.0
        self._o_resend_check_ms = 0.0
        #: Acknowledged prefixes one retransmission period ago.
        self._o_acked_before: list[Slot] = [0] * n
        #: New sequencer only: the rebuilt range ``[start, end)`` until a
        #: majority accepted it in this view.
        self._rebuild: tuple[Slot, Slot] | None = None

        # Execution.
        self._exec_slot = 0
        self._exec_in_slot = 0
        self._exec_count: list[int] = [0] * n
        self._exec_dirty = False
        self._exec_progress_ms = 0.0
        self._exec_blocked: tuple[ReplicaId, int] | None = None
        self._exec_blocked_ms = 0.0
        self._sessions: dict[int, tuple[int, bytes | None]] = {}

        # Proximity: peers sorted by round-trip time, nearest first.
        self._rtt_ms: list[float | None] = [None] * n
        if config.rtt_ms is not None:
            for p in range(n):
                self._rtt_ms[p] = float(config.rtt_ms[replica_id][p])
        self._near: list[ReplicaId] = []
        self._c_quorum: tuple[ReplicaId, ...] = ()
        self._recompute_proximity()

        # Outbox, handed over by ready().
        self._persist: list[Record] = []
        self._messages: list[tuple[ReplicaId, Message]] = []
        self._replies: list[Reply] = []
        self._executed: list[Executed] = []

        self._handlers: dict[type, Callable[[Any], None]] = {
            CAccept: self._handle_c_accept,
            CAck: self._handle_c_ack,
            CCommit: self._handle_c_commit,
            CRequest: self._handle_c_request,
            OAccept: self._handle_o_accept,
            OAck: self._handle_o_ack,
            OCommit: self._handle_o_commit,
            LearnRequest: self._handle_learn_request,
            Heartbeat: self._handle_heartbeat,
            LeaseGrant: self._handle_lease_grant,
            VRequest: self._handle_v_request,
            Vote: self._handle_vote,
            NewView: self._handle_new_view,
            CPrepare: self._handle_c_prepare,
            CPromise: self._handle_c_promise,
            RRequest: self._handle_r_request,
            RReply: self._handle_r_reply,
            StragglerPoll: self._handle_straggler_poll,
            StragglerVote: self._handle_straggler_vote,
            SequencerHandover: self._handle_sequencer_handover,
        }
        if records:
            self._restore(records)

    # ------------------------------------------------------------------ API

    @property
    def is_sequencer(self) -> bool:
        return self.id == self.sequencer

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None:
        """Queue ``command``; it is answered through :attr:`Ready.replies`.

        With ``wait=Wait.READY`` the reply comes when the command is ready (its
        place in the global order is fixed); with ``Wait.EXECUTED`` when this
        replica has executed it, carrying the state machine's result.

        Raises:
            Overloaded: the proposal queue holds ``propose_queue_max`` commands.
        """
        if not isinstance(command, Command):
            raise LocalProtocolError(f"propose() takes a Command, got {type(command).__name__}")
        if len(self._proposals) >= self.config.propose_queue_max:
            raise Overloaded(f"{len(self._proposals)} proposals are already queued")
        self._proposals.append(command)
        if wait == Wait.EXECUTED:
            self._exec_waiters.add((command.client_id, command.seq))

    def step(self, message: Message, now_ms: float) -> None:
        """Handle one message from a peer. Never raises for bad peer input.

        ``now_ms``: the driver's monotonic time, read after the message arrived.
        A sequencer answers a read request under its lease only if the lease
        holds at that time, so it must be the time now, not of the last tick: a
        process that was paused learns here that its lease ran out.
        """
        self._advance_clock(now_ms)
        self.stats.steps += 1
        handler = self._handlers.get(type(message))
        try:
            if handler is None:
                raise PeerMessageError(f"unknown message type {type(message).__name__}")
            src = message.src
            if type(src) is not int or not 0 <= src < self._n or src == self.id:
                raise PeerMessageError(f"bad sender {src!r}")
            view = message.view
            if type(view) is not int or view < 0:
                raise PeerMessageError(f"bad view {view!r}")
            if src in self._suspected:
                self._suspected.discard(src)
                self._recompute_proximity()
            if src == self.sequencer and view == self.view:
                self._seq_contact_ms = self._now_ms
            kind = type(message)
            if kind in _ELECTION_MESSAGES:
                handler(message)  # they carry the view being elected
                return
            if view < self.view:
                self._on_stale(message)
                return
            if kind in _SEQUENCER_MESSAGES:
                if view > self.view or self._est_view != view:
                    self._from_unestablished_view(message)
                    return
                if src != self.sequencer:
                    raise PeerMessageError(f"{src} acts as sequencer of view {view}")
            elif view > self.view:
                self._from_future_view(message)
                return
            handler(message)
        except PeerMessageError as exc:
            self.stats.rejected += 1
            if self._tracer is not None:
                self._trace("Reject", msg=message, reason=str(exc))

    def tick(self, now_ms: float) -> None:
        """Advance time to ``now_ms`` (the driver's monotonic clock) and run timers.

        Timers fire on elapsed time, however late or irregular the calls are.
        """
        self._advance_clock(now_ms)
        now = self._now_ms
        cfg = self.config
        c = self._candidate
        if c is not None:
            if now - c.started_ms >= cfg.candidate_timeout_ms + self._election_jitter_ms:
                self._start_view_change()  # no majority: try a higher view
            else:
                if now - c.sent_ms >= cfg.retransmit_ms:
                    c.sent_ms = now
                    self._send_v_requests()
                self._maybe_win()  # our own lease grant may have expired meanwhile
        elif self._should_suspect_sequencer():
            self._start_view_change()
        if self._deferred_vote is not None and self._may_vote_for_another():
            request, self._deferred_vote = self._deferred_vote, None
            if request.view > self.view:
                self._vote(request)
        if self.is_sequencer:
            if now - self._hb_sent_ms >= cfg.heartbeat_ms:
                self._send_heartbeats()
            if now - self._o_lazy_ms >= cfg.retransmit_ms / 3:
                # Lazily push the assignment log to peers that are behind.
                self._o_lazy_ms = now
                end = self._acc_upto
                for p in self._near:
                    if self._o_sent_upto[p] < end:
                        self._o_resend.add(p)
            if now - self._o_resend_check_ms >= cfg.retransmit_ms:
                # A peer whose acknowledgement did not move for a whole period
                # while it lags has lost something: resend from its ack.
                self._o_resend_check_ms = now
                end = self._acc_upto
                previous = self._o_acked_before
                for p in self._near:
                    acked = self._o_acked[p]
                    if acked == previous[p] and acked < end and self._o_sent_upto[p] > acked:
                        self._rewind_sent(p, acked)
                        self._o_resend.add(p)
                self._o_acked_before = list(self._o_acked)
        if self.sequencer is not None and self._inflight:
            self._retransmit_own(now)
        if now - self._sw_started_ms >= cfg.straggler_window_ms:
            self._sw_started_ms = now
            if not self.is_sequencer and self.sequencer is not None:
                self._judge_sequencer_speed()
        if self._reads and now - self._reads_checked_ms >= cfg.retransmit_ms:
            self._reads_checked_ms = now
            self._serve_reads()
        # Learner: execution stalled while we know there is more to execute.
        if self._exec_stalled() and now - self._exec_progress_ms >= cfg.learn_ms:
            self._exec_progress_ms = now
            self._send_learn_request()
        if (
            self._exec_blocked is not None
            and now - self._exec_blocked_ms >= cfg.recover_ms
            and self.sequencer is not None
        ):
            self._maybe_start_recovery(*self._exec_blocked)
        for rec in list(self._recoveries.values()):
            if now - rec.started_ms >= cfg.recover_ms:
                del self._recoveries[rec.owner]  # stuck (lost messages, duel): retry later
                if self._tracer is not None and not rec.proposed:
                    self._trace("AbandonCRecovery", owner=rec.owner, start=rec.start)

    def ready(self) -> Ready:
        """Run deferred work and hand over the effects batch (see :mod:`~sdpaxos.core.ready`)."""
        if self._resync_wanted:
            self._resync()
        if self._proposals and self.sequencer is not None:
            self._start_c_instances()
        if self.is_sequencer and (self._seq_want or self._o_resend):
            self._allocate()
        if self._o_acked_dirty:
            self._advance_safe_prefix()
        if self._exec_dirty:
            self._execute()
            if self._reads:
                self._serve_reads()
        if self._o_commit_out:
            self._broadcast_o_commit()
        rd = Ready(self._persist, self._messages, self._replies, self._executed, self._read_results)
        self._persist = []
        self._messages = []
        self._replies = []
        self._executed = []
        self._read_results = []
        return rd

    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None:
        """Feed a measured round trip to ``peer``; thrifty quorums follow proximity."""
        if not 0 <= peer < self._n or peer == self.id or not rtt_ms >= 0:
            raise LocalProtocolError(f"bad rtt observation {peer!r} {rtt_ms!r}")
        old = self._rtt_ms[peer]
        self._rtt_ms[peer] = rtt_ms if old is None else 0.8 * old + 0.2 * rtt_ms
        self._recompute_proximity()

    def status(self) -> dict[str, Any]:
        """A snapshot of the replica's progress, for humans and tests."""
        return {
            "id": self.id,
            "view": self.view,
            "sequencer": self.sequencer,
            "established_view": self._est_view,
            "candidate_view": self._candidate.view if self._candidate else None,
            "next_c_index": self._next_index,
            "inflight": len(self._inflight),
            "queued": len(self._proposals),
            "o_log_len": len(self._o_owner),
            "o_accepted_upto": self._acc_upto,
            "o_safe_upto": self._o_safe_upto,
            "executed_slots": self._exec_slot,
            "executed_per_owner": list(self._exec_count),
            "near": list(self._near),
            "recovering": sorted(self._recoveries),
        }

    @property
    def executed_upto(self) -> Slot:
        """Every slot below this has been executed here."""
        return self._exec_slot

    def _advance_clock(self, now_ms: float) -> None:
        if type(now_ms) not in (int, float) or not math.isfinite(now_ms):
            raise LocalProtocolError(f"now_ms must be a finite number, got {now_ms!r}")
        if self._clock_origin_ms is None:
            self._clock_origin_ms = now_ms
        now = now_ms - self._clock_origin_ms
        if now > self._now_ms:  # monotonic, whatever the driver passes
            self._now_ms = now

    def _jitter_ms(self) -> float:
        return self._rng.random() * self.config.election_jitter_ms

    # ------------------------------------------------------ command leader

    def _start_c_instances(self) -> None:
        """Pack queued proposals into new C-instances (batching) and send C-accepts."""
        cfg = self.config
        proposals = self._proposals
        batch_max = cfg.c_batch_max
        me = self.id
        while proposals and len(self._inflight) < cfg.c_inflight_max:
            if len(proposals) <= batch_max:
                commands = tuple(proposals)
                proposals.clear()
            else:
                commands = tuple(proposals.popleft() for _ in range(batch_max))
            index = self._next_index
            self._next_index = index + 1
            inst = _CInstance()
            inst.commands = commands
            inst.sent_ms = inst.started_ms = self._now_ms
            self._c[me][index] = inst
            self._accept_c(me, index, inst, self._own_ballot, commands)
            inst.acks = {me}
            self._inflight[index] = commands
            self.stats.c_instances_started += 1
            if self._tracer is not None:
                self._trace(
                    "Propose",
                    index=index,
                    commands=len(commands),
                    ids=tuple((c.client_id, c.seq) for c in commands),
                )
            msg = CAccept(me, self.view, me, index, inst.ballot, commands)
            for p in self._c_quorum:
                self._messages.append((p, msg))
            if self.is_sequencer:
                self._note_keys(me, index, _keys_of(commands))
                self._want(me, index)
            elif self.sequencer not in self._c_quorum:
                self._send_c_request(index)
            if len(inst.acks) >= self._majority:
                self._commit_own_c(index, inst)

    def _send_c_request(self, index: int) -> None:
        if self.sequencer is not None:
            self._messages.append((self.sequencer, self._c_request(index)))

    def _c_request(self, index: int) -> CRequest:
        inst = self._c[self.id].get(index)
        keys = _keys_of(inst.commands) if inst is not None and inst.commands else ()
        return CRequest(self.id, self.view, self.id, index, self._acc_upto, keys)

    def _retransmit_own(self, now: float) -> None:
        """Resend what the command leader has not had acknowledged (section 4:
        thrifty messages "will be aggressively resent to other replicas")."""
        need_order = -1
        log = self._c[self.id]
        for index in self._inflight:
            inst = log[index]
            if now - inst.sent_ms < self.config.retransmit_ms:
                continue
            inst.sent_ms = now
            if self._resend_c_accept(index, inst, self._near):
                self.stats.retransmissions += 1
            if index >= self._own_safe_count:
                need_order = index
        if need_order >= 0:
            if self.is_sequencer:
                self._resend_own_o_accepts()
            else:
                self._send_c_request(need_order)

    def _resend_c_accept(self, index: int, inst: _CInstance, targets: Iterable[ReplicaId]) -> bool:
        """Send our uncommitted C-instance ``index`` again, in the current view, to
        those of ``targets`` that have not acknowledged it. False if nothing to send."""
        if inst.committed or inst.acks is None or inst.commands is None:
            return False
        msg = CAccept(self.id, self.view, self.id, index, inst.ballot, inst.commands)
        for p in targets:
            if p not in inst.acks:
                self._messages.append((p, msg))
        return True

    def _handle_c_ack(self, m: CAck) -> None:
        self._check_c_instance(m.owner, m.index)
        inst = self._c[m.owner].get(m.index)
        if inst is None or inst.acks is None or m.ballot != inst.ballot or inst.committed:
            return  # late, stale, or for a proposal we no longer run: harmless
        inst.acks.add(m.src)
        if self._tracer is not None:
            self._trace("HandleCAck", owner=m.owner, index=m.index, src=m.src)
        if len(inst.acks) >= self._majority:
            if m.owner == self.id:
                self._commit_own_c(m.index, inst)
            else:
                self._commit_recovered_c(m.owner, m.index, inst)

    def _commit_own_c(self, index: int, inst: _CInstance) -> None:
        """C-instance ``index`` is chosen: broadcast the C-commit (Fig. 5 line 10)."""
        inst.committed = True
        acks = inst.acks or set()
        inst.acks = None
        full = short = None
        for p in self._near:
            if p in acks:
                short = short or CCommit(self.id, self.view, self.id, index, inst.ballot, None)
                self._messages.append((p, short))
            else:
                full = full or CCommit(
                    self.id, self.view, self.id, index, inst.ballot, inst.commands
                )
                self._messages.append((p, full))
        if self._tracer is not None:
            self._trace("CommitC", owner=self.id, index=index)
        self._exec_dirty = True
        self._own_committed(index, inst)

    def _own_committed(self, index: int, inst: _CInstance) -> None:
        """One of our C-instances is chosen, by us or by a recovering replica."""
        proposed = self._inflight.get(index)
        if proposed is None:
            return
        if inst.commands != proposed:
            # Another replica recovered this C-instance while we looked dead and
            # chose a no-op (or an older value): our commands lost their place.
            # Propose them again; (client id, seq) keeps execution exactly-once.
            del self._inflight[index]
            self._proposals.extendleft(reversed(proposed))
            if self._tracer is not None:
                self._trace("Repropose", index=index, commands=len(proposed))
            return
        if index < self._own_safe_count:
            self._make_ready(index, proposed)

    def _make_ready(self, index: int, commands: tuple[Command, ...]) -> None:
        """Both instances are settled: answer the clients waiting for "ready"."""
        del self._inflight[index]
        self.stats.commands_ready += len(commands)
        if self._tracer is not None:
            self._trace("Ready", index=index, commands=len(commands))
        waiters = self._exec_waiters
        replies = self._replies
        for cmd in commands:
            if not waiters or (cmd.client_id, cmd.seq) not in waiters:
                replies.append(Reply(cmd.client_id, cmd.seq, ReplyKind.READY))

    # ------------------------------------------------------------ acceptor

    def _accept_c(
        self,
        owner: ReplicaId,
        index: int,
        inst: _CInstance,
        ballot: Ballot,
        commands: tuple[Command, ...],
    ) -> None:
        """Accept ``commands`` for C-instance ``owner.index`` at ``ballot``, durably.

        The one place a C-value is accepted (owner, acceptor, recoverer), so the
        per-owner highest accepted index the N = 5 inference relies on
        (``c_max``, reported in votes) can never miss an acceptance.
        """
        inst.promised = max(inst.promised, ballot)
        inst.ballot = ballot
        inst.commands = commands
        self._persist.append(CAccepted(owner, index, ballot, commands))
        if index > self._c_max[owner]:
            self._c_max[owner] = index

    def _handle_c_accept(self, m: CAccept) -> None:
        owner, index = m.owner, m.index
        self._check_c_instance(owner, index)
        if type(m.ballot) is not int or m.ballot < 0:
            raise PeerMessageError(f"bad ballot {m.ballot!r}")
        if not isinstance(m.commands, tuple) or len(m.commands) > self.config.c_batch_max:
            raise PeerMessageError("C-accept carries too many commands")
        log = self._c[owner]
        inst = log.get(index)
        if inst is not None and m.ballot < inst.promised:
            if self._tracer is not None:
                self._trace("Reject", reason="stale ballot", owner=owner, index=index)
            return
        if inst is not None and inst.committed and inst.commands != m.commands:
            raise PeerMessageError(
                f"C-accept for chosen C-instance {owner}.{index} with a new value"
            )
        if inst is None:
            inst = log[index] = _CInstance()
        if inst.ballot != m.ballot or inst.commands != m.commands:
            inst.acks = None  # someone else proposes here now
            self._accept_c(owner, index, inst, m.ballot, m.commands)
        if self._tracer is not None:
            self._trace("HandleCAccept", owner=owner, index=index, ballot=m.ballot)
        self._messages.append((m.src, CAck(self.id, self.view, owner, index, m.ballot)))
        if self.is_sequencer and m.src == owner:
            self._note_keys(owner, index, _keys_of(m.commands))
            self._want(owner, index)

    def _handle_c_commit(self, m: CCommit) -> None:
        owner, index = m.owner, m.index
        self._check_c_instance(owner, index)
        if m.commands is not None and len(m.commands) > self.config.c_batch_max:
            raise PeerMessageError("C-commit carries too many commands")
        log = self._c[owner]
        inst = log.get(index)
        if inst is None:
            inst = log[index] = _CInstance()
        if inst.committed:
            return
        if m.commands is not None:
            inst.commands = m.commands
        elif inst.commands is None or inst.ballot < m.ballot:
            # Short form, but we never accepted that ballot: the value is learned
            # through a LearnRequest once execution blocks on this C-instance.
            return
        # A value accepted at a ballot >= the committed one is the chosen value
        # (Paxos: every higher ballot proposes the chosen value).
        inst.committed = True
        inst.acks = None
        if self._tracer is not None:
            self._trace("HandleCCommit", owner=owner, index=index)
        self._exec_dirty = True
        if owner == self.id:
            self._own_committed(index, inst)

    def _check_c_instance(self, owner: ReplicaId, index: int) -> None:
        if type(owner) is not int or not 0 <= owner < self._n:
            raise PeerMessageError(f"bad C-instance owner {owner!r}")
        if type(index) is not int or index < 0:
            raise PeerMessageError(f"bad C-instance index {index!r}")
        if index >= self._exec_count[owner] + self.config.c_index_window_max:
            raise PeerMessageError(f"C-instance {owner}.{index} is beyond the window")

    def _check_o_value(self, value: object) -> None:
        if not isinstance(value, tuple) or len(value) != 2:
            raise PeerMessageError(f"bad O-value {value!r}")
        owner, count = value
        if owner == NO_CL:
            if count != 0:
                raise PeerMessageError(f"no-cl with count {count!r}")
            return
        if type(owner) is not int or not 0 <= owner < self._n:
            raise PeerMessageError(f"bad O-value owner {owner!r}")
        if type(count) is not int or not 1 <= count <= self.config.o_batch_max:
            raise PeerMessageError(f"bad O-value count {count!r}")

    def _o_ensure(self, end: Slot) -> None:
        """Grow the assignment-log arrays to hold slots below ``end``."""
        grow = end - len(self._o_owner)
        if grow > 0:
            if end > self._exec_slot + self.config.c_index_window_max:
                raise PeerMessageError(f"slot {end - 1} is beyond the window")
            self._o_owner.extend([NO_CL] * grow)
            self._o_count.extend([0] * grow)
            self._o_ballot.extend([_NO_BALLOT] * grow)
            self._o_committed.extend([False] * grow)
            self._o_cballot.extend([_NO_BALLOT] * grow)

    # ------------------------------------------------- O-instances: acceptor

    def _executed_end(self) -> Slot:
        """Slots below this are executed here, at least in part (final)."""
        return self._exec_slot + (1 if self._exec_in_slot else 0)

    def _check_against_executed(self, start: Slot, values: tuple[OValue, ...], what: str) -> None:
        """A value for an executed slot must be the executed one. Anything else
        would revoke an executed slot: a protocol bug, surfaced as an alarm."""
        owners, counts = self._o_owner, self._o_count
        for s in range(start, min(start + len(values), self._executed_end())):
            if (owners[s], counts[s]) != values[s - start]:
                self.stats.invariant_alarms += 1
                raise PeerMessageError(
                    f"{what} would revoke executed slot {s}: "
                    f"{owners[s], counts[s]} -> {values[s - start]}"
                )

    def _check_same_ballot(self, start: Slot, values: tuple[OValue, ...], ballot: Ballot) -> None:
        """At one ballot (a view) the sequencer proposes one value per slot."""
        owners, counts, ballots = self._o_owner, self._o_count, self._o_ballot
        for s in range(start, min(start + len(values), len(owners))):
            if ballots[s] == ballot and (owners[s], counts[s]) != values[s - start]:
                raise PeerMessageError(
                    f"slot {s} already holds {owners[s], counts[s]} at ballot {ballot}, "
                    f"the sequencer now says {values[s - start]}"
                )

    def _from_unestablished_view(self, m: Message) -> None:
        """A sequencer message of a view whose rebuilt range we have not accepted.

        The range (a rebuilt O-accept) or the NewView establishes the view. A
        heartbeat or another O-accept cannot: a replica that adopted a view from
        a heartbeat would report it in its next vote as if it had accepted its
        range, and the next view change would then take the wrong old sequencer
        (``docs/recovery.md`` section 2.2). We ask the sequencer for the range.
        """
        if type(m) is NewView or (type(m) is OAccept and m.rebuilt is True):
            self._handlers[type(m)](m)
            return
        self.stats.stale += 1
        if self._tracer is not None:
            self._trace("AskRange", view=m.view, sequencer=m.src)
        self._messages.append((m.src, OAck(self.id, m.view, NOT_ESTABLISHED)))

    def _from_future_view(self, m: Message) -> None:
        """A non-sequencer message of a view above ours: we cannot place it yet."""
        self.stats.stale += 1
        if self._tracer is not None:
            self._trace("FutureView", msg=m)
        if self.is_sequencer and (self._candidate is None or self._candidate.view < m.view):
            # The sender promised a view above ours that never got a sequencer,
            # and it still hears us: re-run the election above it so that
            # everyone is in one view again (our followers may vote for us
            # despite their leases).
            self._start_view_change(above=m.view)

    def _handle_o_accept(self, m: OAccept) -> None:
        start, values, base = m.start, m.values, m.base
        if type(start) is not int or start < 0:
            raise PeerMessageError(f"bad O-accept start {start!r}")
        if type(base) is not int or base < 0 or type(m.rebuilt) is not bool:
            raise PeerMessageError("bad O-accept base or range flag")
        limit = self.config.c_index_window_max if m.rebuilt else self.config.o_accept_values_max
        if not isinstance(values, tuple) or len(values) > limit:
            raise PeerMessageError("O-accept carries too many values")
        for value in values:
            self._check_o_value(value)
        end = start + len(values)
        if m.rebuilt and not start <= base <= end:
            raise PeerMessageError(f"a range O-accept must carry the whole range, to {base}")
        if end > self._exec_slot + self.config.c_index_window_max:
            raise PeerMessageError(f"O-accept reaches slot {end - 1}, beyond the window")
        view = m.view
        established = self._est_view == view
        if established and base != self._est_base:
            raise PeerMessageError(f"O-accept says base {base}, the view's is {self._est_base}")
        if established and m.src != self._est_seq:
            raise PeerMessageError(f"O-accept from {m.src}, not the sequencer {self._est_seq}")
        # Validate everything before changing anything.
        self._check_against_executed(start, values, f"O-accept of view {view}")
        self._check_same_ballot(start, values, view)
        if not established:
            self._establish(view, m.src, start, values[: base - start])
        if end > self._o_heard_upto:
            self._o_heard_upto = end
        if start > self._acc_upto and not m.rebuilt:
            # Acceptance is contiguous within a view: what this replica accepted
            # in the view is always a prefix from the view's range, so a later
            # view change can trust it. Out of order: keep it until the gap fills.
            pending = self._o_pending
            if start not in pending and len(pending) >= self.config.o_pending_max:
                pending.pop(max(pending))  # bounded; the sequencer resends from our ack
            pending[start] = values
        else:
            self._accept_o_from(start, values)
            if self._tracer is not None:
                self._trace(
                    "HandleOAccept", view=view, start=start, count=len(values), range=m.rebuilt
                )
            pending = self._o_pending
            while pending:
                first = min(pending)
                if first > self._acc_upto:
                    break
                buffered = pending.pop(first)
                try:
                    self._accept_o_from(first, buffered)
                except PeerMessageError:
                    break  # that buffered O-accept conflicts: drop it, keep ours
                if self._tracer is not None:
                    # The buffered O-accept, handled now (the spec's step on it).
                    self._trace(
                        "HandleOAccept",
                        view=view,
                        start=first,
                        count=len(buffered),
                        range=False,
                        values=buffered,
                    )
            return self._ack_o_accept(m, view, end, values)
        if self._tracer is not None:
            self._trace("HandleOAccept", view=view, start=start, count=len(values), range=m.rebuilt)
        self._ack_o_accept(m, view, end, values)

    def _ack_o_accept(self, m: OAccept, view: View, end: Slot, values: tuple[OValue, ...]) -> None:
        seq = m.src
        acked = self._o_acked
        if end > acked[seq]:
            acked[seq] = end  # the sequencer accepted what it sends
        acked[self.id] = self._acc_upto
        self._o_acked_dirty = True
        # Always acknowledge to the sequencer (a prefix ack, one small message):
        # it needs a majority for its own O-instances and for a rebuilt range,
        # and it retransmits from what each acceptor acknowledged.
        ack = OAck(self.id, view, self._acc_upto)
        self._messages.append((seq, ack))
        if self._n >= 7 and values:
            for owner in sorted({o for o, _ in values if o not in (seq, self.id, NO_CL)}):
                self._messages.append((owner, ack))

    def _accept_o_from(self, start: Slot, values: tuple[OValue, ...]) -> None:
        """Accept the part of ``values`` (from ``start``) that extends our accepted prefix."""
        first = self._acc_upto
        end = start + len(values)
        if end <= first or start > first:
            return
        # (Checked again here: a buffered O-accept may meet commits learned since.)
        self._check_against_executed(start, values, f"O-accept of view {self.view}")
        self._check_same_ballot(start, values, self.view)
        self._o_ensure(end)
        owners, counts, ballots = self._o_owner, self._o_count, self._o_ballot
        view = self.view
        new = values[first - start :]
        for k, (owner, count) in enumerate(new):
            s = first + k
            owners[s] = owner
            counts[s] = count
            ballots[s] = view
        self._persist.append(OAccepted(view, first, new))
        self._acc_upto = end
        self._advance_acc()
        self._advance_known()

    def _advance_acc(self) -> None:
        """Extend the accepted prefix over slots we hold durably at this view's
        ballot (values learned committed in this view count: they are chosen at
        it). Always what a restart would compute from the records."""
        if self._acc_upto < 0:
            return
        k = self._acc_upto
        ballots, view = self._o_ballot, self.view
        while k < len(ballots) and ballots[k] == view:
            k += 1
        if k != self._acc_upto:
            self._acc_upto = k
            if not self.is_sequencer:
                self._o_acked[self.id] = k
                self._o_acked_dirty = True

    def _establish(
        self, view: View, sequencer: ReplicaId, start: Slot, values: tuple[OValue, ...]
    ) -> None:
        """Accept the whole rebuilt range of ``view`` in one durable record, and adopt
        the view: its sequencer, and every later O-accept of it (section 2.5).

        The caller has validated the range against executed slots.
        """
        end = start + len(values)
        self._o_ensure(end)
        owners, counts, ballots, committed = (
            self._o_owner,
            self._o_count,
            self._o_ballot,
            self._o_committed,
        )
        executed_end = self._executed_end()
        for k, (owner, count) in enumerate(values):
            s = start + k
            ballots[s] = view  # as the durable record says (executed slots are equal)
            if s < executed_end:
                continue
            owners[s], counts[s] = owner, count
            committed[s] = False
        self._persist.append(ViewEstablished(view, sequencer, start, values))
        old = self.sequencer
        self.view = view
        self._est_view, self._est_seq, self._est_start, self._est_base = view, sequencer, start, end
        self._acc_upto = end
        self._range_committed = False
        self.sequencer = sequencer
        self._new_view_msg = None
        self._candidate = None
        self._deferred_vote = None
        self._voted_for = None
        self._last_hb_ms = self._seq_contact_ms = self._now_ms
        self._rebuild = None
        self._distrust = False
        self._handing_over = None
        self._fail_unanswered_reads()
        if old is not None and old != sequencer and old != self.id:
            self._suspected.add(old)
            self._recompute_proximity()
        self._forget_older_commits(view)
        self._o_pending.clear()
        self._seq_want.clear()
        self._o_resend.clear()
        self._reset_learner()
        self._resync_wanted = True
        self._exec_dirty = True
        if self._tracer is not None:
            self._trace("Establish", view=view, sequencer=sequencer, start=start, end=end)

    def _forget_older_commits(self, view: View) -> None:
        """Commits learned in views older than ``view`` and not executed become
        provisional again: with N = 5 a non-sequencer's O-commit is revocable until
        executed (section 3.3), and ``view``'s range says what stands."""
        committed, ballots = self._o_committed, self._o_ballot
        for s in range(self._executed_end(), len(committed)):
            if committed[s] and ballots[s] < view:
                committed[s] = False
        self._known_upto = min(self._known_upto, self._executed_end())

    def _handle_new_view(self, m: NewView) -> None:
        start, values = m.start, m.values
        if type(start) is not int or start < 0 or not isinstance(values, tuple):
            raise PeerMessageError("bad NewView")
        if len(values) > self.config.c_index_window_max:
            raise PeerMessageError("NewView carries too many values")
        for value in values:
            self._check_o_value(value)
        end = start + len(values)
        if end > self._exec_slot + self.config.c_index_window_max:
            raise PeerMessageError(f"NewView reaches slot {end - 1}, beyond the window")
        view = m.view
        established = self._est_view == view
        range_ = (self._est_start, self._est_base)
        if established and (m.src != self._est_seq or (start, end) != range_):
            raise PeerMessageError(f"NewView of view {view} does not match its range")
        self._check_against_executed(start, values, f"NewView {view}")
        self._check_same_ballot(start, values, view)
        if not established:
            self._establish(view, m.src, start, values)
        committed, cballots = self._o_committed, self._o_cballot
        for s in range(max(start, self._executed_end()), end):
            if not committed[s]:  # (a commit known already keeps its ballot: final if older)
                committed[s] = True
                cballots[s] = view
        self._range_committed = True
        self._new_view_msg = m
        if end > self._o_acked[m.src]:
            self._o_acked[m.src] = end
        if end > self._o_heard_upto:
            self._o_heard_upto = end
        self._advance_known()
        self._o_acked_dirty = True
        self._exec_dirty = True
        if self._tracer is not None:
            self._trace("HandleNewView", view=view, start=start, values=len(values))

    # ----------------------------------------------------------- sequencer

    def _want(self, owner: ReplicaId, index: int) -> None:
        """Record that C-instances ``0 .. index`` of ``owner`` exist (the allocation guard)."""
        want = index + 1
        if want > self._seq_covered[owner] and want > self._seq_want.get(owner, 0):
            self._seq_want[owner] = want

    def _handle_c_request(self, m: CRequest) -> None:
        if not self.is_sequencer:
            raise PeerMessageError(f"C-request sent to {self.id}, not the sequencer")
        if m.owner != m.src:
            raise PeerMessageError("C-request for another replica's C-instance")
        self._check_c_instance(m.owner, m.index)
        upto = m.o_accepted_upto
        if type(upto) is not int or not NOT_ESTABLISHED <= upto <= self._acc_upto:
            raise PeerMessageError(f"bad o_accepted_upto {upto!r}")
        keys = m.keys
        if (
            not isinstance(keys, tuple)
            or len(keys) > self.config.c_batch_max
            or any(type(k) is not bytes for k in keys)
        ):
            raise PeerMessageError("bad C-request keys")
        if self._tracer is not None:
            self._trace("HandleCRequest", owner=m.owner, index=m.index)
        if m.index < self._seq_covered[m.owner]:
            # Already ordered: a retransmission. Resend what the owner lacks.
            if upto < self._o_sent_upto[m.owner]:
                self._rewind_sent(m.owner, upto)
            self._o_resend.add(m.owner)
        else:
            if keys:
                self._note_keys(m.owner, m.index, keys)
            self._want(m.owner, m.index)

    def _allocate(self) -> None:
        """Turn pending wants into O-instances and send O-accepts (Fig. 5 lines 12-15).

        The log ends at ``_acc_upto`` (the sequencer accepted all it allocated);
        slots beyond it may still hold values of older views, never chosen, which
        new allocations overwrite (they stay in the durable records too).
        """
        cfg = self.config
        start = end = self._acc_upto
        covered = self._seq_covered
        new_owners: set[ReplicaId] = set()
        allocated: list[OValue] = []
        for owner, want in self._seq_want.items():
            batch_max = 1 if (self._n == 5 and owner != self.id) else cfg.o_batch_max
            while covered[owner] < want:
                count = min(want - covered[owner], batch_max)
                self._record_history(end, owner, covered[owner], count)
                allocated.append((owner, count))
                covered[owner] += count
                end += 1
            new_owners.add(owner)
        self._seq_want.clear()
        if allocated:
            self._o_ensure_unchecked(end)
            owners, counts, ballots, committed = (
                self._o_owner,
                self._o_count,
                self._o_ballot,
                self._o_committed,
            )
            view = self.view
            for k, (owner, count) in enumerate(allocated):
                s = start + k
                owners[s], counts[s], ballots[s], committed[s] = owner, count, view, False
            values = tuple(allocated)
            self._persist.append(OAccepted(view, start, values))
            self.stats.o_instances_allocated += len(values)
            if self._tracer is not None:
                self._trace("AllocateO", start=start, values=values)
            self._acc_upto = end
            self._o_heard_upto = max(self._o_heard_upto, end)
            self._advance_known()
            self._o_acked[self.id] = end
            self._o_acked_dirty = True
        recipients = self._o_resend
        self._o_resend = set()
        for owner in new_owners:
            recipients.update(self._o_accept_targets(owner))
        for p in sorted(recipients):
            self._send_o_accepts(p)

    def _o_accept_targets(self, owner: ReplicaId) -> tuple[ReplicaId, ...]:
        """Who receives the O-accept for ``owner``'s new O-instance (paper section 4)."""
        if owner == self.id:
            return self._c_quorum  # the sequencer's own: its nearest majority
        if not self.config.thrifty:
            return tuple(self._near)
        if self._n <= 5:
            return (owner,)  # "only sent to the command leader"
        extra = [p for p in self._near if p != owner][: self._majority - 2]
        return (owner, *extra)

    def _rewind_sent(self, peer: ReplicaId, acked: Slot) -> None:
        """Resend to ``peer`` from what it acknowledged; a peer that has not
        acknowledged the range gets the range again (-1: not sent)."""
        self._o_sent_upto[peer] = acked if acked >= self._est_base else NOT_ESTABLISHED

    def _send_o_accepts(self, peer: ReplicaId) -> None:
        """Send ``peer`` every O-instance it has not been sent (prefix piggy-backing).

        A peer that has not acknowledged this view's rebuilt range first gets the
        whole range in one O-accept (accepted atomically), whatever its size.
        """
        end = self._acc_upto
        sent = self._o_sent_upto[peer]
        base = self._est_base
        chunk = self.config.o_accept_values_max
        owners, counts = self._o_owner, self._o_count
        me, view = self.id, self.view
        if sent < base or sent == NOT_ESTABLISHED:
            sent = self._est_start
            stop = max(base, min(end, sent + chunk))
            values = tuple(zip(owners[sent:stop], counts[sent:stop], strict=True))
            self._messages.append((peer, OAccept(me, view, sent, values, base, True)))
            sent = stop
        while sent < end:
            stop = min(end, sent + chunk)
            values = tuple(zip(owners[sent:stop], counts[sent:stop], strict=True))
            self._messages.append((peer, OAccept(me, view, sent, values, base, False)))
            sent = stop
        self._o_sent_upto[peer] = sent

    def _resend_own_o_accepts(self) -> None:
        """The sequencer's own O-instances lack a quorum: resend from each peer's ack."""
        end = self._acc_upto
        for p in self._near:
            if self._o_acked[p] < end and self._o_sent_upto[p] > self._o_acked[p]:
                self._rewind_sent(p, self._o_acked[p])
                self._o_resend.add(p)
        self.stats.retransmissions += 1

    def _handle_o_ack(self, m: OAck) -> None:
        upto = m.upto
        # An acceptor may have accepted slots we have not seen yet (their O-accepts
        # to us are still in flight), so the bound is the window, not our log.
        if type(upto) is not int or not NOT_ESTABLISHED <= upto <= self._exec_slot + (
            self.config.c_index_window_max
        ):
            raise PeerMessageError(f"O-ACK upto {upto!r} beyond the window")
        if self.is_sequencer and upto > self._acc_upto:
            raise PeerMessageError(f"O-ACK upto {upto!r} beyond the sequencer's own log")
        if self._tracer is not None:
            self._trace("HandleOAck", src=m.src, upto=upto)
        if upto < self._est_base:
            if self.is_sequencer:
                # The peer lacks this view's range: the NewView if the range is
                # chosen (then everything after it), else the range itself.
                p = m.src
                if self._new_view_msg is not None:
                    self._messages.append((p, self._new_view_msg))
                    self._o_sent_upto[p] = self._est_base
                else:
                    self._o_sent_upto[p] = NOT_ESTABLISHED
                self._o_resend.add(p)
            return
        if upto > self._o_acked[m.src]:
            self._o_acked[m.src] = upto
            self._o_acked_dirty = True
        if self.is_sequencer and upto > self._o_sent_upto[m.src]:
            self._o_sent_upto[m.src] = upto

    # ------------------------------------------------------------- learner

    def _advance_safe_prefix(self) -> None:
        """Commit O-instances in the safe prefix and make own C-instances ready."""
        self._o_acked_dirty = False
        seq = self.sequencer
        if seq is None or self._acc_upto < 0:
            return
        acked = self._o_acked
        me = self.id
        if self._n == 5 and seq != me:
            # Fig. 5 line 30: accepted by this replica itself and by the sequencer;
            # and the view's rebuilt range is chosen (else a view change could
            # rebuild it differently without either of us).
            if not self._range_committed:
                return
            safe = min(acked[me], acked[seq])
        else:
            quorum = _kth_highest(acked, self._majority)
            if self._rebuild is not None and quorum >= self._rebuild[1]:
                self._commit_rebuilt_range()
            # Peers may have accepted slots we have not received yet: we can only
            # commit what we know. Slots known committed are majority-accepted.
            safe = max(min(quorum, acked[me]), self._committed_prefix())
        safe = min(safe, self._advance_known())
        if safe <= self._o_safe_upto:
            return
        previous = self._o_safe_upto
        self._o_safe_upto = safe
        owners, counts, ballots, committed = (
            self._o_owner,
            self._o_count,
            self._o_ballot,
            self._o_committed,
        )
        before = self._own_safe_count
        own = before
        out = self._o_commit_out
        for s in range(self._own_scan, safe):
            if owners[s] == me:
                own += counts[s]
                if not committed[s]:
                    committed[s] = True
                    self._o_cballot[s] = ballots[s]
                    out.append((s, ballots[s], me, counts[s]))
        self._own_scan = safe
        learned = False
        if self.is_sequencer:
            # The sequencer hears every O-ACK: it learns every O-instance, so a
            # replica whose own O-ACKs were lost (N >= 7) can learn from it.
            for s in range(previous, safe):
                if not committed[s]:
                    committed[s] = True
                    self._o_cballot[s] = ballots[s]
                    self._exec_dirty = True
                    learned = True
        if self._tracer is not None and (learned or own != before):
            self._trace("CommitO", upto=safe, own=own)
        if own == before:
            return
        self._own_safe_count = own
        self._exec_dirty = True
        inflight = self._inflight
        log = self._c[me]
        for index in range(before, own):
            if index in inflight:
                inst = log[index]
                if inst.committed:
                    self._own_committed(index, inst)

    def _advance_known(self) -> Slot:
        """Extend the prefix of slots whose values we know: executed, accepted in
        this view, or known committed. Returns it."""
        k = max(self._known_upto, self._exec_slot)
        ballots, committed, view = self._o_ballot, self._o_committed, self.view
        limit = len(ballots)
        while k < limit and (ballots[k] == view or committed[k]):
            k += 1
        self._known_upto = k
        return k

    def _committed_prefix(self) -> Slot:
        """Every slot below the result is committed here."""
        k = self._exec_slot
        committed = self._o_committed
        limit = len(committed)
        while k < limit and committed[k]:
            k += 1
        return k

    def _broadcast_o_commit(self) -> None:
        entries = tuple(self._o_commit_out)
        self._o_commit_out = []
        msg = OCommit(self.id, self.view, entries)
        for p in self._near:
            self._messages.append((p, msg))

    def _handle_o_commit(self, m: OCommit) -> None:
        entries = m.entries
        if not isinstance(entries, tuple) or len(entries) > self.config.learn_o_max:
            raise PeerMessageError("O-commit carries too many entries")
        for entry in entries:
            if not isinstance(entry, tuple) or len(entry) != 4:
                raise PeerMessageError(f"bad O-commit entry {entry!r}")
            slot, ballot, owner, count = entry
            if type(slot) is not int or slot < 0:
                raise PeerMessageError(f"bad O-commit slot {slot!r}")
            if type(ballot) is not int or not 0 <= ballot <= m.view:
                raise PeerMessageError(f"bad O-commit ballot {ballot!r}")
            self._check_o_value((owner, count))
        if self._tracer is None:
            self._learn_commits(entries)
            return
        # One event per slot whose knowledge changed (the model's HandleOCommit
        # learns one O-instance per step).
        before = {s: self._o_learned(s) for s, _, _, _ in entries}
        self._learn_commits(entries)
        for slot, ballot, owner, count in entries:
            if self._o_learned(slot) != before[slot]:
                self._trace(
                    "HandleOCommit", src=m.src, slot=slot, ballot=ballot, owner=owner, count=count
                )

    def _o_learned(self, slot: Slot) -> tuple[object, ...]:
        """What this replica knows of one O-instance (for tracing)."""
        if slot >= len(self._o_ballot):
            return ()
        return (
            self._o_ballot[slot],
            self._o_owner[slot],
            self._o_count[slot],
            self._o_committed[slot],
            self._o_cballot[slot],
        )

    def _learn_commits(self, entries: tuple[tuple[Slot, Ballot, ReplicaId, int], ...]) -> None:
        """Record O-instances chosen at their ballots, durably, before executing them.

        With N = 5 a command leader commits its O-instance with two acceptors
        (itself and the sequencer). Everyone who executes the slot first records
        it, so an executed slot is held by a majority and no later view change
        can rebuild it differently (``docs/recovery.md`` section 10).
        """
        owners, counts, ballots, committed = (
            self._o_owner,
            self._o_count,
            self._o_ballot,
            self._o_committed,
        )
        executed_end = self._executed_end()
        top = 0
        for slot, ballot, owner, count in entries:
            top = max(top, slot + 1)
            if slot < executed_end:
                if (owners[slot], counts[slot]) != (owner, count):
                    self.stats.invariant_alarms += 1
                    raise PeerMessageError(
                        f"O-commit would revoke executed slot {slot}: "
                        f"{owners[slot], counts[slot]} -> {owner, count}"
                    )
            elif (
                slot < len(owners)
                and ballots[slot] == ballot
                and (owners[slot], counts[slot]) != (owner, count)
            ):
                raise PeerMessageError(
                    f"slot {slot} holds {owners[slot], counts[slot]} at ballot {ballot}, "
                    f"O-commit says {owner, count}"
                )
        self._o_ensure(top)
        runs: list[tuple[Ballot, Slot, list[OValue]]] = []
        for slot, ballot, owner, count in sorted(entries):
            if slot < executed_end:
                continue
            value = (owner, count)
            # A commit is only ever relayed within one view, and whoever entered
            # that view forgot the unexecuted commits of older views: so a commit
            # at a ballot below the message's view was executed somewhere, and
            # is final.
            if ballots[slot] > ballot:
                # We hold the slot at a newer ballot (a later range re-proposed it).
                # The older commit ballot is kept: it says the value is final.
                if (owners[slot], counts[slot]) == value:
                    if not committed[slot] or ballot < self._o_cballot[slot]:
                        committed[slot] = True
                        self._o_cballot[slot] = ballot
                else:
                    self.stats.invariant_alarms += 1  # a range revoked a final slot
                continue
            if ballot < self._est_view and slot >= self._est_base:
                # Our established view superseded older values beyond its base;
                # a final one there would mean it revoked an executed slot.
                self.stats.invariant_alarms += 1
                continue
            if ballots[slot] == ballot and committed[slot]:
                continue  # known (its commit ballot stays: an older one says "final")
            committed[slot] = True
            self._o_cballot[slot] = ballot
            if ballots[slot] == ballot:
                continue  # already held durably
            owners[slot], counts[slot], ballots[slot] = owner, count, ballot
            if runs and runs[-1][0] == ballot and runs[-1][1] + len(runs[-1][2]) == slot:
                runs[-1][2].append(value)
            else:
                runs.append((ballot, slot, [value]))
        for ballot, start, values in runs:
            self._persist.append(OAccepted(ballot, start, tuple(values)))
        self._advance_acc()
        if top > self._o_heard_upto:
            self._o_heard_upto = top
        self._advance_known()
        self._exec_dirty = True
        self._o_acked_dirty = True

    # ------------------------------------------------------------ executor

    def _execute(self) -> None:
        """Run every slot whose O-instance and C-instances are committed, in order."""
        self._exec_dirty = False
        owners, counts, committed = self._o_owner, self._o_count, self._o_committed
        logs = self._c
        exec_count = self._exec_count
        slot = self._exec_slot
        in_slot = self._exec_in_slot
        limit = len(owners)
        start_slot = slot
        while slot < limit and committed[slot]:
            owner = owners[slot]
            if owner != NO_CL:
                count = counts[slot]
                log = logs[owner]
                while in_slot < count:
                    k = exec_count[owner]
                    inst = log.get(k)
                    if inst is None or not inst.committed:
                        self._exec_slot, self._exec_in_slot = slot, in_slot
                        if slot != start_slot:
                            self._exec_progress_ms = self._now_ms
                        blocked = (owner, k)
                        if blocked != self._exec_blocked:
                            self._exec_blocked = blocked
                            self._exec_blocked_ms = self._now_ms
                        return
                    self._apply(slot, owner, k, inst.commands or ())
                    exec_count[owner] = k + 1
                    in_slot += 1
            slot += 1
            in_slot = 0
        self._exec_slot, self._exec_in_slot = slot, in_slot
        self._exec_blocked = None
        if slot != start_slot:
            self._exec_progress_ms = self._now_ms

    def _apply(self, slot: Slot, owner: ReplicaId, k: int, commands: tuple[Command, ...]) -> None:
        own = owner == self.id
        waiters = self._exec_waiters if own else None
        sessions = self._sessions
        sm_apply = self._sm.apply
        observe = self._observe
        for cmd in commands:
            cid = cmd.client_id
            duplicate = False
            if cid:
                session = sessions.get(cid)
                if session is not None and cmd.seq <= session[0]:
                    duplicate = True
                    result = session[1] if cmd.seq == session[0] else None
                else:
                    result = sm_apply(cmd.payload)
                    sessions[cid] = (cmd.seq, result)
            else:
                result = sm_apply(cmd.payload)
            if waiters:
                key = (cid, cmd.seq)
                if key in waiters:
                    waiters.discard(key)
                    self._replies.append(Reply(cid, cmd.seq, ReplyKind.EXECUTED, result))
            if observe:
                self._executed.append(Executed(slot, owner, k, cmd, result, duplicate))
        self.stats.commands_executed += len(commands)
        if self._tracer is not None:
            self._trace("Execute", slot=slot, owner=owner, c_index=k, commands=len(commands))

    def _exec_stalled(self) -> bool:
        """Is there something we know of that we have not executed?"""
        return self._exec_slot < self._o_heard_upto

    def _send_learn_request(self) -> None:
        """Ask every peer for what blocks execution: commits of O-instances from the
        first unexecuted slot, and of every C-instance the committed assignment
        log maps from there (in bulk, so a restarted replica catches up quickly)."""
        slot = self._exec_slot
        owners, counts, committed = self._o_owner, self._o_count, self._o_committed
        logs = self._c
        next_k = list(self._exec_count)
        wanted: list[tuple[ReplicaId, int]] = []
        cap = self.config.learn_c_max
        skip = self._exec_in_slot
        s = slot
        while s < len(owners) and committed[s] and len(wanted) < cap:
            owner = owners[s]
            if owner != NO_CL:
                for _ in range(counts[s] - skip):
                    k = next_k[owner]
                    next_k[owner] = k + 1
                    inst = logs[owner].get(k)
                    if (inst is None or not inst.committed) and len(wanted) < cap:
                        wanted.append((owner, k))
            skip = 0
            s += 1
        msg = LearnRequest(self.id, self.view, slot, tuple(wanted))
        for p in self._near:
            self._messages.append((p, msg))
        self.stats.learn_requests += 1
        if self._tracer is not None:
            self._trace("LearnRequest", o_from=slot, c_wanted=wanted)

    def _handle_learn_request(self, m: LearnRequest) -> None:
        o_from = m.o_from
        if type(o_from) is not int or o_from < -1:
            raise PeerMessageError(f"bad o_from {o_from!r}")
        if not isinstance(m.c_wanted, tuple) or len(m.c_wanted) > self.config.learn_c_max:
            raise PeerMessageError("LearnRequest asks for too many C-instances")
        for item in m.c_wanted:
            if not isinstance(item, tuple) or len(item) != 2:
                raise PeerMessageError(f"bad c_wanted item {item!r}")
            self._check_c_instance(*item)
        if o_from >= 0:
            stop = min(len(self._o_owner), o_from + self.config.learn_o_max)
            owners, counts, committed, cballots = (
                self._o_owner,
                self._o_count,
                self._o_committed,
                self._o_cballot,
            )
            entries = tuple(
                (s, cballots[s], owners[s], counts[s])
                for s in range(o_from, stop)
                if committed[s] and cballots[s] >= 0
            )
            if entries:
                self._messages.append((m.src, OCommit(self.id, self.view, entries)))
        for owner, index in m.c_wanted:
            inst = self._c[owner].get(index)
            if inst is not None and inst.committed:
                msg = CCommit(self.id, self.view, owner, index, inst.ballot, inst.commands)
                self._messages.append((m.src, msg))

    # ------------------------------------------------- heartbeats and lease

    def _send_heartbeats(self) -> None:
        now = self._now_ms
        self._hb_sent_ms = now
        self._hb_stamp += 1
        stamp = self._hb_stamp
        msg = Heartbeat(self.id, self.view, self._acc_upto, stamp, self._heartbeat_base())
        for p in self._near:
            self._messages.append((p, msg))
        self._lease_grants[stamp] = (now, {self.id})
        horizon = now - self.config.lease_ms
        for old in [s for s, (sent, _) in self._lease_grants.items() if sent < horizon]:
            del self._lease_grants[old]

    def _heartbeat_base(self) -> Slot:
        """The view's base once the rebuilt range is chosen, else -1."""
        return self._est_base if self._range_committed and self.is_sequencer else -1

    def _handle_heartbeat(self, m: Heartbeat) -> None:
        if type(m.o_len) is not int or m.o_len < 0 or type(m.stamp) is not int:
            raise PeerMessageError("bad heartbeat")
        if type(m.base) is not int or m.base < -1:
            raise PeerMessageError("bad heartbeat base")
        if m.base >= 0 and m.base != self._est_base:
            raise PeerMessageError(f"heartbeat says base {m.base}, the view's is {self._est_base}")
        learned = m.base >= 0 and not self._range_committed
        if learned:
            # The range is chosen (we missed the NewView): its slots are committed.
            self._range_committed = True
            committed = self._o_committed
            for s in range(max(self._est_start, self._executed_end()), self._est_base):
                committed[s] = True
                self._o_cballot[s] = self.view
            self._exec_dirty = True
            self._o_acked_dirty = True
        if m.o_len > self._o_acked[m.src]:
            self._o_acked[m.src] = m.o_len  # the sequencer accepted its whole log
            self._o_acked_dirty = True
        now = self._now_ms
        if self._distrust:
            if learned and self._tracer is not None:
                self._trace("HandleHeartbeat", src=m.src, view=m.view, grant=False, range=True)
            return  # alive, but we want it replaced: no lease, no reprieve
        self._last_hb_ms = now
        self._election_jitter_ms = self._jitter_ms()
        # The sequencer is alive: a pending vote or our own candidacy is moot (this
        # is what keeps one replica's false suspicion from deposing it).
        self._deferred_vote = None
        if self._candidate is not None:
            if self._tracer is not None:
                self._trace("AbandonViewChange", view=self._candidate.view)
            self._candidate = None
        if m.o_len > self._o_heard_upto:
            self._o_heard_upto = min(m.o_len, self._exec_slot + self.config.c_index_window_max)
        # The lease: promise not to vote (for anyone, ourselves included) for
        # lease_ms of our own time.
        self._lease_until_ms = now + self.config.lease_ms
        self._messages.append((m.src, LeaseGrant(self.id, self.view, m.stamp)))
        if self._tracer is not None:
            self._trace("HandleHeartbeat", src=m.src, view=m.view, grant=True, range=learned)

    def _handle_lease_grant(self, m: LeaseGrant) -> None:
        if type(m.stamp) is not int:
            raise PeerMessageError("bad lease grant")
        if not self.is_sequencer:
            return
        grant = self._lease_grants.get(m.stamp)
        if grant is None:
            return  # too old to matter
        sent_ms, grantors = grant
        grantors.add(m.src)
        if len(grantors) >= self._majority:
            # Dated from when we asked, on our clock, shortened for clock rates.
            until = sent_ms + self.config.lease_hold_ms
            if until > self.lease_valid_until_ms:
                self.lease_valid_until_ms = until

    def has_lease(self) -> bool:
        """Does this replica hold a sequencer lease granted by a majority right now?

        "Now" is the latest time the driver passed in (``tick``, ``step``, ``read``);
        reads and read requests are judged at the time they come with.
        """
        return (
            self.is_sequencer
            and self._rebuild is None
            and self._handing_over is None
            and self._now_ms < self.lease_valid_until_ms
        )

    # ---------------------------------------------------------- view change

    def _lease_expired(self) -> bool:
        """The lease we granted has run out (or its holder released it)."""
        return self._now_ms >= self._lease_until_ms

    def _may_vote_for_another(self) -> bool:
        """Our lease has run out and we too have missed the sequencer's heartbeats.

        The lease alone is not enough: with lease = heartbeat period (the paper's
        500 ms each), a voter's lease lapses for one network delay every period,
        and a replica cut off from a live sequencer would win in that gap. Asking
        that the voter suspect the sequencer too is the pre-vote idea of Raft.
        """
        if not self._lease_expired():
            return False
        if self.sequencer is None or self.is_sequencer or self._distrust:
            return True
        cfg = self.config
        return self._now_ms - self._last_hb_ms >= cfg.lease_ms + cfg.election_margin_ms

    def _rank(self, replica: ReplicaId) -> int:
        """0 for the replica right after the old sequencer (the paper's R_{n+1})."""
        return (replica - self._est_seq - 1) % self._n

    def _should_suspect_sequencer(self) -> bool:
        """Missed heartbeats after the lease lapsed, or an election that went quiet."""
        cfg = self.config
        now = self._now_ms
        stagger = self._rank(self.id) * cfg.successor_stagger_ms + self._election_jitter_ms
        if self.sequencer is None:
            # We voted (or restarted) but no sequencer showed up.
            return now - self._voted_ms >= cfg.candidate_timeout_ms + stagger
        if self.is_sequencer:
            return False
        if now - self._last_hb_ms >= cfg.lease_ms + cfg.election_margin_ms + stagger:
            return True
        # Early: our oldest unordered C-instance has waited several round trips to
        # the sequencer, and the sequencer has been silent all that time. (Our own
        # vote still waits for the lease we granted: see _maybe_win.)
        if not self._inflight:
            return False
        first = next(iter(self._inflight))
        if first < self._own_safe_count:
            return False
        rtt_ms = self._rtt_ms[self.sequencer]
        if rtt_ms is None:
            return False
        wait = max(cfg.suspect_min_ms, cfg.suspect_rtts * rtt_ms)
        quiet_since = max(self._seq_contact_ms, self._c[self.id][first].started_ms)
        return now - quiet_since >= wait + stagger

    def _start_view_change(self, above: View = 0) -> None:
        """Become a candidate for the next view (paper section 3.3, "V-request")."""
        base = self._candidate.view if self._candidate is not None else self.view
        view = max(base, self.view, above) + 1
        self._candidate = _Candidacy(view, self._exec_slot, self._now_ms)
        self._election_jitter_ms = self._jitter_ms()
        if self.sequencer is not None and self.sequencer != self.id and not above:
            self._suspected.add(self.sequencer)
            self._recompute_proximity()
        self.stats.view_changes_started += 1
        if self._tracer is not None:
            self._trace("StartViewChange", view=view, o_from=self._exec_slot)
        self._send_v_requests()
        self._maybe_win()

    def _send_v_requests(self) -> None:
        c = self._candidate
        assert c is not None
        msg = VRequest(self.id, c.view, c.o_from)
        for p in self._near:
            if p not in c.votes:
                self._messages.append((p, msg))

    def _handle_v_request(self, m: VRequest) -> None:
        if type(m.o_from) is not int or m.o_from < 0:
            raise PeerMessageError(f"bad o_from {m.o_from!r}")
        if m.view <= self.view:
            if m.view == self.view and self._voted_for == m.src and self._est_view != self.view:
                if self._tracer is not None:
                    self._trace("HandleVRequest", view=m.view, candidate=m.src, again=True)
                self._send_vote(m)  # our vote was lost: send it again
            elif self.is_sequencer and m.view < self.view:
                self._on_stale(m)
            return
        if self.is_sequencer and self._handing_over != m.src:
            # Alive and sequencing: never vote ourselves out. If the others also
            # stopped hearing from us, their leases lapse and they elect without us.
            if self._tracer is not None:
                self._trace("IgnoreVRequest", view=m.view, candidate=m.src)
            return
        c = self._candidate
        if c is not None and c.view >= m.view and self._rank(self.id) <= self._rank(m.src):
            return  # we run for this view ourselves and take precedence
        if not self._may_vote_for_another() and m.src != self.sequencer:
            # We promised the sequencer not to vote for anyone else yet (section 3.5),
            # or we still hear from it and so do not share the suspicion.
            if self._deferred_vote is None or m.view >= self._deferred_vote.view:
                self._deferred_vote = m
            if self._tracer is not None:
                self._trace("DeferVote", view=m.view, candidate=m.src)
            return
        self._vote(m)

    def _vote(self, m: VRequest) -> None:
        """Promise view ``m.view`` to ``m.src`` and send our phase-1b state (HandleVRequest)."""
        self.view = m.view
        self._voted_for = m.src
        self._voted_ms = self._now_ms
        if self.sequencer is not None and self.sequencer != self.id:
            self._suspected.add(self.sequencer)
            self._recompute_proximity()
        self.sequencer = None
        self._candidate = None
        self._deferred_vote = None
        self._distrust = False
        self._handing_over = None
        self._rebuild = None
        self._acc_upto = NOT_ESTABLISHED
        self._range_committed = False
        self._new_view_msg = None
        self._fail_unanswered_reads()
        self._persist.append(ViewPromised(m.view))
        if self._tracer is not None:
            self._trace("HandleVRequest", view=m.view, candidate=m.src)
        self._send_vote(m)
        self._forget_older_commits(m.view)
        self._o_pending.clear()
        self._reset_learner()
        self._resync_toward(m.src)

    def _send_vote(self, m: VRequest) -> None:
        executed = self._executed_end()
        vote = Vote(
            self.id,
            m.view,
            m.o_from,
            self._vote_entries(min(m.o_from, executed)),
            tuple(self._c_max),
            self._est_view,
            self._est_seq,
            self._est_base,
            executed,
        )
        self._messages.append((m.src, vote))

    def _vote_entries(self, o_from: Slot) -> tuple[VoteEntry, ...]:
        """Every O-value we hold durably from ``o_from`` on, with its ballot."""
        owners, counts, ballots = self._o_owner, self._o_count, self._o_ballot
        return tuple(
            (s, ballots[s], owners[s], counts[s])
            for s in range(o_from, len(owners))
            if ballots[s] != _NO_BALLOT
        )

    def _handle_vote(self, m: Vote) -> None:
        c = self._candidate
        if c is None or m.view != c.view or m.o_from != c.o_from:
            return  # not our election (any more)
        if not isinstance(m.c_max, tuple) or len(m.c_max) != self._n:
            raise PeerMessageError("vote with a bad c_max")
        if not isinstance(m.entries, tuple):
            raise PeerMessageError("vote with bad entries")
        for entry in m.entries:
            if not isinstance(entry, tuple) or len(entry) != 4:
                raise PeerMessageError(f"bad vote entry {entry!r}")
            slot, ballot, owner, count = entry
            if type(slot) is not int or slot < 0 or type(ballot) is not int or ballot < 0:
                raise PeerMessageError(f"bad vote entry {entry!r}")
            if slot >= c.o_from + self.config.c_index_window_max:
                raise PeerMessageError(f"vote entry for slot {slot} is beyond the window")
            self._check_o_value((owner, count))
        if any(type(i) is not int or i < -1 for i in m.c_max):
            raise PeerMessageError("vote with a bad c_max")
        if type(m.est_view) is not int or not 0 <= m.est_view < m.view:
            raise PeerMessageError("vote with a bad established view")
        if type(m.est_seq) is not int or not 0 <= m.est_seq < self._n:
            raise PeerMessageError("vote with a bad est_seq")
        if type(m.est_base) is not int or m.est_base < 0:
            raise PeerMessageError("vote with a bad est_base")
        if type(m.executed) is not int or m.executed < 0:
            raise PeerMessageError("vote with a bad executed prefix")
        c.votes[m.src] = VoteState(
            m.entries, m.c_max, m.est_view, m.est_seq, m.est_base, m.executed
        )
        if self._tracer is not None:
            self._trace("HandleVote", view=m.view, voter=m.src, votes=len(c.votes) + 1)
        self._maybe_win()

    def _maybe_win(self) -> None:
        """With votes from a majority (ours included) we win, but our own vote may
        only be given once the lease we granted has expired, as any voter's: else
        the old sequencer's lease majority and our vote majority could meet only
        in us, and it would serve stale reads while we make writes ready."""
        c = self._candidate
        if c is None or len(c.votes) + 1 < self._majority:
            return
        if not self._lease_expired():
            return
        self._become_sequencer()

    def _become_sequencer(self) -> None:
        """Won the election: rebuild the assignment log and re-propose it (Fig. 7)."""
        c = self._candidate
        assert c is not None
        view, o_from = c.view, c.o_from
        votes = dict(c.votes)
        votes[self.id] = VoteState(
            self._vote_entries(o_from),
            tuple(self._c_max),
            self._est_view,
            self._est_seq,
            self._est_base,
            self._executed_end(),
        )
        owners, counts = self._o_owner, self._o_count
        covered_before = [0] * self._n
        for s in range(min(o_from, len(owners))):
            if owners[s] != NO_CL:
                covered_before[owners[s]] += counts[s]
        rebuilt = rebuild_assignment_log(
            replicas=self._n, o_from=o_from, votes=votes, covered_before=covered_before
        )
        self.stats.invariant_alarms += rebuilt.alarms
        # The range also re-proposes what we executed below o_from and some voter
        # did not: executed by us, it may be held by two replicas only (N = 5).
        start = min(o_from, *(v.executed for v in votes.values()))
        values = tuple(zip(owners[start:o_from], counts[start:o_from], strict=True)) + tuple(
            rebuilt.values
        )
        end = start + len(values)
        # Slots we executed meanwhile must come out unchanged (ExecutedNeverRevoked).
        executed_end = self._executed_end()
        for s in range(o_from, min(executed_end, end)):
            if (owners[s], counts[s]) != values[s - start]:
                raise InvariantViolation(
                    f"view {view} would revoke executed slot {s}: "
                    f"{owners[s], counts[s]} -> {values[s - start]}"
                )
        if end < executed_end:
            raise InvariantViolation(f"view {view} would drop executed slots {end}..")
        self._o_ensure(end)
        for s in range(start, end):
            owners[s], counts[s] = values[s - start]
            self._o_ballot[s] = view
            self._o_committed[s] = s < executed_end
        self._persist.append(ViewPromised(view))
        self._persist.append(ViewEstablished(view, self.id, start, values))
        old_seq = rebuilt.old_sequencer
        self.view = view
        self.sequencer = self.id
        self._voted_for = self.id
        self._est_view, self._est_seq, self._est_start, self._est_base = view, self.id, start, end
        self._acc_upto = self._o_heard_upto = end
        self._range_committed = False
        self._new_view_msg = None
        self._candidate = None
        self._deferred_vote = None
        self._o_pending.clear()
        covered = [0] * self._n
        for owner, count in zip(owners[:end], counts[:end], strict=True):
            if owner != NO_CL:
                covered[owner] += count
        self._seq_covered = covered
        self._seq_want.clear()
        self._o_sent_upto = [NOT_ESTABLISHED] * self._n
        self._rebuild = (start, end)
        self._distrust = False
        self._handing_over = None
        self._fail_unanswered_reads()
        # A new sequencer has no history: reads wait for the whole log (i_G).
        self._history.clear()
        self._pending_keys.clear()
        self._history_floor = end - 1
        self.lease_valid_until_ms = -math.inf
        self._lease_grants.clear()
        self._forget_older_commits(view)
        self._reset_learner()
        self._o_resend.update(self._near)  # re-acceptance by everyone
        self.stats.views_won += 1
        if self._tracer is not None:
            self._trace(
                "BecomeSequencer",
                view=view,
                o_from=o_from,
                start=start,
                values=len(values),
                old_sequencer=old_seq,
                inferred=rebuilt.inferred,
            )
        self._send_heartbeats()
        self._resync_wanted = True
        if old_seq != self.id:
            self._suspected.add(old_seq)
            self._recompute_proximity()

    def _commit_rebuilt_range(self) -> None:
        """A majority accepted the rebuilt range: it is chosen; notify everyone."""
        assert self._rebuild is not None
        start, end = self._rebuild
        self._rebuild = None
        self._range_committed = True
        for s in range(start, end):
            if not self._o_committed[s]:
                self._o_committed[s] = True
                self._o_cballot[s] = self.view
        values = tuple(zip(self._o_owner[start:end], self._o_count[start:end], strict=True))
        msg = NewView(self.id, self.view, start, values)
        self._new_view_msg = msg
        for p in self._near:
            self._messages.append((p, msg))
        self._exec_dirty = True
        if self._tracer is not None:
            self._trace("SendNewView", view=self.view, start=start, values=len(values))

    def _reset_learner(self) -> None:
        """Learner state is per view: recount from what is known now."""
        self._o_acked = [NOT_ESTABLISHED] * self._n
        self._o_acked[self.id] = self._acc_upto
        self._o_acked_before = list(self._o_acked)
        self._o_safe_upto = 0
        self._own_scan = 0
        self._own_safe_count = 0
        self._o_acked_dirty = True

    def _resync(self) -> None:
        """After a view change, re-send in the new view what the old one lost (section 3.3)."""
        self._resync_wanted = False
        if self.sequencer is None or not self._inflight:
            return
        log = self._c[self.id]
        for index in self._inflight:
            self._resend_c_accept(index, log[index], self._c_quorum)
        last = next(reversed(self._inflight))
        if self.is_sequencer:
            if self._tracer is not None:
                self._trace("Resync", index=last)
            self._want(self.id, last)
        else:
            self._send_c_request(last)

    def _resync_toward(self, candidate: ReplicaId) -> None:
        """Right after voting: our stuck C-instances go out again in the new view,
        and the candidate we voted for (the likely winner) hears what to order.
        Sent behind the vote, they reach the candidate as it wins."""
        if not self._inflight:
            return
        log = self._c[self.id]
        for index in self._inflight:
            self._resend_c_accept(index, log[index], self._c_quorum)
        last = next(reversed(self._inflight))
        if candidate not in self._c_quorum:
            self._messages.append((candidate, self._c_request(last)))

    def _on_stale(self, m: Message) -> None:
        """A message from an older view. The sequencer tells the sender where we are;
        a replica stuck above a live sequencer's view tells that sequencer."""
        self.stats.stale += 1
        if self._tracer is not None:
            self._trace("Stale", msg=m)
        if type(m) is Heartbeat and self.sequencer is None:
            self._messages.append((m.src, LearnRequest(self.id, self.view, -1, ())))
        if self.is_sequencer:
            hb = Heartbeat(
                self.id, self.view, self._acc_upto, self._hb_stamp, self._heartbeat_base()
            )
            self._messages.append((m.src, hb))
            if self._new_view_msg is not None:
                self._messages.append((m.src, self._new_view_msg))

    # ---------------------------------------------------- C-instance recovery

    def _maybe_start_recovery(self, owner: ReplicaId, index: int) -> None:
        """Execution is blocked on C-instance ``owner.index``: run Paxos phase 1 on it
        and on the following ones the committed assignment log already needs."""
        if owner == self.id or owner in self._recoveries:
            return
        slot = self._exec_slot
        if slot >= len(self._o_committed) or not self._o_committed[slot]:
            return  # no longer blocked on a committed slot (a new view revoked it)
        # How many C-instances of owner do committed slots ask for from here on?
        needed = 0
        owners, counts, committed = self._o_owner, self._o_count, self._o_committed
        for s in range(self._exec_slot, len(owners)):
            if not committed[s]:
                break
            if owners[s] == owner:
                needed += counts[s]
        needed -= self._exec_in_slot if owners[self._exec_slot] == owner else 0
        needed = max(1, min(needed, self.config.recovery_batch_max))
        log = self._c[owner]
        end = index + needed
        top = max((log[i].promised for i in range(index, end) if i in log), default=-1)
        # Round 1 at least: the owner's round 0 must always be outranked (and an
        # entry that exists without any promise has promised -1).
        ballot = make_ballot(max(ballot_round(top), 0) + 1, self.id)
        rec = _Recovery(owner, index, end, ballot, self._now_ms)
        self._recoveries[owner] = rec
        self.stats.c_recoveries_started += 1
        if self._tracer is not None:
            self._trace("StartCRecovery", owner=owner, start=index, end=end, ballot=ballot)
        own = self._promise_c(owner, index, end, ballot)
        assert own.ok
        rec.promises[self.id] = own
        msg = CPrepare(self.id, self.view, owner, index, end, ballot)
        for p in self._near:
            self._messages.append((p, msg))
        self._exec_blocked_ms = self._now_ms

    def _promise_c(self, owner: ReplicaId, start: int, end: int, ballot: Ballot) -> CPromise:
        """Acceptor side of phase 1 for a range; persists the promise when it is given."""
        log = self._c[owner]
        top = max((log[i].promised for i in range(start, end) if i in log), default=-1)
        ok = ballot >= top
        ballots: list[Ballot] = []
        values: list[tuple[Command, ...] | None] = []
        committed: list[bool] = []
        for i in range(start, end):
            inst = log.get(i)
            if inst is None:
                if ok:
                    inst = log[i] = _CInstance()
                else:
                    ballots.append(_NO_BALLOT)
                    values.append(None)
                    committed.append(False)
                    continue
            if ok and ballot > inst.promised:
                inst.promised = ballot
                inst.acks = None if inst.ballot != ballot else inst.acks
                self._persist.append(CPromised(owner, i, ballot))
            ballots.append(inst.ballot)
            values.append(inst.commands)
            committed.append(inst.committed)
        return CPromise(
            self.id,
            self.view,
            owner,
            start,
            ballot,
            ok,
            max(top, ballot) if not ok else ballot,
            tuple(ballots),
            tuple(values),
            tuple(committed),
        )

    def _handle_c_prepare(self, m: CPrepare) -> None:
        self._check_c_instance(m.owner, m.start)
        if (
            type(m.end) is not int
            or not m.start < m.end <= m.start + self.config.recovery_batch_max
        ):
            raise PeerMessageError(f"bad C-prepare range {m.start}..{m.end}")
        if type(m.ballot) is not int or ballot_round(m.ballot) < 1:
            raise PeerMessageError(f"bad recovery ballot {m.ballot!r}")
        if self._tracer is not None:
            self._trace("HandleCPrepare", owner=m.owner, start=m.start, end=m.end, ballot=m.ballot)
        self._messages.append((m.src, self._promise_c(m.owner, m.start, m.end, m.ballot)))

    def _handle_c_promise(self, m: CPromise) -> None:
        rec = self._recoveries.get(m.owner)
        if rec is None or m.ballot != rec.ballot or m.start != rec.start or rec.proposed:
            return
        size = rec.end - rec.start
        if not (len(m.ballots) == len(m.values) == len(m.committed) == size):
            raise PeerMessageError("C-promise with a bad shape")
        for value in m.values:
            if value is not None and (
                not isinstance(value, tuple) or len(value) > self.config.c_batch_max
            ):
                raise PeerMessageError("C-promise with a bad value")
        if not m.ok:
            # A higher ballot is out there: give up; the next attempt goes above it.
            log = self._c[m.owner]
            inst = log.get(m.start) or log.setdefault(m.start, _CInstance())
            inst.promised = max(inst.promised, m.promised)
            del self._recoveries[m.owner]
            if self._tracer is not None and not rec.proposed:
                self._trace("AbandonCRecovery", owner=m.owner, start=m.start, promised=m.promised)
            return
        rec.promises[m.src] = m
        if len(rec.promises) < self._majority:
            return
        log = self._c[m.owner]
        # Phase 2 at our ballot needs our own acceptor too: if we promised a higher
        # ballot meanwhile (a competing recoverer), accepting ours would break that
        # promise, and two values could be chosen. Give up; retry above it later.
        for index in range(rec.start, rec.end):
            mine = log.get(index)
            if mine is not None and mine.promised > rec.ballot:
                del self._recoveries[m.owner]
                if self._tracer is not None:
                    self._trace("AbandonCRecovery", owner=m.owner, start=rec.start)
                return
        rec.proposed = True
        if self._tracer is not None:
            # The model's HandleCPromise is this step: a majority promised, phase 2.
            self._trace("HandleCPromise", owner=m.owner, start=m.start, src=m.src)
        for k in range(size):
            index = rec.start + k
            chosen: tuple[Command, ...] | None = None
            best = _NO_BALLOT
            for promise in rec.promises.values():
                value = promise.values[k]
                if promise.committed[k] and value is not None:
                    chosen, best = value, 1 << 62
                    break
                if promise.ballots[k] > best and value is not None:
                    chosen, best = value, promise.ballots[k]
            value = chosen if chosen is not None else ()  # no-op: nothing was traced
            inst = log.get(index) or log.setdefault(index, _CInstance())
            if inst.committed:
                continue
            self._accept_c(m.owner, index, inst, rec.ballot, value)
            inst.acks = {self.id}
            msg = CAccept(self.id, self.view, m.owner, index, rec.ballot, value)
            for p in self._near:
                self._messages.append((p, msg))

    def _commit_recovered_c(self, owner: ReplicaId, index: int, inst: _CInstance) -> None:
        inst.committed = True
        inst.acks = None
        msg = CCommit(self.id, self.view, owner, index, inst.ballot, inst.commands)
        for p in self._near:
            self._messages.append((p, msg))
        self.stats.c_instances_recovered += 1
        if self._tracer is not None:
            self._trace("CommitC", owner=owner, index=index, recovered=True)
        self._exec_dirty = True
        rec = self._recoveries.get(owner)
        if rec is not None and all(
            (i in self._c[owner] and self._c[owner][i].committed) for i in range(rec.start, rec.end)
        ):
            del self._recoveries[owner]

    # ----------------------------------------------------------------- reads

    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None:
        """Ask for a linearizable read of ``key`` (paper section 3.5).

        The answer comes in :attr:`Ready.reads`: ``ok`` means every write that
        was ready before this call has been applied here, so the embedder reads
        its state machine directly; not ``ok`` means the read must go through the
        log (propose it as a command). The sequencer answers with the last slot
        it gave a write of ``key`` (its history table), or, while its history is
        young, the whole log (the paper's i_G); it answers only while it holds a
        lease from a majority, judged at ``now_ms`` (the driver's clock now).

        Raises:
            LocalProtocolError: ``read_id`` is already waiting.
        """
        self._advance_clock(now_ms)
        if read_id in self._reads:
            raise LocalProtocolError(f"read {read_id} is already pending")
        if self.sequencer is None or len(self._reads) >= self.config.reads_pending_max:
            self._refuse_read(read_id)
            return
        if self.is_sequencer:
            if self.has_lease():
                self._reads[read_id] = (self._read_slot(key), self._now_ms)
                self._exec_dirty = True  # served at the next ready() if already executed
            else:
                self._refuse_read(read_id)
            return
        self._reads[read_id] = (None, self._now_ms)
        msg = RRequest(self.id, self.view, read_id, key if key is not None else b"")
        self._messages.append((self.sequencer, msg))

    def _refuse_read(self, read_id: int) -> None:
        self.stats.reads_refused += 1
        self._read_results.append(ReadResult(read_id, False))

    def _read_slot(self, key: bytes | None) -> Slot:
        """The last slot a write of ``key`` may occupy (i_A, or i_G when unsure)."""
        floor = self._history_floor
        if not key:
            return self._acc_upto - 1
        return max(self._history.get(key, -1), floor)

    def _handle_r_request(self, m: RRequest) -> None:
        if type(m.read_id) is not int or type(m.key) is not bytes:
            raise PeerMessageError("bad R-request")
        if not self.is_sequencer:
            return
        ok = self.has_lease()
        slot = self._read_slot(m.key) if ok else -1
        if self._tracer is not None:
            self._trace("HandleRRequest", src=m.src, read_id=m.read_id, slot=slot, ok=ok)
        self._messages.append((m.src, RReply(self.id, self.view, m.read_id, slot, ok)))

    def _handle_r_reply(self, m: RReply) -> None:
        if type(m.read_id) is not int or type(m.slot) is not int or type(m.ok) is not bool:
            raise PeerMessageError("bad R-reply")
        pending = self._reads.get(m.read_id)
        if pending is None or pending[0] is not None or m.src != self.sequencer:
            return
        if m.ok and m.slot >= -1:
            self._reads[m.read_id] = (m.slot, pending[1])
            self._exec_dirty = True
        else:
            del self._reads[m.read_id]
            self._refuse_read(m.read_id)

    def _serve_reads(self) -> None:
        """Reads whose slot has executed are served; stale requests fall back."""
        done = self._exec_slot
        expired = self._now_ms - self.config.retransmit_ms
        finished = [
            rid
            for rid, (slot, asked) in self._reads.items()
            if (slot is not None and slot < done) or (slot is None and asked < expired)
        ]
        for rid in finished:
            slot, _ = self._reads.pop(rid)
            if slot is None:
                self._refuse_read(rid)
            else:
                self.stats.reads_served += 1
                self._read_results.append(ReadResult(rid, True))

    def _fail_unanswered_reads(self) -> None:
        """A view change voids outstanding R-requests: their answers may never come."""
        for rid in [rid for rid, (slot, _) in self._reads.items() if slot is None]:
            del self._reads[rid]
            self._refuse_read(rid)

    def _note_keys(self, owner: ReplicaId, index: int, keys: tuple[bytes, ...]) -> None:
        """Sequencer: remember which objects C-instance ``owner.index`` writes."""
        if index >= self._seq_covered[owner]:
            self._pending_keys[(owner, index)] = keys

    def _record_history(self, slot: Slot, owner: ReplicaId, first: int, count: int) -> None:
        """Sequencer: slot ``slot`` orders C-instances ``first ..`` of ``owner``."""
        history = self._history
        for index in range(first, first + count):
            keys = self._pending_keys.pop((owner, index), None)
            if keys is None or b"" in keys:
                # Unknown objects (the request was lost, or a write named none):
                # every read must wait for this slot.
                self._history_floor = slot
                continue
            for key in keys:
                history.pop(key, None)
                history[key] = slot
        while len(history) > self.config.history_keys_max:
            oldest = next(iter(history))
            self._history_floor = max(self._history_floor, history.pop(oldest))

    # ------------------------------------------- straggler detection, hand-over

    def _judge_sequencer_speed(self) -> None:
        """Paper section 4: count what the sequencer ordered for us per window; three
        windows below half of what we needed make us poll the others."""
        cfg = self.config
        need = self._sw_need_start + (self._next_index - self._sw_index_start)
        got = self._own_safe_count - self._sw_safe_start
        if need >= cfg.straggler_need_min and got * 100 < need * cfg.straggler_ratio_pct:
            self._straggler_strikes += 1
        else:
            self._straggler_strikes = 0
        self._sw_index_start = self._next_index
        self._sw_safe_start = self._own_safe_count
        self._sw_need_start = max(0, self._next_index - self._own_safe_count)
        if self._straggler_strikes >= cfg.straggler_strikes and not self._straggler_polling:
            self._straggler_polling = {self.id}
            if self._tracer is not None:
                self._trace("StragglerSuspect", view=self.view, sequencer=self.sequencer)
            msg = StragglerPoll(self.id, self.view)
            for p in self._near:
                if p != self.sequencer:
                    self._messages.append((p, msg))

    def _handle_straggler_poll(self, m: StragglerPoll) -> None:
        agree = self._straggler_strikes > 0 and not self.is_sequencer
        if agree:
            self._distrust_sequencer()
        self._messages.append((m.src, StragglerVote(self.id, self.view, agree)))

    def _handle_straggler_vote(self, m: StragglerVote) -> None:
        if type(m.agree) is not bool:
            raise PeerMessageError("bad straggler vote")
        if not self._straggler_polling or not m.agree:
            return
        self._straggler_polling.add(m.src)
        if len(self._straggler_polling) < self._majority:
            return
        self._straggler_polling = set()
        self._straggler_strikes = 0
        if self._now_ms - self._straggler_last_ms < self.config.straggler_min_interval_ms:
            return  # rate limit
        self._straggler_last_ms = self._now_ms
        if self._tracer is not None:
            self._trace("StragglerViewChange", view=self.view, sequencer=self.sequencer)
        self._distrust_sequencer()
        self._start_view_change()

    def _distrust_sequencer(self) -> None:
        """Stop renewing the sequencer's lease; vote for others once it runs out.

        Distrust never releases a lease we granted: only its expiry, or the
        holder's own hand-over, does.
        """
        self._distrust = True

    def transfer_sequencer(self, target: ReplicaId) -> None:
        """Hand the sequencer role to ``target`` on purpose (e.g. to move it nearer the load).

        The sequencer stops serving reads at once, tells everyone to stop
        honouring its lease, and votes for ``target``, which runs the view change.

        Raises:
            LocalProtocolError: this replica is not the sequencer, or ``target`` is
                not another replica.
        """
        if not self.is_sequencer or self._rebuild is not None:
            raise LocalProtocolError("only an established sequencer can hand its role over")
        if not 0 <= target < self._n or target == self.id:
            raise LocalProtocolError(f"cannot hand the sequencer role to {target!r}")
        self._handing_over = target
        self.lease_valid_until_ms = -math.inf
        self._lease_until_ms = self._now_ms
        msg = SequencerHandover(self.id, self.view, target)
        for p in self._near:
            self._messages.append((p, msg))
        if self._tracer is not None:
            self._trace("SequencerHandover", view=self.view, target=target)

    def _handle_sequencer_handover(self, m: SequencerHandover) -> None:
        if m.src != self.sequencer or type(m.target) is not int:
            raise PeerMessageError("hand-over not from the sequencer")
        self._lease_until_ms = self._now_ms  # released by its holder
        if self._tracer is not None:
            self._trace("HandleHandover", src=m.src, view=m.view, target=m.target)
        self._distrust_sequencer()
        if m.target == self.id and self._candidate is None:
            self._start_view_change()

    # --------------------------------------------------------------- restart

    def _restore(self, records: list[Record]) -> None:
        """Rebuild from durable records after a crash (Ongaro's Restart: keep only these)."""
        me = self.id
        promised = 0
        est: tuple[View, ReplicaId, Slot, Slot] = (0, self.config.sequencer, 0, 0)
        for rec in records:
            if isinstance(rec, CAccepted):
                inst = self._c[rec.owner].get(rec.index)
                if inst is None:
                    inst = self._c[rec.owner][rec.index] = _CInstance()
                if rec.ballot >= inst.ballot:
                    inst.ballot = rec.ballot
                    inst.commands = rec.commands
                inst.promised = max(inst.promised, rec.ballot)
                self._c_max[rec.owner] = max(self._c_max[rec.owner], rec.index)
                if rec.owner == me and rec.ballot == self._own_ballot:
                    self._next_index = max(self._next_index, rec.index + 1)
            elif isinstance(rec, CPromised):
                inst = self._c[rec.owner].get(rec.index)
                if inst is None:
                    inst = self._c[rec.owner][rec.index] = _CInstance()
                inst.promised = max(inst.promised, rec.ballot)
            elif isinstance(rec, OAccepted):
                self._restore_o(rec.view, rec.start, rec.values)
                promised = max(promised, rec.view)
            elif isinstance(rec, ViewEstablished):
                self._restore_o(rec.view, rec.start, rec.values)
                if rec.view >= est[0]:
                    est = (rec.view, rec.sequencer, rec.start, rec.base)
                promised = max(promised, rec.view)
            elif isinstance(rec, ViewPromised):
                promised = max(promised, rec.view)
            else:
                raise LocalProtocolError(f"unknown durable record {rec!r}")
        self.view = promised
        self._est_view, self._est_seq, self._est_start, self._est_base = est
        self._range_committed = False
        if self._est_view == promised and self._est_seq != me:
            self.sequencer = self._est_seq
            acc = self._est_base
            ballots = self._o_ballot
            while acc < len(ballots) and ballots[acc] == promised:
                acc += 1
            self._acc_upto = acc
        else:
            # Voted in a view we never established, or we were its sequencer:
            # every allocation we sent is durable (OAccepted is persisted before
            # the O-accepts leave), but the rest of a sequencer's state is
            # volatile (the allocation guard's wants, what each peer was sent and
            # acknowledged, whether the range is chosen, the history table reads
            # rely on, its lease). A view change rebuilds what matters from
            # durable votes (docs/recovery.md section 5).
            self.sequencer = None
            self._acc_upto = NOT_ESTABLISHED
        self._o_heard_upto = len(self._o_owner)
        # Our last c_inflight_max C-instances may not have been ready: drive them
        # again (older ones were ready before we could start these).
        log = self._c[me]
        for index in range(max(0, self._next_index - self.config.c_inflight_max), self._next_index):
            inst = log.get(index)
            if inst is not None and inst.commands is not None and inst.ballot == self._own_ballot:
                inst.acks = {me}
                inst.sent_ms = -self.config.retransmit_ms
                self._inflight[index] = inst.commands
        # We may have granted a lease just before the crash: honour it (our clock
        # starts at 0 with the first time the driver gives us).
        self._lease_until_ms = self.config.lease_ms
        self._reset_learner()
        if self._tracer is not None:
            self._trace("Restart", view=promised, sequencer=self.sequencer, records=len(records))

    def _restore_o(self, ballot: Ballot, start: Slot, values: tuple[OValue, ...]) -> None:
        self._o_ensure_unchecked(start + len(values))
        owners, counts, ballots = self._o_owner, self._o_count, self._o_ballot
        for k, (owner, count) in enumerate(values):
            s = start + k
            if ballot >= ballots[s]:
                owners[s], counts[s] = owner, count
                ballots[s] = ballot

    def _o_ensure_unchecked(self, end: Slot) -> None:
        grow = end - len(self._o_owner)
        if grow > 0:
            self._o_owner.extend([NO_CL] * grow)
            self._o_count.extend([0] * grow)
            self._o_ballot.extend([_NO_BALLOT] * grow)
            self._o_committed.extend([False] * grow)
            self._o_cballot.extend([_NO_BALLOT] * grow)

    # ----------------------------------------------------------- internals

    def _recompute_proximity(self) -> None:
        """Order peers by round trip (unknown ones last, ring order as tie-break)."""
        n, me = self._n, self.id
        inf = float("inf")

        def key(p: ReplicaId) -> tuple[float, int]:
            rtt = self._rtt_ms[p]
            return (inf if rtt is None else rtt, (p - me) % n)

        self._near = sorted((p for p in range(n) if p != me), key=key)
        if self.config.thrifty:
            # Nearest majority, leaving out replicas believed down while enough remain.
            live = [p for p in self._near if p not in self._suspected]
            if len(live) < self._majority - 1:
                live = self._near
            self._c_quorum = tuple(live[: self._majority - 1])
        else:
            self._c_quorum = tuple(self._near)

    def _trace(self, event: str, **fields: Any) -> None:
        if self._tracer is not None:
            self._tracer(event, self.id, fields)
