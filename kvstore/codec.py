"""Bytes for commands and results, as they travel through the replicated log.

A command is a msgpack array of bin strings (``encode_command``); a result is
msgpack too (``encode_value``/``decode_value``), where a status line and an
error never read back as a bulk string (bin):

* a msgpack **str** is a :class:`~kvstore.values.Simple` (``OK``): the
  commonest answer of all, so it decodes without an extension hook (a hook
  call costs more than the rest of decoding a batch's answer);
* ``ExtType(2, text)``: :class:`~kvstore.values.Error` (UTF-8 text).

A *batch* (``encode_batch``) is many commands replicated as one log command:
``ExtType(3, array of items)``. The node groups the writes that arrive in
one event-loop turn into one batch, so the protocol's per-command work (a
session, a log record, a slot in a C-instance) is paid once per batch; the
store applies its commands in order and answers the array of their results,
one per command. No Redis command can encode to it (a command is an array,
never an extension). An item is either

* a command (an array of bin), or
* a **run of plain SETs**: the integer ``n >= 1`` followed by ``2n`` bin
  items, ``key1, value1, key2, value2, ...``, meaning ``SET key1 value1``,
  ``SET key2 value2``, ... (no options). Every replica unpacks every command
  it applies, and SET is the commonest: as a run it unpacks two objects a SET
  instead of four, and is applied by one ``dict.update`` (see
  :meth:`kvstore.machine.KVStore.apply`). A batch whose run is malformed (a
  count past the end, or an argument that is not bin) is refused whole.

Bulk strings are bin, integers are msgpack ints (signed 64-bit only, as in
Redis), nil is nil and arrays nest. Anything else (float, bool, map, another
extension) is refused both ways, so that what a replica answers is
exactly one :data:`~kvstore.values.Value`.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgpack

from kvstore.values import OK, Error, Simple, Value

__all__ = [
    "EXT_BATCH",
    "EXT_ERROR",
    "EXT_SIMPLE",
    "INT_MAX",
    "INT_MIN",
    "OK_ITEM",
    "PLAIN_SET",
    "BatchItem",
    "array_header",
    "codec_default",
    "decode_command",
    "decode_results",
    "decode_value",
    "encode_batch",
    "encode_batch_args",
    "encode_batch_items",
    "encode_command",
    "encode_value",
    "encoded_oks",
    "is_plain_set",
    "pack_trusted",
    "set_runs",
]

#: msgpack extension codes of an error reply and of a batch of commands (1, once
#: the status reply's, is refused).
EXT_SIMPLE = 1
EXT_ERROR = 2
EXT_BATCH = 3

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


def array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` items (its items' encodings follow)."""
    if n < 16:
        return bytes([0x90 | n])
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


#: The encoding of an ``OK`` result (a msgpack str: see the module docstring).
OK_ITEM = b"\xa2OK"


def encoded_oks(n: int) -> bytes:
    """The bytes of an array of ``n`` OK results: what a batch of ``n`` plain
    SETs answers, so that the node can recognise that answer by comparing
    bytes instead of decoding it."""
    return array_header(n) + OK_ITEM * n


def encode_batch(payloads: list[bytes]) -> bytes:
    """Commands already encoded by :func:`encode_command`, as one payload (see above)."""
    packed: bytes = msgpack.packb(
        msgpack.ExtType(EXT_BATCH, array_header(len(payloads)) + b"".join(payloads)),
        use_bin_type=True,
    )
    return packed


def encode_batch_args(commands: list[list[bytes]]) -> bytes:
    """The same bytes as ``encode_batch([encode_command(c) for c in commands])``
    with one ``packb`` for the whole batch (a msgpack array is its header and
    its items' encodings, back to back). The caller vouches that every
    argument is bytes (the Redis front end checks each one as it parses)."""
    inner = msgpack.packb(commands, use_bin_type=True)
    packed: bytes = msgpack.packb(msgpack.ExtType(EXT_BATCH, inner), use_bin_type=True)
    return packed


