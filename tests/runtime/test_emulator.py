"""The runtime's delay emulator: delays, order, bandwidth, loss, partitions, counters.

All times are virtual numbers passed in as ``now_ms``; randomness comes from a
seeded or scripted ``random.Random``, so nothing here depends on the wall clock.
"""

import json
import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdpaxos.profiles import PAPER3, PAPER5, uniform
from sdpaxos.runtime.emulator import (
    DELAY_MS_MAX,
    JITTER_MS_MAX,
    JITTER_NORMAL_CUT_SIGMAS,
    LOSS_PCT_MAX,
    LOSS_RETRIES_MAX,
    RTO_MS_MAX,
    EmulatorSettings,
    LinkEmulator,
)
from sdpaxos.runtime.partition import parse_partition

CA, OR, OH, IRE, SEL = range(5)


class Scripted(random.Random):
    """A Random whose ``random()`` returns scripted values (uniform and gauss use it)."""

    def __init__(self, values: list[float]) -> None:
        super().__init__(0)
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


# -- delays -------------------------------------------------------------------


def test_paper5_one_way_delays_are_half_the_table_rtt():
    ca = LinkEmulator.from_profile(CA, PAPER5)
    assert ca.schedule(IRE, 100, 1000.0) == 1069.5  # RTT 139 ms
    assert ca.schedule(OR, 100, 1000.0) == 1010.0  # RTT 20 ms
    ire = LinkEmulator.from_profile(IRE, PAPER5)
    assert ire.schedule(SEL, 100, 0.0) == 114.5  # RTT 229 ms
    assert ire.schedule(CA, 100, 0.0) == 69.5


def test_regions_place_replicas_and_may_repeat():
    # Replica 0 and 2 both in CA: their link gets CA's in-region delay (1.16 / 2).
    emu = LinkEmulator.from_profile(0, PAPER5, ["CA", "IRE", "CA", "4"])
    assert emu.replicas == 4
    assert emu.delay_ms(1) == 69.5
    assert emu.delay_ms(2) == 0.58
    assert emu.delay_ms(3) == 73.0  # "4" is SEL by index


def test_my_region_picks_the_row():
    # Replica 1 lives in IRE (profile row 3), not in the profile's region 1 (OR).
    emu = LinkEmulator.from_profile(1, PAPER5, ["CA", "IRE", "SEL"])
    assert [emu.delay_ms(0), emu.delay_ms(2)] == [69.5, 114.5]


def test_unknown_region_is_named():
    with pytest.raises(ValueError, match="'MARS'"):
        LinkEmulator.from_profile(0, PAPER3, ["CA", "MARS"])


def test_explicit_matrix_uses_my_row_and_may_be_asymmetric():
    m = [[0, 10, 20], [30, 0, 40], [50, 60, 0]]
    assert LinkEmulator.from_matrix(1, m).schedule(2, 1, 0.0) == 40.0
    assert LinkEmulator.from_matrix(2, m).schedule(1, 1, 0.0) == 60.0
    with pytest.raises(ValueError, match="row 1 must have 3 entries"):
        LinkEmulator.from_matrix(0, [[0, 1, 2], [0, 1], [0, 1, 2]])


# -- jitter and order -----------------------------------------------------------


def test_uniform_jitter_is_added_within_its_bound():
    emu = LinkEmulator.from_matrix(
        0, [[0, 10], [10, 0]], EmulatorSettings(jitter_ms=5.0), random.Random(7)
    )
    ats = [emu.schedule(1, 1, t * 100.0) for t in range(200)]
    extra = [at - t * 100.0 - 10.0 for t, at in enumerate(ats) if at is not None]
    assert all(0.0 <= x <= 5.0 for x in extra)
    assert max(extra) - min(extra) > 4.0  # jitter is really drawn, not constant


