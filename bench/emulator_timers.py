"""How precisely, and at what CPU cost, can an event loop hand on a frame when it is due?

The delay emulator (:mod:`sdpaxos.runtime.emulator`) says when each frame to a
peer is due; :mod:`sdpaxos.runtime.delivery` holds it (at the receiving node)
and hands it on then. The waiting is the same wherever the frame is held.
This measures the ways to wait, in one process, on the loop the nodes run
(uvloop when installed), with frames that look like a node's: ``--links`` links,
frames handed in at Poisson times (``--rate`` per second in all) with delays
uniform in 5 to 70 ms (a link's due times never decrease, as in a stream),
and some node work on the loop (a callback that burns
``--work-us`` of CPU every ``--work-every-ms``, so that a due frame sometimes
finds the loop busy, as in a node). For each way: the frames' lateness (written
minus due; negative is early, which must never happen), the process's CPU per
second (all threads) and the loop turns per second.

Ways:

* ``loop``: one loop timer per frame at its due time (``call_later``): fires
  up to a millisecond either way under uvloop, so frames leave early.
* ``guard-spin``: the emulator's way until this module was written: each
  link's loop timer set early by the lateness seen so far plus 1.2 ms, then
  ``call_soon`` turn by turn until the frame is due.
* ``thread``, ``thread-0.5ms``: one timing thread with a heap, waiting with
  ``threading.Condition.wait(timeout)``, handing due frames to the loop with
  ``call_soon_threadsafe``; with the default GIL switch interval (5 ms) and
  with 0.5 ms (a thread that wakes while the loop runs Python code waits for
  the GIL up to one interval).
* ``loop+1ms``: :class:`~sdpaxos.runtime.delivery.LoopAlarm`, the fallback
  where timerfd is missing: one loop timer for the earliest frame, a
  millisecond late so that it never fires early.
* ``timerfd``: :class:`~sdpaxos.runtime.delivery.TimerfdAlarm`: a kernel
  timer the loop watches as a reader, set for the due time.
* ``timerfd+lead``: what nodes use on Linux: the same, set early by the
  running median of its own wake-up delay (at most 0.2 ms), the rest waited
  out on the CPU (:class:`~sdpaxos.runtime.delivery.DelayedFrames`).
* ``timerfd+lead90``: the same with the 90th percentile instead of the median.

    python -m bench.emulator_timers                 # every way, 5 s each
    python -m bench.emulator_timers --ways timerfd,guard-spin --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from sdpaxos.runtime.delivery import (
    LEAD_MAX_S,
    LEAD_QUANTILE,
    DelayedFrames,
    LoopAlarm,
    TimerfdAlarm,
    timerfd_available,
)

WAYS = (
    "loop",
    "guard-spin",
    "thread",
    "thread-0.5ms",
    "loop+1ms",
    "timerfd",
    "timerfd+lead",
    "timerfd+lead90",
)
#: The old emulator's constants (node.py before the timerfd): the guard before
#: the lateness estimate, the bound of a lateness sample, the estimate's gain.
_GUARD_S = 0.0012
_LATE_MAX_S = 0.002
_LATE_GAIN = 0.1
DELAY_MS_RANGE = (5.0, 70.0)


class ThreadAlarm:
    """An alarm on a timing thread: waits on a condition, hands over with call_soon_threadsafe."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._cond = threading.Condition()
        self._at_s: float | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="emulator-alarm", daemon=True)
        self._thread.start()

    def set(self, at_s: float) -> None:
        with self._cond:
            self._at_s = at_s
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                at_s = self._at_s
                if at_s is None:
                    self._cond.wait()
                    continue
                wait_s = at_s - time.monotonic()
                if wait_s > 0:
                    self._cond.wait(wait_s)
                    continue
                self._at_s = None
                self._loop.call_soon_threadsafe(self._callback)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()


class _Link:
    __slots__ = ("at_s", "frames", "handle", "waited")

    def __init__(self) -> None:
        self.frames: list[float] = []
        self.handle: asyncio.Handle | None = None
        self.at_s = 0.0
        self.waited = False


class GuardSpin:
    """The old per-link timers, early by an estimate plus a guard, then call_soon."""

    def __init__(self, loop: asyncio.AbstractEventLoop, links: int, done: Callable[[float], None]):
        self.loop = loop
        self.links = [_Link() for _ in range(links)]
        self.done = done
        self.late_s = 0.0

    def send(self, link: int, due_s: float) -> None:
        lk = self.links[link]
        lk.frames.append(due_s)
        if lk.handle is None:
            self._arm(lk)

    def _fire(self, lk: _Link) -> None:
        lk.handle = None
        now_s = time.monotonic()
        if lk.waited:
            late_s = min(max(now_s - lk.at_s, -_LATE_MAX_S), _LATE_MAX_S)
            self.late_s += (late_s - self.late_s) * _LATE_GAIN
        while lk.frames and lk.frames[0] <= now_s:
            self.done(lk.frames.pop(0))
        if lk.frames:
            self._arm(lk)

    def _arm(self, lk: _Link) -> None:
        lk.at_s = lk.frames[0] - max(self.late_s, 0.0) - _GUARD_S
        delay_s = lk.at_s - time.monotonic()
        lk.waited = delay_s > 0
        if lk.waited:
            lk.handle = self.loop.call_later(delay_s, self._fire, lk)
        else:
            lk.handle = self.loop.call_soon(self._fire, lk)

    def close(self) -> None:
        for lk in self.links:
            if lk.handle is not None:
                lk.handle.cancel()


def _cpu_s() -> float:
    return time.process_time()


