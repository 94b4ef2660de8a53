"""The Redis protocol (RESP2/RESP3) front end of the replicated key-value store.

It owns the socket side only: framing requests with ``hiredis.Reader``, the
connection commands (PING, ECHO, HELLO, AUTH, CLIENT, SELECT, QUIT, RESET,
READONLY/READWRITE, INFO, COMMAND, CONFIG GET) and encoding replies. Every
other command goes to a :class:`Backend`, which the replicated node implements;
the front end never knows about replication, so it can be tested against an
in-memory fake.

Pipelining: every complete request in a read is started at once (a backend may
answer synchronously, or with an awaitable that finishes later and in any
order); replies are written strictly in request order, joined into one
``transport.write`` per read (or per loop turn for late answers). At most
``RespLimits.pipeline_pending_max`` requests per connection are in flight;
past that, and whenever the transport's write buffer is full, the connection
stops reading, so a client cannot make the server buffer without bound.

Hostile input: hiredis is a *reply* parser and happily waits forever for a
declared 999999999999-byte bulk, so the limits Redis enforces on requests are
checked here, on the one request that is still incomplete after a read
(``_HeaderWalk`` reads only its ``*``/``$`` header lines and skips payloads by
arithmetic): a multibulk count over ``multibulk_max``, a bulk length over
``bulk_bytes_max``, an incomplete request over ``request_bytes_max`` or an
inline line over ``inline_bytes_max`` gets ``-ERR Protocol error: ...`` (Redis'
wording) and the connection is closed, counted in ``RespServer.stats``.
(hiredis-py creates a declared array with ``PyList_New(count)`` as soon as it
reads the header; that memory is calloc'ed, so untouched, and is freed when the
connection is closed right after.)

READONLY makes the connection's reads answer from the local replica without the
linearizability round (``ConnState.stale_reads``); READWRITE goes back to
linearizable reads. The backend reads the flag; the front end only keeps it.

Measured on a 2-core VM, uvloop, the server and redis-benchmark 7.0 on the same
machine, against the fake backend of ``tests/kvstore/resp_fake.py`` (answers
synchronously), ``redis-benchmark -t set,get -n 200000 -P 16 -q``, three runs:
SET 171k-249k requests/s, GET 224k-267k requests/s; without pipelining
(``-n 100000``, 50 clients) SET 56k, GET 63k requests/s. The replicated backend
will be the bottleneck, not this front end.

hiredis-py's ``Reader.has_data()`` is false once hiredis has read a header, even
mid-request, so the front end counts the bytes of each complete request itself
(``_wire_len``) to know where the next one starts.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hmac
import itertools
import logging
import ssl as _ssl
from bisect import bisect_left
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property, partial
from operator import itemgetter
from typing import Any, NamedTuple, Protocol, TypeAlias, cast

import hiredis

from kvstore.values import OK, Error, Simple, Value

__all__ = [
    "BENCH_NOTE",
    "Backend",
    "BatchBackend",
    "CommandSpec",
    "ConnState",
    "Deferred",
    "DeferredList",
    "OkList",
    "RespLimits",
    "RespServer",
    "serve_resp",
]

log = logging.getLogger(__name__)

#: What ``redis-benchmark -t set,get -n 200000 -P 16 -q`` measured against the
#: fake backend with uvloop; see the module docstring.
BENCH_NOTE = "SET 171k-249k/s, GET 224k-267k/s (-P 16, 2-core VM, uvloop, fake backend)"

#: The version this front end claims in HELLO and INFO: the Redis 7 command
#: set it answers for (clients such as redis-cli pick features by it).
REDIS_VERSION = "7.2.0"

#: How many requests one connection may have started but not yet answered.
PIPELINE_PENDING_MAX = 1024
#: Client connections served at once (Redis' maxclients default).
CLIENTS_MAX = 10_000
#: The largest request (an incomplete one, while it is being received).
REQUEST_BYTES_MAX = 8 * 1024 * 1024
#: The largest bulk string in a request (Redis' proto-max-bulk-len is 512 MB).
BULK_BYTES_MAX = REQUEST_BYTES_MAX
#: The most arguments in one request (Redis allows up to INT_MAX).
MULTIBULK_MAX = 1024 * 1024
#: The longest inline command line (Redis' PROTO_INLINE_MAX_SIZE).
INLINE_BYTES_MAX = 64 * 1024
#: The longest header line (``*N`` / ``$N``) a request may have.
HEADER_LINE_MAX = 32


@dataclass(frozen=True)
class RespLimits:
    """Per-connection limits; the defaults are the module constants."""

    pipeline_pending_max: int = PIPELINE_PENDING_MAX
    request_bytes_max: int = REQUEST_BYTES_MAX
    bulk_bytes_max: int = BULK_BYTES_MAX
    multibulk_max: int = MULTIBULK_MAX
    inline_bytes_max: int = INLINE_BYTES_MAX

    @cached_property
    def count_line_safe(self) -> int:
        """A ``*N`` line of at most this many bytes (without its CRLF) has an
        N with fewer digits than ``multibulk_max``, so under it: the front end
        need not parse it."""
        return len(str(self.multibulk_max)) if self.multibulk_max >= 0 else 0


_conn_ids = itertools.count(1)


@dataclass(slots=True)
class ConnState:
    """What the server knows about one client connection.

    ``stale_reads`` is the READONLY switch: True lets this connection's reads be
    answered from the local replica without the linearizability round.
    """

    id: int = field(default_factory=lambda: next(_conn_ids))
    name: bytes | None = None
    protocol: int = 2
    user: str | None = None
    stale_reads: bool = False
    db: int = 0
    addr: str = ""
    laddr: str = ""
    lib_name: bytes = b""
    lib_ver: bytes = b""


class CommandSpec(NamedTuple):
    """One command as COMMAND reports it (Redis' command-table fields)."""

    name: str
    arity: int
    flags: tuple[str, ...] = ()
    first_key: int = 0
    last_key: int = 0
    step: int = 0
    summary: str = ""
    group: str = "generic"


class Backend(Protocol):
    """What the front end needs from the node (or from a test's fake)."""

    def execute(self, args: list[bytes], conn: ConnState) -> Value | Deferred | Awaitable[Value]:
        """Run one data command; answer now, or with a :class:`Deferred` or an
        awaitable that answers later.

        Unknown commands get Redis' ``ERR unknown command ...`` from the backend.
        """
        ...

    def info(self, conn: ConnState) -> Mapping[str, Mapping[str, str | int]]:
        """INFO sections (``server``, ``clients``, ``replication``: role, view, ...)."""
        ...

    def command_table(self) -> Iterable[CommandSpec]:
        """The data commands, for COMMAND / COMMAND INFO / COMMAND DOCS."""
        ...


class BatchBackend(Backend, Protocol):
    """A backend that also takes many requests at once (the node is one).

    The front end then hands each read's consecutive data commands to
    :meth:`execute_many` in one call instead of one :meth:`Backend.execute`
    per command: with pipelines of small commands the per-call overhead (and
    one awaitable per command) was a large part of a node's CPU.
    """

    def execute_many(
        self, requests: list[list[bytes]], conn: ConnState
    ) -> list[Value | Deferred | DeferredList]:
        """Run ``requests`` in order; answer in order: a value or a
        :class:`Deferred` per request, or a :class:`DeferredList` standing for
        its ``count`` consecutive requests. Every argument is bytes."""
        ...


class _Map(NamedTuple):
    """A map reply: RESP3 ``%``, a flat array in RESP2 (front-end use only)."""

    pairs: list[tuple[Any, Any]]


_Reply: TypeAlias = Any  # Value, or _Map / nested containers of them.

_CRLF = b"\r\n"
_NIL2 = b"$-1\r\n"
_NIL3 = b"_\r\n"


def _encode(value: _Reply, out: list[bytes], resp3: bool) -> None:
    """Append the RESP encoding of ``value`` to ``out`` (fragments, joined once per flush)."""
    t = type(value)
    if t is bytes:
        out.append(b"$%d\r\n%s\r\n" % (len(value), value))
    elif t is int:
        out.append(b":%d\r\n" % value)
    elif value is None:
        out.append(_NIL3 if resp3 else _NIL2)
    elif t is Simple:
        out.append(b"+%s\r\n" % _line(value.text))
    elif t is Error:
        out.append(b"-%s\r\n" % _line(value.text))
    elif t is list or t is tuple or t is OkList:
        out.append(b"*%d\r\n" % len(value))
        for item in value:
            _encode(item, out, resp3)
    elif t is _Map:
        pairs = value.pairs
        out.append((b"%%%d\r\n" if resp3 else b"*%d\r\n") % (len(pairs) * (1 if resp3 else 2)))
        for k, v in pairs:
            _encode(k, out, resp3)
            _encode(v, out, resp3)
    elif t is str:
        data = value.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    elif t is bool:
        out.append((b"#t\r\n" if value else b"#f\r\n") if resp3 else b":%d\r\n" % value)
    else:
        raise TypeError(f"cannot encode {t.__name__} as a RESP reply")


def _line(text: str) -> bytes:
    """A status/error text on one line: RESP simple strings cannot hold CR or LF."""
    return text.replace("\r", " ").replace("\n", " ").encode()


def encode_reply(value: Value, resp3: bool = False) -> bytes:
    """The RESP bytes of one reply (for tests and tools; the server encodes in batches)."""
    out: list[bytes] = []
    _encode(value, out, resp3)
    return b"".join(out)


class _ProtocolError(Exception):
    """hiredis found bytes that are not RESP."""


class _ReplyError(Exception):
    """hiredis read a ``-`` line (a client cannot send one as a request)."""


_HIREDIS_MESSAGES = {
    "Bad bulk string length": "invalid bulk length",
    "Bulk string length out of range": "invalid bulk length",
    "Bad multi-bulk length": "invalid multibulk length",
    "Multi-bulk length out of range": "invalid multibulk length",
}

_first = itemgetter(0)

_TYPE_BYTES = {int: ":", list: "*", type(None): "_", dict: "%", float: ",", bool: "#"}


def _wire_len(args: list[bytes]) -> int:
    """How many bytes ``args`` took as a canonical multibulk (hiredis accepts no
    other spelling of a length), so the front end can tell where the next
    request starts in the stream without parsing it."""
    total = 3 + len(str(len(args)))
    for arg in args:
        n = len(arg)
        total += n + 5 + (1 if n < 10 else 2 if n < 100 else len(str(n)))
    return total


def _wire_total(requests: list[list[bytes]]) -> int:
    """``sum(map(_wire_len, requests))`` in a few C-level passes over all their
    arguments at once (the front end counts every request's bytes)."""
    lens = list(map(len, itertools.chain.from_iterable(requests)))
    counts = list(map(len, requests))
    return sum(lens) + _digits(lens) + 5 * len(lens) + 3 * len(counts) + _digits(counts)


def _digits(numbers: list[int]) -> int:
    """How many decimal digits ``numbers`` (not negative) take, all together:
    one each, one more each for those of 10 and over, and so on (sorting and
    bisecting costs less than a ``str`` per number)."""
    if not numbers:
        return 0
    ordered = sorted(numbers)
    n = len(ordered)
    total = n
    top = ordered[-1]
    step = 10
    while step <= top:
        total += n - bisect_left(ordered, step)
        step *= 10
    return total


def _count_problem(data: bytes, limits: RespLimits) -> str | None:
    """The Redis protocol error of a request's ``*N`` line at the front of ``data``."""
    nl = data.find(b"\r\n", 0, HEADER_LINE_MAX + 2)
    if nl < 0:
        return None  # the walk checks it when the line is complete
    if nl <= limits.count_line_safe:  # ``*`` and fewer digits than the limit has
        return None
    try:
        count = int(data[1:nl])
    except ValueError:
        return None  # hiredis reports it
    return "invalid multibulk length" if count > limits.multibulk_max else None


class _HeaderWalk:
    """Reads the header lines of the one incomplete request, to enforce the limits
    hiredis does not have, and skips bulk payloads without looking at them.

    Runs only over bytes after the last complete request, so a pipeline of small
    requests never pays for it.
    """

    __slots__ = ("elements", "line", "skip", "started")

    def __init__(self) -> None:
        self.started = False  # read the ``*N`` line yet
        self.elements = 0  # bulk headers still to come
        self.skip = 0  # payload (+CRLF) bytes still to skip
        self.line = b""  # a header line cut by the end of a read

    def walk(self, data: bytes | memoryview, start: int, limits: RespLimits) -> str | None:
        """Advance over ``data[start:]``; answer a Redis protocol-error text, or None."""
        pos, end = start, len(data)
        while pos < end:
            if self.skip:
                step = min(self.skip, end - pos)
                self.skip -= step
                pos += step
                continue
            if not self.started or self.elements:
                held = len(self.line)
                window = self.line + bytes(data[pos : pos + HEADER_LINE_MAX + 2])
                nl = window.find(b"\r\n")
                if nl < 0:
                    self.line = window
                    if len(window) > HEADER_LINE_MAX + 1:
                        return (
                            "too big mbulk count string"
                            if not self.started
                            else "too big bulk count string"
                        )
                    return None
                header = window[:nl]
                self.line = b""
                pos += nl + 2 - held
                problem = self._header(header, limits)
                if problem:
                    return problem
            else:
                return None  # complete: hiredis will hand it over
        return None

    def _header(self, header: bytes, limits: RespLimits) -> str | None:
        kind, digits = header[:1], header[1:]
        try:
            n = int(digits)
        except ValueError:
            n = -2
        if not self.started:
            if kind != b"*":
                return f"expected '*', got '{kind.decode('latin-1')}'"
            if n > limits.multibulk_max or n < -1:
                return "invalid multibulk length"
            self.started, self.elements = True, max(n, 0)
            return None
        if kind != b"$":
            return f"expected '$', got '{kind.decode('latin-1')}'"
        if n < 0 or n > limits.bulk_bytes_max:
            return "invalid bulk length"
        self.elements -= 1
        self.skip = n + 2
        return None


# A reply slot: encoded bytes (ready), or a pending marker the completion fills in.
class Deferred:
    """A reply known later: what a backend may answer instead of an awaitable.

    Lighter than an :class:`asyncio.Future` (no event-loop hop per callback):
    the node answers a batch of hundreds of commands at once, and each
    future's callback would be one more turn of the loop's ready queue.
    Callbacks run in :meth:`set`, on the loop's thread.
    """

    __slots__ = ("_callbacks", "done", "value")

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Value], None]] | None = []
        self.done = False
        self.value: Value = None

    def add_callback(self, fn: Callable[[Value], None]) -> None:
        """Call ``fn(value)`` when the value is set (now, if it is)."""
        if self._callbacks is None:
            fn(self.value)
        else:
            self._callbacks.append(fn)

    def set(self, value: Value) -> None:
        """Set the value (once; later calls are ignored) and run the callbacks."""
        callbacks = self._callbacks
        if callbacks is None:
            return
        self._callbacks = None
        self.done = True
        self.value = value
        for fn in callbacks:
            try:
                fn(value)
            except Exception:
                log.exception("a Deferred callback failed")


