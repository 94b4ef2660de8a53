"""Core test harnesses: explicit delivery (re-exported) and a timed closed loop.

The explicit-delivery network (``Net``, ``Register``, the paper's RTT tables) is
public now, in :mod:`sdpaxos.sim.explicit`; it is re-exported here so the core
tests keep importing it from where they always did. The simulator
(``sdpaxos.sim``) is the realistic harness; these exist so a core rule can be
pinned down message by message, and a latency claim of the paper checked
without a network model.
"""

from __future__ import annotations

from collections.abc import Callable

from sdpaxos.core import ClusterConfig, Command, MemoryStorage, Message, Replica, Reply
from sdpaxos.sim.driver import Node, Outlet
from sdpaxos.sim.explicit import (
    PAPER3_RTT_MS,
    PAPER5_RTT_MS,
    Net,
    Register,
    uniform_rtt_ms,
)

__all__ = [
    "PAPER3_RTT_MS",
    "PAPER5_RTT_MS",
    "Net",
    "Register",
    "closed_loop_latency_ms",
    "uniform_rtt_ms",
]


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
    nodes: list[Node[Register]] = []
    for i in range(n):
        sm = Register()
        nodes.append(Node(i, Replica(cfg, i, sm), MemoryStorage(), sm))
    heap: list[tuple[float, int, tuple[object, ...]]] = []
    seqno = 0
    now = 0.0
    lat: dict[int, list[float]] = {i: [] for i in range(n)}
    started: dict[tuple[int, int], float] = {}

    def push(t: float, ev: tuple[object, ...]) -> None:
        nonlocal seqno
        seqno += 1
        heapq.heappush(heap, (t, seqno, ev))

    class Loop(Outlet):
        """Messages travel RTT/2 (unless ``drop``); a READY reply starts the next command."""

        def send(self, replica: int, messages: list[tuple[int, Message]]) -> bool:
            for dst, m in messages:
                if drop is None or not drop(replica, dst, m):
                    push(now + rtt_ms[replica][dst] / 2, ("msg", dst, m))
            return False

        def replies(self, replica: int, replies: list[Reply]) -> None:
            for rp in replies:
                lat[replica].append(now - started[(replica, rp.seq)])
                if rp.seq < commands:
                    propose(replica, rp.seq + 1)

    loop = Loop()

    def flush(i: int) -> None:
        nodes[i].flush(loop)

    def propose(i: int, s: int) -> None:
        started[(i, s)] = now
        nodes[i].replica.propose(Command(1000 + i, s, b"x"))
        flush(i)

    for i in range(n):
        propose(i, 1)
    push(tick_ms, ("tick",))
    while heap:
        now, _, ev = heapq.heappop(heap)
        if ev[0] == "msg":
            dst = ev[1]
            assert isinstance(dst, int)
            nodes[dst].replica.step(ev[2], now)  # type: ignore[arg-type]
            flush(dst)
        elif not all(len(v) >= commands for v in lat.values()):
            for node in nodes:
                node.replica.tick(now)
                flush(node.id)
            push(now + tick_ms, ("tick",))
    return {i: sum(v) / len(v) for i, v in lat.items() if v}
