import itertools
import random

import pytest

from sdpaxos.profiles import PAPER5, uniform
from sdpaxos.sim.chooser import BenignChooser, SeededChooser
from sdpaxos.sim.network import Network, NetworkConfig


def test_delay_is_half_the_rtt() -> None:
    net = Network(PAPER5, NetworkConfig(), BenignChooser())
    assert net.transmit(1_000, 0, 3, 10) == [1_000 + 69_500]  # CA -> IRE: 139 / 2 ms
    assert net.transmit(1_000, 3, 0, 10) == [1_000 + 69_500]
    assert net.transmit(0, 1, 2, 10) == [34_000]  # OR -> OH: 68 / 2 ms


def test_fifo_links_never_reorder_under_jitter() -> None:
    net = Network(
        uniform(3, 10.0), NetworkConfig(jitter_ms_max=50.0), SeededChooser(random.Random(4))
    )
    times = [net.transmit(t * 100, 0, 1, 1)[0] for t in range(500)]
    assert times == sorted(times)
    assert max(b - a for a, b in itertools.pairwise(times)) > 0


def test_datagram_mode_may_reorder() -> None:
    cfg = NetworkConfig(jitter_ms_max=50.0, fifo=False)
    net = Network(uniform(3, 10.0), cfg, SeededChooser(random.Random(4)))
    times = [net.transmit(t * 100, 0, 1, 1)[0] for t in range(500)]
    assert times != sorted(times)
    assert all(5_000 + t * 100 <= at <= 55_000 + t * 100 for t, at in enumerate(times))


def test_drop_and_duplicate_are_counted() -> None:
    cfg = NetworkConfig(drop_probability=0.3, duplicate_probability=0.2)
    net = Network(uniform(3, 10.0), cfg, SeededChooser(random.Random(9)))
    copies = [len(net.transmit(0, 0, 1, 7, messages=2)) for _ in range(2_000)]
    s = net.stats(0, 1)
    assert s.packets_sent == 2_000 and s.sent == 4_000 and s.bytes_sent == 14_000
    assert s.dropped == 2 * copies.count(0)
    assert s.duplicated == 2 * copies.count(2)
    assert 500 < copies.count(0) < 700 and 200 < copies.count(2) < 360
    assert net.totals().sent == 4_000


def test_everything_dropped_and_benign_choice_drops_nothing() -> None:
    net = Network(
        uniform(3, 10.0), NetworkConfig(drop_probability=1.0), SeededChooser(random.Random(1))
    )
    assert sum(len(net.transmit(0, 0, 1, 1)) for _ in range(100)) <= 1  # only draw 0 survives
    net = Network(uniform(3, 10.0), NetworkConfig(drop_probability=1.0), BenignChooser())
    assert net.transmit(0, 0, 1, 1) == [5_000]


def test_partitions_block_at_send_and_at_delivery() -> None:
    net = Network(uniform(5, 10.0), NetworkConfig(), BenignChooser())
    net.block(0, 1, both_ways=False)  # one-way
    assert net.blocked(0, 1) and not net.blocked(1, 0)
    assert net.transmit(0, 0, 1, 1) == []
    assert net.stats(0, 1).dropped == 1
    net.heal()
    assert net.transmit(0, 0, 1, 1) == [5_000]
    net.isolate(2)
    assert net.blocked_links() == sorted(
        [(2, r) for r in (0, 1, 3, 4)] + [(r, 2) for r in (0, 1, 3, 4)]
    )
    net.heal()
    net.split([0, 1])
    assert net.blocked(0, 4) and net.blocked(4, 1) and not net.blocked(0, 1)
    assert not net.blocked(2, 3)
    # a packet in flight when the partition starts is lost on arrival
    assert not net.admit(0, 4, 3)
    assert net.admit(0, 1, 3) and net.stats(0, 1).delivered == 1
    net.heal()
    assert not net.admit(0, 4, 3, dst_alive=False)


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="drop_probability"):
        NetworkConfig(drop_probability=1.5)
    with pytest.raises(ValueError, match="jitter_ms_max"):
        NetworkConfig(jitter_ms_max=-1.0)
