"""The router: the one implementation of :class:`~sdpaxos.core.reactions.Reactions`.

Roles never hold one another. :class:`~sdpaxos.core.replica.Replica` builds one
:class:`Router`, gives it to every role as that role's Reactions port, and binds
it to the roles once they all exist (:meth:`Router.bind`). Each method routes
one cross-role call to the role, or roles, whose state the effect is in, and
does nothing else: what happens, and when, is each role's own rule. That is why
this module holds no condition and writes no role's field (``lint-imports``
keeps the roles from importing it, or one another).
"""

from typing import Any

from sdpaxos.core.acceptor import Acceptor
from sdpaxos.core.clog import CInstance
from sdpaxos.core.command_leader import CommandLeader
from sdpaxos.core.election import Election
from sdpaxos.core.executor import Executor
from sdpaxos.core.learner import Learner
from sdpaxos.core.messages import CPromise
from sdpaxos.core.reads import Reads
from sdpaxos.core.recovery import Recovery
from sdpaxos.core.sequencer import Sequencer
from sdpaxos.core.snapshots import Snapshots
from sdpaxos.core.storage import Snapshot
from sdpaxos.core.straggler import Straggler
from sdpaxos.core.types import Ballot, CIndex, Command, OValue, ReplicaId, Slot, View


class Router:
    """Each cross-role call of :class:`~sdpaxos.core.reactions.Reactions`, routed."""

    __slots__ = (
        "acceptor",
        "command_leader",
        "election",
        "executor",
        "learner",
        "reads",
        "recovery",
        "sequencer",
        "snapshots",
        "straggler",
    )

    acceptor: Acceptor
    command_leader: CommandLeader
    election: Election
    executor: Executor
    learner: Learner
    reads: Reads
    recovery: Recovery
    sequencer: Sequencer
    snapshots: Snapshots
    straggler: Straggler

    def bind(
        self,
        command_leader: CommandLeader,
        acceptor: Acceptor,
        sequencer: Sequencer,
        learner: Learner,
        executor: Executor,
        election: Election,
        recovery: Recovery,
        reads: Reads,
        straggler: Straggler,
        snapshots: Snapshots,
    ) -> None:
        """The roles, built with this router as their port: calls may flow now."""
        self.command_leader, self.acceptor, self.sequencer = command_leader, acceptor, sequencer
        self.learner, self.executor, self.election = learner, executor, election
        self.recovery, self.reads, self.straggler = recovery, reads, straggler
        self.snapshots = snapshots

    # -- to the command leader
    def own_c_chosen(self, index: CIndex, inst: CInstance) -> None:
        self.command_leader.committed(index, inst)

    def own_ordered(self, before: int, upto: int) -> None:
        self.command_leader.ordered(before, upto)

    def resync_later(self) -> None:
        self.command_leader.resync_later()

    def share_own_before_stop(self) -> None:
        self.command_leader.share_with_every_member()

    def resync_toward(self, candidate: ReplicaId) -> None:
        self.command_leader.resync_toward(candidate)

    def next_c_index(self) -> CIndex:
        return self.command_leader.next_index

    def oldest_unordered_started_ms(self) -> float | None:
        return self.command_leader.oldest_unordered_started_ms()

    # -- to the acceptor and the election
    def establish(
        self, view: View, sequencer: ReplicaId, start: Slot, values: tuple[OValue, ...]
    ) -> None:
        self.election.establish(view, sequencer, start, values)

    def accepted_run_grew(self) -> None:
        self.acceptor.advance_acc()

    def promise_c(self, owner: ReplicaId, start: CIndex, end: CIndex, ballot: Ballot) -> CPromise:
        return self.acceptor.promise_c(owner, start, end, ballot)

    # -- to the sequencer
    def order_c_instance(
        self, owner: ReplicaId, index: CIndex, commands: tuple[Command, ...] | None
    ) -> None:
        self.sequencer.order_commands(owner, index, commands)

    def resend_own_o_accepts(self) -> None:
        self.sequencer.resend_own_o_accepts()

    def quorum_accepted(self, upto: Slot) -> None:
        self.sequencer.quorum_accepted(upto)

    def won(self, start: Slot, end: Slot) -> None:
        self.sequencer.start_view(start, end)
        self.reads.fail_unanswered()

    def followed(self, sequencer: ReplicaId) -> None:
        self.sequencer.stop_view()

    def resend_to_all(self) -> None:
        self.sequencer.resend_to_all()

    def send_heartbeats(self) -> None:
        self.sequencer.send_heartbeats()

    def answer_stale(self, dst: ReplicaId) -> None:
        self.sequencer.answer_stale(dst)

    def has_lease(self) -> bool:
        return self.sequencer.has_lease()

    def read_slots(self, keys: tuple[bytes, ...]) -> tuple[Slot, ...]:
        return self.sequencer.read_slots(keys)

    def rebuilding(self) -> bool:
        return self.sequencer.rebuilding()

    def release_lease(self) -> None:
        self.sequencer.release_lease()
        self.election.lease_released()

    # -- to the learner, reads and the election
    def reset_learner(self) -> None:
        self.learner.reset()
        self.sequencer.reset_acked_before()

    def left_view(self) -> None:
        self.sequencer.left_view()
        self.reads.fail_unanswered()

    def lease_released(self) -> None:
        self.election.lease_released()

    def running_for_view(self) -> bool:
        return self.election.running_for_view()

    def start_view_change(self) -> None:
        self.election.start_view_change()

    # -- to recovery
    def recovered_c_chosen(self, owner: ReplicaId, index: CIndex, inst: CInstance) -> None:
        self.recovery.chosen(owner, index, inst)

    # -- to snapshots, and from them to everyone
    def heard_majority_executed(self, slot: Slot) -> None:
        self.snapshots.heard_majority_executed(slot)

    def offer_snapshot(self, dst: ReplicaId) -> None:
        self.snapshots.offer(dst)

    def ask_snapshot(self, src: ReplicaId) -> None:
        self.snapshots.ask(src)

    def fetching_snapshot(self) -> bool:
        return self.snapshots.fetching()

    def dump_sessions(self) -> tuple[Any, ...]:
        return self.executor.dump_sessions()

    def load_sessions(self, sessions: tuple[Any, ...]) -> None:
        self.executor.load_sessions(sessions)

    def compacted(self, snapshot: Snapshot) -> None:
        self.command_leader.forget_below(snapshot.executed)
        self.recovery.forget_below(snapshot.executed)
        self.election.compacted(snapshot.slot)

    def installed(self, snapshot: Snapshot) -> None:
        self.command_leader.installed(snapshot.next_index)

    def skip_learner(self, slot: Slot) -> None:
        self.learner.skip_to(slot)
