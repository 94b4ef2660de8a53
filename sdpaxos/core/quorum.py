"""Quorum arithmetic as pure functions (tested against a brute-force oracle).

The assignment log's *safe prefix* (paper Fig. 5 lines 21, 26 and 30) is where a
command leader may call its commands ready: every O-instance below it is chosen.
Two rules decide it, by cluster size:

* a phase-2 quorum of replicas accepted the prefix (every N), or
* N = 5, at a non-sequencer: this replica and the sequencer accepted it (the
  paper's two-acceptor rule; its commits stay revocable until executed).

Two quorum sizes (Flexible Paxos, Howard et al. 2016): a *phase-2 quorum*
(:func:`accept_quorum`: the acceptances that choose a C- or O-instance) and a
*phase-1 quorum* (:func:`majority`: view-change votes, C-recovery promises,
lease grants, the majority-executed point). Every phase-1 quorum must meet every
phase-2 quorum; a majority meets a majority, and at N = 4 a phase-1 quorum of
three meets a phase-2 quorum of two (3 + 2 > 4), so a four-member epoch chooses
with its leader and the sequencer alone, in one round trip like N = 3, and still
tolerates one crash (``docs/membership.md`` section 5).
"""

from collections.abc import Sequence

from sdpaxos.core.types import ReplicaId, Slot


def majority(replicas: int) -> int:
    """The size of a majority quorum of ``replicas`` (F + 1 of 2F + 1)."""
    return replicas // 2 + 1


def accept_quorum(replicas: int) -> int:
    """The size of a phase-2 quorum of ``replicas``: 2 at N = 4, else a majority.

    Only N = 4 is flexible: at N = 6 a phase-2 quorum of three would still need
    one acceptor beyond the leader and the sequencer (no gain over the majority
    rule's 1.5 round trips without the N = 5 inference, which the model has only
    for N = 5), so N = 6 keeps majorities everywhere."""
    return 2 if replicas == 4 else majority(replicas)


def learns_c_on_accept(replicas: int) -> bool:
    """Does an acceptor learn a C-instance chosen when it accepts it? Yes when a
    phase-2 quorum is two: the proposer accepted its value at its ballot before
    sending the C-accept, so the acceptor's acceptance completes the quorum."""
    return accept_quorum(replicas) == 2


def kth_highest(values: Sequence[int], k: int) -> int:
    """The ``k``-th largest of ``values`` (1-based): what some ``k`` of them all reached."""
    return sorted(values, reverse=True)[k - 1]


def majority_prefix(acked: Sequence[Slot], quorum: int) -> Slot:
    """The longest prefix that ``quorum`` replicas have each accepted.

    ``acked[p]`` is the prefix replica ``p`` is known to have accepted.
    """
    return Slot(kth_highest(acked, quorum))


def two_acceptor_prefix(acked: Sequence[Slot], me: ReplicaId, sequencer: ReplicaId) -> Slot:
    """N = 5 at a non-sequencer: the prefix both this replica and the sequencer accepted."""
    return min(acked[me], acked[sequencer])


def uses_two_acceptor_rule(replicas: int, me: ReplicaId, sequencer: ReplicaId) -> bool:
    """Does the N = 5 two-acceptor rule decide ``me``'s safe prefix?"""
    return replicas == 5 and sequencer != me


def leader_and_sequencer_suffice(replicas: int) -> bool:
    """Can a non-sequencer's O-instance be settled by its leader and the sequencer
    alone? With N <= 4 they are a phase-2 quorum; with N = 5 the two-acceptor rule
    says so. Otherwise (N = 6, 7 and up: ``docs/membership.md`` section 5) a
    majority must accept it, and its O-ACKs must reach the leader: 1.5 round trips."""
    return replicas == 5 or accept_quorum(replicas) <= 2
