"""Tests of :mod:`sdpaxos.wire.framing`: any chunking of the stream gives back the frames."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpaxos.core.messages import CAck, Message, OAck, OCommit
from sdpaxos.wire import framing
from sdpaxos.wire.codec import FRAME_BYTES_MAX, CodecError, decode_batch, encode_batch
from sdpaxos.wire.framing import LENGTH_PREFIX_BYTES, Framer, FrameTooLarge, frame

#: Determinism (derandomize) comes from the shared profile in tests/conftest.py;
#: the fuzz tests here are cheap, so they run at least 100 examples in any profile.
EXAMPLES = settings(max_examples=max(100, settings().max_examples))


def _chunks(stream: bytes, cuts: list[int]) -> list[bytes]:
    """``stream`` split at the given positions (any order, duplicates allowed)."""
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


def _drain(framer: Framer) -> list[bytes]:
    out = []
    while (payload := framer.next_frame()) is not None:
        out.append(payload)
    return out


@EXAMPLES
@given(st.lists(st.binary(max_size=300), max_size=20), st.data())
def test_any_chunking_gives_back_the_frames(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frame(p) for p in payloads)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=30))
    drain_every_chunk = data.draw(st.booleans())
    framer = Framer()
    received: list[bytes] = []
    for chunk in _chunks(stream, cuts):
        framer.feed(chunk)
        if drain_every_chunk:
            received += _drain(framer)
    received += _drain(framer)
    assert received == payloads
    assert all(type(p) is bytes for p in received)
    assert framer.buffered_bytes == 0
    assert framer.next_frame() is None


def test_byte_at_a_time() -> None:
    payloads = [b"", b"a", b"hello", bytes(range(256))]
    framer = Framer()
    received: list[bytes] = []
    for byte in b"".join(frame(p) for p in payloads):
        framer.feed(bytes([byte]))
        received += _drain(framer)
    assert received == payloads


def test_partial_prefix_needs_more_data() -> None:
    framer = Framer()
    framer.feed(frame(b"abc")[:3])
    assert framer.next_frame() is None
    assert framer.buffered_bytes == 3
    framer.feed(b"\x03ab")
    assert framer.next_frame() is None
    framer.feed(b"c")
    assert framer.next_frame() == b"abc"


def test_feed_accepts_any_buffer() -> None:
    framer = Framer()
    framer.feed(bytearray(frame(b"one")))
    framer.feed(memoryview(frame(b"two")))
    framer.feed(b"")
    assert _drain(framer) == [b"one", b"two"]


def test_large_frames_in_chunks() -> None:
    # Above the slice-copy threshold, so the memoryview copy path is used.
    payloads = [bytes([i]) * (framing._SLICE_COPY_BYTES_MAX + 1000 * i) for i in range(1, 4)]
    stream = b"".join(frame(p) for p in payloads)
    framer = Framer()
    received: list[bytes] = []
    for start in range(0, len(stream), 7777):
        framer.feed(stream[start : start + 7777])
        received += _drain(framer)
    assert received == payloads


def test_buffer_is_compacted_under_a_steady_stream() -> None:
    # Each chunk is the rest of one frame plus the first byte of the next, so the
    # buffer is never fully consumed and only compaction keeps it from growing
    # to the size of the whole stream.
    frames = [frame(bytes([i % 256]) * 37) for i in range(50_000)]
    framer = Framer()
    framer.feed(frames[0][:1])
    count = 0
    buffer_bytes_max = 0
    for current, following in itertools.pairwise([*frames, b"\x00"]):
        framer.feed(current[1:] + following[:1])
        count += len(_drain(framer))
        assert framer.buffered_bytes == 1
        buffer_bytes_max = max(buffer_bytes_max, len(framer._buffer))
    assert count == len(frames)
    assert sum(len(f) for f in frames) > 2_000_000
    assert buffer_bytes_max <= 2 * framing._COMPACT_BYTES_MIN + 100


def test_frame_of_exactly_the_maximum_is_accepted() -> None:
    framer = Framer(frame_bytes_max=10)
    framer.feed(frame(b"x" * 10, frame_bytes_max=10) + frame(b"", frame_bytes_max=10))
    assert _drain(framer) == [b"x" * 10, b""]


def test_oversize_prefix_fails_before_the_payload_arrives() -> None:
    framer = Framer(frame_bytes_max=10)
    framer.feed(frame(b"ok") + (11).to_bytes(LENGTH_PREFIX_BYTES, "big"))
    assert framer.next_frame() == b"ok"
    with pytest.raises(FrameTooLarge, match="11 bytes"):
        framer.next_frame()
    # Unusable but safe: every later call fails too, and the buffer is gone.
    assert framer.buffered_bytes == 0
    with pytest.raises(FrameTooLarge):
        framer.next_frame()
    with pytest.raises(FrameTooLarge):
        framer.feed(frame(b"more"))
    with pytest.raises(FrameTooLarge):
        framer.next_frame()


def test_default_maximum_rejects_a_huge_prefix() -> None:
    framer = Framer()
    assert framer.frame_bytes_max == FRAME_BYTES_MAX
    framer.feed(b"\xff\xff\xff\xff")
    with pytest.raises(FrameTooLarge):
        framer.next_frame()


def test_frame_refuses_an_oversize_payload() -> None:
    with pytest.raises(FrameTooLarge):
        frame(b"x" * 11, frame_bytes_max=10)
    assert frame(b"x" * 10, frame_bytes_max=10) == b"\x00\x00\x00\x0a" + b"x" * 10


def test_frame_prefix_is_four_bytes_big_endian() -> None:
    assert frame(b"") == b"\x00\x00\x00\x00"
    assert frame(b"a" * 258)[:LENGTH_PREFIX_BYTES] == b"\x00\x00\x01\x02"


@pytest.mark.parametrize("frame_bytes_max", [-1, 2**32])
def test_invalid_maximum_is_refused(frame_bytes_max: int) -> None:
    with pytest.raises(ValueError, match="frame_bytes_max"):
        Framer(frame_bytes_max=frame_bytes_max)
    with pytest.raises(ValueError, match="frame_bytes_max"):
        frame(b"", frame_bytes_max=frame_bytes_max)


def test_frame_too_large_is_a_codec_error() -> None:
    assert issubclass(FrameTooLarge, CodecError)


@EXAMPLES
@given(st.lists(st.integers(0, 200), max_size=10), st.data())
def test_framed_batches_through_a_chunked_stream(sizes: list[int], data: st.DataObject) -> None:
    batches: list[list[Message]] = [
        [CAck(1, 2, 3, i, 5), OAck(4, 1, i), OCommit(1, 1, tuple((j, 1, 1, 1) for j in range(i)))]
        for i in sizes
    ]
    stream = b"".join(frame(encode_batch(batch)) for batch in batches)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    framer = Framer()
    received = []
    for chunk in _chunks(stream, cuts):
        framer.feed(chunk)
        received += [decode_batch(payload) for payload in _drain(framer)]
    assert received == batches
