"""The EPaxos baseline (``sdpaxos.baselines.epaxos``): safety, liveness, latency,
execution order, restart, bad input, registry and codec.

The simulator checks EPaxos with the per-key checker (``Checker(per_key=True)``)
and the per-key state machine, which :class:`SimCluster` picks for it.
"""

import dataclasses
import random
from typing import Any

import pytest

from sdpaxos.baselines import epaxos
from sdpaxos.baselines.epaxos import (
    Accept,
    AcceptOK,
    AcceptShort,
    Commit,
    CommitRequest,
    CommitShort,
    CommitUpto,
    EPaxosReplica,
    InstanceRecord,
    PreAccept,
    PreAcceptOK,
    fast_quorum,
)
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import Overloaded
from sdpaxos.core.ready import Executed, Reply, ReplyKind
from sdpaxos.core.types import Command, ReplicaId, Slot, Wait
from sdpaxos.profiles import PAPER3, PAPER5, DelayProfile
from sdpaxos.protocols import protocol
from sdpaxos.sim.checkers import Checker, SafetyViolation
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.run import run_closed_loop
from sdpaxos.sim.statemachine import KeyedDigestRegister, keyed_payload
from sdpaxos.sim.workload import ClosedLoopClients

from .sweeps import two_crash_restarts

FAULTY = NetworkConfig(
    drop_probability=0.1, duplicate_probability=0.1, fifo=False, jitter_ms_max=30.0
)


def _run(profile: DelayProfile, **kwargs: Any) -> tuple[Any, SimCluster]:
    clusters: list[SimCluster] = []
    result = run_closed_loop(
        profile,
        protocol="epaxos",
        catch=False,
        cluster_hook=clusters.append,
        **kwargs,
    )
    assert result.ok, result.verdict
    return result, clusters[0]


# -- safety and liveness under drop, duplication and reordering ------------------------


@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
@pytest.mark.parametrize("conflict_pct", [0, 50, 100, None], ids=lambda c: f"conflict{c}")
@pytest.mark.parametrize("seed", [1, 7])
def test_safe_and_live_under_faults(
    profile: DelayProfile, conflict_pct: int | None, seed: int
) -> None:
    """``None``: every command has no key, so every pair interferes."""
    result, cluster = _run(
        profile,
        seed=seed,
        commands_per_region=20,
        clients_per_region=2,
        network=FAULTY,
        conflict_pct=conflict_pct,
    )
    assert all(s.count == 20 for s in result.stats.values())
    assert result.messages_dropped > 0
    counters = cluster.core_counters()
    assert counters["retransmits"] + counters["commit_requests"] > 0
    live = cluster.live_replicas()
    assert cluster.checker.executed_everywhere(live)
    digests = {sm.digest() for sm in cluster.state_machines}  # type: ignore[union-attr]
    assert len(digests) == 1  # the same final state everywhere


@pytest.mark.slow
@pytest.mark.parametrize("profile", [PAPER3, PAPER5], ids=lambda p: p.name)
@pytest.mark.parametrize("conflict_pct", [0, 5, 50, 100, None], ids=lambda c: f"conflict{c}")
def test_sweep_with_crashes(profile: DelayProfile, conflict_pct: int | None) -> None:
    """A longer sweep: more seeds and clients, heavier faults, two crash-restarts."""
    for seed in range(200, 215):
        rnd = random.Random(seed)

        hook = two_crash_restarts(profile.size, rnd)

        result = run_closed_loop(
            profile,
            protocol="epaxos",
            seed=seed,
            commands_per_region=30,
            clients_per_region=3,
            client_retry_ms=700.0,
            conflict_pct=conflict_pct,
            network=NetworkConfig(
                drop_probability=0.15, duplicate_probability=0.1, fifo=False, jitter_ms_max=50
            ),
            catch=False,
            cluster_hook=hook,
        )
        assert result.ok, (seed, result.verdict)


def test_waiting_for_execution_answers_with_the_result() -> None:
    cluster = SimCluster(PAPER3, SeededChooser(random.Random(3)), protocol="epaxos")
    clients = ClosedLoopClients(cluster, 10, wait=Wait.EXECUTED, conflict_pct=50)
    kinds: list[ReplyKind] = []
    cluster.reply_listeners.append(lambda r, reply, now: kinds.append(reply.kind))
    clients.start()
    cluster.run_for(20_000_000)
    assert clients.done()
    assert set(kinds) == {ReplyKind.EXECUTED}
    cluster.checker.check_liveness(cluster.live_replicas())