class DeferredList(Deferred):
    """The replies of ``count`` consecutive requests, known later at once: its
    value is the list of them, in request order (what a backend's
    :meth:`~BatchBackend.execute_many` answers for a run of commands that
    travel in one batch: one callback for the run instead of one per command).
    """

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        # Deferred.__init__'s fields, set here (one call less: one of these per run).
        self._callbacks = []
        self.done = False
        self.value = None
        self.count = count


class OkList(list[Value]):
    """A list of replies that are all ``OK`` (a batch of plain SETs answered):
    the value a backend may set a :class:`DeferredList` to so that the front
    end writes ``+OK`` that many times without looking at each item. Build it
    only from ``OK`` items; it is a list, so any other reader sees the same
    replies."""

    __slots__ = ()


_OK_REPLY = b"+OK\r\n"


class _Slot:
    __slots__ = ("data", "then_close")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.then_close = False


class RespConnection(asyncio.Protocol):
    """One client connection: frames requests, runs them, writes replies in order."""

    def __init__(self, server: RespServer) -> None:
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
        self.reader = hiredis.Reader(protocolError=_ProtocolError, replyError=_ReplyError)
        self.slots: deque[_Slot] = deque()  # replies not yet written, in request order
        self.out: list[bytes] = []  # encoded replies for this flush
        self.inline: bytearray | None = None  # set while reading inline commands
        self.closing = False  # no more requests are read (QUIT, protocol error)
        self.lost = False
        self.write_paused = False
        self.read_paused = False
        self.flush_scheduled = False
        # Stream accounting (bytes fed to hiredis) to find the incomplete request.
        self.fed = 0
        self.consumed = 0
        self.last_data: bytes = b""
        self.walk: _HeaderWalk | None = None
        self.walked = 0

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)
        self.server.stats["connections_received"] += 1
        if len(self.server.connections) >= self.server.clients_max:
            # Redis' answer and behaviour: say so, then close.
            self.server.stats["rejected_connections"] += 1
            self.closing = True
            transport.write(b"-ERR max number of clients reached\r\n")  # type: ignore[attr-defined]
            transport.close()
            return
        self.server.connections.add(self)
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
        at_boundary = self.consumed == self.fed  # hiredis holds no part of a request
        if self.inline is not None or (at_boundary and data[:1] != b"*"):
            data = self._inline_received(data)
            if not data or self.closing:
                self._flush()
                return
        if at_boundary:
            # hiredis allocates a declared array as soon as it reads ``*N``: refuse a
            # huge N here, before feeding it (the walk checks the requests after it).
            problem = _count_problem(data, self.limits)
            if problem:
                self._protocol_error(problem)
                self._flush()
                return
        self.fed += len(data)
        self.last_data = data
        self.reader.feed(data)
        self._drain()  # which updates reading when it ends normally
        slots = self.slots
        if self.out or (slots and slots[0].data is not None):
            self._flush()

    # -- reading ----------------------------------------------------------------------

    def _inline_received(self, data: bytes) -> bytes:
        """Run the inline (telnet-style) commands at the front; answer what follows
        them if it is a multibulk request, for hiredis."""
        buf = self.inline if self.inline is not None else bytearray()
        buf += data
        self.inline = buf
        while buf and not self.closing:
            if buf[:1] == b"*":
                self.inline = None
                return bytes(buf)
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > self.limits.inline_bytes_max:
                    self._protocol_error("too big inline request")
                return b""
            line = bytes(buf[:nl]).rstrip(b"\r")
            del buf[: nl + 1]
            args = line.split()
            if args:
                self._start(list(args))
        if not buf:
            self.inline = None
        return b""

    def _drain(self) -> None:
        """Start every complete request hiredis holds, while the limits allow.

        Consecutive data commands are gathered into a run and handed to the
        backend's ``execute_many`` in one call (when it has one); a connection
        command, an unauthenticated connection, an error or the end of what
        hiredis holds ends the run, which is started before anything after it.

        The requests are taken from hiredis first and looked at afterwards,
        a few C-level passes over all of them (a pipeline of data commands,
        the common case, is then one ``execute_many`` with no Python work per
        request but the ``gets``); only a read that holds a connection command
        or a bad argument goes request by request.
        """
        reader = self.reader
        got: list[list[bytes]] = []  # every request read, in order
        problem: str | None = None
        hiredis_error: _ProtocolError | None = None
        incomplete = False
        room = self.limits.pipeline_pending_max - len(self.slots)
        if not self.closing and not self.write_paused:
            for _ in range(room):
                try:
                    args = reader.gets()
                except MemoryError:  # hiredis' PyList_New of a declared count
                    problem = "invalid multibulk length"
                    break
                except _ProtocolError as exc:
                    hiredis_error = exc
                    break
                if type(args) is list:
                    got.append(args)
                    continue
                if args is False:
                    incomplete = True
                    break
                if args is None:
                    self.consumed += 5
                    continue  # ``*-1``: Redis ignores it
                problem = f"expected '*', got '{_TYPE_BYTES.get(type(args), '?')}'"
                break
        if len(got) == 1:  # one request (no pipelining): the same, without the passes
            args = got[0]
            for a in args:
                if type(a) is not bytes:
                    problem = f"expected '$', got '{_TYPE_BYTES.get(type(a), '?')}'"
                    got.clear()
                    break
            else:
                self.consumed += _wire_len(args)
                if (
                    args
                    and self.execute_many is not None
                    and self.state.user is not None
                    and args[0].upper() not in _FRONT
                ):
                    self._start_many(got)
                else:
                    self._start_each(got)
        elif got:
            if set(map(type, itertools.chain.from_iterable(got))) - {bytes}:
                # An argument that is not a bulk string: what comes before it runs.
                for i, args in enumerate(got):
                    bad = [a for a in args if type(a) is not bytes]
                    if bad:
                        problem = f"expected '$', got '{_TYPE_BYTES.get(type(bad[0]), '?')}'"
                        del got[i:]
                        break
            self.consumed += _wire_total(got)
            many = self.execute_many
            if (
                many is not None
                and self.state.user is not None
                and all(got)  # no ``*0``
                and _FRONT.keys().isdisjoint(map(bytes.upper, set(map(_first, got))))
            ):
                self._start_many(got)
            else:
                self._start_each(got)
        if problem is not None:
            self._protocol_error(problem)
            return
        if hiredis_error is not None:
            if self._inline_follows():
                return
            text = str(hiredis_error)
            self._protocol_error(_HIREDIS_MESSAGES.get(text, text.removeprefix("Protocol error, ")))
            return
        if incomplete:
            self._check_incomplete()
        self._update_reading()

    def _start_each(self, got: list[list[bytes]]) -> None:
        """Start ``got`` request by request: connection commands alone, runs of
        data commands together; nothing after a request that closes."""
        many = self.execute_many
        state = self.state
        front = _FRONT
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

    def _inline_follows(self) -> bool:
        """After complete requests, a line that is not ``*``: an inline command, as
        Redis reads it. Start a fresh hiredis reader on it; False if it is not that."""
        base = self.fed - len(self.last_data)
        at = self.consumed - base
        if at < 0 or self.last_data[at : at + 1] in (b"*", b""):
            return False
        rest = self.last_data[at:]
        self.reader = hiredis.Reader(protocolError=_ProtocolError, replyError=_ReplyError)
        self.fed = self.consumed = 0
        self.last_data = b""
        self.walk = None
        self.data_received(rest)
        return True

    def _check_incomplete(self) -> None:
        """hiredis wants more bytes: hold the incomplete request to the limits."""
        if self.consumed == self.fed:
            self.walk = None
            return
        limits = self.limits
        if self.fed - self.consumed > limits.request_bytes_max:
            self._protocol_error("too big request")
            return
        base = self.fed - len(self.last_data)
        if self.walk is None or self.walked < self.consumed:
            self.walk = _HeaderWalk()
            self.walked = self.consumed
        if self.walked < base:  # pragma: no cover - the walk covers every read
            return
        problem = self.walk.walk(memoryview(self.last_data), self.walked - base, limits)
        self.walked = self.fed
        if problem:
            self._protocol_error(problem)

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
        """Run one request; queue its reply (now, or when its awaitable finishes)."""
        self.server.stats["commands"] += 1
        state = self.state
        try:
            name = args[0].upper()
            handler = _FRONT.get(name)
            if state.user is None and name not in _NO_AUTH:
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
            if type(answer) is DeferredList:
                slot = _Slot()
                slots.append(slot)
                answer.add_callback(partial(self._deliver_many, slot, resp3, answer.count))
            else:
                self._queue(answer, resp3, run[0])

    def _queue(self, result: Any, resp3: bool, args: list[bytes]) -> None:
        """Queue one request's reply: encoded now, or when it is known."""
        if type(result) in _VALUE_TYPES:
            if not self.slots:
                _encode(result, self.out, resp3)
                return
            slot = _Slot()
            data: list[bytes] = []
            _encode(result, data, resp3)
            slot.data = b"".join(data)
            self.slots.append(slot)
            return
        if type(result) is _Quit:
            slot = _Slot()
            slot.data = b"+OK\r\n"
            slot.then_close = True
            self.slots.append(slot)
            self.closing = True
            return
        slot = _Slot()
        self.slots.append(slot)
        if type(result) is Deferred:
            result.add_callback(lambda value: self._deliver(slot, value, resp3))
            return
        try:
            future = asyncio.ensure_future(result)
        except TypeError:
            log.error("backend answered %r with %r, not a value or awaitable", args[:1], result)
            slot.data = b"-ERR internal error\r\n"
            return
        future.add_done_callback(lambda f: self._finished(slot, f, resp3))

    def _finished(self, slot: _Slot, future: asyncio.Future[Any], resp3: bool) -> None:
        if self.lost:
            if not future.cancelled():
                future.exception()  # retrieved: nobody is waiting for it
            return
        data: list[bytes] = []
        try:
            _encode(future.result(), data, resp3)
        except Exception:
            log.exception("a backend command failed")
            self.server.stats["internal_errors"] += 1
            data = [b"-ERR internal error\r\n"]
        slot.data = b"".join(data)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.server.flush_later(self)

    def _deliver(self, slot: _Slot, value: Value, resp3: bool) -> None:
        """A :class:`Deferred`'s reply is known: encode it into its slot."""
        if self.lost:
            return
        data: list[bytes] = []
        try:
            _encode(value, data, resp3)
        except Exception:
            log.exception("a backend command answered what is not a reply value")
            self.server.stats["internal_errors"] += 1
            data = [b"-ERR internal error\r\n"]
        slot.data = data[0] if len(data) == 1 else b"".join(data)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.server.flush_later(self)

    def _deliver_many(self, slot: _Slot, resp3: bool, count: int, values: Value) -> None:
        """A :class:`DeferredList`'s ``count`` replies are known: encode them all
        into its slot (one slot, one join, one flush check for the run)."""
        if self.lost:
            return
        if type(values) is OkList and len(values) == count:
            slot.data = _OK_REPLY * count
            if not self.flush_scheduled:
                self.flush_scheduled = True
                self.server.flush_later(self)
            return
        data: list[bytes] = []
        try:
            if not isinstance(values, list) or len(values) != count:
                raise TypeError(f"{count} replies expected, got {values!r:.200}")
            for value in values:
                if value is OK:
                    data.append(_OK_REPLY)
                else:
                    _encode(value, data, resp3)
        except Exception:
            log.exception("a backend command answered what is not a list of reply values")
            self.server.stats["internal_errors"] += 1
            data = [b"-ERR internal error\r\n"] * count
        slot.data = b"".join(data)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            self.server.flush_later(self)

    def _late_flush(self) -> None:
        self.flush_scheduled = False
        self._flush()
        if self.consumed != self.fed and not self.closing and not self.lost:
            # hiredis holds requests held back by the in-flight bound (or part
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
        slot.data = b"-ERR Protocol error: %s\r\n" % _line(text)
        slot.then_close = True
        self.slots.append(slot)
        self.closing = True
        self.inline = None


