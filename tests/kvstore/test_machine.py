"""KVStore: Redis 7 string semantics, the codec, snapshots, and robustness.

Expected answers were checked by hand against ``redis-server`` 7.0.15 (the
tests do not need it). Commands go through ``apply`` and ``decode_value`` so
that the encoding the replicas exchange is tested along with the semantics.
"""

from __future__ import annotations

import fnmatch

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore import machine
from kvstore.codec import decode_results, encode_batch
from kvstore.commands import wrong_arity
from kvstore.machine import (
    KVStore,
    compile_glob,
    decode_value,
    encode_command,
    encode_value,
    glob_match,
)
from kvstore.values import OK, Error, Simple, Value

INT_MAX = 2**63 - 1
INT_MIN = -(2**63)

NOT_INT = Error("ERR value is not an integer or out of range")
OVERFLOW = Error("ERR increment or decrement would overflow")
SYNTAX = Error("ERR syntax error")
EXPIRY = Error("ERR expiry is not supported by this store")


def run(store: KVStore, *args: bytes) -> Value:
    """One command through the log path: encode, apply, decode."""
    return decode_value(store.apply(encode_command(list(args))))


def ask(store: KVStore, *args: bytes) -> Value:
    """One command through the local read path."""
    return decode_value(store.query(encode_command(list(args))))


@pytest.fixture
def kv() -> KVStore:
    return KVStore()


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
    monkeypatch.setattr(machine, "MAX_STRING", 4)  # 512 MB for real: too big for a test
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


# --- KEYS, SCAN and patterns -----------------------------------------------------------------


def test_keys_sorted_and_the_empty_key_quirk(kv: KVStore) -> None:
    for key in (b"b", b"a\\", b"ax", b"a]", b""):
        run(kv, b"SET", key, b"1")
    assert run(kv, b"KEYS", b"*") == [b"", b"a\\", b"a]", b"ax", b"b"]
    # As redis-server 7.0.15: '*' alone lists every key, '**' does not match the empty one.
    assert run(kv, b"KEYS", b"**") == [b"a\\", b"a]", b"ax", b"b"]
    assert run(kv, b"KEYS", b"a?") == [b"a\\", b"a]", b"ax"]
    assert run(kv, b"KEYS", b"[^") == [b"b"]
    assert run(kv, b"KEYS", b"a[x-]") == [b"a]", b"ax"]
    assert run(kv, b"KEYS", b"a\\") == [b"a\\"]
    assert run(kv, b"KEYS", b"a[\\") == [b"a\\"]
    assert run(kv, b"KEYS", b"[") == []
    assert run(kv, b"KEYS", b"[b-a]") == [b"b"]


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        (b"h?llo", b"hello", True),
        (b"h?llo", b"hllo", False),
        (b"h*llo", b"hllo", True),
        (b"h*llo", b"heeeello", True),
        (b"h[ae]llo", b"hallo", True),
        (b"h[ae]llo", b"hillo", False),
        (b"h[^e]llo", b"hallo", True),
        (b"h[^e]llo", b"hello", False),
        (b"h[a-b]llo", b"hbllo", True),
        (b"h[a-b]llo", b"hcllo", False),
        (b"h\\*llo", b"h*llo", True),
        (b"h\\*llo", b"hello", False),
        (b"[\\]]", b"]", True),
        (b"[\\-]", b"-", True),
        (b"[a-]x", b"]", True),  # an unclosed class: range a..] plus 'x', to the end
        (b"[a-]x", b"x", True),
        (b"*a*b", b"xaxxb", True),
        (b"*a*b", b"xaxxbx", False),
        (b"a*", b"a", True),
        (b"a**", b"a", True),
        (b"*", b"", True),  # compile_glob alone: the KEYS shortcut is elsewhere
        (b"", b"", True),
        (b"", b"a", False),
        (b"a", b"", False),
        (b"\xff*", b"\xff\x00", True),
        (b"[\x80-\xff]", b"\xc0", True),  # unsigned bytes (Redis on x86 compares signed char)
    ],
)
def test_glob(pattern: bytes, key: bytes, matches: bool) -> None:
    glob = compile_glob(pattern)
    if pattern == b"*" and key == b"":
        assert not glob_match(glob, key)  # Redis' stringmatchlen says no; KEYS * says yes
        return
    assert glob_match(glob, key) == matches


