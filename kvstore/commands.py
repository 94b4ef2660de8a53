"""The kv-store's command table: names, arities, key positions and flags.

Pure data plus two small functions (:func:`parse`, :func:`keys_of`), with no
I/O, so the state machine, the Redis front end (``COMMAND``, ``COMMAND DOCS``)
and the node (which key a write names) all read one table instead of keeping
copies that drift apart.

Arity and key positions follow Redis' ``COMMAND`` conventions, so a Redis
client or proxy that asks ``COMMAND INFO`` gets answers it understands:

* ``arity`` counts the command name: ``GET key`` is 2; a negative arity ``-n``
  means "at least ``n``".
* ``first_key``/``last_key``/``key_step`` give the key positions in the
  argument list (the name is position 0); ``last_key == -1`` means "up to the
  last argument", and ``0, 0, 0`` means the command names no key.

``CAS key expected new`` is the one command Redis does not have: it swaps the
value of ``key`` to ``new`` only if the key exists and holds exactly
``expected``, answering 1 if it swapped and 0 if not. A missing key never
compares equal (not even to the empty string), so ``CAS`` cannot create a
key: use ``SET key value NX`` for that.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

from kvstore.values import Error

__all__ = [
    "COMMANDS",
    "CommandSpec",
    "Kind",
    "keys_of",
    "parse",
    "unknown_command",
    "write_key",
    "wrong_arity",
]


#: What runs a command: the store reads or writes; ``connection`` commands
#: (PING, HELLO, CLIENT, ...) are answered by the Redis front end itself.
Kind = Literal["read", "write", "connection"]


class CommandSpec(NamedTuple):
    """One command's entry in the table (see the module docstring for the conventions).

    The one spec of a command everywhere: :func:`parse` and the node read it,
    the state machine's dispatch table pairs it with a handler, and the Redis
    front end answers ``COMMAND`` from it (its own connection commands are
    specs of kind ``connection``). ``group`` is ``COMMAND DOCS``' group.
    """

    name: str
    arity: int
    kind: Kind
    first_key: int
    last_key: int
    key_step: int
    flags: tuple[str, ...]
    summary: str
    group: str = "generic"

    @property
    def single_key(self) -> bool:
        """Names exactly one key, its first argument (GET k, SET k v ...): the key
        a write gives the sequencer's history table and a read asks it about."""
        return self.first_key == 1 and self.last_key == 1


def _spec(
    name: str,
    arity: int,
    kind: Literal["read", "write"],
    keys: tuple[int, int, int],
    flags: tuple[str, ...],
    summary: str,
) -> CommandSpec:
    # COMMAND DOCS' group as the front end has always answered it: a command
    # that names keys is "string" (Redis files DEL and EXISTS under "generic").
    group = "string" if keys[0] else "generic"
    return CommandSpec(name, arity, kind, keys[0], keys[1], keys[2], flags, summary, group)


_R: Final = "read"
_W: Final = "write"
_ONE = (1, 1, 1)
_ALL = (1, -1, 1)
_PAIRS = (1, -1, 2)
_NONE = (0, 0, 0)

_TABLE = (
    _spec("get", 2, _R, _ONE, ("readonly", "fast"), "Returns the string value of a key."),
    _spec(
        "set",
        -3,
        _W,
        _ONE,
        ("write", "denyoom"),
        "Sets the string value of a key (NX, XX and GET; expiry options are refused).",
    ),
    _spec("del", -2, _W, _ALL, ("write",), "Deletes one or more keys; answers how many existed."),
    _spec(
        "exists",
        -2,
        _R,
        _ALL,
        ("readonly", "fast"),
        "Counts how many of the keys exist (a key named twice counts twice).",
    ),
    _spec(
        "incr",
        2,
        _W,
        _ONE,
        ("write", "denyoom", "fast"),
        "Increments the integer value of a key by one.",
    ),
    _spec(
        "incrby",
        3,
        _W,
        _ONE,
        ("write", "denyoom", "fast"),
        "Increments the integer value of a key by a number.",
    ),
    _spec(
        "decr",
        2,
        _W,
        _ONE,
        ("write", "denyoom", "fast"),
        "Decrements the integer value of a key by one.",
    ),
    _spec(
        "decrby",
        3,
        _W,
        _ONE,
        ("write", "denyoom", "fast"),
        "Decrements the integer value of a key by a number.",
    ),
    _spec(
        "append",
        3,
        _W,
        _ONE,
        ("write", "denyoom", "fast"),
        "Appends a string to the value of a key; answers the new length.",
    ),
    _spec("strlen", 2, _R, _ONE, ("readonly", "fast"), "Returns the length of a string value."),
    _spec("mget", -2, _R, _ALL, ("readonly", "fast"), "Returns the values of several keys."),
    _spec("mset", -3, _W, _PAIRS, ("write", "denyoom"), "Sets several keys at once."),
    _spec(
        "msetnx",
        -3,
        _W,
        _PAIRS,
        ("write", "denyoom"),
        "Sets several keys only if none of them exists.",
    ),
    _spec(
        "getset",
        3,
        _W,
        _ONE,
        ("write", "denyoom", "fast"),
        "Sets a key and returns its previous value.",
    ),
    _spec("getdel", 2, _W, _ONE, ("write", "fast"), "Returns the value of a key and deletes it."),
    _spec(
        "setnx",
        3,
        _W,
        _ONE,
        ("write", "denyoom", "fast"),
        "Sets a key only if it does not exist; answers 1 or 0.",
    ),
    _spec(
        "cas",
        4,
        _W,
        _ONE,
        ("write", "denyoom", "fast"),
        "Sets key to new only if it holds expected; answers 1 or 0 (a missing key never matches).",
    ),
    _spec("dbsize", 1, _R, _NONE, ("readonly", "fast"), "Returns the number of keys."),
    _spec(
        "scan",
        -2,
        _R,
        _NONE,
        ("readonly",),
        "Iterates over the keys in sorted order (cursor = the next key, encoded in digits).",
    ),
    _spec("keys", 2, _R, _NONE, ("readonly",), "Returns the keys matching a pattern, sorted."),
    _spec("flushdb", -1, _W, _NONE, ("write",), "Deletes every key."),
    _spec("flushall", -1, _W, _NONE, ("write",), "Deletes every key (there is one database)."),
)

