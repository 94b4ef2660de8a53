"""The fuzzer's frames: seeds made with the real encoders, and their mutations.

Seeds are valid frames built by the encoders the node decodes with
(:func:`~sdpaxos.wire.codec.encode_batch` of :mod:`sdpaxos.core.messages`,
:func:`~sdpaxos.runtime.frames.encode_runtime`), their fields often absurd;
:func:`mutate` then breaks one by any of :data:`MUTATIONS` (bit flips,
truncation, bytes inserted or deleted, a wrong or oversized length prefix, a
field of the wrong msgpack type, an unknown tag, a wrong arity). Every draw
comes from the ``random.Random`` given, so a seed makes the same bytes every run.
"""

from __future__ import annotations

import dataclasses
import math
import random
import types
import typing
from typing import Any

import msgpack

from sdpaxos.core.messages import MESSAGE_TYPES
from sdpaxos.core.types import Command
from sdpaxos.runtime import frames as rf
from sdpaxos.wire.codec import FRAME_BYTES_MAX, VERSION, CodecError, encode_batch
from sdpaxos.wire.framing import frame

__all__ = [
    "MUTATIONS",
    "WRONG_TYPES",
    "core_batch_wrong_src",
    "core_message",
    "mutate",
    "runtime_seed",
]

#: Ints that break code which assumes small non-negative numbers.
_ABSURD_INTS = (
    -1,
    -2,
    -(1 << 31),
    -(1 << 63),
    (1 << 31) - 1,
    1 << 32,
    1 << 40,
    (1 << 63) - 1,
    (1 << 64) - 1,
)
#: Values of every msgpack type, to put where another type belongs.
WRONG_TYPES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    (1 << 64) - 1,
    -(1 << 63),
    1.5,
    -0.0,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "sdpaxos",
    "\u00e9\u2603",
    b"",
    b"\xff" * 3,
    [],
    [1, 2],
    [[1, 2, 3]],
    {},
    {"a": 1},
    {1: b"x"},
    msgpack.ExtType(1, b"x"),
)
_PACKER = msgpack.Packer(use_bin_type=True)


# ------------------------------------------------------------------ seeds


def _int(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.45:
        return rng.randrange(0, 8)
    if r < 0.85:
        return rng.choice(_ABSURD_INTS)
    return rng.randrange(-(1 << 63), 1 << 64)


def _value(annotation: Any, rng: random.Random) -> Any:
    """A random value of a message field's type (absurd numbers included)."""
    supertype = getattr(annotation, "__supertype__", None)
    if supertype is not None:
        return _value(supertype, rng)
    if annotation is int:
        return _int(rng)
    if annotation is bool:
        return rng.random() < 0.5
    if annotation is bytes:
        return rng.randbytes(rng.randrange(0, 12))
    if annotation is Command:
        key = rng.randbytes(rng.randrange(0, 4)) if rng.random() < 0.5 else None
        return Command(_int(rng), _int(rng), rng.randbytes(rng.randrange(0, 16)), key)
    if isinstance(annotation, type) and issubclass(annotation, tuple):  # a NamedTuple
        hints = typing.get_type_hints(annotation)
        return annotation(*(_value(h, rng) for h in hints.values()))
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        choice = rng.choice(args)
        return None if choice is type(None) else _value(choice, rng)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], rng) for _ in range(rng.randrange(0, 4)))
        return tuple(_value(a, rng) for a in args)
    raise TypeError(f"no generator for {annotation!r}")


def core_message(cls: type, src: int, rng: random.Random) -> Any:
    """A message of class ``cls`` from ``src`` with random (often absurd) fields."""
    hints = typing.get_type_hints(cls)
    values = {f.name: _value(hints[f.name], rng) for f in dataclasses.fields(cls)}
    values["src"] = src
    return cls(**values)


def _wrong_src(rng: random.Random, peer: int, replicas: int) -> int:
    others = [k for k in range(replicas) if k != peer]
    return rng.choice([*others, replicas, replicas + 7, -1, (1 << 63) - 1, (1 << 64) - 1])


def core_batch_wrong_src(rng: random.Random, peer: int, replicas: int) -> bytes:
    """A core batch (real encoder) in which at least one message's ``src`` is not ``peer``."""
    while True:
        count = rng.randrange(1, 4)
        bad = rng.randrange(count)
        msgs = [
            core_message(
                rng.choice(MESSAGE_TYPES),
                _wrong_src(rng, peer, replicas) if k == bad or rng.random() < 0.3 else peer,
                rng,
            )
            for k in range(count)
        ]
        try:
            return encode_batch(msgs)
        except CodecError:
            continue  # a value out of msgpack's range: draw again


