"""The assignment log: O-instances as this replica knows them, with their watermarks.

Slot ``s`` holds an O-value ``(owner, count)`` (``owner``, ``count``), the ballot
of the durable value (``ballot``, -1: none), whether it is known chosen
(``committed``, volatile) and the ballot it was chosen at (``cballot``: what a
relay reports; the slot's accepted ballot may be a later range's, never chosen).
The five columns grow together, only through :meth:`OLog.grow`.

Watermarks, all slot numbers (every slot below is covered):

* ``acc_upto``: accepted in the current view from the view's range on
  (-1: not established in it);
* ``known_upto``: the value is known (executed, accepted in the view, or known
  committed), see :meth:`OLog.advance_known`;
* ``heard_upto``: what this replica has heard exists (for learning);
* ``acked[p]``: the prefix replica ``p`` is known to have accepted in this
  view (-1: not established, or unknown); ``acked_dirty`` asks the learner to
  recompute the safe prefix.
"""

from sdpaxos.core.errors import PeerMessageError
from sdpaxos.core.types import NO_CL, OValue, ReplicaId, Slot, View, VoteEntry

#: The ballot of a slot that holds nothing durable. An O-instance's ballot is the
#: view its value was proposed in (the sequencer of view ``v`` proposes at ``v``).
NO_BALLOT = View(-1)
#: ``OAck.upto`` (and ``acc_upto``) of a replica not established in the view.
NOT_ESTABLISHED = Slot(-1)


class OLog:
    """The assignment log, column-wise (a hot path: lists beat per-slot objects)."""

    __slots__ = (
        "acc_upto",
        "acked",
        "acked_dirty",
        "ballot",
        "cballot",
        "committed",
        "count",
        "heard_upto",
        "known_upto",
        "owner",
        "pending",
    )

    def __init__(self, replicas: int) -> None:
        self.acked: list[Slot] = [Slot(0)] * replicas
        self.acked_dirty = False
        self.owner: list[ReplicaId] = []
        self.count: list[int] = []
        self.ballot: list[View] = []
        self.committed: list[bool] = []
        self.cballot: list[View] = []
        self.acc_upto = Slot(0)
        self.known_upto = Slot(0)
        self.heard_upto = Slot(0)
        #: O-accepts that arrived ahead of a gap, by start slot (bounded by
        #: ``o_pending_max``).
        self.pending: dict[Slot, tuple[OValue, ...]] = {}

    def __len__(self) -> int:
        return len(self.owner)

    def grow(self, end: int) -> None:
        """Make room for every slot below ``end`` (callers check the window)."""
        grow = end - len(self.owner)
        if grow > 0:
            self.owner.extend([NO_CL] * grow)
            self.count.extend([0] * grow)
            self.ballot.extend([NO_BALLOT] * grow)
            self.committed.extend([False] * grow)
            self.cballot.extend([NO_BALLOT] * grow)

    def grow_within(self, end: int, limit: int) -> None:
        """:meth:`grow`, refusing a peer's slot at or beyond ``limit`` (the window)."""
        if end > len(self.owner) and end > limit:
            raise PeerMessageError(f"slot {end - 1} is beyond the window")
        self.grow(end)

    def value(self, slot: int) -> OValue:
        return (self.owner[slot], self.count[slot])

    def values(self, start: int, end: int) -> tuple[OValue, ...]:
        return tuple(zip(self.owner[start:end], self.count[start:end], strict=True))

    def learned(self, slot: int) -> tuple[object, ...]:
        """Everything known of one O-instance (to tell whether a step changed it)."""
        if slot >= len(self.ballot):
            return ()
        return (
            self.ballot[slot],
            self.owner[slot],
            self.count[slot],
            self.committed[slot],
            self.cballot[slot],
        )

    def commit(self, slot: int, ballot: View) -> None:
        self.committed[slot] = True
        self.cballot[slot] = ballot

    def committed_prefix(self, start: Slot) -> Slot:
        """Every slot from ``start`` below the result is committed here."""
        k: int = start
        committed = self.committed
        limit = len(committed)
        while k < limit and committed[k]:
            k += 1
        return Slot(k)

    def advance_known(self, executed: Slot, view: View) -> Slot:
        """Extend the prefix of slots whose values we know: executed, accepted in
        ``view``, or known committed. Returns it."""
        k: int = max(self.known_upto, executed)
        ballots, committed = self.ballot, self.committed
        limit = len(ballots)
        while k < limit and (ballots[k] == view or committed[k]):
            k += 1
        self.known_upto = Slot(k)
        return self.known_upto

    def accepted_run_end(self, view: View) -> Slot:
        """From ``acc_upto``, the end of the run of slots held at ``view``'s ballot."""
        k: int = self.acc_upto
        ballots = self.ballot
        while k < len(ballots) and ballots[k] == view:
            k += 1
        return Slot(k)

    def coverage(self, end: int, replicas: int) -> list[int]:
        """Per owner, how many of its C-instances slots ``0 .. end-1`` order."""
        covered = [0] * replicas
        for owner, count in zip(self.owner[:end], self.count[:end], strict=True):
            if owner != NO_CL:
                covered[owner] += count
        return covered

    def vote_entries(self, o_from: int) -> tuple[VoteEntry, ...]:
        """Every O-value held durably from ``o_from`` on, with its ballot."""
        owners, counts, ballots = self.owner, self.count, self.ballot
        return tuple(
            VoteEntry(Slot(s), ballots[s], owners[s], counts[s])
            for s in range(o_from, len(owners))
            if ballots[s] != NO_BALLOT
        )

    def forget_commits_before(self, view: View, executed_end: Slot) -> None:
        """Unexecuted commits learned in views older than ``view`` become provisional:
        with N = 5 a non-sequencer's O-commit is revocable until executed (paper
        section 3.3), and ``view``'s range says what stands."""
        committed, ballots = self.committed, self.ballot
        for s in range(executed_end, len(committed)):
            if committed[s] and ballots[s] < view:
                committed[s] = False
        self.known_upto = min(self.known_upto, executed_end)

    def revoked_executed(
        self, start: Slot, values: tuple[OValue, ...], executed_end: Slot
    ) -> Slot | None:
        """The first executed slot ``values`` (from ``start``) would change, if any."""
        owners, counts = self.owner, self.count
        for s in range(start, min(start + len(values), executed_end)):
            if (owners[s], counts[s]) != values[s - start]:
                return Slot(s)
        return None

    def conflict_at_ballot(
        self, start: Slot, values: tuple[OValue, ...], ballot: View
    ) -> Slot | None:
        """The first slot already holding another value at ``ballot``, if any: at
        one ballot (a view) the sequencer proposes one value per slot."""
        owners, counts, ballots = self.owner, self.count, self.ballot
        for s in range(start, min(start + len(values), len(owners))):
            if ballots[s] == ballot and (owners[s], counts[s]) != values[s - start]:
                return Slot(s)
        return None
