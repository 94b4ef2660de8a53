"""A minimal in-memory network for core tests: no codec, no time, explicit delivery.

Tests read like protocol traces: propose, deliver (all, or one message), drop,
duplicate, tick. The simulator (``sdpaxos.sim``) is the realistic harness; this
one exists so a core rule can be pinned down message by message.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from sdpaxos.core import (
    ClusterConfig,
    Command,
    Executed,
    MemoryStorage,
    Message,
    Replica,
    Reply,
    Wait,
)


class Register:
    """Deterministic state machine: appends payloads, returns the running count."""

    def __init__(self) -> None:
        self.log: list[bytes] = []

    def apply(self, payload: bytes) -> bytes:
        self.log.append(payload)
        return str(len(self.log)).encode()


@dataclass
class Net:
    config: ClusterConfig
    replicas: list[Replica] = field(default_factory=list)
    machines: list[Register] = field(default_factory=list)
    storages: list[MemoryStorage] = field(default_factory=list)
    #: In-flight messages: (src, dst, message).
    pending: list[tuple[int, int, Message]] = field(default_factory=list)
    replies: list[list[Reply]] = field(default_factory=list)
    executed: list[list[Executed]] = field(default_factory=list)
    sent: list[tuple[int, int, Message]] = field(default_factory=list)
    reads: list[list[tuple[int, bool, int]]] = field(default_factory=list)
    #: Virtual time: every replica's clock reads this (ms); ``tick`` advances it.
    now_ms: float = 0.0

    @classmethod
    def build(cls, replicas: int = 3, **config: object) -> Net:
        cfg = ClusterConfig(replicas=replicas, **config)  # type: ignore[arg-type]
        net = cls(cfg)
        for r in range(replicas):
            sm = Register()
            net.machines.append(sm)
            net.storages.append(MemoryStorage())
            net.replicas.append(Replica(cfg, r, sm, rng=random.Random(r), observe=True))
            net.replies.append([])
            net.executed.append([])
            net.reads.append([])
        return net

    down: set[int] = field(default_factory=set)
    cut: set[tuple[int, int]] = field(default_factory=set)
    #: Replicas whose ticks are withheld by :meth:`tick` (a paused or starved process).
    paused: set[int] = field(default_factory=set)

    def crash(self, r: int) -> None:
        """Stop ``r``: its volatile state is gone, its storage stays."""
        self.down.add(r)
        self.pending = [p for p in self.pending if r not in (p[0], p[1])]

    def restart(self, r: int) -> None:
        """Rebuild ``r`` from exactly what it made durable, with a fresh state machine."""
        self.down.discard(r)
        sm = Register()
        self.machines[r] = sm
        self.replicas[r] = Replica(
            self.config,
            r,
            sm,
            rng=random.Random(100 + r),
            observe=True,
            records=self.storages[r].load(),
        )
        self.replicas[r].tick(self.now_ms)
        self.executed[r] = []
        self.flush(r)

    def partition(self, a: set[int], b: set[int]) -> None:
        self.cut |= {(x, y) for x in a for y in b} | {(y, x) for x in a for y in b}

    def heal(self) -> None:
        self.cut.clear()

    def _alive_link(self, src: int, dst: int) -> bool:
        return src not in self.down and dst not in self.down and (src, dst) not in self.cut

    def run(self, ticks: int) -> None:
        """Alternate one tick everywhere and delivering everything deliverable."""
        for _ in range(ticks):
            self.tick()
            self.deliver_all()

    def flush(self, r: int) -> None:
        rd = self.replicas[r].ready()
        self.storages[r].append(rd.persist)
        for dst, msg in rd.messages:
            self.pending.append((r, dst, msg))
            self.sent.append((r, dst, msg))
        self.replies[r].extend(rd.replies)
        self.executed[r].extend(rd.executed)
        # (read id, ok, how many commands the state machine had applied then)
        self.reads[r].extend((x.read_id, x.ok, len(self.machines[r].log)) for x in rd.reads)

    def propose(
        self,
        r: int,
        client: int,
        seq: int,
        payload: bytes = b"x",
        wait: Wait = Wait.READY,
        key: bytes | None = None,
    ) -> Command:
        cmd = Command(client, seq, payload, key)
        self.replicas[r].propose(cmd, wait)
        self.flush(r)
        return cmd

    def deliver_one(self, i: int = 0) -> tuple[int, int, Message]:
        src, dst, msg = self.pending.pop(i)
        self.replicas[dst].step(msg, self.now_ms)
        self.flush(dst)
        return src, dst, msg

    def deliver_all(
        self, *, keep: Callable[[int, int, Message], bool] | None = None, limit: int = 100_000
    ) -> int:
        """Deliver until quiet; ``keep`` returning False drops a message instead."""
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

    def deliver_where(
        self, pred: Callable[[int, int, Message], bool], *, limit: int = 100_000
    ) -> int:
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

    def drop_where(self, pred: Callable[[int, int, Message], bool]) -> int:
        """Lose every pending message ``pred`` accepts; returns how many."""
        before = len(self.pending)
        self.pending = [p for p in self.pending if not pred(*p)]
        return before - len(self.pending)

    def ready_ids(self, r: int) -> list[tuple[int, int]]:
        return [(x.client_id, x.seq) for x in self.replies[r] if x.kind == 0]

    def executed_ids(self, r: int) -> list[tuple[int, int]]:
        return [(e.command.client_id, e.command.seq) for e in self.executed[r]]

    def kinds(self, pred: Callable[[int, int, Message], bool] | None = None) -> list[str]:
        return [type(m).__name__ for s, d, m in self.sent if pred is None or pred(s, d, m)]


PAPER5_RTT_MS = (
    (1.16, 20, 52, 139, 146),
    (20, 0.02, 68, 125, 133),
    (52, 68, 1.1, 84, 197),
    (139, 125, 84, 0.48, 229),
    (146, 133, 197, 229, 1.11),
)
PAPER3_RTT_MS = tuple(row[:3] for row in PAPER5_RTT_MS[:3])


def uniform_rtt_ms(n: int, rtt_ms: float = 100.0) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(1.0 if i == j else rtt_ms for j in range(n)) for i in range(n))


def closed_loop_latency_ms(
    rtt_ms: tuple[tuple[float, ...], ...],
    *,
    sequencer: int = 0,
    commands: int = 20,
    tick_ms: float = 10.0,
    drop: Callable[[int, int, Message], bool] | None = None,
) -> dict[int, float]:
    """Mean proposal-to-ready latency per replica, one closed-loop client each.

    One-way delay is RTT/2 (``docs/protocol.md`` section 5.6); FIFO per link;
    ``drop`` may lose messages. Deterministic: a heap ordered by (time, sequence
    number).
    """
    import heapq

    n = len(rtt_ms)
    cfg = ClusterConfig(replicas=n, sequencer=sequencer, rtt_ms=rtt_ms)
    reps = [Replica(cfg, i, Register()) for i in range(n)]
    heap: list[tuple[float, int, tuple[object, ...]]] = []
    seqno = 0
    now = 0.0
    lat: dict[int, list[float]] = {i: [] for i in range(n)}
    started: dict[tuple[int, int], float] = {}

    def push(t: float, ev: tuple[object, ...]) -> None:
        nonlocal seqno
        seqno += 1
        heapq.heappush(heap, (t, seqno, ev))

    def flush(i: int) -> None:
        rd = reps[i].ready()
        for dst, m in rd.messages:
            if drop is None or not drop(i, dst, m):
                push(now + rtt_ms[i][dst] / 2, ("msg", dst, m))
        for rp in rd.replies:
            lat[i].append(now - started[(i, rp.seq)])
            if rp.seq < commands:
                propose(i, rp.seq + 1)

    def propose(i: int, s: int) -> None:
        started[(i, s)] = now
        reps[i].propose(Command(1000 + i, s, b"x"))
        flush(i)

    for i in range(n):
        propose(i, 1)
    push(tick_ms, ("tick",))
    while heap:
        now, _, ev = heapq.heappop(heap)
        if ev[0] == "msg":
            dst = ev[1]
            assert isinstance(dst, int)
            reps[dst].step(ev[2], now)  # type: ignore[arg-type]
            flush(dst)
        elif not all(len(v) >= commands for v in lat.values()):
            for i in range(n):
                reps[i].tick(now)
                flush(i)
            push(now + tick_ms, ("tick",))
    return {i: sum(v) / len(v) for i, v in lat.items() if v}
