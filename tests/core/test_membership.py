"""The membership as replicated state: every change's verdict, and its encoding.

A refused change must return the very same value (nothing changes); an applied
one must change exactly what it says. ``docs/membership.md`` section 2.1.
"""

from __future__ import annotations

import pytest

from sdpaxos.core.errors import ConfigError, PeerMessageError
from sdpaxos.core.membership import (
    LEARNERS_MAX,
    MEMBERS_MAX,
    MEMBERSHIP_PREFIX,
    MemberMachine,
    Membership,
    MembershipOp,
    NodeInfo,
    OpKind,
    decode_op,
    decode_result,
    encode_op,
    split_state,
)
from sdpaxos.core.storage import pack_value
from sdpaxos.sim.explicit import Register


def three() -> Membership:
    return Membership.initial(tuple(NodeInfo(i, f"h{i}:1", f"r{i}") for i in range(3)))


def with_learner(m: Membership, node: int) -> Membership:
    new, ok, _ = m.apply(MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(node, f"h{node}:1")))
    assert ok
    return new


def test_add_learner_then_promote_makes_a_pending_four_member_epoch() -> None:
    m = with_learner(three(), 7)
    assert m.learner_ids == (7,) and m.pending is None
    promoted, ok, message = m.apply(MembershipOp(OpKind.PROMOTE, target=7, op_id=5))
    assert ok, message
    assert promoted.pending is not None
    assert [n.id for n in promoted.pending.members] == [0, 1, 2, 7]
    assert promoted.ids == (0, 1, 2)  # nothing takes effect before the stop
    nxt = promoted.next_epoch(42)
    assert (nxt.epoch, nxt.ids, nxt.base, nxt.learners, nxt.pending) == (
        1,
        (0, 1, 2, 7),
        42,
        (),
        None,
    )
    assert nxt.sequencer == 0


def test_replace_keeps_positions_and_retires_the_old_id() -> None:
    m = with_learner(three(), 9)
    m, ok, _ = m.apply(MembershipOp(OpKind.REPLACE, target=1, node=NodeInfo(9)))
    assert ok
    nxt = m.next_epoch(10)
    assert nxt.ids == (0, 9, 2) and nxt.retired == (1,)
    assert nxt.node(9) == NodeInfo(9, "h9:1")  # the learner's address travels


def test_removing_the_sequencer_names_the_first_member_or_the_operators_choice() -> None:
    m, ok, _ = three().apply(MembershipOp(OpKind.REMOVE, target=0))
    assert ok and m.pending is not None and m.pending.sequencer == 1
    m, ok, _ = three().apply(MembershipOp(OpKind.REMOVE, target=0, sequencer=2))
    assert ok and m.pending is not None and m.pending.sequencer == 2


REFUSED = [
    (MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(1)), "already a member"),
    (MembershipOp(OpKind.ADD_LEARNER), "names no node"),
    (MembershipOp(OpKind.PROMOTE, target=5), "not a learner"),
    (MembershipOp(OpKind.REMOVE, target=5), "neither a member nor a learner"),
    (MembershipOp(OpKind.REPLACE, target=5, node=NodeInfo(6)), "not a member"),
    (MembershipOp(OpKind.REPLACE, target=1, node=NodeInfo(6)), "not a learner"),
    (MembershipOp(OpKind.REMOVE, target=1, sequencer=1), "would not be a member"),
]


@pytest.mark.parametrize(("op", "why"), REFUSED)
def test_a_refused_change_changes_nothing(op: MembershipOp, why: str) -> None:
    m = three()
    new, ok, message = m.apply(op)
    assert not ok and why in message
    assert new is m


def test_a_second_change_while_one_is_pending_is_refused() -> None:
    m, ok, _ = three().apply(MembershipOp(OpKind.REMOVE, target=2))
    assert ok
    again, ok, message = m.apply(MembershipOp(OpKind.REMOVE, target=1))
    assert not ok and "in progress" in message and again is m
    # A learner may still come and go: it is in no quorum.
    learner, ok, _ = m.apply(MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(4)))
    assert ok and learner.pending == m.pending


def test_ids_are_never_reused_and_sizes_are_bounded() -> None:
    m, ok, _ = three().apply(MembershipOp(OpKind.REMOVE, target=2))
    m = m.next_epoch(3)
    again, ok, message = m.apply(MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(2)))
    assert not ok and "never reused" in message and again is m
    one = Membership.initial((NodeInfo(0),))
    last, ok, message = one.apply(MembershipOp(OpKind.REMOVE, target=0))
    assert not ok and "last member" in message and last is one
    big = Membership.initial(tuple(NodeInfo(i) for i in range(MEMBERS_MAX)))
    big = with_learner(big, 100)
    _, ok, message = big.apply(MembershipOp(OpKind.PROMOTE, target=100))
    assert not ok and f"at most {MEMBERS_MAX}" in message
    many = three()
    for i in range(LEARNERS_MAX):
        many = with_learner(many, 10 + i)
    _, ok, message = many.apply(MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(50)))
    assert not ok and f"at most {LEARNERS_MAX}" in message


def test_a_retried_op_is_answered_the_same_and_applied_once() -> None:
    op = MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(4), op_id=77)
    once, ok, _ = three().apply(op)
    twice, ok2, message = once.apply(op)
    assert ok and ok2 and twice is once and "already applied" in message


def test_encodings_round_trip_and_refuse_garbage() -> None:
    m = with_learner(three(), 5)
    m, _, _ = m.apply(MembershipOp(OpKind.PROMOTE, target=5, op_id=3))
    assert Membership.unpacked(m.packed()) == m
    for op in (
        MembershipOp(OpKind.REPLACE, target=1, node=NodeInfo(9, "a:1", "eu"), sequencer=0, op_id=4),
        MembershipOp(OpKind.REMOVE, target=2),
    ):
        assert decode_op(encode_op(op)) == op
    for bad in (
        b"nope",
        MEMBERSHIP_PREFIX + b"\x07",
        MEMBERSHIP_PREFIX + pack_value((9, 0, None, 0, 0)),
    ):
        with pytest.raises(PeerMessageError):
            decode_op(bad)
    with pytest.raises(PeerMessageError):
        Membership.unpacked((1, 0, (), 0, 0, (), (), None, 0))  # no members
    assert decode_result(None) == (False, "no result")


def test_construction_refuses_impossible_memberships() -> None:
    with pytest.raises(ConfigError):
        Membership(0, (NodeInfo(1), NodeInfo(1)), 1)
    with pytest.raises(ConfigError):
        Membership(0, (NodeInfo(1),), 2)
    with pytest.raises(ConfigError):
        Membership(0, (NodeInfo(1),), 1, retired=(1,))
    with pytest.raises(ConfigError):
        NodeInfo(-1)


def test_the_machine_routes_changes_and_snapshots_both_states() -> None:
    app = Register()
    machine = MemberMachine(app, three())
    assert machine.apply(b"w") == b"1" and app.log == [b"w"]
    result = machine.apply(encode_op(MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(4))))
    assert decode_result(result) == (True, "node 4 is a learner")
    assert app.log == [b"w"]  # the application never sees a membership command
    bad = machine.apply(MEMBERSHIP_PREFIX + b"\xff")
    assert decode_result(bad)[0] is False
    data = machine.snapshot()
    membership, app_state = split_state(data)
    assert app_state == app.snapshot()
    assert membership.learner_ids == (4,)
    other = MemberMachine(Register(), three())
    other.restore(data)
    assert other.membership == machine.membership and other.app.log == [b"w"]  # type: ignore[attr-defined]
