"""Client sessions that expire, end to end under faults: the clients register,
their sessions expire (by lifetime and by the table's size), retries stay
exactly-once, and the checkers find no violation. With the default config
(no lifetime) the clients never register (``test_digest.py`` pins those runs).
"""

import pytest

from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.faults import ALL_FAULTS, FaultKind
from sdpaxos.sim.sweep import FaultRun, run_faulty
from sdpaxos.sim.workload import ClosedLoopClients

#: (session_lifetime_slots, sessions_max): expiry mostly by lifetime, and a
#: table smaller than the clients (2 per region), so that sessions thrash.
LIMITS = [(8, 64), (3, 5)]
SEEDS = range(1, 5)
RETRIED = frozenset({FaultKind.CRASH, FaultKind.RESTART, FaultKind.DROP, FaultKind.ELSEWHERE})


def run(
    seed: int, replicas: int, faults: frozenset[FaultKind], limits: tuple[int, int] | None
) -> tuple[FaultRun, SimCluster, ClosedLoopClients]:
    """One fault run; ``limits``: (session_lifetime_slots, sessions_max), or the defaults."""
    clusters: list[SimCluster] = []
    overrides = None
    if limits is not None:
        overrides = {"session_lifetime_slots": limits[0], "sessions_max": limits[1]}
    result = run_faulty(
        seed, replicas, faults, cluster_hook=clusters.append, config_overrides=overrides
    )
    (cluster,) = clusters
    (clients,) = [
        listener.__self__
        for listener in cluster.reply_listeners
        if isinstance(getattr(listener, "__self__", None), ClosedLoopClients)
    ]
    return result, cluster, clients


@pytest.mark.parametrize("limits", LIMITS)
@pytest.mark.parametrize("replicas", [3, 5])
def test_sessions_expire_under_faults_and_nothing_executes_twice(
    replicas: int, limits: tuple[int, int]
) -> None:
    expired = registrations = retries = 0
    for faults in (ALL_FAULTS, RETRIED):
        for seed in SEEDS:
            result, cluster, clients = run(seed, replicas, faults, limits)
            # ok: no safety violation (a (client, seq) applied twice on a replica is
            # one), no liveness violation (every command executed or expired
            # everywhere, every client answered), no alarm.
            assert result.ok, f"{result.verdict}\nreplay: {result.replay}"
            assert clients.done() and clients.registrations >= clients.sessions_expired
            expired += result.sessions_expired
            registrations += clients.registrations
            retries += clients.retries
            assert cluster.core_counters()["sessions_expired"] == result.sessions_expired
    assert expired > 0 and retries > 0
    assert registrations > replicas * 2 * len(SEEDS) * 2  # clients registered again


def test_expired_sessions_are_answered_and_the_client_registers_again() -> None:
    result, _, clients = run(1, 3, RETRIED, (3, 5))
    assert result.ok, result.verdict
    # 6 clients, a table of 5: sessions expire, their clients hear of it.
    assert clients.sessions_expired > 0
    assert clients.registrations == 6 + clients.sessions_expired
    assert clients.completed == clients.total
    assert result.to_json()["sessions_expired"] == result.sessions_expired > 0
    assert result.replay.endswith(
        "(plus ClusterConfig overrides {'session_lifetime_slots': 3, 'sessions_max': 5})"
    )


def test_without_a_lifetime_clients_use_their_own_ids() -> None:
    result, _, clients = run(1, 3, RETRIED, None)
    assert result.ok and clients.registrations == 0 and result.sessions_expired == 0