class _Quit(NamedTuple):
    """The QUIT marker: reply OK, then close once earlier replies are written."""


_VALUE_TYPES = frozenset({bytes, int, type(None), Simple, Error, list, OkList, _Map, bool})
_NO_AUTH = frozenset({b"AUTH", b"HELLO", b"QUIT", b"RESET"})


def _addr(sockaddr: Any) -> str:
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        return f"{sockaddr[0]}:{sockaddr[1]}"
    return str(sockaddr or "")


def _arity_error(args: list[bytes]) -> Error:
    return Error(
        f"ERR wrong number of arguments for '{args[0].decode(errors='replace').lower()}' command"
    )


def _text(b: bytes) -> str:
    return b.decode(errors="replace")


# -- the connection commands ----------------------------------------------------------


def _ping(c: RespConnection, args: list[bytes]) -> _Reply:
    if len(args) == 1:
        return Simple("PONG")
    if len(args) == 2:
        return args[1]
    return _arity_error(args)


def _echo(c: RespConnection, args: list[bytes]) -> _Reply:
    return args[1] if len(args) == 2 else _arity_error(args)


def _check_password(c: RespConnection, user: str, password: bytes) -> bool:
    users = c.server.users
    if users is None:
        return False
    expected = users.get(user)
    if expected is None:
        hmac.compare_digest(password, password)  # the same work for unknown users
        return False
    return hmac.compare_digest(expected.encode(), password)


