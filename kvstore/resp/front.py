"""The connection commands the front end answers itself: PING, ECHO, HELLO,
AUTH, CLIENT, SELECT, QUIT, RESET, READONLY/READWRITE, INFO, COMMAND and
CONFIG GET, each a :class:`~kvstore.commands.CommandSpec` (kind
``connection``) with its handler, in one table.

READONLY makes the connection's reads answer from the local replica without
the linearizability round (``ConnState.stale_reads``); READWRITE goes back to
linearizable reads. The backend reads the flag; the front end only keeps it.

A handler sees its connection through :class:`Client` (the connection's
state, the backend, and a few of the server's fields), so that this module
knows nothing of sockets or of the connection's reading and writing.
"""

from __future__ import annotations

import fnmatch
import hmac
import logging
from collections.abc import Callable, Mapping, Sized
from typing import Any, NamedTuple, Protocol

from kvstore.commands import CommandSpec
from kvstore.resp.backend import Backend, ConnState
from kvstore.resp.limits import BULK_BYTES_MAX
from kvstore.resp.writer import Map, Reply
from kvstore.values import OK, Error, Simple

__all__ = ["CONFIG_VALUES", "FRONT", "FRONT_SPECS", "NO_AUTH", "REDIS_VERSION", "Client", "Quit"]

log = logging.getLogger(__name__)

#: The version this front end claims in HELLO and INFO: the Redis 7 command
#: set it answers for (clients such as redis-cli pick features by it).
REDIS_VERSION = "7.2.0"

#: What CONFIG GET answers (redis-benchmark asks for ``save`` and ``appendonly``).
CONFIG_VALUES: dict[str, str] = {
    "save": "",
    "appendonly": "no",
    "databases": "1",
    "maxmemory": "0",
    "proto-max-bulk-len": str(BULK_BYTES_MAX),
}


class ServerView(Protocol):
    """What a connection command reads of the server."""

    @property
    def users(self) -> Mapping[str, str] | None: ...

    @property
    def port(self) -> int | None: ...

    @property
    def connections(self) -> Sized: ...

    @property
    def stats(self) -> Mapping[str, int]: ...


class Client(Protocol):
    """What a connection command sees of its connection."""

    @property
    def state(self) -> ConnState: ...

    @property
    def backend(self) -> Backend: ...

    @property
    def server(self) -> ServerView: ...


class Quit(NamedTuple):
    """The QUIT marker: reply OK, then close once earlier replies are written."""


Handler = Callable[[Client, list[bytes]], Reply]


def _arity_error(args: list[bytes]) -> Error:
    return Error(
        f"ERR wrong number of arguments for '{args[0].decode(errors='replace').lower()}' command"
    )


def _text(b: bytes) -> str:
    return b.decode(errors="replace")


def _ping(c: Client, args: list[bytes]) -> Reply:
    if len(args) == 1:
        return Simple("PONG")
    if len(args) == 2:
        return args[1]
    return _arity_error(args)


def _echo(c: Client, args: list[bytes]) -> Reply:
    return args[1] if len(args) == 2 else _arity_error(args)


def _check_password(c: Client, user: str, password: bytes) -> bool:
    users = c.server.users
    if users is None:
        return False
    expected = users.get(user)
    if expected is None:
        hmac.compare_digest(password, password)  # the same work for unknown users
        return False
    return hmac.compare_digest(expected.encode(), password)


_WRONGPASS = Error("WRONGPASS invalid username-password pair or user is disabled.")


def _auth(c: Client, args: list[bytes]) -> Reply:
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


