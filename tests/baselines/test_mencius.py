"""The Mencius baseline (:mod:`sdpaxos.baselines.mencius`) in the simulator and alone.

Safety under drop, duplication and reordering; the latency bound that follows
from Mencius's READY rule; revocation of a crashed owner's instances while the
others go on; restart from persisted records; bad input ignored; the registry
and the codec.
"""

import random

import pytest

from sdpaxos.baselines import mencius
from sdpaxos.baselines.mencius import (
    CHOSEN_BALLOT,
    MESSAGE_TYPES,
    Accept,
    Accepted,
    Commit,
    Decided,
    LearnRequest,
    MenciusReplica,
    OwnNext,
    Prepare,
    Promise,
    Skip,
)
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.quorum import majority
from sdpaxos.core.storage import CAccepted
from sdpaxos.core.types import Command, ReplicaId, make_ballot
from sdpaxos.profiles import PAPER3, PAPER5, DelayProfile
from sdpaxos.protocols import protocol
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.run import run_closed_loop
from sdpaxos.sim.statemachine import DigestRegister
from sdpaxos.sim.workload import ClosedLoopClients

FAULTY = NetworkConfig(
    drop_probability=0.1, duplicate_probability=0.1, fifo=False, jitter_ms_max=30.0
)

#: SDPaxos's commit latency per region, sequencer in CA (docs/protocol.md 5.6).
SDPAXOS_MS = {
    "paper3": {"CA": 20, "OR": 20, "OH": 52},
    "paper5": {"CA": 52, "OR": 68, "OH": 68, "IRE": 139, "SEL": 146},
}


def _nearest_majority_rtt(profile: DelayProfile, o: int) -> float:
    """The round trip to the nearest majority of ``o`` (itself included)."""
    others = sorted(profile.rtt_ms[o][q] for q in range(profile.size) if q != o)
    return others[majority(profile.size) - 2]


def mencius_bound_ms(profile: DelayProfile, o: int) -> float:
    """The most a command proposed at ``o`` waits for READY without faults.

    Its instance ``k`` is chosen after ``M_o`` (nearest-majority round trip).
    Every other owner ``q`` answers ``o``'s Accept within ``RTT(o, q)``, with its
    skips below ``k``. An instance ``q`` filled below ``k`` was proposed before
    ``q`` heard of ``k`` (within ``RTT(o, q) / 2``): with N = 3 ``o`` knows it
    chosen when it accepts it (the owner's acceptance and ``o``'s are a
    majority), so by ``RTT(o, q)``; with N = 5 by ``q``'s Commit, at most
    ``RTT(o, q) / 2 + M_q + RTT(q, o) / 2``. Hence
    ``max(M_o, max_q RTT(o, q) + [N > 3] * M_q)``.
    """
    n = profile.size
    waits = [_nearest_majority_rtt(profile, o)]
    for q in range(n):
        if q != o:
            extra = _nearest_majority_rtt(profile, q) if n > 3 else 0.0
            waits.append(profile.rtt_ms[o][q] + extra)
    return max(waits)


# -- registry and codec --------------------------------------------------------


def test_the_registry_builds_mencius_replicas() -> None:
    spec = protocol("mencius")
    assert spec.title == "Mencius" == mencius.TITLE
    assert spec.message_types == MESSAGE_TYPES
    config = ClusterConfig(replicas=3)
    replica = spec.make_replica(config, 1, DigestRegister(), random.Random(1), True, None)
    assert isinstance(replica, MenciusReplica)
    replica.propose(Command(1, 1, b"x"))
    rd = replica.ready()
    assert [type(m) for _, m in rd.messages] == [Accept, Accept]
    assert any(isinstance(r, CAccepted) for r in rd.persist)


def test_the_codec_round_trips_every_message_type() -> None:
    cmds = (Command(1, 2, b"p"), Command(0, 0, b"", b"k"))
    samples = [
        Accept(0, 3, 0, cmds, -3, 0, 6),
        Accepted(1, 3, make_ballot(2, ReplicaId(1)), False, -2, 4),
        Commit(2, 5, (), -1, 8),
        Skip(1, 1, 7),
        Prepare(0, make_ballot(1, ReplicaId(0)), 2, 5, 11, -3, 3),
        Promise(1, 257, 2, 5, True, ((5, 0), (8, CHOSEN_BALLOT)), (cmds, ()), -2, 1),
        LearnRequest(2, 0, 9, 2, 5),
        Decided(0, 4, (cmds, None, ()), 0, 3),
    ]
    assert {type(m) for m in samples} == set(MESSAGE_TYPES)
    codec = protocol("mencius").codec
    assert codec.decode_batch(codec.encode_batch(samples)) == samples
    for m in samples:
        assert codec.decode(codec.encode(m)) == m