def test_jitter_never_reorders_a_link():
    # First frame draws the top of its jitter (90 ms), the second none: the
    # second is offered 1 ms later, but may not be written before the first.
    emu = LinkEmulator.from_matrix(
        0, [[0, 10], [10, 0]], EmulatorSettings(jitter_ms=90.0), Scripted([1.0, 0.0])
    )
    first = emu.schedule(1, 1, 0.0)
    assert first == 100.0
    assert emu.schedule(1, 1, 1.0) == 100.0
    assert emu.counters()[1].max_queue_ms == 89.0


def test_normal_jitter_is_cut():
    # Box-Muller with u1 = 0 and 1 - u2 = 1e-12 draws about 7.4 sigmas.
    emu = LinkEmulator.from_matrix(
        0,
        [[0, 10], [10, 0]],
        EmulatorSettings(jitter_ms=3.0, jitter_distribution="normal"),
        Scripted([0.0, 1.0 - 1e-12]),
    )
    assert emu.schedule(1, 1, 0.0) == 10.0 + JITTER_NORMAL_CUT_SIGMAS * 3.0


def test_normal_jitter_is_never_negative():
    # u1 = 0.5 puts Box-Muller at cos(pi) = -1: a negative draw, folded to positive.
    emu = LinkEmulator.from_matrix(
        0,
        [[0, 10], [10, 0]],
        EmulatorSettings(jitter_ms=3.0, jitter_distribution="normal"),
        Scripted([0.5, 0.5]),
    )
    assert emu.schedule(1, 1, 0.0) == pytest.approx(10.0 + 3.0 * math.sqrt(2 * math.log(2)))


sends = st.lists(
    st.tuples(
        st.integers(1, 3),  # dst
        st.integers(0, 100_000),  # nbytes
        st.floats(0.0, 50.0),  # time since the previous send
        st.sampled_from(["send", "block", "heal", "faster", "slower"]),
    ),
    max_size=60,
)


@given(
    ops=sends,
    seed=st.integers(0, 2**32),
    distribution=st.sampled_from(["uniform", "normal"]),
    bandwidth=st.sampled_from([None, 1e4, 1e6]),
    loss_pct=st.sampled_from([0.0, 5.0, LOSS_PCT_MAX]),
)
def test_property_each_link_is_written_in_order(ops, seed, distribution, bandwidth, loss_pct):
    settings = EmulatorSettings(
        jitter_ms=500.0,
        jitter_distribution=distribution,
        bandwidth_bytes_per_s=bandwidth,
        loss_pct=loss_pct,
    )
    emu = LinkEmulator.from_profile(0, uniform(4, 40.0), None, settings, random.Random(seed))
    last = dict.fromkeys(range(1, 4), -math.inf)
    now = 0.0
    offered = 0
    for dst, nbytes, dt, op in ops:
        now += dt
        if op == "block":
            emu.block(dst)
        elif op == "heal":
            emu.heal()
        elif op == "faster":
            emu.set_delay_ms(dst, 0.0)
        elif op == "slower":
            emu.set_delay_ms(dst, 300.0)
        delay = emu.delay_ms(dst)
        at = emu.schedule(dst, nbytes, now)
        offered += 1
        if at is None:
            assert emu.is_blocked(dst)
            continue
        assert at >= now + delay
        assert at >= last[dst]
        last[dst] = at
    c = emu.counters()
    assert sum(x.frames + x.dropped for x in c.values()) == offered


# -- bandwidth ------------------------------------------------------------------


def test_bandwidth_queues_frames_behind_one_another():
    # 1 MB/s: a 10 kB frame occupies the link for 10 ms; propagation is 5 ms.
    settings = EmulatorSettings(bandwidth_bytes_per_s=1e6)
    emu = LinkEmulator.from_matrix(0, [[0, 5], [5, 0]], settings)
    assert [emu.schedule(1, 10_000, 0.0) for _ in range(3)] == [15.0, 25.0, 35.0]
    # At 25 ms the link is still busy until 30 ms: start then, done at 32.
    assert emu.schedule(1, 2_000, 25.0) == 37.0
    # After the queue drains, a frame goes at once.
    assert emu.schedule(1, 1_000, 100.0) == 106.0
    c = emu.counters()[1]
    assert c.max_queue_ms == 20.0  # the third frame waited for two others
    assert c.bytes == 33_000


