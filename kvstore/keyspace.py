"""The keyspace: the keys and their values, and the commands on keys of any
type (DEL, EXISTS, DBSIZE, KEYS, SCAN, FLUSHDB, FLUSHALL).

Pure: no I/O, no clock, no randomness, no iteration in hash order (KEYS and
SCAN walk the keys sorted), so that every replica reaches the same state and
answers the same bytes. Each data type's commands live in their own module
(:mod:`kvstore.strings`, and the types to come) and change the keys only
through :class:`Keyspace`, which keeps the sorted keys that KEYS and SCAN
read; :mod:`kvstore.dispatch` pairs every command's spec with its handler.

What every type's commands share lives here too: Redis' integer arguments
(:func:`parse_int`) and the common error replies.

SCAN differs from Redis on purpose: it walks the sorted keys and its cursor
is the next key to examine, spelled as decimal digits: ``"1"`` followed by
each byte as three digits (``"0"`` starts and ends a scan, as in Redis). A
key present for the whole scan is returned exactly once, whatever is written
meanwhile (an index cursor would skip keys when earlier ones are deleted). The
cursor is a decimal number so that redis-py (which ``int()``\\ s it) works, but
it is longer than Redis' 64-bit cursors for keys over 6 bytes: clients that
parse cursors into a uint64 cannot SCAN this store. ``COUNT`` is the number of
keys examined per call (default 10); ``TYPE string`` keeps every key, any
other type none.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable

import msgpack

from kvstore.codec import INT_MAX, INT_MIN
from kvstore.glob import matcher
from kvstore.values import OK, Error, Value

__all__ = [
    "ERR_NOT_INT",
    "ERR_SYNTAX",
    "HANDLERS",
    "Handler",
    "Keyspace",
    "decode_cursor",
    "encode_cursor",
    "parse_int",
]

#: Snapshot layout: ``[MAGIC, VERSION, [k1, v1, k2, v2, ...]]`` with keys strictly increasing.
SNAPSHOT_MAGIC = b"sdpaxos-kvstore"
SNAPSHOT_VERSION = 1

ERR_SYNTAX = Error("ERR syntax error")
ERR_NOT_INT = Error("ERR value is not an integer or out of range")
ERR_CURSOR = Error("ERR invalid cursor")


class Keyspace:
    """The keys and their values; the one place a key appears or goes.

    ``data`` may be read directly (the commands' hot paths do), and a value of
    a key that exists may be replaced in it; a key is added or removed through
    :meth:`put`, :meth:`put_pairs`, :meth:`delete`, :meth:`pop` or
    :meth:`clear`, which drop ``sorted_cache``, the sorted keys KEYS and SCAN
    read (kept until a key appears or goes, not when a value changes, so that
    a scan over a busy but stable key set sorts once). A hot path that inlines
    :meth:`put` (a plain SET) drops it the same way.
    """

    __slots__ = ("data", "sorted_cache")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        #: Every key, sorted; None until :meth:`keys_sorted` next needs it.
        self.sorted_cache: list[bytes] | None = None

    def __len__(self) -> int:
        return len(self.data)

    def keys_sorted(self) -> list[bytes]:
        """Every key, sorted (the cached list itself: do not change it)."""
        if self.sorted_cache is None:
            self.sorted_cache = sorted(self.data)
        return self.sorted_cache

    def put(self, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value``, whether it exists or not."""
        data = self.data
        if self.sorted_cache is not None and key not in data:
            self.sorted_cache = None
        data[key] = value

    def put_pairs(self, keys: list[bytes], values: Iterable[bytes]) -> None:
        """Set each of ``keys`` to the value at the same place in ``values``
        (later ones win): a run of plain SETs, applied by one ``dict.update``."""
        data = self.data
        if self.sorted_cache is not None and not data.keys() >= set(keys):
            self.sorted_cache = None
        data.update(zip(keys, values, strict=True))

    def delete(self, key: bytes) -> bool:
        """Remove ``key``; whether it was there."""
        if self.data.pop(key, None) is None:
            return False
        self.sorted_cache = None
        return True

    def pop(self, key: bytes) -> bytes | None:
        """Remove ``key``; its value, or ``None`` if it was not there."""
        old = self.data.pop(key, None)
        if old is not None:
            self.sorted_cache = None
        return old

    def clear(self) -> None:
        """Remove every key."""
        self.data = {}
        self.sorted_cache = None

    def snapshot(self) -> bytes:
        """The whole state as deterministic bytes: the items sorted by key, in msgpack."""
        data = self.data
        flat: list[bytes] = []
        for key in sorted(data):
            flat.append(key)
            flat.append(data[key])
        packed: bytes = msgpack.packb([SNAPSHOT_MAGIC, SNAPSHOT_VERSION, flat], use_bin_type=True)
        return packed

    def restore(self, snapshot: bytes) -> None:
        """Replace the state with a snapshot's; raises ValueError (state unchanged) on garbage.

        Only the canonical form :meth:`snapshot` writes is accepted (keys
        strictly increasing), so a restored keyspace snapshots to the same bytes.
        """
        try:
            top = msgpack.unpackb(snapshot, raw=False)
        except Exception as exc:
            raise ValueError(f"kvstore snapshot is not msgpack: {exc}") from exc
        if type(top) is not list or len(top) != 3 or top[0] != SNAPSHOT_MAGIC:
            raise ValueError("not a kvstore snapshot (expected [magic, version, items])")
        if top[1] != SNAPSHOT_VERSION:
            raise ValueError(f"kvstore snapshot version {top[1]!r} is not {SNAPSHOT_VERSION}")
        flat = top[2]
        if type(flat) is not list or len(flat) % 2:
            raise ValueError("kvstore snapshot items must be a flat list of key, value pairs")
        data: dict[bytes, bytes] = {}
        previous: bytes | None = None
        for i in range(0, len(flat), 2):
            key, value = flat[i], flat[i + 1]
            if type(key) is not bytes or type(value) is not bytes:
                raise ValueError(f"kvstore snapshot item {i // 2} is not a pair of byte strings")
            if previous is not None and key <= previous:
                raise ValueError("kvstore snapshot keys are not strictly increasing")
            data[key] = value
            previous = key
        self.data = data
        self.sorted_cache = None


#: A command's handler: the keyspace and the whole argument list (the name at
#: 0, arity already checked); it validates everything before it changes
#: anything, so an error answer always means "nothing changed".
Handler = Callable[[Keyspace, list[bytes]], Value]


# --- integers --------------------------------------------------------------------------------


def parse_int(raw: bytes) -> int | None:
    """The signed 64-bit integer ``raw`` spells exactly as Redis' ``string2ll``
    accepts it (no sign other than a leading ``-``, no spaces, no leading zeros,
    no ``-0``), else ``None``."""
    if len(raw) > 20 or not raw:
        return None
    digits = raw[1:] if raw[0] == 45 else raw  # '-'
    if not digits.isdigit() or (digits[0] == 48 and len(raw) > 1):  # '0' leading
        return None
    value = int(raw)
    if value > INT_MAX or value < INT_MIN:
        return None
    return value


# --- SCAN cursors ----------------------------------------------------------------------------


def encode_cursor(key: bytes) -> bytes:
    """The cursor that resumes a scan at ``key``: ``1`` then three digits per byte."""
    return b"1" + b"".join(b"%03d" % c for c in key)


def decode_cursor(cursor: bytes) -> bytes | None:
    """The key a cursor resumes at (``0`` is the start, the empty key), or ``None``."""
    if cursor == b"0":
        return b""
    if len(cursor) % 3 != 1 or cursor[0] != 49 or not cursor.isdigit():  # '1'
        return None
    try:
        return bytes(int(cursor[i : i + 3]) for i in range(1, len(cursor), 3))
    except ValueError:  # a byte over 255
        return None


# --- the commands on keys of any type --------------------------------------------------------


def cmd_del(ks: Keyspace, args: list[bytes]) -> Value:
    deleted = 0
    for key in args[1:]:
        if ks.delete(key):
            deleted += 1
    return deleted


def cmd_exists(ks: Keyspace, args: list[bytes]) -> Value:
    data = ks.data
    return sum(1 for key in args[1:] if key in data)


def cmd_dbsize(ks: Keyspace, args: list[bytes]) -> Value:
    return len(ks.data)


def cmd_keys(ks: Keyspace, args: list[bytes]) -> Value:
    match = matcher(args[1])
    keys = ks.keys_sorted()
    if match is None:
        return list(keys)
    return [key for key in keys if match(key)]


def cmd_scan(ks: Keyspace, args: list[bytes]) -> Value:
    start = decode_cursor(args[1])
    if start is None:
        return ERR_CURSOR
    count = 10
    pattern: bytes | None = None
    type_ok = True
    i = 2
    n = len(args)
    while i < n:  # as Redis' scanGenericCommand: each option needs its argument
        opt = args[i].lower()
        if n - i < 2 or opt not in (b"count", b"match", b"type"):
            return ERR_SYNTAX
        value = args[i + 1]
        if opt == b"count":
            parsed = parse_int(value)
            if parsed is None:
                return ERR_NOT_INT
            if parsed < 1:
                return ERR_SYNTAX
            count = parsed
        elif opt == b"match":
            pattern = value
        else:
            type_ok = value.lower() == b"string"
        i += 2
    keys = ks.keys_sorted()
    first = bisect_left(keys, start)
    end = first + count
    batch = keys[first:end] if type_ok else []
    cursor = encode_cursor(keys[end]) if end < len(keys) else b"0"
    match = matcher(pattern)
    found: list[Value] = list(batch) if match is None else [k for k in batch if match(k)]
    return [cursor, found]


def cmd_flush(ks: Keyspace, args: list[bytes]) -> Value:
    """FLUSHDB and FLUSHALL (there is one database)."""
    if len(args) > 2 or (len(args) == 2 and args[1].lower() not in (b"sync", b"async")):
        return ERR_SYNTAX
    ks.clear()
    return OK


#: This module's commands, by the name of their spec in :data:`kvstore.commands.COMMANDS`.
HANDLERS: dict[str, Handler] = {
    "del": cmd_del,
    "exists": cmd_exists,
    "dbsize": cmd_dbsize,
    "keys": cmd_keys,
    "scan": cmd_scan,
    "flushdb": cmd_flush,
    "flushall": cmd_flush,
}