def _hello(c: Client, args: list[bytes]) -> Reply:
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
    return Map(
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


def _client(c: Client, args: list[bytes]) -> Reply:
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
        return _client_line(state) + b"\n"
    return Error(
        f"ERR unknown subcommand or wrong number of arguments for '{_text(args[1])}'. "
        "Try CLIENT HELP."
    )


def _client_line(s: ConnState) -> bytes:
    return (
        f"id={s.id} addr={s.addr} laddr={s.laddr} name={_text(s.name or b'')} db={s.db} "
        f"resp={s.protocol} user={s.user or ''} readonly={int(s.stale_reads)} "
        f"lib-name={_text(s.lib_name)} lib-ver={_text(s.lib_ver)}"
    ).encode()


def _select(c: Client, args: list[bytes]) -> Reply:
    if len(args) != 2:
        return _arity_error(args)
    try:
        db = int(args[1])
    except ValueError:
        return Error("ERR value is not an integer or out of range")
    if db != 0:
        return Error("ERR DB index is out of range")
    return OK


def _quit(c: Client, args: list[bytes]) -> Reply:
    return Quit()


def _reset(c: Client, args: list[bytes]) -> Reply:
    state = c.state
    state.name = None
    state.protocol = 2
    state.stale_reads = False
    state.db = 0
    state.user = "default" if c.server.users is None else None
    return Simple("RESET")


def _readonly(c: Client, args: list[bytes]) -> Reply:
    c.state.stale_reads = True
    return OK


def _readwrite(c: Client, args: list[bytes]) -> Reply:
    c.state.stale_reads = False
    return OK


def _info(c: Client, args: list[bytes]) -> Reply:
    server = c.server
    sections: dict[str, dict[str, str | int]] = {
        "server": {
            "redis_version": REDIS_VERSION,
            "redis_mode": "standalone",
            "server_name": "sdpaxos-kvstore",
            "tcp_port": server.port or 0,
        },
        "clients": {"connected_clients": len(server.connections)},
        "stats": {
            "total_connections_received": server.stats["connections_received"],
            "total_commands_processed": server.stats["commands"],
            "protocol_errors": server.stats["protocol_errors"],
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


def _specs(c: Client) -> dict[str, CommandSpec]:
    table = {s.name: s for s in FRONT_SPECS}
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
        s.key_step,
        [],
        [],
        [],
        [],
    ]


def _spec_docs(s: CommandSpec) -> Map:
    return Map(
        [
            ("summary", s.summary),
            ("since", "1.0.0"),
            ("group", s.group),
            ("complexity", "O(1)"),
            ("arguments", []),
        ]
    )


def _command(c: Client, args: list[bytes]) -> Reply:
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
        return Map([(n, _spec_docs(table[n])) for n in names if n in table])
    if sub == b"LIST":
        return [n.encode() for n in table]
    return Error(
        f"ERR unknown subcommand or wrong number of arguments for '{_text(args[1])}'. "
        "Try COMMAND HELP."
    )


def _config(c: Client, args: list[bytes]) -> Reply:
    if len(args) < 2:
        return _arity_error(args)
    if args[1].upper() != b"GET" or len(args) < 3:
        return Error(f"ERR CONFIG {_text(args[1]).upper()} is not supported by this server")
    pairs: list[tuple[Any, Any]] = []
    for pattern in args[2:]:
        p = _text(pattern).lower()
        pairs.extend((k, v) for k, v in CONFIG_VALUES.items() if fnmatch.fnmatchcase(k, p))
    return Map(pairs)


def _spec(
    name: str, arity: int, flags: tuple[str, ...], summary: str, group: str = "connection"
) -> CommandSpec:
    return CommandSpec(name, arity, "connection", 0, 0, 0, flags, summary, group)


_CONN = ("fast", "no-auth")

#: Every connection command: its spec and its handler.
_TABLE: tuple[tuple[CommandSpec, Handler], ...] = (
    (_spec("ping", -1, ("fast",), "Returns the server's liveliness response."), _ping),
    (_spec("echo", 2, ("fast",), "Returns the given string."), _echo),
    (_spec("hello", -1, _CONN, "Handshakes with the server."), _hello),
    (_spec("auth", -2, _CONN, "Authenticates the connection."), _auth),
    (_spec("client", -2, (), "A container for client connection commands."), _client),
    (_spec("select", 2, ("fast",), "Changes the selected database (only 0)."), _select),
    (_spec("quit", -1, _CONN, "Closes the connection."), _quit),
    (_spec("reset", 1, _CONN, "Resets the connection."), _reset),
    (
        _spec(
            "readonly",
            1,
            ("fast",),
            "Reads answer from the local replica, without the linearizability round.",
        ),
        _readonly,
    ),
    (_spec("readwrite", 1, ("fast",), "Reads are linearizable again."), _readwrite),
    (
        _spec("info", -1, ("loading", "stale"), "Returns information about the server.", "server"),
        _info,
    ),
    (
        _spec(
            "command",
            -1,
            ("loading", "stale"),
            "Returns detailed information about all commands.",
            "server",
        ),
        _command,
    ),
    (_spec("config", -2, (), "CONFIG GET answers a few fixed values.", "server"), _config),
)

#: The connection commands' specs, for COMMAND.
FRONT_SPECS: tuple[CommandSpec, ...] = tuple(spec for spec, _ in _TABLE)
#: The connection commands' handlers, by the command's name in uppercase bytes.
FRONT: dict[bytes, Handler] = {spec.name.upper().encode(): handler for spec, handler in _TABLE}
#: What an unauthenticated connection may run.
NO_AUTH = frozenset({b"AUTH", b"HELLO", b"QUIT", b"RESET"})
