"""KVStore: the state machine's apply and query, batches, SET runs, packed
batches, and robustness, against a reference model.

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

from kvstore import dispatch
from kvstore.codec import BatchItem, decode_results, decode_value, encode_batch, encode_command
from kvstore.commands import wrong_arity
from kvstore.machine import KVStore
from kvstore.values import OK, Error, Value
from tests.kvstore.store_helpers import (
    INT_MAX,
    INT_MIN,
    NOT_INT,
    OVERFLOW,
    SYNTAX,
    ask,
    run,
)

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
    assert decode_value(store.apply(payload)) == dispatch.ERR_MALFORMED
    assert decode_value(store.query(payload)) == dispatch.ERR_MALFORMED
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
def test_a_packed_batch_answers_and_changes_what_unpacking_does(
    commands: list[list[bytes]], writes: bool
) -> None:
    """The node applies the batches it packed from their items (kvstore.batches);
    every other replica unpacks the bytes: the same replies, byte for byte,
    and the same whole state."""
    from kvstore.codec import encode_batch_items, set_runs

    items = set_runs(commands)
    packer, unpacked = KVStore(), KVStore()
    payload = packer.packed.pack(items)
    assert payload == encode_batch_items(items)
    assert len(packer.packed) == 1
    if writes:
        assert packer.apply(payload) == unpacked.apply(payload)
    else:
        assert packer.query(payload) == unpacked.query(payload)
    assert packer.snapshot() == unpacked.snapshot()
    assert not packer.packed  # taken once


def test_a_packed_batch_is_taken_once_by_its_bytes_and_the_memory_is_bounded() -> None:
    from kvstore.batches import PACKED_MAX, PackedBatches
    from kvstore.codec import encode_batch_items

    store = KVStore()
    packed = store.packed
    items: list[BatchItem] = [2, b"a", b"1", b"b", b"2"]
    payload = packed.pack(items)
    assert payload == encode_batch_items(items) and packed[payload] is items
    assert decode_results(store.apply(encode_batch_items([1, b"x", b"1"]))) == [OK]
    assert len(packed) == 1  # other bytes are unpacked; the packed batch stays
    # Items that differ from the bytes (only a test does this) show which path applies.
    packed[payload] = [1, b"c", b"3"]
    assert decode_results(store.apply(bytes(bytearray(payload)))) == [OK]  # equal bytes
    assert store.items() == [(b"c", b"3"), (b"x", b"1")]
    assert not packed  # taken once: unpacked from then on
    assert decode_results(store.apply(payload)) == [OK, OK]
    assert store.items() == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"x", b"1")]
    # At most PACKED_MAX are remembered; the oldest is forgotten.
    bounded = PackedBatches()
    first = bounded.pack([1, b"k", b"v"])
    last = [bounded.pack([1, b"k%d" % i, b"v"]) for i in range(PACKED_MAX)][-1]
    assert len(bounded) == PACKED_MAX
    assert first not in bounded and bounded[last] == [1, b"k%d" % (PACKED_MAX - 1), b"v"]
    assert KVStore(bounded).packed is bounded


def test_the_dispatch_table_pairs_every_spec_with_exactly_one_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One command table: each spec's arity and kind are what dispatch checks,
    and a spec without a handler (or a command handled twice) fails the build."""
    from kvstore import keyspace, strings
    from kvstore.commands import COMMANDS

    for spec in COMMANDS.values():
        entry = dispatch.TABLE[spec.name.encode()]
        assert entry is dispatch.TABLE[spec.name.upper().encode()]
        assert entry[:3] == (spec.arity, spec.kind == "write", spec.name)
    assert len(dispatch.TABLE) == 2 * len(COMMANDS)
    without_cas = {k: v for k, v in strings.HANDLERS.items() if k != "cas"}
    monkeypatch.setattr(dispatch, "MODULE_HANDLERS", (keyspace.HANDLERS, without_cas))
    with pytest.raises(RuntimeError, match="without a handler: \\['cas'\\]"):
        dispatch._build()
    monkeypatch.setattr(dispatch, "MODULE_HANDLERS", (keyspace.HANDLERS, strings.HANDLERS) * 2)
    with pytest.raises(RuntimeError, match="handled twice"):
        dispatch._build()
