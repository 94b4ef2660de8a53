"""CPU time each simulated replica spends in its own code.

Why: the throughput experiment runs every replica in one process on a machine
whose two cores are shared with other work, so neither the simulator's virtual
time nor wall-clock rates say what a replica costs. Instead every call into a
replica (``propose``, ``step``, ``tick``, ``ready``, ``read``) and the encoding
and decoding of its messages is timed with the thread's CPU clock
(``time.thread_time``: time this thread ran, so other processes on the machine
do not inflate it) and charged to that replica. The busiest replica's CPU
seconds per 1,000 commands then give the capacity the protocol would reach with
one core per replica: ``1000 / busiest``.

Attribution of codec time: the simulator encodes a replica's outgoing batch
right after that replica's ``ready()`` returned, so encoding is charged to the
replica whose ``ready()`` ran last; it decodes an incoming packet right before
stepping its messages into the destination, so decoding is held until the next
``step`` and charged to the replica that steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: Calls that are timed, in the order tables show them.
TIMED_CALLS = ("propose", "step", "tick", "ready", "read", "encode", "decode")

Clock = Callable[[], float]


class CpuMeter:
    """CPU seconds and call counts per replica and per call name."""

    def __init__(self, replicas: int, clock: Clock = time.thread_time) -> None:
        self.clock = clock
        self.replicas = replicas
        self.seconds: list[dict[str, float]] = [
            dict.fromkeys(TIMED_CALLS, 0.0) for _ in range(replicas)
        ]
        self.calls: list[dict[str, int]] = [dict.fromkeys(TIMED_CALLS, 0) for _ in range(replicas)]
        #: The replica whose ``ready()`` ran last (encoding is charged to it).
        self.current = 0
        #: Decoding not yet charged (the next ``step`` takes it).
        self.pending_decode_s = 0.0
        self.pending_decode_calls = 0

    def add(self, replica: int, call: str, seconds: float) -> None:
        self.seconds[replica][call] += seconds
        self.calls[replica][call] += 1

    def reset(self) -> None:
        """Forget everything measured so far (the end of warm-up)."""
        for r in range(self.replicas):
            self.seconds[r] = dict.fromkeys(TIMED_CALLS, 0.0)
            self.calls[r] = dict.fromkeys(TIMED_CALLS, 0)
        self.pending_decode_s = 0.0
        self.pending_decode_calls = 0

    def total_s(self, replica: int) -> float:
        return sum(self.seconds[replica].values())

    def to_json(self) -> dict[str, Any]:
        return {
            "per_replica": [
                {
                    "cpu_s": round(self.total_s(r), 6),
                    "seconds": {k: round(v, 6) for k, v in self.seconds[r].items()},
                    "calls": dict(self.calls[r]),
                }
                for r in range(self.replicas)
            ]
        }


class TimedReplica:
    """A replica whose driving calls are charged to ``meter`` as replica ``index``.

    Every other attribute (``sequencer``, ``view``, ``stats``, ...) is the inner
    replica's, so the simulator and its checkers see no difference. ``read``
    exists only if the inner replica has it: the simulator and the clients ask
    ``getattr(replica, "read", None)`` to know whether a protocol has a read path.
    """

    __slots__ = ("_clock", "_index", "_inner", "_meter")

    def __init__(self, inner: Any, index: int, meter: CpuMeter) -> None:
        self._inner = inner
        self._index = index
        self._meter = meter
        self._clock = meter.clock

    def propose(self, command: Any, *args: Any) -> None:
        t0 = self._clock()
        try:
            self._inner.propose(command, *args)
        finally:
            self._meter.add(self._index, "propose", self._clock() - t0)

    def step(self, message: Any, now_ms: float) -> None:
        m = self._meter
        if m.pending_decode_calls:
            m.seconds[self._index]["decode"] += m.pending_decode_s
            m.calls[self._index]["decode"] += m.pending_decode_calls
            m.pending_decode_s = 0.0
            m.pending_decode_calls = 0
        t0 = self._clock()
        try:
            self._inner.step(message, now_ms)
        finally:
            m.add(self._index, "step", self._clock() - t0)

    def tick(self, now_ms: float) -> None:
        t0 = self._clock()
        try:
            self._inner.tick(now_ms)
        finally:
            self._meter.add(self._index, "tick", self._clock() - t0)

    def ready(self) -> Any:
        self._meter.current = self._index
        t0 = self._clock()
        try:
            return self._inner.ready()
        finally:
            self._meter.add(self._index, "ready", self._clock() - t0)

    def observe_rtt(self, peer: Any, rtt_ms: float) -> None:
        self._inner.observe_rtt(peer, rtt_ms)

    def _timed_read(self, read_id: int, key: bytes | None, now_ms: float) -> None:
        t0 = self._clock()
        try:
            self._inner.read(read_id, key, now_ms)
        finally:
            self._meter.add(self._index, "read", self._clock() - t0)

    def __getattr__(self, name: str) -> Any:
        if name == "read":
            if not hasattr(self._inner, "read"):
                raise AttributeError(name)  # the protocol has no read path
            return self._timed_read
        return getattr(self._inner, name)


class TimedCodec:
    """A batch codec whose work is charged to replicas (see the module docstring)."""

    __slots__ = ("_clock", "_inner", "_meter")

    def __init__(self, inner: Any, meter: CpuMeter) -> None:
        self._inner = inner
        self._meter = meter
        self._clock = meter.clock

    def encode_batch(self, messages: list[Any]) -> bytes:
        t0 = self._clock()
        data: bytes = self._inner.encode_batch(messages)
        self._meter.add(self._meter.current, "encode", self._clock() - t0)
        return data

    def decode_batch(self, data: bytes) -> list[Any]:
        t0 = self._clock()
        messages = list(self._inner.decode_batch(data))
        self._meter.pending_decode_s += self._clock() - t0
        self._meter.pending_decode_calls += 1
        return messages
