"""Core bugs the reconfig sweep found, each replayed on the explicit harness.

Each test drives :class:`~sdpaxos.sim.members.MemberNet` (the real core,
explicit delivery) into the interleaving the sweep hit, then asserts what
``docs/membership.md`` promises. Each failed on the core as it was when the
sweep found it (its message says what went wrong) and passes since the fix.
"""

from __future__ import annotations

from collections.abc import Callable

from sdpaxos.core.member import EpochMessage, Role, StateChunk
from sdpaxos.core.membership import MembershipOp, NodeInfo, OpKind
from sdpaxos.core.messages import OCommit, VRequest
from sdpaxos.core.storage import CAccepted
from sdpaxos.core.types import Command, Wait
from sdpaxos.sim.members import MemberNet

#: Delivery rounds a test runs at most while it waits for one event.
ROUNDS_MAX = 3_000


def add_learner(net: MemberNet, at: int, node: int, op_id: int) -> None:
    net.add_node(node)
    verdict = net.change(at, MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(node), op_id=op_id))
    assert verdict == (True, f"node {node} is a learner")


def deliver_until(net: MemberNet, done: object) -> None:
    """Deliver one message (or tick everyone once) at a time until ``done()``:
    finer than ``step_round``, so a test can stop right after one batch."""
    for _ in range(ROUNDS_MAX):
        while net.pending:
            src, dst, msg = net.pending.pop(0)
            if src in net.down or dst in net.down or (src, dst) in net.cut:
                continue
            net.nodes[dst].step(msg, net.now_ms)
            net.flush(dst)
            if done():  # type: ignore[operator]
                return
        net.now_ms += net.protocol.tick_ms
        for node_id, node in net.nodes.items():
            if node_id not in net.down:
                node.tick(net.now_ms)
                net.flush(node_id)
                if done():  # type: ignore[operator]
                    return
    raise AssertionError("the awaited event never happened")


def test_a_learner_reported_caught_up_is_promoted_into_a_working_member() -> None:
    """Sweep seed 2002 (N = 3, ``--faults reconfig``, before the injector's
    workaround): the operator's rule of ``docs/membership.md`` section 2 (promote
    once ``learner_lag`` is at most ``learner_lag_slots_max``) promoted a node
    that had installed nothing; it became ``Role.LOST`` for good, a member short.

    Here: node 3 is added as a learner and pulls, but every chunk to it is lost.
    Its pulls say ``have=0`` (and epoch -1: no state); the members record that
    as a learner at slot 0, so a young cluster reports a lag of a few slots.
    """
    net = MemberNet.build(3)
    add_learner(net, 0, 3, op_id=1)
    net.cut |= {(i, 3) for i in (0, 1, 2)}  # pulls leave node 3; no chunk reaches it
    net.settle(1_000)
    assert not net.nodes[3].has_state  # the interleaving happened: it installed nothing
    reported = {
        i: lag
        for i in (0, 1, 2)
        if (lag := net.nodes[i].learner_lag(3)) is not None
        and lag <= net.nodes[i].learner_lag_slots_max
    }
    role = net.nodes[3].role
    if reported:
        # The operator follows the documented rule: the learner is caught up, promote it.
        at = min(reported)
        assert net.change(at, MembershipOp(OpKind.PROMOTE, target=3, op_id=2))[0]
        net.heal()
        net.settle(3_000)
        role = net.nodes[3].role
    assert not reported, (
        f"BUG: learner_lag(3) reported {reported} slots (node: lag, within"
        f" learner_lag_slots_max) for a learner that held no state; once promoted it is"
        f" {role.value}, and epoch {net.nodes[0].epoch} is a member short for good"
    )


