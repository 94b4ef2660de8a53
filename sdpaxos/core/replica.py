"""Replica: one SDPaxos replica as a pure state machine, composed of its roles.

Every replica plays every role at once (paper section 3); each role is a module
with its own state, and this facade composes them:

============================  =====================================================
:mod:`~.command_leader`       its own C-instances: propose, batch, C-accept, ready
:mod:`~.acceptor`             everyone's C-instances and the sequencer's O-accepts
:mod:`~.sequencer`            (one per view) allocation, heartbeats, history table
:mod:`~.learner`              the safe prefix, O-commits, learn requests
:mod:`~.executor`             runs committed slots in the global order
:mod:`~.election`             failure detection, votes, view change, the lease
:mod:`~.recovery`             Paxos on C-instances of a silent owner
:mod:`~.reads`                linearizable reads off the log (section 3.5)
:mod:`~.straggler`            straggler detection and hand-over (section 4)
:mod:`~.snapshots`            compaction, snapshot transfer and install
:mod:`~.restore`              restart from durable records
============================  =====================================================

They share the pieces in :mod:`~.context` (logs, outbox, views, proximity,
execution progress) and never import one another: a consequence in another role
is a call on :class:`~.reactions.Reactions`, which :class:`_Router` routes.

:meth:`Replica.step` validates a message (:mod:`~.validate`) before anything
changes, then routes it by view (older: answered as stale; newer: held off;
a sequencer message of a view not yet established: ask for its range) and
hands it to its role. :meth:`Replica.tick` fans out to the roles' timers;
:meth:`Replica.ready` runs deferred work and hands over the effects batch.
Time comes from the driver (``now_ms``); randomness from the given ``rng``.
``docs/protocol.md`` states the rules; ``tla/README.md`` maps each TLA+ action
to its handler and trace event.
"""

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdpaxos.core import validate
from sdpaxos.core.acceptor import Acceptor
from sdpaxos.core.app import StateMachine, Tracer
from sdpaxos.core.clog import CInstance
from sdpaxos.core.command_leader import CommandLeader
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.context import Context, Stats
from sdpaxos.core.election import Election
from sdpaxos.core.errors import LocalProtocolError, Overloaded, PeerMessageError
from sdpaxos.core.executor import Executor
from sdpaxos.core.learner import Learner
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
    RReplyBatch,
    RRequest,
    RRequestBatch,
    SequencerHandover,
    SnapshotChunk,
    SnapshotRequest,
    StragglerPoll,
    StragglerVote,
    Vote,
    VRequest,
)
from sdpaxos.core.olog import NOT_ESTABLISHED
from sdpaxos.core.outbox import Outbox
from sdpaxos.core.reads import Reads
from sdpaxos.core.ready import Ready
from sdpaxos.core.recovery import Recovery
from sdpaxos.core.restore import replay
from sdpaxos.core.sequencer import Sequencer
from sdpaxos.core.snapshots import Snapshots
from sdpaxos.core.storage import Record, Snapshot
from sdpaxos.core.straggler import Straggler
from sdpaxos.core.types import Ballot, CIndex, Command, OValue, ReplicaId, Slot, View, Wait
from sdpaxos.core.views import ViewEvent, ViewPhase

__all__ = ["NOT_ESTABLISHED", "Replica", "StateMachine", "Stats", "Status", "Tracer"]

#: Messages only the sequencer of their view sends.
_SEQUENCER_MESSAGES: frozenset[type] = frozenset({OAccept, Heartbeat, NewView})
#: Messages of an election: their view is the one being elected, not the sender's.
_ELECTION_MESSAGES: frozenset[type] = frozenset({VRequest, Vote})
#: Snapshot transfer: a snapshot holds executed slots, final in every view, and
#: whoever needs one (a candidate still in an old view, say) must get it.
_VIEWLESS_MESSAGES: frozenset[type] = frozenset({SnapshotRequest, SnapshotChunk})
#: ``Wait.EXECUTED`` read once: an enum member read through its class costs
#: more than a module global, and :meth:`Replica.propose` runs per command.
_EXECUTED = Wait.EXECUTED


