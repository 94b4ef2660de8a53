"""How a node must take bytes: the fuzzer's judge, with the node's own rules.

Before sending, every frame is judged by :func:`judge` (the same decoders and
the same acceptance rules as the node): ``refused`` (the node must count it and
close the connection), ``incomplete`` (the node waits for the rest; the fuzzer
closes, and the node must count a truncated frame) or ``accepted``. So the
fuzzer knows what to expect, and checks it: every refused frame is answered by
the node closing that connection, and the node's ``frames_rejected`` counter
(read through STATUS) grows by the number of refusals expected.

:func:`judge_hello` does the same for the first bytes of a connection, and
:func:`harmless` says which accepted frames the fuzzer may let the node take.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from sdpaxos.runtime import frames as rf
from sdpaxos.wire.codec import FRAME_BYTES_MAX, VERSION, CodecError, decode_batch
from sdpaxos.wire.framing import Framer

__all__ = ["Verdict", "harmless", "judge", "judge_hello"]

#: Largest hello the node takes (``transport._HELLO_FRAME_BYTES_MAX``).
_HELLO_BYTES_MAX = 256
#: Admin operations the node carries out (anything else is answered with ERROR).
_ADMIN_OPERATIONS = frozenset({"snapshot", "transfer_sequencer", "partition", "emulator"})


class Verdict(enum.Enum):
    """What the node must do with bytes sent after (or as) the hello."""

    #: Count it, log it and close the connection.
    REFUSED = "refused"
    #: Wait for the rest of a frame (counted as truncated when the fuzzer closes).
    INCOMPLETE = "incomplete"
    #: Take every frame.
    ACCEPTED = "accepted"


def _judge_payload(payload: bytes, kind: rf.Kind, peer: int) -> list[object]:
    """The node's rules for one frame after the hello (``Node.frame``), for a
    node without the delay emulator (the fuzzer's), which refuses DUE marks."""
    if kind == rf.Kind.NODE:
        if payload and payload[0] == VERSION:
            msgs = decode_batch(payload)
            for m in msgs:
                if m.src != peer:
                    raise rf.FrameError("wrong src")
            return list(msgs)
        f = rf.decode_runtime(payload)
        if not isinstance(f, (rf.Ping, rf.Pong)):
            raise rf.FrameError(f"a replica may not send {type(f).__name__}")
        return [f]
    f = rf.decode_runtime(payload)
    if not isinstance(f, (rf.Submit, rf.Read, rf.Status, rf.Admin)):
        raise rf.FrameError(f"a client may not send {type(f).__name__}")
    return [f]


def judge(data: bytes, kind: rf.Kind, peer: int) -> tuple[Verdict, list[object]]:
    """How a node must take ``data`` sent after an accepted hello of ``kind``
    (``peer``: the authenticated replica), and the frames it takes first."""
    framer = Framer(FRAME_BYTES_MAX)
    framer.feed(data)
    taken: list[object] = []
    while True:
        try:
            payload = framer.next_frame()
            if payload is None:
                break
            taken += _judge_payload(payload, kind, peer)
        except (CodecError, rf.FrameError):
            return Verdict.REFUSED, taken
    return (Verdict.INCOMPLETE if framer.buffered_bytes else Verdict.ACCEPTED), taken


def judge_hello(
    data: bytes, identity: tuple[str, int] | None, target: int, replicas: int
) -> tuple[Verdict, int]:
    """How a node (``target`` of ``replicas``, TLS on) must take ``data`` as the
    first bytes of a connection whose certificate says ``identity``; and how many
    bytes the hello took (the rest is judged by :func:`judge`)."""
    framer = Framer(FRAME_BYTES_MAX)
    framer.feed(data)
    if framer.buffered_bytes > _HELLO_BYTES_MAX + 4 and int.from_bytes(data[:4], "big") > (
        _HELLO_BYTES_MAX
    ):
        return Verdict.REFUSED, 0
    try:
        payload = framer.next_frame()
    except CodecError:
        return Verdict.REFUSED, 0
    if payload is None:
        return Verdict.INCOMPLETE, 0
    if len(payload) > _HELLO_BYTES_MAX:
        return Verdict.REFUSED, 0
    try:
        hello = rf.decode_runtime(payload)
    except rf.FrameError:
        return Verdict.REFUSED, 0
    if not isinstance(hello, rf.Hello):
        return Verdict.REFUSED, 0
    if hello.kind == rf.Kind.NODE:
        if hello.id >= replicas or hello.id == target or identity != ("node", hello.id):
            return Verdict.REFUSED, 0
    elif identity is None or identity[0] != "client":
        return Verdict.REFUSED, 0
    return Verdict.ACCEPTED, 4 + len(payload)


def harmless(frames: Sequence[object], kind: rf.Kind) -> bool:
    """Frames a fuzzer may let the node take: they change no replicated state."""
    for f in frames:
        if isinstance(f, (rf.Status, rf.Read)) or (kind == rf.Kind.NODE and isinstance(f, rf.Ping)):
            continue
        if isinstance(f, rf.Submit) and (f.client_id == 0 or (f.seq == 0 and f.payload)):
            continue  # refused with an ERROR reply, never proposed
        if isinstance(f, rf.Admin) and f.operation not in _ADMIN_OPERATIONS:
            continue
        return False
    return True
