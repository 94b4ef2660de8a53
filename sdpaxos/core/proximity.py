"""Who is near: peers ordered by round trip, and the thrifty quorum (paper section 4).

Thrifty accepts go to the nearest phase-2 quorum (a majority; two at N = 4); a
replica believed down is left out of it until it is heard from again, so that
one crash does not stall every command for a retransmission period.
"""

from sdpaxos.core.types import ReplicaId

_INF = float("inf")


class Proximity:
    """Round trips per peer, the peers nearest first, the thrifty quorum, suspects."""

    __slots__ = ("accept_quorum", "c_quorum", "me", "n", "near", "rtt_ms", "suspected", "thrifty")

    def __init__(
        self,
        me: ReplicaId,
        replicas: int,
        accept_quorum: int,
        thrifty: bool,
        rtt_ms: tuple[tuple[float, ...], ...] | None,
    ) -> None:
        self.me = me
        self.n = replicas
        self.accept_quorum = accept_quorum
        self.thrifty = thrifty
        self.rtt_ms: list[float | None] = [None] * replicas
        if rtt_ms is not None:
            for p in range(replicas):
                self.rtt_ms[p] = float(rtt_ms[me][p])
        #: Replicas believed down: left out of thrifty quorums until heard from.
        self.suspected: set[ReplicaId] = set()
        self.near: list[ReplicaId] = []
        self.c_quorum: tuple[ReplicaId, ...] = ()
        self.recompute()

    def observe(self, peer: ReplicaId, rtt_ms: float) -> None:
        old = self.rtt_ms[peer]
        self.rtt_ms[peer] = rtt_ms if old is None else 0.8 * old + 0.2 * rtt_ms
        self.recompute()

    def suspect(self, peer: ReplicaId) -> None:
        self.suspected.add(peer)
        self.recompute()

    def heard_from(self, peer: ReplicaId) -> None:
        if peer in self.suspected:
            self.suspected.discard(peer)
            self.recompute()

    def recompute(self) -> None:
        """Order peers by round trip (unknown ones last, ring order as tie-break)."""
        n, me, rtts = self.n, self.me, self.rtt_ms

        def key(p: ReplicaId) -> tuple[float, int]:
            rtt = rtts[p]
            return (_INF if rtt is None else rtt, (p - me) % n)

        self.near = sorted((ReplicaId(p) for p in range(n) if p != me), key=key)
        if self.thrifty:
            # Nearest phase-2 quorum, leaving out replicas believed down while enough remain.
            live = [p for p in self.near if p not in self.suspected]
            if len(live) < self.accept_quorum - 1:
                live = self.near
            self.c_quorum = tuple(live[: self.accept_quorum - 1])
        else:
            self.c_quorum = tuple(self.near)
