"""The runtime's frames: every kind round-trips, and the decoder is strict."""

from __future__ import annotations

import msgpack
import pytest

from sdpaxos.runtime import frames as rf

ALL = [
    rf.Hello(rf.Kind.NODE, 2),
    rf.Hello(rf.Kind.CLIENT, 7),
    rf.Hello(rf.Kind.NODE, 3, "multipaxos"),
    rf.Hello(rf.Kind.NODE, 4, None, "sdpaxos-cluster/0123456789ab"),
    rf.Hello(rf.Kind.NODE, 5, "epaxos", "east/0123456789ab"),
    rf.Ping(12.5),
    rf.Pong(12.5, 40),
    rf.Due(100.25, 100.5, 12345),
    rf.Due(7.0, 7.0, (1 << 64) - 1),
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
        ([3, 10.0, 9.5, 1], r"due: -0.5 s after sending is not in \[0, 86400\]"),
        ([3, 0.0, rf.DUE_AHEAD_S_MAX + 1, 1], "is not in"),
        ([3, 0.0, float("nan"), 1], "due: due must be a finite number"),
        ([3, "now", 1.0, 1], "due: sent must be a finite number"),
        ([3, 0.0, 1.0, -1], "due: clock must be an unsigned 64-bit integer"),
        ([3, 0.0, 1.0, 1.5], "due: clock must be an unsigned 64-bit integer"),
        ([3, 0.0, 1.0], "tag 3 needs 4 items"),
        ([99, 1], "unknown runtime frame tag"),
        ([0, "sdpaxos", 1, 0, 2, None, 7], "hello: cluster 7 is not a short string"),
        ([0, "sdpaxos", 1, 0, 2, None, ""], "hello: cluster '' is not a short string"),
        ([0, "sdpaxos", 1, 0, 2, None, "x" * 97], "is not a short string"),
        ([0, "sdpaxos", 1, 0, 2, None, "c", 1], "tag 0 needs 5 items, got 8"),
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


_U64_MAX = (1 << 64) - 1
_GOOD_SUBMIT = [1, 99, 3, b"payload", b"key", 1]


@pytest.mark.parametrize(
    ("index", "bad", "match"),
    [
        (0, -1, "request id"),
        (0, 1.0, "request id"),
        (1, True, "client id"),
        (1, -5, "client id"),
        (2, -1, "seq"),
        (2, "3", "seq"),
        (3, "text", "payload must be bytes"),
        (3, b"x" * (rf.COMMAND_BYTES_MAX + 1), "payload of"),
        (4, "key", "key must be bytes or nil"),
        (4, b"k" * (rf.KEY_BYTES_MAX + 1), "key of"),
        (5, 2, "wait must be 0 or 1"),
        (5, True, "wait must be 0 or 1"),
    ],
)
def test_every_submit_field_is_checked_alone_and_in_a_batch(index, bad, match):
    item = list(_GOOD_SUBMIT)
    item[index] = bad
    for body in ([10, *item], [14, [_GOOD_SUBMIT, item]]):
        with pytest.raises(rf.FrameError, match=match):
            rf.decode_runtime(_raw(body))


def test_submits_at_the_limits_decode_as_submits():
    items = [
        [0, 1, 0, b"", None, 0],
        [_U64_MAX, _U64_MAX, _U64_MAX, b"x" * rf.COMMAND_BYTES_MAX, b"k" * rf.KEY_BYTES_MAX, 1],
    ]
    for item in items:
        one = rf.decode_runtime(_raw([10, *item]))
        assert type(one) is rf.Submit and list(one) == item
    many = rf.decode_runtime(_raw([14, items]))
    assert isinstance(many, rf.SubmitMany)
    assert [type(s) for s in many.items] == [rf.Submit, rf.Submit]
    assert [list(s) for s in many.items] == items


def test_the_slow_submit_checker_never_accepts_what_the_fast_one_refused() -> None:
    """``_submit_refused`` only explains a refusal: given items the fast checks
    would pass (were they ever to disagree), it still refuses, never builds."""
    from sdpaxos.runtime.frames import _submit_refused

    with pytest.raises(rf.FrameError, match="malformed submit"):
        _submit_refused((1, 2, 3, b"payload", None, 0))
    with pytest.raises(rf.FrameError, match="client id"):
        _submit_refused((1, -2, 3, b"payload", None, 0))
