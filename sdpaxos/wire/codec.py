"""Bytes <-> protocol messages, with msgpack.

Format of one encoded message::

    VERSION (1 byte) | msgpack array [tag, field_1, field_2, ...]

and of a batch (several messages merged into one frame for one peer)::

    VERSION (1 byte) | msgpack array [[tag, ...], [tag, ...], ...]

``tag`` is the class's index in :data:`sdpaxos.core.messages.MESSAGE_TYPES`
(append-only, so tags never move). Fields are positional in dataclass order:
no field names on the wire, because these messages are small and frequent.
A :class:`~sdpaxos.core.types.Command` is ``[client_id, seq, payload]`` with
``payload`` as msgpack ``bin``.

Why table-driven: others append message classes to ``MESSAGE_TYPES``. Each
class's field list comes from :func:`dataclasses.fields` and
:func:`typing.get_type_hints`, and each field annotation is looked up in
:data:`_FIELD_CODECS`. A new class therefore needs nothing here; a field of a
new *type* needs one entry in that table (import fails loudly until it has one).

Why generated code: encode and decode sit on the hot path of the simulator and
the network runtime. At import we compile one small encoder and one decoder per
class (as :mod:`dataclasses` itself does for ``__init__``): integer fields are
checked inline with ``type(x) is int`` (which also rejects ``bool``) instead of a
generic per-field loop of calls.

Why strict: decoding is a trust boundary. Every malformed input (bad version,
unknown tag, wrong arity, wrong field type, trailing or missing bytes, over a
size limit) raises :class:`CodecError` and nothing else, and no half-built
message ever escapes. Encoding is checked too (ints must be real ints within
msgpack's 64-bit range, the result must fit a frame) so that whatever
:func:`encode` accepts, :func:`decode` gives back equal. Range checks on values
(negative slot, unknown replica) are the core's job, not the codec's.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import operator
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import msgpack

from sdpaxos.core.messages import MESSAGE_TYPES, Message
from sdpaxos.core.types import Command, OCommitEntry, VoteEntry

__all__ = [
    "ARRAY_ITEMS_MAX",
    "FRAME_BYTES_MAX",
    "MESSAGES_PER_BATCH_MAX",
    "PACKED_COMMANDS",
    "PACKED_COMMANDS_BYTES_MAX",
    "PACKED_COMMANDS_MAX",
    "PACKED_COMMANDS_MIN",
    "VERSION",
    "CodecError",
    "MessageCodec",
    "PackedMessages",
    "decode",
    "decode_batch",
    "encode",
    "encode_batch",
]

#: Wire format version, the first byte of every encoded message or batch.
VERSION = 1

#: Largest encoded message or batch (and so largest frame), in bytes.
FRAME_BYTES_MAX = 16 * 1024 * 1024

#: Most messages one batch may carry.
MESSAGES_PER_BATCH_MAX = 4096

#: Most items in any one msgpack array (commands of a C-accept, values of an
#: O-accept, ...). Bounds what one length header can make the decoder allocate.
ARRAY_ITEMS_MAX = 1 << 20

#: Fewest commands in an array worth keeping packed (:data:`PACKED_COMMANDS`):
#: below it, splicing a message from three packed pieces costs more than it saves.
PACKED_COMMANDS_MIN = 16

#: Most command arrays kept packed at once, and most bytes they may hold
#: together (the oldest go first; the tuples they keep alive hold about as
#: much again). A leader packs its instance's commands for the C-accept and, a
#: round trip later, for the C-commit to the peers outside the thrifty quorum;
#: a handful of instances are in flight between the two.
PACKED_COMMANDS_MAX = 64
PACKED_COMMANDS_BYTES_MAX = 8 * 1024 * 1024

_VERSION_PREFIX = bytes([VERSION])
_REPR_CHARS_MAX = 80


class CodecError(ValueError):
    """The bytes are not a valid encoding, or the message cannot be encoded.

    The only exception :func:`decode` and :func:`decode_batch` raise, so a
    transport can drop a bad frame from a peer with a single ``except``.
    """


def _short(value: object) -> str:
    """``type: repr`` cut to a readable length, for error messages about peer data."""
    text = repr(value)
    if len(text) > _REPR_CHARS_MAX:
        text = text[: _REPR_CHARS_MAX - 3] + "..."
    return f"{type(value).__name__} {text}"


# --------------------------------------------------------------------------
# Per-type field codecs, keyed by the field's annotation.
# --------------------------------------------------------------------------


class _FieldCodec(NamedTuple):
    """How values of one field annotation go to and from msgpack.

    ``to_wire`` checks a field value and returns something msgpack packs;
    ``from_wire`` checks an unpacked value (arrays arrive as tuples) and returns
    the field value. Both raise :class:`CodecError` on a mismatch.
    """

    description: str
    to_wire: Callable[[Any], object]
    from_wire: Callable[[object], object]


def _check_int(value: object) -> object:
    if type(value) is not int:
        raise CodecError(f"expected int, got {_short(value)}")
    return value


def _check_items(value: tuple[object, ...]) -> None:
    if len(value) > ARRAY_ITEMS_MAX:
        raise CodecError(f"{len(value)} items exceed ARRAY_ITEMS_MAX ({ARRAY_ITEMS_MAX})")


_new = tuple.__new__
_NO_KEY = (None,)


def _commands_to_wire(value: tuple[Command, ...]) -> object:
    if type(value) is not tuple:
        raise CodecError(f"expected tuple of Command, got {_short(value)}")
    _check_items(value)
    out: list[tuple[int, int, bytes] | Command] = []
    append = out.append
    for command in value:
        if type(command) is not Command:
            raise CodecError(f"expected Command, got {_short(command)}")
        client_id, seq, payload, key = command
        if type(client_id) is not int or type(seq) is not int or type(payload) is not bytes:
            raise CodecError(f"malformed {_short(command)}")
        if key is None:
            append((client_id, seq, payload))
        elif type(key) is bytes:
            append(command)  # a named tuple packs as the array it is: no copy
        else:
            raise CodecError(f"malformed key in {_short(command)}")
    return out


def _commands_from_wire(value: object) -> tuple[Command, ...]:
    if type(value) is not tuple:
        raise CodecError(f"expected array of commands, got {_short(value)}")
    out: list[Command] = []
    append = out.append
    for item in value:
        # Each command is checked as [client_id, seq, payload(bin), key(bin)?];
        # a checked 4-item tuple itself becomes the Command, a 3-item one with
        # its key (None) added (a named tuple's own constructor is a Python
        # function: twice the cost, on every command).
        if type(item) is tuple:
            if len(item) == 4:
                client_id, seq, payload, key = item
                if (
                    type(client_id) is int
                    and type(seq) is int
                    and type(payload) is bytes
                    and type(key) is bytes
                ):
                    append(_new(Command, item))
                    continue
            elif len(item) == 3:
                client_id, seq, payload = item
                if type(client_id) is int and type(seq) is int and type(payload) is bytes:
                    append(_new(Command, item + _NO_KEY))
                    continue
        raise CodecError(f"expected [client_id, seq, payload(bin), key(bin)?], got {_short(item)}")
    return tuple(out)


def _optional_commands_to_wire(value: tuple[Command, ...] | None) -> object:
    return None if value is None else _commands_to_wire(value)


def _optional_commands_from_wire(value: object) -> tuple[Command, ...] | None:
    return None if value is None else _commands_from_wire(value)


class _PackedCommandArrays:
    """Command arrays already checked and packed, by identity, oldest first.

    Why: the same commands tuple goes out in more than one message. A command
    leader's C-accept goes to the thrifty quorum and its C-commit, a round
    trip later and in another send, carries the same tuple to the other peers;
    EPaxos's PreAccept and Commit and Multi-Paxos's Accept and Commit do the
    same. Checking and packing 250 commands costs tens of microseconds each
    time. A tuple of :class:`Command` is immutable all the way down (the check
    admits only exact ``int`` and ``bytes``), so its packed bytes never change;
    each entry keeps its tuple, so the ``id`` cannot be reused while it lives.

    One per process, and threads share it (nodes run on threads of their own
    in :mod:`sdpaxos.runtime.sync`, a log appends on its own), yet the wire
    layer takes no lock (it imports no threading). So every step is one
    operation CPython makes atomic: a dict's ``get``, ``pop`` and item
    assignment, a deque's ``append`` and ``popleft``, ``list()`` of a dict's
    values (the bytes held are counted afresh after each new entry, not kept).
    Racing threads can at worst evict an entry early or pack a tuple twice: a
    frame is always right and the bounds always hold once the threads are
    done. The counters are diagnostics and may miss a count then.
    """

    __slots__ = ("entries", "hits", "misses", "order")

    def __init__(self) -> None:
        self.entries: dict[int, tuple[tuple[Command, ...], bytes]] = {}
        #: The ids in the order their entries were made (an id may appear
        #: twice if its entry was made again; popping the older one then
        #: evicts the newer entry early, which only costs a packing).
        self.order: collections.deque[int] = collections.deque()
        self.hits = 0
        self.misses = 0

    def get(self, value: tuple[Command, ...]) -> bytes:
        """``value`` checked and packed as a msgpack array (raises :class:`CodecError`)."""
        key = id(value)
        entries = self.entries
        entry = entries.get(key)
        if entry is not None and entry[0] is value:
            self.hits += 1
            return entry[1]
        data = _pack(_commands_to_wire(value))  # raises before anything changes
        self.misses += 1
        entries[key] = (value, data)
        order = self.order
        order.append(key)
        held = sum([len(d) for _, d in list(entries.values())])
        while len(order) > PACKED_COMMANDS_MAX or held > PACKED_COMMANDS_BYTES_MAX:
            try:
                oldest = order.popleft()
            except IndexError:  # another thread emptied it
                break
            gone = entries.pop(oldest, None)
            if gone is not None:
                held -= len(gone[1])
        return data

    def clear(self) -> None:
        """Forget every entry (the counters stay)."""
        self.entries.clear()
        self.order.clear()


#: The process's packed command arrays: shared by every codec and replica in
#: it, which is safe because an entry depends only on its (immutable) tuple.
PACKED_COMMANDS = _PackedCommandArrays()


def _int_tuples_codec(arity: int) -> _FieldCodec:
    """Codec for ``tuple[tuple[int, ...arity], ...]``: msgpack packs the tuples as they are."""

    def to_wire(value: object) -> object:
        # Entries may be named tuples (``VoteEntry``, ``OCommitEntry``): msgpack
        # packs them as arrays, and they arrive as plain tuples.
        if type(value) is not tuple:
            raise CodecError(f"expected tuple, got {_short(value)}")
        _check_items(value)
        for item in value:
            if not isinstance(item, tuple) or len(item) != arity:
                raise CodecError(f"expected array of {arity} ints, got {_short(item)}")
            for number in item:
                if type(number) is not int:
                    raise CodecError(f"expected array of {arity} ints, got {_short(item)}")
        return value

    def from_wire(value: object) -> object:
        if type(value) is not tuple:
            raise CodecError(f"expected array, got {_short(value)}")
        for item in value:
            if type(item) is not tuple or len(item) != arity:
                raise CodecError(f"expected array of {arity} ints, got {_short(item)}")
            for number in item:
                if type(number) is not int:
                    raise CodecError(f"expected array of {arity} ints, got {_short(item)}")
        return value

    return _FieldCodec(f"array of {arity}-int arrays", to_wire, from_wire)


def _pairs_from_wire(value: object) -> object:
    """Fast path of ``_int_tuples_codec(2).from_wire``: O-values are on every O-accept."""
    if type(value) is not tuple:
        raise CodecError(f"expected array, got {_short(value)}")
    for item in value:
        if (
            type(item) is not tuple
            or len(item) != 2
            or type(item[0]) is not int
            or type(item[1]) is not int
        ):
            raise CodecError(f"expected array of 2 ints, got {_short(item)}")
    return value


def _pairs_to_wire(value: object) -> object:
    if type(value) is not tuple:
        raise CodecError(f"expected tuple, got {_short(value)}")
    _check_items(value)
    return _pairs_from_wire(value)


def _check_bool(value: object) -> object:
    if type(value) is not bool:
        raise CodecError(f"expected bool, got {_short(value)}")
    return value


#: Marker codec for plain ints; the generated code inlines its check.
_INT = _FieldCodec("int", _check_int, _check_int)
_BOOL = _FieldCodec("bool", _check_bool, _check_bool)


def _check_bytes(value: object) -> object:
    if type(value) is not bytes:
        raise CodecError(f"expected bytes, got {_short(value)}")
    return value


_BYTES = _FieldCodec("bin", _check_bytes, _check_bytes)
_COMMANDS = _FieldCodec("array of commands", _commands_to_wire, _commands_from_wire)
_OPTIONAL_COMMANDS = _FieldCodec(
    "nil or array of commands", _optional_commands_to_wire, _optional_commands_from_wire
)


def _tuple_of(element: _FieldCodec) -> _FieldCodec:
    """Codec for ``tuple[X, ...]`` from the codec of ``X``.

    Generic, so a bit slower than the hand-written codecs above; those cover the
    normal-case messages, this covers the rarer (view change, recovery) ones.
    """
    element_to_wire = element.to_wire
    element_from_wire = element.from_wire
    description = f"array of {element.description}"

    def to_wire(value: object) -> object:
        if type(value) is not tuple:
            raise CodecError(f"expected tuple, got {_short(value)}")
        _check_items(value)
        return [element_to_wire(item) for item in value]

    def from_wire(value: object) -> object:
        if type(value) is not tuple:
            raise CodecError(f"expected {description}, got {_short(value)}")
        return tuple([element_from_wire(item) for item in value])

    return _FieldCodec(description, to_wire, from_wire)


def _flat_tuple_of(element: type, name: str) -> _FieldCodec:
    """Codec for ``tuple[X, ...]`` of a plain type ``X`` (``int``, ``bytes``, ``bool``).

    Same checks as :func:`_tuple_of` (every item's type is exactly ``X``, so a
    ``bool`` is no ``int``), but one ``set(map(type, ...))`` in C instead of a
    Python call per item, and no copy: msgpack already packs a tuple as an
    array and unpacks an array as a tuple. Why: R-request batches and their
    replies carry hundreds of read ids, keys, slots and verdicts, at the
    sequencer, the busiest replica.
    """
    allowed = {element}
    description = f"array of {name}"

    def check(value: object, expected: str) -> object:
        if type(value) is not tuple:
            raise CodecError(f"expected {expected}, got {_short(value)}")
        if value and not set(map(type, value)) <= allowed:
            bad = next(item for item in value if type(item) is not element)
            raise CodecError(f"expected {name}, got {_short(bad)}")
        return value

    def to_wire(value: object) -> object:
        check(value, "tuple")
        _check_items(value)  # type: ignore[arg-type]
        return value

    def from_wire(value: object) -> object:
        return check(value, description)

    return _FieldCodec(description, to_wire, from_wire)


#: One entry per field annotation used by any message class. Keys are the
#: resolved annotations (type aliases such as ``Slot`` or ``OValue`` resolve to
#: ``int`` and ``tuple[int, int]``).
_FIELD_CODECS: dict[object, _FieldCodec] = {
    int: _INT,
    bool: _BOOL,
    bytes: _BYTES,
    tuple[bytes, ...]: _flat_tuple_of(bytes, "bin"),
    tuple[Command, ...]: _COMMANDS,
    tuple[Command, ...] | None: _OPTIONAL_COMMANDS,
    tuple[tuple[int, int], ...]: _FieldCodec(
        "array of 2-int arrays", _pairs_to_wire, _pairs_from_wire
    ),
    tuple[tuple[int, int, int], ...]: _int_tuples_codec(3),
    tuple[tuple[int, int, int, int], ...]: _int_tuples_codec(4),
    tuple[VoteEntry, ...]: _int_tuples_codec(4),
    tuple[OCommitEntry, ...]: _int_tuples_codec(4),
    tuple[int, ...]: _flat_tuple_of(int, "int"),
    tuple[bool, ...]: _flat_tuple_of(bool, "bool"),
    tuple[tuple[Command, ...] | None, ...]: _tuple_of(_OPTIONAL_COMMANDS),
}


# --------------------------------------------------------------------------
# Per-class encoders and decoders, generated at import.
# --------------------------------------------------------------------------


def _plain_annotation(annotation: Any) -> Any:
    """``annotation`` with every ``NewType`` id (``Slot``, ``View``, ...) replaced by
    the type it stands for: on the wire an id is its integer."""
    supertype = getattr(annotation, "__supertype__", None)
    if supertype is not None:
        return _plain_annotation(supertype)
    args = typing.get_args(annotation)
    if not args:
        return annotation
    plain = tuple(a if a is Ellipsis else _plain_annotation(a) for a in args)
    if plain == args:
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        return functools.reduce(operator.or_, plain)
    return origin[plain]


class _ClassCodec(NamedTuple):
    cls: type
    tag: int
    field_names: tuple[str, ...]
    field_codecs: tuple[_FieldCodec, ...]


def _class_codec(tag: int, cls: type) -> _ClassCodec:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"MESSAGE_TYPES[{tag}] = {cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    names: list[str] = []
    codecs: list[_FieldCodec] = []
    for field in dataclasses.fields(cls):
        if not field.init:
            raise TypeError(f"{cls.__name__}.{field.name}: init=False fields cannot be decoded")
        annotation = _plain_annotation(hints[field.name])
        codec = _FIELD_CODECS.get(annotation)
        if codec is None:
            raise TypeError(
                f"{cls.__name__}.{field.name}: no wire codec for {annotation!r}; "
                "add an entry to sdpaxos.wire.codec._FIELD_CODECS"
            )
        names.append(field.name)
        codecs.append(codec)
    if not names:
        raise TypeError(f"{cls.__name__} has no fields; every message carries src and view")
    return _ClassCodec(cls, tag, tuple(names), tuple(codecs))


def _encode_error(spec: _ClassCodec, msg: object) -> CodecError:
    """Slow path: name the field of ``msg`` that cannot be encoded."""
    for name, codec in zip(spec.field_names, spec.field_codecs, strict=True):
        try:
            codec.to_wire(getattr(msg, name))
        except CodecError as exc:
            return CodecError(f"cannot encode {spec.cls.__name__}.{name}: {exc}")
    return CodecError(f"cannot encode {_short(msg)}")


def _decode_error(spec: _ClassCodec, items: tuple[object, ...], cause: object) -> CodecError:
    """Slow path: name the field of the unpacked ``items`` that is malformed."""
    for name, codec, value in zip(spec.field_names, spec.field_codecs, items[1:], strict=True):
        try:
            codec.from_wire(value)
        except CodecError as exc:
            return CodecError(f"{spec.cls.__name__}.{name}: {exc}")
    return CodecError(f"cannot build {spec.cls.__name__}: {cause!r}")


def _field_parts(
    spec: _ClassCodec, namespace: dict[str, object]
) -> tuple[list[str], str, list[str], list[str]]:
    """What the generated code for ``spec``'s class is made of: the names its
    fields are unpacked into, the inline check of its int fields, and each
    field's wire expression and field expression (the other fields' codecs go
    into ``namespace`` as ``to_<i>`` and ``from_<i>``). Shared by
    :func:`_compile` and :func:`_compile_to_bytes`."""
    variables = [f"f{i}" for i in range(len(spec.field_names))]
    ints = [v for v, c in zip(variables, spec.field_codecs, strict=True) if c is _INT]
    int_check = " or ".join(f"type({v}) is not int" for v in ints) or "False"
    wire_values: list[str] = []
    field_values: list[str] = []
    for i, (variable, codec) in enumerate(zip(variables, spec.field_codecs, strict=True)):
        if codec is _INT:
            wire_values.append(variable)
            field_values.append(variable)
        else:
            namespace[f"to_{i}"] = codec.to_wire
            namespace[f"from_{i}"] = codec.from_wire
            wire_values.append(f"to_{i}({variable})")
            field_values.append(f"from_{i}({variable})")
    return variables, int_check, wire_values, field_values


def _compile(spec: _ClassCodec) -> tuple[Callable[[Any], object], Callable[[Any], Message]]:
    """Generate ``to_wire(msg) -> tuple`` and ``from_wire(items) -> msg`` for one class.

    ``from_wire`` expects a tuple whose first item is the tag (already checked).
    """
    arity = len(spec.field_names) + 1
    namespace: dict[str, object] = {
        "cls": spec.cls,
        "spec": spec,
        "int": int,
        "type": type,
        "len": len,
        "Exception": Exception,
        "CodecError": CodecError,
        "_encode_error": _encode_error,
        "_decode_error": _decode_error,
        "_arity_error": _arity_error,
    }
    variables, int_check, wire_values, field_values = _field_parts(spec, namespace)
    getters = ", ".join(f"msg.{name}" for name in spec.field_names)
    unpack_target = ", ".join(variables)
    source = f"""