def test_bandwidth_is_per_link():
    settings = EmulatorSettings(bandwidth_bytes_per_s=1e6)
    emu = LinkEmulator.from_matrix(0, [[0, 5, 5], [5, 0, 5], [5, 5, 0]], settings)
    assert emu.schedule(1, 10_000, 0.0) == 15.0
    assert emu.schedule(2, 10_000, 0.0) == 15.0


# -- loss -------------------------------------------------------------------------


def test_loss_adds_rto_and_blocks_the_frames_behind():
    settings = EmulatorSettings(loss_pct=10.0, rto_ms=200.0)
    # Frame 1: lost (0.0 < 0.1), resend gets through (0.9); frames 2 and 3 get through.
    emu = LinkEmulator.from_matrix(0, [[0, 50], [50, 0]], settings, Scripted([0.0, 0.9, 0.9, 0.9]))
    assert emu.schedule(1, 1, 0.0) == 250.0
    assert emu.schedule(1, 1, 1.0) == 250.0  # head-of-line blocked behind the resend
    assert emu.schedule(1, 1, 300.0) == 350.0  # the link has recovered
    c = emu.counters()[1]
    assert c.lost == 1
    assert c.max_queue_ms == 199.0


def test_repeated_loss_backs_off_exponentially():
    settings = EmulatorSettings(loss_pct=50.0, rto_ms=200.0)
    emu = LinkEmulator.from_matrix(0, [[0, 0], [0, 0]], settings, Scripted([0.0, 0.0, 0.9]))
    assert emu.schedule(1, 1, 0.0) == 200.0 + 400.0


def test_repeated_loss_is_capped():
    settings = EmulatorSettings(loss_pct=50.0, rto_ms=RTO_MS_MAX / 4)
    emu = LinkEmulator.from_matrix(0, [[0, 0], [0, 0]], settings, Scripted([0.0] * 100))
    # RTO_MAX/4, RTO_MAX/2, then RTO_MAX for each of the remaining retries.
    expected = RTO_MS_MAX / 4 + RTO_MS_MAX / 2 + RTO_MS_MAX * (LOSS_RETRIES_MAX - 2)
    assert emu.schedule(1, 1, 0.0) == expected


def test_no_loss_draws_nothing():
    # With loss and jitter off, the rng is never touched (an empty script would raise).
    emu = LinkEmulator.from_matrix(0, [[0, 5], [5, 0]], EmulatorSettings(), Scripted([]))
    assert emu.schedule(1, 1, 0.0) == 5.0


# -- partitions -----------------------------------------------------------------


def test_block_drops_and_counts_until_unblocked():
    emu = LinkEmulator.from_matrix(0, [[0, 5, 5], [5, 0, 5], [5, 5, 0]])
    emu.block(1)
    assert emu.is_blocked(1)
    assert emu.schedule(1, 10, 0.0) is None
    assert emu.schedule(2, 10, 0.0) == 5.0  # other links unaffected
    emu.unblock(1)
    assert emu.schedule(1, 10, 1.0) == 6.0
    c = emu.counters()
    assert (c[1].dropped, c[1].frames, c[1].bytes) == (1, 1, 10)
    assert c[2].dropped == 0


def test_partition_cuts_links_across_groups_and_heal_restores():
    emus = [LinkEmulator.from_profile(i, PAPER5, settings=EmulatorSettings()) for i in range(5)]
    groups = parse_partition("0,1|2,3", 5)  # 4 in no group: isolated
    for e in emus:
        e.partition(groups)
    reach = {(i, j) for i in range(5) for j in range(5) if i != j and not emus[i].is_blocked(j)}
    assert reach == {(0, 1), (1, 0), (2, 3), (3, 2)}
    assert emus[0].schedule(2, 1, 0.0) is None
    assert emus[4].schedule(0, 1, 0.0) is None
    for e in emus:
        e.heal()
    assert not any(e.is_blocked(j) for e in emus for j in range(5) if j != e.me)
    assert emus[0].schedule(2, 1, 0.0) == 26.0


