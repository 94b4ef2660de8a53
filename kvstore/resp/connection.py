"""One client connection (h11's ``_connection``): requests in, through the
:class:`~kvstore.resp.reader.RequestReader`; each run by the connection
commands (:mod:`kvstore.resp.front`) or the backend; replies out, through the
writer (:mod:`kvstore.resp.writer`), strictly in request order.

Pipelining: every complete request in a read is started at once (a backend
may answer synchronously, or with a :class:`~kvstore.resp.pending.Deferred`
or an awaitable that finishes later and in any order). Each reply has a slot
in request order; what is ready at the head is written in one
``transport.write``: at the end of a read, or as soon as a late reply
arrives (not a loop turn later; a promise a backend keeps at once, while the
read is being run, is written then, before the read's later replies). At most
``RespLimits.pipeline_pending_max`` requests per connection are in flight;
past that, and whenever the transport's write buffer is full, the connection
stops reading, so a client cannot make the server buffer without bound. A
protocol error answers ``-ERR Protocol error: ...`` (Redis' wording) after the
replies before it and closes the connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from operator import itemgetter
from typing import Any, Protocol, cast

from kvstore.resp.backend import Backend, ConnState
from kvstore.resp.front import FRONT, NO_AUTH, Quit
from kvstore.resp.limits import RespLimits
from kvstore.resp.pending import Deferred
from kvstore.resp.reader import RequestReader, hiredis_problem
from kvstore.resp.writer import (
    INTERNAL_ERROR_REPLY,
    OK_REPLY,
    REPLY_TYPES,
    OkList,
    encode,
    line,
)
from kvstore.values import OK, Error, Value

__all__ = ["ConnectionServer", "RespConnection"]

log = logging.getLogger(__name__)

_first = itemgetter(0)


class ConnectionServer(Protocol):
    """What a connection needs of the server that accepted it."""

    @property
    def limits(self) -> RespLimits: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def stale_reads(self) -> bool: ...

    @property
    def users(self) -> dict[str, str] | None: ...

    @property
    def port(self) -> int | None: ...

    @property
    def clients_max(self) -> int: ...

    @property
    def stats(self) -> dict[str, int]: ...

    @property
    def connections(self) -> set[RespConnection]: ...

    def flush_later(self, conn: RespConnection) -> None:
        """Run ``conn._late_flush()`` at the next loop turn."""
        ...


class _Slot:
    """A reply's place in request order: its bytes once known."""

    __slots__ = ("data", "then_close")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.then_close = False