def test_records_of_the_batch_that_installs_an_epoch_base_stay_durable() -> None:
    """A member that was cut off while its peers switched epochs installs the new
    epoch's base from a peer (``Member._install``) and proposes its unfinished
    command again in the new epoch, in the same ``ready()`` batch: the batch
    persists the new C-instance's ``CAccepted`` and carries ``epoch_base``, and
    the driver (``carry_out``: persist, then ``start_epoch``) then forgets every
    record, that one included, before the C-accepts leave.

    Consequence, replayed: node 2 crashes right after that batch, restarts from
    the base with no record of C-instance (2, 0), and gives the same instance,
    at the same ballot, to its next command: peers accepted two values for one
    C-instance at one ballot (the first was chosen: every peer accepted it).
    """
    net = MemberNet.build(3)
    add_learner(net, 0, 3, op_id=1)
    net.settle(1_000)
    assert net.nodes[3].has_state
    net.partition({2}, {0, 1, 3})
    x = net.propose(2, 7, b"x", Wait.READY)
    net.settle(100)
    assert net.change(0, MembershipOp(OpKind.PROMOTE, target=3, op_id=2))[0]
    net.settle(500)
    assert net.nodes[2].epoch == 0
    net.heal()
    deliver_until(net, lambda: net.nodes[2].epoch == 1)
    carried = [r for r in net.storages[2].load() if isinstance(r, CAccepted) and x in r.commands]
    # What node 2 sent in that batch reaches its peers; then it crashes.
    net.cut |= {(i, 2) for i in (0, 1, 3)}
    net.deliver_all()
    net.crash(2)
    net.heal()
    net.restart(2)
    y = net.propose(2, 8, b"y", Wait.READY)
    net.settle(3_000)
    accepted: dict[tuple[int, int, int], set[tuple[Command, ...]]] = {}
    for i in (0, 1, 3):
        for r in net.storages[i].load():
            if isinstance(r, CAccepted) and r.owner == net.nodes[2].membership.position(2):
                accepted.setdefault((r.owner, r.index, r.ballot), set()).add(r.commands)
    twice = {k: v for k, v in accepted.items() if len(v) > 1}
    assert not twice, (
        f"BUG: node 2's CAccepted of {x} in epoch 1 was not durable after the batch that"
        f" installed the epoch's base (records kept: {carried}); after a crash it reused the"
        f" C-instance for {y}: peers accepted two values at one (owner, index, ballot): {twice}"
    )


def test_a_removed_node_stops_sending() -> None:
    """``docs/membership.md`` section 4.6: a removed replica, once told it was
    removed, "stops sending and says so in its status". It says so
    (``Role.REMOVED``) but pulls the newest state from a member every
    ``learn_ms`` for the rest of its life, and a member whose state moved on
    answers a pull with the whole state (in the simulator, with clients
    writing, members sent a removed node 33 chunks in 10 s).

    Each of the three tests above passes with a one-line trial fix of
    ``sdpaxos/core/member.py`` (not committed: the core is the lead's), which
    is how their failure was checked to be the bug and not the test: record a
    learner's ``have`` only from a pull of a node that holds state
    (``m.epoch >= 0``); return the batch that carries ``epoch_base`` alone, the
    new epoch's replica's effects in the next ``ready()``; no pulls in ``tick``
    once ``Role.REMOVED``."""
    net = MemberNet.build(4)
    verdict = net.change(0, MembershipOp(OpKind.REMOVE, target=3, op_id=1))
    assert verdict[0]
    net.settle(2_000)
    assert net.nodes[3].role is Role.REMOVED
    for k in range(20):  # the members keep working: their state moves on
        net.propose(k % 3, 7, b"w%d" % k, Wait.READY)
        net.settle(100)
    start = len(net.delivered)
    net.settle(3_000)
    sent = [type(m).__name__ for src, _, m in net.delivered[start:] if src == 3]
    chunks = sum(1 for _, dst, m in net.delivered[start:] if dst == 3 and isinstance(m, StateChunk))
    assert not sent, (
        f"BUG: removed node 3 sent {len(sent)} messages in 3 s after it knew it was removed"
        f" ({sorted(set(sent))}), and members sent it {chunks} state chunks"
    )


def test_a_removed_node_that_restarts_in_its_old_epoch_never_counts() -> None:
    """The zombie scenario on the explicit harness (passes: the core drops it).
    Node 3 is crashed as soon as it executed its own removal (before the stop),
    restarted from its storage once the others run epoch 1: it wakes up a member
    of epoch 0 and sends epoch-0 messages; the members drop every one (their
    ``dropped`` counter says so), never step them, and tell it the epoch, after
    which it knows it was removed."""
    net = MemberNet.build(4)
    removal = MembershipOp(OpKind.REMOVE, target=3, op_id=1)
    net.nodes[0].propose_change(removal, 99, 1)
    net.flush(0)
    deliver_until(net, lambda: net.nodes[3].membership.pending is not None)
    net.crash(3)
    net.settle(2_000)
    assert [net.nodes[i].epoch for i in (0, 1, 2)] == [1, 1, 1]
    dropped = {i: net.nodes[i].dropped for i in (0, 1, 2)}
    start = len(net.delivered)
    net.restart(3)
    assert net.nodes[3].epoch == 0 and net.nodes[3].role is Role.MEMBER
    net.settle(2_000)
    from_zombie = [
        (dst, m)
        for src, dst, m in net.delivered[start:]
        if src == 3 and isinstance(m, EpochMessage) and m.epoch == 0
    ]
    assert from_zombie, "the restarted node sent nothing in its old epoch"
    grew = sum(net.nodes[i].dropped - dropped[i] for i in (0, 1, 2))
    assert grew >= len(from_zombie)
    zombie = net.nodes[3]  # read again: mypy narrowed the role read above
    assert zombie.role is Role.REMOVED and zombie.epoch == 1
    assert all(net.nodes[i].epoch == 1 for i in (0, 1, 2))