def to_wire(msg):
    {unpack_target}, = {getters},
    if {int_check}:
        raise _encode_error(spec, msg)
    try:
        return ({spec.tag}, {", ".join(wire_values)})
    except CodecError:
        raise _encode_error(spec, msg) from None

def from_wire(items):
    if len(items) != {arity}:
        raise _arity_error(spec, items)
    _, {unpack_target}, = items
    if {int_check}:
        raise _decode_error(spec, items, None)
    try:
        return cls({", ".join(field_values)})
    except Exception as exc:
        raise _decode_error(spec, items, exc) from exc
"""
    code = compile(source, f"<sdpaxos.wire.codec: {spec.cls.__name__}>", "exec")
    exec(code, namespace)
    return (
        typing.cast(Callable[[Any], object], namespace["to_wire"]),
        typing.cast(Callable[[Any], Message], namespace["from_wire"]),
    )


def _compile_to_bytes(spec: _ClassCodec) -> Callable[[Any], bytes] | None:
    """Generate ``to_bytes(msg) -> bytes`` (the msgpack of ``to_wire(msg)``) for a
    class with a field of commands (the first, if it has several), or ``None``
    for any other class.

    Why: the commands are most of such a message, and the same tuple is often
    sent again (:class:`_PackedCommandArrays`). A msgpack array is its header
    followed by its items, so the message is its header, the fields before the
    commands packed as one array less its header, the commands' cached bytes,
    and the fields after them likewise: byte for byte what packing the whole
    wire tuple gives. Arrays of fewer than :data:`PACKED_COMMANDS_MIN` commands
    (and ``None``) take the one-piece path. Raises what ``to_wire`` and the
    packer raise.
    """
    commands_at = [
        i for i, c in enumerate(spec.field_codecs) if c is _COMMANDS or c is _OPTIONAL_COMMANDS
    ]
    arity = len(spec.field_names) + 1
    if not commands_at or arity >= 16:  # a fixarray's 1-byte header, below
        return None
    k = commands_at[0]
    namespace: dict[str, object] = {
        "spec": spec,
        "type": type,
        "len": len,
        "tuple": tuple,
        "CodecError": CodecError,
        "_encode_error": _encode_error,
        "_pack": _pack,
        "packed_commands": PACKED_COMMANDS.get,
        "HEADER": bytes((0x90 | arity,)),
        "MIN": PACKED_COMMANDS_MIN,
    }
    variables, int_check, wire_values, _ = _field_parts(spec, namespace)
    head = ", ".join([str(spec.tag), *wire_values[:k]])
    tail = "".join(f"{w}, " for w in wire_values[k + 1 :])
    getters = ", ".join(f"msg.{name}" for name in spec.field_names)
    source = f"""
