"""Durable records to bytes and back: what the runtime's log writes and reads.

Format of one encoded record::

    VERSION (1 byte) | msgpack array [tag, field_1, field_2, ...]

``tag`` is the record class's index in :data:`RECORD_TYPES` (append-only, so
tags never move). The per-class encoders and decoders are the message codec's
own (:mod:`sdpaxos.wire.codec` generates them from the dataclass fields), so a
record is checked exactly as strictly as a message. The log reads these back
after a crash: every malformed input raises :class:`~sdpaxos.wire.codec.CodecError`
and nothing else, and the log decides whether that is a torn tail or corruption.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sdpaxos.core.storage import (
    CAccepted,
    CPromised,
    OAccepted,
    Record,
    ViewEstablished,
    ViewPromised,
)
from sdpaxos.wire.codec import (
    CodecError,
    _build_tables,
    _build_to_bytes,
    _finish_packed,
    _packed_with,
    _short,
    _unpack_body,
)

__all__ = ["RECORD_TYPES", "RecordCodec", "decode_record", "encode_record"]

#: Every durable record class, in tag order. Append only: the index is the tag.
RECORD_TYPES: tuple[type, ...] = (CAccepted, OAccepted, CPromised, ViewPromised, ViewEstablished)


_TO_WIRE, _FROM_WIRE = _build_tables(RECORD_TYPES)
# A C-accepted record carries the C-accept's own commands tuple: logged, it is
# spliced from the same packed bytes the message was (``codec._compile_to_bytes``).
_TO_BYTES = _build_to_bytes(RECORD_TYPES)


def _record_to_wire(
    record: object, to_wire_table: dict[type, Callable[[Any], object]] = _TO_WIRE
) -> object:
    try:
        to_wire = to_wire_table[type(record)]
    except KeyError:
        raise CodecError(f"not a durable record type: {_short(record)}") from None
    return to_wire(record)


def _record_bytes(record: object) -> bytes:
    return _packed_with(_TO_BYTES, _record_to_wire, record)


def encode_record(record: Record) -> bytes:
    """One record's bytes; raises :class:`CodecError` if it is malformed or too large."""
    return _finish_packed(_record_bytes, record)


def decode_record(data: bytes) -> Record:
    """The record :func:`encode_record` gave ``data``; raises only :class:`CodecError`."""
    items = _unpack_body(data)
    if type(items) is not tuple or not items:
        raise CodecError(f"expected a non-empty array [tag, ...], got {_short(items)}")
    tag = items[0]
    if type(tag) is not int or not 0 <= tag < len(_FROM_WIRE):
        raise CodecError(f"unknown record tag {_short(tag)}")
    record: Record = _FROM_WIRE[tag](items)  # type: ignore[assignment]
    return record


class RecordCodec:
    """The same record format over :data:`RECORD_TYPES` and a protocol's own records.

    Why: a baseline protocol (:mod:`sdpaxos.protocols`) may persist a record
    class of its own (Mencius's next own instance). Its classes are appended
    after :data:`RECORD_TYPES`, so the tags of the shared records do not move;
    the module functions above stay the fast path for SDPaxos.
    """

    __slots__ = ("_from_wire", "_to_bytes", "_to_wire", "classes")

    def __init__(self, extra: tuple[type, ...] = ()) -> None:
        self.classes = RECORD_TYPES + tuple(extra)
        self._to_wire, self._from_wire = _build_tables(self.classes)
        self._to_bytes = _build_to_bytes(self.classes)

    def _record_to_wire(self, record: object) -> object:
        return _record_to_wire(record, self._to_wire)

    def _record_bytes(self, record: object) -> bytes:
        return _packed_with(self._to_bytes, self._record_to_wire, record)

    def encode(self, record: Record) -> bytes:
        """See :func:`encode_record`."""
        return _finish_packed(self._record_bytes, record)

    def decode(self, data: bytes) -> Record:
        """See :func:`decode_record`."""
        items = _unpack_body(data)
        if type(items) is not tuple or not items:
            raise CodecError(f"expected a non-empty array [tag, ...], got {_short(items)}")
        tag = items[0]
        if type(tag) is not int or not 0 <= tag < len(self._from_wire):
            raise CodecError(f"unknown record tag {_short(tag)}")
        record: Record = self._from_wire[tag](items)  # type: ignore[assignment]
        return record
