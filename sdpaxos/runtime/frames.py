"""The runtime's own frames: hello, ping/pong, and what clients ask a node.

Every connection carries length-prefixed frames (:mod:`sdpaxos.wire.framing`).
Between replicas, a frame is either a batch of core messages
(:func:`sdpaxos.wire.codec.encode_batch`, first byte the codec's ``VERSION``)
or a runtime frame. A runtime frame starts with :data:`RUNTIME_PREFIX` (a byte
the codec never starts with) followed by a msgpack array ``[tag, ...]``::

    HELLO   [0, "sdpaxos", version, kind, id, protocol?, cluster?]
                                                 first frame of every connection
    PING    [1, sent_ms]                         a round trip, between replicas
    PONG    [2, sent_ms, executed_upto]          ... answered with how far we executed
    DUE     [3, sent_s, due_s, clock]            the delay emulator: what follows is due at due_s
    SUBMIT  [10, request_id, client_id, seq, payload, key | nil, wait]
    READ    [11, request_id, key | nil, request | nil, stale]
    STATUS  [12, request_id]
    ADMIN   [13, request_id, operation, argument]
    SUBMIT_MANY [14, [[request_id, client_id, seq, payload, key | nil, wait], ...]]
    REPLY   [20, request_id, code, value]
    REPLY_MANY  [21, [[request_id, code, value], ...]]

``DUE`` is the delay emulator's mark (:mod:`sdpaxos.runtime.emulator`): a
node sends its frames to a peer at once, preceded by when they are due, and the
peer holds every frame after the mark until then (:class:`Due`).

``SUBMIT_MANY`` and ``REPLY_MANY`` carry many requests (answers) in one frame:
a client with many commands in flight pays one frame, one TLS record and one
system call per loop turn instead of one per command; each item is checked
exactly as its single form is.

Why a separate set from the core's messages: the core is pure and knows
nothing of connections, clients or clocks; these frames are the runtime's
business, and a peer's core batch is still decoded by the strict codec alone.

Every decoder here is strict: a wrong tag, arity, type or size raises
:class:`FrameError` with a reason, and the connection that sent it is closed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple, NoReturn

import msgpack

__all__ = [
    "COMMAND_BYTES_MAX",
    "DUE_AHEAD_S_MAX",
    "KEY_BYTES_MAX",
    "RUNTIME_PREFIX",
    "Admin",
    "Code",
    "Due",
    "FrameError",
    "Hello",
    "Kind",
    "Ping",
    "Pong",
    "Read",
    "Reply",
    "ReplyMany",
    "Status",
    "Submit",
    "SubmitMany",
    "decode_runtime",
    "encode_runtime",
]

#: First byte of every runtime frame (the codec's frames start with its VERSION, 1).
RUNTIME_PREFIX = 0xC1
_PREFIX = bytes([RUNTIME_PREFIX])
MAGIC = "sdpaxos"
#: Version of this frame set; a hello with another is refused.
PROTOCOL_VERSION = 1
#: Largest command payload a client may submit (a bigger one is refused, not cut).
COMMAND_BYTES_MAX = 1 << 20
#: Largest key (or read request) a client may send.
KEY_BYTES_MAX = 1 << 16
#: Largest runtime frame a node accepts from a client (a command and its key, framed).
RUNTIME_FRAME_BYTES_MAX = COMMAND_BYTES_MAX + KEY_BYTES_MAX + 1024
#: Most items in one SUBMIT_MANY or REPLY_MANY frame.
MANY_ITEMS_MAX = 4096
#: Furthest a DUE mark may put its frames past their sending: a day. The longest
#: delay, jitter and loss backoff add up to about half an hour; only a queue
#: behind a bandwidth cap can grow past a day, and the sending node drops what
#: would be due later, as lost on the link. A mark further ahead is garbage.
DUE_AHEAD_S_MAX = 86_400.0
#: Request ids and client ids are unsigned 64-bit.
_U64_MAX = (1 << 64) - 1


class FrameError(ValueError):
    """A frame that is malformed, of an unknown kind, or too large."""


class Kind(IntEnum):
    """Who says hello: another replica, or a client."""

    NODE = 0
    CLIENT = 1


class Code(IntEnum):
    """How a node answers a client request (``Reply.code``)."""

    #: SUBMIT answered: the command is ready (its place in the order is fixed).
    READY = 0
    #: SUBMIT answered: executed at this node; ``value`` is the state machine's result.
    EXECUTED = 1
    #: SUBMIT: the client's session expired; the command was not applied.
    SESSION_EXPIRED = 2
    #: READ answered: ``value`` is the state machine's answer (or nil).
    READ_OK = 3
    #: STATUS or ADMIN answered: ``value`` is a map.
    OK = 4
    #: Refused for now (queue full, no sequencer yet): try again, maybe elsewhere.
    RETRY = 5
    #: Refused for good: ``value`` is a message saying why.
    ERROR = 6
    #: SUBMIT or READ refused: this node is no member of the epoch that runs
    #: (it waits to be added, is a learner, or was removed; membership change).
    #: The command was not applied through it: ask a member (``value`` says why).
    NOT_MEMBER = 7


#: Longest protocol name a hello may carry.
PROTOCOL_NAME_MAX = 32
#: Longest cluster identity a hello may carry (a 64-character name, "/", a digest).
CLUSTER_IDENTITY_MAX = 96


@dataclass(frozen=True, slots=True)
class Hello:
    kind: Kind
    id: int
    #: A node's hello names the replication protocol it runs (a hello without
    #: one, as nodes sent before there was a choice, means ``"sdpaxos"``);
    #: a client's names none.
    protocol: str | None = None
    #: A node's hello says which cluster it belongs to
    #: (:attr:`~sdpaxos.runtime.config.NodeConfig.cluster_identity`); a peer
    #: whose cluster differs is refused. ``None``: a client, or a node of a
    #: version that did not send it.
    cluster: str | None = None


@dataclass(frozen=True, slots=True)
class Ping:
    sent_ms: float


@dataclass(frozen=True, slots=True)
class Pong:
    sent_ms: float
    executed_upto: int


@dataclass(frozen=True, slots=True)
class Due:
    """The delay emulator's mark on a connection between replicas: every frame
    after it (until the next mark) is due at ``due_s``, and the receiving node
    holds it until then.

    Why the receiver holds and not the sender: on a real network the sender's
    process writes at once and only the receiver's wakes when the bytes
    arrive. A sender that held its frames and wrote them when due would add
    its own wake-up and write to every hop, in series with the receiver's.

    ``sent_s`` and ``due_s`` are on the sender's :func:`time.monotonic`;
    ``clock`` names that clock (the kernel's boot id, hashed: processes on one
    machine share it). A receiver on the same clock holds until ``due_s``; one
    on another clock holds for ``due_s - sent_s`` from when the mark arrived.
    """

    sent_s: float
    due_s: float
    clock: int


class Submit(NamedTuple):
    """A command to replicate (a named tuple: one is built per command, cheaply)."""

    request_id: int
    client_id: int
    seq: int
    payload: bytes
    key: bytes | None
    #: 0: answer when ready; 1: when executed (with the result).
    wait: int


@dataclass(frozen=True, slots=True)
class Read:
    request_id: int
    key: bytes | None
    request: bytes | None
    #: Answer from this node's state now, without the linearizable read's wait.
    stale: bool = False


@dataclass(frozen=True, slots=True)
class Status:
    request_id: int


@dataclass(frozen=True, slots=True)
class Admin:
    request_id: int
    operation: str
    argument: Any


@dataclass(frozen=True, slots=True)
class SubmitMany:
    items: tuple[Submit, ...]


class Reply(NamedTuple):
    """An answer (a named tuple: one is built per command, cheaply)."""

    request_id: int
    code: Code
    value: Any


@dataclass(frozen=True, slots=True)
class ReplyMany:
    items: tuple[Reply, ...]


RuntimeFrame = (
    Hello | Ping | Pong | Due | Submit | Read | Status | Admin | SubmitMany | Reply | ReplyMany
)

_HELLO, _PING, _PONG, _DUE = 0, 1, 2, 3
_SUBMIT, _READ, _STATUS, _ADMIN, _SUBMIT_MANY, _REPLY, _REPLY_MANY = 10, 11, 12, 13, 14, 20, 21

_packer = msgpack.Packer(use_bin_type=True)


def encode_runtime(frame: RuntimeFrame) -> bytes:
    """The payload of one runtime frame (to be framed with its length prefix)."""
    match frame:
        case Hello(kind, ident, protocol, cluster):
            body: list[Any] = [_HELLO, MAGIC, PROTOCOL_VERSION, int(kind), ident]
            if protocol is not None or cluster is not None:
                body.append(protocol)
            if cluster is not None:
                body.append(cluster)
        case Ping(sent_ms):
            body = [_PING, float(sent_ms)]
        case Pong(sent_ms, executed_upto):
            body = [_PONG, float(sent_ms), executed_upto]
        case Due(sent_s, due_s, clock):
            body = [_DUE, float(sent_s), float(due_s), clock]
        case Submit(rid, cid, seq, payload, key, wait):
            body = [_SUBMIT, rid, cid, seq, payload, key, wait]
        case Read(rid, key, request, stale):
            body = [_READ, rid, key, request, stale]
        case Status(rid):
            body = [_STATUS, rid]
        case Admin(rid, operation, argument):
            body = [_ADMIN, rid, operation, argument]
        case Reply(rid, code, value):
            body = [_REPLY, rid, int(code), value]
        case SubmitMany(items):
            body = [_SUBMIT_MANY, items]
        case ReplyMany(items):
            body = [_REPLY_MANY, items]  # named tuples pack as arrays; codes as ints
        case _:
            raise FrameError(f"not a runtime frame: {type(frame).__name__}")
    packed: bytes = _packer.pack(body)
    return _PREFIX + packed


def _u64(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= _U64_MAX:
        raise FrameError(f"{what} must be an unsigned 64-bit integer, got {value!r:.40}")
    return value


def _opt_bytes(value: object, what: str, limit: int) -> bytes | None:
    if value is None:
        return None
    if type(value) is not bytes:
        raise FrameError(f"{what} must be bytes or nil, got {type(value).__name__}")
    if len(value) > limit:
        raise FrameError(f"{what} of {len(value)} bytes exceeds {limit}")
    return value


def _number(value: object, what: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
        raise FrameError(f"{what} must be a finite number, got {value!r:.40}")
    return float(value)  # type: ignore[arg-type]


_ARITY = {
    _HELLO: 5,
    _PING: 2,
    _PONG: 3,
    _DUE: 4,
    _SUBMIT: 7,
    _READ: 5,
    _STATUS: 2,
    _ADMIN: 4,
    _SUBMIT_MANY: 2,
    _REPLY: 4,
    _REPLY_MANY: 2,
}


def decode_runtime(data: bytes) -> RuntimeFrame:
    """Decode a runtime frame's payload (starting with :data:`RUNTIME_PREFIX`)."""
    if not data or data[0] != RUNTIME_PREFIX:
        raise FrameError("not a runtime frame (wrong first byte)")
    if len(data) > RUNTIME_FRAME_BYTES_MAX:
        raise FrameError(f"runtime frame of {len(data)} bytes exceeds {RUNTIME_FRAME_BYTES_MAX}")
    try:
        body = msgpack.unpackb(
            data[1:],
            raw=False,
            use_list=False,
            strict_map_key=True,
            max_bin_len=RUNTIME_FRAME_BYTES_MAX,
            max_str_len=KEY_BYTES_MAX,
            max_array_len=MANY_ITEMS_MAX,
            max_map_len=1024,
            max_ext_len=0,
        )
    except Exception as exc:  # msgpack's exception set is not a contract
        raise FrameError(f"malformed msgpack: {exc}") from None
    if type(body) is not tuple or not body:
        raise FrameError("expected an array [tag, ...]")
    tag = body[0]
    arity = _ARITY.get(tag) if type(tag) is int else None
    if arity is None:
        raise FrameError(f"unknown runtime frame tag {tag!r:.40}")
    if len(body) != arity and not (tag == _HELLO and arity < len(body) <= arity + 2):
        raise FrameError(f"frame tag {tag} needs {arity} items, got {len(body)}")
    if tag == _HELLO:
        _, magic, version, kind, ident, *rest = body
        if magic != MAGIC:
            raise FrameError("hello: not an sdpaxos peer")
        if version != PROTOCOL_VERSION:
            raise FrameError(
                f"hello: protocol version {version!r:.20} (expected {PROTOCOL_VERSION})"
            )
        if kind not in (0, 1) or type(kind) is not int:
            raise FrameError(f"hello: unknown kind {kind!r:.20}")
        protocol = rest[0] if rest else None
        if protocol is not None and (
            type(protocol) is not str or not 0 < len(protocol) <= PROTOCOL_NAME_MAX
        ):
            raise FrameError(f"hello: protocol name {protocol!r:.40} is not a short string")
        cluster = rest[1] if len(rest) > 1 else None
        if cluster is not None and (
            type(cluster) is not str or not 0 < len(cluster) <= CLUSTER_IDENTITY_MAX
        ):
            raise FrameError(f"hello: cluster {cluster!r:.40} is not a short string")
        return Hello(Kind(kind), _u64(ident, "hello id"), protocol, cluster)
    if tag == _PING:
        return Ping(_number(body[1], "ping time"))
    if tag == _PONG:
        return Pong(_number(body[1], "pong time"), _u64(body[2], "pong executed"))
    if tag == _DUE:
        sent_s, due_s = _number(body[1], "due: sent"), _number(body[2], "due: due")
        if not 0.0 <= due_s - sent_s <= DUE_AHEAD_S_MAX:
            raise FrameError(
                f"due: {due_s - sent_s:.6g} s after sending is not in [0, {DUE_AHEAD_S_MAX:g}]"
            )
        return Due(sent_s, due_s, _u64(body[3], "due: clock"))
    if tag == _SUBMIT:
        return _submit(body[1:])
    if tag == _SUBMIT_MANY:
        return SubmitMany(tuple([_submit(item) for item in _items(body[1], 6)]))
    if tag == _REPLY_MANY:
        return ReplyMany(tuple(_reply(item) for item in _items(body[1], 3)))
    if tag == _READ:
        _, rid, key, request, stale = body
        if type(stale) is not bool:
            raise FrameError(f"stale must be true or false, got {stale!r:.40}")
        return Read(
            _u64(rid, "request id"),
            _opt_bytes(key, "key", KEY_BYTES_MAX),
            _opt_bytes(request, "read request", KEY_BYTES_MAX),
            stale,
        )
    if tag == _STATUS:
        return Status(_u64(body[1], "request id"))
    if tag == _ADMIN:
        _, rid, operation, argument = body
        if type(operation) is not str:
            raise FrameError("admin operation must be a string")
        return Admin(_u64(rid, "request id"), operation, argument)
    return _reply(body[1:])


