"""The Multi-Paxos baseline (``sdpaxos.baselines.multipaxos``): registry and codec,
latency formula, safety under faults, leader crash, restart, stale ballots, reads,
and its clients (EXECUTED answered once, forward retries, pending reads)."""

import random
from typing import Any

import pytest

from sdpaxos.baselines import multipaxos as mp
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.ready import ReadResult, ReplyKind
from sdpaxos.core.storage import CAccepted, ViewPromised
from sdpaxos.core.types import Ballot, CIndex, Command, ReplicaId, View, Wait, make_ballot
from sdpaxos.profiles import PAPER3, PAPER5, DelayProfile
from sdpaxos.protocols import protocol
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.run import run_closed_loop
from sdpaxos.sim.workload import ClosedLoopClients

from .sweeps import two_crash_restarts

NAME = "multipaxos"


class _Machine:
    """A log of applied payloads; the result is the payload's position."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []

    def apply(self, payload: bytes) -> bytes:
        self.applied.append(payload)
        return str(len(self.applied)).encode()

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


# -- registry and codec ---------------------------------------------------------


def _one_of_each() -> list[Any]:
    c1 = Command(1, 1, b"a")
    c2 = Command(2, 7, b"b", b"key")
    return [
        mp.Forward(1, 256, (c1, c2)),
        mp.Accept(0, 0, 3, (c1,)),
        mp.Accepted(2, 0, 3),
        mp.Commit(0, 0, 3, None),
        mp.Commit(0, 0, 4, (c2,)),
        mp.Heartbeat(0, 0, 9, 5),
        mp.HeartbeatAck(1, 0, 9),
        mp.Prepare(1, 257, 4),
        mp.Promise(2, 257, 4, (4, 6), (0, 0), ((c1,), ()), (True, False)),
        mp.Nack(2, 258),
        mp.LearnRequest(1, 0),
        mp.LearnReply(0, 0, ((c1, c2), ()), True),
    ]


def test_registry_builds_replicas_and_its_codec_round_trips_every_message_type() -> None:
    spec = protocol(NAME)
    assert spec.title == "Multi-Paxos" and spec.message_types is mp.MESSAGE_TYPES
    msgs = _one_of_each()
    assert {type(m) for m in msgs} == set(mp.MESSAGE_TYPES)
    assert spec.codec.decode_batch(spec.codec.encode_batch(msgs)) == msgs
    for m in msgs:
        assert spec.codec.decode(spec.codec.encode(m)) == m
    config = ClusterConfig(replicas=3)
    replicas = [
        spec.make_replica(config, r, _Machine(), random.Random(r), True, None) for r in range(3)
    ]
    assert [r.is_leader for r in replicas] == [True, False, False]
    replicas[1].propose(Command(5, 1, b"x"))
    out = replicas[1].ready().messages
    assert [(dst, type(m)) for dst, m in out] == [(0, mp.Forward)]
    assert spec.codec.decode_batch(spec.codec.encode_batch([m for _, m in out])) == [out[0][1]]


# -- latency --------------------------------------------------------------------

#: RTT(r, leader) + the leader's nearest-majority RTT, leader CA (Table 1).
EXPECTED = {
    "paper3": {"CA": 20, "OR": 40, "OH": 72},
    "paper5": {"CA": 52, "OR": 72, "OH": 104, "IRE": 191, "SEL": 198},
}


@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
def test_commit_latency_is_the_round_trip_to_the_leader_plus_its_nearest_majority(
    profile: DelayProfile,
) -> None:
    result = run_closed_loop(profile, seed=1, commands_per_region=20, protocol=NAME, catch=False)
    assert result.ok, result.verdict
    for r, stats in result.stats.items():
        want = EXPECTED[profile.name][profile.regions[r]]
        assert stats.count == 20
        assert stats.p50_ms == pytest.approx(want, rel=0.05), (profile.regions[r], stats)
        assert stats.mean_ms == pytest.approx(want, rel=0.05), (profile.regions[r], stats)


def test_non_thrifty_leader_waits_for_the_same_majority_but_sends_to_all() -> None:
    thrifty = run_closed_loop(PAPER5, seed=1, commands_per_region=5, protocol=NAME)
    to_all = run_closed_loop(
        PAPER5,
        seed=1,
        commands_per_region=5,
        protocol=NAME,
        config_overrides={"thrifty": False},
    )
    assert thrifty.ok and to_all.ok
    assert to_all.messages_sent > thrifty.messages_sent
    assert to_all.stats[0].mean_ms == pytest.approx(52, rel=0.05)


# -- safety and liveness under faults ---------------------------------------------

FAULTY = NetworkConfig(
    drop_probability=0.1, duplicate_probability=0.1, fifo=False, jitter_ms_max=25.0
)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
def test_safe_and_live_with_drop_duplication_and_reordering(
    profile: DelayProfile, seed: int
) -> None:
    result = run_closed_loop(
        profile,
        seed=seed,
        commands_per_region=12,
        clients_per_region=2,
        network=FAULTY,
        protocol=NAME,
        # Small batches and window: more instances, more gaps, more retransmission.
        config_overrides={"c_batch_max": 2, "c_inflight_max": 4},
        catch=False,
    )
    assert result.ok, result.verdict
    assert result.messages_dropped > 0
    assert result.chosen_c > 0  # the checker saw instances chosen (CAccepted majorities)


# -- leader crash, restart ----------------------------------------------------------


def _cluster(profile: DelayProfile, seed: int, **kwargs: Any) -> SimCluster:
    return SimCluster(profile, SeededChooser(random.Random(seed)), protocol=NAME, **kwargs)


def _leader_crash(
    profile: DelayProfile, seed: int
) -> tuple[SimCluster, ClosedLoopClients, list[Any]]:
    cluster = _cluster(profile, seed)
    survivors = list(range(1, profile.size))
    clients = ClosedLoopClients(cluster, 30, clients_per_region=2, regions=survivors)
    readies: list[tuple[int, int, int]] = []

    def on_reply(replica: int, reply: Any, now_us: int) -> None:
        if reply.kind is ReplyKind.READY:
            readies.append((now_us, replica, cluster.replicas[replica].view))  # type: ignore[union-attr]

    cluster.reply_listeners.append(on_reply)
    clients.start()
    cluster.run_until(800_000)
    assert 0 < clients.completed < clients.total
    cluster.crash(0)
    cluster.run_until(8_000_000)
    return cluster, clients, readies


@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
def test_leader_crash_a_new_leader_takes_over_and_every_command_executes(
    profile: DelayProfile,
) -> None:
    cluster, clients, readies = _leader_crash(profile, seed=4)
    assert clients.done()
    cluster.checker.check_liveness(cluster.live_replicas())
    cluster.checker.check_safety()
    leader = cluster.believed_sequencer()
    assert leader not in (None, 0)
    initial = make_ballot(0, ReplicaId(0))
    # Service resumed under the new leader's ballot, within a second of the crash.
    resumed = [t for t, _, ballot in readies if t > 800_000 and ballot > initial]
    assert resumed and resumed[0] - 800_000 < 1_000_000
    statuses = [cluster.replicas[r].status() for r in cluster.live_replicas()]  # type: ignore[union-attr]
    assert sum(s.is_leader for s in statuses) == 1
    assert len({s.ballot for s in statuses}) == 1


def test_old_leader_restarts_from_its_records_and_catches_up_as_a_follower() -> None:
    cluster, _, _ = _leader_crash(PAPER3, seed=5)
    records = cluster.storages[0].load()
    assert any(isinstance(r, CAccepted) for r in records)
    cluster.restart(0)
    old = cluster.replicas[0]
    assert isinstance(old, mp.MultiPaxosReplica)
    assert not old.is_leader and old.log  # accepted values came back from the records
    cluster.run_for(3_000_000)
    cluster.checker.check_liveness(cluster.live_replicas())
    assert old.status().executed_upto == cluster.replicas[1].status().executed_upto  # type: ignore[union-attr]
    assert old.sequencer == cluster.believed_sequencer() != 0


def test_a_follower_crash_and_restart_keeps_its_promise_and_relearns_everything() -> None:
    cluster = _cluster(PAPER5, seed=6)
    clients = ClosedLoopClients(cluster, 15, regions=[0, 2, 3])
    clients.start()
    cluster.run_until(300_000)
    cluster.crash(1)  # OR: in the leader's nearest majority
    cluster.run_until(2_000_000)
    cluster.restart(1)
    cluster.run_until(6_000_000)
    assert clients.done()
    cluster.checker.check_liveness(cluster.live_replicas())
    assert cluster.believed_sequencer() == 0  # no leader change was needed


def test_restore_takes_the_highest_promise_and_value_per_instance() -> None:
    config = ClusterConfig(replicas=3)
    a, b = Command(1, 1, b"a"), Command(2, 1, b"b")
    records: list[Any] = [
        ViewPromised(View(257)),
        CAccepted(ReplicaId(0), CIndex(0), Ballot(0), (a,)),
        CAccepted(ReplicaId(0), CIndex(0), Ballot(257), (b,)),
        CAccepted(ReplicaId(0), CIndex(1), Ballot(0), ()),
        ViewPromised(View(256)),
    ]
    r = mp.make_replica(config, 0, _Machine(), random.Random(1), True, records)
    assert r.promised == 257 and not r.is_leader and r.leader is None
    r.step(mp.Prepare(2, 514, 0), 0.0)
    # Right after a restart it honours a lease it may have granted before the crash.
    assert r.ready().messages == []
    r.tick(config.lease_ms + 1)
    r.step(mp.Prepare(2, 514, 0), config.lease_ms + 1)
    promises = [m for _, m in r.ready().messages if isinstance(m, mp.Promise)]
    assert promises and r.promised == 514
    assert promises[0] == mp.Promise(0, 514, 0, (0, 1), (257, 0), ((b,), ()), (False, False))


# -- hand-driven cluster: stale ballots, step-down, reads ---------------------------


class _Net:
    """Three replicas, messages delivered by hand, time passed explicitly."""

    def __init__(self, n: int = 3, **overrides: Any) -> None:
        self.config = ClusterConfig(replicas=n, **overrides)
        self.machines = [_Machine() for _ in range(n)]
        self.r = [
            mp.MultiPaxosReplica(
                self.config, i, self.machines[i], rng=random.Random(i), observe=True
            )
            for i in range(n)
        ]
        self.now = 0.0
        self.pending: list[tuple[int, Any]] = []
        self.replies: list[tuple[int, Any]] = []
        self.reads: list[tuple[int, ReadResult]] = []
        self.persisted: list[tuple[int, Any]] = []
        self.executed: list[tuple[int, Any]] = []
        self.down: set[int] = set()

    def flush(self, i: int) -> None:
        rd = self.r[i].ready()
        self.persisted += [(i, rec) for rec in rd.persist]
        self.pending += [(dst, m) for dst, m in rd.messages]
        self.replies += [(i, rep) for rep in rd.replies]
        self.reads += [(i, x) for x in rd.reads]
        self.executed += [(i, e) for e in rd.executed]

    def deliver_all(self, rounds: int = 100) -> None:
        for _ in range(rounds):
            if not self.pending:
                return
            batch, self.pending = self.pending, []
            for dst, m in batch:
                if dst in self.down or m.src in self.down:
                    continue
                self.r[dst].step(m, self.now)
                self.flush(dst)
        raise AssertionError("messages never quiesce")

    def tick(self, ms: float) -> None:
        self.now += ms
        for i in range(len(self.r)):
            if i not in self.down:
                self.r[i].tick(self.now)
                self.flush(i)


def test_a_stale_ballot_message_is_answered_with_a_nack_and_changes_nothing() -> None:
    net = _Net()
    net.tick(1)
    net.deliver_all()
    follower = net.r[1]
    follower._raise_promise(make_ballot(3, ReplicaId(2)))
    net.flush(1)
    before = (follower.promised, dict(follower.log), follower.commit_upto)
    persisted = len(net.persisted)
    for stale in (
        mp.Accept(0, 0, 0, (Command(9, 1, b"z"),)),
        mp.Heartbeat(0, 0, 5, 0),
        mp.Prepare(0, make_ballot(2, ReplicaId(0)), 0),
    ):
        follower.step(stale, net.now)  # must not raise
        rd = follower.ready()
        assert rd.persist == [] and rd.replies == []
        assert rd.messages == [(0, mp.Nack(1, make_ballot(3, ReplicaId(2))))]
    assert (follower.promised, dict(follower.log), follower.commit_upto) == before
    assert len(net.persisted) == persisted
    assert follower.stats.nacks_sent == 3


def test_the_old_leader_steps_down_on_a_nack_and_its_proposals_move_on() -> None:
    net = _Net()
    old = net.r[0]
    net.tick(1)
    net.deliver_all()
    old.propose(Command(1, 1, b"a"))
    net.flush(0)
    net.deliver_all()
    assert old.is_leader and old.commit_upto == 1
    old.step(mp.Nack(1, make_ballot(1, ReplicaId(2))), net.now)
    assert not old.is_leader and old.sequencer == 2 and old.stats.stepped_down == 1
    old.propose(Command(1, 2, b"b"))
    msgs = old.ready().messages
    assert [(d, type(m)) for d, m in msgs] == [(2, mp.Forward)]


def test_malformed_and_unknown_messages_are_counted_and_never_raise() -> None:
    r = _Net().r[1]
    bad: list[Any] = [
        object(),
        mp.Accept(1, 0, 0, ()),  # from itself
        mp.Accept(7, 0, 0, ()),  # unknown sender
        mp.Accept(0, 0, -1, ()),  # negative instance
        mp.Accept(0, "0", 0, ()),  # type: ignore[arg-type]
        mp.Accept(0, 0, 0, ("not a command",)),  # type: ignore[arg-type]
        mp.Accept(2, 0, 0, ()),  # ballot 0 belongs to replica 0
        mp.Promise(0, 0, 0, (1,), (), (), ()),  # fields of different lengths
        mp.Promise(0, 0, 0, 5, (), (), ()),  # type: ignore[arg-type]
        mp.LearnReply(0, 0, (None,), False),
        mp.LearnReply(0, 0, 3, False),  # type: ignore[arg-type]
        mp.Heartbeat(0, 0, 1, -4),
        mp.Nack(0, -1),
    ]
    for m in bad:
        r.step(m, 1.0)
    assert r.stats.rejected == len(bad)
    assert r.ready().persist == []


def test_reads_are_ok_only_at_the_leader_under_a_majority_lease() -> None:
    net = _Net()
    leader, follower = net.r[0], net.r[1]
    leader.read(1, None, net.now)  # no heartbeat acknowledged yet: no lease
    follower.read(2, None, net.now)
    net.flush(0)
    net.flush(1)
    assert net.reads == [(0, ReadResult(1, False)), (1, ReadResult(2, False))]
    net.tick(1)
    net.deliver_all()  # heartbeat, acknowledgements: a majority lease
    assert leader.has_lease()
    leader.propose(Command(1, 1, b"w"), Wait.EXECUTED)
    net.flush(0)
    leader.read(3, b"k", net.now)  # waits for the instance it started
    net.flush(0)
    assert net.reads[2:] == []
    net.deliver_all()
    assert net.reads[2:] == [(0, ReadResult(3, True))]
    kinds = [rep.kind for i, rep in net.replies if i == 0]
    assert kinds == [ReplyKind.EXECUTED]  # once: no READY before it
    # The lease runs out without heartbeat acknowledgements.
    net.down = {1, 2}
    net.tick(net.config.lease_ms)
    leader.read(4, None, net.now)
    net.flush(0)
    assert net.reads[-1] == (0, ReadResult(4, False))


def test_a_retried_command_executes_once_and_the_duplicate_is_reported() -> None:
    net = _Net()
    net.tick(1)
    net.deliver_all()
    cmd = Command(4, 1, b"once")
    net.r[1].propose(cmd)
    net.flush(1)
    net.deliver_all()
    net.r[2].propose(cmd)  # the client retries elsewhere
    net.flush(2)
    net.deliver_all()
    assert all(m.applied == [b"once"] for m in net.machines)
    assert [rep.kind for i, rep in net.replies if i == 2] == [ReplyKind.READY]
    # A copy in a second instance (a retry that raced the first) is a duplicate.
    leader = net.r[0]
    leader.queue.append(cmd)
    leader._dispatch_queue()
    net.flush(0)
    net.deliver_all()
    assert all(m.applied == [b"once"] for m in net.machines)
    at_leader = [e for i, e in net.executed if i == 0]
    assert [(e.c_index, e.command, e.duplicate, e.result) for e in at_leader] == [
        (0, cmd, False, b"1"),
        (1, cmd, True, b"1"),
    ]


def test_a_lost_accept_is_resent_to_everyone_and_the_silent_peer_left_out() -> None:
    net = _Net()
    leader = net.r[0]
    net.tick(1)
    net.deliver_all()
    leader.propose(Command(1, 1, b"a"))
    net.flush(0)
    assert [(d, type(m)) for d, m in net.pending] == [(1, mp.Accept)]  # thrifty: OR only
    net.pending = []  # lost
    net.tick(net.config.retransmit_ms - 2)
    assert leader.commit_upto == 0 and net.pending == []
    net.tick(2)
    assert sorted(d for d, m in net.pending if isinstance(m, mp.Accept)) == [1, 2]
    assert leader.prox.c_quorum == (ReplicaId(2),)  # OR is suspected until heard from
    net.deliver_all()
    assert leader.commit_upto == 1 and leader.is_leader
    assert leader.prox.c_quorum == (ReplicaId(1),)


def test_a_new_leader_adopts_the_highest_ballot_value_and_fills_holes_with_no_ops() -> None:
    net = _Net(5)
    cand = net.r[4]
    x, y, z = Command(1, 1, b"x"), Command(2, 1, b"y"), Command(3, 1, b"z")
    cand.tick(0.0)
    cand.tick(net.config.lease_ms + net.config.election_margin_ms + 100)
    assert cand.candidacy is not None
    ballot = cand.candidacy.ballot
    cand.ready()
    low, high = make_ballot(0, ReplicaId(0)), make_ballot(1, ReplicaId(3))
    cand.step(mp.Promise(0, ballot, 0, (0, 2), (low, low), ((x,), (z,)), (False, False)), 1.0)
    assert cand.candidacy is not None  # 2 of 5: not yet
    cand.step(mp.Promise(1, ballot, 0, (0,), (high,), ((y,),), (False,)), 1.0)
    assert cand.is_leader and cand.next_instance == 3
    accepts = {m.instance: m.commands for _, m in cand.ready().messages if isinstance(m, mp.Accept)}
    assert accepts == {0: (y,), 1: (), 2: (z,)}


def test_proposals_waiting_at_the_leader_share_one_instance_within_the_limits() -> None:
    net = _Net(c_batch_max=3, c_inflight_max=2)
    leader = net.r[0]
    net.tick(1)
    net.deliver_all()
    for seq in range(1, 9):
        leader.propose(Command(1, seq, b"%d" % seq))
    net.flush(0)
    accepts = [m for _, m in net.pending if isinstance(m, mp.Accept)]
    # Batches of c_batch_max, at most c_inflight_max instances in flight.
    assert [len(m.commands) for m in accepts] == [3, 3]
    assert len(leader.queue) == 2
    net.deliver_all()
    assert leader.commit_upto == 3 and not leader.queue
    assert all(m.applied == [b"%d" % s for s in range(1, 9)] for m in net.machines)


# -- clients: EXECUTED answered once, retries, pending reads --------------------


def _kinds(net: "_Net", replica: int) -> list[tuple[int, ReplyKind]]:
    return [(rep.client_id, rep.kind) for i, rep in net.replies if i == replica]


@pytest.mark.parametrize("at", [0, 1], ids=["leader", "follower"])
def test_a_command_waiting_for_executed_gets_no_ready_before_it(at: int) -> None:
    """As SDPaxos's core: READY for a READY wait, only EXECUTED for an EXECUTED
    wait (with the result), at the leader and at a replica that forwards."""
    net = _Net()
    net.tick(1)
    net.deliver_all()
    r = net.r[at]
    r.propose(Command(1, 1, b"a"), Wait.EXECUTED)
    r.propose(Command(2, 1, b"b"), Wait.READY)
    net.flush(at)
    net.deliver_all()
    assert _kinds(net, at) == [(2, ReplyKind.READY), (1, ReplyKind.EXECUTED)]
    assert [rep.result for i, rep in net.replies if i == at and rep.client_id == 1] == [b"1"]
    # A retry of an executed command is answered at once, in the same way.
    r.propose(Command(1, 1, b"a"), Wait.EXECUTED)
    r.propose(Command(2, 1, b"b"), Wait.READY)
    net.flush(at)
    assert _kinds(net, at)[2:] == [(1, ReplyKind.EXECUTED), (2, ReplyKind.READY)]
    assert not r.waiting and not r.exec_waiters


def test_a_lost_forward_is_sent_again_once_per_retransmission_period() -> None:
    net = _Net()
    net.tick(1)
    net.deliver_all()
    follower = net.r[1]
    follower.propose(Command(1, 1, b"a"))
    net.flush(1)
    assert [type(m) for _, m in net.pending] == [mp.Forward]
    net.pending = []  # lost
    net.tick(net.config.retransmit_ms - 1)
    assert follower.stats.forward_retries == 0
    net.tick(1)
    assert follower.stats.forward_retries == 1
    assert [type(m) for d, m in net.pending if d == 0] == [mp.Forward]
    net.deliver_all()
    assert _kinds(net, 1) == [(1, ReplyKind.READY)]
    net.tick(net.config.retransmit_ms)  # committed: nothing more to retry
    assert follower.stats.forward_retries == 1 and not follower.forwarded


def test_a_deposed_leader_hands_its_clients_commands_in_flight_to_the_new_one() -> None:
    net = _Net()
    old = net.r[0]
    net.tick(1)
    net.deliver_all()
    old.propose(Command(1, 1, b"a"))
    net.flush(0)
    net.pending = []  # its Accept is lost: the instance stays in flight
    old.step(mp.Nack(1, make_ballot(1, ReplicaId(2))), net.now)
    assert not old.is_leader and old.queue == [Command(1, 1, b"a")]
    assert [(d, type(m)) for d, m in old.ready().messages] == [(2, mp.Forward)]


def test_pending_reads_are_answered_in_order_and_their_ids_free_again() -> None:
    net = _Net()
    leader = net.r[0]
    net.tick(1)
    net.deliver_all()
    assert leader.has_lease()
    leader.propose(Command(1, 1, b"w"))
    net.flush(0)  # instance 0 in flight
    for read_id in range(1, 2001):
        leader.read(read_id, b"k", net.now)
    with pytest.raises(LocalProtocolError):
        leader.read(1500, b"k", net.now)  # still waiting
    net.flush(0)
    assert [x for x in net.reads] == []
    net.deliver_all()
    assert [x.read_id for _, x in net.reads] == list(range(1, 2001))
    assert all(x.ok for _, x in net.reads)
    leader.read(1500, b"k", net.now)  # answered: the id may come again
    net.flush(0)
    assert net.reads[-1] == (0, ReadResult(1500, True))
    # A deposed leader refuses what is pending, and forgets the ids too.
    leader.propose(Command(1, 2, b"w2"))
    net.flush(0)
    leader.read(7, None, net.now)
    leader.step(mp.Nack(1, make_ballot(1, ReplicaId(2))), net.now)
    net.flush(0)
    assert net.reads[-1] == (0, ReadResult(7, False))
    assert not leader.read_ids


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
            protocol=NAME,
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


def test_a_commit_is_one_object_per_kind_so_a_broadcast_is_packed_once() -> None:
    """The peers outside the Accept's quorum get one full Commit object, those
    in it one short one: the codec packs a shared object once per send
    (``encode_batch``'s ``packed``), as SDPaxos's broadcasts are."""
    net = _Net(n=5)
    leader = net.r[0]
    net.tick(1)
    net.deliver_all()
    leader.propose(Command(1, 1, b"a" * 64))
    net.flush(0)
    commits: list[tuple[int, Any]] = []
    for _ in range(10):
        batch, net.pending = net.pending, []
        for dst, m in batch:
            if isinstance(m, mp.Commit):
                commits.append((dst, m))
            else:
                net.r[dst].step(m, net.now)
                net.flush(dst)
    assert sorted(d for d, _ in commits) == [1, 2, 3, 4]
    full = [m for _, m in commits if m.commands is not None]
    short = [m for _, m in commits if m.commands is None]
    assert len(full) == 2 and len(short) == 2
    assert full[0] is full[1] and short[0] is short[1]
    codec = protocol(NAME).codec
    packed: dict[int, tuple[object, bytes]] = {}
    frames = [codec.encode_batch([m], packed) for _, m in commits]
    assert len(packed) == 2
    assert [codec.decode_batch(f) for f in frames] == [[m] for _, m in commits]


@pytest.mark.parametrize("observe", [True, False])
def test_a_follower_counts_a_duplicate_in_its_log_and_applies_it_once(observe: bool) -> None:
    """A command chosen in two instances (a retry that reached the log twice)
    executes once; the second is counted in ``stats.duplicates``, whether or
    not execution is observed (unobserved, the session table runs each
    instance's batch without per-command outcomes)."""
    config = ClusterConfig(replicas=3)
    machine = _Machine()
    follower = mp.MultiPaxosReplica(config, 1, machine, rng=random.Random(1), observe=observe)
    ballot = make_ballot(0, ReplicaId(0))
    command, other = Command(5, 1, b"x"), Command(6, 1, b"y")
    follower.step(mp.Commit(0, ballot, 0, (command,)), 0.0)
    follower.step(mp.Commit(0, ballot, 1, (other, command)), 0.0)
    follower.ready()
    assert machine.applied == [b"x", b"y"]
    assert follower.stats.duplicates == 1
    assert follower.stats.commands_executed == 3


@pytest.mark.parametrize("observe", [True, False])
def test_a_command_proposed_again_after_its_commit_is_ready_at_its_execution(
    observe: bool,
) -> None:
    """A client's retry reaches a follower after the command's instance was
    committed there but before it could execute (an earlier instance is
    missing): the READY comes when it executes, observed or not."""
    config = ClusterConfig(replicas=3)
    follower = mp.MultiPaxosReplica(config, 1, _Machine(), rng=random.Random(1), observe=observe)
    ballot = make_ballot(0, ReplicaId(0))
    command = Command(5, 1, b"x")
    follower.step(mp.Commit(0, ballot, 1, (command,)), 0.0)
    assert follower.ready().replies == []
    follower.propose(command, Wait.READY)
    assert follower.ready().replies == []  # committed, not executed: no READY yet
    follower.step(mp.Commit(0, ballot, 0, (Command(6, 1, b"y"),)), 0.0)
    replies = follower.ready().replies
    assert [(r.client_id, r.seq, r.kind) for r in replies] == [(5, 1, ReplyKind.READY)]
