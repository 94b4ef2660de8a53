"""Quorum arithmetic as pure functions (tested against a brute-force oracle).

The assignment log's *safe prefix* (paper Fig. 5 lines 21, 26 and 30) is where a
command leader may call its commands ready: every O-instance below it is chosen.
Two rules decide it, by cluster size:

* a majority of replicas accepted the prefix (every N), or
* N = 5, at a non-sequencer: this replica and the sequencer accepted it (the
  paper's two-acceptor rule; its commits stay revocable until executed).
"""

from collections.abc import Sequence

from sdpaxos.core.types import ReplicaId, Slot


def majority(replicas: int) -> int:
    """The size of a majority quorum of ``replicas`` (F + 1 of 2F + 1)."""
    return replicas // 2 + 1


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
    alone? With N <= 3 they are a majority; with N = 5 the two-acceptor rule says
    so. Otherwise (N = 4, 6, 7 and up: ``docs/membership.md`` section 5) a
    majority must accept it, and its O-ACKs must reach the leader: 1.5 round trips."""
    return replicas == 5 or majority(replicas) <= 2