def _items(value: object, arity: int) -> tuple[tuple[Any, ...], ...]:
    if type(value) is not tuple or not value:
        raise FrameError("expected a non-empty array of items")
    if len(value) > MANY_ITEMS_MAX:
        raise FrameError(f"{len(value)} items exceed {MANY_ITEMS_MAX}")
    for item in value:
        if type(item) is not tuple or len(item) != arity:
            raise FrameError(f"each item must be an array of {arity}")
    return value


_new = tuple.__new__


def _submit(items: tuple[Any, ...]) -> Submit:
    """A SUBMIT's six items, checked; :func:`_submit_refused` says what is wrong.

    Why the checks are written out here once more: a node decodes every
    command a client sends, and the calls of the general checkers (and of the
    named tuple's Python-level constructor) cost more than the checks. A
    well-formed submit is built from the items as given, without copying them."""
    rid, cid, seq, payload, key, wait = items
    if (
        type(payload) is bytes
        and len(payload) <= COMMAND_BYTES_MAX
        and type(wait) is int
        and (wait == 0 or wait == 1)
        and type(rid) is int
        and 0 <= rid <= _U64_MAX
        and type(cid) is int
        and 0 <= cid <= _U64_MAX
        and type(seq) is int
        and 0 <= seq <= _U64_MAX
        and (key is None or (type(key) is bytes and len(key) <= KEY_BYTES_MAX))
    ):
        submit: Submit = _new(Submit, items)
        return submit
    return _submit_refused(items)


