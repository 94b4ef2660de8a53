"""Writing replies: reply values to RESP2/RESP3 bytes (h11's ``_writers``).

Pure: no I/O, no connection state but the protocol version it is told. The
connection collects the fragments of many replies and joins them once per
write.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeAlias

from kvstore.values import Error, Simple, Value

__all__ = [
    "INTERNAL_ERROR_REPLY",
    "OK_REPLY",
    "REPLY_TYPES",
    "Map",
    "OkList",
    "Reply",
    "encode",
    "encode_reply",
    "line",
]


class Map(NamedTuple):
    """A map reply: RESP3 ``%``, a flat array in RESP2 (the front end's own replies)."""

    pairs: list[tuple[Any, Any]]


class OkList(list[Value]):
    """A list of replies that are all ``OK`` (a batch of plain SETs answered):
    the value a backend may set a :class:`~kvstore.resp.pending.Deferred` to
    so that the front end writes ``+OK`` that many times without looking at
    each item. Build it only from ``OK`` items; it is a list, so any other
    reader sees the same replies."""

    __slots__ = ()


Reply: TypeAlias = Any  # Value, or Map / nested containers of them.

#: What a reply is, by its type: the values the writer takes as they are
#: (anything else a backend answers is a promise of one).
REPLY_TYPES = frozenset({bytes, int, type(None), Simple, Error, list, OkList, Map, bool})

OK_REPLY = b"+OK\r\n"
INTERNAL_ERROR_REPLY = b"-ERR internal error\r\n"
_NIL2 = b"$-1\r\n"
_NIL3 = b"_\r\n"


def encode(value: Reply, out: list[bytes], resp3: bool) -> None:
    """Append the RESP encoding of ``value`` to ``out`` (fragments, joined once per flush)."""
    t = type(value)
    if t is bytes:
        out.append(b"$%d\r\n%s\r\n" % (len(value), value))
    elif t is int:
        out.append(b":%d\r\n" % value)
    elif value is None:
        out.append(_NIL3 if resp3 else _NIL2)
    elif t is Simple:
        out.append(b"+%s\r\n" % line(value.text))
    elif t is Error:
        out.append(b"-%s\r\n" % line(value.text))
    elif t is list or t is tuple or t is OkList:
        out.append(b"*%d\r\n" % len(value))
        for item in value:
            encode(item, out, resp3)
    elif t is Map:
        pairs = value.pairs
        out.append((b"%%%d\r\n" if resp3 else b"*%d\r\n") % (len(pairs) * (1 if resp3 else 2)))
        for k, v in pairs:
            encode(k, out, resp3)
            encode(v, out, resp3)
    elif t is str:
        data = value.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    elif t is bool:
        out.append((b"#t\r\n" if value else b"#f\r\n") if resp3 else b":%d\r\n" % value)
    else:
        raise TypeError(f"cannot encode {t.__name__} as a RESP reply")


def line(text: str) -> bytes:
    """A status/error text on one line: RESP simple strings cannot hold CR or LF."""
    return text.replace("\r", " ").replace("\n", " ").encode()


def encode_reply(value: Value, resp3: bool = False) -> bytes:
    """The RESP bytes of one reply (for tests and tools; the server encodes in batches)."""
    out: list[bytes] = []
    encode(value, out, resp3)
    return b"".join(out)