_WRONGPASS = Error("WRONGPASS invalid username-password pair or user is disabled.")


def _auth(c: RespConnection, args: list[bytes]) -> _Reply:
    if len(args) not in (2, 3):
        return _arity_error(args)
    if c.server.users is None:
        return Error(
            "ERR AUTH <password> called without any password configured for the default user. "
            "Are you sure your configuration is correct?"
        )
    user = _text(args[1]) if len(args) == 3 else "default"
    if not _check_password(c, user, args[-1]):
        return _WRONGPASS
    c.state.user = user
    return OK


def _hello(c: RespConnection, args: list[bytes]) -> _Reply:
    state = c.state
    protocol = state.protocol
    rest = args[1:]
    if rest:
        try:
            protocol = int(rest[0])
        except ValueError:
            return Error("ERR Protocol version is not an integer or out of range")
        if protocol not in (2, 3):
            return Error("NOPROTO unsupported protocol version")
        rest = rest[1:]
    user: str | None = None
    name: bytes | None = None
    while rest:
        option = rest[0].upper()
        if option == b"AUTH" and len(rest) >= 3:
            user, password = _text(rest[1]), rest[2]
            if not _check_password(c, user, password):
                return _WRONGPASS
            rest = rest[3:]
        elif option == b"SETNAME" and len(rest) >= 2:
            name = rest[1]
            if b" " in name or b"\n" in name:
                return Error(
                    "ERR Client names cannot contain spaces, newlines or special characters."
                )
            rest = rest[2:]
        else:
            return Error(f"ERR Syntax error in HELLO option '{_text(rest[0])}'")
    if user is not None:
        state.user = user
    elif state.user is None:
        return Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
            "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
            "select the RESP protocol version at the same time"
        )
    if name is not None:
        state.name = name or None
    state.protocol = protocol
    role = "master"
    try:
        replication = c.backend.info(state).get("replication", {})
        role = str(replication.get("role", role))
    except Exception:
        log.exception("backend info failed")
    return _Map(
        [
            ("server", "redis"),
            ("version", REDIS_VERSION),
            ("proto", protocol),
            ("id", state.id),
            ("mode", "standalone"),
            ("role", role),
            ("modules", []),
        ]
    )


