"""The assignment log: O-instances as this replica knows them, with their watermarks.

Slot ``s`` holds an O-value ``(owner, count)`` (``owner``, ``count``), the ballot
of the durable value (``ballot``, -1: none), whether it is known chosen
(``committed``, volatile) and the ballot it was chosen at (``cballot``: what a
relay reports; the slot's accepted ballot may be a later range's, never chosen).
The five columns grow together, only through :meth:`OLog.grow`, and shrink
together, only through :meth:`OLog.compact`: they hold slots ``base ..`` (a
snapshot covers everything below ``base``), so column index ``i`` is slot
``base + i``. Every reader translates with ``slot - olog.base``.

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
        "base",
        "base_count",
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
        #: The first slot held: slots below were executed and compacted away.
        self.base = Slot(0)
        #: Per owner, how many of its C-instances the slots below ``base`` order.
        self.base_count: list[int] = [0] * replicas
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
        """The end of the log: one past the highest slot held (not the number held)."""
        return self.base + len(self.owner)

    def grow(self, end: int) -> None:
        """Make room for every slot below ``end`` (callers check the window)."""
        grow = end - self.base - len(self.owner)
        if grow > 0:
            self.owner.extend([NO_CL] * grow)
            self.count.extend([0] * grow)
            self.ballot.extend([NO_BALLOT] * grow)
            self.committed.extend([False] * grow)
            self.cballot.extend([NO_BALLOT] * grow)

    def grow_within(self, end: int, limit: int) -> None:
        """:meth:`grow`, refusing a peer's slot at or beyond ``limit`` (the window)."""
        if end > len(self) and end > limit:
            raise PeerMessageError(f"slot {end - 1} is beyond the window")
        self.grow(end)

    def value(self, slot: int) -> OValue:
        i = slot - self.base
        return (self.owner[i], self.count[i])

    def values(self, start: int, end: int) -> tuple[OValue, ...]:
        """The values of slots ``start .. end-1`` (``start`` at or above ``base``)."""
        b = self.base
        return tuple(
            zip(self.owner[start - b : end - b], self.count[start - b : end - b], strict=True)
        )

    def learned(self, slot: int) -> tuple[object, ...]:
        """Everything known of one O-instance (to tell whether a step changed it)."""
        i = slot - self.base
        if i < 0 or i >= len(self.ballot):
            return ()
        return (
            self.ballot[i],
            self.owner[i],
            self.count[i],
            self.committed[i],
            self.cballot[i],
        )

    def commit(self, slot: int, ballot: View) -> None:
        i = slot - self.base
        self.committed[i] = True
        self.cballot[i] = ballot

    def is_committed(self, slot: int) -> bool:
        """Is ``slot`` known chosen here? (Compacted slots were executed: yes.)"""
        i = slot - self.base
        return i < 0 or (i < len(self.committed) and self.committed[i])

    def committed_prefix(self, start: Slot) -> Slot:
        """Every slot from ``start`` below the result is committed here."""
        b = self.base
        k: int = max(start, b) - b
        committed = self.committed
        limit = len(committed)
        while k < limit and committed[k]:
            k += 1
        return Slot(k + b)

    def advance_known(self, executed: Slot, view: View) -> Slot:
        """Extend the prefix of slots whose values we know: executed, accepted in
        ``view``, or known committed. Returns it."""
        b = self.base
        k: int = max(self.known_upto, executed, b) - b
        ballots, committed = self.ballot, self.committed
        limit = len(ballots)
        while k < limit and (ballots[k] == view or committed[k]):
            k += 1
        self.known_upto = Slot(k + b)
        return self.known_upto

    def accepted_run_end(self, view: View) -> Slot:
        """From ``acc_upto``, the end of the run of slots held at ``view``'s ballot."""
        b = self.base
        k: int = max(self.acc_upto, b) - b
        ballots = self.ballot
        while k < len(ballots) and ballots[k] == view:
            k += 1
        return Slot(max(k + b, self.acc_upto))

    def coverage(self, end: int, replicas: int) -> list[int]:
        """Per owner, how many of its C-instances slots ``0 .. end-1`` order
        (``end`` at or above ``base``: the compacted prefix counts as ``base_count``)."""
        covered = list(self.base_count)
        b = self.base
        for owner, count in zip(self.owner[: end - b], self.count[: end - b], strict=True):
            if owner >= 0:  # no-cl and the stop order nothing
                covered[owner] += count
        return covered

    def vote_entries(self, o_from: int) -> tuple[VoteEntry, ...]:
        """Every O-value held durably from ``o_from`` on (never below ``base``), with its ballot."""
        owners, counts, ballots = self.owner, self.count, self.ballot
        b = self.base
        return tuple(
            VoteEntry(Slot(i + b), ballots[i], owners[i], counts[i])
            for i in range(max(o_from, b) - b, len(owners))
            if ballots[i] != NO_BALLOT
        )

    def forget_commits_before(self, view: View, executed_end: Slot) -> None:
        """Unexecuted commits learned in views older than ``view`` become provisional:
        with N = 5 a non-sequencer's O-commit is revocable until executed (paper
        section 3.3), and ``view``'s range says what stands."""
        committed, ballots = self.committed, self.ballot
        b = self.base
        for i in range(max(executed_end, b) - b, len(committed)):
            if committed[i] and ballots[i] < view:
                committed[i] = False
        self.known_upto = min(self.known_upto, executed_end)

    def revoked_executed(
        self, start: Slot, values: tuple[OValue, ...], executed_end: Slot
    ) -> Slot | None:
        """The first executed slot ``values`` (from ``start``) would change, if any.
        Compacted slots cannot be compared; callers clip ranges at ``base`` first."""
        owners, counts = self.owner, self.count
        b = self.base
        for s in range(max(start, b), min(start + len(values), executed_end)):
            if (owners[s - b], counts[s - b]) != values[s - start]:
                return Slot(s)
        return None

    def conflict_at_ballot(
        self, start: Slot, values: tuple[OValue, ...], ballot: View
    ) -> Slot | None:
        """The first slot already holding another value at ``ballot``, if any: at
        one ballot (a view) the sequencer proposes one value per slot."""
        owners, counts, ballots = self.owner, self.count, self.ballot
        b = self.base
        for s in range(max(start, b), min(start + len(values), len(self))):
            i = s - b
            if ballots[i] == ballot and (owners[i], counts[i]) != values[s - start]:
                return Slot(s)
        return None

    def compact(self, slot: Slot, counts: list[int]) -> None:
        """Forget slots below ``slot``, which were executed (a snapshot covers them):
        ``counts`` is, per owner, how many of its C-instances they order."""
        drop = slot - self.base
        if drop <= 0:
            return
        self.grow(slot)
        for column in (self.owner, self.count, self.ballot, self.committed, self.cballot):
            del column[:drop]
        self.base = slot
        self.base_count = list(counts)
        for start in [p for p in self.pending if p < slot]:
            del self.pending[start]
