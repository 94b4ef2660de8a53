"""The codec of results (kvstore.codec): values round-trip, and nothing else
reads back as one."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.codec import decode_value, encode_command, encode_value
from kvstore.values import OK, Error, Simple, Value
from tests.kvstore.store_helpers import (
    INT_MAX,
    INT_MIN,
)

# --- codec -----------------------------------------------------------------------------------


values = st.recursive(
    st.none()
    | st.binary(max_size=8)
    | st.integers(min_value=INT_MIN, max_value=INT_MAX)
    | st.text(max_size=8).map(Simple)
    | st.text(max_size=8).map(Error),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=12,
)


@settings(derandomize=True, max_examples=200)
@given(values)
def test_values_round_trip(value: Value) -> None:
    assert decode_value(encode_value(value)) == value
    # NamedTuples compare equal to tuples, so check the types too.
    assert repr(decode_value(encode_value(value))) == repr(value)


def test_status_and_error_do_not_read_back_as_bulk_strings() -> None:
    assert decode_value(encode_value(OK)) == Simple("OK")
    assert type(decode_value(encode_value(OK))) is Simple
    assert type(decode_value(encode_value(Error("ERR x")))) is Error
    assert type(decode_value(encode_value(b"OK"))) is bytes
    assert encode_value(OK) != encode_value(Error("OK")) != encode_value(b"OK")


@pytest.mark.parametrize("bad", [INT_MAX + 1, INT_MIN - 1, True, 1.5, "text", (b"a",), {b"a": 1}])
def test_encode_value_refuses_what_is_not_a_value(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        encode_value(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        msgpack.packb(1.5),
        msgpack.packb(True),
        msgpack.packb({b"a": 1}),
        msgpack.packb(2**63),
        msgpack.packb(msgpack.ExtType(9, b"x")),
        msgpack.packb(msgpack.ExtType(1, b"\xff")),
        msgpack.packb(None) + b"\x00",
    ],
)
def test_decode_value_refuses_garbage_with_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_value(data)


def test_a_status_reply_travels_as_a_msgpack_string_and_ok_decodes_to_ok_itself() -> None:
    assert encode_value(OK) == msgpack.packb("OK")
    assert decode_value(msgpack.packb("OK")) is OK
    assert decode_value(msgpack.packb("QUEUED")) == Simple("QUEUED")
    assert decode_value(msgpack.packb([b"x", "OK", [None, "PONG"]])) == [
        b"x",
        OK,
        [None, Simple("PONG")],
    ]
    assert type(decode_value(msgpack.packb(b"OK"))) is bytes  # a bulk string stays one


def test_encode_command_refuses_non_bytes() -> None:
    with pytest.raises(TypeError):
        encode_command([b"GET", "k"])  # type: ignore[list-item]
