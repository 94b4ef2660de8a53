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
   for N = 5 and a non-sequencer, by this replica and the sequencer.
4. *Idempotence.* Every handler tolerates duplicates and reordering; counting
   acknowledgements uses sets, commits are flags, allocation is a guard.
5. *Bad input changes nothing.* Handlers validate first and raise
   :class:`PeerMessageError`; :meth:`step` drops the message and counts it.
6. *Views.* Every message carries a view; older views are rejected (C-accepts
   included, pitfall 5).
"""

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import LocalProtocolError, Overloaded, PeerMessageError
from sdpaxos.core.messages import (
    CAccept,
    CAck,
    CCommit,
    CRequest,
    LearnRequest,
    Message,
    OAccept,
    OAck,
    OCommit,
)
from sdpaxos.core.ready import Executed, Ready, Reply, ReplyKind
from sdpaxos.core.storage import CAccepted, OAccepted, Record
from sdpaxos.core.types import (
    NO_CL,
    Ballot,
    Command,
    ReplicaId,
    Slot,
    Wait,
    make_ballot,
)


class StateMachine(Protocol):
    """What an application gives a replica.

    ``apply`` must be deterministic: every replica applies the same payloads in
    the same order and must reach the same state and results.
    """

    def apply(self, payload: bytes) -> bytes: ...


#: ``tracer(event, replica_id, fields)``; event names equal the TLA+ actions.
Tracer = Callable[[str, ReplicaId, dict[str, Any]], None]

_NO_BALLOT = -1


class _CInstance:
    """One C-instance as this replica knows it (acceptor and, if own, leader state)."""

    __slots__ = ("acks", "ballot", "commands", "committed", "promised", "sent_tick")

    def __init__(self) -> None:
        self.promised: Ballot = _NO_BALLOT
        self.ballot: Ballot = _NO_BALLOT
        self.commands: tuple[Command, ...] | None = None
        self.committed = False
        #: Leader only: replicas that accepted ``ballot`` (self included).
        self.acks: set[ReplicaId] | None = None
        #: Leader only: tick of the last (re)transmission.
        self.sent_tick = 0


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
        tracer: optional hook called with trace events named like TLA+ actions.
        records: durable records of a previous incarnation (not yet supported).
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
        self._now = 0

        # View and sequencer. View 0's sequencer is configured; later views are
        # won by election (recovery issue).
        self.view = 0
        self.sequencer: ReplicaId = config.sequencer

        # C-logs, one per owner; the acceptor state of every C-instance.
        self._c: list[dict[int, _CInstance]] = [{} for _ in range(n)]

        # Command-leader state.
        self._own_ballot: Ballot = make_ballot(0, replica_id)
        self._next_index = 0
        self._proposals: deque[Command] = deque()
        self._exec_waiters: set[tuple[int, int]] = set()
        #: Own C-instances started but not yet ready, by index (insertion = index order).
        self._inflight: dict[int, _CInstance] = {}

        # Assignment log (O-instances), as this replica knows it.
        self._o_owner: list[ReplicaId] = []
        self._o_count: list[int] = []
        self._o_ballot: list[Ballot] = []
        self._o_committed: list[bool] = []
        #: Every slot below this is accepted in this view or known committed.
        self._o_known_upto = 0
        #: Highest slot + 1 this replica has heard exists (for learning).
        self._o_heard_upto = 0

        # Learner state for the O-instances this replica owns.
        #: Per replica: the prefix of O-instances it is known to have accepted.
        self._o_acked: list[Slot] = [0] * n
        self._o_acked_dirty = False
        self._o_safe_upto = 0
        #: Next slot to scan for own O-instances inside the safe prefix.
        self._own_scan = 0
        #: Own C-instances covered by own O-instances inside the safe prefix.
        self._own_safe_count = 0
        self._o_commit_out: list[tuple[Slot, ReplicaId, int]] = []

        # Sequencer state (meaningful while self.id == self.sequencer).
        #: Per owner: C-instances covered by allocated O-instances.
        self._seq_covered: list[int] = [0] * n
        #: Owners with a pending allocation, in arrival order -> wanted coverage.
        self._seq_want: dict[ReplicaId, int] = {}
        #: Per peer: O-instances sent so far (prefix).
        self._o_sent_upto: list[Slot] = [0] * n
        self._o_resend: set[ReplicaId] = set()
        self._o_lazy_tick = 0

        # Execution.
        self._exec_slot = 0
        self._exec_in_slot = 0
        self._exec_count: list[int] = [0] * n
        self._exec_dirty = False
        self._exec_progress_tick = 0
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
        }
        if records:
            raise LocalProtocolError("restoring from durable records is not supported yet")

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

    def step(self, message: Message) -> None:
        """Handle one message from a peer. Never raises for bad peer input."""
        self.stats.steps += 1
        handler = self._handlers.get(type(message))
        try:
            if handler is None:
                raise PeerMessageError(f"unknown message type {type(message).__name__}")
            src = message.src
            if type(src) is not int or not 0 <= src < self._n or src == self.id:
                raise PeerMessageError(f"bad sender {src!r}")
            if message.view != self.view:
                if message.view < self.view:
                    self.stats.stale += 1
                    self._trace("Stale", msg=message)
                    return
                # A higher view: the view change (next issue) decides how to adopt it.
                raise PeerMessageError(f"message from future view {message.view} > {self.view}")
            handler(message)
        except PeerMessageError as exc:
            self.stats.rejected += 1
            self._trace("Reject", msg=message, reason=str(exc))

    def tick(self) -> None:
        """Advance logical time by one tick: retransmissions and learning."""
        self._now += 1
        now = self._now
        cfg = self.config
        # Command leader: resend what has not been acknowledged.
        if self._inflight:
            need_order = -1
            for index, inst in self._inflight.items():
                if now - inst.sent_tick < cfg.retransmit_ticks:
                    continue
                inst.sent_tick = now
                if not inst.committed and inst.commands is not None and inst.acks is not None:
                    msg = CAccept(self.id, self.view, self.id, index, inst.ballot, inst.commands)
                    for p in self._near:
                        if p not in inst.acks:
                            self._messages.append((p, msg))
                    self.stats.retransmissions += 1
                if index >= self._own_safe_count:
                    need_order = index
            if need_order >= 0:
                if self.is_sequencer:
                    self._resend_own_o_accepts()
                else:
                    self._send_c_request(need_order)
        # Sequencer: lazily push the assignment log to peers that are behind.
        if self.is_sequencer and now - self._o_lazy_tick >= cfg.retransmit_ticks // 3 + 1:
            self._o_lazy_tick = now
            end = len(self._o_owner)
            for p in self._near:
                if self._o_sent_upto[p] < end:
                    self._o_resend.add(p)
        # Learner: execution stalled while we know there is more to execute.
        if self._exec_stalled() and now - self._exec_progress_tick >= cfg.learn_ticks:
            self._exec_progress_tick = now
            self._send_learn_request()

    def ready(self) -> Ready:
        """Run deferred work and hand over the effects batch (see :mod:`~sdpaxos.core.ready`)."""
        if self._proposals:
            self._start_c_instances()
        if self.is_sequencer and (self._seq_want or self._o_resend):
            self._allocate()
        if self._o_acked_dirty:
            self._advance_safe_prefix()
        if self._exec_dirty:
            self._execute()
        if self._o_commit_out:
            self._broadcast_o_commit()
        rd = Ready(self._persist, self._messages, self._replies, self._executed)
        self._persist = []
        self._messages = []
        self._replies = []
        self._executed = []
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
            "next_c_index": self._next_index,
            "inflight": len(self._inflight),
            "queued": len(self._proposals),
            "o_log_len": len(self._o_owner),
            "o_known_upto": self._o_known_upto,
            "o_safe_upto": self._o_safe_upto,
            "executed_slots": self._exec_slot,
            "executed_per_owner": list(self._exec_count),
            "near": list(self._near),
        }

    @property
    def executed_upto(self) -> Slot:
        """Every slot below this has been executed here."""
        return self._exec_slot

    # ------------------------------------------------------ command leader

    def _start_c_instances(self) -> None:
        """Pack queued proposals into new C-instances (batching) and send C-accepts."""
        cfg = self.config
        proposals = self._proposals
        batch_max = cfg.c_batch_max
        while proposals and len(self._inflight) < cfg.c_inflight_max:
            if len(proposals) <= batch_max:
                commands = tuple(proposals)
                proposals.clear()
            else:
                commands = tuple(proposals.popleft() for _ in range(batch_max))
            index = self._next_index
            self._next_index = index + 1
            inst = _CInstance()
            inst.promised = inst.ballot = self._own_ballot
            inst.commands = commands
            inst.acks = {self.id}
            inst.sent_tick = self._now
            self._c[self.id][index] = inst
            self._inflight[index] = inst
            self._persist.append(CAccepted(self.id, index, inst.ballot, commands))
            self.stats.c_instances_started += 1
            self._trace("Propose", index=index, commands=len(commands))
            msg = CAccept(self.id, self.view, self.id, index, inst.ballot, commands)
            for p in self._c_quorum:
                self._messages.append((p, msg))
            if self.is_sequencer:
                self._want(self.id, index)
            elif self.sequencer not in self._c_quorum:
                self._send_c_request(index)
            if len(inst.acks) >= self._majority:
                self._commit_own_c(index, inst)

    def _send_c_request(self, index: int) -> None:
        msg = CRequest(self.id, self.view, self.id, index, self._o_known_upto)
        self._messages.append((self.sequencer, msg))

    def _handle_c_ack(self, m: CAck) -> None:
        if m.owner != self.id:
            raise PeerMessageError(f"C-ACK for C-instance of {m.owner} sent to {self.id}")
        inst = self._c[self.id].get(m.index)
        if inst is None:
            raise PeerMessageError(f"C-ACK for unknown C-instance {m.index}")
        if inst.acks is None or m.ballot != inst.ballot or inst.committed:
            return  # late or stale acknowledgement: harmless
        inst.acks.add(m.src)
        self._trace("HandleCAck", index=m.index, src=m.src)
        if len(inst.acks) >= self._majority:
            self._commit_own_c(m.index, inst)

    def _commit_own_c(self, index: int, inst: _CInstance) -> None:
        """C-instance ``index`` is chosen: broadcast the C-commit (Fig. 5 line 10)."""
        inst.committed = True
        acks = inst.acks or set()
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
        self._trace("CommitC", owner=self.id, index=index)
        self._exec_dirty = True
        if index < self._own_safe_count and index in self._inflight:
            self._make_ready(index, inst)

    def _make_ready(self, index: int, inst: _CInstance) -> None:
        """Both instances are settled: answer the clients waiting for "ready"."""
        del self._inflight[index]
        commands = inst.commands or ()
        self.stats.commands_ready += len(commands)
        self._trace("Ready", index=index, commands=len(commands))
        waiters = self._exec_waiters
        replies = self._replies
        for cmd in commands:
            if not waiters or (cmd.client_id, cmd.seq) not in waiters:
                replies.append(Reply(cmd.client_id, cmd.seq, ReplyKind.READY))

    # ------------------------------------------------------------ acceptor

    def _handle_c_accept(self, m: CAccept) -> None:
        owner, index = m.owner, m.index
        self._check_c_instance(owner, index)
        if type(m.ballot) is not int or m.ballot < 0:
            raise PeerMessageError(f"bad ballot {m.ballot!r}")
        if not isinstance(m.commands, tuple) or len(m.commands) > self.config.c_batch_max:
            raise PeerMessageError("C-accept carries too many commands")
        log = self._c[owner]
        inst = log.get(index)
        if inst is None:
            inst = log[index] = _CInstance()
        if m.ballot < inst.promised:
            self._trace("Reject", reason="stale ballot", owner=owner, index=index)
            return
        if inst.ballot != m.ballot or inst.commands != m.commands:
            inst.promised = inst.ballot = m.ballot
            inst.commands = m.commands
            self._persist.append(CAccepted(owner, index, m.ballot, m.commands))
        self._trace("HandleCAccept", owner=owner, index=index, ballot=m.ballot)
        self._messages.append((m.src, CAck(self.id, self.view, owner, index, m.ballot)))
        if self.is_sequencer and m.src == owner:
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
        self._trace("HandleCCommit", owner=owner, index=index)
        self._exec_dirty = True

    def _handle_o_accept(self, m: OAccept) -> None:
        if m.src != self.sequencer:
            raise PeerMessageError(f"O-accept from {m.src}, not the sequencer {self.sequencer}")
        start, values = m.start, m.values
        if type(start) is not int or start < 0:
            raise PeerMessageError(f"bad O-accept start {start!r}")
        if not isinstance(values, tuple) or len(values) > self.config.o_accept_values_max:
            raise PeerMessageError("O-accept carries too many values")
        for value in values:
            self._check_o_value(value)
        end = start + len(values)
        view = self.view
        owners, counts, ballots, committed = (
            self._o_owner,
            self._o_count,
            self._o_ballot,
            self._o_committed,
        )
        # Validate the whole range before touching anything: within one view the
        # sequencer proposes one value per slot, so a different value for a slot
        # already settled here is a broken peer, and must change nothing.
        for s in range(start, min(end, len(owners))):
            owner, count = values[s - start]
            if (committed[s] or ballots[s] == view) and (owners[s] != owner or counts[s] != count):
                raise PeerMessageError(
                    f"slot {s} already holds {owners[s], counts[s]} in view {view}, "
                    f"O-accept says {owner, count}"
                )
        self._o_ensure(end)
        changed = False
        seq_slots = False
        seq = self.sequencer
        for k, (owner, count) in enumerate(values):
            s = start + k
            if owner == seq:
                seq_slots = True
            if committed[s] or ballots[s] == view:
                continue
            owners[s] = owner
            counts[s] = count
            ballots[s] = view
            changed = True
        if changed:
            self._persist.append(OAccepted(view, start, values))
        self._trace("HandleOAccept", start=start, count=len(values))
        if end > self._o_heard_upto:
            self._o_heard_upto = end
        self._advance_known()
        acked = self._o_acked
        if end > acked[seq]:
            acked[seq] = end
        self._o_acked_dirty = True
        if seq_slots or (self._n >= 7 and values):
            ack = OAck(self.id, view, self._o_known_upto)
            self._messages.append((seq, ack))
            if self._n >= 7:
                for owner in sorted({o for o, _ in values if o not in (seq, self.id, NO_CL)}):
                    self._messages.append((owner, ack))

    def _advance_known(self) -> None:
        """Extend the prefix of slots accepted in this view or known committed."""
        k = self._o_known_upto
        ballots, committed, view = self._o_ballot, self._o_committed, self.view
        limit = len(ballots)
        while k < limit and (ballots[k] == view or committed[k]):
            k += 1
        self._o_known_upto = k
        self._o_acked[self.id] = k if not self.is_sequencer else len(self._o_owner)

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
        if type(upto) is not int or not 0 <= upto <= len(self._o_owner):
            raise PeerMessageError(f"bad o_accepted_upto {upto!r}")
        self._trace("HandleCRequest", owner=m.owner, index=m.index)
        if m.index < self._seq_covered[m.owner]:
            # Already ordered: a retransmission. Resend what the owner lacks.
            if upto < self._o_sent_upto[m.owner]:
                self._o_sent_upto[m.owner] = upto
            self._o_resend.add(m.owner)
        else:
            self._want(m.owner, m.index)

    def _allocate(self) -> None:
        """Turn pending wants into O-instances and send O-accepts (Fig. 5 lines 12-15)."""
        cfg = self.config
        start = len(self._o_owner)
        owners, counts = self._o_owner, self._o_count
        covered = self._seq_covered
        new_owners: set[ReplicaId] = set()
        for owner, want in self._seq_want.items():
            batch_max = 1 if (self._n == 5 and owner != self.id) else cfg.o_batch_max
            while covered[owner] < want:
                count = min(want - covered[owner], batch_max)
                owners.append(owner)
                counts.append(count)
                covered[owner] += count
            new_owners.add(owner)
        self._seq_want.clear()
        end = len(owners)
        if end > start:
            grow = end - start
            self._o_ballot.extend([self.view] * grow)
            self._o_committed.extend([False] * grow)
            values = tuple(zip(owners[start:end], counts[start:end], strict=True))
            self._persist.append(OAccepted(self.view, start, values))
            self.stats.o_instances_allocated += grow
            self._trace("AllocateO", start=start, values=values)
            self._o_known_upto = self._o_heard_upto = end
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

    def _send_o_accepts(self, peer: ReplicaId) -> None:
        """Send ``peer`` every O-instance it has not been sent (prefix piggy-backing)."""
        end = len(self._o_owner)
        sent = self._o_sent_upto[peer]
        chunk = self.config.o_accept_values_max
        owners, counts = self._o_owner, self._o_count
        while sent < end:
            stop = min(end, sent + chunk)
            values = tuple(zip(owners[sent:stop], counts[sent:stop], strict=True))
            self._messages.append((peer, OAccept(self.id, self.view, sent, values)))
            sent = stop
        self._o_sent_upto[peer] = sent

    def _resend_own_o_accepts(self) -> None:
        """The sequencer's own O-instances lack a quorum: resend from each peer's ack."""
        for p in self._near:
            if self._o_acked[p] < len(self._o_owner):
                self._o_sent_upto[p] = min(self._o_sent_upto[p], self._o_acked[p])
                self._o_resend.add(p)
        self.stats.retransmissions += 1

    def _handle_o_ack(self, m: OAck) -> None:
        upto = m.upto
        if type(upto) is not int or not 0 <= upto <= len(self._o_owner):
            raise PeerMessageError(f"O-ACK upto {upto!r} beyond the known log")
        self._trace("HandleOAck", src=m.src, upto=upto)
        if upto > self._o_acked[m.src]:
            self._o_acked[m.src] = upto
            self._o_acked_dirty = True
        if self.is_sequencer and upto > self._o_sent_upto[m.src]:
            self._o_sent_upto[m.src] = upto

    # ------------------------------------------------------------- learner

    def _advance_safe_prefix(self) -> None:
        """Commit own O-instances in the safe prefix and make C-instances ready."""
        self._o_acked_dirty = False
        acked = self._o_acked
        if self._n == 5 and not self.is_sequencer:
            # Fig. 5 line 30: accepted by this replica itself and by the sequencer.
            safe = min(acked[self.id], acked[self.sequencer])
        else:
            safe = sorted(acked, reverse=True)[self._majority - 1]
        if safe <= self._o_safe_upto:
            return
        self._o_safe_upto = safe
        me = self.id
        owners, counts, committed = self._o_owner, self._o_count, self._o_committed
        before = self._own_safe_count
        own = before
        out = self._o_commit_out
        for s in range(self._own_scan, safe):
            if owners[s] == me:
                own += counts[s]
                if not committed[s]:
                    committed[s] = True
                    out.append((s, me, counts[s]))
        self._own_scan = safe
        if own == before:
            return
        self._own_safe_count = own
        self._exec_dirty = True
        self._trace("CommitO", upto=safe, own=own)
        inflight = self._inflight
        for index in range(before, own):
            inst = inflight.get(index)
            if inst is not None and inst.committed:
                self._make_ready(index, inst)

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
        top = 0
        for entry in entries:
            if not isinstance(entry, tuple) or len(entry) != 3:
                raise PeerMessageError(f"bad O-commit entry {entry!r}")
            slot, owner, count = entry
            if type(slot) is not int or slot < 0:
                raise PeerMessageError(f"bad O-commit slot {slot!r}")
            self._check_o_value((owner, count))
            top = max(top, slot + 1)
        owners, counts, committed = self._o_owner, self._o_count, self._o_committed
        known = len(owners)
        for slot, owner, count in entries:
            if (
                slot < known
                and committed[slot]
                and (owners[slot] != owner or counts[slot] != count)
            ):
                raise PeerMessageError(
                    f"slot {slot} committed as {owners[slot], counts[slot]}, "
                    f"{m.src} says {owner, count}"
                )
        self._o_ensure(top)
        for slot, owner, count in entries:
            if committed[slot]:
                continue
            owners[slot] = owner
            counts[slot] = count
            committed[slot] = True
        if top > self._o_heard_upto:
            self._o_heard_upto = top
        self._trace("HandleOCommit", src=m.src, entries=len(entries))
        self._advance_known()
        self._exec_dirty = True

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
                            self._exec_progress_tick = self._now
                        return
                    self._apply(slot, owner, k, inst.commands or ())
                    exec_count[owner] = k + 1
                    in_slot += 1
            slot += 1
            in_slot = 0
        self._exec_slot, self._exec_in_slot = slot, in_slot
        if slot != start_slot:
            self._exec_progress_tick = self._now

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

    def _exec_stalled(self) -> bool:
        """Is there something we know of that we have not executed?"""
        return self._exec_slot < self._o_heard_upto

    def _send_learn_request(self) -> None:
        slot = self._exec_slot
        wanted: tuple[tuple[ReplicaId, int], ...] = ()
        if slot < len(self._o_owner) and self._o_committed[slot]:
            owner = self._o_owner[slot]
            if owner != NO_CL:
                wanted = ((owner, self._exec_count[owner]),)
        msg = LearnRequest(self.id, self.view, slot, wanted)
        for p in self._near:
            self._messages.append((p, msg))
        self.stats.learn_requests += 1
        self._trace("LearnRequest", o_from=slot, c_wanted=wanted)

    def _handle_learn_request(self, m: LearnRequest) -> None:
        o_from = m.o_from
        if type(o_from) is not int or o_from < -1:
            raise PeerMessageError(f"bad o_from {o_from!r}")
        if not isinstance(m.c_wanted, tuple) or len(m.c_wanted) > self._n * 4:
            raise PeerMessageError("LearnRequest asks for too many C-instances")
        for item in m.c_wanted:
            if not isinstance(item, tuple) or len(item) != 2:
                raise PeerMessageError(f"bad c_wanted item {item!r}")
            self._check_c_instance(*item)
        if o_from >= 0:
            stop = min(len(self._o_owner), o_from + self.config.learn_o_max)
            owners, counts, committed = self._o_owner, self._o_count, self._o_committed
            entries = tuple((s, owners[s], counts[s]) for s in range(o_from, stop) if committed[s])
            if entries:
                self._messages.append((m.src, OCommit(self.id, self.view, entries)))
        for owner, index in m.c_wanted:
            inst = self._c[owner].get(index)
            if inst is not None and inst.committed:
                msg = CCommit(self.id, self.view, owner, index, inst.ballot, inst.commands)
                self._messages.append((m.src, msg))

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
            self._c_quorum = tuple(self._near[: self._majority - 1])
        else:
            self._c_quorum = tuple(self._near)

    def _trace(self, event: str, **fields: Any) -> None:
        if self._tracer is not None:
            self._tracer(event, self.id, fields)