def test_partition_replaces_earlier_blocks():
    emu = LinkEmulator.from_matrix(0, [[0, 1, 1], [1, 0, 1], [1, 1, 0]])
    emu.block(1)
    emu.partition([[0, 1], [2]])
    assert not emu.is_blocked(1)
    assert emu.is_blocked(2)


def test_a_dropped_frame_does_not_hold_up_the_link():
    settings = EmulatorSettings(bandwidth_bytes_per_s=1e6)
    emu = LinkEmulator.from_matrix(0, [[0, 5], [5, 0]], settings)
    emu.block(1)
    assert emu.schedule(1, 1_000_000, 0.0) is None  # would have taken 1 s
    emu.heal()
    assert emu.schedule(1, 1_000, 1.0) == 7.0


def test_parse_partition():
    assert parse_partition("0,1|2", 3) == [frozenset({0, 1}), frozenset({2})]
    assert parse_partition(" 2 | 0 , 1 ", 3) == [frozenset({2}), frozenset({0, 1})]
    assert parse_partition("0,1,2", 3) == [frozenset({0, 1, 2})]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("  ", "empty"),
        ("0,,1", "group 0 has an empty replica id"),
        ("0|", "group 1 has an empty replica id"),
        ("0|x", "'x' is not a replica id"),
        ("0|-1", "'-1' is not a replica id"),
        ("0|\u0663", "is not a replica id"),  # an Arabic-Indic three: decimal, not ASCII
        ("0|3", r"replica 3 out of range 0\.\.2"),
        ("0,1|1,2", "replica 1 is in two groups"),
    ],
)
def test_parse_partition_errors_name_the_problem(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_partition(spec, 3)


def test_partition_checks_its_groups():
    emu = LinkEmulator.from_matrix(0, [[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="replica 2 out of range"):
        emu.partition([[0], [2]])
    with pytest.raises(ValueError, match="group 1 is empty"):
        emu.partition([[0], []])
    with pytest.raises(ValueError, match="replica 0 is in two groups"):
        emu.partition([[0], [0, 1]])
    with pytest.raises(ValueError, match=r"replicas must be in 1\.\.256"):
        parse_partition("0", 0)


# -- changes at run time and the identity ------------------------------------------


def test_identity_is_inactive_and_returns_now():
    emu = LinkEmulator.from_matrix(0, [[0, 0], [0, 0]], rng=Scripted([]))
    assert not emu.active
    assert emu.schedule(1, 42, 123.25) == 123.25
    c = emu.counters()[1]
    assert (c.frames, c.bytes, c.added_delay_ms) == (1, 42, 0.0)


@pytest.mark.parametrize(
    "change",
    [
        lambda e: e.set_delay_ms(1, 0.5),
        lambda e: e.block(1),
        lambda e: e.partition([[0], [1]]),
        lambda e: e.set_settings(EmulatorSettings(jitter_ms=1.0)),
        lambda e: e.set_settings(EmulatorSettings(bandwidth_bytes_per_s=1e9)),
        lambda e: e.set_settings(EmulatorSettings(loss_pct=1.0)),
        lambda e: e.set_profile(uniform(2, 10.0)),
    ],
)
def test_any_effect_makes_it_active(change):
    emu = LinkEmulator.from_matrix(0, [[0, 0], [0, 0]])
    change(emu)
    assert emu.active


def test_back_to_identity_after_heal_and_zero_delay():
    emu = LinkEmulator.from_matrix(0, [[0, 0], [0, 0]])
    emu.block(1)
    emu.heal()
    assert not emu.active
    emu.set_delay_ms(1, 30.0)
    emu.set_delay_ms(1, 0.0)
    assert not emu.active


def test_identity_still_keeps_order_behind_frames_already_scheduled():
    # A frame scheduled at 50 ms; then the delay is removed. A frame offered at
    # 10 ms must still wait for it: the identity shortcut only applies once the
    # link has drained.
    emu = LinkEmulator.from_matrix(0, [[0, 50], [50, 0]])
    assert emu.schedule(1, 1, 0.0) == 50.0
    emu.set_delay_ms(1, 0.0)
    assert not emu.active
    assert emu.schedule(1, 1, 10.0) == 50.0
    assert emu.schedule(1, 1, 60.0) == 60.0


def test_set_profile_swaps_every_delay():
    emu = LinkEmulator.from_profile(0, PAPER3)
    emu.set_profile(uniform(3, 100.0))
    assert [emu.delay_ms(j) for j in (1, 2)] == [50.0, 50.0]
    emu.set_profile(PAPER5, ["CA", "IRE", "SEL"])
    assert [emu.delay_ms(j) for j in (1, 2)] == [69.5, 73.0]
    with pytest.raises(ValueError, match="must have 3 entries"):
        emu.set_profile(PAPER5)


# -- counters -------------------------------------------------------------------


def test_counters_add_up_and_are_copies():
    settings = EmulatorSettings(loss_pct=10.0, rto_ms=100.0)
    emu = LinkEmulator.from_matrix(
        0, [[0, 10, 20], [10, 0, 10], [20, 10, 0]], settings, Scripted([0.0, 0.9, 0.9, 0.9])
    )
    emu.schedule(1, 100, 0.0)  # lost once: 110
    emu.schedule(1, 200, 5.0)  # behind it: 110
    emu.schedule(2, 300, 0.0)  # 20
    emu.block(2)
    emu.schedule(2, 400, 0.0)
    c = emu.counters()
    assert set(c) == {1, 2}
    assert (c[1].frames, c[1].bytes, c[1].lost, c[1].dropped) == (2, 300, 1, 0)
    assert c[1].added_delay_ms == 110.0 + 105.0
    assert c[1].max_queue_ms == 95.0
    assert (c[2].frames, c[2].bytes, c[2].dropped, c[2].added_delay_ms) == (1, 300, 1, 20.0)
    c[1].frames = 999
    assert emu.counters()[1].frames == 2


def test_to_json_is_plain_data():
    emu = LinkEmulator.from_profile(1, PAPER3, settings=EmulatorSettings(jitter_ms=2.0))
    emu.block(2)
    doc = json.loads(json.dumps(emu.to_json()))
    assert doc["me"] == 1
    assert doc["active"] is True
    assert doc["settings"]["jitter_ms"] == 2.0
    assert set(doc["links"]) == {"0", "2"}
    assert doc["links"]["0"]["delay_ms"] == 10.0
    assert doc["links"]["2"]["blocked"] is True
    assert doc["links"]["0"]["frames"] == 0


# -- validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"jitter_ms": -1.0}, "jitter_ms"),
        ({"jitter_ms": math.nan}, "jitter_ms"),
        ({"jitter_ms": JITTER_MS_MAX + 1}, "jitter_ms"),
        ({"jitter_ms": "5"}, "jitter_ms"),
        ({"jitter_ms": True}, "jitter_ms"),
        ({"jitter_distribution": "pareto"}, "jitter_distribution"),
        ({"bandwidth_bytes_per_s": 0}, "bandwidth_bytes_per_s"),
        ({"bandwidth_bytes_per_s": 1e12}, "bandwidth_bytes_per_s"),
        ({"bandwidth_bytes_per_s": math.inf}, "bandwidth_bytes_per_s"),
        ({"loss_pct": -0.1}, "loss_pct"),
        ({"loss_pct": LOSS_PCT_MAX + 1}, "loss_pct"),
        ({"rto_ms": 0.0}, "rto_ms"),
        ({"rto_ms": RTO_MS_MAX * 2}, "rto_ms"),
    ],
)
def test_bad_settings_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=f"^{name} "):
        EmulatorSettings(**kwargs)


