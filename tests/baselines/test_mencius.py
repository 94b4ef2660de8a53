"""The Mencius baseline (:mod:`sdpaxos.baselines.mencius`) in the simulator and alone.

Safety under drop, duplication and reordering; the latency that follows from
Mencius's rules (per command between the instance's choice and a bound, and
exactly the skips awaited in a quiet cluster); the READY rule that real-time
order needs; who hears an acceptance; revocation of a crashed owner's
instances while the others go on; restart from persisted records; bad input
ignored; the registry and the codec.
"""

import bisect
import itertools
import random
from typing import Any

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
from sdpaxos.core.ready import Reply, ReplyKind
from sdpaxos.core.storage import CAccepted
from sdpaxos.core.types import Command, ReplicaId, Wait, make_ballot
from sdpaxos.profiles import PAPER3, PAPER5, DelayProfile
from sdpaxos.protocols import protocol
from sdpaxos.sim.checkers import SafetyViolation
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.run import run_closed_loop
from sdpaxos.sim.statemachine import DigestRegister
from sdpaxos.sim.workload import ClosedLoopClients

from .sweeps import two_crash_restarts

FAULTY = NetworkConfig(
    drop_probability=0.1, duplicate_probability=0.1, fifo=False, jitter_ms_max=30.0
)

#: SDPaxos's commit latency per region, sequencer in CA (docs/protocol.md 5.6).
SDPAXOS_MS = {
    "paper3": {"CA": 20, "OR": 20, "OH": 52},
    "paper5": {"CA": 52, "OR": 68, "OH": 68, "IRE": 139, "SEL": 146},
}


def _d(profile: DelayProfile, a: int, b: int) -> float:
    """One-way delay between replicas ``a`` and ``b`` (half the round trip)."""
    return profile.rtt_ms[a][b] / 2


def chosen_ms(profile: DelayProfile, o: int) -> float:
    """``M_o``: when ``o`` knows its own instance chosen, the round trip to its
    nearest majority (itself included), as for SDPaxos."""
    others = sorted(profile.rtt_ms[o][q] for q in range(profile.size) if q != o)
    return others[majority(profile.size) - 2]


def known_ms(profile: DelayProfile, q: int, o: int) -> float:
    """``K(q, o)``: how long after owner ``q`` proposes a ballot-0 value replica
    ``o`` knows it chosen. ``o`` accepts it on arrival (``d(q, o)``), and the
    owner's acceptance comes with it; with N = 3 that is a majority. With N >= 5
    the others' ``Accepted`` go to everyone: the ``majority - 2`` earliest of
    ``d(q, r) + d(r, o)``."""
    n, m = profile.size, majority(profile.size)
    if m <= 2:
        return _d(profile, q, o)
    relayed = sorted(_d(profile, q, r) + _d(profile, r, o) for r in range(n) if r not in (q, o))
    return max(_d(profile, q, o), relayed[m - 3])


def mencius_bound_ms(profile: DelayProfile, o: int) -> float:
    """The most a command proposed at ``o`` waits for READY without faults.

    Its instance ``k`` is chosen at ``o`` after ``M_o``. Every other owner ``q``
    hears of ``k`` after ``d(o, q)`` and skips its instances below ``k`` then
    (rule 2), telling ``o`` in its ``Accepted``: by ``RTT(o, q)``. An instance
    ``q`` filled below ``k`` was proposed before that, so ``o`` knows it chosen
    by ``d(o, q) + K(q, o)`` (which is at least ``RTT(o, q)``). Hence
    ``max(M_o, max_q d(o, q) + K(q, o))``: with N = 3 the round trip to the
    farthest replica.
    """
    waits = [chosen_ms(profile, o)]
    for q in range(profile.size):
        if q != o:
            waits.append(_d(profile, o, q) + known_ms(profile, q, o))
    return max(waits)


