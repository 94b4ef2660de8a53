"""Membership changes on the explicit harness: add, remove, replace, and faults in between.

Each test drives :class:`~sdpaxos.sim.members.MemberNet` (real core, explicit
delivery) through one change and checks what ``docs/membership.md`` promises:
every node executes the same command in each global slot, nothing twice, every
acknowledged command is executed, the new epoch's members end with the same
whole state, and a node outside the membership never counts.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from sdpaxos.core.member import EpochMessage, NotMemberError, Role
from sdpaxos.core.membership import MembershipOp, NodeInfo, OpKind
from sdpaxos.core.messages import Heartbeat, OAck
from sdpaxos.core.ready import ReplyKind
from sdpaxos.core.types import STOP, ReplicaId, Slot, View
from sdpaxos.sim.members import MemberNet


def add_learner(net: MemberNet, at: int, node: int, op_id: int) -> None:
    net.add_node(node)
    assert net.change(at, MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(node), op_id=op_id)) == (
        True,
        f"node {node} is a learner",
    )


def assert_agreement(net: MemberNet) -> None:
    """One command list per global slot across every node; none executed twice."""
    by_slot: dict[int, list[tuple[int, int]]] = {}
    for node, entries in net.executed.items():
        seen: set[tuple[int, int]] = set()
        mine: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for e in entries:
            key = (e.command.client_id, e.command.seq)
            if not e.duplicate:
                assert key not in seen, f"node {node} executed {key} twice"
                seen.add(key)
            mine[e.slot].append(key)
        for slot, keys in mine.items():
            other = by_slot.setdefault(slot, keys)
            assert other == keys, f"slot {slot}: {other} elsewhere, {keys} at node {node}"


def members_agree(net: MemberNet) -> list[bytes]:
    """Every live member of the newest epoch holds the same state; that state."""
    epoch = max(n.epoch for n in net.nodes.values())
    members = [
        i
        for i, n in net.nodes.items()
        if i not in net.down and n.epoch == epoch and n.role is Role.MEMBER
    ]
    assert members
    logs = {i: net.machines[i].log for i in members}
    first = logs[members[0]]
    assert all(log == first for log in logs.values()), logs
    memberships = {net.nodes[i].membership for i in members}
    assert len(memberships) == 1
    return first


def test_replace_a_member_by_a_learner() -> None:
    net = MemberNet.build(3)
    net.propose(1, 7, b"a")
    add_learner(net, 0, 3, 1)
    net.settle(600)
    assert net.nodes[3].role is Role.LEARNER
    # It installed the state of every executed slot (the members it pulled from know).
    lags = {net.nodes[i].learner_lag(3) for i in range(3)} - {None}
    assert lags == {0}
    verdict = net.change(1, MembershipOp(OpKind.REPLACE, target=2, node=NodeInfo(3), op_id=2))
    assert verdict == (True, "epoch 1 will have members [0, 1, 3] (sequencer 0)")
    net.settle(1000)
    assert [net.nodes[i].epoch for i in range(4)] == [1, 1, 1, 1]
    assert [net.nodes[i].role for i in range(4)] == [Role.MEMBER] * 2 + [Role.REMOVED, Role.MEMBER]
    net.propose(3, 8, b"b")
    net.settle(300)
    net.propose(0, 9, b"c")
    net.settle(600)
    assert members_agree(net) == [b"a", b"b", b"c"]
    assert net.machines[2].log == [b"a"]  # the removed node stops at the stop
    assert (8, 1, ReplyKind.EXECUTED) in net.answered(3)
    assert_agreement(net)
    with pytest.raises(NotMemberError, match="no member of epoch 1"):
        net.propose(2, 10, b"x")


@pytest.mark.parametrize("sizes", [(3, 4, 5), (3, 4)])
def test_grow_one_replica_at_a_time_through_an_even_size(sizes: tuple[int, ...]) -> None:
    net = MemberNet.build(sizes[0])
    client = 10
    for step, size in enumerate(sizes[1:], start=1):
        new = size - 1
        add_learner(net, 0, new, 10 * step)
        net.settle(400)
        verdict = net.change(0, MembershipOp(OpKind.PROMOTE, target=new, op_id=10 * step + 1))
        assert verdict[0], verdict
        net.settle(800)
        assert all(net.nodes[i].epoch == step for i in range(size))
        assert len(net.nodes[0].membership.members) == size
        for at in range(size):  # every member leads commands in the new size
            client += 1
            net.propose(at, client, f"w{client}".encode())
        net.settle(800)
        for at in range(size):
            assert net.answered(at)[-1][2] is ReplyKind.EXECUTED
    log = members_agree(net)
    assert len(log) == sum(sizes[1:])
    assert_agreement(net)


def test_remove_the_sequencer_moves_the_role_without_an_election() -> None:
    net = MemberNet.build(5)
    net.propose(2, 7, b"a")
    net.settle(300)
    assert net.nodes[0].is_sequencer
    views_before = {i: net.nodes[i].replica.view for i in range(5)}  # type: ignore[union-attr]
    assert net.change(3, MembershipOp(OpKind.REMOVE, target=0, op_id=1))[0]
    net.settle(800)
    assert net.nodes[0].role is Role.REMOVED
    assert net.nodes[1].is_sequencer and net.nodes[1].membership.ids == (1, 2, 3, 4)
    assert all(net.nodes[i].replica.view == 0 for i in range(1, 5))  # type: ignore[union-attr]
    assert views_before == dict.fromkeys(range(5), 0)
    net.propose(4, 8, b"b")
    net.settle(600)
    assert members_agree(net) == [b"a", b"b"]
    assert_agreement(net)


def test_commands_in_flight_at_the_stop_run_once_in_the_next_epoch() -> None:
    net = MemberNet.build(3)
    net.settle(100)
    # Start a change and, before anything is delivered, a burst of commands at
    # every node: some are ordered before the stop, the rest are carried over.
    node = net.nodes[1]
    node.propose_change(MembershipOp(OpKind.REMOVE, target=2, op_id=1), 99, 1)
    sent = [net.propose(i % 3, 100 + i, f"c{i}".encode()) for i in range(12)]
    net.settle(1500)
    assert net.nodes[0].epoch == 1
    log = members_agree(net)
    applied = [c.payload for c in sent if c.payload in log]
    acknowledged = {
        (c, s) for i in range(3) for c, s, kind in net.answered(i) if kind is ReplyKind.EXECUTED
    }
    refused = {
        (c, s) for i in range(3) for c, s, kind in net.answered(i) if kind is ReplyKind.NOT_MEMBER
    }
    for c in sent:
        key = (c.client_id, c.seq)
        assert (key in acknowledged) != (key in refused), key
        if key in acknowledged:
            assert c.payload in log
    assert len(applied) == len(set(applied)) == len(log)
    assert refused <= {(c.client_id, c.seq) for c in sent[2::3]}  # only node 2's clients
    assert_agreement(net)


def test_sequencer_crashes_after_the_change_executes_and_before_the_stop() -> None:
    net = MemberNet.build(3)
    add_learner(net, 1, 3, 1)
    net.settle(400)
    net.nodes[1].propose_change(MembershipOp(OpKind.PROMOTE, target=3, op_id=2), 99, 2)
    net.flush(1)
    # Deliver until the sequencer has executed the change, then crash it at once.
    assert net.deliver_until(lambda: net.nodes[0].membership.pending is not None, ms=2000)
    olog = net.nodes[0].replica.ctx.olog  # type: ignore[union-attr]
    assert STOP not in olog.owner
    net.crash(0)
    net.settle(3000)  # a view change in epoch 0; the new sequencer allocates the stop
    assert net.nodes[1].epoch == 1 and net.nodes[3].role is Role.MEMBER
    net.restart(0)
    net.settle(2000)  # it restarts in epoch 0, is told of epoch 1, and installs its base
    assert net.nodes[0].epoch == 1 and net.nodes[0].role is Role.MEMBER
    net.propose(0, 5, b"after")
    net.settle(1500)
    assert members_agree(net)[-1:] == [b"after"]
    assert_agreement(net)


def test_a_member_crashes_right_after_starting_the_epoch_and_restarts_in_it() -> None:
    net = MemberNet.build(3)
    assert net.change(0, MembershipOp(OpKind.REMOVE, target=1, op_id=1))[0]
    assert net.run_until(lambda: net.nodes[2].epoch == 1, ms=2000)
    net.crash(2)
    net.restart(2)
    assert net.nodes[2].epoch == 1 and net.nodes[2].role is Role.MEMBER
    net.propose(2, 5, b"x")
    net.settle(2000)
    assert members_agree(net) == [b"x"]
    assert_agreement(net)


def test_a_removed_node_that_keeps_sending_never_counts() -> None:
    net = MemberNet.build(3)
    assert net.change(0, MembershipOp(OpKind.REMOVE, target=2, op_id=1))[0]
    net.settle(600)
    assert net.nodes[2].role is Role.REMOVED
    before = {i: (net.nodes[i].membership, list(net.machines[i].log)) for i in (0, 1)}
    dropped = net.nodes[0].dropped
    # Forged as if it still had position 1 in epoch 1, and in its old epoch.
    forged = [
        EpochMessage(1, 2, OAck(ReplicaId(1), View(0), Slot(50))),
        EpochMessage(1, 2, Heartbeat(ReplicaId(1), View(9), Slot(0), 1, Slot(0))),
        EpochMessage(0, 2, Heartbeat(ReplicaId(2), View(9), Slot(0), 1, Slot(0))),
    ]
    for msg in forged:
        net.pending.append((2, 0, msg))
    net.deliver_all()
    assert net.nodes[0].dropped == dropped + 3
    assert net.nodes[0].replica.view == 0  # type: ignore[union-attr]
    net.propose(1, 3, b"y")
    net.settle(600)
    after = {i: (net.nodes[i].membership, list(net.machines[i].log)) for i in (0, 1)}
    assert after == {i: (before[i][0], [*before[i][1], b"y"]) for i in (0, 1)}


def test_garbage_from_a_peer_is_dropped() -> None:
    net = MemberNet.build(3)
    net.pending.append((1, 0, object()))
    net.pending.append((1, 0, EpochMessage(0, 1, "not a message")))  # type: ignore[arg-type]
    net.deliver_all()
    assert net.nodes[0].dropped == 2
    net.propose(0, 1, b"z")
    net.settle(300)
    assert members_agree(net) == [b"z"]


def test_a_member_that_lost_its_disk_never_votes_and_is_replaced() -> None:
    net = MemberNet.build(3)
    net.propose(0, 1, b"a")
    net.settle(300)
    net.wipe(1)
    net.restart(1)
    net.settle(1000)
    assert net.nodes[1].role is Role.LOST
    assert net.nodes[1].replica is None
    restarted_at = len(net.delivered)
    net.settle(500)
    assert not any(
        src == 1 and isinstance(m, EpochMessage) for src, _, m in net.delivered[restarted_at:]
    )
    add_learner(net, 0, 5, 7)
    net.settle(400)
    assert net.change(0, MembershipOp(OpKind.REPLACE, target=1, node=NodeInfo(5), op_id=8))[0]
    net.settle(800)
    net.propose(5, 2, b"b")
    net.settle(600)
    assert members_agree(net) == [b"a", b"b"]
    assert net.nodes[0].membership.ids == (0, 5, 2) and 1 in net.nodes[0].membership.retired


def test_a_learner_takes_no_commands_and_a_waiting_node_no_state() -> None:
    net = MemberNet.build(3)
    net.add_node(4)
    net.settle(600)
    assert net.nodes[4].role is Role.WAITING and net.storages[4].load_snapshot() is None
    with pytest.raises(NotMemberError, match="waiting"):
        net.propose(4, 1, b"x")
    add_learner(net, 0, 4, 1)
    net.settle(600)
    assert net.nodes[4].role is Role.LEARNER
    assert net.storages[4].load_snapshot() is not None  # durable: it may be promoted
    with pytest.raises(NotMemberError, match="learner"):
        net.propose(4, 1, b"x")


# ------------------------------------------------------------- each stop rule on its own


def test_the_sequencer_allocates_nothing_after_the_stop() -> None:
    net = MemberNet.build(3)
    net.nodes[1].propose_change(MembershipOp(OpKind.REMOVE, target=2, op_id=1), 99, 1)
    net.flush(1)
    seq = net.nodes[0]
    assert net.deliver_until(lambda: STOP in seq.replica.ctx.olog.owner, ms=2000)  # type: ignore[union-attr]
    olog = seq.replica.ctx.olog  # type: ignore[union-attr]
    stop_at = olog.owner.index(STOP)
    # Commands reach the sequencer before the stop is committed: it orders none of them.
    net.pending = [p for p in net.pending if p[1] != 0]  # hold the O-ACKs back
    for at in (1, 2):
        net.propose(at, 10 + at, b"late")
    net.pending = [p for p in net.pending if p[1] == 0]
    net.deliver_all()
    assert olog.owner[stop_at + 1 : olog.acc_upto - olog.base] == []
    assert olog.acc_upto == olog.base + stop_at + 1


def test_a_rebuilt_range_ends_at_its_first_stop() -> None:
    from sdpaxos.core.view_change import VoteState, rebuild_assignment_log

    votes = {
        1: VoteState(((0, 0, 1, 1), (1, 0, STOP, 0), (2, 0, 2, 1)), (-1, 0, 0)),
        2: VoteState(((0, 0, 1, 1),), (-1, 0, 0)),
    }
    out = rebuild_assignment_log(replicas=3, o_from=0, votes=votes, covered_before=[0, 0, 0])
    assert out.values == [(1, 1), (STOP, 0)]


def test_a_leader_counts_nothing_after_a_stop_as_ready() -> None:
    """Were an O-accept to carry a slot after a stop (no correct sequencer sends
    one), the leader still would not call the command in it READY."""
    from sdpaxos.core.messages import OAccept
    from sdpaxos.sim.explicit import Net

    net = Net.build(3, sequencer=0)
    net.propose(1, client=7, seq=1, payload=b"w")
    net.drop_where(lambda src, dst, msg: dst == 0)  # the sequencer never hears of it
    net.deliver_all()
    forged = OAccept(ReplicaId(0), View(0), Slot(0), ((STOP, 0), (ReplicaId(1), 1)), Slot(0), False)
    net.pending.append((0, 1, forged))
    net.deliver_all()
    assert net.ready_ids(1) == []
    assert net.replicas[1].ctx.olog.owner[:2] == [STOP, 1]  # it did accept the values


def test_the_harness_docstring_runs() -> None:
    import doctest

    import sdpaxos.sim.members

    result = doctest.testmod(sdpaxos.sim.members, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_a_snapshot_with_a_bad_session_table_changes_nothing() -> None:
    """A late member fetches a newer epoch's base whose session table is bad: it
    is refused before the node changes anything (its replica, role, epoch)."""
    from dataclasses import replace

    from sdpaxos.core.messages import StateChunk
    from sdpaxos.core.storage import encode_snapshot

    net = MemberNet.build(3)
    assert net.change(0, MembershipOp(OpKind.REMOVE, target=2, op_id=1))[0]
    net.settle(600)
    base = net.nodes[0].newest
    assert base is not None and base[0] == 1
    late = MemberNet.build(3)  # a node of epoch 0 that never heard of epoch 1
    node = late.nodes[1]
    replica, dropped = node.replica, node.dropped
    bad = encode_snapshot(replace(base[1], sessions=((b"not", 1, b"a table"),)))
    node.step(StateChunk(0, 1, 0, 5, 0, len(bad), bad), late.now_ms)
    assert (node.epoch, node.role, node.replica, node.dropped) == (
        0,
        Role.MEMBER,
        replica,
        dropped + 1,
    )
