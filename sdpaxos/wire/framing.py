"""Sans-I/O length-prefixed framing of a byte stream.

A frame on the wire is ``length (4 bytes, big-endian) | payload``. The sender
wraps each payload with :func:`frame`; the receiver gives whatever the socket
delivered to :meth:`Framer.feed` and takes complete payloads out with
:meth:`Framer.next_frame`. No sockets, no asyncio, no clock (h11-style): the
same object serves the asyncio transport, the simulator and the tests, and
arbitrary chunking of the stream can be tested exhaustively.

Why a maximum frame size: the length prefix comes from the peer. Without a
bound, four bytes could make the receiver buffer 4 GiB. A length above the
maximum raises :class:`FrameTooLarge` as soon as its prefix is seen, before any
of its payload is buffered.
"""

from __future__ import annotations

import struct

from sdpaxos.wire.codec import FRAME_BYTES_MAX, CodecError

__all__ = ["LENGTH_PREFIX_BYTES", "FrameTooLarge", "Framer", "frame"]

#: Size of the length prefix of every frame.
LENGTH_PREFIX_BYTES = 4

#: Largest length the prefix can express.
_LENGTH_PREFIX_MAX = (1 << (8 * LENGTH_PREFIX_BYTES)) - 1

_PREFIX = struct.Struct(">I")

#: Consumed bytes at the front of the buffer are only dropped once there are at
#: least this many and they are at least half the buffer, so that compaction
#: (a memmove of the unconsumed tail) costs O(1) amortised per byte.
_COMPACT_BYTES_MIN = 64 * 1024

#: Payloads up to this size are copied out with a plain slice (fastest for
#: small frames); larger ones through a memoryview, which copies once, not twice.
_SLICE_COPY_BYTES_MAX = 64 * 1024


class FrameTooLarge(CodecError):
    """A frame's length is above the allowed maximum.

    A subclass of :class:`~sdpaxos.wire.codec.CodecError` so that a transport
    treats it like any other garbage from a peer: drop the connection.
    """


def _check_frame_bytes_max(frame_bytes_max: int) -> None:
    if not 0 <= frame_bytes_max <= _LENGTH_PREFIX_MAX:
        raise ValueError(
            f"frame_bytes_max must be in 0 .. {_LENGTH_PREFIX_MAX}, got {frame_bytes_max}"
        )


def frame(payload: bytes, frame_bytes_max: int = FRAME_BYTES_MAX) -> bytes:
    """``payload`` with its 4-byte big-endian length prefix.

    Raises :class:`FrameTooLarge` if the payload is longer than
    ``frame_bytes_max``: the receiver would reject it anyway, and failing at the
    sender points at the bug.
    """
    _check_frame_bytes_max(frame_bytes_max)
    size = len(payload)
    if size > frame_bytes_max:
        raise FrameTooLarge(f"payload of {size} bytes exceeds frame_bytes_max ({frame_bytes_max})")
    return _PREFIX.pack(size) + payload


class Framer:
    """Reassembles frames from a byte stream delivered in arbitrary pieces.

    Received bytes go into one ``bytearray``; ``_offset`` marks where the next
    frame starts, so taking a frame out never shifts the rest of the buffer.
    The consumed front is dropped only occasionally (see ``_COMPACT_BYTES_MIN``),
    which keeps many small frames cheap.

    After :class:`FrameTooLarge` the framer is unusable but safe: it has dropped
    its buffer and every later :meth:`feed` or :meth:`next_frame` raises
    :class:`FrameTooLarge` again. A length-prefixed stream has no point at which
    to resynchronise, so the only recovery is to close the connection; a caller
    that forgets to must not go on decoding garbage.
    """

    __slots__ = ("_buffer", "_failure", "_frame_bytes_max", "_offset")

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX) -> None:
        _check_frame_bytes_max(frame_bytes_max)
        self._frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()
        self._offset = 0
        self._failure: str | None = None

    @property
    def frame_bytes_max(self) -> int:
        return self._frame_bytes_max

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned in a frame (for read back-pressure)."""
        return len(self._buffer) - self._offset

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes received from the stream; any chunking is fine."""
        if self._failure is not None:
            raise FrameTooLarge(self._failure)
        offset = self._offset
        if offset:
            buffer = self._buffer
            if offset == len(buffer):
                buffer.clear()
                self._offset = 0
            elif offset >= _COMPACT_BYTES_MIN and 2 * offset >= len(buffer):
                del buffer[:offset]
                self._offset = 0
        self._buffer += data

    def next_frame(self) -> bytes | None:
        """The next complete payload, or ``None`` if more bytes are needed."""
        if self._failure is not None:
            raise FrameTooLarge(self._failure)
        buffer = self._buffer
        start = self._offset + LENGTH_PREFIX_BYTES
        if len(buffer) < start:
            return None
        (size,) = _PREFIX.unpack_from(buffer, self._offset)
        if size > self._frame_bytes_max:
            self._failure = (
                f"peer announced a frame of {size} bytes, over frame_bytes_max "
                f"({self._frame_bytes_max}); framer closed"
            )
            self._buffer = bytearray()
            self._offset = 0
            raise FrameTooLarge(self._failure)
        end = start + size
        if len(buffer) < end:
            return None
        if size <= _SLICE_COPY_BYTES_MAX:
            payload = bytes(buffer[start:end])
        else:
            with memoryview(buffer) as view:
                payload = view[start:end].tobytes()
        self._offset = end
        return payload