def quiet_ms(profile: DelayProfile, last: int, o: int) -> float:
    """READY latency at ``o`` in a quiet cluster whose last instance was ``last``'s.

    Everyone has skipped to just past that instance (rule 2), so ``o``'s next
    instance ``k`` lies above the next instance of every owner after ``last``
    and before ``o`` in the round-robin order (all the others if ``last`` is
    ``o``). Each of those skips its instance only when it hears of ``k``, and
    ``o`` hears of it in its ``Accepted``: ``max(M_o, max RTT(o, q))`` over them.
    """
    n = profile.size
    after = [(last + i) % n for i in range(1, n + 1)]
    between = after[: after.index(o)]
    return max([chosen_ms(profile, o)] + [profile.rtt_ms[o][q] for q in between])


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
def test_every_command_is_ready_between_its_choice_and_the_bound(profile: DelayProfile) -> None:
    result = run_closed_loop(
        profile,
        seed=1,
        commands_per_region=40,
        clients_per_region=3,
        catch=False,
        protocol="mencius",
    )
    assert result.ok, result.verdict
    for r, stats in result.stats.items():
        region = profile.regions[r]
        assert stats.count == 40
        assert stats.mean_ms >= SDPAXOS_MS[profile.name][region], (region, stats.mean_ms)
        # Per command, not only on average (fixed delays: no slack needed).
        assert stats.min_ms >= chosen_ms(profile, r) - 1e-6, (region, stats.min_ms)
        assert stats.max_ms <= mencius_bound_ms(profile, r) + 1e-6, (region, stats.max_ms)


def test_the_bounds_per_region() -> None:
    """With three replicas the bound is the round trip to the farthest replica;
    with five, the farthest replica's value known through its nearest relay."""
    assert [mencius_bound_ms(PAPER3, r) for r in range(3)] == [52.0, 68.0, 68.0]
    # CA learns SEL's value after 73 + 76.5 ms (relayed by OR), IRE SEL's after
    # 114.5 + 129 (relayed by OR), OH CA's after 26 + 44.
    assert [mencius_bound_ms(PAPER5, r) for r in range(5)] == [149.5, 149.5, 197.5, 243.5, 243.5]
    assert known_ms(PAPER5, 4, 0) == 76.5 and known_ms(PAPER5, 0, 2) == 44.0
    assert [chosen_ms(PAPER5, r) for r in range(5)] == [52.0, 68.0, 68.0, 125.0, 146.0]


class _Trace:
    """What a loaded run needs for the latency formula, in the driver's time:
    when each replica proposed each instance and moved its next index, when
    each client was answered, and what each replica told each other one."""

    def __init__(self, n: int) -> None:
        self.clock: Any = None
        self.moves: list[list[tuple[float, int]]] = [[] for _ in range(n)]
        self.proposed: dict[int, tuple[int, float]] = {}  # instance -> (owner, when)
        self.instance_of: dict[int, int] = {}  # client id -> instance
        self.answered: dict[int, float] = {}  # client id -> READY
        self.told: dict[tuple[int, int], list[tuple[float, int]]] = {}  # (q, o) -> next_own

    def make(self, *args: Any) -> MenciusReplica:
        trace = self

        class Traced(MenciusReplica):
            def _note(self) -> None:
                moves = trace.moves[self.id]
                if not moves or moves[-1][1] != self.next_own:
                    moves.append((trace.clock(), self.next_own))

            def step(self, message: Any, now_ms: float) -> None:
                super().step(message, now_ms)
                self._note()

            def tick(self, now_ms: float) -> None:
                super().tick(now_ms)
                self._note()

            def ready(self) -> Any:
                before = set(self.inflight)
                rd = super().ready()
                now = trace.clock()
                for k, own in self.inflight.items():
                    if k not in before:
                        trace.proposed[k] = (self.id, now)
                        for c in own.commands:
                            trace.instance_of[c.client_id] = k
                for reply in rd.replies:
                    trace.answered[reply.client_id] = now
                self._note()
                return rd

        return Traced(*args)