@dataclass(frozen=True, slots=True)
class Status:
    """Where a replica stands, for humans, tests and the runtime's status page."""

    id: ReplicaId
    view: View
    phase: ViewPhase
    sequencer: ReplicaId | None
    established_view: View
    established_sequencer: ReplicaId
    candidate_view: View | None
    has_lease: bool
    next_c_index: int
    inflight: int
    queued: int
    o_log_len: int
    o_accepted_upto: Slot
    o_safe_upto: Slot
    executed_slots: Slot
    #: Slots below this are executed, at least in part.
    executed_end: Slot
    executed_per_owner: tuple[int, ...]
    near: tuple[ReplicaId, ...]
    suspected: tuple[ReplicaId, ...]
    recovering: tuple[ReplicaId, ...]
    reads_pending: int
    #: Slots below this are compacted (covered by the newest snapshot).
    snapshot_slot: Slot
    #: The majority-executed point heard (compaction never goes past it).
    majority_executed: Slot


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
        records: the durable records of a previous incarnation: the replica
            restarts from exactly these (``docs/recovery.md`` section 5).
        snapshot: the newest durable snapshot of that incarnation, if any
            (``Storage.load_snapshot``): the restart starts from it and replays
            the records above it (section 16.4).
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
        snapshot: Snapshot | None = None,
    ) -> None:
        if not isinstance(config, ClusterConfig):
            raise LocalProtocolError("config must be a ClusterConfig")
        if not 0 <= replica_id < config.replicas:
            raise LocalProtocolError(f"replica_id {replica_id} is not in 0..{config.replicas - 1}")
        self.config = config
        self.id: ReplicaId = replica_id
        out = Outbox(replica_id, tracer)
        #: The pieces every role shares (logs, outbox, views, proximity, progress).
        self.ctx = ctx = Context(
            config, replica_id, rng if rng is not None else random.Random(replica_id), out
        )
        # Time: milliseconds since the first time the driver gave us, so that
        # every "since" can start at 0 whatever clock the driver uses.
        self._clock_origin_ms: float | None = None
        router = _Router(self)
        self.command_leader = CommandLeader(ctx, router)
        self.acceptor = Acceptor(ctx, router)
        self.sequencer_role = Sequencer(ctx, router)
        self.learner = Learner(ctx, router)
        self.executor = Executor(
            ctx, state_machine, self.command_leader.exec_waiters, observe=observe
        )
        self.election = Election(ctx, router)
        self.recovery = Recovery(ctx, router)
        self.reads = Reads(ctx, router)
        self.straggler = Straggler(ctx, router)
        self.snapshots = Snapshots(ctx, router, state_machine)
        #: A view was entered: resend own C-instances at the next ready().
        self.resync_wanted = False
        # propose() runs once per command: the queue and its bound, bound here.
        self._proposals = self.command_leader.proposals
        self._propose_queue_max = config.propose_queue_max
        self._handlers: dict[type, Callable[[Any], None]] = {
            CAccept: self.acceptor.handle_c_accept,
            CAck: self.command_leader.handle_c_ack,
            CCommit: self.acceptor.handle_c_commit,
            CRequest: self.sequencer_role.handle_c_request,
            OAccept: self.acceptor.handle_o_accept,
            OAck: self.sequencer_role.handle_o_ack,
            OCommit: self.learner.handle_o_commit,
            LearnRequest: self.learner.handle_learn_request,
            Heartbeat: self.election.handle_heartbeat,
            LeaseGrant: self.sequencer_role.handle_lease_grant,
            VRequest: self.election.handle_v_request,
            Vote: self.election.handle_vote,
            NewView: self.acceptor.handle_new_view,
            CPrepare: self.acceptor.handle_c_prepare,
            CPromise: self.recovery.handle_c_promise,
            RRequest: self.reads.handle_r_request,
            RReply: self.reads.handle_r_reply,
            StragglerPoll: self.straggler.handle_straggler_poll,
            StragglerVote: self.straggler.handle_straggler_vote,
            SequencerHandover: self.straggler.handle_sequencer_handover,
            SnapshotRequest: self.snapshots.handle_snapshot_request,
            SnapshotChunk: self.snapshots.handle_snapshot_chunk,
            RRequestBatch: self.reads.handle_r_request_batch,
            RReplyBatch: self.reads.handle_r_reply_batch,
        }
        if snapshot is not None:
            self.snapshots.restart_from(snapshot)
        if records or snapshot is not None:
            self._restore(records or [], snapshot)

    # ------------------------------------------------------------------ API

    @property
    def stats(self) -> Stats:
        return self.ctx.stats

    @property
    def view(self) -> View:
        """The promised view: messages of older views are dropped."""
        return self.ctx.views.view

    @property
    def sequencer(self) -> ReplicaId | None:
        """The sequencer of :attr:`view`, or None while this replica has not accepted its range."""
        return self.ctx.views.sequencer

    @property
    def is_sequencer(self) -> bool:
        return self.ctx.views.is_sequencer

    @property
    def executed_upto(self) -> Slot:
        """Every slot below this has been executed here."""
        return self.ctx.progress.slot

    @property
    def proposals_waiting(self) -> int:
        """Proposals queued here and not in a C-instance yet (a driver's backpressure)."""
        return len(self._proposals)

    def has_lease(self) -> bool:
        """Does this replica hold a sequencer lease granted by a majority right now?

        "Now" is the latest time the driver passed in (``tick``, ``step``, ``read``);
        reads and read requests are judged at the time they come with.
        """
        return self.sequencer_role.has_lease()

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None:
        """Queue ``command``; it is answered through :attr:`Ready.replies`.

        With ``wait=Wait.READY`` the reply comes when the command is ready (its
        place in the global order is fixed); with ``Wait.EXECUTED`` when this
        replica has executed it, carrying the state machine's result.

        Raises:
            Overloaded: the proposal queue holds ``propose_queue_max`` commands.
            LocalProtocolError: not a :class:`Command`, or its ``client_id`` is 0
                (no session: :meth:`CommandLeader.forget_below` could not answer
                it, see there).
        """
        if not isinstance(command, Command):
            raise LocalProtocolError(f"propose() takes a Command, got {type(command).__name__}")
        if command.client_id == 0:
            raise LocalProtocolError("client_id 0 has no session: propose under a session")
        proposals = self._proposals
        if len(proposals) >= self._propose_queue_max:
            raise Overloaded(f"{len(proposals)} proposals are already queued")
        proposals.append(command)
        if wait == _EXECUTED:
            self.command_leader.exec_waiters.add((command.client_id, command.seq))

    def request_snapshot(self) -> None:
        """Take a snapshot at the next executed slot boundary (the driver decides
        when, e.g. by the size of its log). It compacts once a majority executed
        that far, and comes out in :attr:`Ready.snapshot`."""
        self.snapshots.requested = True
        self.ctx.progress.dirty = True

    def step(self, message: Message, now_ms: float) -> None:
        """Handle one message from a peer. Never raises for bad peer input.

        ``now_ms``: the driver's monotonic time, read after the message arrived.
        A sequencer answers a read request under its lease only if the lease
        holds at that time, so it must be the time now, not of the last tick: a
        process that was paused learns here that its lease ran out.

        A message is checked in full before anything changes: a refused one is
        counted (``stats.rejected``) and traced (``Reject``) and changes nothing else.
        """
        self._advance_clock(now_ms)
        s = self.ctx
        s.stats.steps += 1
        try:
            self._route(message)(message)
        except PeerMessageError as exc:
            s.stats.rejected += 1
            if exc.alarm:
                s.stats.invariant_alarms += 1
            s.out.trace("Reject", msg=message, reason=str(exc))

    def tick(self, now_ms: float) -> None:
        """Advance time to ``now_ms`` (the driver's monotonic clock) and run timers.

        Timers fire on elapsed time, however late or irregular the calls are.
        """
        self._advance_clock(now_ms)
        s = self.ctx
        now = s.now_ms
        cfg = self.config
        views = s.views
        self.election.tick(now)
        if views.is_sequencer:
            self.sequencer_role.tick(now)
        if views.sequencer is not None and self.command_leader.inflight:
            self.command_leader.retransmit(now)
        self.straggler.tick(now)
        if self.reads.asked:
            self.reads.expire()
        executor = self.executor
        # Learner: execution stalled while we know there is more to execute (and
        # no snapshot is on its way: peers would answer each request with one).
        if (
            executor.stalled()
            and now - executor.progress_ms >= cfg.learn_ms
            and self.snapshots.transfer is None
        ):
            executor.progress_ms = now
            self.learner.send_learn_request()
        blocked = executor.blocked
        if (
            blocked is not None
            and now - executor.blocked_ms >= cfg.recover_ms
            and views.sequencer is not None
            and self.recovery.maybe_start(*blocked)
        ):
            executor.blocked_ms = now
        self.recovery.tick(now)
        self.snapshots.tick(now)

    def ready(self) -> Ready:
        """Run deferred work and hand over the effects batch (see :mod:`~sdpaxos.core.ready`)."""
        s = self.ctx
        views = s.views
        if self.resync_wanted:
            self.resync_wanted = False
            self.command_leader.resync()
        if self.command_leader.proposals and views.sequencer is not None:
            self.command_leader.start_c_instances()
        seq = self.sequencer_role
        if views.is_sequencer and (seq.want_upto or seq.resend):
            seq.allocate()
        if s.olog.acked_dirty:
            self.learner.advance_safe_prefix()
        if s.progress.dirty:
            self.executor.execute()
            if self.reads.slots:
                self.reads.serve()
            self._keep_learning()
            self.snapshots.after_execute()
        if self.learner.commit_out:
            self.learner.broadcast_o_commit()
        if self.reads.queued_ids:
            self.reads.flush()  # after execution: reads of executed slots are served now
        return s.out.take()

    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None:
        """Ask for a linearizable read of ``key`` (paper section 3.5).

        The answer comes in :attr:`Ready.reads`: ``ok`` means every write that
        was ready before this call has been applied here, so the embedder reads
        its state machine directly; not ``ok`` means the read must go through the
        log (propose it as a command). The sequencer answers with the last slot
        it gave a write of ``key`` (its history table), or, while its history is
        young, the whole log (the paper's i_G); it answers only while it holds a
        lease from a majority, judged when it handles the question: the reads
        started before a :meth:`ready` are asked about in one batch by that
        ``ready()`` (at the sequencer itself, answered by it, at the latest time
        the driver gave, never earlier than ``now_ms``).

        Raises:
            LocalProtocolError: ``read_id`` is already waiting.
        """
        self._advance_clock(now_ms)
        self.reads.read(read_id, key)

    def transfer_sequencer(self, target: ReplicaId) -> None:
        """Hand the sequencer role to ``target`` on purpose (e.g. to move it nearer the load).

        The sequencer stops serving reads at once, tells everyone to stop
        honouring its lease, and votes for ``target``, which runs the view change.

        Raises:
            LocalProtocolError: this replica is not the sequencer, or ``target`` is
                not another replica.
        """
        self.straggler.transfer_sequencer(target)

    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None:
        """Feed a measured round trip to ``peer``; thrifty quorums follow proximity."""
        if not 0 <= peer < self.ctx.n or peer == self.id or not rtt_ms >= 0:
            raise LocalProtocolError(f"bad rtt observation {peer!r} {rtt_ms!r}")
        self.ctx.prox.observe(peer, rtt_ms)

    def status(self) -> Status:
        """Where this replica stands (a snapshot; it does not change with the replica)."""
        s = self.ctx
        views = s.views
        candidate = self.election.candidate
        return Status(
            id=self.id,
            view=views.view,
            phase=views.phase,
            sequencer=views.sequencer,
            established_view=views.est_view,
            established_sequencer=views.est_seq,
            candidate_view=candidate.view if candidate is not None else None,
            has_lease=self.has_lease(),
            next_c_index=self.command_leader.next_index,
            inflight=len(self.command_leader.inflight),
            queued=len(self.command_leader.proposals),
            o_log_len=len(s.olog),
            o_accepted_upto=s.olog.acc_upto,
            o_safe_upto=self.learner.safe_upto,
            executed_slots=s.progress.slot,
            executed_end=s.progress.executed_end(),
            executed_per_owner=tuple(s.progress.count),
            near=tuple(s.prox.near),
            suspected=tuple(sorted(s.prox.suspected)),
            recovering=tuple(sorted(self.recovery.runs)),
            reads_pending=len(self.reads.pending),
            snapshot_slot=s.olog.base,
            majority_executed=self.snapshots.majority_executed,
        )

    # ------------------------------------------------------------- internals

    def _route(self, m: Message) -> Callable[[Any], None]:
        """Check ``m`` and say who handles it; note that its sender is alive.

        Nothing changes before every check has passed (``validate``): then the
        sender stops being suspected and a message of the sequencer renews contact.
        """
        s = self.ctx
        views = s.views
        kind = type(m)
        handler = self._handlers.get(kind)
        if handler is None:
            raise PeerMessageError(f"unknown message type {kind.__name__}")
        src = m.src
        if type(src) is not int or not 0 <= src < s.n or src == self.id:
            raise PeerMessageError(f"bad sender {src!r}")
        view = m.view
        if type(view) is not int or view < 0:
            raise PeerMessageError(f"bad view {view!r}")
        route: Callable[[Any], None] = handler
        if kind in _ELECTION_MESSAGES or kind in _VIEWLESS_MESSAGES:
            pass  # they carry the view being elected, or need none
        elif view < views.view:
            route = self._on_stale
        elif kind in _SEQUENCER_MESSAGES:
            if view > views.view or views.est_view != view:
                # Only the view's range (a range O-accept, or its NewView) establishes it.
                if not (kind is NewView or (isinstance(m, OAccept) and m.rebuilt is True)):
                    route = self.election.from_unestablished_view
            elif src != views.sequencer:
                raise PeerMessageError(f"{src} acts as sequencer of view {view}")
        elif view > views.view:
            route = self.election.from_future_view
        if route is handler:
            validate.CHECKS[kind](s, m)  # every handled type has a check (tested)
            if kind is CPromise:
                self.recovery.check_promise(m)  # type: ignore[arg-type]
        s.prox.heard_from(src)
        if src == views.sequencer and view == views.view:
            self.election.seq_contact_ms = s.now_ms
        return route

    def _keep_learning(self) -> None:
        """Catching up goes at the pace of answers: a LearnRequest that asked for
        a full batch (``learn_c_max`` C-instances, so more is missing) and whose
        answers let execution pass the last C-instance it asked for, within
        ``learn_ms``, is followed at once by the next one. Without this, a
        replica far behind learned at most ``learn_c_max`` C-instances per
        ``learn_ms`` after each step of progress, and could take minutes (found
        by the long sweep, N = 7, seed 501075, with ``learn_c_max`` = 4). A
        replica that only stalled briefly asks for fewer, so ordinary commits
        arriving after its request start no chain.

        The next request waits for the end of the batch, not for any progress:
        each C-commit of an answer moves execution, and a request per step asked
        every peer again for nearly the same batch, so catching up on K commands
        cost about K x ``learn_c_max`` x peers C-commits (fuzz N = 5, seed 278:
        349,350 in one instant for 698 commands at two restarted replicas)."""
        executor, learner = self.executor, self.learner
        progress = self.ctx.progress
        now = self.ctx.now_ms
        if (
            learner.asked_full
            and now - learner.asked_ms < self.config.learn_ms
            and (progress.slot, progress.in_slot) >= learner.asked_upto
            and executor.stalled()
        ):
            executor.progress_ms = now
            learner.send_learn_request()

    def _on_stale(self, m: Message) -> None:
        """A message from an older view. The sequencer tells the sender where we are;
        a replica stuck above a live sequencer's view tells that sequencer."""
        s = self.ctx
        views = s.views
        s.stats.stale += 1
        s.out.trace("Stale", msg=m)
        if type(m) is Heartbeat and views.sequencer is None:
            s.out.send(m.src, LearnRequest(self.id, views.view, Slot(-1), ()))
        if views.is_sequencer:
            s.out.send(m.src, self.sequencer_role.current_heartbeat())
            if views.new_view is not None:
                s.out.send(m.src, views.new_view)

    def _advance_clock(self, now_ms: float) -> None:
        if type(now_ms) not in (int, float) or not math.isfinite(now_ms):
            raise LocalProtocolError(f"now_ms must be a finite number, got {now_ms!r}")
        if self._clock_origin_ms is None:
            self._clock_origin_ms = now_ms
        now = now_ms - self._clock_origin_ms
        if now > self.ctx.now_ms:  # monotonic, whatever the driver passes
            self.ctx.now_ms = now

    def _reset_learner(self) -> None:
        self.learner.reset()
        self.sequencer_role.acked_before = list(self.ctx.olog.acked)

    def _restore(self, records: list[Record], snapshot: Snapshot | None) -> None:
        """Rebuild from durable records after a crash (Ongaro's Restart: keep only
        these), above the newest snapshot if there is one."""
        s = self.ctx
        me = self.id
        views, olog = s.views, s.olog
        leader = self.command_leader
        rp = replay(records, me, leader.own_ballot, self.config.sequencer, s.clog, olog)
        leader.next_index = rp.next_index
        if snapshot is not None:
            leader.next_index = max(leader.next_index, snapshot.next_index)
        views.view = rp.promised
        views.est_view, views.est_seq = rp.est_view, rp.est_seq
        views.est_start, views.est_base = rp.est_start, rp.est_base
        views.range_committed = False
        if rp.est_view == rp.promised and rp.est_seq != me:
            views.move(ViewEvent.RESTART_FOLLOWING)
            olog.acc_upto = rp.est_base
            olog.acc_upto = olog.accepted_run_end(rp.promised)
        else:
            # Voted in a view we never established, or we were its sequencer:
            # every allocation we sent is durable (OAccepted is persisted before
            # the O-accepts leave), but the rest of a sequencer's state is
            # volatile (the allocation guard's wants, what each peer was sent and
            # acknowledged, whether the range is chosen, the history table reads
            # rely on, its lease). A view change rebuilds what matters from
            # durable votes (docs/recovery.md section 5).
            views.move(ViewEvent.RESTART_PROMISED)
            olog.acc_upto = NOT_ESTABLISHED
        olog.heard_upto = Slot(len(olog))
        olog.known_upto = max(olog.known_upto, olog.base)
        # Our last c_inflight_max C-instances may not have been ready: drive them
        # again (older ones were ready before we could start these).
        log = s.clog.logs[me]
        first = max(0, leader.next_index - self.config.c_inflight_max)
        for i in range(max(first, s.clog.floor[me]), leader.next_index):
            index = CIndex(i)
            inst = log.get(index)
            if inst is not None and inst.commands is not None and inst.ballot == leader.own_ballot:
                inst.acks = {me}
                inst.sent_ms = -self.config.retransmit_ms
                leader.inflight[index] = inst.commands
        # We may have granted a lease just before the crash: honour it (our clock
        # starts at 0 with the first time the driver gives us).
        self.election.lease_until_ms = self.config.lease_ms
        self._reset_learner()
        s.out.trace("Restart", view=rp.promised, sequencer=views.sequencer, records=len(records))


