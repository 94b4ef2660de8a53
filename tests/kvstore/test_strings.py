"""The string commands (kvstore.strings), through the state machine's log
path: Redis 7 semantics and error texts.

Expected answers were checked by hand against ``redis-server`` 7.0.15 (the
tests do not need it)."""

from __future__ import annotations

import pytest

from kvstore import strings
from kvstore.machine import KVStore
from kvstore.values import OK, Error
from tests.kvstore.store_helpers import (
    EXPIRY,
    INT_MAX,
    INT_MIN,
    NOT_INT,
    OVERFLOW,
    SYNTAX,
    run,
)

# --- strings ---------------------------------------------------------------------------------


def test_get_set_and_nil(kv: KVStore) -> None:
    assert run(kv, b"GET", b"k") is None
    assert run(kv, b"SET", b"k", b"v") == OK
    assert run(kv, b"get", b"k") == b"v"
    assert run(kv, b"SET", b"k", b"") == OK
    assert run(kv, b"GET", b"k") == b""  # an empty string is not nil
    assert run(kv, b"SET", b"", b"empty key") == OK
    assert run(kv, b"GET", b"") == b"empty key"


def test_set_nx_xx_get_as_redis_7(kv: KVStore) -> None:
    assert run(kv, b"SET", b"k", b"1", b"XX") is None
    assert run(kv, b"GET", b"k") is None
    assert run(kv, b"SET", b"k", b"1", b"NX") == OK
    assert run(kv, b"SET", b"k", b"2", b"NX") is None
    assert run(kv, b"GET", b"k") == b"1"
    assert run(kv, b"SET", b"k", b"3", b"xx") == OK
    assert run(kv, b"SET", b"k", b"4", b"GET") == b"3"
    assert run(kv, b"SET", b"new", b"x", b"GET") is None
    assert run(kv, b"GET", b"new") == b"x"
    # NX GET is allowed in Redis 7: it answers the old value and sets nothing if one exists.
    assert run(kv, b"SET", b"k", b"5", b"NX", b"GET") == b"4"
    assert run(kv, b"GET", b"k") == b"4"
    assert run(kv, b"SET", b"fresh", b"5", b"nx", b"get") is None
    assert run(kv, b"GET", b"fresh") == b"5"
    assert run(kv, b"SET", b"absent", b"6", b"XX", b"GET") is None
    assert run(kv, b"GET", b"absent") is None
    # Repeating an option is fine; NX with XX is not.
    assert run(kv, b"SET", b"k", b"v", b"get", b"get", b"nx", b"nx") == b"4"
    assert run(kv, b"SET", b"k", b"v", b"NX", b"XX") == SYNTAX
    assert run(kv, b"SET", b"k", b"v", b"XX", b"NX") == SYNTAX
    assert run(kv, b"SET", b"k", b"v", b"bogus") == SYNTAX
    assert run(kv, b"GET", b"k") == b"4"


@pytest.mark.parametrize(
    ("options", "answer"),
    [
        ([b"EX", b"10"], EXPIRY),
        ([b"px", b"10"], EXPIRY),
        ([b"EXAT", b"1700000000"], EXPIRY),
        ([b"PXAT", b"1700000000000"], EXPIRY),
        ([b"KEEPTTL"], EXPIRY),
        ([b"EX", b"1", b"EX", b"2"], EXPIRY),
        ([b"keepttl", b"keepttl"], EXPIRY),
        ([b"NX", b"GET", b"EX", b"5"], EXPIRY),
        # Redis' syntax checks come first: these are syntax errors there too.
        ([b"EX"], SYNTAX),
        ([b"EX", b"1", b"PX", b"2"], SYNTAX),
        ([b"EX", b"1", b"KEEPTTL"], SYNTAX),
        ([b"KEEPTTL", b"PX", b"1"], SYNTAX),
    ],
)
def test_set_expiry_options_are_refused_and_change_nothing(
    kv: KVStore, options: list[bytes], answer: Error
) -> None:
    run(kv, b"SET", b"k", b"old")
    assert run(kv, b"SET", b"k", b"new", *options) == answer
    assert run(kv, b"GET", b"k") == b"old"


def test_incr_family(kv: KVStore) -> None:
    assert run(kv, b"INCR", b"n") == 1
    assert run(kv, b"INCRBY", b"n", b"41") == 42
    assert run(kv, b"DECR", b"n") == 41
    assert run(kv, b"DECRBY", b"n", b"-9") == 50
    assert run(kv, b"INCRBY", b"n", b"-100") == -50
    assert run(kv, b"GET", b"n") == b"-50"
    assert run(kv, b"DECR", b"fresh") == -1
    assert run(kv, b"DECRBY", b"other", b"5") == -5


@pytest.mark.parametrize(
    "value", [b"abc", b"", b" 1", b"1 ", b"+1", b"01", b"-0", b"1.5", b"1e3", b"1_0", b"0x10"]
)
def test_incr_refuses_a_value_redis_would_not_read_as_an_integer(kv: KVStore, value: bytes) -> None:
    run(kv, b"SET", b"k", value)
    assert run(kv, b"INCR", b"k") == NOT_INT
    assert run(kv, b"GET", b"k") == value


def test_incr_boundaries_and_overflow(kv: KVStore) -> None:
    run(kv, b"SET", b"n", str(INT_MAX).encode())
    assert run(kv, b"INCRBY", b"n", b"0") == INT_MAX
    assert run(kv, b"INCR", b"n") == OVERFLOW
    assert run(kv, b"GET", b"n") == str(INT_MAX).encode()
    run(kv, b"SET", b"m", str(INT_MIN).encode())
    assert run(kv, b"DECR", b"m") == OVERFLOW
    assert run(kv, b"INCRBY", b"m", str(INT_MAX).encode()) == -1
    run(kv, b"SET", b"big", b"99999999999999999999")
    assert run(kv, b"INCR", b"big") == NOT_INT
    run(kv, b"SET", b"z", b"0")
    assert run(kv, b"INCRBY", b"z", str(INT_MIN).encode()) == INT_MIN