def _submit_refused(items: tuple[Any, ...]) -> NoReturn:
    """Why :func:`_submit` refused a SUBMIT's items: raises :class:`FrameError`
    with the first reason the general checkers find. It never accepts: if they
    found nothing, the two sets of checks disagree, and the frame is refused
    rather than let through by the looser one."""
    rid, cid, seq, payload, key, wait = items
    if type(payload) is not bytes:
        raise FrameError(f"submit payload must be bytes, got {type(payload).__name__}")
    if len(payload) > COMMAND_BYTES_MAX:
        raise FrameError(f"submit payload of {len(payload)} bytes exceeds {COMMAND_BYTES_MAX}")
    if wait not in (0, 1) or type(wait) is not int:
        raise FrameError(f"submit wait must be 0 or 1, got {wait!r:.20}")
    _u64(rid, "request id")
    _u64(cid, "client id")
    _u64(seq, "seq")
    _opt_bytes(key, "key", KEY_BYTES_MAX)
    raise FrameError("malformed submit")


def _reply(items: tuple[Any, ...]) -> Reply:
    rid, code, value = items
    if type(code) is not int or code not in Code._value2member_map_:
        raise FrameError(f"unknown reply code {code!r:.20}")
    return Reply(_u64(rid, "request id"), Code(code), value)
