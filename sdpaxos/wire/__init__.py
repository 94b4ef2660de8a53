"""The wire layer: protocol messages to bytes and back, and bytes to frames.

Layering: ``wire`` is pure. It imports only :mod:`sdpaxos.core` (for the message
shapes) and ``msgpack``: no sockets, no asyncio, no clock. That is what lets
the simulator round-trip every simulated message through the real codec, and
the asyncio runtime reuse the very same code on real connections.

- :mod:`sdpaxos.wire.codec`: :func:`encode` / :func:`decode` of one message and
  :func:`encode_batch` / :func:`decode_batch` of several merged into one frame.
- :mod:`sdpaxos.wire.framing`: :func:`frame` and the sans-I/O :class:`Framer`.
- :mod:`sdpaxos.wire.records`: :func:`~sdpaxos.wire.records.encode_record` /
  :func:`~sdpaxos.wire.records.decode_record` of the durable records a log keeps.

Every way peer bytes can be bad raises :class:`CodecError` (or its subclass
:class:`FrameTooLarge`), so a transport needs one ``except`` to drop a bad peer.
"""

from sdpaxos.wire.codec import (
    ARRAY_ITEMS_MAX,
    FRAME_BYTES_MAX,
    MESSAGES_PER_BATCH_MAX,
    VERSION,
    CodecError,
    decode,
    decode_batch,
    encode,
    encode_batch,
)
from sdpaxos.wire.framing import LENGTH_PREFIX_BYTES, Framer, FrameTooLarge, frame

__all__ = [
    "ARRAY_ITEMS_MAX",
    "FRAME_BYTES_MAX",
    "LENGTH_PREFIX_BYTES",
    "MESSAGES_PER_BATCH_MAX",
    "VERSION",
    "CodecError",
    "FrameTooLarge",
    "Framer",
    "decode",
    "decode_batch",
    "encode",
    "encode_batch",
    "frame",
]