def _client(c: RespConnection, args: list[bytes]) -> _Reply:
    if len(args) < 2:
        return _arity_error(args)
    sub = args[1].upper()
    state = c.state
    if sub == b"ID" and len(args) == 2:
        return state.id
    if sub == b"GETNAME" and len(args) == 2:
        return state.name
    if sub == b"SETNAME" and len(args) == 3:
        name = args[2]
        if any(ch <= 32 or ch > 126 for ch in name):
            return Error("ERR Client names cannot contain spaces, newlines or special characters.")
        state.name = name or None
        return OK
    if sub == b"SETINFO" and len(args) == 4:
        attr = args[2].upper()
        if attr == b"LIB-NAME":
            state.lib_name = args[3]
        elif attr == b"LIB-VER":
            state.lib_ver = args[3]
        else:
            return Error(f"ERR Unrecognized option '{_text(args[2])}'")
        return OK
    if sub in (b"INFO", b"LIST") and len(args) == 2:
        line = _client_line(c)
        return line + b"\n"
    return Error(
        f"ERR unknown subcommand or wrong number of arguments for '{_text(args[1])}'. "
        "Try CLIENT HELP."
    )


def _client_line(c: RespConnection) -> bytes:
    s = c.state
    return (
        f"id={s.id} addr={s.addr} laddr={s.laddr} name={_text(s.name or b'')} db={s.db} "
        f"resp={s.protocol} user={s.user or ''} readonly={int(s.stale_reads)} "
        f"lib-name={_text(s.lib_name)} lib-ver={_text(s.lib_ver)}"
    ).encode()