def to_bytes(msg):
    {", ".join(variables)}, = {getters},
    if {int_check}:
        raise _encode_error(spec, msg)
    try:
        if type(f{k}) is tuple and len(f{k}) >= MIN:
            # The other fields first: a message refused for one of them
            # leaves nothing cached.
            head = _pack(({head},))
            tail = _pack(({tail}))
            return HEADER + head[1:] + packed_commands(f{k}) + tail[1:]
        return _pack(({", ".join([str(spec.tag), *wire_values])},))
    except CodecError:
        raise _encode_error(spec, msg) from None
"""
    code = compile(source, f"<sdpaxos.wire.codec: {spec.cls.__name__}.to_bytes>", "exec")
    exec(code, namespace)
    return typing.cast(Callable[[Any], bytes], namespace["to_bytes"])


def _build_to_bytes(classes: tuple[type, ...]) -> dict[type, Callable[[Any], bytes]]:
    """:func:`_compile_to_bytes` of every class of ``classes`` that has one."""
    table: dict[type, Callable[[Any], bytes]] = {}
    for tag, cls in enumerate(classes):
        to_bytes = _compile_to_bytes(_class_codec(tag, cls))
        if to_bytes is not None:
            table[cls] = to_bytes
    return table


def _arity_error(spec: _ClassCodec, items: tuple[object, ...]) -> CodecError:
    return CodecError(
        f"{spec.cls.__name__} (tag {spec.tag}) has {len(spec.field_names)} fields, "
        f"got {len(items) - 1}"
    )


def _build_tables(
    classes: tuple[type, ...] = MESSAGE_TYPES,
) -> tuple[dict[type, Callable[[Any], object]], tuple[Callable[[Any], Message], ...]]:
    """Encoders by class and decoders by tag for ``classes`` (the tag is the index);
    :mod:`sdpaxos.wire.records` builds its tables with it too."""
    to_wire: dict[type, Callable[[Any], object]] = {}
    from_wire: list[Callable[[Any], Message]] = []
    for tag, cls in enumerate(classes):
        encoder, decoder = _compile(_class_codec(tag, cls))
        to_wire[cls] = encoder
        from_wire.append(decoder)
    return to_wire, tuple(from_wire)


_TO_WIRE, _FROM_WIRE = _build_tables()
_TAG_COUNT = len(_FROM_WIRE)

# One reusable packer: cheaper than ``msgpack.packb`` per call. ``autoreset``
# also clears its buffer when ``pack`` raises. Safe because the C packer holds
# the GIL for the whole call and never calls back into Python for our types.
_pack: Callable[[object], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack

#: The classes of :data:`MESSAGE_TYPES` with a field of commands, spliced around
#: their packed commands (:func:`_compile_to_bytes`).
_TO_BYTES = _build_to_bytes(MESSAGE_TYPES)

_unpack: Callable[[bytes], object] = functools.partial(
    msgpack.unpackb,
    use_list=False,
    raw=False,
    strict_map_key=True,
    max_str_len=0,
    max_bin_len=FRAME_BYTES_MAX,
    max_array_len=ARRAY_ITEMS_MAX,
    max_map_len=0,
    max_ext_len=0,
)
"""Strict msgpack: arrays come back as tuples (so tuple fields need no copy);
no strings, maps or extension types appear in our format, so their limits are 0."""


# --------------------------------------------------------------------------
# Public API.
# --------------------------------------------------------------------------


def _to_wire(msg: Message) -> object:
    try:
        to_wire = _TO_WIRE[type(msg)]
    except KeyError:
        raise CodecError(f"not a message type in MESSAGE_TYPES: {_short(msg)}") from None
    return to_wire(msg)


def _finish(body: object) -> bytes:
    try:
        data = _VERSION_PREFIX + _pack(body)
    except (OverflowError, ValueError, TypeError) as exc:
        # OverflowError: an int outside msgpack's [-2**63, 2**64 - 1].
        raise CodecError(f"cannot encode: {exc}") from exc
    if len(data) > FRAME_BYTES_MAX:
        raise CodecError(f"encoding is {len(data)} bytes, over FRAME_BYTES_MAX ({FRAME_BYTES_MAX})")
    return data


def _packed_with(
    to_bytes_table: dict[type, Callable[[Any], bytes]],
    to_wire: Callable[[Any], object],
    msg: object,
) -> bytes:
    """``msg`` packed, without the version prefix: by its class's spliced
    encoder if it has one, else its wire form in one piece (raises what the
    encoders and the packer raise). Messages and records alike."""
    to_bytes = to_bytes_table.get(type(msg))
    if to_bytes is not None:
        return to_bytes(msg)
    return _pack(to_wire(msg))


def _message_bytes(msg: Message) -> bytes:
    """One message packed, without the version prefix (raises what the packer raises)."""
    return _packed_with(_TO_BYTES, _to_wire, msg)


def _finish_packed(part: Callable[[Any], bytes], msg: object) -> bytes:
    """``part(msg)`` with the version prefix: one message's or record's frame."""
    try:
        data = _VERSION_PREFIX + part(msg)
    except CodecError:
        raise
    except (OverflowError, ValueError, TypeError) as exc:
        # OverflowError: an int outside msgpack's [-2**63, 2**64 - 1].
        raise CodecError(f"cannot encode: {exc}") from exc
    if len(data) > FRAME_BYTES_MAX:
        raise CodecError(f"encoding is {len(data)} bytes, over FRAME_BYTES_MAX ({FRAME_BYTES_MAX})")
    return data


def encode(msg: Message) -> bytes:
    """Encode one message; raises :class:`CodecError` if it is malformed or too large."""
    return _finish_packed(_message_bytes, msg)


#: What :func:`encode_batch` keeps of each message it packed, by ``id``: the
#: message itself (so the id cannot be reused while the entry lives) and its bytes.
PackedMessages = dict[int, tuple[object, bytes]]


def _array_header(n: int) -> bytes:
    """msgpack's header of an array of ``n`` items, in the smallest form (as its packer writes)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _encode_shared(
    message_bytes: Callable[[Any], bytes], msgs: Iterable[object], packed: PackedMessages
) -> bytes:
    """A batch whose messages are packed one by one and looked up in ``packed``.

    Why: a broadcast puts the same message object in every peer's batch (the
    cores' ``broadcast``), and a C-accept or an Accept of 250 commands costs
    tens of microseconds to check and pack. Packed once and copied into each
    frame, it costs that once per broadcast instead of once per peer. A msgpack
    array is its header followed by its items, so the frame is byte for byte
    what packing the whole list at once gives.
    """
    parts: list[bytes] = []
    append = parts.append
    for msg in msgs:
        entry = packed.get(id(msg))
        if entry is None or entry[0] is not msg:
            try:
                part = message_bytes(msg)
            except CodecError:
                raise
            except (OverflowError, ValueError, TypeError) as exc:
                raise CodecError(f"cannot encode: {exc}") from exc
            packed[id(msg)] = (msg, part)
            append(part)
        else:
            append(entry[1])
    if len(parts) > MESSAGES_PER_BATCH_MAX:
        raise CodecError(
            f"{len(parts)} messages exceed MESSAGES_PER_BATCH_MAX ({MESSAGES_PER_BATCH_MAX})"
        )
    data = b"".join((_VERSION_PREFIX, _array_header(len(parts)), *parts))
    if len(data) > FRAME_BYTES_MAX:
        raise CodecError(f"encoding is {len(data)} bytes, over FRAME_BYTES_MAX ({FRAME_BYTES_MAX})")
    return data


