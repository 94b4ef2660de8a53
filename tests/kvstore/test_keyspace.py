"""The keyspace (kvstore.keyspace): KEYS and SCAN over the sorted keys, and
snapshots, through the state machine's log path.

Expected answers were checked by hand against ``redis-server`` 7.0.15 (the
tests do not need it)."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.machine import KVStore
from kvstore.values import Error
from tests.kvstore.store_helpers import (
    NOT_INT,
    SYNTAX,
    run,
)

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