async def _measure(way: str, args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    rng = random.Random(args.seed)
    late: list[float] = []
    sender: Callable[[int, float], None]
    closer: Callable[[], None]

    def written(due_s: float) -> None:
        late.append(time.monotonic() - due_s)

    if way == "loop":
        handles: set[asyncio.TimerHandle] = set()

        def send_loop(link: int, due_s: float) -> None:
            def fire() -> None:
                handles.discard(h)
                written(due_s)

            h = loop.call_later(max(0.0, due_s - time.monotonic()), fire)
            handles.add(h)

        sender = send_loop

        def close_loop() -> None:
            for h in handles:
                h.cancel()

        closer = close_loop
    elif way == "guard-spin":
        gs = GuardSpin(loop, args.links, written)
        sender, closer = gs.send, gs.close
    else:
        make: Callable[[Callable[[], None]], Any]
        if way.startswith("thread"):
            make = lambda wake: ThreadAlarm(loop, wake)  # noqa: E731
        elif way == "loop+1ms":
            make = lambda wake: LoopAlarm(loop, wake)  # noqa: E731
        else:
            make = lambda wake: TimerfdAlarm(loop, wake)  # noqa: E731
        dues: dict[int, list[float]] = {}

        def write(link: int, data: bytes, frames: int) -> None:
            written(heapq.heappop(dues[link]))

        lead_max_s = LEAD_MAX_S if way.startswith("timerfd+lead") else 0.0
        quantile = 0.9 if way == "timerfd+lead90" else LEAD_QUANTILE
        delayed = DelayedFrames(write, make, 1 << 30, lead_max_s=lead_max_s, lead_quantile=quantile)

        def send_delayed(link: int, due_s: float) -> None:
            heapq.heappush(dues.setdefault(link, []), due_s)
            delayed.send(link, due_s, b"x", 1)

        sender, closer = send_delayed, delayed.close

    stop_at = time.monotonic() + args.seconds
    cpu0, t0 = _cpu_s(), time.monotonic()
    work_s = args.work_us / 1e6

    def work() -> None:
        end = time.perf_counter() + work_s
        while time.perf_counter() < end:
            pass
        if time.monotonic() < stop_at:
            loop.call_later(args.work_every_ms / 1000, work)

    if args.work_us > 0:
        loop.call_later(args.work_every_ms / 1000, work)
    last_due_s = [0.0] * args.links
    while time.monotonic() < stop_at:
        await asyncio.sleep(rng.expovariate(args.rate))
        now_s = time.monotonic()
        link = rng.randrange(args.links)
        # A link's due times never decrease (the emulator's rule 6: a stream).
        due_s = max(now_s + rng.uniform(*DELAY_MS_RANGE) / 1000, last_due_s[link])
        last_due_s[link] = due_s
        sender(link, due_s)
    await asyncio.sleep(DELAY_MS_RANGE[1] / 1000 + 0.01)
    cpu1, t1 = _cpu_s(), time.monotonic()
    closer()
    late_us = sorted(x * 1e6 for x in late)
    n = len(late_us)
    return {
        "way": way,
        "frames": n,
        "cpu_s_per_s": (cpu1 - cpu0) / (t1 - t0),
        "late_us_mean": statistics.fmean(late_us) if n else float("nan"),
        "late_us_p50": late_us[n // 2] if n else float("nan"),
        "late_us_p99": late_us[min(n - 1, int(n * 0.99))] if n else float("nan"),
        "late_us_max": late_us[-1] if n else float("nan"),
        "early": sum(1 for x in late_us if x < 0),
        "early_us_min": late_us[0] if n else float("nan"),
    }


def _run_way(way: str, args: argparse.Namespace) -> dict[str, Any]:
    interval = sys.getswitchinterval()
    if way == "thread-0.5ms":
        sys.setswitchinterval(0.0005)
    try:
        try:
            import uvloop  # type: ignore[import-not-found,unused-ignore]

            result: dict[str, Any] = uvloop.run(_measure(way, args))
        except ImportError:
            result = asyncio.run(_measure(way, args))
    finally:
        sys.setswitchinterval(interval)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.emulator_timers", description=__doc__)
    p.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated of {', '.join(WAYS)}")
    p.add_argument("--seconds", type=float, default=5.0, help="per way")
    p.add_argument("--rate", type=float, default=400.0, help="frames per second, all links")
    p.add_argument("--links", type=int, default=4)
    p.add_argument("--work-us", type=float, default=300.0, help="node work per callback")
    p.add_argument("--work-every-ms", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    for w in ways:
        if w not in WAYS:
            p.error(f"unknown way {w!r}; one of {', '.join(WAYS)}")
    if not timerfd_available():
        print("timerfd is not available here: skipped", file=sys.stderr)
        ways = [w for w in ways if not w.startswith("timerfd")]
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(
        f"{args.rate:g} frames/s on {args.links} links, delays {DELAY_MS_RANGE[0]:g}-"
        f"{DELAY_MS_RANGE[1]:g} ms, loop work {args.work_us:g} us every {args.work_every_ms:g} ms,"
        f" {args.seconds:g} s per way; load average {load}"
    )
    print("| way | frames | CPU s/s | late mean us | p50 | p99 | max | early |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for w in ways:
        print(f"  {w} ...", end="\r", file=sys.stderr)
        r = _run_way(w, args)
        print(
            f"| {w} | {r['frames']} | {r['cpu_s_per_s']:.3f} | {r['late_us_mean']:.0f} |"
            f" {r['late_us_p50']:.0f} | {r['late_us_p99']:.0f} | {r['late_us_max']:.0f} |"
            f" {r['early']} (min {r['early_us_min']:.0f}) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