def _select(c: RespConnection, args: list[bytes]) -> _Reply:
    if len(args) != 2:
        return _arity_error(args)
    try:
        db = int(args[1])
    except ValueError:
        return Error("ERR value is not an integer or out of range")
    if db != 0:
        return Error("ERR DB index is out of range")
    return OK


def _quit(c: RespConnection, args: list[bytes]) -> _Reply:
    return _Quit()


def _reset(c: RespConnection, args: list[bytes]) -> _Reply:
    state = c.state
    state.name = None
    state.protocol = 2
    state.stale_reads = False
    state.db = 0
    state.user = "default" if c.server.users is None else None
    return Simple("RESET")


def _readonly(c: RespConnection, args: list[bytes]) -> _Reply:
    c.state.stale_reads = True
    return OK


def _readwrite(c: RespConnection, args: list[bytes]) -> _Reply:
    c.state.stale_reads = False
    return OK


def _info(c: RespConnection, args: list[bytes]) -> _Reply:
    sections: dict[str, dict[str, str | int]] = {
        "server": {
            "redis_version": REDIS_VERSION,
            "redis_mode": "standalone",
            "server_name": "sdpaxos-kvstore",
            "tcp_port": c.server.port or 0,
        },
        "clients": {"connected_clients": len(c.server.connections)},
        "stats": {
            "total_connections_received": c.server.stats["connections_received"],
            "total_commands_processed": c.server.stats["commands"],
            "protocol_errors": c.server.stats["protocol_errors"],
        },
    }
    for name, fields in c.backend.info(c.state).items():
        sections.setdefault(name.lower(), {}).update(fields)
    wanted = {_text(a).lower() for a in args[1:]}
    everything = not wanted or wanted & {"all", "everything", "default"}
    parts: list[str] = []
    for name, fields in sections.items():
        if not everything and name not in wanted:
            continue
        parts.append(f"# {name.capitalize()}\r\n")
        parts.extend(f"{k}:{v}\r\n" for k, v in fields.items())
        parts.append("\r\n")
    return "".join(parts).rstrip("\r\n").encode() + b"\r\n" if parts else b""


