"""Seeded random runs of membership changes with crashes, restarts and partitions.

Each seed drives :class:`~sdpaxos.sim.members.MemberNet` through a random mix of
client commands, membership changes (add a learner and promote it, remove a
member, the sequencer included, replace a member) and faults aimed at the
change (a crash or a partition right after a change is proposed, while its stop
is in flight), then heals everything and checks the promises of
``docs/membership.md``: one command per global slot across every node and
incarnation, nothing executed twice, every acknowledged command executed, and
the members of the newest epoch holding the same state.
"""

from __future__ import annotations

import random

import pytest

from sdpaxos.core.member import NotMemberError, Role
from sdpaxos.core.membership import MembershipOp, NodeInfo, OpKind
from sdpaxos.core.ready import ReplyKind
from sdpaxos.sim.members import MemberNet
from tests.sim.test_member_changes import assert_agreement, members_agree

#: Seeds run by default (each is a few seconds on a loaded machine).
SEEDS = range(1, 9)
#: Steps of one run.
STEPS = 40


def live_members(net: MemberNet) -> list[int]:
    epoch = max(n.epoch for i, n in net.nodes.items() if i not in net.down)
    return [
        i
        for i, n in net.nodes.items()
        if i not in net.down and n.role is Role.MEMBER and n.epoch == epoch
    ]


def run(seed: int) -> tuple[MemberNet, set[bytes], int]:
    rng = random.Random(seed)
    net = MemberNet.build(rng.choice((3, 5)))
    acked_payloads: set[bytes] = set()
    sent: dict[tuple[int, int], bytes] = {}
    next_id = 10
    op_id = 0
    changes = 0
    for step in range(STEPS):
        members = live_members(net)
        action = rng.random()
        if action < 0.5 and members:
            at = rng.choice(members)
            # One command per client: a session has at most one outstanding.
            client = 100 + step
            payload = f"s{seed}c{step}".encode()
            try:
                command = net.propose(at, client, payload)
            except NotMemberError:
                pass
            else:
                sent[(command.client_id, command.seq)] = payload
        elif action < 0.8 and members and len(net.down) == 0:
            at = rng.choice(members)
            node = net.nodes[at]
            membership = node.membership
            if membership.pending is not None:
                continue
            op_id += 1
            size = len(membership.members)
            kind = rng.choice(["grow", "remove", "replace"])
            if (kind == "grow" and size >= 7) or (kind == "remove" and size <= 3):
                kind = "replace"
            if kind in ("grow", "replace"):
                new = next_id
                next_id += 1
                net.add_node(new)
                verdict = net.change(
                    at, MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(new), op_id=op_id)
                )
                assert verdict[0], verdict

                # As an operator's tool does: promote only a learner that caught up.
                def caught_up(new: int = new) -> bool:
                    lags = [net.nodes[i].learner_lag(new) for i in live_members(net)]
                    return any(lag is not None and lag <= 16 for lag in lags)

                if not net.run_until(caught_up, ms=3000):
                    continue
                op_id += 1
                if kind == "grow":
                    op = MembershipOp(OpKind.PROMOTE, target=new, op_id=op_id)
                else:
                    old = rng.choice(membership.ids)
                    op = MembershipOp(OpKind.REPLACE, target=old, node=NodeInfo(new), op_id=op_id)
            else:
                op = MembershipOp(OpKind.REMOVE, target=rng.choice(membership.ids), op_id=op_id)
            client = 1000 + op_id
            net.nodes[at].propose_change(op, client, 1)
            net.flush(at)
            changes += 1
            # Aim a fault at the change: while its stop is in flight.
            fault = rng.random()
            net.settle(rng.choice((10, 30, 60)))
            targets = [i for i in live_members(net) if i != at]
            if fault < 0.3 and targets:
                victim = rng.choice(targets)
                net.crash(victim)
                net.settle(rng.choice((200, 800)))
                net.restart(victim)
            elif fault < 0.5 and targets:
                cut = {rng.choice(targets)}
                net.partition(cut, set(net.nodes) - cut)
                net.settle(rng.choice((200, 800)))
                net.heal()
        net.settle(rng.choice((20, 100, 300)))
    net.heal()
    for node_id in sorted(net.down):
        net.restart(node_id)
    net.settle(6000)
    for node_id in net.nodes:
        for reply in net.replies[node_id]:
            if reply.kind in (ReplyKind.EXECUTED, ReplyKind.READY):
                payload = sent.get((reply.client_id, reply.seq))
                if payload is not None:
                    acked_payloads.add(payload)
    return net, acked_payloads, changes


@pytest.mark.parametrize("seed", SEEDS)
def test_random_changes_with_faults_keep_every_promise(seed: int) -> None:
    net, acked, changes = run(seed)
    assert changes > 0
    assert_agreement(net)
    log = members_agree(net)
    missing = sorted(p for p in acked if p not in log)
    assert not missing, f"acknowledged but not executed: {missing}"
    assert len(log) == len(set(log))
