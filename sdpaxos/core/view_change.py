"""Rebuilding the assignment log in a view change (paper section 3.3, Fig. 7).

A pure function, kept apart from the handlers so that it can be tested on its
own and read next to the TLA+ action ``HandleVote``.

The candidate has votes from a majority. Each vote reports, for every
O-instance from ``o_from`` on, the value the voter accepted and its ballot (the
view it was accepted or committed in). The new log is:

1. per slot, the value with the highest ballot (classic Paxos phase 1);
2. for N = 5 only, when the old sequencer did not vote and exactly one other
   replica ``m`` did not vote either: ``m``'s O-instances may have been
   committed with only two acceptors (``m`` and the old sequencer), so no voter
   can trace them. ``C[m]`` (the highest C-instance of ``m`` any voter
   accepted) bounds ``m``'s ready commands, because a ready command's
   C-instance was accepted by a majority, which meets the voters. The first
   empty slots are given to ``m``, one C-instance each, until ``m`` is covered
   up to ``C[m]`` and no empty slot precedes the slot that covers ``C[m]``
   (Fig. 7 lines 32-36). This is why the sequencer never batches a
   non-sequencer's O-instances when N = 5: each hole must stand for exactly one
   C-instance. Our addition: whatever that leaves ``m`` beyond ``C[m]`` becomes
   no-cl again, because the paper's rule can over-allocate (see
   ``_infer_untraceable``);
3. our addition: values of views older than the newest one any voter accepted
   in, at or beyond that view's base, are dropped (they were superseded; kept,
   they would order a C-instance twice across views);
4. every remaining hole below the highest non-empty slot becomes ``no-cl``
   (Fig. 7 lines 37-38): no replica can have executed it, because executing
   it needed its O-commit, which a voter would have reported.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sdpaxos.core.types import NO_CL_VALUE, Ballot, OValue, ReplicaId, Slot


@dataclass(frozen=True, slots=True)
class VoteState:
    """What one vote contributes to the rebuild."""

    entries: tuple[tuple[Slot, Ballot, ReplicaId, int], ...]
    c_max: tuple[int, ...]
    #: Base of the view of this voter's highest-ballot entry (-1: unknown).
    base: Slot = -1


def rebuild_assignment_log(
    *,
    replicas: int,
    o_from: Slot,
    votes: Mapping[ReplicaId, VoteState],
    old_sequencer: ReplicaId,
    covered_before: Sequence[int],
) -> list[OValue]:
    """The values of slots ``o_from ..`` in the new view.

    Args:
        replicas: N.
        o_from: first slot being rebuilt; every slot below is already executed
            by the candidate, hence decided.
        votes: a majority of votes, the candidate's own included.
        old_sequencer: the sequencer of the latest established view any voter saw.
        covered_before: per replica, its C-instances covered by slots below ``o_from``.
    """
    # The newest view any voter accepted in, and its base: values of older views
    # at or beyond that base were superseded by it (it traced every chosen value,
    # all below its base, then allocated afresh). Keeping them would order some
    # C-instances twice, once in a stale slot and once in the newer view's.
    newest = max((e[1] for v in votes.values() for e in v.entries if e[0] >= o_from), default=-1)
    newest_base = max(
        (v.base for v in votes.values() if v.entries and max(e[1] for e in v.entries) == newest),
        default=-1,
    )
    best: dict[Slot, tuple[Ballot, OValue]] = {}
    for vote in votes.values():
        for slot, ballot, owner, count in vote.entries:
            if slot < o_from:
                continue
            if 0 <= newest_base <= slot and ballot < newest:
                continue
            seen = best.get(slot)
            if seen is None or ballot > seen[0]:
                best[slot] = (ballot, (owner, count))
    top = max(best) + 1 if best else o_from
    values: list[OValue | None] = [best[s][1] if s in best else None for s in range(o_from, top)]

    if replicas == 5 and old_sequencer not in votes:
        untraceable = [r for r in range(replicas) if r not in votes and r != old_sequencer]
        if len(untraceable) == 1:
            _infer_untraceable(values, untraceable[0], votes, covered_before)

    return [NO_CL_VALUE if v is None else v for v in values]


def _infer_untraceable(
    values: list[OValue | None],
    m: ReplicaId,
    votes: Mapping[ReplicaId, VoteState],
    covered_before: Sequence[int],
) -> None:
    """Fig. 7 lines 32-36, in place: give holes to ``m`` until ``C[m]`` is covered."""
    need = max(vote.c_max[m] for vote in votes.values()) + 1
    covered = covered_before[m] + sum(v[1] for v in values if v is not None and v[0] == m)
    while True:
        if covered >= need and not _hole_before_coverage(values, m, need, covered_before[m]):
            break
        try:
            hole = values.index(None)
        except ValueError:
            values.append((m, 1))
        else:
            values[hole] = (m, 1)
        covered += 1
    # Filling holes may give m more O-instances than C[m] needs. An m-slot past
    # the one that covers C[m] can only stand for a C-instance no voter accepted:
    # never chosen, never executed. Left in place it would be over-allocation
    # (pitfall 1): m's next new command would take that early slot, ahead of
    # commands that were ready before it was proposed. It becomes no-cl; if that
    # C-instance exists, its owner asks for it to be ordered again in the new view.
    excess = covered - need
    k = len(values) - 1
    while excess > 0 and k >= 0:
        value = values[k]
        if value is not None and value[0] == m and value[1] <= excess:
            excess -= value[1]
            values[k] = None
        k -= 1


def _hole_before_coverage(
    values: Sequence[OValue | None], m: ReplicaId, need: int, covered: int
) -> bool:
    """Is there an empty slot before the slot where ``m``'s coverage reaches ``need``?"""
    if covered >= need:
        return False
    for value in values:
        if value is None:
            return True
        if value[0] == m:
            covered += value[1]
            if covered >= need:
                return False
    return False