def encode_batch(msgs: Iterable[Message], packed: PackedMessages | None = None) -> bytes:
    """Encode several messages for one peer as a single frame (message merging).

    An empty batch is valid and round-trips to ``[]``. ``packed``: when the
    same messages go to several peers, one dict passed to each of their
    batches (while the messages are alive) packs each message once; the
    frames are the same bytes as without it.
    """
    if packed is not None:
        return _encode_shared(_message_bytes, msgs, packed)
    body = [_to_wire(msg) for msg in msgs]
    if len(body) > MESSAGES_PER_BATCH_MAX:
        raise CodecError(
            f"{len(body)} messages exceed MESSAGES_PER_BATCH_MAX ({MESSAGES_PER_BATCH_MAX})"
        )
    return _finish(body)


def _unpack_body(data: bytes) -> object:
    size = len(data)
    if size == 0:
        raise CodecError("empty input")
    if size > FRAME_BYTES_MAX:
        raise CodecError(f"{size} bytes exceed FRAME_BYTES_MAX ({FRAME_BYTES_MAX})")
    if data[0] != VERSION:
        raise CodecError(f"unsupported wire version {data[0]} (expected {VERSION})")
    try:
        # Slicing copies, but for small frames a copy is cheaper than a memoryview.
        return _unpack(data[1:])
    except Exception as exc:
        # msgpack raises ValueError subclasses (ExtraData, FormatError, StackError,
        # limits), but its exception set is not a documented contract: at this
        # trust boundary anything it raises means "malformed".
        raise CodecError(f"malformed msgpack: {exc}") from exc


