"""Tests of :mod:`sdpaxos.wire.members`: member messages round-trip exactly, the
envelope's inner message is checked by the protocol's codec, and a peer's
garbage is refused with :class:`CodecError`, never a crash."""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpaxos.core.member import EpochMessage, EpochNotice, StateChunk, StatePull
from sdpaxos.core.messages import MESSAGE_TYPES, CAccept, Heartbeat
from sdpaxos.core.types import Command
from sdpaxos.wire.codec import VERSION, CodecError, MessageCodec
from sdpaxos.wire.members import MEMBER_MESSAGE_TYPES, MemberCodec
from tests.unit.test_codec import message_strategy

CODEC = MemberCodec(MessageCodec(MESSAGE_TYPES))
INTS = st.integers(-(2**63), 2**64 - 1)

inner_messages = st.one_of([message_strategy(cls) for cls in MESSAGE_TYPES])
member_messages = st.one_of(
    st.builds(EpochMessage, INTS, INTS, inner_messages),
    st.builds(EpochNotice, INTS, INTS, st.binary(max_size=64)),
    st.builds(StatePull, INTS, INTS, INTS, INTS, INTS),
    st.builds(StateChunk, INTS, INTS, INTS, INTS, INTS, INTS, st.binary(max_size=64)),
)


def _frame(*items: object) -> bytes:
    return bytes([VERSION]) + msgpack.packb(list(items), use_bin_type=True)


def test_tags_never_move() -> None:
    assert (EpochMessage, EpochNotice, StatePull, StateChunk) == MEMBER_MESSAGE_TYPES


@settings(max_examples=300)
@given(st.lists(member_messages, max_size=6))
def test_batches_round_trip(msgs: list[Any]) -> None:
    assert CODEC.decode_batch(CODEC.encode_batch(msgs)) == msgs


@given(member_messages)
def test_one_message_round_trips(msg: Any) -> None:
    assert CODEC.decode(CODEC.encode(msg)) == msg


def test_an_inner_message_sent_to_many_peers_is_packed_once() -> None:
    """The same inner message in two envelopes, with one shared ``packed``:
    the second frame reuses the first's packing and is byte for byte the same."""
    commands = tuple(Command(1, s, b"x" * 8) for s in range(20))
    inner = CAccept(0, 0, 0, 0, 0, commands)  # type: ignore[arg-type]
    packed: dict[int, tuple[object, bytes]] = {}
    a = CODEC.encode_batch([EpochMessage(1, 0, inner)], packed)
    assert id(inner) in packed
    b = CODEC.encode_batch([EpochMessage(1, 0, inner)], packed)
    assert a == b == CODEC.encode_batch([EpochMessage(1, 0, inner)])
    assert CODEC.decode_batch(a) == [EpochMessage(1, 0, inner)]


def test_golden_envelope() -> None:
    """The envelope's layout: [0, epoch, src, [inner tag, inner fields...]]."""
    hb = Heartbeat(1, 2, 3, 4, 5, 6, False)  # type: ignore[call-arg]
    data = CODEC.encode_batch([EpochMessage(7, 9, hb)])
    body = msgpack.unpackb(data[1:], use_list=False)
    tag = MESSAGE_TYPES.index(Heartbeat)
    assert body == ((0, 7, 9, (tag, 1, 2, 3, 4, 5, 6, False)),)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "empty input"),
        (bytes([VERSION + 1]) + msgpack.packb([]), "unsupported wire version"),
        (_frame([9, 1, 2]), "unknown member message tag"),
        (_frame([b"x"]), "unknown member message tag"),
        (_frame(["x"]), "malformed msgpack"),
        (_frame([0, 1, 2]), "EpochMessage has 3 fields"),
        (_frame([0, b"e", 2, [0]]), "epoch and src must be ints"),
        (_frame([0, 1, 2, [999, 1]]), "EpochMessage.msg: unknown message tag"),
        (_frame([0, 1, 2, b"junk"]), "EpochMessage.msg"),
        (_frame([0, 1, 2, [MESSAGE_TYPES.index(Heartbeat), 1]]), "EpochMessage.msg"),
        (_frame([1, 1, 2]), "EpochNotice"),
        (_frame([1, 1, 2, 5]), "EpochNotice"),
        (_frame([2, 1, 2, 3, 4, b"no"]), "StatePull"),
        (_frame([3, 1, 2, 3, 4, 5, 6, 7]), "StateChunk"),
        (bytes([VERSION]) + msgpack.packb(5), "expected a batch array"),
    ],
)
def test_malformed_input_raises_codec_error(data: bytes, expected: str) -> None:
    with pytest.raises(CodecError, match=expected):
        CODEC.decode_batch(data)


def test_encode_refuses_what_is_not_a_member_message() -> None:
    with pytest.raises(CodecError, match="not a member message"):
        CODEC.encode_batch([Heartbeat(1, 2, 3, 4, 5, 6, False)])  # type: ignore[call-arg]
    with pytest.raises(CodecError):
        CODEC.encode_batch([EpochMessage(2**64, 0, Heartbeat(1, 2, 3, 4, 5, 6, False))])  # type: ignore[call-arg]
    with pytest.raises(CodecError):
        CODEC.encode_batch([EpochMessage(1, 0, "not a message")])  # type: ignore[arg-type]


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_refused_or_decoded(data: bytes) -> None:
    with contextlib.suppress(CodecError):
        CODEC.decode_batch(bytes([VERSION]) + data)


@settings(max_examples=200)
@given(st.lists(member_messages, min_size=1, max_size=3), st.data())
def test_mutated_batches_are_safe(msgs: list[Any], data: st.DataObject) -> None:
    frame = bytearray(CODEC.encode_batch(msgs))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(CodecError):
        CODEC.decode_batch(bytes(frame))
    for cut in range(len(frame) - 1):
        with pytest.raises(CodecError):
            CODEC.decode_batch(bytes(CODEC.encode_batch(msgs))[: cut + 1])
