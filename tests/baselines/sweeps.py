"""What the baselines' slow sweeps share: two crash-restarts per run."""

import random
from collections.abc import Callable

from sdpaxos.sim.cluster import SimCluster


def two_crash_restarts(size: int, rnd: random.Random) -> Callable[[SimCluster], None]:
    """A run hook crashing a random replica twice, somewhere in the first 2 s,
    and restarting it 50 to 800 ms later (the draws come from ``rnd``)."""

    def hook(cluster: SimCluster) -> None:
        for _ in range(2):
            r = rnd.randrange(size)
            at = rnd.randrange(100_000, 2_000_000)
            cluster.call_at(at, lambda r=r: cluster.crash(r), "crash")
            back = at + rnd.randrange(50_000, 800_000)
            cluster.call_at(back, lambda r=r: cluster.restart(r), "restart")

    return hook