def _loaded_latencies(profile: DelayProfile) -> list[tuple[int, float, float]]:
    """Open-loop Poisson clients, 100 commands/s at every region (the bench's
    quick load): ``(region, measured, formula)`` per command, in ms."""
    n = profile.size
    trace = _Trace(n)
    cluster = SimCluster(
        profile, SeededChooser(random.Random(1)), protocol="mencius", replica_factory=trace.make
    )
    trace.clock = lambda: cluster.now_us / 1000

    def told(q: int, o: int, m: Any) -> None:
        trace.told.setdefault((q, o), []).append((cluster.now_us / 1000, m.next_own))

    cluster.send_listeners.append(told)
    rng = random.Random(7)
    cid = 0
    for r in range(n):
        t = rng.expovariate(0.1)
        while t < 2_000.0:
            cid += 1
            cluster.propose_at(round(t * 1000), r, Command(cid, 1, b"x"), Wait.READY)
            t += rng.expovariate(0.1)
    cluster.run_until(3_000_000)
    cluster.checker.check_liveness(range(n))
    mine = [sorted(k for k, (o, _) in trace.proposed.items() if o == q) for q in range(n)]
    # A replica's next index never decreases: what it told o, sorted by it.
    said = {qo: [next_own for _, next_own in msgs] for qo, msgs in trace.told.items()}
    out = []
    for c, k in trace.instance_of.items():
        o, t0 = trace.proposed[k]
        if t0 < 500.0:
            continue  # warm-up
        ready = t0 + chosen_ms(profile, o)
        for q in range(n):
            if q == o:
                continue
            # q's last value below k, known at o K(q, o) after q proposed it ...
            i = bisect.bisect_left(mine[q], k)
            if i:
                ready = max(ready, trace.proposed[mine[q][i - 1]][1] + known_ms(profile, q, o))
            # ... and the first message from q to o saying it is past k.
            first = trace.told[(q, o)][bisect.bisect_right(said[(q, o)], k)][0]
            ready = max(ready, first + _d(profile, q, o))
        out.append((o, trace.answered[c] - t0, ready - t0))
    return out


@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
def test_under_load_every_command_waits_exactly_for_what_the_rules_need(
    profile: DelayProfile,
) -> None:
    """Under load, READY comes when the last piece the READY rule needs
    arrives: ``k`` chosen (``M_o``), each other owner's last value below ``k``
    known (``K(q, o)`` after it was proposed), and each other owner's word that
    it is past ``k`` (its first message saying so, ``d(q, o)`` later). What
    depends on the load is only when the others proposed and moved past ``k``."""
    rows = _loaded_latencies(profile)
    assert len(rows) > 150 * profile.size
    for o, measured, formula in rows:
        assert measured == pytest.approx(formula, abs=1e-6), (profile.regions[o], measured)
        assert chosen_ms(profile, o) - 1e-6 <= measured <= mencius_bound_ms(profile, o) + 1e-6


def _quiet_latencies(profile: DelayProfile) -> dict[tuple[int, int], float]:
    """Every (last proposer, proposer) pair in a quiet cluster, a second apart."""
    cluster = SimCluster(profile, SeededChooser(random.Random(1)), protocol="mencius")
    answered: dict[int, int] = {}
    cluster.reply_listeners.append(lambda r, reply, now: answered.setdefault(reply.client_id, now))
    at_us = 1_000_000
    measured: dict[int, tuple[int, int, int]] = {}  # client id -> (last, o, proposed at)
    cid = 0
    for last, o in itertools.product(range(profile.size), repeat=2):
        for r in (last, o):
            cid += 1
            cluster.propose_at(at_us, r, Command(cid, 1, b"x"), Wait.READY)
            at_us += 1_000_000
        measured[cid] = (last, o, at_us - 1_000_000)
    cluster.run_until(at_us)
    cluster.checker.check_liveness(range(profile.size))
    return {(last, o): (answered[c] - t) / 1000 for c, (last, o, t) in measured.items()}


@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
def test_a_quiet_cluster_answers_after_exactly_the_skips_it_waits_for(
    profile: DelayProfile,
) -> None:
    """Idle owners skip as soon as they hear of an instance (rule 2) and say so
    in their answer (optimization 1); nobody waits for a tick or a timeout."""
    got = _quiet_latencies(profile)
    want = {(last, o): quiet_ms(profile, last, o) for last, o in got}
    assert got == want
    assert len(set(got.values())) > 2  # it depends on who proposed last