def _from_wire(items: object) -> Message:
    if type(items) is not tuple or not items:
        raise CodecError(f"expected a non-empty array [tag, ...], got {_short(items)}")
    tag = items[0]
    if type(tag) is not int or not 0 <= tag < _TAG_COUNT:
        raise CodecError(f"unknown message tag {_short(tag)}")
    return _FROM_WIRE[tag](items)


def decode(data: bytes) -> Message:
    """Decode one message encoded by :func:`encode`; raises only :class:`CodecError`."""
    return _from_wire(_unpack_body(data))


def decode_batch(data: bytes) -> list[Message]:
    """Decode a batch encoded by :func:`encode_batch`; raises only :class:`CodecError`.

    All or nothing: one malformed message rejects the whole batch, because a
    peer that sends it is broken and its other messages are not to be trusted.
    """
    body = _unpack_body(data)
    if type(body) is not tuple:
        raise CodecError(f"expected a batch array, got {_short(body)}")
    if len(body) > MESSAGES_PER_BATCH_MAX:
        raise CodecError(
            f"{len(body)} messages exceed MESSAGES_PER_BATCH_MAX ({MESSAGES_PER_BATCH_MAX})"
        )
    out: list[Message] = []
    for index, items in enumerate(body):
        try:
            out.append(_from_wire(items))
        except CodecError as exc:
            raise CodecError(f"batch message {index}: {exc}") from exc
    return out


