"""Rebuilding the assignment log in a view change (paper section 3.3, Fig. 7).

A pure function, kept apart from the handlers so that it can be tested on its
own and read next to the TLA+ action ``HandleVote`` (``BuildLog`` in the spec).

The candidate holds votes from a majority, its own included. Each vote reports:

* ``entries``: for every slot from ``o_from`` on, the O-value the voter holds
  durably and its ballot (the view it was accepted in, or the view whose
  commit it learned);
* ``c_max``: per replica, the highest C-instance index the voter accepted;
* its *established view* ``(est_view, est_seq, est_base)``: the newest view
  whose whole rebuilt range the voter accepted, that view's sequencer and where
  the range ends. A view's range is accepted atomically, and a view's
  sequencer allocates only after the range, so a voter that holds any value of
  view ``v`` has established ``v`` (or a newer view).

The new log is built in three steps (``docs/recovery.md`` section 2.3):

1. ``W`` := the newest established view among the votes; ``S_W`` its sequencer,
   ``B_W`` its base. Anything a view made ready or executable was first
   majority-accepted as part of a range (a view's allocations become safe only
   after its range is), so ``W`` is at least every view that matters.
2. Per slot, the value with the highest ballot, ignoring values of views older
   than ``W`` at or beyond ``B_W``: ``W`` re-proposed everything chosen before it
   below ``B_W`` and allocated afresh from there, so an older value beyond it was
   never chosen and would order some C-instance a second time.
3. N = 5 only, when ``S_W`` did not vote and exactly one other replica ``m`` did
   not vote either: ``m``'s O-instances may be safe with two acceptors (``m`` and
   ``S_W``) that no vote shows (the paper's non-Paxos ready rule). Everything
   below the first empty slot is traced. From the first empty slot on, ``m`` gets
   consecutive slots, one C-instance each, until its coverage reaches
   ``C[m] + 1`` (``C[m]`` = the highest C-instance of ``m`` any voter accepted);
   whatever followed the first empty slot is dropped. Why this is right: a ready
   or executed slot of any other owner was accepted by a voter together with
   every slot before it (acceptance is contiguous), so it lies before the first
   empty slot; what lies beyond it can only be ``m``'s commands, whose
   C-instances are exactly those ``0 .. C[m]`` that may matter, and placing them
   consecutively puts each at or before the slot it was ready at. (The paper's
   own rule, "fill the first holes", can over-allocate ``m`` when holes precede
   traced slots; this one never gives ``m`` more than ``C[m] + 1`` C-instances.)
4. Every remaining empty slot below the last value becomes ``no-cl``.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sdpaxos.core.types import (
    NO_CL_VALUE,
    REPLICA_0,
    SLOT_0,
    STOP,
    VIEW_0,
    OValue,
    ReplicaId,
    Slot,
    View,
    VoteEntry,
)


@dataclass(frozen=True, slots=True)
class VoteState:
    """What one vote contributes to the rebuild."""

    entries: tuple[VoteEntry, ...]
    c_max: tuple[int, ...]
    #: The voter's established view, its sequencer and the end of its range.
    est_view: View = VIEW_0
    est_seq: ReplicaId = REPLICA_0
    est_base: Slot = SLOT_0
    #: The voter's executed prefix (not used by the rebuild itself: the winner
    #: starts its range at the lowest one, see ``Election.become_sequencer``).
    executed: Slot = SLOT_0


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """The outcome of :func:`rebuild_assignment_log`."""

    #: Values of slots ``o_from .. o_from + len(values) - 1`` in the new view.
    values: list[OValue]
    #: The old sequencer: the sequencer of the newest established view.
    old_sequencer: ReplicaId
    #: The replica whose O-instances were inferred (N = 5), or None.
    inferred: ReplicaId | None
    #: Reports that contradict a protocol invariant (a value of a view newer
    #: than every established one; a traced value of another replica after the
    #: first empty slot). Always 0 unless the protocol is broken.
    alarms: int


def rebuild_assignment_log(
    *,
    replicas: int,
    o_from: Slot,
    votes: Mapping[ReplicaId, VoteState],
    covered_before: Sequence[int],
) -> Rebuilt:
    """The values of slots ``o_from ..`` in the new view.

    Args:
        replicas: N.
        o_from: first slot being rebuilt; every slot below is already executed
            by the candidate, hence decided.
        votes: a majority of votes, the candidate's own included.
        covered_before: per replica, its C-instances covered by slots below ``o_from``.
    """
    if not votes:
        raise ValueError("a rebuild needs votes")
    newest = max(v.est_view for v in votes.values())
    # Every voter that established ``newest`` reports the same sequencer and base
    # (one range per view); take the lowest id for determinism.
    witness = votes[min(r for r, v in votes.items() if v.est_view == newest)]
    old_seq, base = witness.est_seq, witness.est_base
    alarms = 0
    best: dict[int, tuple[View, OValue]] = {}
    for vote in votes.values():
        for slot, ballot, owner, count in vote.entries:
            if slot < o_from:
                continue
            if ballot > newest:
                alarms += 1  # a value of a view nobody established: impossible
                continue
            if ballot < newest and slot >= base:
                continue  # superseded by the newest view's re-proposal
            seen = best.get(slot)
            if seen is None or ballot > seen[0]:
                best[slot] = (ballot, (owner, count))
    top: int = max(best) + 1 if best else o_from
    values: list[OValue | None] = [best[s][1] if s in best else None for s in range(o_from, top)]

    inferred: ReplicaId | None = None
    if replicas == 5 and old_seq not in votes:
        missing = [r for r in range(replicas) if r not in votes and r != old_seq]
        if len(missing) == 1:
            inferred = m = ReplicaId(missing[0])
            need = max(vote.c_max[m] for vote in votes.values()) + 1
            values, stray = _infer_untraceable(values, m, need, covered_before[m])
            alarms += stray

    # A range ends at its first stop: nothing after it belongs to this epoch
    # (docs/membership.md section 3.3; a chosen stop is never behind a hole).
    stop = next((i for i, v in enumerate(values) if v is not None and v[0] == STOP), None)
    if stop is not None:
        del values[stop + 1 :]
    while values and values[-1] is None:
        values.pop()
    return Rebuilt([NO_CL_VALUE if v is None else v for v in values], old_seq, inferred, alarms)


def _infer_untraceable(
    values: list[OValue | None], m: ReplicaId, need: int, covered_before: int
) -> tuple[list[OValue | None], int]:
    """Step 3 of the module docstring: ``m`` takes consecutive slots from the first hole.

    Returns the new values and how many traced values of other replicas lay
    beyond the first hole (an invariant says there are none).
    """
    try:
        hole = values.index(None)
    except ValueError:
        hole = len(values)
    stray = sum(1 for v in values[hole:] if v is not None and v[0] != m)
    kept = values[:hole]
    covered = covered_before + sum(v[1] for v in kept if v is not None and v[0] == m)
    while covered < need:
        kept.append((m, 1))
        covered += 1
    return kept, stray
