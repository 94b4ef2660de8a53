"""An any-order fuzzer over :class:`~sdpaxos.sim.members.MemberNet`: membership changes.

Why: ``tests/core/fuzz.py`` picks the interleaving for a fixed member list; the
seam between epochs (the stop, a late member installing the next epoch's
base, a removed node that keeps talking, a learner promoted) has its own
interleavings. Every step here delivers ANY pending message (not FIFO), drops
or duplicates one, ticks every node, proposes a client command at a member
(clients retry at another member, and after ``NOT_MEMBER``), proposes the next
membership change (``ADD_LEARNER`` of a fresh node, ``PROMOTE`` or ``REPLACE``
once it holds state, ``REMOVE``; sizes 3..5), crashes a node (at most F of the
newest list down), restarts one from its storage, or cuts and heals links.

After every step the simulator's :class:`~sdpaxos.sim.checkers.Checker` judges
what a driver sees, on the global log: prefix agreement, exactly-once, real-time
order; one value per C- and O-instance per epoch, from the records, by
position (the batch that starts an epoch is left out: it may hold records of
both epochs). At the end every fault heals and every node restarts; then every
command READY must execute at every live member of the newest epoch.

Replay: ``python -m tests.core.member_fuzz --n 3 --seed 17``.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from sdpaxos.core.errors import LocalProtocolError, Overloaded
from sdpaxos.core.member import Member, Role
from sdpaxos.core.membership import (
    Membership,
    MembershipOp,
    NodeInfo,
    OpKind,
    decode_result,
    encode_op,
    split_state,
)
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import Executed, ReadResult, Reply, ReplyKind
from sdpaxos.core.storage import Snapshot
from sdpaxos.core.types import Command, Wait
from sdpaxos.sim.checkers import Checker, LivenessViolation, SafetyViolation
from sdpaxos.sim.driver import Outlet, carry_out
from sdpaxos.sim.members import MemberNet

#: Node ids the fuzzer may use (each add takes a fresh one).
NODES_MAX = 12
MEMBERS_MIN = 3
MEMBERS_MAX = 5
CLIENTS = 3
#: The operator's session id.
OPERATOR = 99
#: Steps without an answer after which a client (or the operator) retries elsewhere.
RETRY_STEPS = 400
#: Virtual time the end phase runs, after every fault healed.
SETTLE_MS = 20_000.0


def _global(snapshot: Snapshot) -> int:
    return split_state(snapshot.app)[0].base + snapshot.slot


class _Outlet(Outlet):
    __slots__ = ("f",)

    def __init__(self, fuzz: MemberFuzz) -> None:
        self.f = fuzz

    def send(self, replica: int, messages: Sequence[tuple[int, Message]]) -> bool:
        for dst, msg in messages:
            self.f.net.pending.append((replica, int(dst), msg))
        return False

    def executed(self, replica: int, entries: list[Executed]) -> None:
        self.f.checker.executed(replica, entries)

    def snapshotted(self, replica: int, snapshot: Snapshot) -> None:
        self.f.checker.snapshot(replica, _global(snapshot))

    def replies(self, replica: int, replies: list[Reply]) -> None:
        for reply in replies:
            if reply.kind is not ReplyKind.NOT_MEMBER:
                self.f.checker.replied(replica, reply)
            self.f.on_reply(replica, reply)

    def reads(self, replica: int, results: list[ReadResult]) -> None:
        for result in results:
            self.f.checker.read_served(replica, result)


class _Net(MemberNet):
    """MemberNet whose batches the fuzzer's checker sees."""

    fuzz: MemberFuzz | None = None

    def flush(self, node_id: int) -> None:
        fuzz = self.fuzz
        if fuzz is None:
            super().flush(node_id)
            return
        if node_id in self.down:
            return
        node = self.nodes[node_id]
        rd = node.ready()
        if rd.persist and rd.epoch_base is None and node.replica is not None:
            position = node.membership.position(node_id)
            assert position is not None
            votes = fuzz.votes.setdefault(node.epoch, Checker(len(node.membership.members)))
            votes.persisted(position, rd.persist)
        carry_out(node_id, rd, self.storages[node_id], _Outlet(fuzz))
        if rd.epoch_base is not None:
            fuzz.checker.snapshot(node_id, _global(rd.epoch_base))


@dataclass
class _Client:
    client_id: int
    seq: int = 0
    command: Command | None = None
    node: int = -1
    sent_step: int = 0


