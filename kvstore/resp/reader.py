"""Reading requests: one connection's byte stream framed into argument lists
(h11's ``_readers`` and receive buffer).

Pure: no asyncio, no I/O; the connection feeds it what the socket delivered
and runs what it takes out. Multibulk requests are framed by
``hiredis.Reader``; inline (telnet-style) lines here, as Redis reads them.

Hostile input: hiredis is a *reply* parser and happily waits forever for a
declared 999999999999-byte bulk, so the limits Redis enforces on requests are
checked here, on the one request that is still incomplete after a read
(:class:`HeaderWalk` reads only its ``*``/``$`` header lines and skips
payloads by arithmetic): a multibulk count over ``multibulk_max``, a bulk
length over ``bulk_bytes_max``, an incomplete request over
``request_bytes_max`` or an inline line over ``inline_bytes_max`` is a
protocol error with Redis' wording. (hiredis-py creates a declared array with
``PyList_New(count)`` as soon as it reads the header; that memory is
calloc'ed, so untouched, and is freed when the connection is closed right
after.)

hiredis-py's ``Reader.has_data()`` is false once hiredis has read a header, even
mid-request, so the reader counts the bytes of each complete request itself
(:func:`wire_len`) to know where the next one starts.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from typing import NamedTuple, TypeAlias

import hiredis

from kvstore.resp.limits import HEADER_LINE_MAX, RespLimits

__all__ = [
    "HeaderWalk",
    "Inline",
    "RequestReader",
    "Taken",
    "count_problem",
    "hiredis_problem",
    "wire_len",
    "wire_total",
]


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

_TYPE_BYTES = {int: ":", list: "*", type(None): "_", dict: "%", float: ",", bool: "#"}


def hiredis_problem(text: str) -> str:
    """Redis' protocol-error text for what hiredis said."""
    return _HIREDIS_MESSAGES.get(text, text.removeprefix("Protocol error, "))


def wire_len(args: list[bytes]) -> int:
    """How many bytes ``args`` took as a canonical multibulk (hiredis accepts no
    other spelling of a length), so the reader can tell where the next
    request starts in the stream without parsing it."""
    total = 3 + len(str(len(args)))
    for arg in args:
        n = len(arg)
        total += n + 5 + (1 if n < 10 else 2 if n < 100 else len(str(n)))
    return total


def wire_total(requests: list[list[bytes]]) -> int:
    """``sum(map(wire_len, requests))`` in a few C-level passes over all their
    arguments at once (the reader counts every request's bytes)."""
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


def count_problem(data: bytes, limits: RespLimits) -> str | None:
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


class HeaderWalk:
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


#: What :meth:`RequestReader.take` found, in stream order: the complete
#: requests (every argument bytes; ``[]`` for ``*0``); a protocol error (Redis'
#: text) right after them, or None (an incomplete request that breaks a limit
#: already is one); and what hiredis said of the bytes after them (maybe an
#: inline command), or None. (A plain tuple: the connection unpacks it once a
#: read.)
Taken: TypeAlias = tuple[list[list[bytes]], str | None, str | None]


class Inline(NamedTuple):
    """What :meth:`RequestReader.read_inline` found."""

    #: The complete inline commands, in order (blank lines skipped).
    requests: list[list[bytes]]
    #: The bytes after them when a multibulk request starts there (to :meth:`~RequestReader.feed`).
    rest: bytes
    #: ``too big inline request`` when a line runs past the limit, else None.
    problem: str | None


