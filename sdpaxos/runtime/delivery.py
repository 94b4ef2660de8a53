"""The delay emulator's frames in flight: each handled when it is due, without spinning.

:mod:`sdpaxos.runtime.emulator` says, at the sending node, *when* a frame to a
peer is due. The sender writes the frame at once, behind a DUE mark
(:class:`sdpaxos.runtime.frames.Due`), and the receiving node holds it here
until then and hands it on (:class:`DelayedFrames`). Holding at the receiver
is what a real network does: the sender's process writes and goes on, and
only the receiver's wakes when the bytes are due. (A sender that held its
frames would wake at the due time to write them, and the receiver would wake
after that: two wake-ups and a write in series on every hop, where a real path
has one wake-up.) The bytes themselves arrive early, so TLS decrypts them
before the hold; decoding and stepping the messages come after it. Three rules:

1. **Never early.** A frame is handed on only once ``clock() >= due``; it may be
   late by the loop turn in progress when it comes due (whatever callback the
   node is running then), and by the alarm's own wake-up delay.
2. **Per-link order.** Frames of one link leave in the order they were handed
   in (a TCP stream never reorders). Frames are kept in one heap ordered by
   ``(due, sequence number)``, and a link's due times never decrease (the
   emulator's rule 6; a frame due earlier than one before it on its link is
   held until that one's time), so a link's frames come out in order; a frame
   handed in while earlier ones of its link are held waits behind them even
   when it is due already (a link is a peer: a frame on a new connection
   waits behind the old connection's).
3. **No busy waiting.** One alarm per node, set to the earliest due frame of
   any link, wakes the event loop once per due time. Nothing runs while a
   frame waits.

Why an alarm of its own and not the loop's timers: event-loop timers do not
fire on time. asyncio's fire about a millisecond late (epoll's timeout counts
whole milliseconds, rounded up); uvloop's within a millisecond either way
(libuv counts whole milliseconds from a clock read once per loop turn). On a
path of four hops that adds up to several percent of a 52 ms commit. The
emulator used to set each link's loop timer early by the timers' spread (1.2
ms) and wait out the rest loop turn by loop turn (``call_soon``): precise on
an idle machine, but every link with a frame in flight kept its node busy, a
node that never sleeps looks CPU-bound to the kernel's scheduler, and on a
loaded machine its frames left milliseconds late (``bench/README.md``, "The
emulator adds no bias", has the figures).

:class:`TimerfdAlarm` (Linux) is a ``timerfd`` on ``CLOCK_MONOTONIC`` (the
clock of :func:`time.monotonic`), set to an absolute time in nanoseconds and
watched by the loop as a reader: the kernel's high-resolution timer wakes the
loop's ``epoll_wait`` when the frame is due (no timer slack applies to a
timerfd), with no thread and no hand-off through the GIL. Elsewhere
:class:`LoopAlarm` uses the loop's timer, set a millisecond past the due time
so that it never fires early (frames leave up to about 2 ms late there).
``bench/emulator_timers.py`` measures these against the old spin and against a
timing thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import heapq
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = [
    "LATE_BUCKETS_US",
    "LEAD_MAX_S",
    "Alarm",
    "DelayedFrames",
    "LoopAlarm",
    "TimerfdAlarm",
    "clock_token",
    "due_here_s",
    "make_alarm",
    "timerfd_available",
]

#: Upper bounds (us) of the lateness histogram's buckets; the last is open.
LATE_BUCKETS_US = (50, 200, 1_000, 5_000)
#: The alarm is set early by the LEAD_QUANTILE of its own wake-up delay (a
#: running estimate, at most LEAD_MAX_S), and the rest is waited out on the CPU:
#: see :class:`DelayedFrames` (why the median).
LEAD_MAX_S = 0.0002
LEAD_QUANTILE = 0.5
#: How far one wake-up moves the estimate (up by LEAD_QUANTILE of it when the
#: alarm was later than the lead, down by the rest when not).
LEAD_STEP_S = 2e-6
#: :class:`LoopAlarm` fires this long after the due time: loop timers fire up
#: to a millisecond early under uvloop, and a frame must never leave early.
LOOP_TIMER_ROUND_S = 0.001

# Linux <sys/timerfd.h> and <time.h>.
_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000


#: A DUE mark sent this far in the receiver's future was not sent on the
#: receiver's clock, whatever its token says (a time namespace, say): its
#: frames are held for their delay from the mark's arrival instead.
CLOCK_SKEW_S_MAX = 0.001
#: Where the kernel names its boot: every process of one boot shares
#: ``CLOCK_MONOTONIC``.
_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"

_clock_token: int | None = None


def clock_token() -> int:
    """A name for this process's :func:`time.monotonic` clock, the same in every
    process on this machine (its boot id, hashed to 63 bits), or a random one
    where there is no boot id (then no other process shares it)."""
    global _clock_token
    if _clock_token is None:
        try:
            with open(_BOOT_ID_PATH, "rb") as f:
                raw = f.read()
        except OSError:
            raw = b""
        seed = raw.strip() or os.urandom(16)
        _clock_token = int.from_bytes(hashlib.blake2b(seed, digest_size=8).digest(), "big") >> 1
    return _clock_token


def due_here_s(sent_s: float, due_s: float, clock: int, now_s: float, mine: int) -> float:
    """When frames marked due at ``due_s`` (sent at ``sent_s`` on clock ``clock``)
    are due on this process's clock, read as ``now_s`` when the mark arrived.

    On the same clock the mark's own time holds, so the real network's
    transfer and this process's wake-up to read the bytes fall inside the
    emulated delay, as they do on a real path. On another clock the delay
    ``due_s - sent_s`` starts when the mark arrived, and the real transfer
    adds to it.
    """
    if clock == mine and sent_s <= now_s + CLOCK_SKEW_S_MAX:
        return due_s
    return now_s + (due_s - sent_s)


class Alarm(Protocol):
    """Calls its callback once, on the event loop, at or after the time set."""

    def set(self, at_s: float) -> None:
        """(Re)arm for ``at_s`` on :func:`time.monotonic`'s clock; replaces any earlier setting."""
        ...

    def close(self) -> None:
        """Disarm for good and free what the alarm holds (idempotent)."""
        ...


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc: Any = None


