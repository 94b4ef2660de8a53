"""Durable records round-trip through their codec, and bad bytes are refused clearly."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpaxos.core.messages import StragglerPoll
from sdpaxos.core.storage import CAccepted, CPromised, OAccepted, ViewEstablished, ViewPromised
from sdpaxos.core.types import Command
from sdpaxos.wire.codec import CodecError, encode
from sdpaxos.wire.records import RECORD_TYPES, decode_record, encode_record

_ints = st.integers(0, 2**40)
_commands = st.lists(
    st.builds(Command, st.integers(0, 2**40), st.integers(0, 2**40), st.binary(max_size=16)),
    max_size=4,
).map(tuple)
_values = st.lists(st.tuples(st.integers(-1, 6), st.integers(0, 16)), max_size=5).map(tuple)
RECORDS = st.one_of(
    st.builds(CAccepted, _ints, _ints, _ints, _commands),
    st.builds(OAccepted, _ints, _ints, _values),
    st.builds(CPromised, _ints, _ints, _ints),
    st.builds(ViewPromised, _ints),
    st.builds(ViewEstablished, _ints, _ints, _ints, _values),
)


def test_every_record_class_has_a_tag() -> None:
    assert set(RECORD_TYPES) == {CAccepted, OAccepted, CPromised, ViewPromised, ViewEstablished}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(record=RECORDS)
def test_every_record_round_trips(record: object) -> None:
    assert decode_record(encode_record(record)) == record  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(record=RECORDS, cut=st.integers(0, 200), noise=st.binary(max_size=8))
def test_truncated_or_garbled_bytes_raise_codec_error_only(
    record: object, cut: int, noise: bytes
) -> None:
    data = encode_record(record)  # type: ignore[arg-type]
    for bad in (data[: cut % len(data)], data + noise if noise else data + b"\x00"):
        with pytest.raises(CodecError):
            decode_record(bad)


def test_a_message_is_not_a_record_and_a_record_not_a_message() -> None:
    with pytest.raises(CodecError, match="not a durable record"):
        encode_record(StragglerPoll(1, 2))  # type: ignore[arg-type]
    with pytest.raises(CodecError, match="record tag"):
        decode_record(b"\x01" + b"\x92\x63\x01")  # [99, 1]
    with pytest.raises(CodecError):
        decode_record(encode(StragglerPoll(1, 2)))  # tag 17: no such record
    with pytest.raises(CodecError):
        encode_record(ViewPromised(1.5))  # type: ignore[arg-type]
