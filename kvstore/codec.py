"""Bytes for commands and results, as they travel through the replicated log.

A command is a msgpack array of bin strings (``encode_command``); a result is
msgpack too (``encode_value``/``decode_value``), with two extension types so
that a status line and an error never read back as a bulk string:

* ``ExtType(1, text)``: :class:`~kvstore.values.Simple` (UTF-8 text),
* ``ExtType(2, text)``: :class:`~kvstore.values.Error` (UTF-8 text).

Bulk strings are bin, integers are msgpack ints (signed 64-bit only, as in
Redis), nil is nil and arrays nest. Anything else (str, float, bool, map,
another extension) is refused both ways, so that what a replica answers is
exactly one :data:`~kvstore.values.Value`.
"""

from __future__ import annotations

from typing import Any

import msgpack

from kvstore.values import Error, Simple, Value

__all__ = [
    "EXT_ERROR",
    "EXT_SIMPLE",
    "INT_MAX",
    "INT_MIN",
    "codec_default",
    "decode_command",
    "decode_value",
    "encode_command",
    "encode_value",
    "pack_trusted",
]

#: msgpack extension codes of the two text replies.
EXT_SIMPLE = 1
EXT_ERROR = 2

#: The integer range of a result (and of Redis' integers): signed 64-bit.
INT_MAX = (1 << 63) - 1
INT_MIN = -(1 << 63)


def encode_command(args: list[bytes]) -> bytes:
    """A command's payload: ``msgpack.packb(args, use_bin_type=True)``."""
    for arg in args:
        if type(arg) is not bytes:
            raise TypeError(f"a command argument must be bytes, not {type(arg).__name__}")
    packed: bytes = msgpack.packb(args, use_bin_type=True)
    return packed


def decode_command(payload: bytes) -> list[bytes] | None:
    """The argument list of a payload, or ``None`` if it is not a non-empty
    msgpack array of bin strings. Never raises: replicas call it on any bytes."""
    try:
        args = msgpack.unpackb(payload, raw=False)
    except Exception:
        return None
    if type(args) is not list or not args:
        return None
    for arg in args:
        if type(arg) is not bytes:
            return None
    return args


def codec_default(obj: object) -> msgpack.ExtType:
    """msgpack's hook for what it cannot pack itself (with ``strict_types``,
    the two NamedTuples come here instead of being packed as arrays)."""
    if type(obj) is Simple:
        return msgpack.ExtType(EXT_SIMPLE, obj.text.encode())
    if type(obj) is Error:
        return msgpack.ExtType(EXT_ERROR, obj.text.encode())
    raise TypeError(f"not a result value: {type(obj).__name__}")


def pack_trusted(value: Value) -> bytes:
    """Encode a value the state machine built itself (skips validation: hot path)."""
    packed: bytes = msgpack.packb(
        value, use_bin_type=True, strict_types=True, default=codec_default
    )
    return packed


def _check(value: object) -> None:
    """Raise TypeError/ValueError unless ``value`` is a :data:`Value`."""
    kind = type(value)
    if kind is bytes or value is None or kind is Simple or kind is Error:
        return
    if kind is int:
        if not INT_MIN <= value <= INT_MAX:  # type: ignore[operator]
            raise ValueError(f"integer {value} is outside signed 64 bits")
        return
    if kind is list:
        for item in value:  # type: ignore[attr-defined]
            _check(item)
        return
    raise TypeError(f"not a result value: {kind.__name__}")


def encode_value(value: Value) -> bytes:
    """A result's bytes; raises TypeError/ValueError for anything that is not a Value."""
    _check(value)
    return pack_trusted(value)


def _ext_hook(code: int, data: bytes) -> Simple | Error:
    if code == EXT_SIMPLE:
        return Simple(data.decode())
    if code == EXT_ERROR:
        return Error(data.decode())
    raise ValueError(f"unknown msgpack extension type {code}")


def _checked(value: Any) -> Value:
    _check(value)
    result: Value = value
    return result


def decode_value(data: bytes) -> Value:
    """The value ``encode_value`` made; raises ValueError on anything else."""
    try:
        value = msgpack.unpackb(data, raw=False, ext_hook=_ext_hook, strict_map_key=True)
        return _checked(value)
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"not an encoded result value: {exc}") from exc