def _timerfd_libc() -> Any:
    """libc with ``timerfd_create``/``timerfd_settime``, or None (not Linux, no libc)."""
    global _libc
    if _libc is None:
        if not sys.platform.startswith("linux"):
            _libc = False
        else:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
                libc.timerfd_create.restype = ctypes.c_int
                libc.timerfd_settime.argtypes = [
                    ctypes.c_int,
                    ctypes.c_int,
                    ctypes.POINTER(_Itimerspec),
                    ctypes.c_void_p,
                ]
                libc.timerfd_settime.restype = ctypes.c_int
                _libc = libc
            except (OSError, AttributeError):
                _libc = False
    return _libc or None


def timerfd_available() -> bool:
    """Whether :class:`TimerfdAlarm` can be used here (Linux with a libc that has timerfd)."""
    return _timerfd_libc() is not None


class TimerfdAlarm:
    """An :class:`Alarm` on a Linux timerfd watched by the loop (module docstring)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        libc = _timerfd_libc()
        if libc is None:
            raise OSError("timerfd is not available on this platform")
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._libc = libc
        self._fd = fd
        self._loop = loop
        self._callback = callback
        self._spec = _Itimerspec()
        self._closed = False
        loop.add_reader(fd, self._expired)

    def set(self, at_s: float) -> None:
        if self._closed:
            return
        # Rounded up to the nanosecond: the kernel never fires before it.
        ns = max(1, math.ceil(at_s * 1e9))
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(ns, 1_000_000_000)
        if self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, self._spec, None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    def _expired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # set again after it expired: nothing is due yet
            return
        self._callback()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.remove_reader(self._fd)
        os.close(self._fd)


class LoopAlarm:
    """An :class:`Alarm` on the loop's own timer, :data:`LOOP_TIMER_ROUND_S` late."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._closed = False

    def set(self, at_s: float) -> None:
        if self._closed:
            return
        if self._handle is not None:
            self._handle.cancel()
        delay_s = max(0.0, at_s - time.monotonic()) + LOOP_TIMER_ROUND_S
        self._handle = self._loop.call_later(delay_s, self._expired)

    def _expired(self) -> None:
        self._handle = None
        self._callback()

    def close(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


def make_alarm(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> Alarm:
    """A :class:`TimerfdAlarm` where the platform has timerfd, else a :class:`LoopAlarm`."""
    if timerfd_available():
        try:
            return TimerfdAlarm(loop, callback)
        except OSError:
            pass
    return LoopAlarm(loop, callback)


def spin_until(at_s: float) -> None:
    """Wait on the CPU until :func:`time.monotonic` reaches ``at_s`` (the last
    microseconds before a frame is due; :class:`DelayedFrames` bounds them)."""
    clock = time.monotonic
    while clock() < at_s:
        pass


class DelayedFrames:
    """One node's frames held by the emulator (module docstring: the three rules).

    ``write(link, data, frames)`` hands on ``data`` (``frames`` frames) from
    link ``link`` once due: in a node, one frame of peer ``link``, handled as
    if it had just arrived.
    ``make(wake)`` makes the alarm, with :meth:`_wake` as its callback;
    ``clock`` is :func:`time.monotonic` and ``wait_until`` is
    :func:`spin_until` in a node (tests pass a fake clock, alarm and wait).
    ``bytes_max``: a link holding more than this many bytes drops the new
    frame and counts it (``dropped``), as a connection does with unsent bytes
    (the core retransmits what matters).

    The lead. Even a timerfd wakes the loop some tens of microseconds after
    its time (on this project's VM: a median of about 80 us, measured by
    ``bench/emulator_timers.py``), and every hop of a commit pays it. So the
    alarm is set early by :attr:`lead_s`, a running estimate of the
    :data:`LEAD_QUANTILE` of the alarm's own wake-up delay (a frugal streaming
    quantile: each wake-up moves it :data:`LEAD_STEP_S` up or down), capped at
    ``lead_max_s``; a wake-up that comes before the earliest frame is due
    waits out the rest with ``wait_until``, on the CPU and without yielding,
    which is never more than ``lead_max_s`` a wake-up. A frame due further
    off than that (the estimate moved, or a spurious wake-up) sets the alarm
    again instead. ``lead_max_s = 0`` turns the lead off.

    Why the median: with wake-up delay ``L`` and lead ``l``, a wake-up costs
    ``E[(l - L)+]`` of CPU and leaves frames ``E[(L - l)+]`` late; raising
    ``l`` adds ``P(L < l)`` to the first and takes ``P(L > l)`` off the
    second, so at the ``q`` quantile one microsecond of lateness is traded
    for ``(1 - q) / q`` of CPU. On two cores shared by every node a
    microsecond of CPU is worth at least one of latency: ``q = 0.5``. Measured
    (``bench/emulator_timers.py``): the median frame leaves about 20 us after
    it is due instead of 80, for no CPU that the measurement can tell apart.
    """

    __slots__ = (
        "_alarm",
        "_alarm_at_s",
        "_alarm_waited",
        "_armed_s",
        "_clock",
        "_heap",
        "_held_bytes",
        "_held_frames",
        "_last_due_s",
        "_seq",
        "_wait_until",
        "_write",
        "alarm_kind",
        "bytes_max",
        "dropped",
        "frames_delivered",
        "late_buckets",
        "late_max_s",
        "late_sum_s",
        "lead_max_s",
        "lead_quantile",
        "lead_s",
        "spin_s",
        "spins",
        "wakeups",
        "wakeups_idle",
    )

    def __init__(
        self,
        write: Callable[[int, bytes, int], None],
        make: Callable[[Callable[[], None]], Alarm],
        bytes_max: int,
        clock: Callable[[], float] = time.monotonic,
        wait_until: Callable[[float], None] = spin_until,
        lead_max_s: float = LEAD_MAX_S,
        lead_quantile: float = LEAD_QUANTILE,
    ) -> None:
        self._write = write
        self._clock = clock
        self._wait_until = wait_until
        self.bytes_max = bytes_max
        self.lead_max_s = lead_max_s
        self.lead_quantile = lead_quantile
        self.lead_s = 0.0
        #: (due s, sequence number, link, framed bytes, frame count)
        self._heap: list[tuple[float, int, int, bytes, int]] = []
        self._seq = 0
        self._held_frames: dict[int, int] = {}
        self._held_bytes: dict[int, int] = {}
        #: Each link's latest due time handed in (rule 2 whatever the caller does).
        self._last_due_s: dict[int, float] = {}
        #: The due time the alarm is set for (None: not set), the time it is
        #: set to (that minus the lead), and whether that was still ahead.
        self._armed_s: float | None = None
        self._alarm_at_s = 0.0
        self._alarm_waited = False
        self._alarm = make(self._wake)
        self.alarm_kind = type(self._alarm).__name__
        # Counters (see to_json).
        self.dropped = 0
        self.frames_delivered = 0
        self.wakeups = 0
        self.wakeups_idle = 0
        self.spins = 0
        self.spin_s = 0.0
        self.late_sum_s = 0.0
        self.late_max_s = 0.0
        self.late_buckets = [0] * (len(LATE_BUCKETS_US) + 1)

    def held(self, link: int) -> int:
        """Frames of ``link`` waiting (counted per ``send`` call's ``frames``)."""
        return self._held_frames.get(link, 0)

    def send(self, link: int, due_s: float, data: bytes, frames: int) -> bool:
        """Hand ``data`` on at ``due_s`` (now if it is due and nothing of the
        link waits). False: dropped, the link holds ``bytes_max`` already.

        A ``due_s`` earlier than one handed in before for the link is taken as
        that one (the emulator never does this: its rule 6).
        """
        held = self._held_frames.get(link, 0)
        if not held and due_s <= self._clock():
            self._write(link, data, frames)
            return True
        held_bytes = self._held_bytes.get(link, 0)
        if held_bytes + len(data) > self.bytes_max:
            self.dropped += frames
            return False
        due_s = max(due_s, self._last_due_s.get(link, due_s))
        self._last_due_s[link] = due_s
        self._held_frames[link] = held + frames
        self._held_bytes[link] = held_bytes + len(data)
        self._seq += 1
        heapq.heappush(self._heap, (due_s, self._seq, link, data, frames))
        if self._armed_s is None or due_s < self._armed_s:
            self._arm(due_s)
        return True

    def _arm(self, due_s: float) -> None:
        self._armed_s = due_s
        at_s = due_s - self.lead_s
        self._alarm_at_s = at_s
        self._alarm_waited = at_s > self._clock()
        self._alarm.set(at_s)

    def _wake(self) -> None:
        """The alarm fired: hand on every frame that is due, in order; set it for the next."""
        self._armed_s = None
        self.wakeups += 1
        heap = self._heap
        now_s = self._clock()
        if self._alarm_waited:  # how late the alarm itself was: the lead's sample
            q = self.lead_quantile
            step = LEAD_STEP_S * (q if now_s - self._alarm_at_s > self.lead_s else q - 1.0)
            self.lead_s = min(max(self.lead_s + step, 0.0), self.lead_max_s)
        if heap and now_s < heap[0][0] <= now_s + self.lead_max_s:
            self._wait_until(heap[0][0])
            self.spins += 1
            then_s = now_s
            now_s = self._clock()
            self.spin_s += now_s - then_s
        if not heap or heap[0][0] > now_s:
            self.wakeups_idle += 1
        while heap and heap[0][0] <= now_s:
            due_s, _, link, data, frames = heapq.heappop(heap)
            self._held_frames[link] -= frames
            self._held_bytes[link] -= len(data)
            self._count_late(now_s - due_s, frames)
            self._write(link, data, frames)
        if heap:
            self._arm(heap[0][0])

    def _count_late(self, late_s: float, frames: int) -> None:
        self.frames_delivered += frames
        self.late_sum_s += late_s * frames
        if late_s > self.late_max_s:
            self.late_max_s = late_s
        late_us = late_s * 1e6
        for i, bound in enumerate(LATE_BUCKETS_US):
            if late_us < bound:
                self.late_buckets[i] += frames
                return
        self.late_buckets[-1] += frames

    def close(self) -> None:
        """Drop every held frame and free the alarm (a stopping node)."""
        self._alarm.close()
        self._armed_s = None
        self._heap.clear()
        self._held_frames.clear()
        self._held_bytes.clear()
        self._last_due_s.clear()

    def to_json(self) -> dict[str, Any]:
        """Counters as plain data: held, delivered (handed on), dropped,
        wake-ups, the lead and the waits it cost (us), lateness (us)."""
        bounds = [f"<{b}" for b in LATE_BUCKETS_US] + [f">={LATE_BUCKETS_US[-1]}"]
        return {
            "alarm": self.alarm_kind,
            "frames_held": sum(self._held_frames.values()),
            "frames_delivered": self.frames_delivered,
            "frames_dropped": self.dropped,
            "wakeups": self.wakeups,
            "wakeups_idle": self.wakeups_idle,
            "lead_us": round(self.lead_s * 1e6, 1),
            "spins": self.spins,
            "spin_us_sum": round(self.spin_s * 1e6, 1),
            "late_us_sum": round(self.late_sum_s * 1e6, 1),
            "late_us_max": round(self.late_max_s * 1e6, 1),
            "late_us_buckets": dict(zip(bounds, self.late_buckets, strict=True)),
        }