def test_the_quiet_formula_on_paper3() -> None:
    # CA after OH: nobody to wait for; after CA itself: OR and OH skip.
    assert [quiet_ms(PAPER3, last, 0) for last in range(3)] == [52.0, 52.0, 20.0]
    assert [quiet_ms(PAPER3, last, 1) for last in range(3)] == [20.0, 68.0, 20.0]


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


# -- who hears an acceptance; READY waits for every lower instance -------------


def test_an_acceptor_answers_the_owner_with_three_and_everyone_with_five() -> None:
    """With N = 3 the owner's acceptance and the acceptor's are a majority: every
    acceptor knows the value chosen, only the owner needs to hear. With N = 5
    every replica counts the acceptances (optimization 3). Either way the answer
    carries the skips rule 2 just made (optimization 1)."""
    cmds = (Command(1, 1, b"x"),)
    for n, dsts in ((3, [2]), (5, [1, 2, 3, 4])):
        r = MenciusReplica(
            ClusterConfig(replicas=n), 0, DigestRegister(), random.Random(1), True, None
        )
        r.step(Accept(2, 2, 0, cmds, 2 - n, 2, 2 + n), 0.0)
        sent = [(dst, m) for dst, m in r.ready().messages if isinstance(m, Accepted)]
        assert sorted(dst for dst, _ in sent) == dsts
        assert {m for _, m in sent} == {Accepted(0, 2, 0, True, -n, n)}  # skipped instance 0


def test_with_five_replicas_a_replica_learns_from_the_acceptances_not_from_the_owner() -> None:
    cmds = (Command(1, 1, b"x"),)
    config = ClusterConfig(replicas=5)
    r = MenciusReplica(config, 0, DigestRegister(), random.Random(1), True, None)
    r.step(Accept(2, 2, 0, cmds, -3, 2, 7), 0.0)
    assert 2 not in r.chosen  # the owner and us: two of five
    r.step(Accepted(3, 2, 0, True, -2, 3), 1.0)
    assert r.chosen[2] == cmds  # the owner, us and 3
    # The acceptances may come before the Accept: chosen, but the value is not
    # known here until it arrives. Hearing of instance 2 is enough to skip below it.
    late = MenciusReplica(config, 0, DigestRegister(), random.Random(1), True, None)
    late.step(Accepted(3, 2, 0, True, -2, 3), 0.0)
    late.step(Accepted(4, 2, 0, True, -1, 4), 0.0)
    assert 2 not in late.chosen and late.next_own == 5
    late.step(Accept(2, 2, 0, cmds, -3, 2, 7), 1.0)
    assert late.chosen[2] == cmds


@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
def test_the_normal_case_has_no_commit_and_counted_acceptances(profile: DelayProfile) -> None:
    n = profile.size
    cluster = SimCluster(profile, SeededChooser(random.Random(1)), protocol="mencius")
    sent: dict[str, int] = {}
    cluster.send_listeners.append(
        lambda r, dst, m: sent.__setitem__(type(m).__name__, sent.get(type(m).__name__, 0) + 1)
    )
    for i in range(n):
        cluster.propose_at(1_000_000 * (i + 1), i, Command(i + 1, 1, b"x"), Wait.READY)
    cluster.run_until(1_000_000 * (n + 1))
    cluster.checker.check_liveness(range(n))
    assert sent["Accept"] == n * (n - 1)
    assert sent["Accepted"] == n * (n - 1) * (1 if n == 3 else n - 1)
    assert "Commit" not in sent and "LearnRequest" not in sent


class _ReadyWhenChosen(MenciusReplica):
    """A broken Mencius: READY as soon as an own instance is chosen, without
    waiting for the lower instances of the others to be decided."""

    def _decide(self, x: int, value: tuple[Command, ...]) -> None:
        super()._decide(x, value)
        if x % self.n == self.id and self.mine.get(x) == value:
            del self.mine[x]  # (execution answers nothing more)
            for c in value:
                self._replies.append(Reply(c.client_id, c.seq, ReplyKind.READY))