def test_glob_nesting_limit_as_redis() -> None:
    # More than 1000 '*' runs followed by more pattern: Redis gives up (no match).
    assert compile_glob(b"*a" * 1000) is not None
    assert glob_match(compile_glob(b"*a" * 1000), b"a" * 1000)
    assert compile_glob(b"*a" * 1001) is None
    assert not glob_match(compile_glob(b"*a" * 1001), b"a" * 1001)
    assert compile_glob(b"*a" * 1000 + b"*") is not None  # a trailing run does not count


def test_glob_is_not_exponential() -> None:
    glob = compile_glob(b"*a" * 30 + b"b")
    assert not glob_match(glob, b"a" * 2000)


@settings(derandomize=True, max_examples=300)
@given(
    st.text(alphabet="ab*?", max_size=8).map(str.encode),
    st.binary(min_size=1, max_size=8).map(lambda b: bytes(98 - (c & 1) for c in b)),
)
def test_glob_agrees_with_fnmatch_without_classes(pattern: bytes, key: bytes) -> None:
    # Without '[' and '\', Redis globs are plain shell globs on non-empty strings.
    expected = fnmatch.fnmatchcase(key.decode(), pattern.decode())
    assert glob_match(compile_glob(pattern), key) == expected


def full_scan(kv: KVStore, *options: bytes) -> tuple[list[bytes], int]:
    cursor = b"0"
    seen: list[bytes] = []
    calls = 0
    while True:
        answer = run(kv, b"SCAN", cursor, *options)
        assert isinstance(answer, list) and len(answer) == 2
        next_cursor, batch = answer
        assert isinstance(next_cursor, bytes) and isinstance(batch, list)
        cursor = next_cursor
        seen.extend(batch)  # type: ignore[arg-type]
        calls += 1
        if cursor == b"0":
            return seen, calls
        assert cursor.isdigit()  # redis-py int()s it


def test_scan_walks_sorted_keys_count_at_a_time(kv: KVStore) -> None:
    keys = [b"k%02d" % i for i in range(25)]
    for key in reversed(keys):
        run(kv, b"SET", key, b"v")
    seen, calls = full_scan(kv)
    assert seen == keys and calls == 3  # COUNT defaults to 10
    seen, calls = full_scan(kv, b"COUNT", b"7")
    assert seen == keys and calls == 4
    seen, calls = full_scan(kv, b"count", b"100", b"MATCH", b"k1*")
    assert seen == keys[10:20] and calls == 1
    seen, _ = full_scan(kv, b"TYPE", b"string")
    assert seen == keys
    seen, _ = full_scan(kv, b"TYPE", b"hash")
    assert seen == []
    assert run(KVStore(), b"SCAN", b"0") == [b"0", []]


def test_scan_cursor_is_the_next_key(kv: KVStore) -> None:
    run(kv, b"MSET", b"a", b"1", b"b\x00", b"2", b"c", b"3")
    assert run(kv, b"SCAN", b"0", b"COUNT", b"1") == [b"1098000", [b"a"]]
    assert run(kv, b"SCAN", b"1098000", b"COUNT", b"1") == [b"1099", [b"b\x00"]]
    assert run(kv, b"SCAN", b"1099", b"COUNT", b"1") == [b"0", [b"c"]]
    # A cursor for a key that is gone resumes at the next key after it.
    assert run(kv, b"SCAN", b"1098", b"COUNT", b"5") == [b"0", [b"b\x00", b"c"]]


