"""The simulator's hooks for aimed faults: crash mid-batch, message rules, tracing,
reads and hand-overs.

Exact mechanics are shown with the fake replica (``fakes.py``: one ``Ping`` per
peer per proposal, READY at once); tracing, reads and hand-overs need the real
core.
"""

from typing import Any

import pytest

from sdpaxos.core import Command
from sdpaxos.core.messages import Heartbeat, OAccept
from sdpaxos.core.ready import ReadResult
from sdpaxos.sim import PAPER3, BenignChooser, SimCluster
from sdpaxos.sim.cluster import DROP, CrashPlan

from .fakes import FakeReplica, PickleCodec, Ping, fake_factory


def fake_cluster(**kwargs: Any) -> SimCluster:
    return SimCluster(
        PAPER3, BenignChooser(), replica_factory=fake_factory, codec=PickleCodec(), **kwargs
    )


def fake(cluster: SimCluster, r: int) -> FakeReplica:
    replica = cluster.replicas[r]
    assert isinstance(replica, FakeReplica)
    return replica


def test_crash_in_drain_persists_sends_a_prefix_and_gives_no_reply() -> None:
    cluster = fake_cluster()
    replies: list[int] = []
    cluster.reply_listeners.append(lambda r, reply, now: replies.append(reply.seq))

    def cut_short(r: int, command: Command, now_us: int) -> None:
        cluster.crash_in_drain(r, CrashPlan(keep=1))

    cluster.propose_listeners.append(cut_short)
    cluster.propose_at(1_000, 0, Command(1, 1, b"x"))
    cluster.run_until(100_000)
    assert not cluster.alive(0) and cluster.drain_crashes == 1 and cluster.crashes == 1
    assert fake(cluster, 1).received == [Ping(0, 1)]  # the first of its two pings left
    assert fake(cluster, 2).received == []
    assert replies == []  # dead before it answered


def test_crash_in_drain_stops_before_a_message_type() -> None:
    cluster = fake_cluster()
    fake(cluster, 0).send(1, "first")
    fake(cluster, 0).send(2, Ping(0, 99))
    fake(cluster, 0).send(1, "never")
    cluster.crash_in_drain(0, CrashPlan(stop_before=(Ping,)))
    cluster.run_until(100_000)  # the next tick drains the batch
    assert not cluster.alive(0)
    assert fake(cluster, 1).received == ["first"] and fake(cluster, 2).received == []


def test_a_crash_aimed_at_an_event_without_effects_happens_after_it() -> None:
    cluster = fake_cluster()
    cluster.crash_in_drain(1)
    cluster.run_until(20_000)  # replica 1's next tick has no effects
    assert not cluster.alive(1) and cluster.drain_crashes == 1


def test_message_rules_drop_or_hold_out_of_order() -> None:
    cluster = fake_cluster()

    def rule(src: int, dst: int, message: Any) -> int | None:
        if message == "lost":
            return DROP
        if message == "late":
            return 50_000
        return None

    cluster.message_rules.append(rule)
    for message in ("late", "lost", "on time"):
        fake(cluster, 0).send(1, message)
    cluster.run_until(30_000)
    assert fake(cluster, 1).received == ["on time"]  # overtook the held one
    cluster.run_until(100_000)
    assert fake(cluster, 1).received == ["on time", "late"]
    assert (cluster.rule_dropped, cluster.rule_held) == (1, 1)


def test_tracing_reads_and_a_hand_over_with_the_real_core() -> None:
    cluster = SimCluster(PAPER3, BenignChooser(), traced=True)
    events: list[tuple[int, str]] = []
    stepped: list[type] = []
    results: list[tuple[int, ReadResult]] = []
    cluster.trace_listeners.append(lambda r, event, fields: events.append((r, event)))
    cluster.step_listeners.append(lambda r, message: stepped.append(type(message)))
    cluster.read_listeners.append(lambda r, result, now: results.append((r, result)))
    command = Command(1, 1, b"w", key=b"k")
    cluster.propose_at(1_000, 1, command)
    cluster.run_until(1_000_000)
    assert (1, "Ready") in events and (0, "AllocateO") in events
    assert OAccept in stepped and Heartbeat in stepped
    read_id = cluster.new_read_id()
    cluster.read_at(cluster.now_us, 2, read_id, b"k")  # not the sequencer: asks it
    cluster.run_until(cluster.now_us + 500_000)
    assert results == [(2, ReadResult(read_id, True))]
    assert cluster.checker.reads_ok == 1 and cluster.reads_issued == 1
    assert cluster.transfer_sequencer(0, 2)
    assert not cluster.transfer_sequencer(1, 2)  # not the sequencer: refused
    cluster.run_until(cluster.now_us + 3_000_000)
    assert (2, "BecomeSequencer") in events
    assert cluster.believed_sequencer() == 2 and cluster.handovers == 1


def test_tracing_needs_the_real_core() -> None:
    with pytest.raises(ValueError, match="real core"):
        fake_cluster(traced=True)
