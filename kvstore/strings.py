"""The string commands: GET, SET, INCR and its family, APPEND, STRLEN, MGET,
MSET, MSETNX, GETSET, GETDEL, SETNX and CAS, as Redis 7.0 answers them.

Pure, as every command of the state machine: each handler takes the
:class:`~kvstore.keyspace.Keyspace` and the whole argument list (arity already
checked by the dispatch table) and validates everything before it changes
anything. Differences from Redis, on purpose:

* ``SET`` refuses ``EX``/``PX``/``EXAT``/``PXAT``/``KEEPTTL`` with ``ERR expiry
  is not supported by this store`` (after Redis' own syntax checks): the store
  has no clock.
* ``CAS key expected new`` (not in Redis): see :mod:`kvstore.commands`.
"""

from __future__ import annotations

from kvstore.codec import INT_MAX, INT_MIN
from kvstore.commands import wrong_arity
from kvstore.keyspace import ERR_NOT_INT, ERR_SYNTAX, Handler, Keyspace, parse_int
from kvstore.values import OK, Error, Value

__all__ = ["HANDLERS", "MAX_STRING"]

#: Redis' proto-max-bulk-len default: the longest string APPEND may build.
MAX_STRING = 512 * 1024 * 1024

ERR_OVERFLOW = Error("ERR increment or decrement would overflow")
ERR_DECR_MIN = Error("ERR decrement would overflow")
ERR_EXPIRY = Error("ERR expiry is not supported by this store")
ERR_TOO_LONG = Error("ERR string exceeds maximum allowed size (proto-max-bulk-len)")


def cmd_get(ks: Keyspace, args: list[bytes]) -> Value:
    return ks.data.get(args[1])


def cmd_set(ks: Keyspace, args: list[bytes]) -> Value:
    key = args[1]
    if len(args) == 3:  # the hot path: Keyspace.put, inlined
        data = ks.data
        if ks.sorted_cache is not None and key not in data:
            ks.sorted_cache = None
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
    old = ks.data.get(key)
    if (nx and old is not None) or (xx and old is None):
        return old if get else None
    ks.put(key, args[2])
    return old if get else OK


def _incr(ks: Keyspace, key: bytes, delta: int) -> Value:
    old = ks.data.get(key)
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
    ks.put(key, b"%d" % new)
    return new


def cmd_incr(ks: Keyspace, args: list[bytes]) -> Value:
    return _incr(ks, args[1], 1)


def cmd_decr(ks: Keyspace, args: list[bytes]) -> Value:
    return _incr(ks, args[1], -1)


def cmd_incrby(ks: Keyspace, args: list[bytes]) -> Value:
    delta = parse_int(args[2])
    if delta is None:
        return ERR_NOT_INT
    return _incr(ks, args[1], delta)


def cmd_decrby(ks: Keyspace, args: list[bytes]) -> Value:
    delta = parse_int(args[2])
    if delta is None:
        return ERR_NOT_INT
    if delta == INT_MIN:  # its negation does not fit (Redis 7 checks this first)
        return ERR_DECR_MIN
    return _incr(ks, args[1], -delta)


def cmd_append(ks: Keyspace, args: list[bytes]) -> Value:
    key = args[1]
    old = ks.data.get(key, b"")
    if len(old) + len(args[2]) > MAX_STRING:
        return ERR_TOO_LONG
    new = old + args[2]
    ks.put(key, new)
    return len(new)


def cmd_strlen(ks: Keyspace, args: list[bytes]) -> Value:
    return len(ks.data.get(args[1], b""))


def cmd_mget(ks: Keyspace, args: list[bytes]) -> Value:
    get = ks.data.get
    return [get(key) for key in args[1:]]


def cmd_mset(ks: Keyspace, args: list[bytes]) -> Value:
    if len(args) % 2 == 0:
        return wrong_arity("mset")
    for i in range(1, len(args), 2):
        ks.put(args[i], args[i + 1])
    return OK


def cmd_msetnx(ks: Keyspace, args: list[bytes]) -> Value:
    if len(args) % 2 == 0:
        return wrong_arity("msetnx")
    data = ks.data
    for i in range(1, len(args), 2):
        if args[i] in data:
            return 0
    for i in range(1, len(args), 2):
        ks.put(args[i], args[i + 1])
    return 1


def cmd_getset(ks: Keyspace, args: list[bytes]) -> Value:
    old = ks.data.get(args[1])
    ks.put(args[1], args[2])
    return old


def cmd_getdel(ks: Keyspace, args: list[bytes]) -> Value:
    return ks.pop(args[1])


def cmd_setnx(ks: Keyspace, args: list[bytes]) -> Value:
    if args[1] in ks.data:
        return 0
    ks.put(args[1], args[2])
    return 1


def cmd_cas(ks: Keyspace, args: list[bytes]) -> Value:
    data = ks.data
    current = data.get(args[1])
    if current is None or current != args[2]:
        return 0
    data[args[1]] = args[3]  # the key exists: a value replaced in place (see Keyspace)
    return 1


#: This module's commands, by the name of their spec in :data:`kvstore.commands.COMMANDS`.
HANDLERS: dict[str, Handler] = {
    "get": cmd_get,
    "set": cmd_set,
    "incr": cmd_incr,
    "incrby": cmd_incrby,
    "decr": cmd_decr,
    "decrby": cmd_decrby,
    "append": cmd_append,
    "strlen": cmd_strlen,
    "mget": cmd_mget,
    "mset": cmd_mset,
    "msetnx": cmd_msetnx,
    "getset": cmd_getset,
    "getdel": cmd_getdel,
    "setnx": cmd_setnx,
    "cas": cmd_cas,
}