def test_scan_returns_every_key_present_throughout_despite_writes(kv: KVStore) -> None:
    stable = [b"s%03d" % i for i in range(0, 60, 2)]
    for key in stable:
        run(kv, b"SET", key, b"v")
    cursor = b"0"
    seen: list[bytes] = []
    deleted: set[bytes] = set()
    step = 0
    while True:
        answer = run(kv, b"SCAN", cursor, b"COUNT", b"3")
        assert isinstance(answer, list)
        cursor, batch = answer  # type: ignore[assignment]
        seen.extend(batch)  # type: ignore[arg-type]
        # Meanwhile: keys appear before the cursor (which an index cursor would trip on),
        # between stable keys, and stable keys from the end go away.
        run(kv, b"SET", b"a%03d" % step, b"early")
        run(kv, b"SET", b"s%03d" % (2 * step + 1), b"new")
        gone = b"s%03d" % (58 - 2 * step)
        run(kv, b"DEL", gone)
        deleted.add(gone)
        run(kv, b"DEL", b"s%03d" % (2 * step))  # ... and from behind the cursor
        deleted.add(b"s%03d" % (2 * step))
        step += 1
        if cursor == b"0":
            break
    present = [key for key in stable if key not in deleted]
    assert len(present) >= 5
    for key in present:
        assert seen.count(key) == 1, key


@pytest.mark.parametrize(
    ("args", "answer"),
    [
        ([b"abc"], Error("ERR invalid cursor")),
        ([b"-1"], Error("ERR invalid cursor")),
        ([b"12"], Error("ERR invalid cursor")),  # not 1 + 3 digits per byte
        ([b"1256"], Error("ERR invalid cursor")),  # a byte over 255
        ([b"2000"], Error("ERR invalid cursor")),
        ([b"0", b"COUNT", b"0"], SYNTAX),
        ([b"0", b"COUNT", b"x"], NOT_INT),
        ([b"0", b"COUNT"], SYNTAX),
        ([b"0", b"MATCH"], SYNTAX),
        ([b"0", b"bogus", b"1"], SYNTAX),
    ],
)
def test_scan_errors(kv: KVStore, args: list[bytes], answer: Error) -> None:
    assert run(kv, b"SCAN", *args) == answer


# --- query and apply -------------------------------------------------------------------------


def test_query_answers_reads_and_refuses_writes(kv: KVStore) -> None:
    run(kv, b"SET", b"k", b"v")
    before = kv.snapshot()
    assert ask(kv, b"GET", b"k") == b"v"
    assert ask(kv, b"MGET", b"k", b"x") == [b"v", None]
    assert ask(kv, b"DBSIZE") == 1
    assert ask(kv, b"SET", b"k", b"w") == Error(
        "ERR 'set' is a write command: it must go through the log"
    )
    assert ask(kv, b"nope") == Error("ERR unknown command 'nope', with args beginning with: ")
    assert kv.snapshot() == before


def test_reads_through_apply_change_nothing(kv: KVStore) -> None:
    run(kv, b"MSET", b"a", b"1", b"b", b"2")
    before = kv.snapshot()
    for args in (
        [b"GET", b"a"],
        [b"MGET", b"a", b"b"],
        [b"EXISTS", b"a"],
        [b"STRLEN", b"a"],
        [b"DBSIZE"],
        [b"KEYS", b"*"],
        [b"SCAN", b"0"],
    ):
        assert run(kv, *args) == ask(kv, *args)
    assert kv.snapshot() == before


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\xc1",
        msgpack.packb([]),
        msgpack.packb(b"GET"),
        msgpack.packb(["GET", "k"]),  # str, not bin
        msgpack.packb([b"GET", 1]),
        msgpack.packb([[b"GET"], b"k"]),
        msgpack.packb({b"GET": b"k"}),
        msgpack.packb([b"SET", b"k", b"v"]) + b"\x00",  # trailing bytes
        msgpack.packb([b"SET", b"k", b"v"])[:-1],  # truncated
    ],
)
def test_malformed_payloads_answer_an_error(kv: KVStore, payload: bytes) -> None:
    run(kv, b"SET", b"k", b"old")
    before = kv.snapshot()
    answer = decode_value(kv.apply(payload))
    assert isinstance(answer, Error) and answer.text.startswith("ERR ")
    assert kv.snapshot() == before
    assert isinstance(decode_value(kv.query(payload)), Error)


@settings(derandomize=True, max_examples=300)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_raise_nor_change_state(payload: bytes) -> None:
    kv = KVStore()
    kv.apply(encode_command([b"MSET", b"a", b"1", b"n", b"5"]))
    before = kv.snapshot()
    decode_value(kv.apply(payload))
    decode_value(kv.query(payload))
    assert kv.snapshot() == before


