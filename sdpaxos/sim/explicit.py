"""Explicit delivery: drive a few replicas message by message, as a protocol transcript.

Why: the simulator (:class:`~sdpaxos.sim.cluster.SimCluster`) is the realistic
harness: a seeded network with delays, losses and faults decides what arrives
when. To pin down one protocol rule you want the opposite: *you* decide which
message arrives, which is lost, which is duplicated, when a replica ticks,
crashes or restarts, and then you look at what each replica did. :class:`Net`
is that: the real core (:class:`~sdpaxos.core.replica.Replica`), in-memory
storage, no codec, no network model, and one virtual clock that only
:meth:`Net.tick` moves. Every ``Ready`` batch is carried out at once by the
shared in-memory driver (:func:`sdpaxos.sim.driver.carry_out`: records first,
then messages, then answers); its messages wait in :attr:`Net.pending` until
the transcript delivers or drops them.

A transcript (section 3.2 of the paper, N = 3): replica 1 proposes; its
C-accept goes to its nearest peer and the C-request to the sequencer, replica
0. The command is not ready until the sequencer has ordered it::

    >>> from sdpaxos.sim.explicit import Net
    >>> net = Net.build(3, sequencer=0)
    >>> net.propose(1, client=7, seq=1, payload=b"w")
    Command(client_id=7, seq=1, payload=b'w', key=None)
    >>> net.in_flight()
    [(1, 2, 'CAccept'), (1, 0, 'CRequest')]
    >>> net.deliver_where(lambda src, dst, msg: dst == 2)  # only replica 2 hears
    1
    >>> net.in_flight()
    [(1, 0, 'CRequest'), (2, 1, 'CAck')]
    >>> net.ready_ids(1)  # accepted by a majority, but not ordered yet
    []
    >>> net.deliver_all()  # everything else, in FIFO order, until quiet
    8
    >>> net.ready_ids(1), net.machines[2].log
    ([(7, 1)], [b'w'])

Messages are lost to a crashed replica or across a :meth:`Net.partition`;
:meth:`Net.tick` (or :meth:`Net.run`, :meth:`Net.advance`) lets timers fire.
The lists of :class:`Net` (``replicas``, ``storages``, ``machines``,
``pending``, ``sent``, ``replies``, ``executed``, ``reads``) are plain data a
transcript may read and edit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import Executed, ReadResult, Reply, ReplyKind
from sdpaxos.core.replica import Replica
from sdpaxos.core.storage import MemoryStorage
from sdpaxos.core.types import Command, ReplicaId, Wait
from sdpaxos.sim.driver import Outlet, carry_out

__all__ = [
    "PAPER3_RTT_MS",
    "PAPER5_RTT_MS",
    "MessagePredicate",
    "Net",
    "Register",
    "uniform_rtt_ms",
]

#: ``(src, dst, message) -> bool``: selects in-flight messages.
MessagePredicate = Callable[[int, int, Message], bool]

#: Table 1 of the paper: round trips (ms) between CA, OR, OH, IRE and SEL; the
#: diagonal is the client hop.
PAPER5_RTT_MS: tuple[tuple[float, ...], ...] = (
    (1.16, 20, 52, 139, 146),
    (20, 0.02, 68, 125, 133),
    (52, 68, 1.1, 84, 197),
    (139, 125, 84, 0.48, 229),
    (146, 133, 197, 229, 1.11),
)
#: The first three regions of :data:`PAPER5_RTT_MS` (CA, OR, OH).
PAPER3_RTT_MS: tuple[tuple[float, ...], ...] = tuple(row[:3] for row in PAPER5_RTT_MS[:3])


def uniform_rtt_ms(n: int, rtt_ms: float = 100.0) -> tuple[tuple[float, ...], ...]:
    """An ``n``-replica proximity matrix: ``rtt_ms`` between replicas, 1 ms to oneself."""
    return tuple(tuple(1.0 if i == j else rtt_ms for j in range(n)) for i in range(n))


class Register:
    """Deterministic state machine: appends payloads, returns the running count.

    ``log`` is every payload applied, in order: what a transcript compares.
    """

    def __init__(self) -> None:
        self.log: list[bytes] = []

    def apply(self, payload: bytes) -> bytes:
        self.log.append(payload)
        return str(len(self.log)).encode()

    def snapshot(self) -> bytes:
        return b"".join(len(p).to_bytes(4, "big") + p for p in self.log)

    def restore(self, data: bytes) -> None:
        self.log = []
        k = 0
        while k < len(data):
            size = int.from_bytes(data[k : k + 4], "big")
            self.log.append(data[k + 4 : k + 4 + size])
            k += 4 + size


@dataclass
class Net:
    """N replicas of the real core with explicit delivery (see the module docstring).

    Build one with :meth:`build`. Index ``r`` of every list is replica ``r``.
    """

    config: ClusterConfig
    replicas: list[Replica] = field(default_factory=list)
    machines: list[Register] = field(default_factory=list)
    storages: list[MemoryStorage] = field(default_factory=list)
    #: In-flight messages: (src, dst, message), oldest first.
    pending: list[tuple[int, int, Message]] = field(default_factory=list)
    #: Per replica: every client reply it gave.
    replies: list[list[Reply]] = field(default_factory=list)
    #: Per replica: every command it applied (of its current incarnation).
    executed: list[list[Executed]] = field(default_factory=list)
    #: Every message ever sent: (src, dst, message).
    sent: list[tuple[int, int, Message]] = field(default_factory=list)
    #: Per replica: (read id, ok, how many commands its state machine had applied then).
    reads: list[list[tuple[int, bool, int]]] = field(default_factory=list)
    #: Virtual time: every replica's clock reads this (ms); ``tick`` advances it.
    now_ms: float = 0.0
    #: Crashed replicas (see :meth:`crash`).
    down: set[int] = field(default_factory=set)
    #: Cut links ``(src, dst)``: messages on them are lost (see :meth:`partition`).
    cut: set[tuple[int, int]] = field(default_factory=set)
    #: Replicas whose ticks are withheld by :meth:`tick` (a paused or starved process).
    paused: set[int] = field(default_factory=set)
    #: Per replica: how many times it was restarted. Each incarnation gets an rng
    #: of its own, as a real process does: the core tells its own read asks apart
    #: from an earlier incarnation's by ids derived from its rng.
    restarts: dict[int, int] = field(default_factory=dict)

    @classmethod
    def build(cls, replicas: int = 3, **config: Any) -> Net:
        """``replicas`` fresh replicas; ``config`` are further :class:`ClusterConfig` fields."""
        cfg = ClusterConfig(replicas=replicas, **config)
        net = cls(cfg)
        for r in range(replicas):
            sm = Register()
            net.machines.append(sm)
            net.storages.append(MemoryStorage())
            net.replicas.append(Replica(cfg, ReplicaId(r), sm, rng=random.Random(r), observe=True))
            net.replies.append([])
            net.executed.append([])
            net.reads.append([])
        return net

    def crash(self, r: int) -> None:
        """Stop ``r``: its volatile state is gone, its storage stays."""
        self.down.add(r)
        self.pending = [p for p in self.pending if r not in (p[0], p[1])]

    def restart(self, r: int) -> None:
        """Rebuild ``r`` from exactly what it made durable (its newest snapshot and
        the records after it), with a fresh state machine."""
        self.down.discard(r)
        incarnation = self.restarts.get(r, 0) + 1
        self.restarts[r] = incarnation
        sm = Register()
        self.machines[r] = sm
        self.replicas[r] = Replica(
            self.config,
            ReplicaId(r),
            sm,
            rng=random.Random(100 * incarnation + r),
            observe=True,
            records=self.storages[r].load(),
            snapshot=self.storages[r].load_snapshot(),
        )
        self.replicas[r].tick(self.now_ms)
        self.executed[r] = []
        self.flush(r)

    def partition(self, a: set[int], b: set[int]) -> None:
        """Cut every link between ``a`` and ``b``, both ways, until :meth:`heal`."""
        self.cut |= {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}

    def heal(self) -> None:
        """Restore every cut link."""
        self.cut.clear()

    def _alive_link(self, src: int, dst: int) -> bool:
        return src not in self.down and dst not in self.down and (src, dst) not in self.cut

    def run(self, ticks: int) -> None:
        """Alternate one tick everywhere and delivering everything deliverable."""
        for _ in range(ticks):
            self.tick()
            self.deliver_all()

    def flush(self, r: int) -> None:
        """Carry out ``r``'s next ``Ready`` batch: store its records, queue its
        messages in :attr:`pending`, collect its replies, executions and reads."""
        carry_out(r, self.replicas[r].ready(), self.storages[r], _NetOutlet(self))

    def propose(
        self,
        r: int,
        client: int,
        seq: int,
        payload: bytes = b"x",
        wait: Wait = Wait.READY,
        key: bytes | None = None,
    ) -> Command:
        """Client ``client`` proposes its command ``seq`` at replica ``r``."""
        cmd = Command(client, seq, payload, key)
        self.replicas[r].propose(cmd, wait)
        self.flush(r)
        return cmd

    def deliver_one(self, i: int = 0) -> tuple[int, int, Message]:
        """Deliver the ``i``-th pending message (whatever the links say); returns it."""
        src, dst, msg = self.pending.pop(i)
        self.replicas[dst].step(msg, self.now_ms)
        self.flush(dst)
        return src, dst, msg

    def deliver_all(self, *, keep: MessagePredicate | None = None, limit: int = 100_000) -> int:
        """Deliver until quiet; ``keep`` returning False drops a message instead.

        Returns how many messages were taken off :attr:`pending` (delivered or lost).
        """
        n = 0
        while self.pending:
            n += 1
            assert n < limit, "no quiescence"
            src, dst, msg = self.pending.pop(0)
            if not self._alive_link(src, dst):
                continue
            if keep is not None and not keep(src, dst, msg):
                continue
            self.replicas[dst].step(msg, self.now_ms)
            self.flush(dst)
        return n

    def tick(self, times: int = 1) -> None:
        """Advance virtual time by ``tick_ms`` ``times`` times, ticking every live
        replica that is not paused (a paused one's next tick or step simply comes
        later, with the then-current time)."""
        for _ in range(times):
            self.now_ms += self.config.tick_ms
            for r, rep in enumerate(self.replicas):
                if r in self.down or r in self.paused:
                    continue
                rep.tick(self.now_ms)
                self.flush(r)

    def advance(self, ms: float) -> None:
        """Tick everyone for ``ms`` of virtual time (rounded up to whole ticks)."""
        self.tick(max(1, math.ceil(ms / self.config.tick_ms)))

    def deliver_where(self, pred: MessagePredicate, *, limit: int = 100_000) -> int:
        """Deliver, in FIFO order, every pending message ``pred`` accepts, including
        ones sent meanwhile, until none is left; the others stay pending."""
        n = 0
        while True:
            i = next((k for k, (s, d, m) in enumerate(self.pending) if pred(s, d, m)), None)
            if i is None:
                return n
            n += 1
            assert n < limit, "no quiescence"
            src, dst, _ = self.pending[i]
            if not self._alive_link(src, dst):
                self.pending.pop(i)
                continue
            self.deliver_one(i)

    def drop_where(self, pred: MessagePredicate) -> int:
        """Lose every pending message ``pred`` accepts; returns how many."""
        before = len(self.pending)
        self.pending = [p for p in self.pending if not pred(*p)]
        return before - len(self.pending)

    def in_flight(self) -> list[tuple[int, int, str]]:
        """:attr:`pending` as ``(src, dst, message type name)``, oldest first."""
        return [(s, d, type(m).__name__) for s, d, m in self.pending]

    def ready_ids(self, r: int) -> list[tuple[int, int]]:
        """``(client, seq)`` of every READY reply replica ``r`` gave, in order."""
        return [(x.client_id, x.seq) for x in self.replies[r] if x.kind == ReplyKind.READY]

    def executed_ids(self, r: int) -> list[tuple[int, int]]:
        """``(client, seq)`` of every command replica ``r`` applied, in order."""
        return [(e.command.client_id, e.command.seq) for e in self.executed[r]]

    def kinds(self, pred: MessagePredicate | None = None) -> list[str]:
        """Type names of every message sent so far (that ``pred`` accepts), in order."""
        return [type(m).__name__ for s, d, m in self.sent if pred is None or pred(s, d, m)]


class _NetOutlet(Outlet):
    """Where a :class:`Net` replica's effects go: its lists."""

    __slots__ = ("_net",)

    def __init__(self, net: Net) -> None:
        self._net = net

    def send(self, replica: int, messages: Sequence[tuple[int, Message]]) -> bool:
        net = self._net
        for dst, msg in messages:
            net.pending.append((replica, dst, msg))
            net.sent.append((replica, dst, msg))
        return False

    def executed(self, replica: int, entries: list[Executed]) -> None:
        self._net.executed[replica].extend(entries)

    def replies(self, replica: int, replies: list[Reply]) -> None:
        self._net.replies[replica].extend(replies)

    def reads(self, replica: int, results: list[ReadResult]) -> None:
        applied = len(self._net.machines[replica].log)
        self._net.reads[replica].extend((x.read_id, x.ok, applied) for x in results)
