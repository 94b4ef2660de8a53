"""Tests of :mod:`sdpaxos.wire.codec`: exact round trips, stable tags, strict decoding.

Strategies are built from each message class's dataclass fields and type
hints, so a class appended to ``MESSAGE_TYPES`` is covered without touching
this file (except for one golden encoding, which pins its tag).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpaxos.core.messages import (
    MESSAGE_TYPES,
    CAccept,
    CAck,
    CCommit,
    CPrepare,
    CPromise,
    CRequest,
    Heartbeat,
    LearnRequest,
    LeaseGrant,
    Message,
    NewView,
    OAccept,
    OAck,
    OCommit,
    RReply,
    RReplyBatch,
    RRequest,
    RRequestBatch,
    SequencerHandover,
    SnapshotChunk,
    SnapshotRequest,
    StragglerPoll,
    StragglerVote,
    Vote,
    VRequest,
)
from sdpaxos.core.reads import ASK_BASE_END
from sdpaxos.core.types import NO_CL_VALUE, Command, make_ballot
from sdpaxos.wire import codec
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

#: Determinism (derandomize) comes from the shared profile in tests/conftest.py;
#: the fuzz tests here are cheap, so they run at least 100 examples in any profile.
EXAMPLES = settings(max_examples=max(100, settings().max_examples))

#: msgpack's integer range: what the codec must carry exactly.
INT_MIN = -(2**63)
INT_MAX = 2**64 - 1


# --------------------------------------------------------------------------
# Generic strategies from type hints.
# --------------------------------------------------------------------------


def strategy_for(annotation: Any) -> st.SearchStrategy[Any]:
    """A strategy for values of ``annotation``; raises TypeError for unknown shapes."""
    supertype = getattr(annotation, "__supertype__", None)
    if supertype is not None:  # an id NewType (Slot, View, ...): its integer
        return strategy_for(supertype)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.one_of(st.integers(-3, 300), st.integers(INT_MIN, INT_MAX))
    if annotation is bytes:
        return st.binary(max_size=40)
    if annotation is type(None):
        return st.none()
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        return st.one_of([strategy_for(arg) for arg in args])
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=6).map(tuple)
        return st.tuples(*(strategy_for(arg) for arg in args))
    if isinstance(annotation, type) and issubclass(annotation, tuple):
        # A named tuple (Command, VoteEntry, OCommitEntry): built as one; the
        # entries travel as plain arrays, a Command as its fields.
        hints = typing.get_type_hints(annotation)
        fields = (strategy_for(hints[name]) for name in annotation._fields)
        return st.tuples(*fields).map(annotation._make)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)
        fields = {f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(annotation)}
        return st.builds(annotation, **fields)
    raise TypeError(f"no test strategy for {annotation!r}: extend strategy_for")


def message_strategy(cls: type) -> st.SearchStrategy[Any]:
    return strategy_for(cls)


any_message: st.SearchStrategy[Any] = st.one_of([message_strategy(c) for c in MESSAGE_TYPES])


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda c: c.__name__)
def test_every_message_class_has_a_strategy(cls: type) -> None:
    assert isinstance(message_strategy(cls), st.SearchStrategy)


# --------------------------------------------------------------------------
# Round trips.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", MESSAGE_TYPES, ids=lambda c: c.__name__)
@given(data=st.data())  # The profile's example count, times the number of classes.
def test_round_trip(cls: type, data: st.DataObject) -> None:
    msg = data.draw(message_strategy(cls))
    encoded = encode(msg)
    assert encoded[0] == VERSION
    decoded = decode(encoded)
    assert type(decoded) is cls
    assert decoded == msg
    # Equality already tells tuples from lists; this also pins canonical bytes.
    assert encode(decoded) == encoded


@EXAMPLES
@given(st.lists(any_message, max_size=12))
def test_batch_round_trip(msgs: list[Message]) -> None:
    decoded = decode_batch(encode_batch(msgs))
    assert decoded == msgs
    assert [type(m) for m in decoded] == [type(m) for m in msgs]


def test_empty_batch_round_trips() -> None:
    assert decode_batch(encode_batch([])) == []


def test_extreme_ints_round_trip() -> None:
    for value in (INT_MIN, -1, 0, 127, 128, 2**32, 2**63, INT_MAX):
        msg = OAck(src=value, view=value, upto=value)
        assert decode(encode(msg)) == msg


def test_ask_ids_round_trip_up_to_2_63() -> None:
    """A reader's R-requests travel under its ask ids (``sdpaxos.core.reads``),
    which start below ``ASK_BASE_END`` and stay below 2**63: they cross exactly."""
    ids = (0, ASK_BASE_END - 1, ASK_BASE_END, 2**63 - 1)
    for msg in (
        RRequestBatch(src=1, view=4, read_ids=ids, keys=(b"k", b"", b"k", b"k")),
        RReplyBatch(src=0, view=4, read_ids=ids, slots=(1, -1, 2**62, 3), oks=(True,) * 4),
        RRequest(src=1, view=4, read_id=2**63 - 1, key=b"k"),
        RReply(src=0, view=4, read_id=2**63 - 1, slot=7, ok=False),
    ):
        assert decode(encode(msg)) == msg
        assert decode_batch(encode_batch([msg, msg])) == [msg, msg]


# --------------------------------------------------------------------------
# Golden encodings: pin every tag and the field order.
# --------------------------------------------------------------------------

GOLDEN: list[tuple[Message, str]] = [
    (
        CAccept(
            src=1,
            view=2,
            owner=3,
            index=4,
            ballot=make_ballot(1, 3),
            commands=(Command(7, 1, b"set k v"), Command(0, 0, b"")),
        ),
        "01970001020304cd0103" + "92930701c407736574206b2076930000c400",
    ),
    (CAck(src=1, view=2, owner=3, index=4, ballot=5), "0196010102030405"),
    (CCommit(src=3, view=2, owner=3, index=40, ballot=0, commands=None), "01970203020328" + "00c0"),
    (
        CCommit(src=3, view=2, owner=3, index=40, ballot=0, commands=(Command(1, 2, b"x"),)),
        "01970203020328" + "0091930102c40178",
    ),
    (
        CRequest(src=2, view=1, owner=2, index=9, o_accepted_upto=17, keys=(b"k1", b"")),
        "019703020102091192c4026b31c400",
    ),
    (
        CAccept(src=1, view=0, owner=1, index=3, ballot=1, commands=(Command(7, 1, b"v", b"k"),)),
        "019700010001030191940701c40176c4016b",
    ),
    (
        OAccept(
            src=0, view=1, start=100, values=((1, 1), (2, 3), NO_CL_VALUE), base=96, rebuilt=False
        ),
        "019704000164" + "93920101920203" + "92ff00" + "60" + "c2",
    ),
    (OAck(src=4, view=1, upto=103), "0194050401" + "67"),
    (
        OCommit(src=1, view=1, entries=((100, 1, 1, 1), (101, 1, 1, 2))),
        "0194060101" + "92" + "9464010101" + "9465010102",
    ),
    (
        LearnRequest(src=2, view=1, o_from=-1, c_wanted=((0, 5), (1, 6))),
        "0195070201ff" + "929200059201" + "06",
    ),
    (
        Heartbeat(
            src=0, view=3, o_len=120, stamp=9001, base=7, majority_executed=5, keys_wanted=False
        ),
        "019808000378cd23290705c2",
    ),
    (LeaseGrant(src=2, view=3, stamp=9001, executed=56), "0195090203cd232938"),
    (VRequest(src=1, view=4, o_from=57), "01940a010439"),
    (
        Vote(
            src=2,
            view=4,
            o_from=57,
            entries=((57, 3, 1, 1), (58, 3, -1, 0)),
            c_max=(10, -1, 4),
            est_view=3,
            est_seq=0,
            est_base=57,
            executed=56,
            snapshot=50,
        ),
        "019b0b020439" + "929439030101943a03ff00" + "930aff04" + "0300" + "39" + "38" + "32",
    ),
    (NewView(src=1, view=4, start=57, values=((1, 1), (2, 2))), "01950c010439" + "92920101920202"),
    (
        CPrepare(src=4, view=4, owner=2, start=10, end=12, ballot=make_ballot(1, 4)),
        "01970d0404020a0ccd0104",
    ),
    (
        CPromise(
            src=3,
            view=4,
            owner=2,
            start=10,
            ballot=260,
            ok=True,
            promised=260,
            ballots=(2, -1),
            values=((Command(5, 1, b"put"),), None),
            committed=(True, False),
            compacted=10,
        ),
        "019c0e0304020acd0104c3cd0104" + "9202ff" + "9291930501c403707574c0" + "92c3c2" + "0a",
    ),
    (RRequest(src=1, view=4, read_id=77, key=b"k1"), "01950f01044dc4026b31"),
    (RReply(src=0, view=4, read_id=77, slot=120, ok=True), "01961000044d78c3"),
    (StragglerPoll(src=1, view=4), "0193110104"),
    (StragglerVote(src=2, view=4, agree=False), "0194120204c2"),
    (SequencerHandover(src=0, view=4, target=2), "019413000402"),
    (SnapshotRequest(src=1, view=4, slot=120, offset=0), "01951401047800"),
    (
        SnapshotChunk(src=2, view=4, slot=120, offset=3, total=9, data=b"abc"),
        "0197150204780309c403616263",
    ),
    (
        RRequestBatch(src=1, view=4, read_ids=(77, 78), keys=(b"k1", b"")),
        "0195160104" + "924d4e" + "92c4026b31c400",
    ),
    (
        RReplyBatch(src=0, view=4, read_ids=(77, 78), slots=(120, -1), oks=(True, False)),
        "0196170004" + "924d4e" + "9278ff" + "92c3c2",
    ),
]


def test_golden_covers_every_message_class() -> None:
    missing = set(MESSAGE_TYPES) - {type(msg) for msg, _ in GOLDEN}
    assert not missing, f"add a golden encoding to GOLDEN for {sorted(c.__name__ for c in missing)}"


@pytest.mark.parametrize(("msg", "golden_hex"), GOLDEN, ids=lambda v: type(v).__name__)
def test_golden_encoding(msg: Message, golden_hex: str) -> None:
    golden = bytes.fromhex(golden_hex)
    assert encode(msg).hex() == golden_hex
    assert decode(golden) == msg
    assert msgpack.unpackb(golden[1:])[0] == MESSAGE_TYPES.index(type(msg))


@pytest.mark.parametrize(("msg", "golden_hex"), GOLDEN, ids=lambda v: type(v).__name__)
def test_each_field_is_type_checked(msg: Message, golden_hex: str) -> None:
    """Every field of every class rejects a float, and ints and bools do not mix."""
    wire = list(msgpack.unpackb(bytes.fromhex(golden_hex)[1:]))
    for position, field in enumerate(dataclasses.fields(msg), start=1):
        value = getattr(msg, field.name)
        wrong: list[object] = [0.5]
        if type(value) is int:
            wrong.append(True)
        elif type(value) is bool:
            wrong.append(int(value))
        for bad in wrong:
            mutated = [*wire[:position], bad, *wire[position + 1 :]]
            with pytest.raises(CodecError, match=rf"{type(msg).__name__}\.{field.name}\b"):
                decode(_packed(mutated))


# --------------------------------------------------------------------------
# Malformed input: CodecError, never anything else, never a partial object.
# --------------------------------------------------------------------------


def _packed(obj: object) -> bytes:
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return bytes([VERSION]) + packed


def _check_decode_is_safe(data: bytes) -> None:
    """``decode`` raises CodecError or returns a valid, re-encodable message."""
    try:
        msg = decode(data)
    except CodecError:
        return
    assert type(msg) in MESSAGE_TYPES
    assert decode(encode(msg)) == msg


def _check_decode_batch_is_safe(data: bytes) -> None:
    try:
        msgs = decode_batch(data)
    except CodecError:
        return
    assert all(type(m) in MESSAGE_TYPES for m in msgs)
    assert decode_batch(encode_batch(msgs)) == msgs


MALFORMED: list[tuple[str, bytes, str]] = [
    ("empty", b"", "empty"),
    ("version only", bytes([VERSION]), "malformed msgpack"),
    ("version 0", b"\x00" + encode(CAck(1, 2, 3, 4, 5))[1:], "version"),
    ("version 2", b"\x02" + encode(CAck(1, 2, 3, 4, 5))[1:], "version"),
    ("not an array", _packed(5), "expected a non-empty array"),
    ("empty array", _packed([]), "expected a non-empty array"),
    ("nil tag", _packed([None, 1, 2, 3, 4, 5]), "unknown message tag"),
    ("bool tag", _packed([True, 1, 2, 3, 4, 5]), "unknown message tag"),
    ("float tag", _packed([1.0, 1, 2, 3, 4, 5]), "unknown message tag"),
    ("negative tag", _packed([-1, 1, 2, 3, 4, 5]), "unknown message tag"),
    ("tag past the end", _packed([len(MESSAGE_TYPES), 1, 2]), "unknown message tag"),
    ("too few fields", _packed([1, 1, 2, 3, 4]), "has 5 fields, got 4"),
    ("too many fields", _packed([1, 1, 2, 3, 4, 5, 6]), "has 5 fields, got 6"),
    ("str field", _packed([1, 1, 2, "x", 4, 5]), "malformed msgpack"),
    ("bin in int field", _packed([1, 1, 2, b"x", 4, 5]), "CAck.owner"),
    ("bool in int field", _packed([1, 1, 2, 3, 4, False]), "CAck.ballot"),
    ("float in int field", _packed([1, 1, 1.5, 3, 4, 5]), "CAck.view"),
    ("nil in int field", _packed([1, None, 2, 3, 4, 5]), "CAck.src"),
    ("array in int field", _packed([5, [1], 2, 3]), "OAck.src"),
    ("map", _packed({b"k": 1}), "malformed msgpack"),
    ("map in field", _packed([5, 1, 2, {b"k": 1}]), "malformed msgpack"),
    ("ext type", _packed([5, 1, 2, msgpack.ExtType(1, b"abc")]), "malformed msgpack"),
    ("nil commands in C-accept", _packed([0, 1, 2, 3, 4, 5, None]), "CAccept.commands"),
    ("commands not an array", _packed([0, 1, 2, 3, 4, 5, 7]), "CAccept.commands"),
    ("command too short", _packed([0, 1, 2, 3, 4, 5, [[1, b"x"]]]), "CAccept.commands"),
    ("command too long", _packed([0, 1, 2, 3, 4, 5, [[1, 2, b"x", 4]]]), "CAccept.commands"),
    ("payload not bin", _packed([0, 1, 2, 3, 4, 5, [[1, 2, 3]]]), "CAccept.commands"),
    ("bool client id", _packed([2, 1, 2, 3, 4, 5, [[True, 2, b"x"]]]), "CCommit.commands"),
    ("command not an array", _packed([2, 1, 2, 3, 4, 5, [b"abc"]]), "CCommit.commands"),
    ("O-value of 3", _packed([4, 1, 2, 3, [[1, 2, 3]], 0, False]), "OAccept.values"),
    ("O-value of bin", _packed([4, 1, 2, 3, [b"ab"], 0, False]), "OAccept.values"),
    ("O-value with bool", _packed([4, 1, 2, 3, [[1, True]], 0, False]), "OAccept.values"),
    ("range flag not bool", _packed([4, 1, 2, 3, [[1, 1]], 0, 1]), "OAccept.rebuilt"),
    ("O-commit entry of 3", _packed([6, 1, 2, [[1, 2, 3]]]), "OCommit.entries"),
    ("O-commit entry with nil", _packed([6, 1, 2, [[1, 0, 2, None]]]), "OCommit.entries"),
    ("c_wanted not an array", _packed([7, 1, 2, 3, None]), "LearnRequest.c_wanted"),
    ("read ids not an array", _packed([22, 1, 2, 77, [b"k"]]), "RRequestBatch.read_ids"),
    ("bool read id", _packed([22, 1, 2, [77, True], [b"k", b""]]), "RRequestBatch.read_ids"),
    ("nil read id", _packed([22, 1, 2, [None], [b"k"]]), "RRequestBatch.read_ids"),
    ("key not bin", _packed([22, 1, 2, [77], [7]]), "RRequestBatch.keys"),
    ("keys nil", _packed([22, 1, 2, [77], None]), "RRequestBatch.keys"),
    ("str key", _packed([22, 1, 2, [77], ["k"]]), "malformed msgpack"),
    ("R-reply slot not int", _packed([23, 1, 2, [77], [b"x"], [True]]), "RReplyBatch.slots"),
    ("R-reply int verdict", _packed([23, 1, 2, [77], [1], [1]]), "RReplyBatch.oks"),
    ("R-reply bool slot", _packed([23, 1, 2, [77], [False], [True]]), "RReplyBatch.slots"),
    ("R-reply nested ids", _packed([23, 1, 2, [[77]], [1], [True]]), "RReplyBatch.read_ids"),
    ("trailing byte", encode(CAck(1, 2, 3, 4, 5)) + b"\x00", "malformed msgpack"),
    ("two messages", encode(OAck(1, 2, 3)) + encode(OAck(1, 2, 3))[1:], "malformed msgpack"),
    ("reserved byte 0xc1", bytes([VERSION, 0xC1]), "malformed msgpack"),
    ("huge array header", bytes([VERSION, 0xDD, 0xFF, 0xFF, 0xFF, 0xFF]), "malformed msgpack"),
    ("huge bin header", bytes([VERSION, 0x92, 0x05, 0xC6, 0xFF, 0xFF, 0xFF, 0xFF]), "malformed"),
    ("deep nesting", bytes([VERSION]) + b"\x91" * 100_000 + b"\x00", "malformed msgpack"),
]


@pytest.mark.parametrize(
    ("data", "expected"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_malformed_input_raises_codec_error(data: bytes, expected: str) -> None:
    with pytest.raises(CodecError, match=expected):
        decode(data)


def test_codec_error_is_a_value_error() -> None:
    assert issubclass(CodecError, ValueError)


def test_array_over_the_items_limit_is_rejected() -> None:
    values = [[1, 1]] * (ARRAY_ITEMS_MAX + 1)
    with pytest.raises(CodecError, match="max_array_len"):
        decode(_packed([4, 1, 2, 3, values]))


def test_input_over_the_frame_limit_is_rejected() -> None:
    data = _packed([0, 1, 2, 3, 4, 5, [[1, 2, b"x" * FRAME_BYTES_MAX]]])
    assert len(data) > FRAME_BYTES_MAX
    with pytest.raises(CodecError, match="FRAME_BYTES_MAX"):
        decode(data)


@pytest.mark.parametrize("msg", [m for m, _ in GOLDEN], ids=lambda m: type(m).__name__)
def test_every_truncation_raises(msg: Message) -> None:
    encoded = encode(msg)
    for length in range(len(encoded)):
        with pytest.raises(CodecError):
            decode(encoded[:length])


@EXAMPLES
@given(st.binary(max_size=64))
def test_arbitrary_bytes_are_safe(data: bytes) -> None:
    _check_decode_is_safe(data)
    _check_decode_batch_is_safe(data)


@EXAMPLES
@given(st.binary(max_size=64))
def test_arbitrary_bytes_after_the_version_are_safe(data: bytes) -> None:
    _check_decode_is_safe(bytes([VERSION]) + data)
    _check_decode_batch_is_safe(bytes([VERSION]) + data)


#: Arbitrary msgpack values: reach the field checks, which random bytes rarely do.
msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(INT_MIN, INT_MAX)
    | st.floats(allow_nan=False)
    | st.binary(max_size=8),
    lambda children: st.lists(children, max_size=4),
    max_leaves=12,
)


@EXAMPLES
@given(
    st.integers(-1, len(MESSAGE_TYPES)),
    st.lists(msgpack_values, max_size=8),
)
def test_arbitrary_fields_are_safe(tag: int, fields: list[object]) -> None:
    _check_decode_is_safe(_packed([tag, *fields]))


@EXAMPLES
@given(any_message, st.data())
def test_mutated_encodings_are_safe(msg: Message, data: st.DataObject) -> None:
    encoded = bytearray(encode(msg))
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(encoded)))
        action = data.draw(st.sampled_from(["replace", "insert", "delete", "truncate"]))
        byte = data.draw(st.integers(0, 255))
        if action == "replace" and position < len(encoded):
            encoded[position] = byte
        elif action == "insert":
            encoded.insert(position, byte)
        elif action == "delete" and position < len(encoded):
            del encoded[position]
        elif action == "truncate":
            del encoded[position:]
    _check_decode_is_safe(bytes(encoded))


@EXAMPLES
@given(st.lists(any_message, min_size=1, max_size=4), st.data())
def test_mutated_batches_are_safe(msgs: list[Message], data: st.DataObject) -> None:
    encoded = bytearray(encode_batch(msgs))
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] = data.draw(st.integers(0, 255))
    _check_decode_batch_is_safe(bytes(encoded))


# --------------------------------------------------------------------------
# Batches.
# --------------------------------------------------------------------------


def test_single_message_is_not_a_batch() -> None:
    with pytest.raises(CodecError, match="batch message 0"):
        decode_batch(encode(CAck(1, 2, 3, 4, 5)))


def test_batch_is_not_a_single_message() -> None:
    with pytest.raises(CodecError, match="unknown message tag"):
        decode(encode_batch([CAck(1, 2, 3, 4, 5)]))


def test_batch_not_an_array() -> None:
    with pytest.raises(CodecError, match="expected a batch array"):
        decode_batch(_packed(3))


def test_bad_message_in_batch_names_its_index() -> None:
    good = [1, 1, 2, 3, 4, 5]
    with pytest.raises(CodecError, match=r"batch message 2: CAck\.index"):
        decode_batch(_packed([good, good, [1, 1, 2, 3, True, 5], good]))


def test_batch_over_the_message_limit_is_rejected() -> None:
    msgs = [OAck(1, 2, 3)] * (MESSAGES_PER_BATCH_MAX + 1)
    with pytest.raises(CodecError, match="MESSAGES_PER_BATCH_MAX"):
        encode_batch(msgs)
    with pytest.raises(CodecError, match="MESSAGES_PER_BATCH_MAX"):
        decode_batch(_packed([[5, 1, 2, 3]] * (MESSAGES_PER_BATCH_MAX + 1)))
    assert len(decode_batch(encode_batch(msgs[:MESSAGES_PER_BATCH_MAX]))) == MESSAGES_PER_BATCH_MAX


# --------------------------------------------------------------------------
# Encoding refuses what would not round-trip.
# --------------------------------------------------------------------------

BAD_TO_ENCODE: list[tuple[str, object, str]] = [
    ("not a message", 5, "not a message type"),
    ("command, not a message", Command(1, 2, b"x"), "not a message type"),
    ("bool int field", CAck(True, 2, 3, 4, 5), "CAck.src"),
    ("str int field", OAck(1, "2", 3), "OAck.view"),  # type: ignore[arg-type]
    ("int too large", CAck(1, 2, 3, 4, INT_MAX + 1), "out of range"),
    ("int too small", CAck(1, 2, 3, 4, INT_MIN - 1), "out of range"),
    ("list of commands", CAccept(1, 2, 3, 4, 5, [Command(1, 2, b"x")]), "CAccept.commands"),  # type: ignore[arg-type]
    ("str payload", CAccept(1, 2, 3, 4, 5, (Command(1, 2, "x"),)), "CAccept.commands"),  # type: ignore[arg-type]
    ("bool seq", CCommit(1, 2, 3, 4, 5, (Command(1, False, b""),)), "CCommit.commands"),
    ("not a command", CAccept(1, 2, 3, 4, 5, ((1, 2, b"x"),)), "CAccept.commands"),  # type: ignore[arg-type]
    ("O-value of 3", OAccept(1, 2, 3, ((1, 2, 3),), 0, False), "OAccept.values"),  # type: ignore[arg-type]
    ("O-value list", OAccept(1, 2, 3, ([1, 2],), 0, False), "OAccept.values"),  # type: ignore[arg-type]
    ("values list", OAccept(1, 2, 3, [(1, 2)], 0, False), "OAccept.values"),  # type: ignore[arg-type]
    ("bool in entry", OCommit(1, 2, ((1, 0, 2, True),)), "OCommit.entries"),
    ("triple entry", OCommit(1, 2, ((1, 0, 2),)), "OCommit.entries"),  # type: ignore[arg-type]
    ("read ids list", RRequestBatch(1, 2, [77], (b"k",)), "RRequestBatch.read_ids"),  # type: ignore[arg-type]
    ("bool read id", RRequestBatch(1, 2, (True,), (b"k",)), "RRequestBatch.read_ids"),
    ("str key", RRequestBatch(1, 2, (77,), ("k",)), "RRequestBatch.keys"),  # type: ignore[arg-type]
    ("None key", RRequestBatch(1, 2, (77,), (None,)), "RRequestBatch.keys"),  # type: ignore[arg-type]
    ("int verdict", RReplyBatch(1, 2, (77,), (3,), (1,)), "RReplyBatch.oks"),  # type: ignore[arg-type]
    ("float slot", RReplyBatch(1, 2, (77,), (3.0,), (True,)), "RReplyBatch.slots"),  # type: ignore[arg-type]
    ("huge read id", RRequestBatch(1, 2, (INT_MAX + 1,), (b"k",)), "out of range"),
    (
        "too many read ids",
        RRequestBatch(1, 2, (0,) * (ARRAY_ITEMS_MAX + 1), ()),
        "RRequestBatch.read_ids",
    ),
    (
        "too large",
        CAccept(1, 2, 3, 4, 5, (Command(1, 2, b"x" * FRAME_BYTES_MAX),)),
        "FRAME_BYTES_MAX",
    ),
]


@pytest.mark.parametrize(
    ("msg", "expected"), [b[1:] for b in BAD_TO_ENCODE], ids=[b[0] for b in BAD_TO_ENCODE]
)
def test_encode_rejects_what_would_not_round_trip(msg: Any, expected: str) -> None:
    with pytest.raises(CodecError, match=expected):
        encode(msg)
    with pytest.raises(CodecError, match=expected):
        encode_batch([OAck(1, 2, 3), msg])
    # A failed encode leaves the shared packer clean.
    assert encode(GOLDEN[1][0]).hex() == GOLDEN[1][1]


# --------------------------------------------------------------------------
# Extension: a new class needs no codec change; a new field type fails loudly.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _NewMessage:
    src: int
    view: int
    flags: tuple[bool, ...]
    commands: tuple[Command, ...] | None


@dataclasses.dataclass(frozen=True, slots=True)
class _NewFieldType:
    src: int
    view: int
    ratio: float


def test_a_new_class_compiles_from_its_fields_alone() -> None:
    to_wire, from_wire = codec._compile(codec._class_codec(99, _NewMessage))
    msg = _NewMessage(1, 2, (True, False), (Command(1, 2, b"x"),))
    wire = to_wire(msg)
    assert msgpack.unpackb(msgpack.packb(wire), use_list=False) == (
        99,
        1,
        2,
        (True, False),
        ((1, 2, b"x"),),
    )
    decoded: object = from_wire(msgpack.unpackb(msgpack.packb(wire), use_list=False))
    assert decoded == msg


def test_a_new_field_type_fails_at_import_with_a_hint() -> None:
    with pytest.raises(TypeError, match=r"_NewFieldType\.ratio: no wire codec .*_FIELD_CODECS"):
        codec._class_codec(99, _NewFieldType)


def test_decoded_commands_are_commands_with_or_without_a_key() -> None:
    """The decoder builds each Command from the array msgpack gave (no named-tuple
    constructor): it must still be a ``Command`` whose missing key reads None."""
    sent = (Command(7, 1, b"v", b"k"), Command(8, 2, b"w"))
    msg = CAccept(src=1, view=0, owner=1, index=3, ballot=1, commands=sent)
    got = decode(encode(msg))
    assert isinstance(got, CAccept)
    assert [type(c) for c in got.commands] == [Command, Command]
    assert got.commands == sent
    assert got.commands[1].key is None and got.commands[0].key == b"k"
    # On the wire a command without a key is three items, not four with a nil.
    body = msgpack.unpackb(encode(msg)[1:], raw=False)
    assert body[-1] == [[7, 1, b"v", b"k"], [8, 2, b"w"]]
