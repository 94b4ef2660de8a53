"""Crash and restart in the simulator, with the real core.

Crash drops the ``Replica`` object and keeps its ``MemoryStorage``; restart
rebuilds it from ``storage.load()``. Clients re-propose the same command after
``client_retry_ms`` without a READY, so a command lost with its leader is
submitted again once the leader is back.
"""

from collections.abc import Callable

import pytest

from sdpaxos.core import Command
from sdpaxos.sim import PAPER3, PAPER5, BenignChooser, NetworkConfig, SimCluster, run_closed_loop
from sdpaxos.sim import cluster as cluster_module
from sdpaxos.sim.network import Network

from .fakes import FakeReplica, PickleCodec, Ping, fake_factory


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


# -- pause, slow and one-way partitions, with fake replicas (exact timing) --------


def fake_cluster(**kwargs: object) -> SimCluster:
    return SimCluster(
        PAPER3,
        BenignChooser(),
        replica_factory=fake_factory,
        codec=PickleCodec(),
        **kwargs,  # type: ignore[arg-type]
    )


def fake(cluster: SimCluster, r: int) -> FakeReplica:
    replica = cluster.replicas[r]
    assert isinstance(replica, FakeReplica)
    return replica


def test_a_paused_replica_queues_its_inbox_and_catches_up_on_resume() -> None:
    cluster = fake_cluster()
    cluster.run_until(5_000)
    cluster.pause(1)
    ticks_before = fake(cluster, 1).ticks
    cluster.propose_at(5_000, 0, Command(1, 1, b"a"))  # CA pings OR, arriving at 15 ms
    cluster.propose_at(6_000, 0, Command(1, 2, b"b"))
    cluster.propose_at(7_000, 1, Command(2, 1, b"c"))  # a client request to the paused OR
    cluster.run_until(100_000)
    assert fake(cluster, 1).received == [] and fake(cluster, 1).ticks == ticks_before
    assert cluster.inbox_size(1) == 3
    assert fake(cluster, 2).received == [Ping(0, 2), Ping(0, 4)]  # OH is unaffected
    cluster.resume(1)
    # One tick on resume, with the clock as it reads now: no missed tick is replayed
    # (a real process wakes up late; the core judges its timers on elapsed time).
    assert fake(cluster, 1).ticks == ticks_before + 1
    assert fake(cluster, 1).clock_ms[-3:] == [100.0, 100.0, 100.0]
    assert fake(cluster, 1).received == [Ping(0, 1), Ping(0, 3)]  # in arrival order
    assert fake(cluster, 1).sent == 2  # and its client's request was handled
    assert cluster.inbox_size(1) == 0


def test_a_paused_replica_inbox_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module, "PAUSED_INBOX_MAX", 2)
    cluster = fake_cluster()
    cluster.pause(1)
    for seq in range(1, 6):
        cluster.propose_at(1_000, 0, Command(1, seq, b"x"))
    cluster.run_until(50_000)
    assert cluster.inbox_size(1) == 2 and cluster.inbox_overflow == 3
    cluster.resume(1)
    assert fake(cluster, 1).received == [Ping(0, 1), Ping(0, 3)]


def test_a_crash_loses_a_paused_replica_inbox_and_the_restart_is_not_paused() -> None:
    cluster = fake_cluster()
    cluster.pause(1)
    cluster.propose_at(1_000, 0, Command(1, 1, b"x"))
    cluster.run_until(50_000)
    assert cluster.inbox_size(1) == 1
    cluster.crash(1)
    cluster.restart(1)
    assert cluster.inbox_size(1) == 0 and not cluster.paused[1]
    cluster.run_until(100_000)
    assert fake(cluster, 1).received == [] and fake(cluster, 1).ticks > 0


def test_a_slow_replica_handles_messages_factor_times_slower() -> None:
    cluster = fake_cluster(processing_us=100)
    cluster.slow(1, 50.0)  # 5 ms per message at OR
    for seq in range(1, 4):
        cluster.propose_at(1_000, 0, Command(1, seq, b"x"))
    cluster.run_until(10_000 + 1_000 + 100 * 3 - 1)  # CA's own CPU: 0.1 ms each
    arrivals: list[int] = []
    original = fake(cluster, 1).step

    def timed(message: object, now_ms: float) -> None:
        arrivals.append(cluster.now_us)
        original(message, now_ms)

    fake(cluster, 1).step = timed  # type: ignore[method-assign]
    cluster.run_until(100_000)
    # Pings leave CA at 1.1, 1.2, 1.3 ms, arrive at OR 10 ms later; OR's CPU
    # takes 5 ms each, one after the other.
    assert arrivals == [11_100 + 5_000, 11_100 + 10_000, 11_100 + 15_000]
    assert fake(cluster, 2).received  # OH at normal speed got its pings
    with pytest.raises(ValueError, match="processing_us"):
        fake_cluster().slow(0, 3.0)