@dataclass
class MemberFuzz:
    """One seeded run; :meth:`run` raises a ``SafetyViolation`` or ``LivenessViolation``."""

    n: int
    seed: int
    steps: int
    rng: random.Random = field(init=False)
    net: _Net = field(init=False)
    checker: Checker = field(init=False)
    votes: dict[int, Checker] = field(default_factory=dict)
    clients: list[_Client] = field(default_factory=list)
    change: tuple[MembershipOp, int, int] | None = None  # op, seq, node
    change_step: int = 0
    change_seq: int = 0
    op_id: int = 0
    next_id: int = 0
    learner: int | None = None
    step_no: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.checker = Checker(NODES_MAX)
        net = _Net.build(self.n)
        assert isinstance(net, _Net)  # build() is a classmethod: it builds the subclass
        self.net = net
        net.fuzz = self
        self.next_id = self.n
        self.clients = [_Client(100 + i) for i in range(CLIENTS)]

    # -- helpers ----------------------------------------------------------------

    def _count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def newest(self) -> Membership:
        live = [m for i, m in self.net.nodes.items() if i not in self.net.down]
        return max((m.membership for m in live), key=lambda ms: ms.epoch)

    def live_members(self) -> list[int]:
        return [i for i in self.newest().ids if i not in self.net.down]

    def _member_for(self, avoid: int = -1) -> int | None:
        ids = [i for i in self.live_members() if i != avoid] or self.live_members()
        return self.rng.choice(ids) if ids else None

    def _propose(self, node_id: int, command: Command, change: MembershipOp | None) -> bool:
        node: Member = self.net.nodes[node_id]
        try:
            if change is not None:
                node.propose_change(change, command.client_id, command.seq)
            else:
                node.propose(command, Wait.READY)
        except (LocalProtocolError, Overloaded):
            return False
        self.checker.proposed(node_id, command)
        self.net.flush(node_id)
        return True

    # -- replies ----------------------------------------------------------------

    def on_reply(self, node_id: int, reply: Reply) -> None:
        if reply.client_id == OPERATOR:
            if self.change is not None and reply.seq == self.change[1]:
                if reply.kind is ReplyKind.EXECUTED:
                    ok, message = decode_result(reply.result)
                    self.trace.append(f"{self.step_no}: verdict {ok} {message}")
                    self._count("changes-applied" if ok else "changes-refused")
                    self.change = None
                elif reply.kind is ReplyKind.NOT_MEMBER:
                    self.change_step = -RETRY_STEPS  # retry at the next chance
            return
        for client in self.clients:
            c = client.command
            if c is not None and (c.client_id, c.seq) == (reply.client_id, reply.seq):
                if reply.kind in (ReplyKind.READY, ReplyKind.EXECUTED):
                    client.command = None
                    self._count("commands-ready")
                elif reply.kind is ReplyKind.NOT_MEMBER:
                    client.sent_step = -RETRY_STEPS

    # -- actions ----------------------------------------------------------------

    def _deliver(self) -> None:
        net = self.net
        if not net.pending:
            return
        src, dst, msg = net.pending.pop(self.rng.randrange(len(net.pending)))
        if src in net.down or dst in net.down or (src, dst) in net.cut:
            return
        net.nodes[dst].step(msg, net.now_ms)
        net.flush(dst)

    def _tick(self) -> None:
        net = self.net
        net.now_ms += net.protocol.tick_ms
        for node_id in sorted(net.nodes):
            if node_id not in net.down:
                net.nodes[node_id].tick(net.now_ms)
                net.flush(node_id)

    def _client(self) -> None:
        client = self.rng.choice(self.clients)
        if client.command is None:
            client.seq += 1
            key = self.rng.choice((b"a", b"b", None))
            client.command = Command(client.client_id, client.seq, b"w%d" % client.seq, key)
            client.node = -1
        elif self.step_no - client.sent_step < RETRY_STEPS:
            return
        node = self._member_for(client.node)
        if node is not None and self._propose(node, client.command, None):
            client.node, client.sent_step = node, self.step_no

    def _next_op(self) -> MembershipOp | None:
        newest = self.newest()
        size = len(newest.members)
        learner = self.learner
        if learner is not None and learner not in newest.learner_ids:
            learner = self.learner = None if learner in newest.ids else learner
        self.op_id += 1
        if learner is not None and learner in newest.learner_ids:
            node = self.net.nodes[learner]
            if not node.has_state:
                return None  # wait until it holds state (learner_lag cannot tell)
            self.learner = None
            if size < MEMBERS_MAX and self.rng.randrange(2) == 0:
                return MembershipOp(OpKind.PROMOTE, target=learner, op_id=self.op_id)
            target = self.rng.choice(newest.ids)
            return MembershipOp(
                OpKind.REPLACE, target=target, node=NodeInfo(learner), op_id=self.op_id
            )
        if size > MEMBERS_MIN and self.rng.randrange(3) == 0:
            target = self.rng.choice(newest.ids)
            return MembershipOp(OpKind.REMOVE, target=target, op_id=self.op_id)
        if self.next_id >= NODES_MAX or learner is not None:
            return None
        fresh = self.next_id
        self.next_id += 1
        self.net.add_node(fresh)
        self.learner = fresh
        return MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(fresh), op_id=self.op_id)

    def _operator(self) -> None:
        if self.change is None:
            if self.newest().pending is not None:
                return  # the last change waits for its stop
            op = self._next_op()
            if op is None:
                return
            self.change_seq += 1
            self.change = (op, self.change_seq, -1)
            self.change_step = -RETRY_STEPS
            self.trace.append(f"{self.step_no}: change {op.kind.name} {op.target} {op.node}")
        op, seq, node_id = self.change
        if self.step_no - self.change_step < RETRY_STEPS:
            return
        node = self._member_for(node_id)
        if node is None:
            return
        command = Command(OPERATOR, seq, encode_op(op))
        if self._propose(node, command, op):
            self.change = (op, seq, node)
            self.change_step = self.step_no

    def _crash(self) -> None:
        net = self.net
        newest = self.newest()
        f = (len(newest.members) - 1) // 2
        down = [i for i in newest.ids if i in net.down]
        live = [i for i in sorted(net.nodes) if i not in net.down]
        if len(down) >= f or not live:
            return
        victim = self.rng.choice(live)
        if victim in newest.ids and len(down) + 1 > f:
            return
        net.crash(victim)
        self.checker.crashed(victim)
        self._count("crashes")
        self.trace.append(f"{self.step_no}: crash {victim}")

    def _restart(self) -> None:
        net = self.net
        if not net.down:
            return
        node_id = self.rng.choice(sorted(net.down))
        self._restart_node(node_id)

    def _restart_node(self, node_id: int) -> None:
        self.checker.restarted(node_id)
        storage = self.net.storages[node_id]
        snapshot = storage.load_snapshot()
        if snapshot is not None:
            self.checker.snapshot(node_id, _global(snapshot))
        if snapshot is None and not storage.load() and node_id in self.net.initial.ids:
            # A node of epoch 0 that crashed before it made anything durable is
            # started as it was first started (--bootstrap): it promised nothing.
            # Without, it would wait to be added, and then say it lost its state.
            self.net.down.discard(node_id)
            self.net._start(node_id, bootstrap=True)
        else:
            self.net.restart(node_id)
        self.trace.append(f"{self.step_no}: restart {node_id}")

    def _cut(self) -> None:
        net = self.net
        if net.cut:
            net.heal()
            return
        ids = sorted(net.nodes)
        a = self.rng.choice(ids)
        net.partition({a}, {i for i in ids if i != a})
        self.trace.append(f"{self.step_no}: isolate {a}")

    def step(self) -> None:
        self.step_no += 1
        roll = self.rng.randrange(1000)
        net = self.net
        if roll < 560:
            self._deliver()
        elif roll < 590 and net.pending:
            net.pending.pop(self.rng.randrange(len(net.pending)))
        elif roll < 605 and net.pending:
            net.pending.append(net.pending[self.rng.randrange(len(net.pending))])
        elif roll < 805:
            self._tick()
        elif roll < 905:
            self._client()
        elif roll < 965:
            self._operator()
        elif roll < 972:
            self._crash()
        elif roll < 992:
            self._restart()
        else:
            self._cut()

    def run(self) -> None:
        try:
            for _ in range(self.steps):
                self.step()
            self.net.heal()
            for node_id in sorted(self.net.down):
                self._restart_node(node_id)
            end = self.net.now_ms + SETTLE_MS
            while self.net.now_ms < end:
                self.net.step_round()
                if self.step_no % 20 == 0:  # retry what is still unanswered
                    for client in self.clients:
                        if client.command is not None:
                            node = self._member_for(client.node)
                            if node is not None:
                                self._propose(node, client.command, None)
                    if self.change is not None:
                        self.change_step = -RETRY_STEPS
                        self._operator()
                self.step_no += 1
            self.checker.check_liveness(self.live_members())
        except (SafetyViolation, LivenessViolation) as exc:
            tail = "\n".join(self.trace[-12:])
            raise type(exc)(
                f"{exc}\n(n={self.n} seed={self.seed} steps={self.steps}; replay: python -m"
                f" tests.core.member_fuzz --n {self.n} --seed {self.seed} --steps"
                f" {self.steps})\n{tail}"
            ) from None

    def epochs(self) -> int:
        return self.newest().epoch

    def roles(self) -> dict[int, Role]:
        return {i: m.role for i, m in self.net.nodes.items()}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--seeds", type=int, default=1, help="run this many seeds from --seed")
    p.add_argument("--steps", type=int, default=3000)
    args = p.parse_args(argv)
    failed = 0
    for seed in range(args.seed, args.seed + args.seeds):
        fuzz = MemberFuzz(args.n, seed, args.steps)
        try:
            fuzz.run()
            print(f"seed {seed}: ok, epoch {fuzz.epochs()}, {fuzz.counts}")
        except AssertionError as exc:
            failed += 1
            print(f"seed {seed}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