def _lagging_owner_scenario(make: Any) -> None:
    """OR proposes, then CA (instance 3, chosen at CA 20 ms later); OH proposes
    21 ms after CA, before it hears of instance 3, so in its instance 2."""
    cluster = SimCluster(
        PAPER3, SeededChooser(random.Random(1)), protocol="mencius", replica_factory=make
    )
    cluster.propose_at(1_000_000, 1, Command(1, 1, b"a"), Wait.READY)
    cluster.propose_at(2_000_000, 0, Command(2, 1, b"b"), Wait.READY)
    cluster.propose_at(2_021_000, 2, Command(3, 1, b"c"), Wait.READY)
    cluster.run_until(3_000_000)
    cluster.checker.check_liveness(range(3))


def test_ready_waits_for_every_lower_instance_or_real_time_order_breaks() -> None:
    _lagging_owner_scenario(mencius.make_replica)  # CA answers after OH's instance 2
    with pytest.raises(SafetyViolation, match="real-time"):
        _lagging_owner_scenario(_ReadyWhenChosen)


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


def test_an_instance_whose_revocation_stopped_is_revoked_again_though_its_owner_lives() -> None:
    """Replica 2 began revoking owner 1's instance 1 and stopped (it crashed);
    owner 1, refused at ballot 0 by the promise, left the instance to it. Replica
    0, blocked on instance 1 while owner 1 is heard from all along, must finish
    it: after waiting as long as it would for a silent owner, it revokes it."""
    config = ClusterConfig(replicas=3)
    r = MenciusReplica(config, 0, DigestRegister(), random.Random(1), True, None)
    r.tick(0.0)
    r.step(Accept(2, 2, 0, (Command(2, 1, b"b"),), -1, 2, 5), 0.0)  # instance 2 exists
    end = 1 + 3 * config.recovery_batch_max
    r.step(Prepare(2, make_ballot(1, ReplicaId(2)), 1, 1, end, 2, 5), 0.0)
    r.ready()
    prepares: list[Prepare] = []
    now = 0.0
    while now < 3_000.0 and not prepares:
        now += 10.0
        if now % 100.0 == 0.0:
            r.step(Skip(1, 1, 4), now)  # owner 1 is alive
        r.tick(now)
        prepares = [m for _, m in r.ready().messages if isinstance(m, Prepare)]
    assert r.exec_next == 1 and 1 not in r.chosen
    assert prepares and {(m.owner, m.start) for m in prepares} == {(1, 1)}
    assert prepares[0].ballot > make_ballot(1, ReplicaId(2))
    assert now >= config.lease_ms + config.election_margin_ms


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


def test_one_turn_proposes_as_many_batches_as_wait_within_the_limits() -> None:
    config = ClusterConfig(replicas=3, c_batch_max=3, c_inflight_max=2)
    r = MenciusReplica(config, 0, DigestRegister(), random.Random(1), True, None)
    for seq in range(1, 9):
        r.propose(Command(1, seq, b"%d" % seq))
    accepts = [m for dst, m in r.ready().messages if isinstance(m, Accept) and dst == 1]
    assert [(m.instance, len(m.commands)) for m in accepts] == [(0, 3), (3, 3)]
    assert r.proposals_waiting == 2


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


@pytest.mark.slow
@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
def test_sweep_with_faults_and_crashes(profile: DelayProfile) -> None:
    """Not in CI (``-m slow``): more seeds and clients, heavier drop, duplication
    and reordering, and two crash-restarts per run."""
    for seed in range(200, 215):
        rnd = random.Random(seed)

        hook = two_crash_restarts(profile.size, rnd)

        result = run_closed_loop(
            profile,
            protocol="mencius",
            seed=seed,
            commands_per_region=30,
            clients_per_region=3,
            client_retry_ms=700.0,
            network=NetworkConfig(
                drop_probability=0.15, duplicate_probability=0.1, fifo=False, jitter_ms_max=50
            ),
            catch=False,
            cluster_hook=hook,
        )
        assert result.ok, (seed, result.verdict)
