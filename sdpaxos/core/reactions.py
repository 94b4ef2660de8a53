"""Reactions: what one role needs another to do, routed by the replica's router.

Roles never import or hold one another. When a step of one role has a
consequence in another (the acceptor learns that one of our own C-instances is
chosen, which the command leader must hear; an election resets the learner),
the role calls its :class:`Reactions` port, and :class:`~sdpaxos.core.router.
Router` (which :class:`~sdpaxos.core.replica.Replica` builds) routes the call to
the role that owns the effect. This protocol is the complete list of such
cross-role calls; each says who calls it and who answers.
"""

from typing import Any, Protocol

from sdpaxos.core.clog import CInstance
from sdpaxos.core.messages import CPromise
from sdpaxos.core.storage import Snapshot
from sdpaxos.core.types import Ballot, CIndex, Command, OValue, ReplicaId, Slot, View


class Reactions(Protocol):
    # -- to the command leader
    def own_c_chosen(self, index: CIndex, inst: CInstance) -> None:
        """Acceptor: our C-instance ``index`` is committed (maybe by a recoverer)."""

    def own_ordered(self, before: int, upto: int) -> None:
        """Learner: the safe prefix now orders our C-instances ``before .. upto-1``."""

    def resync_later(self) -> None:
        """Election: a view was entered; resend our C-instances at the next ready()."""

    def share_own_before_stop(self) -> None:
        """Sequencer: it allocated a stop; every member needs the values of the
        sequencer's own C-instances the stop's epoch orders, to execute up to it."""

    def resync_toward(self, candidate: ReplicaId) -> None:
        """Election: we voted for ``candidate``; resend what it must order."""

    def next_c_index(self) -> CIndex:
        """Straggler detection: how many own C-instances we started."""
        ...

    def oldest_unordered_started_ms(self) -> float | None:
        """Election: when our oldest C-instance not yet ordered started (None: none)."""
        ...

    # -- to the acceptor
    def establish(
        self, view: View, sequencer: ReplicaId, start: Slot, values: tuple[OValue, ...]
    ) -> None:
        """Acceptor: a range or NewView of a view we have not established (to the election)."""

    def accepted_run_grew(self) -> None:
        """Learner: values learned committed may extend our accepted prefix."""

    def promise_c(self, owner: ReplicaId, start: CIndex, end: CIndex, ballot: Ballot) -> CPromise:
        """Recovery: our own acceptor's phase-1 answer."""
        ...

    # -- to the sequencer
    def order_c_instance(
        self, owner: ReplicaId, index: CIndex, commands: tuple[Command, ...] | None
    ) -> None:
        """Command leader, acceptor: C-instances ``0 .. index`` of ``owner`` exist
        (``commands``: those of ``owner.index``, if known here)."""

    def resend_own_o_accepts(self) -> None:
        """Command leader (sequencer's own): its O-instances lack a quorum."""

    def quorum_accepted(self, upto: Slot) -> None:
        """Learner: a phase-2 quorum accepted every slot below ``upto`` (a range
        may be chosen)."""

    def won(self, start: Slot, end: Slot) -> None:
        """Election: we sequence the view whose range is ``[start, end)``."""

    def followed(self, sequencer: ReplicaId) -> None:
        """Election: we established another sequencer's view."""

    def resend_to_all(self) -> None:
        """Election: a new range must be accepted by everyone."""

    def send_heartbeats(self) -> None:
        """Election: announce the new view at once."""

    def answer_stale(self, dst: ReplicaId) -> None:
        """Election (a message of an older view, at the sequencer): tell ``dst`` where we are."""

    def has_lease(self) -> bool:
        """Reads: may the sequencer answer reads now?"""
        ...

    def read_slots(self, keys: tuple[bytes, ...]) -> tuple[Slot, ...]:
        """Reads: for each key, the last slot a write of it may occupy (``b""``: any write)."""
        ...

    def rebuilding(self) -> bool:
        """Hand-over: is the new sequencer's range still unchosen?"""
        ...

    def release_lease(self) -> None:
        """Hand-over: the sequencer stops serving reads and frees its followers."""

    # -- to the learner, reads and the election
    def reset_learner(self) -> None:
        """Election: learner state is per view."""

    def left_view(self) -> None:
        """Election: the view we were in is over (pending R-requests fail)."""

    def lease_released(self) -> None:
        """Hand-over: the lease we granted is released by its holder."""

    def running_for_view(self) -> bool:
        """Hand-over: are we a candidate already?"""
        ...

    def start_view_change(self) -> None:
        """Straggler detection, hand-over: run for the next view."""

    # -- to recovery
    def recovered_c_chosen(self, owner: ReplicaId, index: CIndex, inst: CInstance) -> None:
        """Command leader (acknowledgements): a majority accepted our recovery value."""

    # -- to snapshots, and from them to everyone
    def heard_majority_executed(self, slot: Slot) -> None:
        """Election (a heartbeat), sequencer (its own): a majority executed below ``slot``."""

    def offer_snapshot(self, dst: ReplicaId) -> None:
        """Learner: ``dst`` asked for instances below our snapshot; send it the snapshot."""

    def ask_snapshot(self, src: ReplicaId) -> None:
        """Recovery, election: ``src`` compacted what we need; fetch its snapshot."""

    def fetching_snapshot(self) -> bool:
        """Learner: is a snapshot on its way (then learn requests wait)?"""
        ...

    def dump_sessions(self) -> tuple[Any, ...]:
        """Snapshots: the executor's session table, as a snapshot carries it."""
        ...

    def load_sessions(self, sessions: tuple[Any, ...]) -> None:
        """Snapshots: replace the executor's session table with a snapshot's."""

    def compacted(self, snapshot: Snapshot) -> None:
        """Snapshots: everything below ``snapshot`` is about to be forgotten (the
        command leader answers what it waited for there, recoveries and a
        candidacy from below stop)."""

    def skip_learner(self, slot: Slot) -> None:
        """Snapshots: the safe prefix starts at ``slot`` now (below it: compacted)."""

    def installed(self, snapshot: Snapshot) -> None:
        """Snapshots: a peer's snapshot replaced our executed prefix (the command
        leader's next index goes up to the snapshot's)."""