#: Every command the store knows, by lowercase name.
COMMANDS: dict[str, CommandSpec] = {spec.name: spec for spec in _TABLE}

# Byte-keyed view for parse(): the lowercase and the uppercase spelling, so that the
# common cases need no .lower() call.
_BY_BYTES: dict[bytes, CommandSpec] = {}
for _s in _TABLE:
    _BY_BYTES[_s.name.encode()] = _s
    _BY_BYTES[_s.name.upper().encode()] = _s


def _text(raw: bytes) -> str:
    """Bytes a user sent, made safe for an error line.

    Redis prints argument bytes as C strings (up to the first NUL) and turns CR
    and LF into spaces so the error stays one RESP line; the bytes are then
    decoded as UTF-8 with replacement, since an error text is a ``str``.
    """
    raw = raw.split(b"\0", 1)[0].replace(b"\r", b" ").replace(b"\n", b" ")
    return raw.decode("utf-8", "replace")


def unknown_command(args: list[bytes]) -> Error:
    """Redis 7's exact error for an unknown command.

    ``ERR unknown command 'foo', with args beginning with: 'a' 'b' `` (note the
    trailing space): the name cut at 128 bytes, then quoted arguments while the
    list is shorter than 128 bytes, the last one cut so the list stays within
    128 bytes (``processCommand`` in Redis' ``server.c``).
    """
    listed = b""
    for arg in args[1:]:
        if len(listed) >= 128:
            break
        arg = arg.split(b"\0", 1)[0]
        listed += b"'" + arg[: 128 - len(listed)] + b"' "
    name = args[0].split(b"\0", 1)[0][:128] if args else b""
    return Error(f"ERR unknown command '{_text(name)}', with args beginning with: {_text(listed)}")


def wrong_arity(name: str) -> Error:
    """Redis 7's arity error, which names the command in lowercase."""
    return Error(f"ERR wrong number of arguments for '{name}' command")


def parse(args: list[bytes]) -> tuple[CommandSpec, list[bytes]] | Error:
    """Look up ``args[0]`` (any case) and check the argument count.

    Answers the spec and the arguments unchanged, or the error Redis 7 would
    answer. The even-count rule of MSET/MSETNX is an arity rule in Redis too
    (same error text), so it is checked here rather than in the machine.
    """
    if not args:
        return unknown_command([b""])
    spec = _BY_BYTES.get(args[0])
    if spec is None:
        spec = _BY_BYTES.get(args[0].lower())
        if spec is None:
            return unknown_command(args)
    n = len(args)
    arity = spec.arity
    if (n != arity) if arity > 0 else (n < -arity):
        return wrong_arity(spec.name)
    if spec.key_step == 2 and n % 2 == 0:
        return wrong_arity(spec.name)
    return spec, args


def keys_of(spec: CommandSpec, args: list[bytes]) -> list[bytes]:
    """The keys a command names, by its key positions (MSET: every other argument)."""
    if spec.first_key == 0:
        return []
    last = spec.last_key if spec.last_key >= 0 else len(args) + spec.last_key
    return args[spec.first_key : last + 1 : spec.key_step]


def write_key(args: list[bytes]) -> bytes | None:
    """The one key a single-key write names, else ``None``.

    The node hands the sequencer one key per command for its history table;
    ``None`` means "it may touch any key" and is the safe answer for multi-key
    writes (DEL of several keys, MSET, FLUSHDB), for reads, and for commands
    that do not parse (they change nothing, but ``None`` is never wrong).
    """
    parsed = parse(args)
    if isinstance(parsed, Error):
        return None
    spec, args = parsed
    if spec.kind != "write":
        return None
    keys = keys_of(spec, args)
    return keys[0] if len(keys) == 1 else None