class RespConnection(asyncio.Protocol):
    """One client connection: frames requests, runs them, writes replies in order."""

    def __init__(self, server: ConnectionServer) -> None:
        self.server = server
        self.limits = server.limits
        self.backend = server.backend
        self.execute_many: Callable[[list[list[bytes]], ConnState], list[Any]] | None = getattr(
            server.backend, "execute_many", None
        )
        self.state = ConnState(stale_reads=server.stale_reads)
        if server.users is None:
            self.state.user = "default"
        self.transport: asyncio.Transport | None = None
        self.reader = RequestReader(self.limits)
        self.slots: deque[_Slot] = deque()  # replies not yet written, in request order
        self.out: list[bytes] = []  # encoded replies for this flush
        self.closing = False  # no more requests are read (QUIT, protocol error)
        self.lost = False
        self.write_paused = False
        self.read_paused = False
        self.flush_scheduled = False

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)
        server = self.server
        server.stats["connections_received"] += 1
        if len(server.connections) >= server.clients_max:
            # Redis' answer and behaviour: say so, then close.
            server.stats["rejected_connections"] += 1
            self.closing = True
            transport.write(b"-ERR max number of clients reached\r\n")  # type: ignore[attr-defined]
            transport.close()
            return
        server.connections.add(self)
        peer, sock = self.transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        self.state.addr = _addr(peer)
        self.state.laddr = _addr(sock)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.closing = True
        self.server.connections.discard(self)
        self.slots.clear()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._update_reading()
        self._drain()
        self._flush()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        reader = self.reader
        if reader.wants_inline(data):
            # Inline (telnet-style) commands, each run alone as Redis runs them.
            inline = reader.read_inline(data)
            for args in inline.requests:
                if self.closing:
                    break
                self._start(args)
            if inline.problem is not None and not self.closing:
                self._protocol_error(inline.problem)
            data = inline.rest
            if not data or self.closing:
                self._flush()
                return
        problem = reader.feed(data)
        if problem:
            self._protocol_error(problem)
            self._flush()
            return
        self._drain()  # which updates reading when it ends normally
        slots = self.slots
        if self.out or (slots and slots[0].data is not None):
            self._flush()

    # -- reading ----------------------------------------------------------------------

    def _drain(self) -> None:
        """Start every complete request the reader holds, while the limits allow.

        Consecutive data commands are gathered into a run and handed to the
        backend's ``execute_many`` in one call (when it has one); a connection
        command, an unauthenticated connection, an error or the end of what
        the reader holds ends the run, which is started before anything after it.
        """
        if self.closing or self.write_paused:
            self._update_reading()
            return
        reader = self.reader
        got, problem, hiredis_error = reader.take(
            self.limits.pipeline_pending_max - len(self.slots)
        )
        if len(got) == 1:  # one request (no pipelining): the same, without the passes
            args = got[0]
            if (
                args
                and self.execute_many is not None
                and self.state.user is not None
                and args[0].upper() not in FRONT
            ):
                self._start_many(got)
            else:
                self._start_each(got)
        elif got:
            if (
                self.execute_many is not None
                and self.state.user is not None
                and all(got)  # no ``*0``
                and FRONT.keys().isdisjoint(map(bytes.upper, set(map(_first, got))))
            ):
                self._start_many(got)
            else:
                self._start_each(got)
        if problem is not None:
            self._protocol_error(problem)
            return
        if hiredis_error is not None:
            rest = reader.inline_rest()
            if rest is not None:
                self.data_received(rest)
                return
            self._protocol_error(hiredis_problem(hiredis_error))
            return
        self._update_reading()

    def _start_each(self, got: list[list[bytes]]) -> None:
        """Start ``got`` request by request: connection commands alone, runs of
        data commands together; nothing after a request that closes."""
        many = self.execute_many
        state = self.state
        front = FRONT
        run: list[list[bytes]] = []  # data commands not yet handed to the backend
        for args in got:
            if self.closing:
                break
            if not args:
                continue  # ``*0``
            if many is None or state.user is None or args[0].upper() in front:
                if run:
                    self._start_many(run)
                    run = []
                self._start(args)
                continue
            run.append(args)
        if run:
            self._start_many(run)

    def _update_reading(self) -> None:
        """Read only while under the in-flight bound and the transport can write."""
        transport = self.transport
        if transport is None or self.lost:
            return
        want_pause = self.write_paused or len(self.slots) >= self.limits.pipeline_pending_max
        if want_pause and not self.read_paused:
            self.read_paused = True
            transport.pause_reading()
        elif not want_pause and self.read_paused and not self.closing:
            self.read_paused = False
            transport.resume_reading()

    # -- running ----------------------------------------------------------------------

    def _start(self, args: list[bytes]) -> None:
        """Run one request; queue its reply (now, or when it is known)."""
        self.server.stats["commands"] += 1
        state = self.state
        try:
            name = args[0].upper()
            handler = FRONT.get(name)
            if state.user is None and name not in NO_AUTH:
                result: Any = Error("NOAUTH Authentication required.")
            elif handler is not None:
                result = handler(self, args)
            else:
                result = self.backend.execute(args, state)
        except Exception:
            log.exception("command %r failed", args[:1])
            self.server.stats["internal_errors"] += 1
            result = Error("ERR internal error")
        # After the command: HELLO answers in the new protocol.
        self._queue(result, state.protocol == 3, args)

    def _start_many(self, run: list[list[bytes]]) -> None:
        """Hand a run of data commands to the backend at once; queue their replies."""
        assert self.execute_many is not None
        self.server.stats["commands"] += len(run)
        state = self.state
        try:
            answers = self.execute_many(run, state)
        except Exception:
            log.exception("commands %r... failed", run[0][:1])
            self.server.stats["internal_errors"] += 1
            answers = [Error("ERR internal error")] * len(run)
        resp3 = state.protocol == 3
        slots = self.slots
        for answer in answers:
            if type(answer) is Deferred:
                slot = _Slot()
                slots.append(slot)
                answer.add_callback(partial(self._deliver, slot, resp3, answer.count))
            else:
                self._queue(answer, resp3, run[0])

    def _queue(self, result: Any, resp3: bool, args: list[bytes]) -> None:
        """Queue one request's reply: encoded now, or when it is known."""
        if type(result) in REPLY_TYPES:
            if not self.slots:
                encode(result, self.out, resp3)
                return
            slot = _Slot()
            data: list[bytes] = []
            encode(result, data, resp3)
            slot.data = b"".join(data)
            self.slots.append(slot)
            return
        if type(result) is Quit:
            slot = _Slot()
            slot.data = OK_REPLY
            slot.then_close = True
            self.slots.append(slot)
            self.closing = True
            return
        slot = _Slot()
        self.slots.append(slot)
        if type(result) is Deferred:
            result.add_callback(partial(self._deliver, slot, resp3, result.count))
            return
        try:
            future = asyncio.ensure_future(cast(Awaitable[Value], result))
        except TypeError:
            log.error("backend answered %r with %r, not a value or awaitable", args[:1], result)
            slot.data = INTERNAL_ERROR_REPLY
            return
        future.add_done_callback(partial(self._finished, slot, resp3))

    def _finished(self, slot: _Slot, resp3: bool, future: asyncio.Future[Any]) -> None:
        """An awaitable's reply is known: encode it into its slot."""
        if self.lost:
            if not future.cancelled():
                future.exception()  # retrieved: nobody is waiting for it
            return
        data: list[bytes] = []
        try:
            encode(future.result(), data, resp3)
        except Exception:
            log.exception("a backend command failed")
            self.server.stats["internal_errors"] += 1
            data = [INTERNAL_ERROR_REPLY]
        slot.data = b"".join(data)
        self._flush()
        reader = self.reader
        if reader.consumed != reader.fed:
            self._drain_later()

    def _deliver(self, slot: _Slot, resp3: bool, count: int, values: list[Value]) -> None:
        """A :class:`Deferred`'s ``count`` replies are known: encode them all
        into its slot (one slot, one join) and write what is ready now."""
        if self.lost:
            return
        if type(values) is OkList and len(values) == count:
            slot.data = OK_REPLY * count
        else:
            data: list[bytes] = []
            try:
                if not isinstance(values, list) or len(values) != count:
                    raise TypeError(f"{count} replies expected, got {values!r:.200}")
                for value in values:
                    if value is OK:
                        data.append(OK_REPLY)
                    else:
                        encode(value, data, resp3)
            except Exception:
                log.exception("a backend command answered what is not a list of reply values")
                self.server.stats["internal_errors"] += 1
                data = [INTERNAL_ERROR_REPLY] * count
            slot.data = data[0] if len(data) == 1 else b"".join(data)
        self._flush()
        reader = self.reader
        if reader.consumed != reader.fed:
            self._drain_later()

    def _drain_later(self) -> None:
        """After a late reply: the reader still holds requests (held back by
        the in-flight bound, or part of one); drain them at the next loop
        turn, outside the backend's callback."""
        if not self.flush_scheduled and not self.closing and not self.lost:
            self.flush_scheduled = True
            self.server.flush_later(self)

    def _late_flush(self) -> None:
        self.flush_scheduled = False
        self._flush()
        reader = self.reader
        if reader.consumed != reader.fed and not self.closing and not self.lost:
            # The reader holds requests held back by the in-flight bound (or part
            # of one, which _drain leaves there).
            self._drain()
            self._flush()

    def _flush(self) -> None:
        """Write the replies that are ready, in order, in one write."""
        out = self.out
        slots = self.slots
        close = False
        while slots and slots[0].data is not None:
            slot = slots.popleft()
            out.append(slot.data)  # type: ignore[arg-type]
            if slot.then_close:
                close = True
                slots.clear()
                break
        transport = self.transport
        if out and transport is not None and not self.lost:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()
        if close and transport is not None:
            transport.close()
            return
        self._update_reading()

    def _protocol_error(self, text: str) -> None:
        """Answer ``-ERR Protocol error: text`` after the replies before it, then close."""
        self.server.stats["protocol_errors"] += 1
        log.info("protocol error from %s: %s", self.state.addr, text)
        slot = _Slot()
        slot.data = b"-ERR Protocol error: %s\r\n" % line(text)
        slot.then_close = True
        self.slots.append(slot)
        self.closing = True
        self.reader.inline = None


def _addr(sockaddr: Any) -> str:
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        return f"{sockaddr[0]}:{sockaddr[1]}"
    return str(sockaddr or "")