# -- safety and liveness in the simulator -----------------------------------------


@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_safe_and_live_under_drop_duplication_and_reordering(
    profile: DelayProfile, seed: int
) -> None:
    result = run_closed_loop(
        profile,
        seed=seed,
        commands_per_region=12,
        clients_per_region=2,
        network=FAULTY,
        catch=False,
        protocol="mencius",
    )
    assert result.ok, result.verdict
    assert all(s.count == 12 for s in result.stats.values())


# -- latency --------------------------------------------------------------------


@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
def test_latency_lies_between_sdpaxos_and_the_mencius_bound(profile: DelayProfile) -> None:
    result = run_closed_loop(
        profile, seed=1, commands_per_region=30, catch=False, protocol="mencius"
    )
    assert result.ok, result.verdict
    for r, stats in result.stats.items():
        region = profile.regions[r]
        assert stats.count == 30
        assert stats.mean_ms >= SDPAXOS_MS[profile.name][region], (region, stats.mean_ms)
        assert stats.mean_ms <= mencius_bound_ms(profile, r) + 1.0, (region, stats.mean_ms)


def test_the_bound_is_the_farthest_round_trip_with_three_replicas() -> None:
    assert [mencius_bound_ms(PAPER3, r) for r in range(3)] == [52.0, 68.0, 68.0]


def test_an_idle_replica_skips_promptly() -> None:
    """Imbalanced load at its extreme: OH has no clients. It skips its instances
    as soon as it hears of the others', so CA and OR wait at most a round trip to
    it (it answers their Accepts with its skips), never a tick or a timeout."""
    cluster = SimCluster(PAPER3, SeededChooser(random.Random(4)), protocol="mencius")
    clients = ClosedLoopClients(cluster, 30, regions=[0, 1])
    clients.start()
    cluster.run_until(5_000_000)
    stats = clients.stats()
    assert clients.done()
    for r in (0, 1):
        assert stats[r].mean_ms <= max(PAPER3.rtt_ms[r][q] for q in (0, 1, 2)) + 1.0
    cluster.checker.check_liveness([0, 1, 2])
    oh = cluster.replicas[2]
    assert isinstance(oh, MenciusReplica)
    assert oh.stats.revocations == 0 and oh.stats.instances_proposed == 0


# -- a crashed owner is revoked; it restarts from its records ------------------


@pytest.mark.parametrize(("profile", "victim"), [(PAPER3, 1), (PAPER5, 3)], ids=["3", "5"])
def test_a_crashed_owner_is_revoked_and_restarts_beyond_its_revoked_instances(
    profile: DelayProfile, victim: int
) -> None:
    cluster = SimCluster(
        profile,
        SeededChooser(random.Random(7)),
        protocol="mencius",
        network=NetworkConfig(jitter_ms_max=5.0, fifo=False),
    )
    live = [r for r in range(profile.size) if r != victim]
    clients = ClosedLoopClients(cluster, 20)
    clients.start()
    cluster.call_at(400_000, lambda: cluster.crash(victim))
    cluster.run_until(20_000_000)
    stats = clients.stats()
    assert all(stats[r].count == 20 for r in live)  # the others went on
    cluster.checker.check_liveness(live)
    revoked = sum(
        r.stats.instances_revoked for r in cluster.replicas if isinstance(r, MenciusReplica)
    )
    assert revoked > 0
    before = cluster.storages[victim].load()
    assert any(isinstance(rec, CAccepted) and rec.owner == victim for rec in before)

    cluster.restart(victim)
    back = cluster.replicas[victim]
    assert isinstance(back, MenciusReplica)
    own = [rec.index for rec in before if isinstance(rec, CAccepted) and rec.ballot == 0]
    assert back.next_own > max(i for i in own if i % profile.size == victim)
    cluster.run_until(25_000_000)
    cluster.checker.check_liveness(range(profile.size))  # it learned everything
    # It proposes again, beyond every instance revoked from it.
    revoked_own = [
        i
        for r in cluster.replicas
        if isinstance(r, MenciusReplica)
        for i, (b, _) in r.accepted.items()
        if b > 0 and i % profile.size == victim
    ]
    assert revoked_own
    answered: list[int] = []
    cluster.reply_listeners.append(lambda r, reply, now: answered.append(reply.seq))
    cluster.propose_at(cluster.now_us, victim, Command(999, 1, b"after restart"))
    cluster.run_until(30_000_000)
    assert answered == [1]
    assert back.last_valued > max(revoked_own)
    cluster.checker.check_liveness(range(profile.size))
    cluster.checker.check_safety()


