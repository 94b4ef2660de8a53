"""The runtime's frames: every kind round-trips, and the decoder is strict."""

from __future__ import annotations

import msgpack
import pytest

from sdpaxos.runtime import frames as rf

ALL = [
    rf.Hello(rf.Kind.NODE, 2),
    rf.Hello(rf.Kind.CLIENT, 7),
    rf.Ping(12.5),
    rf.Pong(12.5, 40),
    rf.Submit(1, 99, 3, b"payload", b"key", 1),
    rf.Submit(2, 99, 0, b"", None, 0),
    rf.Read(3, None, b"request"),
    rf.Read(3, b"k", None, True),
    rf.Status(4),
    rf.Admin(5, "partition", "0|1,2"),
    rf.SubmitMany((rf.Submit(6, 1, 1, b"a", None, 0), rf.Submit(7, 2, 1, b"b", b"k", 1))),
    rf.Reply(8, rf.Code.EXECUTED, b"result"),
    rf.ReplyMany((rf.Reply(9, rf.Code.READY, None), rf.Reply(10, rf.Code.RETRY, "busy"))),
]


@pytest.mark.parametrize("frame", ALL, ids=lambda f: type(f).__name__)
def test_every_frame_round_trips(frame):
    assert rf.decode_runtime(rf.encode_runtime(frame)) == frame


def _raw(body):
    return bytes([rf.RUNTIME_PREFIX]) + msgpack.packb(body, use_bin_type=True)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ([14, []], "non-empty array of items"),
        ([11, 1, None, None], "tag 11 needs 5 items"),
        ([11, 1, None, None, 1], "stale must be true or false"),
        ([14, [[1, 2, 3]]], "array of 6"),
        ([14, [[1, 2, 3, "text", None, 0]]], "payload must be bytes"),
        ([14, [[1, 2, 3, b"x", None, 2]]], "wait must be 0 or 1"),
        ([14, [[1, -2, 3, b"x", None, 0]]], "client id"),
        ([14, [[k, 1, 1, b"x", None, 0] for k in range(rf.MANY_ITEMS_MAX + 1)]], "malformed"),
        ([21, [[1, 99, None]]], "unknown reply code"),
        ([21, [1, 2, 3]], "array of 3"),
        ([1, float("inf")], "finite"),
        ([99, 1], "unknown runtime frame tag"),
        ([10, 1, 2, 3], "needs 7 items"),
    ],
)
def test_the_decoder_refuses_with_a_reason(body, match):
    with pytest.raises(rf.FrameError, match=match):
        rf.decode_runtime(_raw(body))


def test_a_submit_many_item_is_checked_like_a_submit():
    big = b"x" * (rf.COMMAND_BYTES_MAX + 1)
    with pytest.raises(rf.FrameError):
        rf.decode_runtime(_raw([10, 1, 2, 3, big, None, 0]))
    with pytest.raises(rf.FrameError):
        rf.decode_runtime(_raw([14, [[1, 2, 3, big, None, 0]]]))
