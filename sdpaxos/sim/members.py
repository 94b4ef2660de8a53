"""Explicit delivery for a cluster whose membership changes: nodes are :class:`Member`.

The membership counterpart of :class:`~sdpaxos.sim.explicit.Net`: the real core
(:class:`~sdpaxos.core.member.Member`, one :class:`~sdpaxos.core.replica.Replica`
per epoch), in-memory storage carried out by the shared driver
(:func:`sdpaxos.sim.driver.carry_out`: records, snapshot, the epoch's base, then
messages, then answers), one virtual clock, and messages that wait in
:attr:`MemberNet.pending` until delivered. Nodes are named by node id, and a node
can be started that is not a member (:meth:`MemberNet.add_node`).

    >>> from sdpaxos.core.membership import MembershipOp, NodeInfo, OpKind
    >>> net = MemberNet.build(3)
    >>> net.add_node(3)
    >>> net.change(0, MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(3), op_id=1))
    (True, 'node 3 is a learner')
    >>> net.settle(600)  # the learner fetches the state: it may be promoted once it holds some
    >>> net.nodes[3].role.value, net.nodes[3].has_state
    ('learner', True)
    >>> net.change(0, MembershipOp(OpKind.REPLACE, target=2, node=NodeInfo(3), op_id=2))
    (True, 'epoch 1 will have members [0, 1, 3] (sequencer 0)')
    >>> net.settle()
    >>> [net.nodes[i].epoch for i in (0, 1, 3)], net.nodes[3].role.value
    ([1, 1, 1], 'member')
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.member import EpochMessage, Member, MemberMessage
from sdpaxos.core.membership import Membership, MembershipOp, NodeInfo, decode_result
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import Executed, ReadResult, Reply, ReplyKind
from sdpaxos.core.storage import MemoryStorage
from sdpaxos.core.types import Command, Wait
from sdpaxos.sim.driver import Outlet, carry_out
from sdpaxos.sim.explicit import Register

__all__ = ["MemberNet"]

#: Most delivery rounds :meth:`MemberNet.settle` runs before it gives up.
SETTLE_ROUNDS_MAX = 2_000


@dataclass
class MemberNet:
    """Member nodes of the real core with explicit delivery, by node id."""

    initial: Membership
    protocol: ClusterConfig
    nodes: dict[int, Member] = field(default_factory=dict)
    machines: dict[int, Register] = field(default_factory=dict)
    storages: dict[int, MemoryStorage] = field(default_factory=dict)
    #: In-flight messages: (src, dst, message), oldest first.
    pending: list[tuple[int, int, Any]] = field(default_factory=list)
    replies: dict[int, list[Reply]] = field(default_factory=dict)
    executed: dict[int, list[Executed]] = field(default_factory=dict)
    reads: dict[int, list[ReadResult]] = field(default_factory=dict)
    now_ms: float = 0.0
    down: set[int] = field(default_factory=set)
    cut: set[tuple[int, int]] = field(default_factory=set)
    restarts: dict[int, int] = field(default_factory=dict)
    #: Every message ever delivered: (src, dst, message).
    delivered: list[tuple[int, int, Any]] = field(default_factory=list)
    next_seq: dict[int, int] = field(default_factory=dict)

    @classmethod
    def build(cls, replicas: int = 3, **config: Any) -> MemberNet:
        """``replicas`` members of epoch 0 (ids ``0 .. replicas-1``), bootstrapped."""
        config.setdefault("rtt_ms", None)
        protocol = ClusterConfig(replicas=1, **config)
        initial = Membership.initial(tuple(NodeInfo(i) for i in range(replicas)))
        net = cls(initial, protocol)
        for i in range(replicas):
            net._start(i, bootstrap=True)
        return net

    def _start(self, node_id: int, *, bootstrap: bool) -> None:
        incarnation = self.restarts.get(node_id, 0)
        machine = Register()
        storage = self.storages.setdefault(node_id, MemoryStorage())
        self.machines[node_id] = machine
        self.nodes[node_id] = Member(
            node_id,
            self.initial,
            machine,
            protocol=self.protocol,
            rng=random.Random(1000 * incarnation + node_id),
            observe=True,
            snapshot=storage.load_snapshot(),
            records=storage.load(),
            bootstrap=bootstrap,
        )
        self.replies.setdefault(node_id, [])
        self.executed[node_id] = []
        self.reads.setdefault(node_id, [])
        self.nodes[node_id].tick(self.now_ms)
        self.flush(node_id)

    def add_node(self, node_id: int) -> None:
        """Start a new node on empty storage: it waits to be added."""
        self._start(node_id, bootstrap=False)

    def crash(self, node_id: int) -> None:
        self.down.add(node_id)
        self.pending = [p for p in self.pending if node_id not in (p[0], p[1])]

    def restart(self, node_id: int) -> None:
        """Rebuild ``node_id`` from what it made durable, with a fresh state machine."""
        self.down.discard(node_id)
        self.restarts[node_id] = self.restarts.get(node_id, 0) + 1
        self._start(node_id, bootstrap=False)

    def wipe(self, node_id: int) -> None:
        """``node_id`` lost its disk: crash it and forget its storage."""
        self.crash(node_id)
        self.storages[node_id] = MemoryStorage()

    def partition(self, a: set[int], b: set[int]) -> None:
        self.cut |= {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}

    def heal(self) -> None:
        self.cut.clear()

    def flush(self, node_id: int) -> None:
        if node_id in self.down:
            return
        carry_out(node_id, self.nodes[node_id].ready(), self.storages[node_id], _Outlet(self))

    # ------------------------------------------------------------- clients

    def propose(
        self, node_id: int, client: int, payload: bytes, wait: Wait = Wait.EXECUTED
    ) -> Command:
        seq = self.next_seq.get(client, 0) + 1
        self.next_seq[client] = seq
        command = Command(client, seq, payload)
        self.nodes[node_id].propose(command, wait)
        self.flush(node_id)
        return command

    def change(
        self, node_id: int, op: MembershipOp, *, client: int = 99, settle_ms: float = 3_000.0
    ) -> tuple[bool, str]:
        """Propose ``op`` at ``node_id`` and run until its verdict comes back."""
        seq = self.next_seq.get(client, 0) + 1
        self.next_seq[client] = seq
        self.nodes[node_id].propose_change(op, client, seq)
        self.flush(node_id)
        end = self.now_ms + settle_ms
        while self.now_ms < end:
            for reply in self.replies[node_id]:
                if (reply.client_id, reply.seq) == (
                    client,
                    seq,
                ) and reply.kind is ReplyKind.EXECUTED:
                    return decode_result(reply.result)
            self.step_round()
        raise AssertionError(f"no verdict for {op} within {settle_ms} ms")

    # ------------------------------------------------------------- time

    def deliver_one(self) -> None:
        """Deliver the oldest message in flight (lost if a link or node is down)."""
        src, dst, msg = self.pending.pop(0)
        if src in self.down or dst in self.down or (src, dst) in self.cut:
            return
        node = self.nodes.get(dst)
        if node is None:
            return
        self.delivered.append((src, dst, msg))
        node.step(msg, self.now_ms)
        self.flush(dst)

    def deliver_all(self, limit: int = 100_000) -> int:
        count = 0
        while self.pending and count < limit:
            self.deliver_one()
            count += 1
        return count

    def deliver_until(self, done: Callable[[], bool], ms: float = 10_000.0) -> bool:
        """Deliver one message at a time, ticking when none is in flight, until
        ``done()`` holds right after a delivery (or ``ms`` pass)."""
        end = self.now_ms + ms
        while self.now_ms < end:
            if done():
                return True
            if self.pending:
                self.deliver_one()
            else:
                self.now_ms += self.protocol.tick_ms
                for node_id, node in self.nodes.items():
                    if node_id not in self.down:
                        node.tick(self.now_ms)
                        self.flush(node_id)
        return done()

    def step_round(self) -> None:
        """Deliver everything in flight, then one tick everywhere."""
        self.deliver_all()
        self.now_ms += self.protocol.tick_ms
        for node_id, node in self.nodes.items():
            if node_id not in self.down:
                node.tick(self.now_ms)
                self.flush(node_id)

    def settle(self, ms: float = 2_000.0) -> None:
        """Run ``ms`` of virtual time."""
        end = self.now_ms + ms
        rounds = 0
        while self.now_ms < end and rounds < SETTLE_ROUNDS_MAX:
            self.step_round()
            rounds += 1

    def run_until(self, done: Callable[[], bool], ms: float = 10_000.0) -> bool:
        end = self.now_ms + ms
        while self.now_ms < end:
            if done():
                return True
            self.step_round()
        return done()

    # ------------------------------------------------------------- looking

    def executed_ids(self, node_id: int) -> list[tuple[int, int]]:
        return [(e.command.client_id, e.command.seq) for e in self.executed[node_id]]

    def answered(self, node_id: int) -> list[tuple[int, int, ReplyKind]]:
        return [(r.client_id, r.seq, r.kind) for r in self.replies[node_id]]


class _Outlet(Outlet):
    __slots__ = ("net",)

    def __init__(self, net: MemberNet) -> None:
        self.net = net

    def send(self, replica: int, messages: Sequence[tuple[int, Message]]) -> bool:
        for dst, msg in messages:
            self.net.pending.append((replica, int(dst), msg))
        return False

    def executed(self, replica: int, entries: list[Executed]) -> None:
        self.net.executed[replica].extend(entries)

    def replies(self, replica: int, replies: list[Reply]) -> None:
        self.net.replies[replica].extend(replies)

    def reads(self, replica: int, results: list[ReadResult]) -> None:
        self.net.reads[replica].extend(results)


def is_epoch_message(message: MemberMessage) -> bool:
    return isinstance(message, EpochMessage)