def test_restart_restores_the_acceptor_and_drives_own_instances_again() -> None:
    config = ClusterConfig(replicas=3)
    r = MenciusReplica(config, 1, DigestRegister(), random.Random(1), True, None)
    r.tick(0.0)
    r.propose(Command(5, 1, b"a"))
    records = list(r.ready().persist)
    # As an acceptor: replica 2's instance 2 at ballot 0.
    r.step(Accept(2, 5, 0, (Command(6, 1, b"b"),), -1, 5, 8), 1.0)
    records += r.ready().persist
    assert OwnNext(7) in records  # it skipped its instance 4, below 5

    again = MenciusReplica(config, 1, DigestRegister(), random.Random(2), True, records)
    assert again.accepted[1] == (0, (Command(5, 1, b"a"),))
    assert again.accepted[5] == (0, (Command(6, 1, b"b"),))
    assert again.next_own >= 7 and again.last_valued == 1
    again.tick(10.0)
    sent = [m for _, m in again.ready().messages if isinstance(m, Accept)]
    assert {(m.instance, m.ballot) for m in sent} == {(1, 0)}
    # A new proposal never reuses an instance it may have used before.
    again.propose(Command(5, 2, b"c"))
    rd = again.ready()
    new = [m.instance for _, m in rd.messages if isinstance(m, Accept) and m.instance != 1]
    assert new and min(new) >= 7


# -- bad input --------------------------------------------------------------------


def test_a_stale_ballot_is_refused_without_raising() -> None:
    config = ClusterConfig(replicas=3)
    r = MenciusReplica(config, 0, DigestRegister(), random.Random(1), True, None)
    high, low = make_ballot(2, ReplicaId(1)), make_ballot(1, ReplicaId(2))
    r.step(Prepare(1, high, 2, 2, 11, -2, 1), 0.0)
    promise = [m for _, m in r.ready().messages if isinstance(m, Promise)]
    assert promise and promise[0].ok
    r.step(Accept(2, 5, low, (), -1, -1, 2), 1.0)
    rd = r.ready()
    assert r.stats.stale == 1 and r.stats.rejected == 0
    assert [m for _, m in rd.messages if isinstance(m, Accepted)] == [
        Accepted(0, 5, high, False, -3, 0)
    ]
    assert not rd.persist
    # The owner's ballot-0 Accept is stale too now.
    r.step(Accept(2, 5, 0, (Command(1, 1, b"x"),), -1, 5, 8), 2.0)
    assert r.stats.stale == 2 and 5 not in r.chosen


@pytest.mark.parametrize(
    "message",
    [
        Skip(7, 0, 3),  # unknown sender
        Skip(0, 0, 3),  # ourselves
        Skip(1, 0, 4),  # skips not of the sender's instances
        Accept(2, -1, 0, (), -1, -1, 2),  # negative instance
        Accept(1, 5, 0, (), -1, -2, 1),  # ballot 0 from another than the owner
        Accept(2, 5, 3, (), -1, -1, 2),  # a ballot of another replica
        Prepare(1, make_ballot(1, ReplicaId(1)), 2, 2, 3, -2, 1),  # range of other owner
        Decided(1, 0, ("x",), -2, 1),  # type: ignore[arg-type]
        "not a message",
    ],
)
def test_malformed_input_is_counted_and_ignored(message: object) -> None:
    r = MenciusReplica(ClusterConfig(replicas=3), 0, DigestRegister(), random.Random(1), True, None)
    r.step(message, 0.0)
    assert r.stats.rejected == 1
    assert not r.ready().persist and not r.chosen


def test_reads_go_through_the_log() -> None:
    r = MenciusReplica(ClusterConfig(replicas=3), 0, DigestRegister(), random.Random(1), True, None)
    r.read(7, b"k", 0.0)
    assert [(x.read_id, x.ok) for x in r.ready().reads] == [(7, False)]


def test_with_three_replicas_an_acceptor_knows_a_ballot_0_value_chosen_at_once() -> None:
    """The owner's acceptance and ours are a majority of 3 (not of 5)."""
    cmds = (Command(1, 1, b"x"),)
    for n, chosen in ((3, True), (5, False)):
        r = MenciusReplica(
            ClusterConfig(replicas=n), 0, DigestRegister(), random.Random(1), True, None
        )
        r.step(Accept(2, 2, 0, cmds, 2 - n, 2, 2 + n), 0.0)
        assert (r.chosen.get(2) == cmds) is chosen