@settings(derandomize=True, max_examples=300)
@given(st.lists(st.binary(max_size=6), min_size=1, max_size=5))
def test_arbitrary_argument_lists_never_raise(args: list[bytes]) -> None:
    kv = KVStore()
    answer = decode_value(kv.apply(encode_command(args)))
    if isinstance(answer, Error):
        assert "internal error" not in answer.text
        # An error never leaves a trace (every handler checks before it writes).
        assert kv.snapshot() == KVStore().snapshot()


def test_write_key_of_a_payload() -> None:
    assert KVStore.write_key(encode_command([b"SET", b"k", b"v"])) == b"k"
    assert KVStore.write_key(encode_command([b"MSET", b"a", b"1", b"b", b"2"])) is None
    assert KVStore.write_key(b"garbage") is None


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


# --- snapshots -------------------------------------------------------------------------------


def test_snapshot_is_deterministic_whatever_the_insertion_order() -> None:
    one, two = KVStore(), KVStore()
    for key in (b"a", b"b", b"c"):
        run(one, b"SET", key, key)
    for key in (b"c", b"a", b"b"):
        run(two, b"SET", key, key)
    assert one.snapshot() == two.snapshot()
    restored = KVStore()
    restored.restore(one.snapshot())
    assert restored.items() == one.items()
    assert restored.snapshot() == one.snapshot()


def test_restore_replaces_the_whole_state() -> None:
    source, target = KVStore(), KVStore()
    run(source, b"MSET", b"a", b"1", b"b", b"2")
    run(target, b"MSET", b"b", b"old", b"c", b"3")
    run(target, b"KEYS", b"*")  # fills the sorted-key cache, which restore must drop
    target.restore(source.snapshot())
    assert target.items() == [(b"a", b"1"), (b"b", b"2")]
    assert run(target, b"KEYS", b"*") == [b"a", b"b"]
    target.restore(KVStore().snapshot())
    assert run(target, b"DBSIZE") == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb([b"x", 1, []]), "not a kvstore snapshot"),
        (msgpack.packb([b"sdpaxos-kvstore", 2, []]), "version"),
        (msgpack.packb([b"sdpaxos-kvstore", 1, [b"a"]]), "flat list"),
        (msgpack.packb([b"sdpaxos-kvstore", 1, [b"a", "v"]]), "pair of byte strings"),
        (msgpack.packb([b"sdpaxos-kvstore", 1, [b"b", b"1", b"a", b"2"]]), "increasing"),
        (msgpack.packb([b"sdpaxos-kvstore", 1, [b"a", b"1", b"a", b"2"]]), "increasing"),
        (msgpack.packb({b"a": b"1"}), "not a kvstore snapshot"),
    ],
)
def test_restore_refuses_garbage_and_keeps_the_state(data: bytes, message: str) -> None:
    kv = KVStore()
    run(kv, b"SET", b"k", b"v")
    before = kv.snapshot()
    with pytest.raises(ValueError, match=message):
        kv.restore(data)
    assert kv.snapshot() == before
    assert run(kv, b"KEYS", b"*") == [b"k"]


@settings(derandomize=True, max_examples=200)
@given(st.binary(max_size=64))
def test_restore_of_arbitrary_bytes_raises_value_error_only(data: bytes) -> None:
    kv = KVStore()
    run(kv, b"SET", b"k", b"v")
    before = kv.snapshot()
    try:
        kv.restore(data)
    except ValueError:
        assert kv.snapshot() == before
    else:
        assert kv.snapshot() == data  # only a canonical snapshot is accepted


# --- against a reference model ---------------------------------------------------------------

KEYS = [b"", b"a", b"b", b"a1", b"b1"]
VALUES = [
    b"",
    b"0",
    b"1",
    b"-5",
    b"x",
    b"01",
    b" 1",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775808",
]
PATTERNS = [b"*", b"a*", b"?", b"*1", b"[ab]", b"[^a]*", b"**"]

