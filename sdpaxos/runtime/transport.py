"""One framed TCP (or TLS) connection, for a peer replica or a client.

Why an :class:`asyncio.Protocol` and not streams: a replica receives many small
frames, and a protocol's ``data_received`` hands them to the framer without a
task switch per read. The connection knows only framing, the hello and who is
at the other end; what the frames mean is the node's business
(:class:`ConnectionOwner`).

Rules, in the order a connection lives them:

1. ``TCP_NODELAY`` on (a replica's frames are small and latency-bound; the node
   already gathers a loop turn's frames for one peer into one write).
2. A dialled connection says hello first (:class:`~sdpaxos.runtime.frames.Hello`);
   an accepted one waits for the hello, at most :data:`HELLO_TIMEOUT_S`. With
   TLS, the hello must name the identity of the certificate (``node<N>`` or
   ``client<N>``), else the connection is dropped.
3. Every frame that is malformed, truncated, oversized or of an unknown kind is
   counted (:attr:`ConnectionOwner.reject`), logged with its reason, and closes
   the connection; the node goes on serving everyone else.
4. Writes go through :meth:`Connection.send`; above
   :data:`SEND_BUFFER_BYTES_MAX` of unsent bytes the frame is dropped and
   counted: the protocol retransmits what matters, and a peer that does not
   read must not make a node buffer without bound.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, Protocol, cast

from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.tls import peer_identity
from sdpaxos.wire.codec import FRAME_BYTES_MAX, CodecError
from sdpaxos.wire.framing import Framer, frame

__all__ = [
    "HELLO_TIMEOUT_S",
    "SEND_BUFFER_BYTES_MAX",
    "Connection",
    "ConnectionOwner",
]

logger = logging.getLogger(__name__)

#: An accepted connection that says nothing for this long is closed.
HELLO_TIMEOUT_S = 5.0
#: Unsent bytes above which a connection drops new frames (see rule 4).
SEND_BUFFER_BYTES_MAX = 64 << 20
#: Largest frame taken before the hello (a hello is a few dozen bytes).
_HELLO_FRAME_BYTES_MAX = 256


class ConnectionOwner(Protocol):
    """What a :class:`Connection` reports to (the node)."""

    def hello(self, conn: Connection, hello: rf.Hello, identity: tuple[str, int] | None) -> bool:
        """A hello arrived; return False to refuse it (the connection closes)."""
        ...

    def dialed(self, conn: Connection) -> bool:
        """A connection we dialled is up (TLS handshake done); False refuses it."""
        ...

    def frame(self, conn: Connection, payload: bytes) -> None:
        """One frame after the hello; raise ``CodecError``/``FrameError`` to refuse it."""
        ...

    def closed(self, conn: Connection) -> None:
        """The connection is gone (whichever side closed it)."""
        ...

    def reject(self, conn: Connection, reason: str) -> None:
        """A frame was refused (counted and logged by the owner)."""
        ...


class Connection(asyncio.Protocol):
    """One end of a framed stream. ``dialed``: the hello to send first, if we dialled."""

    def __init__(
        self, owner: ConnectionOwner, dialed: rf.Hello | None = None, peer_id: int = -1
    ) -> None:
        self.owner = owner
        self.dialed = dialed
        self.transport: asyncio.Transport | None = None
        self.framer = Framer(FRAME_BYTES_MAX)
        #: Set by the owner once the hello is accepted: ("node" | "client", id).
        self.kind: rf.Kind | None = None
        self.peer_id = peer_id
        self.identity: tuple[str, int] | None = None
        self.open = False
        self.frames_dropped = 0
        self.frames_received = 0
        self.bytes_sent = 0
        self._hello_timer: asyncio.TimerHandle | None = None
        #: Frames queued in this loop turn (written together by :meth:`flush`).
        self.out: list[bytes] = []
        self.paused = False
        #: Requests of this (client) connection not answered yet.
        self.pending = 0
        #: Answers to this client gathered in the current flush.
        self.answers: list[rf.Reply] = []
        #: When the frames now arriving from this peer are due on this
        #: process's clock (the delay emulator's last DUE mark; 0: no mark).
        self.due_s = 0.0

    # --------------------------------------------------------------- asyncio

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)
        self.open = True
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.identity = peer_identity(transport.get_extra_info("ssl_object"))
        if self.dialed is not None:
            self.transport.write(frame(rf.encode_runtime(self.dialed)))
            if not self.owner.dialed(self):
                self.close()
        else:
            loop = asyncio.get_running_loop()
            self._hello_timer = loop.call_later(HELLO_TIMEOUT_S, self._hello_timeout)

    def data_received(self, data: bytes) -> None:
        framer = self.framer
        try:
            framer.feed(data)
            if self.kind is None and self.dialed is None and not self._take_hello():
                return
            owner_frame = self.owner.frame
            while self.open:
                payload = framer.next_frame()
                if payload is None:
                    break
                self.frames_received += 1
                owner_frame(self, payload)
        except (CodecError, rf.FrameError) as exc:
            self.refuse(str(exc))
        except Exception as exc:  # a bug of ours: never let a peer's frame crash the node
            logger.exception("error handling a frame from %s", self.describe())
            self.refuse(f"internal error: {type(exc).__name__}: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        was_open = self.open
        if was_open and self.framer.buffered_bytes:
            # The peer left in the middle of a frame: a truncated frame (rule 3).
            self.owner.reject(self, f"truncated frame: {self.framer.buffered_bytes} bytes at close")
        self.open = False
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        if was_open or self.kind is not None:
            self.owner.closed(self)

    def pause_writing(self) -> None:  # the kernel buffer is full: the owner sees it by size
        pass

    def resume_writing(self) -> None:
        pass

    # ---------------------------------------------------------------- helpers

    def _take_hello(self) -> bool:
        if self.framer.buffered_bytes > _HELLO_FRAME_BYTES_MAX + 4 and self._peek_len() > (
            _HELLO_FRAME_BYTES_MAX
        ):
            raise rf.FrameError("first frame is too large to be a hello")
        payload = self.framer.next_frame()
        if payload is None:
            return False
        if len(payload) > _HELLO_FRAME_BYTES_MAX:
            raise rf.FrameError("first frame is too large to be a hello")
        hello = rf.decode_runtime(payload)
        if not isinstance(hello, rf.Hello):
            raise rf.FrameError(f"expected a hello first, got {type(hello).__name__}")
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None
        if not self.owner.hello(self, hello, self.identity):
            self.close()
            return False
        return True

    def _peek_len(self) -> int:
        buf = self.framer._buffer
        off = self.framer._offset
        return int.from_bytes(buf[off : off + 4], "big")

    def _hello_timeout(self) -> None:
        self._hello_timer = None
        if self.kind is None and self.open:
            self.owner.reject(self, "no hello in time")
            self.close()

    def refuse(self, reason: str) -> None:
        """Count and log ``reason``, and close: the rule for every bad frame."""
        if not self.open:
            return
        self.owner.reject(self, reason)
        self.close()

    def send(self, payload: bytes) -> None:
        """Queue one frame for this loop turn's write (see :meth:`flush`)."""
        self.out.append(frame(payload))

    def flush(self) -> None:
        """Write the frames queued in this turn, as one write (or drop them, rule 4)."""
        out = self.out
        if not out:
            return
        self.out = []
        self.write(b"".join(out) if len(out) > 1 else out[0], len(out))

    def write(self, data: bytes, frames: int = 1) -> None:
        """Write already-framed bytes now (the delay emulator's timers call this)."""
        transport = self.transport
        if transport is None or not self.open:
            self.frames_dropped += frames
            return
        if transport.get_write_buffer_size() > SEND_BUFFER_BYTES_MAX:
            self.frames_dropped += frames
            return
        transport.write(data)
        self.bytes_sent += len(data)

    def buffered_bytes(self) -> int:
        transport = self.transport
        return transport.get_write_buffer_size() if transport is not None and self.open else 0

    def pause_reading(self) -> None:
        if self.transport is not None and self.open and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and self.open and self.paused:
            self.paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None and self.open:
            self.open = False
            self.transport.close()
            if self.kind is not None:
                self.owner.closed(self)
                self.kind = None

    def describe(self) -> str:
        peer: Any = None
        if self.transport is not None:
            peer = self.transport.get_extra_info("peername")
        who = f"{self.kind.name.lower()} {self.peer_id}" if self.kind is not None else "unknown"
        return f"{who} at {peer}"
