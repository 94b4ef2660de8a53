"""Virtual time: a heap of ``(time_us, seq, event)``.

Why a sequence number: two events due at the same microsecond must come out in
a fixed order, and events themselves need not be comparable. ``seq`` grows
monotonically, so ties break by scheduling order (FIFO), never by the event's
contents or by hashing. Time is integer microseconds: floats would make
"equal time" depend on rounding.
"""

import heapq
from typing import Generic, TypeVar

E = TypeVar("E")

#: Default bound on pending events; a run that exceeds it is runaway, not busy.
EVENTS_PENDING_MAX = 10_000_000


class SchedulerFull(RuntimeError):
    """More than ``events_pending_max`` events are pending."""


class Scheduler(Generic[E]):
    """A deterministic discrete-event queue with virtual time in microseconds."""

    __slots__ = ("_heap", "_now_us", "_seq", "events_pending_max")

    def __init__(self, *, events_pending_max: int = EVENTS_PENDING_MAX) -> None:
        assert events_pending_max >= 1
        self._heap: list[tuple[int, int, E]] = []
        self._now_us = 0
        self._seq = 0
        self.events_pending_max = events_pending_max

    @property
    def now_us(self) -> int:
        """The time of the event being processed (or last processed)."""
        return self._now_us

    def __len__(self) -> int:
        return len(self._heap)

    def at(self, time_us: int, event: E) -> None:
        """Schedule ``event`` at absolute ``time_us`` (never in the past)."""
        if time_us < self._now_us:
            raise ValueError(f"cannot schedule at {time_us} us, before now ({self._now_us} us)")
        if len(self._heap) >= self.events_pending_max:
            raise SchedulerFull(f"more than {self.events_pending_max} pending events")
        heapq.heappush(self._heap, (time_us, self._seq, event))
        self._seq += 1

    def after(self, delay_us: int, event: E) -> None:
        """Schedule ``event`` ``delay_us`` from now."""
        assert delay_us >= 0, delay_us
        self.at(self._now_us + delay_us, event)

    def peek_time_us(self) -> int | None:
        """When the next event is due, or ``None`` if nothing is pending."""
        return self._heap[0][0] if self._heap else None

    def pop(self) -> tuple[int, E]:
        """Remove the next event and advance virtual time to it."""
        time_us, _, event = heapq.heappop(self._heap)
        assert time_us >= self._now_us
        self._now_us = time_us
        return time_us, event

    def pending(self) -> list[tuple[int, int, E]]:
        """Every pending ``(time_us, seq, event)``, in the order they will run."""
        return sorted(self._heap, key=lambda item: (item[0], item[1]))

    def remove(self, seq: int) -> E:
        """Take the pending event with sequence number ``seq`` out of the queue.

        Raises:
            KeyError: nothing pending has that ``seq``.
        """
        for i, (_, s, event) in enumerate(self._heap):
            if s == seq:
                self._heap[i] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return event
        raise KeyError(seq)

    def advance_to(self, time_us: int) -> None:
        """Move time forward with no event (e.g. to the end of a run window)."""
        assert time_us >= self._now_us
        next_us = self.peek_time_us()
        assert next_us is None or next_us >= time_us, "would skip a pending event"
        self._now_us = time_us
