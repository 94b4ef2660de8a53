"""Quorum arithmetic as pure functions (tested against a brute-force oracle).

The assignment log's *safe prefix* (paper Fig. 5 lines 21, 26 and 30) is where a
command leader may call its commands ready: every O-instance below it is chosen.
Two rules decide it, by cluster size:

* a majority of replicas accepted the prefix (every N), or
* N = 5, at a non-sequencer: this replica and the sequencer accepted it (the
  paper's two-acceptor rule; its commits stay revocable until executed).
"""

from collections.abc import Sequence

from sdpaxos.core.types import ReplicaId


def majority(replicas: int) -> int:
    """The size of a majority quorum of ``replicas`` (F + 1 of 2F + 1)."""
    return replicas // 2 + 1


def kth_highest(values: Sequence[int], k: int) -> int:
    """The ``k``-th largest of ``values`` (1-based): what some ``k`` of them all reached."""
    return sorted(values, reverse=True)[k - 1]


def majority_prefix(acked: Sequence[int], quorum: int) -> int:
    """The longest prefix that ``quorum`` replicas have each accepted.

    ``acked[p]`` is the prefix replica ``p`` is known to have accepted.
    """
    return kth_highest(acked, quorum)


def two_acceptor_prefix(acked: Sequence[int], me: ReplicaId, sequencer: ReplicaId) -> int:
    """N = 5 at a non-sequencer: the prefix both this replica and the sequencer accepted."""
    return min(acked[me], acked[sequencer])


def uses_two_acceptor_rule(replicas: int, me: ReplicaId, sequencer: ReplicaId) -> bool:
    """Does the N = 5 two-acceptor rule decide ``me``'s safe prefix?"""
    return replicas == 5 and sequencer != me