# -- latency ---------------------------------------------------------------------------------


def _fast_path_ms(profile: DelayProfile, r: int) -> float:
    """Leader plus its nearest fast-quorum-minus-one peers: the farthest of them."""
    rtts = sorted(profile.rtt_ms[r][p] for p in range(profile.size) if p != r)
    return rtts[fast_quorum(profile.size) - 2]


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        (PAPER3, {"CA": 20, "OR": 20, "OH": 52}),
        (PAPER5, {"CA": 52, "OR": 68, "OH": 68, "IRE": 125, "SEL": 146}),
    ],
    ids=["paper3", "paper5"],
)
def test_latency_at_zero_conflict_is_the_fast_path(
    profile: DelayProfile, expected: dict[str, float]
) -> None:
    result, cluster = _run(profile, commands_per_region=30, conflict_pct=0)
    for r, stats in result.stats.items():
        region = profile.regions[r]
        assert _fast_path_ms(profile, r) == expected[region]
        assert stats.mean_ms == pytest.approx(expected[region], rel=0.05), (region, stats)
    counters = cluster.core_counters()
    assert counters["slow_commits"] == 0 and counters["fast_commits"] > 0


def test_conflicts_take_the_slow_path_and_cost_latency() -> None:
    calm, _ = _run(PAPER5, commands_per_region=30, conflict_pct=0)
    busy, busy_cluster = _run(PAPER5, commands_per_region=30, conflict_pct=50)
    counters = busy_cluster.core_counters()
    assert counters["fast_commits"] > 0 and counters["slow_commits"] > 0
    for r in calm.stats:
        assert busy.stats[r].mean_ms > calm.stats[r].mean_ms
    assert busy_cluster.core_counters()["scc_instances_max"] >= 1


def test_thrifty_off_asks_every_peer_and_keeps_the_fast_path() -> None:
    result, _ = _run(
        PAPER5, commands_per_region=10, conflict_pct=0, config_overrides={"thrifty": False}
    )
    thrifty, _ = _run(PAPER5, commands_per_region=10, conflict_pct=0)
    assert result.messages_sent > thrifty.messages_sent
    for r, stats in result.stats.items():
        assert stats.mean_ms == pytest.approx(_fast_path_ms(PAPER5, r), rel=0.05)


# -- execution: strongly connected components ----------------------------------------------