def test_bad_links_and_frames_are_refused():
    with pytest.raises(ValueError, match=r"delay_ms\[0->1\]"):
        LinkEmulator(0, [0.0, -1.0])
    with pytest.raises(ValueError, match=r"delay_ms\[0->1\]"):
        LinkEmulator(0, [0.0, DELAY_MS_MAX * 2])
    with pytest.raises(ValueError, match="me must be"):
        LinkEmulator(2, [0.0, 1.0])
    with pytest.raises(ValueError, match=r"replicas must be in 1\.\.256"):
        LinkEmulator(0, [])
    with pytest.raises(ValueError, match=r"replicas must be in 1\.\.256"):
        LinkEmulator(0, [0.0] * 257)
    emu = LinkEmulator(0, [0.0, 1.0])
    for dst in (0, 2, -1):
        with pytest.raises(ValueError, match="dst must be"):
            emu.schedule(dst, 1, 0.0)
    with pytest.raises(ValueError, match="nbytes"):
        emu.schedule(1, -1, 0.0)
    with pytest.raises(ValueError, match=r"delay_ms\[0->1\]"):
        emu.set_delay_ms(1, math.nan)
    with pytest.raises(ValueError, match="no link to itself"):
        emu.block(0)


def test_a_node_added_later_gets_its_regions_delays_both_ways():
    """A changing membership: a node outside the file's list (id 7, in the
    profile's second region) is as far from each replica as that region is,
    and a replica learns the new node's link from the membership's region."""
    regions = list(PAPER3.regions)
    new = LinkEmulator.for_new_node(7, regions[1], PAPER3, regions)
    assert [new.delay_ms(j) for j in range(3)] == [PAPER3.one_way_us(1, j) / 1000 for j in range(3)]
    assert new.schedule(0, 10, 0.0) == PAPER3.one_way_us(1, 0) / 1000
    old = LinkEmulator.from_profile(0, PAPER3, regions)
    with pytest.raises(ValueError, match="dst must be a peer"):
        old.schedule(7, 10, 0.0)
    assert old.add_node(7, regions[1])
    assert old.delay_ms(7) == PAPER3.one_way_us(0, 1) / 1000
    assert old.schedule(7, 10, 0.0) == old.delay_ms(7)
    assert sorted(old.counters()) == [1, 2, 7]
    old.partition([[0, 7], [1, 2]])
    assert (old.is_blocked(7), old.is_blocked(1)) == (False, True)
    # Refused, changing nothing: a known link, a region the profile lacks, no profile.
    before = old.to_json()
    assert not old.add_node(7, regions[2])
    assert not old.add_node(8, "Atlantis")
    assert old.to_json() == before
    assert not LinkEmulator(0, [0.0, 5.0]).add_node(2, regions[0])
    with pytest.raises(ValueError, match="me must be a node id in 3"):
        LinkEmulator.for_new_node(2, regions[0], PAPER3, regions)


def test_peers_give_a_node_the_membership_names_its_regions_link(tmp_path):
    """The runtime's half: when the membership names a new node, the peers
    (``Peers.update``, called by ``Changes.follow``) add its link to the
    emulator with the region the membership gives it."""
    from sdpaxos.protocols import protocol
    from sdpaxos.runtime.local import make_local_cluster, node_configs
    from sdpaxos.runtime.peers import Peers
    from sdpaxos.runtime.status import Tally

    cfg = node_configs(make_local_cluster(tmp_path, 3, insecure=True))[0]
    emu = LinkEmulator.from_profile(0, PAPER3, list(PAPER3.regions))
    peers = Peers(
        cfg,
        protocol(cfg.protocol),
        None,  # type: ignore[arg-type]  # no loop: nothing is dialled
        tally=Tally(),
        metrics=None,
        emulator=emu,
        rng=random.Random(1),
    )
    peers.update({9: ("127.0.0.1", 1)}, True, {9: PAPER3.regions[2]})
    assert emu.delay_ms(9) == PAPER3.one_way_us(0, 2) / 1000
