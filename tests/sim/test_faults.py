"""Crash and restart in the simulator, with the real core.

Crash drops the ``Replica`` object and keeps its ``MemoryStorage``; restart
rebuilds it from ``storage.load()``. Clients re-propose the same command after
``client_retry_ms`` without a READY, so a command lost with its leader is
submitted again once the leader is back.
"""

from collections.abc import Callable

import pytest

from sdpaxos.sim import PAPER5, NetworkConfig, SimCluster, run_closed_loop


def crash_then_restart(
    replica: int, crash_ms: float, restart_ms: float
) -> Callable[[SimCluster], None]:
    def hook(cluster: SimCluster) -> None:
        cluster.call_at(round(crash_ms * 1000), lambda: cluster.crash(replica), "crash")
        cluster.call_at(round(restart_ms * 1000), lambda: cluster.restart(replica), "restart")

    return hook


@pytest.mark.parametrize("victim", ["OR", "SEL"])
def test_a_command_leader_crashes_and_restarts(victim: str) -> None:
    result = run_closed_loop(
        PAPER5,
        seed=11,
        commands_per_region=30,
        client_retry_ms=1_000.0,
        network=NetworkConfig(jitter_ms_max=5.0),
        cluster_hook=crash_then_restart(PAPER5.index(victim), 1_000.0, 2_500.0),
        catch=False,
    )
    assert result.ok, result.verdict
    assert all(s.count == 30 for s in result.stats.values())