def test_a_new_node_joins_after_every_node_of_epoch_0_was_replaced() -> None:
    """Found by the reconfig sweep (a fresh node stayed ``waiting`` for good and
    its ``add`` never finished). A node on empty storage asks the members of
    its config (``initial``: epoch 0's list) for the membership. Once 0, 1 and 2
    were all replaced, those nodes are alive but removed: they hold the newest
    membership, yet a node without a replica answers no ``StatePull`` and the
    ``EpochNotice`` it could send names no one the waiting node asks next. The
    simulator now starts new nodes with the current member list (what an
    operator would write); this test keeps epoch 0's."""
    net = MemberNet.build(3)
    for k, old in enumerate((0, 1, 2)):
        new = 3 + k
        # Propose at a member that stays (the newest node is one).
        at = new - 1 if k else 1
        add_learner(net, at, new, op_id=2 * k + 1)
        net.settle(1_000)
        verdict = net.change(
            at, MembershipOp(OpKind.REPLACE, target=old, node=NodeInfo(new), op_id=2 * k + 2)
        )
        assert verdict[0], verdict
        net.settle(1_000)
    assert [net.nodes[i].role for i in (0, 1, 2)] == [Role.REMOVED] * 3
    assert sorted(net.nodes[3].membership.ids) == [3, 4, 5]
    add_learner(net, 3, 6, op_id=7)
    net.settle(3_000)
    assert net.nodes[6].role is Role.LEARNER and net.nodes[6].has_state, (
        f"BUG: node 6, added as a learner, is {net.nodes[6].role.value} after 3 s: it asks"
        " only epoch 0's members (all removed), which answer nothing"
    )


def _deliver_unless(
    net: MemberNet, drop: Callable[[int, int, object], bool], done: Callable[[], bool]
) -> bool:
    """Like :func:`deliver_until`, but messages ``drop(src, dst, msg)`` are lost;
    False if ``done()`` never held within :data:`ROUNDS_MAX` rounds."""
    for _ in range(ROUNDS_MAX):
        while net.pending:
            src, dst, msg = net.pending.pop(0)
            if src in net.down or dst in net.down or (src, dst) in net.cut or drop(src, dst, msg):
                continue
            net.nodes[dst].step(msg, net.now_ms)
            net.flush(dst)
            if done():
                return True
        net.now_ms += net.protocol.tick_ms
        for node_id, node in net.nodes.items():
            if node_id not in net.down:
                node.tick(net.now_ms)
                net.flush(node_id)
                if done():
                    return True
    return done()


def test_a_new_sequencer_executes_the_stop_it_committed_while_idle() -> None:
    """Found while replaying the reconfig sweep's deadlock (seed 20000): 3
    members, sequencer 0; ``REPLACE 1 by 3`` executes; 0 is cut off at once, so
    1 and 2 elect 1 (2's V-requests are lost, so 1 wins), whose rebuilt range
    holds 0's stop. 1 commits the stop (``Learner.advance_safe_prefix``, the
    ``STOP`` branch) but marks no progress, so its executor never runs: with no
    other command arriving, 1 sits for 30 s with the stop committed and not
    executed (``o_safe_upto`` past ``executed_slots``). (2's O-commits from 1
    are lost here, so that 2 switching cannot pull 1 along by its epoch-1
    messages.) Passes with ``s.progress.dirty = True`` where that branch commits."""
    net = MemberNet.build(3)
    add_learner(net, 0, 3, op_id=1)
    net.settle(1_000)
    for k in range(5):
        net.propose(k % 3, 7, b"w%d" % k, Wait.READY)
        net.settle(50)
    seq = net.next_seq[99] = net.next_seq.get(99, 0) + 1
    replace = MembershipOp(OpKind.REPLACE, target=1, node=NodeInfo(3), op_id=2)
    net.nodes[0].propose_change(replace, 99, seq)
    net.flush(0)

    def none(src: int, dst: int, msg: object) -> bool:
        return False

    assert _deliver_unless(net, none, lambda: net.nodes[0].membership.pending is not None)
    net.partition({0}, {1, 2, 3})

    def lost(src: int, dst: int, msg: object) -> bool:
        inner = msg.msg if isinstance(msg, EpochMessage) else None
        return (src == 2 and isinstance(inner, VRequest)) or (
            src == 1 and dst == 2 and isinstance(inner, OCommit)
        )

    switched = _deliver_unless(net, lost, lambda: net.nodes[1].epoch == 1)
    replica = net.nodes[1].replica
    status = replica.status() if replica is not None else None
    assert switched, (
        f"BUG: node 1, sequencer of view {status.view if status else '?'}, committed the"
        f" stop (safe up to {status.o_safe_upto if status else '?'}) but executed only"
        f" {status.executed_slots if status else '?'} slots in {ROUNDS_MAX} idle rounds"
    )