def test_one_way_blocking_cuts_exactly_one_direction() -> None:
    net = Network(PAPER3, NetworkConfig(), BenignChooser())
    net.block(0, 1, both_ways=False)
    assert net.transmit(0, 0, 1, 5) == []
    assert net.transmit(0, 1, 0, 5) == [10_000]
    assert net.stats(0, 1).cut == 1 and net.stats(1, 0).cut == 0
    net.unblock(0, 1, both_ways=False)
    assert net.transmit(0, 0, 1, 5) == [10_000]
    net.isolate_one_way(2, inbound=True)
    assert net.blocked_links() == [(0, 2), (1, 2)]
    net.heal()
    net.isolate_one_way(2, inbound=False)
    assert net.blocked_links() == [(2, 0), (2, 1)]


def test_a_one_way_cut_in_a_cluster_stops_one_direction_even_in_flight() -> None:
    cluster = fake_cluster()
    cluster.propose_at(1_000, 0, Command(1, 1, b"a"))  # CA -> OR, due at 11 ms
    cluster.run_until(5_000)
    cluster.network.block(0, 1, both_ways=False)  # cut while the ping is in flight
    cluster.propose_at(6_000, 1, Command(2, 1, b"b"))  # OR -> CA still works
    cluster.run_until(50_000)
    assert fake(cluster, 1).received == []
    assert Ping(1, 1) in fake(cluster, 0).received
    assert cluster.network.stats(0, 1).cut == 1


@pytest.mark.parametrize("inbound", [True, False])
def test_the_core_survives_a_one_way_isolated_sequencer(inbound: bool) -> None:
    """The sequencer hears nothing (or is heard by nobody) for 3 s; then the cut heals."""

    def hook(cluster: SimCluster) -> None:
        seq = 0
        cluster.call_at(
            1_000_000, lambda: cluster.network.isolate_one_way(seq, inbound=inbound), "cut"
        )
        cluster.call_at(4_000_000, cluster.network.heal, "heal")

    result = run_closed_loop(
        PAPER5,
        seed=3,
        commands_per_region=60,
        client_retry_ms=1_000.0,
        cluster_hook=hook,
        catch=False,
    )
    assert result.ok, result.verdict
    assert all(s.count == 60 for s in result.stats.values())


def test_the_core_survives_a_paused_sequencer() -> None:
    views: list[int] = []

    def hook(cluster: SimCluster) -> None:
        cluster.call_at(1_000_000, lambda: cluster.pause(0), "pause")

        def resume() -> None:
            views.append(getattr(cluster.replicas[1], "view", -1))
            cluster.resume(0)

        cluster.call_at(3_000_000, resume, "resume")

    result = run_closed_loop(PAPER5, seed=5, commands_per_region=60, cluster_hook=hook, catch=False)
    assert result.ok, result.verdict
    assert views and views[0] >= 1  # the others elected a new sequencer meanwhile


def test_a_restarted_sequencer_proposing_at_once_finishes() -> None:
    """Found by the stateful test (N = 5, seed 61875): a sequencer that restarts and is
    proposed to at once must finish its C-instance in the new view. Its own O-commit
    waited on the safe prefix, which a commit below the view's base failed to refresh."""
    import random

    from sdpaxos.core import Command
    from sdpaxos.sim import SeededChooser
    from tests.property.test_stateful import line_profile

    c = SimCluster(line_profile(5), SeededChooser(random.Random(61875)), sequencer=2)
    c.run_for(200_000)
    c.propose_at(c.now_us, 0, Command(1, 1, b"a"))
    c.run_for(50_000)
    c.crash(2)
    for _ in range(14):
        c.step()
    c.restart(2)
    c.propose_at(c.now_us, 2, Command(3, 1, b"x"))
    c.propose_at(c.now_us, 2, Command(3, 2, b"y"))
    c.run_for(10_000_000)
    c.checker.check_liveness(c.live_replicas())
    assert all(c.replicas[r].executed_upto == 2 for r in range(5))  # type: ignore[union-attr]