key = st.sampled_from(KEYS)
value = st.sampled_from(VALUES)
command = st.one_of(
    st.tuples(st.just(b"GET"), key),
    st.tuples(st.just(b"SET"), key, value).flatmap(
        lambda t: st.lists(st.sampled_from([b"NX", b"XX", b"GET", b"nx"]), max_size=2).map(
            lambda opts: (*t, *opts)
        )
    ),
    st.tuples(st.just(b"DEL"), key, key),
    st.tuples(st.just(b"EXISTS"), key, key, key),
    st.tuples(st.sampled_from([b"INCR", b"DECR"]), key),
    st.tuples(st.sampled_from([b"INCRBY", b"DECRBY"]), key, value),
    st.tuples(st.just(b"APPEND"), key, value),
    st.tuples(st.just(b"STRLEN"), key),
    st.tuples(st.just(b"MGET"), key, key),
    st.tuples(st.sampled_from([b"MSET", b"MSETNX"]), key, value, key, value),
    st.tuples(st.sampled_from([b"GETSET", b"SETNX"]), key, value),
    st.tuples(st.just(b"GETDEL"), key),
    st.tuples(st.just(b"CAS"), key, value, value),
    st.tuples(st.just(b"DBSIZE")),
    st.tuples(st.just(b"KEYS"), st.sampled_from(PATTERNS)),
    st.tuples(st.just(b"SCAN"), st.sampled_from([b"0"]), st.just(b"COUNT"), st.just(b"100")),
    st.tuples(st.just(b"FLUSHDB")),
).map(list)


class Model:
    """A deliberately plain dict-based reading of the same Redis semantics."""

    def __init__(self) -> None:
        self.d: dict[bytes, bytes] = {}

    @staticmethod
    def integer(raw: bytes) -> int | None:
        try:
            n = int(raw)
        except ValueError:
            return None
        if str(n).encode() != raw or not INT_MIN <= n <= INT_MAX:
            return None
        return n

    def incr(self, k: bytes, by: bytes | int) -> Value:
        delta = by if isinstance(by, int) else self.integer(by)
        if delta is None:
            return NOT_INT
        old = self.integer(self.d.get(k, b"0"))
        if old is None:
            return NOT_INT
        if not INT_MIN <= old + delta <= INT_MAX:
            return OVERFLOW
        self.d[k] = str(old + delta).encode()
        return old + delta

    def run(self, args: list[bytes]) -> Value:
        name, rest = args[0].upper(), args[1:]
        d = self.d
        if name == b"GET":
            return d.get(rest[0])
        if name == b"SET":
            k, v, opts = rest[0], rest[1], {o.upper() for o in rest[2:]}
            if {b"NX", b"XX"} <= opts:
                return SYNTAX
            old = d.get(k)
            if (b"NX" in opts and k in d) or (b"XX" in opts and k not in d):
                return old if b"GET" in opts else None
            d[k] = v
            return old if b"GET" in opts else OK
        if name == b"DEL":
            return sum(1 for k in rest if d.pop(k, None) is not None)
        if name == b"EXISTS":
            return sum(k in d for k in rest)
        if name == b"INCR":
            return self.incr(rest[0], 1)
        if name == b"DECR":
            return self.incr(rest[0], -1)
        if name == b"INCRBY":
            return self.incr(rest[0], rest[1])
        if name == b"DECRBY":
            by = self.integer(rest[1])
            if by is None:
                return NOT_INT
            if by == INT_MIN:
                return Error("ERR decrement would overflow")
            return self.incr(rest[0], -by)
        if name == b"APPEND":
            d[rest[0]] = d.get(rest[0], b"") + rest[1]
            return len(d[rest[0]])
        if name == b"STRLEN":
            return len(d.get(rest[0], b""))
        if name == b"MGET":
            return [d.get(k) for k in rest]
        if name == b"MSET":
            d.update(zip(rest[::2], rest[1::2], strict=True))
            return OK
        if name == b"MSETNX":
            if any(k in d for k in rest[::2]):
                return 0
            d.update(zip(rest[::2], rest[1::2], strict=True))
            return 1
        if name == b"GETSET":
            old = d.get(rest[0])
            d[rest[0]] = rest[1]
            return old
        if name == b"SETNX":
            if rest[0] in d:
                return 0
            d[rest[0]] = rest[1]
            return 1
        if name == b"GETDEL":
            return d.pop(rest[0], None)
        if name == b"CAS":
            if rest[0] in d and d[rest[0]] == rest[1]:
                d[rest[0]] = rest[2]
                return 1
            return 0
        if name == b"DBSIZE":
            return len(d)
        if name == b"KEYS":
            pat = rest[0].decode()
            return [
                k for k in sorted(d) if pat == "*" or (k and fnmatch.fnmatchcase(k.decode(), pat))
            ]
        if name == b"SCAN":
            found: list[Value] = list(sorted(d))
            return [b"0", found]
        if name == b"FLUSHDB":
            d.clear()
            return OK
        raise AssertionError(args)