class Recorder:
    """A state machine that remembers what it applied, in order."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []

    def apply(self, payload: bytes) -> bytes:
        self.applied.append(payload)
        return b""

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


def _replica(n: int = 3, me: int = 0, **config: Any) -> tuple[EPaxosReplica, Recorder]:
    sm = Recorder()
    cfg = ClusterConfig(replicas=n, **config)
    return EPaxosReplica(cfg, me, sm, random.Random(me), observe=True), sm


def _cmd(name: str, key: bytes | None = b"k") -> tuple[Command, ...]:
    return (Command(0, 0, name.encode(), key),)


def _commit(owner: int, index: int, seq: int, deps: tuple[int, ...], name: str) -> Commit:
    return Commit(owner, owner, index, seq, deps, _cmd(name))


def _deliver(replica: EPaxosReplica, messages: list[Commit]) -> list[bytes]:
    for m in messages:
        replica.step(m, 0.0)
        replica.ready()
    sm = replica.sm
    assert isinstance(sm, Recorder)
    return sm.applied


def test_a_cycle_executes_in_seq_order_on_every_replica() -> None:
    # (1,0) -> (2,0) -> (3,0) -> (1,0): one component, executed by seq
    # (ties by replica id): c (seq 1), a (seq 2, replica 1), b (seq 2, replica 2).
    a = _commit(1, 0, 2, (-1, -1, 0, -1, -1), "a")
    b = _commit(2, 0, 2, (-1, -1, -1, 0, -1), "b")
    c = _commit(3, 0, 1, (-1, 0, -1, -1, -1), "c")
    orders = []
    for perm in ([a, b, c], [c, b, a], [b, a, c]):
        replica, _ = _replica(n=5)
        first = _deliver(replica, perm[:2])
        assert first == []  # the cycle is not all committed yet
        orders.append(_deliver(replica, perm[2:]))
    assert orders == [[b"c", b"a", b"b"]] * 3


def test_a_chain_executes_the_dependency_first_whatever_the_seq() -> None:
    a = _commit(1, 0, 1, (-1, -1, 0), "a")  # depends on (2,0), lower seq
    b = _commit(2, 0, 9, (-1, -1, -1), "b")
    for perm in ([a, b], [b, a]):
        replica, _ = _replica()
        assert _deliver(replica, perm) == [b"b", b"a"]


def test_non_interfering_dependencies_do_not_hold_execution() -> None:
    """deps[q] covers only the instances of q that interfere."""
    other = Commit(2, 2, 0, 1, (-1, -1, -1), _cmd("x", b"other"))
    # a writes k and j; (2,1) writes k only, so it does not stand in for (2,0).
    a = Commit(1, 1, 0, 2, (-1, -1, 1), _cmd("a", b"k") + _cmd("a2", b"j"))
    b = _commit(2, 1, 1, (-1, -1, -1), "b")
    replica, _ = _replica()
    assert _deliver(replica, [a]) == []
    assert _deliver(replica, [b]) == [b"b"]  # (2,0) unknown: it might write j
    # Known now and another key: no edge, so a runs (and x, on its own).
    assert _deliver(replica, [other]) == [b"b", b"a", b"a2", b"x"]


def test_a_covering_instance_stands_in_for_the_ones_below_it() -> None:
    """(2,1) writes every key of a: its leader made it depend on whatever of
    replica 2 came before and interferes, so a need not look further."""
    a = _commit(1, 0, 2, (-1, -1, 1), "a")
    b = _commit(2, 1, 1, (-1, -1, -1), "b")
    replica, _ = _replica()
    assert _deliver(replica, [a, b]) == [b"b", b"a"]


def test_a_later_instance_of_the_same_leader_does_not_stand_in_for_earlier_ones() -> None:
    """b = (1,1) was pre-accepted somewhere after c = (1,2), so b depends on c
    and c on b. c stands in for nothing below b in b's own column: b must still
    wait for a = (1,0) (c's leader put a in c's deps through b, a cycle)."""
    a = _commit(1, 0, 1, (-1, -1, -1), "a")
    b = _commit(1, 1, 3, (-1, 2, -1), "b")
    c = _commit(1, 2, 2, (-1, 1, -1), "c")
    replica, _ = _replica()
    assert _deliver(replica, [b, c]) == []
    assert _deliver(replica, [a]) == [b"a", b"c", b"b"]


def test_a_long_chain_needs_no_recursion() -> None:
    replica, sm = _replica()
    length = 5000
    commits = [_commit(1, i, i + 1, (-1, i - 1, -1), f"c{i}") for i in range(length)]
    for m in commits[1:]:
        replica.step(m, 0.0)
    replica.ready()
    assert sm.applied == []
    _deliver(replica, commits[:1])
    assert sm.applied == [f"c{i}".encode() for i in range(length)]


def test_a_missing_dependency_is_asked_for() -> None:
    replica, _ = _replica(learn_ms=100.0)
    replica.step(_commit(1, 0, 2, (-1, -1, 0), "a"), 0.0)
    replica.ready()
    replica.tick(50.0)
    assert not any(isinstance(m, CommitRequest) for _, m in replica.ready().messages)
    replica.tick(150.0)
    asks = [(dst, m) for dst, m in replica.ready().messages if isinstance(m, CommitRequest)]
    assert {dst for dst, _ in asks} == {1, 2}
    assert all(m.instances == ((2, 0),) for _, m in asks)
    # A peer that has it answers with the commit.
    peer, _ = _replica(me=1)
    peer.step(_commit(2, 0, 1, (-1, -1, -1), "b"), 0.0)
    peer.ready()
    peer.step(asks[0][1], 0.0)
    answer = [m for _, m in peer.ready().messages]
    assert answer == [Commit(1, 2, 0, 1, (-1, -1, -1), _cmd("b"))]


def test_exactly_once_across_two_instances() -> None:
    cmd = Command(5, 1, b"once", b"k")
    replica, sm = _replica()
    replica.step(Commit(1, 1, 0, 1, (-1, -1, -1), (cmd,)), 0.0)
    replica.step(Commit(2, 2, 0, 2, (-1, 0, -1), (cmd,)), 0.0)
    rd = replica.ready()
    assert sm.applied == [b"once"]
    assert [e.duplicate for e in rd.executed] == [False, True]
    assert [(e.slot, e.owner, e.c_index) for e in rd.executed] == [(0, 1, 0), (1, 2, 0)]


# -- the leader's paths, message by message ------------------------------------------------


def _propose(replica: EPaxosReplica, *commands: Command) -> list[tuple[ReplicaId, Any]]:
    for c in commands:
        replica.propose(c)
    return replica.ready().messages


def test_fast_path_commits_on_agreeing_replies_and_answers_ready() -> None:
    leader, _ = _replica(n=5, rtt_ms=PAPER5.replica_rtt_ms())
    sent = _propose(leader, Command(1, 1, b"p", b"k1"), Command(2, 1, b"q", b"k2"))
    assert sorted(dst for dst, _ in sent) == [1, 2]  # CA's two nearest: OR, OH
    pre = sent[0][1]
    assert isinstance(pre, PreAccept) and len(pre.commands) == 2  # one batch
    leader.step(PreAcceptOK(1, 0, 0, pre.seq, pre.deps), 0.0)
    assert leader.ready().replies == []
    leader.step(PreAcceptOK(2, 0, 0, pre.seq, pre.deps), 0.0)
    rd = leader.ready()
    assert rd.replies == [Reply(1, 1, ReplyKind.READY), Reply(2, 1, ReplyKind.READY)]
    # The fast quorum holds the commands: its commit leaves them out (the
    # authors' thrifty CommitShort); the others get them in the commit.
    assert sorted(dst for dst, m in rd.messages if isinstance(m, Commit)) == [3, 4]
    shorts = [(dst, m) for dst, m in rd.messages if isinstance(m, CommitShort)]
    assert sorted(dst for dst, _ in shorts) == [1, 2]
    assert all(m == CommitShort(0, 0, pre.seq, pre.deps) for _, m in shorts)
    assert [type(r) for r in rd.persist] == [InstanceRecord]
    assert leader.stats.fast_commits == 1 and leader.stats.slow_commits == 0


def test_equal_round_trips_pick_the_fast_quorum_in_ring_order() -> None:
    """On a LAN every round trip is equal: each leader's quorum is its ring
    successors (as the SDPaxos core picks them), so quorums spread over the peers."""
    lan = tuple(tuple(0.0 if p == q else 0.2 for q in range(5)) for p in range(5))
    for me, want in ((0, [1, 2]), (3, [4, 0]), (4, [0, 1])):
        leader, _ = _replica(n=5, me=me, rtt_ms=lan)
        sent = _propose(leader, Command(1, 1, b"p", b"k"))
        assert sorted(dst for dst, _ in sent) == sorted(want), me


def test_a_full_queue_starts_several_instances_in_one_turn() -> None:
    leader, _ = _replica(n=3, c_batch_max=4)
    sent = _propose(leader, *(Command(1, i, b"p", b"k%d" % i) for i in range(1, 10)))
    pre = [m for _, m in sent if isinstance(m, PreAccept)]
    assert [(m.index, len(m.commands)) for m in pre] == [(0, 4), (1, 4), (2, 1)]


def test_a_differing_reply_takes_the_slow_path_with_merged_attributes() -> None:
    leader, _ = _replica(n=3)
    ((dst, pre),) = _propose(leader, Command(1, 1, b"p", b"k"))
    assert isinstance(pre, PreAccept)
    leader.step(PreAcceptOK(dst, 0, 0, pre.seq + 3, (-1, -1, 7)), 0.0)
    rd = leader.ready()
    # The peer answered the PreAccept, so it holds the commands: they are left out.
    accepts = [m for _, m in rd.messages if isinstance(m, Accept | AcceptShort)]
    assert accepts == [AcceptShort(0, 0, pre.seq + 3, (-1, -1, 7))]
    assert rd.replies == []
    leader.step(AcceptOK(dst, 0, 0), 0.0)
    rd = leader.ready()
    assert rd.replies == [Reply(1, 1, ReplyKind.READY)]
    assert leader.stats.slow_commits == 1


def test_a_retransmitted_accept_carries_the_commands() -> None:
    leader, _ = _replica(n=3, retransmit_ms=100.0)
    leader.tick(0.0)
    ((dst, pre),) = _propose(leader, Command(1, 1, b"p", b"k"))
    leader.step(PreAcceptOK(dst, 0, 0, pre.seq + 1, (-1, -1, 7)), 0.0)
    leader.ready()
    leader.tick(150.0)
    resent = [m for _, m in leader.ready().messages]
    assert resent and all(isinstance(m, Accept) for m in resent)
    assert all(m.commands == pre.commands for m in resent if isinstance(m, Accept))


def test_short_accept_and_commit_at_an_acceptor_that_holds_the_commands() -> None:
    acceptor, sm = _replica(n=3, me=1)
    acceptor.step(PreAccept(0, 0, 1, (-1, -1, -1), _cmd("y")), 0.0)
    acceptor.ready()
    acceptor.step(AcceptShort(0, 0, 4, (-1, -1, 2)), 0.0)
    rd = acceptor.ready()
    assert rd.messages == [(0, AcceptOK(1, 0, 0))]
    assert [(r.status, r.seq, r.deps, r.commands) for r in rd.persist] == [
        (epaxos.ACCEPTED, 4, (-1, -1, 2), _cmd("y"))
    ]
    acceptor.step(CommitShort(0, 0, 4, (-1, -1, -1)), 0.0)
    rd = acceptor.ready()
    assert [(r.status, r.seq, r.deps) for r in rd.persist] == [(epaxos.COMMITTED, 4, (-1, -1, -1))]
    assert sm.applied == [b"y"]


def test_short_accept_or_commit_of_an_unknown_instance_changes_nothing() -> None:
    """Without the commands nothing can be accepted or committed: the leader's
    retransmission (full Accept) or CommitUpto and CommitRequest bring them."""
    replica, sm = _replica(n=3, me=1)
    for m in (AcceptShort(0, 0, 4, (-1, -1, -1)), CommitShort(0, 0, 4, (-1, -1, -1))):
        replica.step(m, 0.0)
        rd = replica.ready()
        assert not rd.messages and not rd.persist and sm.applied == []
    assert replica.stats.stale == 2
    replica.step(CommitUpto(0, 1), 0.0)
    asks = [m for _, m in replica.ready().messages]
    assert asks == [CommitRequest(1, ((0, 0),))]


def test_an_acceptor_merges_its_interference_and_answers_a_resend_alike() -> None:
    acceptor, _ = _replica(n=3, me=1)
    acceptor.step(PreAccept(2, 0, 1, (-1, -1, -1), _cmd("x")), 0.0)
    acceptor.ready()
    acceptor.step(PreAccept(0, 0, 1, (-1, -1, -1), _cmd("y")), 0.0)
    rd = acceptor.ready()
    assert rd.messages == [(0, PreAcceptOK(1, 0, 0, 2, (-1, -1, 0)))]
    assert [type(r) for r in rd.persist] == [InstanceRecord]  # durable before the answer
    acceptor.step(PreAccept(0, 0, 1, (-1, -1, -1), _cmd("y")), 0.0)
    assert acceptor.ready().messages == [(0, PreAcceptOK(1, 0, 0, 2, (-1, -1, 0)))]
    # Another key does not interfere; no key interferes with everything.
    acceptor.step(PreAccept(0, 1, 1, (-1, -1, -1), _cmd("z", b"other")), 0.0)
    assert acceptor.ready().messages == [(0, PreAcceptOK(1, 0, 1, 1, (-1, -1, -1)))]
    acceptor.step(PreAccept(0, 2, 1, (-1, -1, -1), _cmd("w", None)), 0.0)
    assert acceptor.ready().messages == [(0, PreAcceptOK(1, 0, 2, 3, (1, -1, 0)))]


def test_a_leader_retransmits_to_every_silent_peer() -> None:
    leader, _ = _replica(n=5, rtt_ms=PAPER5.replica_rtt_ms(), retransmit_ms=100.0)
    leader.tick(0.0)
    _propose(leader, Command(1, 1, b"p", b"k"))
    leader.tick(50.0)
    assert not leader.ready().messages
    leader.tick(120.0)
    resent = leader.ready().messages
    assert sorted(dst for dst, m in resent if isinstance(m, PreAccept)) == [1, 2, 3, 4]


# -- restart from persisted records ------------------------------------------------------------


def test_restart_drives_unfinished_instances_again_and_reexecutes() -> None:
    leader, _ = _replica(n=3)
    leader.tick(0.0)
    leader.propose(Command(1, 1, b"p", b"k"))
    records: list[Any] = list(leader.ready().persist)
    leader.step(Commit(2, 2, 0, 1, (-1, -1, -1), _cmd("theirs")), 0.0)
    records += leader.ready().persist
    assert [(r.owner, r.index, r.status) for r in records] == [(0, 0, 1), (2, 0, 3)]
    # The process dies; a new one starts from its records.
    sm = Recorder()
    again = EPaxosReplica(ClusterConfig(replicas=3), 0, sm, random.Random(0), True, records)
    assert again.next_index == 1 and 0 in again.inflight
    rd = again.ready()
    assert sm.applied == [b"theirs"]  # committed: executed again from scratch
    assert [e.slot for e in rd.executed] == [Slot(0)]
    again.tick(0.0)
    resent = again.ready().messages
    assert sorted(d for d, m in resent if isinstance(m, PreAccept)) == [1, 2]
    again.propose(Command(1, 2, b"q", b"k"))
    started = [m for _, m in again.ready().messages if isinstance(m, PreAccept)]
    assert [m.index for m in started] == [1]  # numbering goes on


def test_crash_and_restart_in_the_simulator() -> None:
    def hook(cluster: SimCluster) -> None:
        cluster.call_at(400_000, lambda: cluster.crash(1), "crash")
        cluster.call_at(900_000, lambda: cluster.restart(1), "restart")

    result = run_closed_loop(
        PAPER3,
        protocol="epaxos",
        seed=4,
        commands_per_region=25,
        client_retry_ms=500.0,
        conflict_pct=50,
        network=NetworkConfig(drop_probability=0.05, fifo=False, jitter_ms_max=10.0),
        catch=False,
        cluster_hook=hook,
    )
    assert result.ok, result.verdict
    assert all(s.count == 25 for s in result.stats.values())


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        PreAccept(0, 0, 1, (-1, -1, -1), _cmd("self")),  # from ourselves
        PreAccept(7, 0, 1, (-1, -1, -1), _cmd("who")),  # unknown sender
        PreAccept(1, -1, 1, (-1, -1, -1), _cmd("neg")),  # negative instance
        PreAccept(1, 0, 1, (-1, -1), _cmd("short")),  # deps of the wrong length
        PreAccept(1, 0, 1, (-1, 1 << 50, -1), _cmd("far")),  # a dependency far off
        PreAccept(1, 0, 1, (-1, -1, -1), ()),  # no command
        Accept(2, 0, -5, (-1, -1, -1), _cmd("seq")),  # negative seq
        Commit(1, 9, 0, 1, (-1, -1, -1), _cmd("owner")),  # unknown owner
        Commit(1, 0, 3, 1, (-1, -1, -1), _cmd("mine")),  # an instance of ours never started
        PreAcceptOK(1, 0, 4, 1, (-1, -1, -1)),  # for an instance we do not run
        PreAcceptOK(1, 2, 0, 1, (-1, -1, -1)),  # for another leader's instance
        AcceptOK(2, 0, 0),  # stale
        CommitRequest(1, ((9, 0), (-1, 2))),  # nothing to answer
        CommitUpto(1, -3),
        CommitShort(1, 0, 1, (-1, -1)),  # deps of the wrong length
        AcceptShort(2, 1 << 50, 1, (-1, -1, -1)),  # an instance far off
        "not a message",
    ],
)
def test_bad_or_stale_input_is_ignored(message: Any) -> None:
    replica, sm = _replica()
    replica.step(message, 0.0)
    rd = replica.ready()
    assert not rd.messages and not rd.persist and not rd.replies and sm.applied == []
    assert replica.stats.rejected + replica.stats.stale == 1


# -- registry, codec, per-key checker ------------------------------------------------------


def test_the_registry_builds_epaxos_replicas() -> None:
    spec = protocol("epaxos")
    assert spec.title == "EPaxos" == epaxos.TITLE
    assert spec.message_types == epaxos.MESSAGE_TYPES
    replica = spec.make_replica(
        ClusterConfig(replicas=3), 1, Recorder(), random.Random(1), True, None
    )
    assert isinstance(replica, EPaxosReplica) and replica.id == 1


def test_the_codec_round_trips_every_message_type() -> None:
    codec = protocol("epaxos").codec
    cmds = (Command(1, 2, b"x", b"k"), Command(0, 0, b"", None))
    samples = [
        PreAccept(1, 2, 3, (-1, 0, 5), cmds),
        PreAcceptOK(1, 0, 2, 3, (-1, 0, 5)),
        Accept(1, 2, 3, (-1, 0, 5), cmds),
        AcceptOK(1, 0, 2),
        Commit(1, 0, 2, 3, (-1, 0, 5), cmds),
        CommitRequest(1, ((0, 1), (2, 3))),
        CommitUpto(1, 10),
        CommitShort(1, 2, 3, (-1, 0, 5)),
        AcceptShort(1, 2, 3, (-1, 0, 5)),
    ]
    assert {type(m) for m in samples} == set(epaxos.MESSAGE_TYPES)
    assert codec.decode_batch(codec.encode_batch(samples)) == samples
    for m in samples:
        assert codec.decode(codec.encode(m)) == m


def _executed(slot: int, owner: int, name: str, key: bytes | None) -> Executed:
    return Executed(
        Slot(slot), ReplicaId(owner), 0, Command(owner + 1, 1, name.encode(), key), b"", False
    )


def test_the_per_key_checker_allows_other_keys_in_any_order() -> None:
    checker = Checker(2, per_key=True)
    a, b = _executed(0, 0, "a", b"x"), _executed(0, 1, "b", b"y")
    for e in (a, b):
        checker.proposed(e.owner, e.command)
    checker.executed(0, [a, dataclasses.replace(b, slot=Slot(1))])
    checker.executed(1, [b, dataclasses.replace(a, slot=Slot(1))])


@pytest.mark.parametrize("second_key", [b"x", None])
def test_the_per_key_checker_catches_interfering_commands_out_of_order(
    second_key: bytes | None,
) -> None:
    checker = Checker(2, per_key=True)
    a, b = _executed(0, 0, "a", b"x"), _executed(0, 1, "b", second_key)
    for e in (a, b):
        checker.proposed(e.owner, e.command)
    checker.executed(0, [a, dataclasses.replace(b, slot=Slot(1))])
    with pytest.raises(SafetyViolation):
        checker.executed(1, [b, dataclasses.replace(a, slot=Slot(1))])


def test_the_per_key_checker_keeps_real_time_order_between_interfering_commands() -> None:
    checker = Checker(1, per_key=True)
    a, b, c = (_executed(0, i, n, b"x" if n != "c" else b"y") for i, n in enumerate("abc"))
    checker.proposed(0, a.command)
    checker.replied(0, Reply(a.command.client_id, 1, ReplyKind.READY))
    checker.proposed(0, b.command)
    checker.proposed(0, c.command)
    checker.executed(0, [c])  # another key: free to go first
    with pytest.raises(SafetyViolation, match="real-time"):
        checker.executed(0, [dataclasses.replace(b, slot=Slot(1))])


def test_the_keyed_state_machine_depends_only_on_interfering_order() -> None:
    x1, x2 = keyed_payload(b"x", b"1"), keyed_payload(b"x", b"2")
    y1, none = keyed_payload(b"y", b"1"), b"unkeyed"
    one, two = KeyedDigestRegister(), KeyedDigestRegister()
    r1 = [one.apply(p) for p in (x1, y1, x2, none)]
    r2 = [two.apply(p) for p in (y1, x1, x2, none)]
    assert sorted(r1) == sorted(r2) and one.digest() == two.digest()
    three = KeyedDigestRegister()
    for p in (x2, x1, y1, none):
        three.apply(p)
    assert three.digest() != one.digest()
    four = KeyedDigestRegister()
    four.restore(one.snapshot())
    assert four.digest() == one.digest() and four.apply(x1) == one.apply(x1)


def test_reads_go_through_the_log_and_the_queue_is_bounded() -> None:
    replica, _ = _replica(propose_queue_max=1)
    replica.read(7, b"k", 0.0)
    assert [(r.read_id, r.ok) for r in replica.ready().reads] == [(7, False)]
    replica.propose(Command(1, 1, b"p", b"k"))
    with pytest.raises(Overloaded):
        replica.propose(Command(1, 2, b"q", b"k"))
