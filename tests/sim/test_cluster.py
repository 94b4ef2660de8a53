import json
import random

import pytest

from sdpaxos.core import Command
from sdpaxos.profiles import uniform
from sdpaxos.sim import (
    PAPER3,
    PAPER5,
    BenignChooser,
    NetworkConfig,
    SeededChooser,
    SimCluster,
    run_closed_loop,
)

from .fakes import FakeReplica, PickleCodec, Ping, fake_factory


def fake_cluster(**kwargs: object) -> SimCluster:
    kwargs.setdefault("chooser", BenignChooser())
    return SimCluster(
        kwargs.pop("profile", PAPER3),  # type: ignore[arg-type]
        replica_factory=fake_factory,
        codec=PickleCodec(),
        **kwargs,  # type: ignore[arg-type]
    )


def fake(cluster: SimCluster, r: int) -> FakeReplica:
    replica = cluster.replicas[r]
    assert isinstance(replica, FakeReplica)
    return replica


def test_replicas_tick_every_tick_ms() -> None:
    cluster = fake_cluster(tick_ms=5.0)
    cluster.run_until(100_000)
    assert [fake(cluster, r).ticks for r in range(3)] == [21, 21, 21]  # t = 0, 5, ..., 100 ms


def test_messages_cross_the_network_as_bytes_with_profile_delay() -> None:
    cluster = fake_cluster()
    cluster.propose_at(1_000, 0, Command(1, 1, b"x"))
    cluster.run_until(10_999)
    assert fake(cluster, 1).received == []
    cluster.run_until(11_000)  # CA -> OR: 20 / 2 ms
    assert fake(cluster, 1).received == [Ping(0, 1)]
    assert fake(cluster, 2).received == []
    cluster.run_until(27_000)  # CA -> OH: 52 / 2 ms
    assert fake(cluster, 2).received == [Ping(0, 2)]
    s = cluster.network.stats(0, 1)
    assert (s.sent, s.delivered, s.packets_sent) == (1, 1, 1) and s.bytes_sent > 0


def test_one_packet_per_destination_per_ready_batch() -> None:
    cluster = fake_cluster()
    r0 = fake(cluster, 0)
    r0.send(1, "a")
    r0.send(2, "b")
    r0.send(1, "c")
    cluster._drain(0)
    assert cluster.network.stats(0, 1).packets_sent == 1
    assert cluster.network.stats(0, 1).sent == 2
    cluster.run_until(100_000)
    assert fake(cluster, 1).received == ["a", "c"]


def test_crash_drops_replica_and_deliveries_restart_rebuilds_from_storage() -> None:
    cluster = fake_cluster()
    cluster.storages[1].append([])  # nothing durable yet
    cluster.propose_at(0, 0, Command(1, 1, b"x"))
    cluster.call_at(5_000, lambda: cluster.crash(1))
    cluster.run_until(20_000)
    assert not cluster.alive(1) and cluster.live_replicas() == [0, 2]
    assert cluster.network.stats(0, 1).dropped == 1  # arrived at a dead replica
    cluster.restart(1)
    again = fake(cluster, 1)
    assert again.received == [] and again.restored == []
    assert cluster.crashes == 1


def test_measured_proximity_feeds_observe_rtt() -> None:
    cluster = fake_cluster(measured_proximity=True, probe_ms=500.0)
    cluster.run_until(600_000)
    rtts = dict(fake(cluster, 0).rtts)
    assert rtts == {1: 20.0, 2: 52.0}
    assert len(fake(cluster, 2).rtts) == 4  # two probe rounds answered by t = 600 ms


def test_fake_runs_are_a_function_of_the_seed() -> None:
    def trace(seed: int) -> list[tuple[int, object]]:
        chooser = SeededChooser(random.Random(seed))
        net = NetworkConfig(jitter_ms_max=30.0, fifo=False, drop_probability=0.1)
        cluster = fake_cluster(profile=uniform(5, 40.0), chooser=chooser, network=net)
        for i in range(50):
            cluster.propose_at(i * 3_000, i % 5, Command(i + 1, 1, b"p"))
        cluster.run_until(400_000)
        return [(r, m) for r in range(5) for m in fake(cluster, r).received]

    assert trace(1) == trace(1)
    assert trace(1) != trace(2)


def test_core_runs_are_a_function_of_the_seed() -> None:
    net = NetworkConfig(jitter_ms_max=10.0, drop_probability=0.02, duplicate_probability=0.02)
    a = run_closed_loop(PAPER5, seed=5, commands_per_region=20, network=net, catch=False)
    b = run_closed_loop(PAPER5, seed=5, commands_per_region=20, network=net, catch=False)
    c = run_closed_loop(PAPER5, seed=6, commands_per_region=20, network=net, catch=False)
    assert a.ok and b.ok and c.ok
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert json.dumps(a.to_json()) != json.dumps(c.to_json())


def test_bad_tick_is_refused() -> None:
    with pytest.raises(ValueError, match="tick_ms"):
        fake_cluster(tick_ms=0.0)