@settings(derandomize=True, max_examples=150)
@given(st.lists(command, max_size=40), st.data())
def test_kvstore_agrees_with_the_model_and_snapshots_faithfully(
    commands: list[list[bytes]], data: st.DataObject
) -> None:
    kv, twin, model = KVStore(), KVStore(), Model()
    cut = data.draw(st.integers(min_value=0, max_value=len(commands)), label="snapshot at")
    for i, args in enumerate(commands):
        if i == cut:
            # Restore into a fresh store: from here on it must behave exactly as the twin.
            fresh = KVStore()
            fresh.restore(twin.snapshot())
            assert fresh.snapshot() == twin.snapshot()
            twin = fresh
        payload = encode_command(args)
        answer = kv.apply(payload)
        assert twin.apply(payload) == answer  # determinism, byte for byte
        assert decode_value(answer) == model.run(args), args
        assert kv.snapshot() == twin.snapshot()
        # KEYS after every command: the sorted-key cache must follow every key that
        # appears or goes (KEYS itself fills the cache for the next command to stale).
        assert run(kv, b"KEYS", b"*") == sorted(model.d)
    assert kv.items() == sorted(model.d.items())


def test_a_batch_applies_its_commands_in_order_and_answers_each() -> None:
    store = KVStore()
    batch = encode_batch(
        [
            encode_command([b"SET", b"a", b"1"]),
            encode_command([b"INCR", b"a"]),
            encode_command([b"INCR", b"nope", b"extra"]),
            encode_command([b"GET", b"a"]),
            encode_command([b"MGET", b"a", b"b"]),
        ]
    )
    results = decode_results(store.apply(batch))
    assert results == [OK, 2, wrong_arity("incr"), b"2", [b"2", None]]
    assert results[0] is OK
    assert decode_value(store.apply(batch)) == [OK, 2, wrong_arity("incr"), b"2", [b"2", None]]
    # As a read (query), a batch answers its reads and refuses its writes.
    read = encode_batch([encode_command([b"GET", b"a"]), encode_command([b"DEL", b"a"])])
    before = store.snapshot()
    answer = decode_results(store.query(read))
    assert answer[0] == b"2" and isinstance(answer[1], Error)
    assert store.snapshot() == before


@pytest.mark.parametrize(
    "payload",
    [
        msgpack.packb(msgpack.ExtType(3, b"\xc1")),  # not msgpack inside
        msgpack.packb(msgpack.ExtType(3, msgpack.packb(b"x"))),  # not an array
        msgpack.packb(msgpack.ExtType(3, msgpack.packb([]))),  # empty
        msgpack.packb(msgpack.ExtType(7, msgpack.packb([[b"SET", b"a", b"1"]]))),  # other code
    ],
)
def test_a_malformed_batch_changes_nothing(payload: bytes) -> None:
    store = KVStore()
    store.apply(encode_command([b"SET", b"k", b"v"]))
    before = store.snapshot()
    assert isinstance(decode_value(store.apply(payload)), Error)
    assert isinstance(decode_value(store.query(payload)), Error)
    assert store.snapshot() == before


def test_a_batch_with_a_bad_command_inside_answers_it_and_runs_the_rest() -> None:
    store = KVStore()
    inner = msgpack.packb([[b"SET", b"a", b"1"], [b"SET", 5], "text", [b"GET", b"a"]])
    payload = msgpack.packb(msgpack.ExtType(3, inner))
    results = decode_results(store.apply(payload))
    assert results[0] is OK and isinstance(results[1], Error) and isinstance(results[2], Error)
    assert results[3] == b"1"


