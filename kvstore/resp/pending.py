"""The one kind of promise a backend answers with: :class:`Deferred`.

A backend that cannot answer at once (the replicated node: its answers come
when a batch has executed) hands back a :class:`Deferred` standing for the
replies of ``count`` consecutive requests, and sets it later to the list of
them, in request order. One kind for one request and for a run of them, and
one callback (the connection's): no event-loop hop per reply (an
:class:`asyncio.Future` schedules each callback on the loop's ready queue),
and a run of hundreds of commands answered at once costs one callback.

Pure: no asyncio, no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kvstore.values import Value

__all__ = ["Deferred"]

log = logging.getLogger(__name__)


class Deferred:
    """The replies of ``count`` consecutive requests, known later at once.

    :meth:`set` it once, to the list of the ``count`` replies in request
    order (an :class:`~kvstore.resp.writer.OkList` if they are all ``OK``);
    the one callback runs then (or at once, if it is added after). Callbacks
    run in :meth:`set`, on the caller's thread (the loop's).
    """

    __slots__ = ("_callback", "count", "done", "value")

    def __init__(self, count: int = 1) -> None:
        self.count = count
        self.done = False
        self.value: list[Value] | None = None
        self._callback: Callable[[list[Value]], None] | None = None

    def add_callback(self, fn: Callable[[list[Value]], None]) -> None:
        """Call ``fn(values)`` when the replies are set (now, if they are).
        A Deferred has one reader: a second callback is refused."""
        if self._callback is not None:
            raise RuntimeError("a Deferred takes one callback")
        if self.done:
            values = self.value
            assert values is not None  # set() sets it before done
            fn(values)
        else:
            self._callback = fn

    def set(self, values: list[Value]) -> None:
        """Set the replies (once; later calls are ignored) and run the callback."""
        if self.done:
            return
        self.done = True
        self.value = values
        fn = self._callback
        if fn is not None:
            self._callback = None
            try:
                fn(values)
            except Exception:
                log.exception("a Deferred callback failed")