def _front_specs() -> list[CommandSpec]:
    conn = ("fast", "no-auth")
    return [
        CommandSpec(
            "ping",
            -1,
            ("fast",),
            summary="Returns the server's liveliness response.",
            group="connection",
        ),
        CommandSpec("echo", 2, ("fast",), summary="Returns the given string.", group="connection"),
        CommandSpec("hello", -1, conn, summary="Handshakes with the server.", group="connection"),
        CommandSpec("auth", -2, conn, summary="Authenticates the connection.", group="connection"),
        CommandSpec(
            "client",
            -2,
            (),
            summary="A container for client connection commands.",
            group="connection",
        ),
        CommandSpec(
            "select",
            2,
            ("fast",),
            summary="Changes the selected database (only 0).",
            group="connection",
        ),
        CommandSpec("quit", -1, conn, summary="Closes the connection.", group="connection"),
        CommandSpec("reset", 1, conn, summary="Resets the connection.", group="connection"),
        CommandSpec(
            "readonly",
            1,
            ("fast",),
            summary="Reads answer from the local replica, without the linearizability round.",
            group="connection",
        ),
        CommandSpec(
            "readwrite", 1, ("fast",), summary="Reads are linearizable again.", group="connection"
        ),
        CommandSpec(
            "info",
            -1,
            ("loading", "stale"),
            summary="Returns information about the server.",
            group="server",
        ),
        CommandSpec(
            "command",
            -1,
            ("loading", "stale"),
            summary="Returns detailed information about all commands.",
            group="server",
        ),
        CommandSpec(
            "config", -2, (), summary="CONFIG GET answers a few fixed values.", group="server"
        ),
    ]


def _specs(c: RespConnection) -> dict[str, CommandSpec]:
    table = {s.name.lower(): s for s in _front_specs()}
    for spec in c.backend.command_table():
        table[spec.name.lower()] = spec
    return table


