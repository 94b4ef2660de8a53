"""How fast the members go from one epoch to the next (``docs/membership.md`` 4.6).

Two rules of the switch, each pinned on the explicit harness:

- every acceptor acknowledges the stop to every member, and a member that is
  not the sequencer commits the stop itself once a majority acknowledged it,
  without waiting for the sequencer's O-commit (half a round trip later);
- a member still in epoch e that gets a message of epoch e + 1 while a change
  is pending holds it and takes it once it starts e + 1 itself, instead of
  dropping it (a retransmission later) and fetching the newer state.
"""

from __future__ import annotations

from typing import Any

import pytest

from sdpaxos.core.member import EpochMessage, Role
from sdpaxos.core.membership import MembershipOp, NodeInfo, OpKind
from sdpaxos.core.messages import CAccept, CAck, OCommit, StatePull
from sdpaxos.core.types import STOP, CIndex, Command, ReplicaId, View
from sdpaxos.sim.members import MemberNet


def _inner(msg: Any) -> Any:
    return msg.msg if isinstance(msg, EpochMessage) else msg


def _is_stop_commit(src: int, msg: Any) -> bool:
    inner = _inner(msg)
    return (
        src == 0
        and isinstance(inner, OCommit)
        and any(owner == STOP for _, _, owner, _ in inner.entries)
    )


def _grown(net: MemberNet, new: int = 3) -> None:
    """Node ``new`` a learner with the state, about to be promoted (N -> N + 1)."""
    net.add_node(new)
    assert net.change(0, MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(new), op_id=1))[0]
    net.settle(600)
    assert net.nodes[new].has_state


@pytest.mark.parametrize("n", [3, 5])
def test_a_member_starts_the_next_epoch_from_the_stops_acks_alone(n: int) -> None:
    """At N = 5 a member needs another's acknowledgement besides its own and the
    sequencer's (a majority of 3): the acks to every member are what it uses."""
    net = MemberNet.build(n)
    net.propose(1, 7, b"before")
    net.settle(300)
    _grown(net, n)
    others = range(1, n)
    start = len(net.delivered)
    assert net.change(0, MembershipOp(OpKind.PROMOTE, target=n, op_id=2))[0]
    # The sequencer's O-commit of the stop never reaches anyone: the other
    # members must learn the stop chosen from the acknowledgements.
    end = net.now_ms + 2_000
    while net.now_ms < end and not all(net.nodes[i].epoch == 1 for i in others):
        if net.pending and _is_stop_commit(net.pending[0][0], net.pending[0][2]):
            net.pending.pop(0)
        elif net.pending:
            net.deliver_one()
        else:
            net.now_ms += net.protocol.tick_ms
            for i, n in net.nodes.items():
                n.tick(net.now_ms)
                net.flush(i)
    assert [net.nodes[i].epoch for i in others] == [1] * (n - 1)
    assert not any(_is_stop_commit(src, msg) for src, _, msg in net.delivered)
    # They executed the stop themselves: none fetched the new epoch's state.
    pulls = [
        (k, src, dst, msg)
        for k, (src, dst, msg) in enumerate(net.delivered)
        if isinstance(msg, StatePull) and k >= start
    ]
    assert not [p for p in pulls if p[1] in others], pulls
    net.propose(2, 8, b"after")
    net.settle(800)
    for i in range(n + 1):
        assert net.machines[i].log == [b"before", b"after"], i


def test_a_message_of_the_next_epoch_is_held_until_the_member_starts_it() -> None:
    net = MemberNet.build(3)
    _grown(net)
    net.propose(0, 99, b"x")  # (any traffic; the change follows)
    assert net.change(0, MembershipOp(OpKind.PROMOTE, target=3, op_id=2))[0]
    # Node 1 knows the change is pending, and still runs epoch 0.
    assert net.deliver_until(lambda: net.nodes[1].membership.pending is not None, ms=1_000)
    node = net.nodes[1]
    assert node.epoch == 0 and node.role is Role.MEMBER
    # Node 0 (position 0 of epoch 1) proposes in epoch 1 before node 1 started it.
    early = EpochMessage(
        1, 0, CAccept(ReplicaId(0), View(0), ReplicaId(0), CIndex(0), 0, (Command(5, 1, b"e"),))
    )
    dropped = node.dropped
    node.step(early, net.now_ms)
    assert list(node.early.held) == [early] and node.dropped == dropped
    out = node.ready()
    assert not any(isinstance(m, StatePull) for _, m in out.messages)  # no state fetched
    net.settle(1_000)
    assert node.epoch == 1 and not node.early.held
    # Taken in epoch 1: node 1 acknowledged it to node 0 (position 0).
    acks = [
        msg
        for src, dst, msg in net.delivered
        if (src, dst) == (1, 0)
        and isinstance(msg, EpochMessage)
        and msg.epoch == 1
        and isinstance(msg.msg, CAck)
        and (msg.msg.owner, msg.msg.index) == (0, 0)
    ]
    assert acks
