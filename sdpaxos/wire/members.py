"""Bytes <-> the messages of a cluster whose membership changes.

A node that runs :class:`~sdpaxos.core.member.Member` sends only
:data:`~sdpaxos.core.member.MemberMessage` values: a core message of one epoch
in its envelope (:class:`~sdpaxos.core.member.EpochMessage`), and the three
messages that carry epochs and snapshots between nodes
(:class:`~sdpaxos.core.member.EpochNotice`, :class:`~sdpaxos.core.member.StatePull`,
:class:`~sdpaxos.core.member.StateChunk`). Their tags are indexes into
:data:`MEMBER_MESSAGE_TYPES`, a table of its own (append-only, like
:data:`~sdpaxos.core.messages.MESSAGE_TYPES`): the core's table is shared with
the simulator and the baselines, and a tag appended there later must not move
one of these.

Format of a batch (the same frame shape as :mod:`sdpaxos.wire.codec`)::

    VERSION (1 byte) | msgpack array [[tag, field, ...], ...]

An :class:`EpochMessage` is ``[0, epoch, src, [inner tag, inner fields...]]``:
the inner message is encoded by the protocol's own codec exactly as it would be
alone (its packed commands cache included), and decoded and checked by it, so a
malformed inner message is a :class:`~sdpaxos.wire.codec.CodecError` like any
other. The envelope's bytes are spliced around the inner message's (a msgpack
array is its header followed by its items), so a broadcast's inner message is
packed once for every peer even though each peer gets an envelope of its own.

Every malformed input raises :class:`~sdpaxos.wire.codec.CodecError` and nothing
else: a peer's garbage is refused, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgpack

from sdpaxos.core.member import EpochMessage, EpochNotice, StateChunk, StatePull
from sdpaxos.wire.codec import (
    MESSAGES_PER_BATCH_MAX,
    CodecError,
    MessageCodec,
    PackedMessages,
    _build_tables,
    _encode_shared,
    _short,
    _unpack_body,
)

__all__ = ["MEMBER_MESSAGE_TYPES", "MemberCodec"]

#: The member messages, by tag (append-only: a tag never moves).
MEMBER_MESSAGE_TYPES: tuple[type, ...] = (EpochMessage, EpochNotice, StatePull, StateChunk)
_ENVELOPE_TAG = MEMBER_MESSAGE_TYPES.index(EpochMessage)
#: The plain member messages (every field an int or bytes): the codec's table
#: machinery encodes them; tags here are their indexes in MEMBER_MESSAGE_TYPES.
_PLAIN = MEMBER_MESSAGE_TYPES[_ENVELOPE_TAG + 1 :]
_PLAIN_TO_WIRE, _PLAIN_FROM_WIRE_LIST = _build_tables(_PLAIN)
_PACK: Callable[[object], bytes] = msgpack.Packer(use_bin_type=True, autoreset=True).pack
_ENVELOPE_HEADER = bytes((0x94,))  # a 4-item fixarray: [tag, epoch, src, inner]


class MemberCodec:
    """Batches of member messages whose envelopes hold ``inner``'s messages.

    ``inner`` is the codec of the protocol that runs in each epoch (SDPaxos's
    :class:`~sdpaxos.wire.codec.MessageCodec` over
    :data:`~sdpaxos.core.messages.MESSAGE_TYPES`).
    """

    __slots__ = ("inner",)

    def __init__(self, inner: MessageCodec) -> None:
        self.inner = inner

    # ------------------------------------------------------------- encoding

    def _inner_bytes(self, msg: object, packed: PackedMessages | None) -> bytes:
        if packed is not None:
            entry = packed.get(id(msg))
            if entry is not None and entry[0] is msg:
                return entry[1]
        data = self.inner._message_bytes(msg)
        if packed is not None:
            packed[id(msg)] = (msg, data)
        return data

    def _message_bytes(self, msg: object, packed: PackedMessages | None = None) -> bytes:
        """One member message packed, without the version prefix."""
        cls = type(msg)
        if cls is EpochMessage:
            assert isinstance(msg, EpochMessage)
            epoch, src = msg.epoch, msg.src
            if type(epoch) is not int or type(src) is not int:
                raise CodecError(f"cannot encode EpochMessage: epoch and src must be ints: {msg!r}")
            head = _PACK((_ENVELOPE_TAG, epoch, src))[1:]
            return _ENVELOPE_HEADER + head + self._inner_bytes(msg.msg, packed)
        to_wire = _PLAIN_TO_WIRE.get(cls)
        if to_wire is None:
            raise CodecError(f"not a member message: {_short(msg)}")
        items = to_wire(msg)
        assert isinstance(items, tuple)
        # The table numbers the plain classes from 0: shift to their member tags.
        return _PACK((items[0] + _ENVELOPE_TAG + 1, *items[1:]))

    def encode(self, msg: object) -> bytes:
        """One member message (a batch of one); raises :class:`CodecError`."""
        return self.encode_batch([msg])

    def encode_batch(self, msgs: Iterable[object], packed: PackedMessages | None = None) -> bytes:
        """The messages for one peer as one frame. ``packed``: shared by the
        batches of one send, so that an inner message broadcast to several
        peers is packed once (see :func:`sdpaxos.wire.codec.encode_batch`)."""
        shared: PackedMessages = {} if packed is None else packed

        def one(msg: object) -> bytes:
            try:
                return self._message_bytes(msg, shared)
            except CodecError:
                raise
            except (OverflowError, ValueError, TypeError) as exc:
                raise CodecError(f"cannot encode: {exc}") from exc

        # Envelopes are made per peer: cache the inner messages, not the envelopes.
        return _encode_shared(one, msgs, {})

    # ------------------------------------------------------------- decoding

    def _from_wire(self, items: object) -> Any:
        if type(items) is not tuple or not items:
            raise CodecError(f"expected a non-empty array [tag, ...], got {_short(items)}")
        tag = items[0]
        if type(tag) is not int or not 0 <= tag < len(MEMBER_MESSAGE_TYPES):
            raise CodecError(f"unknown member message tag {_short(tag)}")
        if tag == _ENVELOPE_TAG:
            if len(items) != 4:
                raise CodecError(f"EpochMessage has 3 fields, got {len(items) - 1}")
            _, epoch, src, inner = items
            if type(epoch) is not int or type(src) is not int:
                raise CodecError(f"EpochMessage epoch and src must be ints: {_short(items)}")
            try:
                msg = self.inner._from_wire(inner)
            except CodecError as exc:
                raise CodecError(f"EpochMessage.msg: {exc}") from exc
            return EpochMessage(epoch, src, msg)
        plain = tag - _ENVELOPE_TAG - 1
        return _PLAIN_FROM_WIRE_LIST[plain]((plain, *items[1:]))

    def decode(self, data: bytes) -> Any:
        """One member message from a batch of one; raises only :class:`CodecError`."""
        msgs = self.decode_batch(data)
        if len(msgs) != 1:
            raise CodecError(f"expected one message, got {len(msgs)}")
        return msgs[0]

    def decode_batch(self, data: bytes) -> list[Any]:
        """A batch, all or nothing; raises only :class:`CodecError`."""
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