def test_incrby_argument_errors(kv: KVStore) -> None:
    assert run(kv, b"INCRBY", b"n", b"x") == NOT_INT
    assert run(kv, b"INCRBY", b"n", b"9223372036854775808") == NOT_INT
    assert run(kv, b"INCRBY", b"n", b"00") == NOT_INT
    assert run(kv, b"DECRBY", b"n", b" 1") == NOT_INT
    # Redis 7 refuses to negate LLONG_MIN before looking at the key.
    assert run(kv, b"DECRBY", b"n", str(INT_MIN).encode()) == Error("ERR decrement would overflow")
    assert run(kv, b"EXISTS", b"n") == 0


def test_append_strlen(kv: KVStore) -> None:
    assert run(kv, b"STRLEN", b"k") == 0
    assert run(kv, b"APPEND", b"k", b"ab") == 2
    assert run(kv, b"APPEND", b"k", b"cde") == 5
    assert run(kv, b"APPEND", b"k", b"") == 5
    assert run(kv, b"GET", b"k") == b"abcde"
    assert run(kv, b"STRLEN", b"k") == 5
    assert run(kv, b"APPEND", b"e", b"") == 0
    assert run(kv, b"EXISTS", b"e") == 1  # APPEND creates the key even with nothing


def test_append_refuses_to_grow_past_redis_max_string(
    kv: KVStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(strings, "MAX_STRING", 4)  # 512 MB for real: too big for a test
    assert run(kv, b"APPEND", b"k", b"abc") == 3
    assert run(kv, b"APPEND", b"k", b"d") == 4
    assert run(kv, b"APPEND", b"k", b"e") == Error(
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
    )
    assert run(kv, b"GET", b"k") == b"abcd"


def test_getset_getdel_setnx(kv: KVStore) -> None:
    assert run(kv, b"GETSET", b"k", b"1") is None
    assert run(kv, b"GETSET", b"k", b"2") == b"1"
    assert run(kv, b"GETDEL", b"k") == b"2"
    assert run(kv, b"GETDEL", b"k") is None
    assert run(kv, b"EXISTS", b"k") == 0
    assert run(kv, b"SETNX", b"k", b"a") == 1
    assert run(kv, b"SETNX", b"k", b"b") == 0
    assert run(kv, b"GET", b"k") == b"a"


def test_mget_mset_msetnx(kv: KVStore) -> None:
    assert run(kv, b"MSET", b"a", b"1", b"b", b"2", b"a", b"3") == OK  # the last one wins
    assert run(kv, b"MGET", b"a", b"b", b"c", b"a") == [b"3", b"2", None, b"3"]
    assert run(kv, b"MSETNX", b"c", b"1", b"a", b"9") == 0  # a exists: nothing is set
    assert run(kv, b"EXISTS", b"c") == 0
    assert run(kv, b"MSETNX", b"c", b"1", b"d", b"2", b"c", b"3") == 1
    assert run(kv, b"MGET", b"c", b"d") == [b"3", b"2"]
    arity = Error("ERR wrong number of arguments for 'mset' command")
    assert run(kv, b"MSET", b"a", b"1", b"b") == arity


def test_del_and_exists_count(kv: KVStore) -> None:
    run(kv, b"MSET", b"a", b"1", b"b", b"2")
    assert run(kv, b"EXISTS", b"a", b"a", b"b", b"x") == 3  # duplicates count
    assert run(kv, b"DEL", b"a", b"a", b"x") == 1  # a key is deleted once
    assert run(kv, b"DBSIZE") == 1
    assert run(kv, b"DEL", b"b") == 1
    assert run(kv, b"DBSIZE") == 0


def test_cas(kv: KVStore) -> None:
    assert run(kv, b"CAS", b"k", b"", b"v") == 0  # a missing key never compares equal
    assert run(kv, b"EXISTS", b"k") == 0
    run(kv, b"SET", b"k", b"a")
    assert run(kv, b"CAS", b"k", b"b", b"c") == 0
    assert run(kv, b"GET", b"k") == b"a"
    assert run(kv, b"CAS", b"k", b"a", b"c") == 1
    assert run(kv, b"GET", b"k") == b"c"
    run(kv, b"SET", b"e", b"")
    assert run(kv, b"CAS", b"e", b"", b"full") == 1


def test_flush(kv: KVStore) -> None:
    run(kv, b"MSET", b"a", b"1", b"b", b"2")
    assert run(kv, b"FLUSHDB", b"bogus") == SYNTAX
    assert run(kv, b"FLUSHDB", b"sync", b"x") == SYNTAX
    assert run(kv, b"DBSIZE") == 2
    assert run(kv, b"FLUSHDB", b"ASYNC") == OK
    assert run(kv, b"DBSIZE") == 0
    run(kv, b"SET", b"a", b"1")
    assert run(kv, b"FLUSHALL") == OK
    assert run(kv, b"KEYS", b"*") == []


def test_unknown_commands_and_arity_through_apply(kv: KVStore) -> None:
    assert run(kv, b"foo", b"a", b"b") == Error(
        "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
    )
    assert run(kv, b"GET") == Error("ERR wrong number of arguments for 'get' command")
    assert run(kv, b"SET", b"k") == Error("ERR wrong number of arguments for 'set' command")
    assert kv.snapshot() == KVStore().snapshot()