class _Router:
    """The facade's side of :class:`~sdpaxos.core.reactions.Reactions`: each
    cross-role call, routed to the role that owns its effect."""

    __slots__ = ("_r",)

    def __init__(self, replica: Replica) -> None:
        self._r = replica

    # -- to the command leader
    def own_c_chosen(self, index: CIndex, inst: CInstance) -> None:
        self._r.command_leader.committed(index, inst)

    def own_ordered(self, before: int, upto: int) -> None:
        self._r.command_leader.ordered(before, upto)

    def resync_later(self) -> None:
        self._r.resync_wanted = True

    def resync_toward(self, candidate: ReplicaId) -> None:
        self._r.command_leader.resync_toward(candidate)

    def next_c_index(self) -> CIndex:
        return self._r.command_leader.next_index

    def oldest_unordered_started_ms(self) -> float | None:
        return self._r.command_leader.oldest_unordered_started_ms()

    # -- to the acceptor and the election
    def establish(
        self, view: View, sequencer: ReplicaId, start: Slot, values: tuple[OValue, ...]
    ) -> None:
        self._r.election.establish(view, sequencer, start, values)

    def accepted_run_grew(self) -> None:
        self._r.acceptor.advance_acc()

    def promise_c(self, owner: ReplicaId, start: CIndex, end: CIndex, ballot: Ballot) -> CPromise:
        return self._r.acceptor.promise_c(owner, start, end, ballot)

    # -- to the sequencer
    def order_c_instance(
        self, owner: ReplicaId, index: CIndex, commands: tuple[Command, ...] | None
    ) -> None:
        self._r.sequencer_role.order_commands(owner, index, commands)

    def resend_own_o_accepts(self) -> None:
        self._r.sequencer_role.resend_own_o_accepts()

    def majority_accepted(self, upto: Slot) -> None:
        seq = self._r.sequencer_role
        if seq.rebuild is not None and upto >= seq.rebuild[1]:
            seq.commit_rebuilt_range()

    def won(self, start: Slot, end: Slot) -> None:
        self._r.sequencer_role.start_view(start, end)
        self._r.reads.fail_unanswered()

    def followed(self, sequencer: ReplicaId) -> None:
        self._r.sequencer_role.stop_view()

    def resend_to_all(self) -> None:
        self._r.sequencer_role.resend.update(self._r.ctx.prox.near)

    def send_heartbeats(self) -> None:
        self._r.sequencer_role.send_heartbeats()

    def stale(self, m: Message) -> None:
        self._r._on_stale(m)

    def has_lease(self) -> bool:
        return self._r.sequencer_role.has_lease()

    def read_slots(self, keys: tuple[bytes, ...]) -> tuple[Slot, ...]:
        return self._r.sequencer_role.read_slots(keys)

    def rebuilding(self) -> bool:
        return self._r.sequencer_role.rebuild is not None

    def release_lease(self) -> None:
        self._r.sequencer_role.lease_valid_until_ms = -math.inf
        self._r.election.lease_until_ms = self._r.ctx.now_ms

    # -- to the learner, reads and the election
    def reset_learner(self) -> None:
        self._r._reset_learner()

    def left_view(self) -> None:
        self._r.sequencer_role.rebuild = None
        self._r.reads.fail_unanswered()

    def lease_released(self) -> None:
        self._r.election.lease_until_ms = self._r.ctx.now_ms

    def running_for_view(self) -> bool:
        return self._r.election.candidate is not None

    def start_view_change(self) -> None:
        self._r.election.start_view_change()

    # -- to recovery
    def recovered_c_chosen(self, owner: ReplicaId, index: CIndex, inst: CInstance) -> None:
        self._r.recovery.chosen(owner, index, inst)

    # -- to snapshots, and from them to everyone
    def heard_majority_executed(self, slot: Slot) -> None:
        self._r.snapshots.heard_majority_executed(slot)

    def offer_snapshot(self, dst: ReplicaId) -> None:
        self._r.snapshots.offer(dst)

    def ask_snapshot(self, src: ReplicaId) -> None:
        self._r.snapshots.ask(src)

    def dump_sessions(self) -> tuple[Any, ...]:
        return self._r.executor.dump_sessions()

    def load_sessions(self, sessions: tuple[Any, ...]) -> None:
        self._r.executor.load_sessions(sessions)

    def compacted(self, snapshot: Snapshot) -> None:
        r = self._r
        r.command_leader.forget_below(snapshot.executed[r.id])
        runs = r.recovery.runs
        for owner in [o for o, run in runs.items() if run.start < snapshot.executed[o]]:
            del runs[owner]
        c = r.election.candidate
        if c is not None and c.o_from < snapshot.slot:
            # Our candidacy reports from below what we are about to forget: run
            # again from the new executed prefix (the election timer restarts it).
            r.ctx.out.trace("AbandonViewChange", view=c.view)
            r.election.candidate = None

    def installed(self, snapshot: Snapshot) -> None:
        r = self._r
        r.command_leader.next_index = max(r.command_leader.next_index, snapshot.next_index)
        r.executor.blocked = None
        r.executor.progress_ms = r.ctx.now_ms

    def skip_learner(self, slot: Slot) -> None:
        self._r.learner.skip_to(slot)
