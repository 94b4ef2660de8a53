"""The kv-store's state machine: Redis 7 string commands over a dict, deterministically.

Every replica applies the same payloads in the same order, so :class:`KVStore`
must reach the same state and answer the same bytes everywhere: no clock (hence
no expiry: ``SET ... EX`` is refused), no randomness, no iteration in hash
order (``KEYS`` and ``SCAN`` walk the keys sorted), and no exception out of
:meth:`KVStore.apply`, whatever the payload, since a payload that crashed one
replica would crash them all.

Semantics follow Redis 7.0 for strings, including its error texts: checked by
hand against ``redis-server`` 7.0.15, and by a one-off differential run of
80,000 random commands (options, bad integers, glob quirks, arity errors) that
answered identically (KEYS compared as sorted sets). Differences, on purpose:

* ``SET`` refuses ``EX``/``PX``/``EXAT``/``PXAT``/``KEEPTTL`` with ``ERR expiry
  is not supported by this store`` (after Redis' own syntax checks).
* ``KEYS`` answers sorted keys; ``SCAN`` walks the sorted keys and its cursor
  is the next key to examine, spelled as decimal digits: ``"1"`` followed by
  each byte as three digits (``"0"`` starts and ends a scan, as in Redis). A
  key present for the whole scan is returned exactly once, whatever is written
  meanwhile (an index cursor would skip keys when earlier ones are deleted).
  The cursor is a decimal number so that redis-py (which ``int()``\\ s it) works,
  but it is longer than Redis' 64-bit cursors for keys over 6 bytes: clients
  that parse cursors into a uint64 cannot SCAN this store. ``COUNT`` is the
  number of keys examined per call (default 10); ``TYPE string`` keeps every
  key, any other type none.
* Glob patterns compare bytes unsigned (Redis compares ``char``, signed on
  x86, so its ranges over bytes >= 0x80 differ); everything else, including
  Redis' quirks (``*`` alone matches the empty key but ``**`` does not, an
  unclosed ``[`` runs to the end of the pattern, ``[a-]`` is the range a..]),
  is reproduced.
* ``CAS key expected new`` (not in Redis): see :mod:`kvstore.commands`.
* ``query`` refuses write commands; ``apply`` runs reads too (answered like a
  query, changing nothing), so a linearizable read can go through the log.

Speed: ``apply`` unpacks, finds the handler in a dict keyed by the command's
bytes (lowercase and uppercase spellings both present), checks arity and runs
a bound method; ``OK`` and nil results are pre-encoded. Measured on the
development machine (Python 3.11, msgpack 1.2)::

    python -c "import timeit; from kvstore.machine import KVStore, encode_command as e; \\
    s=KVStore(); p=e([b'SET', b'key:1234', b'v'*16]); \\
    print(1e6/min(timeit.repeat(lambda: s.apply(p), number=1000000, repeat=3)))"

1.59 million SET applies per second and 1.44 million GETs (16-byte values), so the machine
is a small part of a node's ~100k commands/s budget.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from itertools import islice
from typing import Any

import msgpack

from kvstore.codec import (
    EXT_BATCH,
    INT_MAX,
    INT_MIN,
    PLAIN_SET,
    array_header,
    codec_default,
    decode_command,
    decode_value,
    encode_command,
    encode_value,
    pack_trusted,
)
from kvstore.commands import COMMANDS, unknown_command, write_key, wrong_arity
from kvstore.values import OK, Error, Value

__all__ = [
    "KVStore",
    "compile_glob",
    "decode_value",
    "encode_command",
    "encode_value",
    "glob_match",
    "write_key",
]

#: Snapshot layout: ``[MAGIC, VERSION, [k1, v1, k2, v2, ...]]`` with keys strictly increasing.
SNAPSHOT_MAGIC = b"sdpaxos-kvstore"
SNAPSHOT_VERSION = 1

#: Batches :meth:`KVStore.prime` remembers at once (a node has a few in flight).
PRIMED_MAX = 64

#: Redis' proto-max-bulk-len default: the longest string APPEND may build.
MAX_STRING = 512 * 1024 * 1024

ERR_MALFORMED = Error("ERR malformed command: expected a msgpack array of byte strings")
ERR_SYNTAX = Error("ERR syntax error")
ERR_NOT_INT = Error("ERR value is not an integer or out of range")
ERR_OVERFLOW = Error("ERR increment or decrement would overflow")
ERR_DECR_MIN = Error("ERR decrement would overflow")
ERR_EXPIRY = Error("ERR expiry is not supported by this store")
ERR_CURSOR = Error("ERR invalid cursor")
ERR_TOO_LONG = Error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")

_OK_BYTES = pack_trusted(OK)
_NIL_BYTES = pack_trusted(None)
_MALFORMED_BYTES = pack_trusted(ERR_MALFORMED)

Handler = Callable[[list[bytes]], Value]


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


# --- glob patterns ---------------------------------------------------------------------------

#: A compiled pattern: one entry per position, ``None`` for a ``*`` run, else the
#: set of bytes that position accepts.
Glob = list[frozenset[int] | None]

_ANY = frozenset(range(256))


def compile_glob(pattern: bytes) -> Glob | None:
    """Compile a Redis glob pattern (``stringmatchlen`` in ``util.c``); ``None`` if
    it can match nothing because of Redis' nesting limit.

    Tokenising once per KEYS/SCAN call keeps the per-key match a plain loop.
    The class parser follows Redis step by step, quirks included: ``\\`` escapes
    inside and outside classes (a trailing ``\\`` is literal), ``^`` negates, a
    range ``x-y`` may run backwards, ``-`` before ``]`` makes a range ending in
    ``]``, and an unclosed ``[`` takes the rest of the pattern as its class.
    Redis gives up (no match) past 1000 nested ``*`` recursions; that happens
    exactly when more than 1000 ``*`` runs are followed by more pattern.
    """
    tokens: Glob = []
    p = 0
    n = len(pattern)
    while p < n:
        c = pattern[p]
        if c == 42:  # '*'
            if not tokens or tokens[-1] is not None:
                tokens.append(None)
            p += 1
        elif c == 63:  # '?'
            tokens.append(_ANY)
            p += 1
        elif c == 91:  # '['
            p += 1
            negate = p < n and pattern[p] == 94  # '^'
            if negate:
                p += 1
            members: set[int] = set()
            while True:
                if p < n and pattern[p] == 92 and n - p >= 2:  # '\' escapes
                    p += 1
                    members.add(pattern[p])
                elif p < n and pattern[p] == 93:  # ']' closes
                    p += 1
                    break
                elif p >= n:  # unclosed: the class ends with the pattern
                    break
                elif n - p >= 3 and pattern[p + 1] == 45:  # 'a-z'
                    lo, hi = pattern[p], pattern[p + 2]
                    if lo > hi:
                        lo, hi = hi, lo
                    members.update(range(lo, hi + 1))
                    p += 2
                else:
                    members.add(pattern[p])
                p += 1
            tokens.append(_ANY - members if negate else frozenset(members))
        else:
            if c == 92 and n - p >= 2:  # '\' escapes the next byte
                p += 1
            tokens.append(frozenset((pattern[p],)))
            p += 1
    runs = tokens.count(None) - (1 if tokens and tokens[-1] is None else 0)
    if runs > 1000:
        return None
    return tokens


def glob_match(glob: Glob | None, s: bytes) -> bool:
    """Whether ``s`` matches a compiled pattern.

    Greedy with one backtrack point (the last ``*``), which decides the same
    as Redis' recursion with its "skip longer matches" cut, in O(len * len).
    As in Redis, the empty string matches only the empty pattern (``KEYS *``
    and ``SCAN`` without MATCH list every key without calling this).
    """
    if glob is None:
        return False
    if not s:
        return not glob
    n = len(glob)
    m = len(s)
    p = i = 0
    star = -1
    star_i = 0
    while i < m:
        if p < n:
            token = glob[p]
            if token is None:
                star = p
                star_i = i
                p += 1
                continue
            if s[i] in token:
                p += 1
                i += 1
                continue
        if star < 0:
            return False
        star_i += 1
        i = star_i
        p = star + 1
    while p < n and glob[p] is None:
        p += 1
    return p == n


def _matcher(pattern: bytes | None) -> Callable[[bytes], bool] | None:
    """A predicate for MATCH/KEYS, or ``None`` when everything matches (``*``)."""
    if pattern is None or pattern == b"*":
        return None
    glob = compile_glob(pattern)
    return lambda key: glob_match(glob, key)


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


# --- batches ---------------------------------------------------------------------------------


def _runs_total(items: list[object]) -> int | None:
    """How many commands a batch's items stand for, or ``None`` if a SET run in
    it is malformed: its count is not a positive int, it runs past the end,
    or one of its keys and values is not bytes (:mod:`kvstore.codec`)."""
    total = 0
    i = 0
    n = len(items)
    while i < n:
        item = items[i]
        if type(item) is int:
            end = i + 1 + 2 * item
            if item < 1 or end > n or set(map(type, items[i + 1 : end])) != {bytes}:
                return None
            total += item
            i = end
        else:
            total += 1
            i += 1
    return total


# --- the state machine -----------------------------------------------------------------------


class KVStore:
    """A deterministic Redis-like string store, for SDPaxos' StateMachine protocol."""

    __slots__ = ("_data", "_pack", "_primed", "_refused_set", "_sorted", "_table")

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        # The keys sorted, for KEYS/SCAN; dropped when a key appears or goes (not when a
        # value changes), so a scan over a busy but stable key set sorts once.
        self._sorted: list[bytes] | None = None
        self._table: dict[bytes, tuple[int, bool, str, Handler]] = {}
        # One Packer per store, reused: ten times cheaper than msgpack.packb per result
        # (a store is used by one thread, the node's loop).
        self._pack: Callable[[Value], bytes] = msgpack.Packer(
            use_bin_type=True, strict_types=True, default=codec_default
        ).pack
        for spec in COMMANDS.values():
            handler: Handler = getattr(self, "_cmd_" + spec.name)
            entry = (spec.arity, spec.kind == "write", spec.name, handler)
            self._table[spec.name.encode()] = entry
            self._table[spec.name.upper().encode()] = entry
        #: Batches this node packed, not yet applied (see :meth:`prime`).
        self._primed: dict[int, tuple[bytes, list[Any]]] = {}
        #: What a plain SET answers as a query (a write refused), for SET runs.
        self._refused_set: bytes = self._pack(self.execute([b"SET", b"k", b"v"], writes=False))

    # -- the StateMachine protocol --

    def apply(self, payload: bytes) -> bytes:
        """Run one command from the log and answer its encoded result. Never raises."""
        return self._run(payload, writes=True)

    def query(self, request: bytes) -> bytes:
        """Answer a read command from local state (a write is refused, nothing changes)."""
        return self._run(request, writes=False)

    def prime(self, payload: bytes, items: list[Any]) -> None:
        """Remember that batch ``payload`` decodes to ``items``: this node just
        packed it from them (``encode_batch_items(items) == payload``, and the
        caller never changes ``items`` again), so applying that very object
        here need not unpack it. Only the same object counts (``is``), and at
        most :data:`PRIMED_MAX` are kept (the oldest is forgotten: it is then
        unpacked as any other payload). Every other replica unpacks the same
        bytes into equal items, so they all apply the same commands."""
        primed = self._primed
        if len(primed) >= PRIMED_MAX:
            del primed[next(iter(primed))]
        primed[id(payload)] = (payload, items)

    def _run(self, payload: bytes, writes: bool) -> bytes:
        primed = self._primed
        if primed:
            known = primed.pop(id(payload), None)
            if known is not None and known[0] is payload:
                return self._batch_items(known[1], writes)
        try:
            args = msgpack.unpackb(payload)
        except Exception:
            return _MALFORMED_BYTES
        if type(args) is msgpack.ExtType:
            return self._batch(args, writes)
        result = self.execute(args, writes)  # refuses anything but a list of bytes
        if result is OK:
            return _OK_BYTES
        if result is None:
            return _NIL_BYTES
        return self._pack(result)

    def _batch(self, ext: msgpack.ExtType, writes: bool) -> bytes:
        """A batch (:func:`kvstore.codec.encode_batch`): each command in order,
        answered as the array of their results (one per command; a run of
        ``n`` plain SETs answers ``n``)."""
        if ext.code != EXT_BATCH:
            return _MALFORMED_BYTES
        try:
            items = msgpack.unpackb(ext.data)
        except Exception:
            return _MALFORMED_BYTES
        return self._batch_items(items, writes)

    def _batch_items(self, items: object, writes: bool) -> bytes:
        """A batch's items (unpacked, or given to :meth:`prime`), applied."""
        if type(items) is not list or not items:
            return _MALFORMED_BYTES
        count: int = items[0]
        if type(count) is int and len(items) == 1 + 2 * count and count > 0:
            # One run of plain SETs, the whole batch (what a SET pipeline makes).
            keys = items[1::2]
            values = items[2::2]
            if set(map(type, keys)) != {bytes} or set(map(type, values)) != {bytes}:
                return _MALFORMED_BYTES
            if not writes:
                return array_header(count) + self._refused_set * count
            data = self._data
            if self._sorted is not None and not data.keys() >= set(keys):
                self._sorted = None
            data.update(zip(keys, values, strict=True))
            return array_header(count) + _OK_BYTES * count
        if int in set(map(type, items)):
            # SET runs: check each before anything is applied, so that a
            # malformed batch changes nothing (a bad command alone is answered
            # alone, as it changes nothing either).
            total = _runs_total(items)
            if total is None:
                return _MALFORMED_BYTES
        else:
            total = len(items)
        execute = self.execute
        pack = self._pack
        out = [array_header(total)]
        it = iter(items)
        for args in it:
            if type(args) is int:
                # A run of plain SETs (checked above): key, value, key, value, ...
                pairs = list(islice(it, 2 * args))
                if not writes:
                    out.append(self._refused_set * args)
                    continue
                keys = pairs[::2]
                data = self._data  # not hoisted: FLUSHDB replaces the dict
                if self._sorted is not None and not data.keys() >= set(keys):
                    self._sorted = None
                data.update(zip(keys, pairs[1::2], strict=True))
                out.append(_OK_BYTES * args)
                continue
            # The commonest command, plain SET, without the general dispatch
            # (every replica applies every command: this is the hot loop).
            if (
                writes
                and type(args) is list
                and len(args) == 3
                and args[0] in PLAIN_SET
                and type(args[1]) is bytes
                and type(args[2]) is bytes
            ):
                key = args[1]
                data = self._data
                if self._sorted is not None and key not in data:
                    self._sorted = None
                data[key] = args[2]
                out.append(_OK_BYTES)
                continue
            result = execute(args, writes)
            if result is OK:
                out.append(_OK_BYTES)
            elif result is None:
                out.append(_NIL_BYTES)
            else:
                out.append(pack(result))
        return b"".join(out)

    def snapshot(self) -> bytes:
        """The whole state as deterministic bytes: the items sorted by key, in msgpack."""
        flat: list[bytes] = []
        for key in sorted(self._data):
            flat.append(key)
            flat.append(self._data[key])
        packed: bytes = msgpack.packb([SNAPSHOT_MAGIC, SNAPSHOT_VERSION, flat], use_bin_type=True)
        return packed

    def restore(self, data: bytes) -> None:
        """Replace the state with a snapshot's; raises ValueError (state unchanged) on garbage.

        Only the canonical form :meth:`snapshot` writes is accepted (keys
        strictly increasing), so a restored store snapshots to the same bytes.
        """
        try:
            top = msgpack.unpackb(data, raw=False)
        except Exception as exc:
            raise ValueError(f"kvstore snapshot is not msgpack: {exc}") from exc
        if type(top) is not list or len(top) != 3 or top[0] != SNAPSHOT_MAGIC:
            raise ValueError("not a kvstore snapshot (expected [magic, version, items])")
        if top[1] != SNAPSHOT_VERSION:
            raise ValueError(f"kvstore snapshot version {top[1]!r} is not {SNAPSHOT_VERSION}")
        flat = top[2]
        if type(flat) is not list or len(flat) % 2:
            raise ValueError("kvstore snapshot items must be a flat list of key, value pairs")
        data_: dict[bytes, bytes] = {}
        previous: bytes | None = None
        for i in range(0, len(flat), 2):
            key, value = flat[i], flat[i + 1]
            if type(key) is not bytes or type(value) is not bytes:
                raise ValueError(f"kvstore snapshot item {i // 2} is not a pair of byte strings")
            if previous is not None and key <= previous:
                raise ValueError("kvstore snapshot keys are not strictly increasing")
            data_[key] = value
            previous = key
        self._data = data_
        self._sorted = None

    # -- helpers for the node and for tests --

    @staticmethod
    def write_key(payload: bytes) -> bytes | None:
        """The single key a payload's write names, else ``None`` ("any key")."""
        args = decode_command(payload)
        return None if args is None else write_key(args)

    def execute(self, args: object, writes: bool = True) -> Value:
        """Run a decoded command (``writes=False``: refuse writes). Never raises.

        Every handler validates everything before it changes anything, so an
        error answer always means "nothing changed".
        """
        if type(args) is not list or not args:
            return ERR_MALFORMED
        for arg in args:
            if type(arg) is not bytes:
                return ERR_MALFORMED
        entry = self._table.get(args[0])
        if entry is None:
            entry = self._table.get(args[0].lower())
            if entry is None:
                return unknown_command(args)
        arity, is_write, name, handler = entry
        n = len(args)
        if (n != arity) if arity > 0 else (n < -arity):
            return wrong_arity(name)
        if is_write and not writes:
            return Error(f"ERR '{name}' is a write command: it must go through the log")
        try:
            return handler(args)
        except Exception as exc:  # a bug; answer it rather than crash every replica
            return Error(f"ERR internal error in '{name}': {type(exc).__name__}")

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every key and value, sorted (a copy: for tests and debugging)."""
        return sorted(self._data.items())

    def __len__(self) -> int:
        return len(self._data)

    def _keys_sorted(self) -> list[bytes]:
        if self._sorted is None:
            self._sorted = sorted(self._data)
        return self._sorted

    def _put(self, key: bytes, value: bytes) -> None:
        data = self._data
        if self._sorted is not None and key not in data:
            self._sorted = None
        data[key] = value

    def _delete(self, key: bytes) -> bool:
        if self._data.pop(key, None) is None:
            return False
        self._sorted = None
        return True

    # -- commands: each takes the whole argument list, arity already checked --

    def _cmd_get(self, args: list[bytes]) -> Value:
        return self._data.get(args[1])

    def _cmd_set(self, args: list[bytes]) -> Value:
        key = args[1]
        data = self._data
        if len(args) == 3:  # the hot path
            if self._sorted is not None and key not in data:
                self._sorted = None
            data[key] = args[2]
            return OK
        # Options as Redis' parseExtendedStringArgumentsOrReply checks them.
        nx = xx = get = keepttl = False
        expiry: bytes | None = None  # which of EX/PX/EXAT/PXAT was given
        i = 3
        n = len(args)
        while i < n:
            opt = args[i].lower()
            if opt == b"nx" and not xx:
                nx = True
            elif opt == b"xx" and not nx:
                xx = True
            elif opt == b"get":
                get = True
            elif opt == b"keepttl" and expiry is None:
                keepttl = True
            elif (
                opt in (b"ex", b"px", b"exat", b"pxat")
                and not keepttl
                and expiry in (None, opt)
                and i + 1 < n
            ):
                expiry = opt
                i += 1
            else:
                return ERR_SYNTAX
            i += 1
        if keepttl or expiry is not None:
            return ERR_EXPIRY
        old = data.get(key)
        if (nx and old is not None) or (xx and old is None):
            return old if get else None
        self._put(key, args[2])
        return old if get else OK

    def _cmd_del(self, args: list[bytes]) -> Value:
        deleted = 0
        for key in args[1:]:
            if self._delete(key):
                deleted += 1
        return deleted

    def _cmd_exists(self, args: list[bytes]) -> Value:
        data = self._data
        return sum(1 for key in args[1:] if key in data)

    def _incr(self, key: bytes, delta: int) -> Value:
        old = self._data.get(key)
        if old is None:
            current = 0
        else:
            parsed = parse_int(old)
            if parsed is None:
                return ERR_NOT_INT
            current = parsed
        new = current + delta
        if new > INT_MAX or new < INT_MIN:
            return ERR_OVERFLOW
        self._put(key, b"%d" % new)
        return new

    def _cmd_incr(self, args: list[bytes]) -> Value:
        return self._incr(args[1], 1)

    def _cmd_decr(self, args: list[bytes]) -> Value:
        return self._incr(args[1], -1)

    def _cmd_incrby(self, args: list[bytes]) -> Value:
        delta = parse_int(args[2])
        if delta is None:
            return ERR_NOT_INT
        return self._incr(args[1], delta)

    def _cmd_decrby(self, args: list[bytes]) -> Value:
        delta = parse_int(args[2])
        if delta is None:
            return ERR_NOT_INT
        if delta == INT_MIN:  # its negation does not fit (Redis 7 checks this first)
            return ERR_DECR_MIN
        return self._incr(args[1], -delta)

    def _cmd_append(self, args: list[bytes]) -> Value:
        key = args[1]
        old = self._data.get(key, b"")
        if len(old) + len(args[2]) > MAX_STRING:
            return ERR_TOO_LONG
        new = old + args[2]
        self._put(key, new)
        return len(new)

    def _cmd_strlen(self, args: list[bytes]) -> Value:
        return len(self._data.get(args[1], b""))

    def _cmd_mget(self, args: list[bytes]) -> Value:
        get = self._data.get
        return [get(key) for key in args[1:]]

    def _cmd_mset(self, args: list[bytes]) -> Value:
        if len(args) % 2 == 0:
            return wrong_arity("mset")
        for i in range(1, len(args), 2):
            self._put(args[i], args[i + 1])
        return OK

    def _cmd_msetnx(self, args: list[bytes]) -> Value:
        if len(args) % 2 == 0:
            return wrong_arity("msetnx")
        data = self._data
        for i in range(1, len(args), 2):
            if args[i] in data:
                return 0
        for i in range(1, len(args), 2):
            self._put(args[i], args[i + 1])
        return 1

    def _cmd_getset(self, args: list[bytes]) -> Value:
        old = self._data.get(args[1])
        self._put(args[1], args[2])
        return old

    def _cmd_getdel(self, args: list[bytes]) -> Value:
        old = self._data.pop(args[1], None)
        if old is not None:
            self._sorted = None
        return old

    def _cmd_setnx(self, args: list[bytes]) -> Value:
        if args[1] in self._data:
            return 0
        self._put(args[1], args[2])
        return 1

    def _cmd_cas(self, args: list[bytes]) -> Value:
        current = self._data.get(args[1])
        if current is None or current != args[2]:
            return 0
        self._data[args[1]] = args[3]  # the key exists: the sorted keys stay valid
        return 1

    def _cmd_dbsize(self, args: list[bytes]) -> Value:
        return len(self._data)

    def _cmd_keys(self, args: list[bytes]) -> Value:
        match = _matcher(args[1])
        keys = self._keys_sorted()
        if match is None:
            return list(keys)
        return [key for key in keys if match(key)]

    def _cmd_scan(self, args: list[bytes]) -> Value:
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
        keys = self._keys_sorted()
        first = bisect_left(keys, start)
        end = first + count
        batch = keys[first:end] if type_ok else []
        cursor = encode_cursor(keys[end]) if end < len(keys) else b"0"
        match = _matcher(pattern)
        found: list[Value] = list(batch) if match is None else [k for k in batch if match(k)]
        return [cursor, found]

    def _flush(self, args: list[bytes]) -> Value:
        if len(args) > 2 or (len(args) == 2 and args[1].lower() not in (b"sync", b"async")):
            return ERR_SYNTAX
        self._data = {}
        self._sorted = None
        return OK

    def _cmd_flushdb(self, args: list[bytes]) -> Value:
        return self._flush(args)

    def _cmd_flushall(self, args: list[bytes]) -> Value:
        return self._flush(args)