class MessageCodec:
    """The same wire format over another table of message classes.

    Why: the baseline protocols (:mod:`sdpaxos.protocols`) have messages of
    their own, and the simulator, the runtime and the fuzzer must carry them
    with exactly the checks the SDPaxos messages get. ``classes`` plays the part
    of :data:`~sdpaxos.core.messages.MESSAGE_TYPES` (a tag is an index into it,
    so the table is append-only too); the module functions above stay the fast
    path for SDPaxos itself.
    """

    __slots__ = (
        "_from_wire_table",
        "_tag_count",
        "_to_bytes_table",
        "_to_wire_table",
        "classes",
    )

    def __init__(self, classes: tuple[type, ...]) -> None:
        if not classes:
            raise ValueError("a MessageCodec needs at least one message class")
        self.classes = classes
        self._to_wire_table, self._from_wire_table = _build_tables(classes)
        self._to_bytes_table = _build_to_bytes(classes)
        self._tag_count = len(self._from_wire_table)

    def _to_wire(self, msg: object) -> object:
        try:
            to_wire = self._to_wire_table[type(msg)]
        except KeyError:
            raise CodecError(f"not a message type of this codec: {_short(msg)}") from None
        return to_wire(msg)

    def _message_bytes(self, msg: object) -> bytes:
        return _packed_with(self._to_bytes_table, self._to_wire, msg)

    def _from_wire(self, items: object) -> Any:
        if type(items) is not tuple or not items:
            raise CodecError(f"expected a non-empty array [tag, ...], got {_short(items)}")
        tag = items[0]
        if type(tag) is not int or not 0 <= tag < self._tag_count:
            raise CodecError(f"unknown message tag {_short(tag)}")
        return self._from_wire_table[tag](items)

    def encode(self, msg: object) -> bytes:
        """Encode one message (see :func:`encode`)."""
        return _finish_packed(self._message_bytes, msg)

    def encode_batch(self, msgs: Iterable[object], packed: PackedMessages | None = None) -> bytes:
        """Encode a batch for one peer (see :func:`encode_batch`, and ``packed`` there)."""
        if packed is not None:
            return _encode_shared(self._message_bytes, msgs, packed)
        body = [self._to_wire(msg) for msg in msgs]
        if len(body) > MESSAGES_PER_BATCH_MAX:
            raise CodecError(
                f"{len(body)} messages exceed MESSAGES_PER_BATCH_MAX ({MESSAGES_PER_BATCH_MAX})"
            )
        return _finish(body)

    def decode(self, data: bytes) -> Any:
        """Decode one message; raises only :class:`CodecError`."""
        return self._from_wire(_unpack_body(data))

    def decode_batch(self, data: bytes) -> list[Any]:
        """Decode a batch, all or nothing; raises only :class:`CodecError`."""
        body = _unpack_body(data)
        if type(body) is not tuple:
            raise CodecError(f"expected a batch array, got {_short(body)}")
        if len(body) > MESSAGES_PER_BATCH_MAX:
            raise CodecError(
                f"{len(body)} messages exceed MESSAGES_PER_BATCH_MAX ({MESSAGES_PER_BATCH_MAX})"
            )
        out: list[Any] = []
        for index, items in enumerate(body):
            try:
                out.append(self._from_wire(items))
            except CodecError as exc:
                raise CodecError(f"batch message {index}: {exc}") from exc
        return out
