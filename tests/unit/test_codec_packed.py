"""Tests of ``encode_batch``'s ``packed``: a message sent to several peers is packed once.

The frames must be the very bytes encoding each batch alone gives (a receiver
cannot tell), each distinct message must be converted and packed once per
send, and what the codec refuses it refuses the same way.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdpaxos.core.messages import CAccept, OAck
from sdpaxos.core.types import Command
from sdpaxos.protocols import protocol
from sdpaxos.wire import codec
from sdpaxos.wire.codec import (
    FRAME_BYTES_MAX,
    MESSAGES_PER_BATCH_MAX,
    CodecError,
    PackedMessages,
    decode_batch,
    encode_batch,
)
from tests.unit.test_codec import BAD_TO_ENCODE, EXAMPLES, any_message


@EXAMPLES
@given(
    st.lists(any_message, min_size=1, max_size=6),
    st.lists(st.lists(st.integers(0, 5), max_size=24), min_size=1, max_size=4),
)
def test_frames_are_the_bytes_of_each_batch_alone(msgs: list[Any], picks: list[list[int]]) -> None:
    """Peers' batches drawn from a few message objects (a broadcast puts one
    object in several batches, and in one batch more than once)."""
    packed: PackedMessages = {}
    for pick in picks:
        batch = [msgs[i % len(msgs)] for i in pick]
        frame = encode_batch(batch, packed)
        assert frame == encode_batch(batch)
        assert decode_batch(frame) == batch
    used = {id(msgs[i % len(msgs)]) for pick in picks for i in pick}
    assert set(packed) == used


@pytest.mark.parametrize("count", [0, 1, 15, 16, 17, 300, MESSAGES_PER_BATCH_MAX])
def test_every_array_header_size(count: int) -> None:
    """msgpack's fixarray (under 16 items) and array 16 headers, as its packer writes them."""
    batch = [OAck(1, 2, i) for i in range(count)]
    assert encode_batch(batch, {}) == encode_batch(batch)


@pytest.mark.parametrize("count", [0, 15, 16, 2**16 - 1, 2**16, 2**20])
def test_the_header_is_msgpacks_own(count: int) -> None:
    packed = codec._pack([None] * count)
    assert codec._array_header(count) == packed[: len(packed) - count]


def count_conversions(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every message the module-level codec converts and packs, in order
    (``tests/runtime/test_send_packed.py`` uses it too)."""
    seen: list[object] = []
    real = codec._message_bytes

    def message_bytes(msg: Any) -> bytes:
        seen.append(msg)
        return real(msg)

    monkeypatch.setattr(codec, "_message_bytes", message_bytes)
    return seen


def _accept(index: int) -> CAccept:
    return CAccept(1, 2, 1, index, 3, tuple(Command(7, s, b"v%d" % s, b"k") for s in range(50)))


def test_a_broadcast_is_converted_once_per_send(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = count_conversions(monkeypatch)
    accept, ack = _accept(4), OAck(1, 2, 3)
    packed: PackedMessages = {}
    frames = [encode_batch([accept, ack], packed) for _ in range(4)]
    assert seen == [accept, ack]
    assert len(set(frames)) == 1
    # Without ``packed``, once per peer: what the shared path saves.
    converted: list[object] = []
    real = codec._to_wire
    monkeypatch.setattr(codec, "_to_wire", lambda msg: converted.append(msg) or real(msg))
    for _ in range(4):
        encode_batch([accept])
    assert converted == [accept] * 4


def test_an_entry_for_another_object_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry keeps its message, so an id reused by a new object is told apart."""
    old, new = _accept(4), _accept(5)
    packed: PackedMessages = {id(new): (old, encode_batch([old])[2:])}
    seen = count_conversions(monkeypatch)
    assert decode_batch(encode_batch([new], packed)) == [new]
    assert seen == [new]
    assert packed[id(new)][0] is new


@pytest.mark.parametrize(
    ("msg", "expected"), [b[1:] for b in BAD_TO_ENCODE], ids=[b[0] for b in BAD_TO_ENCODE]
)
def test_what_is_refused_alone_is_refused_packed(msg: Any, expected: str) -> None:
    packed: PackedMessages = {}
    with pytest.raises(CodecError, match=expected):
        encode_batch([OAck(1, 2, 3), msg], packed)
    # The packer is left clean, and a later batch of the same send still encodes.
    assert encode_batch([OAck(1, 2, 3)], packed) == encode_batch([OAck(1, 2, 3)])


def test_limits_hold_packed() -> None:
    with pytest.raises(CodecError, match="MESSAGES_PER_BATCH_MAX"):
        encode_batch([OAck(1, 2, 3)] * (MESSAGES_PER_BATCH_MAX + 1), {})
    half = CAccept(1, 2, 3, 4, 5, (Command(1, 2, b"x" * (FRAME_BYTES_MAX // 2)),))
    packed: PackedMessages = {}
    assert len(encode_batch([half], packed)) < FRAME_BYTES_MAX
    with pytest.raises(CodecError, match="FRAME_BYTES_MAX"):
        encode_batch([half, half], packed)


@pytest.mark.parametrize("name", ["multipaxos", "mencius", "epaxos"])
def test_the_baselines_codecs_share_the_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison is fair only if every protocol's broadcasts are packed once too."""
    mc = protocol(name).codec
    msg = _baseline_message(name)
    seen: list[object] = []
    # A class with a field of commands is packed by its own ``to_bytes``.
    assert type(msg) in mc._to_bytes_table
    real = mc._to_bytes_table[type(msg)]

    def to_bytes(m: Any) -> bytes:
        seen.append(m)
        return real(m)

    monkeypatch.setitem(mc._to_bytes_table, type(msg), to_bytes)
    packed: PackedMessages = {}
    frames = {mc.encode_batch([msg], packed) for _ in range(3)}
    assert seen == [msg]
    assert frames == {mc.encode_batch([msg])}
    assert mc.decode_batch(frames.pop()) == [msg]


def _baseline_message(name: str) -> Any:
    """A message of baseline ``name`` that carries commands."""
    cmds = (Command(7, 1, b"v", b"k"),)
    if name == "multipaxos":
        from sdpaxos.baselines.multipaxos import Accept as MPAccept

        return MPAccept(0, 5, 1, cmds)
    if name == "mencius":
        from sdpaxos.baselines.mencius import Commit as MCommit

        return MCommit(0, 3, cmds, 2, 4)
    from sdpaxos.baselines.epaxos import PreAccept

    return PreAccept(0, 1, 1, (), cmds)
