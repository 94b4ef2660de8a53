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
is a call on :class:`~.reactions.Reactions`, which :class:`~.router.Router` routes.

:meth:`Replica.step` validates a message (:mod:`~.validate`) before anything
changes, then routes it by view (older: answered as stale; newer: held off;
a sequencer message of a view not yet established: ask for its range) and
hands it to its role. :meth:`Replica.tick` fans out to the roles' timers;
:meth:`Replica.ready` runs deferred work and hands over the effects batch.
Time comes from the driver (``now_ms``); randomness from the given ``rng``.
``docs/protocol.md`` states the rules; ``tla/README.md`` maps each TLA+ action
to its handler and trace event.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sdpaxos.core import validate
from sdpaxos.core.acceptor import Acceptor
from sdpaxos.core.app import StateMachine, Tracer
from sdpaxos.core.command_leader import CommandLeader
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.context import Context, Stats
from sdpaxos.core.election import Election
from sdpaxos.core.errors import LocalProtocolError, PeerMessageError
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
from sdpaxos.core.restore import replay, resume
from sdpaxos.core.router import Router
from sdpaxos.core.sequencer import Sequencer
from sdpaxos.core.snapshots import Snapshots
from sdpaxos.core.storage import Record, Snapshot
from sdpaxos.core.straggler import Straggler
from sdpaxos.core.types import Command, ReplicaId, Slot, View, Wait
from sdpaxos.core.views import ViewPhase

__all__ = ["NOT_ESTABLISHED", "Replica", "StateMachine", "Stats", "Status", "Tracer"]

#: Messages only the sequencer of their view sends.
_SEQUENCER_MESSAGES: frozenset[type] = frozenset({OAccept, Heartbeat, NewView})
#: Messages of an election: their view is the one being elected, not the sender's.
_ELECTION_MESSAGES: frozenset[type] = frozenset({VRequest, Vote})
#: Snapshot transfer: a snapshot holds executed slots, final in every view, and
#: whoever needs one (a candidate still in an old view, say) must get it.
_VIEWLESS_MESSAGES: frozenset[type] = frozenset({SnapshotRequest, SnapshotChunk})


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
        slot_offset: the global slot of this replica's slot 0: an epoch of a
            changing membership numbers its slots from 0 (``docs/membership.md``);
            sessions and :attr:`Ready.executed` see global slots.
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
        slot_offset: int = 0,
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
        router = Router()
        self.command_leader = CommandLeader(ctx, router)
        self.acceptor = Acceptor(ctx, router)
        self.sequencer_role = Sequencer(ctx, router)
        self.learner = Learner(ctx, router)
        waiters = self.command_leader.exec_waiters
        self.executor = Executor(ctx, state_machine, waiters, observe=observe, offset=slot_offset)
        self.election = Election(ctx, router)
        self.recovery = Recovery(ctx, router)
        self.reads = Reads(ctx, router)
        self.straggler = Straggler(ctx, router)
        self.snapshots = Snapshots(ctx, router, state_machine)
        router.bind(
            self.command_leader,
            self.acceptor,
            self.sequencer_role,
            self.learner,
            self.executor,
            self.election,
            self.recovery,
            self.reads,
            self.straggler,
            self.snapshots,
        )
        #: The roles' port to one another (what :meth:`_restore` resets through).
        self._router = router
        # propose() runs once per command: the command leader's queue, bound here.
        self._queue = self.command_leader.propose
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
        return len(self.command_leader.proposals)

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
        self._queue(command, wait)

    def request_snapshot(self) -> None:
        """Take a snapshot at the next executed slot boundary (the driver decides
        when, e.g. by the size of its log). It compacts once a majority executed
        that far, and comes out in :attr:`Ready.snapshot`."""
        self.snapshots.request()

    def step(self, message: Message, now_ms: float) -> None:
        """Handle one message from a peer. Never raises for bad peer input.

        ``now_ms``: the driver's monotonic time, read after the message arrived.
        A sequencer answers a read request under its lease only if the lease
        holds at that time, so it must be the time now, not of the last tick: a
        process that was paused learns here that its lease ran out.

        A message is checked in full before anything changes: a refused one is
        counted (``stats.rejected``) and traced (``Reject``) and changes nothing else.
        """
        self.ctx.advance_clock(now_ms)
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
        self.ctx.advance_clock(now_ms)
        now = self.ctx.now_ms
        views = self.ctx.views
        self.election.tick(now)
        if views.is_sequencer:
            self.sequencer_role.tick(now)
        if views.sequencer is not None and self.command_leader.inflight:
            self.command_leader.retransmit(now)
        self.straggler.tick(now)
        if self.reads.asked:
            self.reads.expire()
        self.learner.tick(now)
        self.recovery.tick(now)
        self.snapshots.tick(now)

    def ready(self) -> Ready:
        """Run deferred work and hand over the effects batch (see :mod:`~sdpaxos.core.ready`)."""
        s = self.ctx
        views = s.views
        leader = self.command_leader
        if leader.resync_wanted:
            leader.resync()
        if leader.proposals and views.sequencer is not None:
            leader.start_c_instances()
        seq = self.sequencer_role
        if views.is_sequencer and (seq.want_upto or seq.resend or seq.stop_due()):
            seq.allocate()
        if s.olog.acked_dirty:
            self.learner.advance_safe_prefix()
        if s.progress.dirty:
            self.executor.execute()
            if self.reads.slots:
                self.reads.serve()
            self.learner.keep_learning()
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
        self.ctx.advance_clock(now_ms)
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
            route = self.election.from_stale_view
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
            self.election.heard_from_sequencer()
        return route

    def _restore(self, records: list[Record], snapshot: Snapshot | None) -> None:
        """Rebuild from durable records after a crash (Ongaro's Restart: keep only
        these), above the newest snapshot if there is one (``docs/recovery.md``
        sections 5 and 16.4)."""
        s = self.ctx
        leader = self.command_leader
        rp = replay(records, self.id, leader.own_ballot, self.config.sequencer, s.clog, s.olog)
        resume(rp, self.id, s.views, s.olog)
        leader.restart(
            rp.next_index if snapshot is None else max(rp.next_index, snapshot.next_index)
        )
        self.election.restarted()
        self._router.reset_learner()
        s.out.trace("Restart", view=rp.promised, sequencer=s.views.sequencer, records=len(records))