def _spec_info(s: CommandSpec) -> list[Any]:
    return [
        s.name.lower().encode(),
        s.arity,
        [Simple(f) for f in s.flags],
        s.first_key,
        s.last_key,
        s.step,
        [],
        [],
        [],
        [],
    ]


def _spec_docs(s: CommandSpec) -> _Map:
    return _Map(
        [
            ("summary", s.summary),
            ("since", "1.0.0"),
            ("group", s.group),
            ("complexity", "O(1)"),
            ("arguments", []),
        ]
    )


def _command(c: RespConnection, args: list[bytes]) -> _Reply:
    table = _specs(c)
    if len(args) == 1:
        return [_spec_info(s) for s in table.values()]
    sub = args[1].upper()
    if sub == b"COUNT":
        return len(table)
    if sub == b"INFO":
        names = [_text(a).lower() for a in args[2:]] or list(table)
        return [_spec_info(table[n]) if n in table else None for n in names]
    if sub == b"DOCS":
        names = [_text(a).lower() for a in args[2:]] or list(table)
        return _Map([(n, _spec_docs(table[n])) for n in names if n in table])
    if sub == b"LIST":
        return [n.encode() for n in table]
    return Error(
        f"ERR unknown subcommand or wrong number of arguments for '{_text(args[1])}'. "
        "Try COMMAND HELP."
    )


#: What CONFIG GET answers (redis-benchmark asks for ``save`` and ``appendonly``).
CONFIG_VALUES: dict[str, str] = {
    "save": "",
    "appendonly": "no",
    "databases": "1",
    "maxmemory": "0",
    "proto-max-bulk-len": str(BULK_BYTES_MAX),
}


def _config(c: RespConnection, args: list[bytes]) -> _Reply:
    if len(args) < 2:
        return _arity_error(args)
    if args[1].upper() != b"GET" or len(args) < 3:
        return Error(f"ERR CONFIG {_text(args[1]).upper()} is not supported by this server")
    pairs: list[tuple[Any, Any]] = []
    for pattern in args[2:]:
        p = _text(pattern).lower()
        pairs.extend((k, v) for k, v in CONFIG_VALUES.items() if fnmatch.fnmatchcase(k, p))
    return _Map(pairs)


_FRONT: dict[bytes, Callable[[RespConnection, list[bytes]], _Reply]] = {
    b"PING": _ping,
    b"ECHO": _echo,
    b"HELLO": _hello,
    b"AUTH": _auth,
    b"CLIENT": _client,
    b"SELECT": _select,
    b"QUIT": _quit,
    b"RESET": _reset,
    b"READONLY": _readonly,
    b"READWRITE": _readwrite,
    b"INFO": _info,
    b"COMMAND": _command,
    b"CONFIG": _config,
}


class RespServer:
    """A listening RESP server over one :class:`Backend`.

    ``users`` (name → password) makes AUTH required; ``ssl`` makes the port TLS-only.
    ``stats`` counts connections, commands, protocol errors and internal errors.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        ssl: _ssl.SSLContext | None = None,
        users: Mapping[str, str] | None = None,
        limits: RespLimits | None = None,
        clients_max: int = CLIENTS_MAX,
        stale_reads: bool = False,
    ) -> None:
        self.backend = backend
        #: Connections served at once; one more is told so and closed.
        self.clients_max = clients_max
        #: The read mode of a new connection (READONLY / READWRITE change it).
        self.stale_reads = stale_reads
        self.ssl = ssl
        self.users = dict(users) if users is not None else None
        self.limits = limits or RespLimits()
        self.stats: dict[str, int] = {
            "connections_received": 0,
            "commands": 0,
            "protocol_errors": 0,
            "internal_errors": 0,
            "rejected_connections": 0,
        }
        self.connections: set[RespConnection] = set()
        self.server: asyncio.Server | None = None
        self.port: int | None = None
        #: Connections with replies that became ready since the last late flush.
        self._to_flush: list[RespConnection] = []

    def flush_later(self, conn: RespConnection) -> None:
        """Write ``conn``'s ready replies at the next loop turn, together with
        every other connection's: one loop callback for all of them (a batch
        answers hundreds of connections at once)."""
        if not self._to_flush:
            asyncio.get_running_loop().call_soon(self._late_flush)
        self._to_flush.append(conn)

    def _late_flush(self) -> None:
        conns = self._to_flush
        self._to_flush = []
        for conn in conns:
            try:
                conn._late_flush()
            except Exception:
                log.exception("writing the replies of %s failed", conn.state.addr)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host:port`` (``port=0`` picks a free port, see ``self.port``)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: RespConnection(self), host, port, ssl=self.ssl, reuse_address=True
        )
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        if self.server is not None:
            await self.server.wait_closed()


async def serve_resp(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ssl: _ssl.SSLContext | None = None,
    users: Mapping[str, str] | None = None,
    limits: RespLimits | None = None,
    clients_max: int = CLIENTS_MAX,
    stale_reads: bool = False,
) -> RespServer:
    """Start a :class:`RespServer` listening on ``host:port`` and answer it."""
    server = RespServer(
        backend,
        ssl=ssl,
        users=users,
        limits=limits,
        clients_max=clients_max,
        stale_reads=stale_reads,
    )
    await server.start(host, port)
    return server