def runtime_seed(rng: random.Random, kind: rf.Kind) -> bytes:
    """A valid runtime frame's payload of any tag (some illegal on this connection)."""
    rid = _int(rng) % (1 << 64)
    choices: list[rf.RuntimeFrame] = [
        rf.Status(rid),
        rf.Read(rid, rng.randbytes(4) if rng.random() < 0.5 else None, None),
        rf.Submit(rid, rng.choice([0, 1, 7]), rng.randrange(3), rng.randbytes(8), None, 1),
        rf.Admin(rid, rng.choice(["snapshot", "nope", ""]), rng.choice([None, 1, "0|1"])),
        rf.Ping(rng.random() * 1e6),
        rf.Pong(rng.random() * 1e6, rng.randrange(100)),
        rf.Due(1.0, 1.0 + rng.random(), rng.randrange(1 << 64)),
        rf.Hello(rng.choice([rf.Kind.NODE, rf.Kind.CLIENT]), rng.randrange(4)),
        rf.Reply(rid, rf.Code.OK, {"a": 1}),
    ]
    return rf.encode_runtime(rng.choice(choices))


# -------------------------------------------------------------- mutations


def _flip(data: bytes, rng: random.Random, start: int) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randrange(1, 9)):
        if len(out) > start:
            out[rng.randrange(start, len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _reframe(payload: bytes, rng: random.Random, fix: float = 0.7) -> bytes:
    """``payload`` framed with its true length, or (sometimes) the old wrong one."""
    return frame(payload) if rng.random() < fix else len(payload).to_bytes(4, "big") + payload


def _restructure(payload: bytes, rng: random.Random, how: str) -> bytes | None:
    """Unpack ``payload`` (first byte + msgpack), change it, pack again."""
    try:
        body = msgpack.unpackb(payload[1:], raw=False, strict_map_key=False, use_list=True)
    except Exception:
        return None
    if not isinstance(body, list) or not body:
        return None
    target = body
    if payload[0] == VERSION:  # a batch: pick one message
        target = rng.choice(body)
        if not isinstance(target, list) or not target:
            return None
    if how == "tag":
        target[0] = rng.choice(
            [len(MESSAGE_TYPES), 3, 9, 14, 21, 99, 255, -1, (1 << 64) - 1, "0", None, 1.0]
        )
    elif how == "type":
        target[rng.randrange(len(target))] = rng.choice(WRONG_TYPES)
    elif how == "value":
        target[rng.randrange(1, len(target)) if len(target) > 1 else 0] = rng.choice(_ABSURD_INTS)
    elif rng.random() < 0.5:  # arity
        del target[rng.randrange(len(target))]
    else:
        target.insert(rng.randrange(len(target) + 1), rng.choice(WRONG_TYPES))
    try:
        packed: bytes = _PACKER.pack(body)
    except Exception:
        return None
    return payload[:1] + packed


MUTATIONS = (
    "bitflip",
    "bitflip-prefix",
    "truncate",
    "insert",
    "delete",
    "length",
    "oversized",
    "random",
    "raw",
    "empty",
    "msgpack-type",
    "unknown-tag",
    "absurd-value",
    "arity",
    "big",
)


def mutate(payload: bytes, rng: random.Random, how: str) -> bytes:
    """``payload`` (a valid frame's) mutated by ``how``; the result is framed bytes."""
    framed = frame(payload)
    if how == "bitflip":
        return framed[:4] + _flip(payload, rng, 0)
    if how == "bitflip-prefix":
        return _flip(framed, rng, 0)[:4] + payload
    if how == "truncate":
        return framed[: rng.randrange(1, len(framed))]
    if how == "insert":
        at = rng.randrange(len(payload) + 1)
        return _reframe(payload[:at] + rng.randbytes(rng.randrange(1, 17)) + payload[at:], rng)
    if how == "delete":
        at = rng.randrange(len(payload))
        cut = payload[:at] + payload[at + rng.randrange(1, 9) :]
        return _reframe(cut, rng) if rng.random() < 0.7 else framed[:4] + cut
    if how == "length":
        size = max(0, len(payload) + rng.choice([-3, -2, -1, 1, 2, 5, 100, 70000]))
        return size.to_bytes(4, "big") + payload
    if how == "oversized":
        size = rng.randrange(FRAME_BYTES_MAX + 1, 1 << 32)
        return size.to_bytes(4, "big") + payload
    if how == "random":
        first = rng.choice([VERSION, rf.RUNTIME_PREFIX, rng.randrange(256)])
        return frame(bytes([first]) + rng.randbytes(rng.randrange(0, 200)))
    if how == "raw":
        return rng.randbytes(rng.randrange(1, 64))
    if how == "empty":
        return frame(b"")
    if how == "big":  # over the runtime's limit, under the framer's
        size = rf.RUNTIME_FRAME_BYTES_MAX + rng.randrange(1, 1 << 16)
        return frame(payload[:1] + bytes(size - 1))
    restructured = _restructure(
        payload,
        rng,
        {"msgpack-type": "type", "unknown-tag": "tag", "absurd-value": "value"}.get(how, how),
    )
    if restructured is None:
        return _flip(framed, rng, 4)
    return frame(restructured)