@settings(derandomize=True, max_examples=200)
@given(
    st.lists(
        st.one_of(
            command.map(list),
            st.tuples(st.sampled_from([b"SET", b"set", b"SeT"]), key, value).map(list),
            st.lists(st.binary(max_size=3), min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 8),
)
def test_batches_answer_and_change_exactly_what_one_by_one_does(
    commands: list[list[bytes]], size: int
) -> None:
    one_by_one, batched = KVStore(), KVStore()
    expected = [decode_value(one_by_one.apply(encode_command(c))) for c in commands]
    got: list[Value] = []
    for start in range(0, len(commands), size):
        chunk = commands[start : start + size]
        got += decode_results(batched.apply(encode_batch([encode_command(c) for c in chunk])))
    assert got == expected
    assert batched.snapshot() == one_by_one.snapshot()
    assert batched.execute([b"KEYS", b"*"]) == one_by_one.execute([b"KEYS", b"*"])


def test_encode_batch_args_is_encode_batch_of_the_commands() -> None:
    """The node packs a batch's argument lists at once: the same bytes."""
    from kvstore.codec import encode_batch_args

    for n in (2, 15, 16, 300, 70_000):
        commands = [[b"SET", b"k%d" % i, b"v" * (i % 300)] for i in range(n)]
        assert encode_batch_args(commands) == encode_batch([encode_command(c) for c in commands])


# --- SET runs (kvstore.codec: a count, then key, value, ...) ---------------------------------


def _both_ways(commands: list[list[bytes]]) -> tuple[bytes, bytes]:
    """``commands`` as a batch of command arrays, and as the node packs them (SET runs)."""
    from kvstore.codec import encode_batch_items, set_runs

    return encode_batch([encode_command(c) for c in commands]), encode_batch_items(
        set_runs(commands)
    )


@settings(derandomize=True, max_examples=300)
@given(
    st.lists(
        st.one_of(
            command.map(list),
            st.tuples(st.sampled_from([b"SET", b"set", b"Set"]), key, value).map(list),
            st.tuples(st.sampled_from([b"SET", b"set", b"Set"]), key, value).map(list),
            st.lists(st.binary(max_size=3), min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=40,
    ),
    st.booleans(),
)
def test_a_batch_with_set_runs_answers_and_changes_what_command_arrays_do(
    commands: list[list[bytes]], keys_first: bool
) -> None:
    """The run layout (and the fast path for a batch that is one run) gives
    byte-identical answers and the same whole state as the general path, at
    apply and at query; KEYS beforehand fills the sorted-key cache, which a
    run that adds a key must drop."""
    general, runs = KVStore(), KVStore()
    for store in (general, runs):
        store.apply(encode_command([b"SET", b"k1", b"old"]))
        if keys_first:
            store.apply(encode_command([b"KEYS", b"*"]))
    plain, packed = _both_ways(commands)
    assert runs.query(packed) == general.query(plain)
    assert runs.apply(packed) == general.apply(plain)
    assert runs.snapshot() == general.snapshot()
    assert runs.execute([b"KEYS", b"*"]) == general.execute([b"KEYS", b"*"])


def test_a_batch_of_plain_sets_is_one_run_and_answers_ok_for_each() -> None:
    from kvstore.codec import encoded_oks, set_runs

    commands = [[b"SET", b"k%d" % (i % 7), b"v%d" % i] for i in range(100)]
    items = set_runs(commands)
    assert items[0] == 100 and len(items) == 201
    store, twin = KVStore(), KVStore()
    assert store.apply(encode_command([b"KEYS", b"*"])) == store._pack([])  # cache filled
    plain, packed = _both_ways(commands)
    assert store.apply(packed) == encoded_oks(100) == twin.apply(plain)
    assert decode_results(encoded_oks(100)) == [OK] * 100
    assert store.snapshot() == twin.snapshot()
    assert store.execute([b"KEYS", b"*"]) == [b"k%d" % i for i in range(7)]
    assert store.execute([b"GET", b"k6"]) == b"v97"  # the last SET of a key wins


def test_a_run_between_commands_applies_in_order() -> None:
    store = KVStore()
    payload = msgpack.packb(
        msgpack.ExtType(
            3,
            msgpack.packb(
                [[b"SET", b"a", b"1"], 2, b"a", b"2", b"b", b"3", [b"GET", b"a"], 1, b"a", b"4"]
            ),
        )
    )
    assert decode_results(store.apply(payload)) == [OK, OK, OK, b"2", OK]
    assert store.items() == [(b"a", b"4"), (b"b", b"3")]


@pytest.mark.parametrize(
    "items",
    [
        [0],  # an empty run
        [-1, b"k", b"v"],  # a negative count
        [2, b"k", b"v", b"k2"],  # past the end
        [1, b"k", 5],  # a value that is not bytes
        [1, "k", b"v"],  # a key that is not bytes
        [1, None, b"v"],
        [1, [b"k"], b"v"],
        [[b"SET", b"a", b"1"], 1, b"k", b"v", 3, b"x"],  # a good start, a bad run after it
        [1, b"k", b"v", [b"SET", b"a", b"1"], 1, b"k"],
    ],
)
def test_a_batch_with_a_malformed_run_changes_nothing(items: list[object]) -> None:
    store = KVStore()
    store.apply(encode_command([b"SET", b"k", b"before"]))
    before = store.snapshot()
    payload = msgpack.packb(msgpack.ExtType(3, msgpack.packb(items)))
    assert decode_value(store.apply(payload)) == machine.ERR_MALFORMED
    assert decode_value(store.query(payload)) == machine.ERR_MALFORMED
    assert store.snapshot() == before


def test_a_run_read_as_a_query_refuses_each_set_and_changes_nothing() -> None:
    from kvstore.codec import encode_batch_items

    store = KVStore()
    refused = store.execute([b"SET", b"k", b"v"], writes=False)
    assert isinstance(refused, Error)
    for items in ([2, b"a", b"1", b"b", b"2"], [[b"GET", b"a"], 1, b"a", b"1"]):
        answer = decode_results(store.query(encode_batch_items(items)))
        assert answer[-1] == refused and len(answer) == 2
    assert len(store) == 0


def test_encode_batch_items_without_runs_is_encode_batch_args() -> None:
    from kvstore.codec import encode_batch_args, encode_batch_items, set_runs

    commands = [[b"GET", b"a"], [b"SET", b"a", b"1", b"NX"], [b"INCR", b"n"]]
    assert set_runs(commands) == commands
    assert encode_batch_items(set_runs(commands)) == encode_batch_args(commands)


@settings(derandomize=True, max_examples=200)
@given(
    st.lists(
        st.one_of(
            command.map(list),
            st.tuples(st.sampled_from([b"SET", b"set"]), key, value).map(list),
        ),
        min_size=2,
        max_size=30,
    ),
    st.booleans(),
)
def test_a_primed_batch_answers_and_changes_what_unpacking_does(
    commands: list[list[bytes]], writes: bool
) -> None:
    """The node applies the batches it packed from their items (prime);
    every other replica unpacks the bytes: the same replies, byte for byte,
    and the same whole state."""
    from kvstore.codec import encode_batch_items, set_runs

    items = set_runs(commands)
    payload = encode_batch_items(items)
    primed, unpacked = KVStore(), KVStore()
    primed.prime(payload, items)
    if writes:
        assert primed.apply(payload) == unpacked.apply(payload)
    else:
        assert primed.query(payload) == unpacked.query(payload)
    assert primed.snapshot() == unpacked.snapshot()
    assert not primed._primed  # taken once


def test_prime_is_used_for_that_very_payload_only_and_is_bounded() -> None:
    from kvstore.codec import encode_batch_items

    store = KVStore()
    payload = encode_batch_items([2, b"a", b"1", b"b", b"2"])
    store.prime(payload, [1, b"c", b"3"])  # not what payload says: shows which is used
    assert store.apply(bytes(bytearray(payload))) == store._pack([OK, OK])  # an equal copy
    assert store.items() == [(b"a", b"1"), (b"b", b"2")]
    assert store.apply(payload) == store._pack([OK])  # the very object: the items given
    assert store.items() == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    for i in range(machine.PRIMED_MAX + 10):
        store.prime(encode_batch_items([1, b"k%d" % i, b"v"]), [1, b"k", b"v"])
    assert len(store._primed) == machine.PRIMED_MAX