#: One item of a batch: a command's argument list, or in a SET run its count,
#: then each key and value.
BatchItem: TypeAlias = list[bytes] | int | bytes


#: SET as clients spell it: ``SET key value`` in one of these spellings, and no
#: option, is a *plain* SET (any other case goes through the general dispatch).
PLAIN_SET = frozenset({b"SET", b"set", b"Set"})


def is_plain_set(args: list[bytes]) -> bool:
    """Whether ``args`` is ``SET key value`` without options (see :data:`PLAIN_SET`)."""
    return len(args) == 3 and args[0] in PLAIN_SET


def set_runs(commands: list[list[bytes]]) -> list[BatchItem]:
    """A batch's items (see the module docstring): ``commands`` in order, each
    stretch of consecutive plain SETs written as one run."""
    items: list[BatchItem] = []
    at = -1  # index of the open run's count
    for args in commands:
        if is_plain_set(args):
            if at < 0:
                at = len(items)
                items.append(0)
            items[at] += 1  # type: ignore[operator]
            items.append(args[1])
            items.append(args[2])
        else:
            at = -1
            items.append(args)
    return items


def encode_batch_items(items: list[BatchItem]) -> bytes:
    """A batch of items already in the batch layout (commands and SET runs: see
    the module docstring), with one ``packb``; ``encode_batch_args(commands)``
    is ``encode_batch_items(commands)`` when no SET is written as a run. The
    caller vouches that the layout is right and every argument is bytes (the
    node's batcher builds it; :func:`set_runs` does too)."""
    inner = msgpack.packb(items, use_bin_type=True)
    packed: bytes = msgpack.packb(msgpack.ExtType(EXT_BATCH, inner), use_bin_type=True)
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


def codec_default(obj: object) -> msgpack.ExtType | str:
    """msgpack's hook for what it cannot pack itself (with ``strict_types``,
    the two NamedTuples come here instead of being packed as arrays)."""
    if type(obj) is Simple:
        return obj.text
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


def _ext_hook(code: int, data: bytes) -> Error:
    if code == EXT_ERROR:
        return Error(data.decode())
    raise ValueError(f"unknown msgpack extension type {code}")


#: Status replies decode to these very objects (``decoded is OK`` holds).
_SIMPLES: dict[str, Simple] = {"OK": OK}


def _simple(text: str) -> Simple:
    found = _SIMPLES.get(text)
    return found if found is not None else Simple(text)


def _checked(value: Any) -> Value:
    """``value`` as unpacked, with str turned into Simple, checked to be a Value."""
    kind = type(value)
    if kind is str:
        return _simple(value)
    if kind is list:
        return [_checked(item) for item in value]
    _check(value)
    result: Value = value
    return result


def decode_results(data: bytes) -> list[Value]:
    """The array of results a batch answers (:func:`encode_batch`), trusted: it
    comes from this node's own state machine, so it is not checked item by
    item (the hot path of every batched write). Raises ValueError if it is not
    an array."""
    try:
        values = msgpack.unpackb(data, raw=False, ext_hook=_ext_hook)
    except Exception as exc:
        raise ValueError(f"not an encoded array of results: {exc}") from exc
    if type(values) is not list:
        raise ValueError("not an encoded array of results")
    simples = _SIMPLES
    for i, v in enumerate(values):
        kind = type(v)
        if kind is str:
            found = simples.get(v)
            values[i] = found if found is not None else Simple(v)
        elif kind is list:
            values[i] = _checked(v)
    return values


def decode_value(data: bytes) -> Value:
    """The value ``encode_value`` made; raises ValueError on anything else."""
    try:
        value = msgpack.unpackb(data, raw=False, ext_hook=_ext_hook, strict_map_key=True)
        return _checked(value)
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"not an encoded result value: {exc}") from exc