class RequestReader:
    """Frames one connection's requests (see the module docstring).

    The connection calls :meth:`read_inline` when :meth:`wants_inline` says
    the bytes start an inline command, else :meth:`feed`, then :meth:`take`
    as many requests as it has room for.
    """

    __slots__ = ("_hiredis", "consumed", "fed", "inline", "last_data", "limits", "walk", "walked")

    def __init__(self, limits: RespLimits) -> None:
        self.limits = limits
        self._hiredis = _new_hiredis()
        # Stream accounting (bytes fed to hiredis) to find the incomplete request;
        # hiredis holds bytes of requests not taken yet while they differ.
        self.fed = 0
        self.consumed = 0
        self.last_data: bytes = b""
        self.walk: HeaderWalk | None = None
        self.walked = 0
        self.inline: bytearray | None = None  # set while reading inline commands

    def wants_inline(self, data: bytes) -> bool:
        """Whether ``data`` continues or starts inline commands (at a request
        boundary, anything but ``*`` is read as Redis reads it: a line)."""
        return self.inline is not None or (self.consumed == self.fed and data[:1] != b"*")

    def read_inline(self, data: bytes) -> Inline:
        """The inline commands at the front of what was read so far."""
        buf = self.inline if self.inline is not None else bytearray()
        buf += data
        self.inline = buf
        requests: list[list[bytes]] = []
        while buf:
            if buf[:1] == b"*":
                self.inline = None
                return Inline(requests, bytes(buf), None)
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > self.limits.inline_bytes_max:
                    return Inline(requests, b"", "too big inline request")
                return Inline(requests, b"", None)
            line = bytes(buf[:nl]).rstrip(b"\r")
            del buf[: nl + 1]
            args = line.split()
            if args:
                requests.append(list(args))
        self.inline = None
        return Inline(requests, b"", None)

    def feed(self, data: bytes) -> str | None:
        """Hand ``data`` to hiredis; a protocol error instead if it starts a
        request whose ``*N`` is over the limit (hiredis would allocate the
        declared array as soon as it reads it)."""
        if self.consumed == self.fed:
            problem = count_problem(data, self.limits)
            if problem:
                return problem
        self.fed += len(data)
        self.last_data = data
        self._hiredis.feed(data)
        return None

    def take(self, room: int) -> Taken:
        """Take up to ``room`` complete requests out of hiredis.

        The requests are taken first and looked at afterwards, a few C-level
        passes over all of them (a pipeline of data commands, the common case,
        costs no Python work per request but the ``gets``); a request with an
        argument that is not a bulk string ends them, with its protocol error.
        When hiredis wants more bytes, the incomplete request is held to the
        limits (:class:`HeaderWalk`).
        """
        reader = self._hiredis
        got: list[list[bytes]] = []  # every request read, in order
        problem: str | None = None
        hiredis_error: str | None = None
        incomplete = False
        for _ in range(room):
            try:
                args = reader.gets()
            except MemoryError:  # hiredis' PyList_New of a declared count
                problem = "invalid multibulk length"
                break
            except _ProtocolError as exc:
                hiredis_error = str(exc)
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
                self.consumed += wire_len(args)
        elif got:
            if set(map(type, itertools.chain.from_iterable(got))) - {bytes}:
                # An argument that is not a bulk string: what comes before it runs.
                for i, args in enumerate(got):
                    bad = [a for a in args if type(a) is not bytes]
                    if bad:
                        problem = f"expected '$', got '{_TYPE_BYTES.get(type(bad[0]), '?')}'"
                        del got[i:]
                        break
            self.consumed += wire_total(got)
        if incomplete and problem is None:
            if self.consumed == self.fed:
                self.walk = None
            else:
                problem = self._check_incomplete()
        return got, problem, hiredis_error

    def inline_rest(self) -> bytes | None:
        """After hiredis refused the bytes that follow the complete requests:
        if they are not ``*``, an inline command, as Redis reads it. Start a
        fresh hiredis on them and answer them (to read again); None if they
        are not that."""
        base = self.fed - len(self.last_data)
        at = self.consumed - base
        if at < 0 or self.last_data[at : at + 1] in (b"*", b""):
            return None
        rest = self.last_data[at:]
        self._hiredis = _new_hiredis()
        self.fed = self.consumed = 0
        self.last_data = b""
        self.walk = None
        return rest

    def _check_incomplete(self) -> str | None:
        """hiredis wants more bytes of a request: its protocol error if it
        breaks a limit already, else None."""
        limits = self.limits
        if self.fed - self.consumed > limits.request_bytes_max:
            return "too big request"
        base = self.fed - len(self.last_data)
        if self.walk is None or self.walked < self.consumed:
            self.walk = HeaderWalk()
            self.walked = self.consumed
        if self.walked < base:  # pragma: no cover - the walk covers every read
            return None
        problem = self.walk.walk(memoryview(self.last_data), self.walked - base, limits)
        self.walked = self.fed
        return problem


def _new_hiredis() -> hiredis.Reader:
    return hiredis.Reader(protocolError=_ProtocolError, replyError=_ReplyError)
