"""Tests of the packed command arrays: a commands tuple sent again is not packed again.

A command leader's C-accept and its later C-commit (and the log's C-accepted
record) carry one commands tuple; EPaxos and Multi-Paxos do the same. The
messages are spliced around the tuple's cached bytes
(``codec._compile_to_bytes``). What must hold: the bytes are exactly what
packing the whole message gives, each tuple is checked and packed once while
its entry lives, an entry is never used for another object, the bounds hold,
and a refused message leaves the cache as it was.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
import threading
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdpaxos.core.messages import CAccept, CCommit
from sdpaxos.core.storage import CAccepted
from sdpaxos.core.types import Command
from sdpaxos.protocols import protocol
from sdpaxos.wire import codec, records
from sdpaxos.wire.codec import (
    PACKED_COMMANDS,
    PACKED_COMMANDS_BYTES_MAX,
    PACKED_COMMANDS_MAX,
    PACKED_COMMANDS_MIN,
    CodecError,
    MessageCodec,
    decode,
    decode_batch,
    encode,
    encode_batch,
)
from tests.unit.test_codec import EXAMPLES, INT_MAX, INT_MIN, strategy_for


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    """Each test starts from an empty cache with zero counters (it is the
    process's), and leaves one."""
    PACKED_COMMANDS.order = collections.deque()
    PACKED_COMMANDS.clear()
    PACKED_COMMANDS.hits = PACKED_COMMANDS.misses = 0
    yield
    PACKED_COMMANDS.order = collections.deque()
    PACKED_COMMANDS.clear()


def held() -> int:
    """The bytes the cache holds now."""
    return sum(len(d) for _, d in PACKED_COMMANDS.entries.values())


def cache_state() -> tuple[object, ...]:
    """The whole cache: its entries in order (object and bytes), the order of
    their making, and its counters."""
    c = PACKED_COMMANDS
    entries = tuple((key, id(v), v, data) for key, (v, data) in c.entries.items())
    return (entries, tuple(c.order), c.hits, c.misses)


def count_packs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Command, ...]]:
    """Every commands tuple the codec checks and converts, in order."""
    seen: list[tuple[Command, ...]] = []
    real = codec._commands_to_wire

    def commands_to_wire(value: tuple[Command, ...]) -> object:
        seen.append(value)
        return real(value)

    monkeypatch.setattr(codec, "_commands_to_wire", commands_to_wire)
    return seen


def commands(n: int, payload: bytes = b"v", keyed: bool = True) -> tuple[Command, ...]:
    return tuple(
        Command(7, s, payload + b"%d" % s, b"k%d" % s if keyed else None) for s in range(n)
    )


# --------------------------------------------------------------------------
# Spliced bytes are the whole message's bytes.
# --------------------------------------------------------------------------

#: Every class that has a spliced encoder, in every codec that has one.
SPLICED: list[tuple[str, type, Any]] = [
    *((f"sdpaxos.{c.__name__}", c, None) for c in codec._TO_BYTES),
    *((f"records.{c.__name__}", c, "records") for c in records._TO_BYTES),
    *(
        (f"{name}.{c.__name__}", c, name)
        for name in ("multipaxos", "mencius", "epaxos")
        for c in protocol(name).codec._to_bytes_table
    ),
]


def test_the_classes_with_commands_are_spliced() -> None:
    """Every message class with a field of commands gets a spliced encoder
    (the C-commit's may be ``None``); so do the baselines' and the
    C-accepted record."""
    assert set(codec._TO_BYTES) == {CAccept, CCommit}
    assert set(records._TO_BYTES) == {CAccepted}
    names = {name for name, _, owner in SPLICED if owner in ("multipaxos", "mencius", "epaxos")}
    assert {n.split(".")[0] for n in names} == {"multipaxos", "mencius", "epaxos"}


def _with_many_commands(cls: type) -> st.SearchStrategy[Any]:
    """Messages of ``cls`` whose commands field holds 0 to 40 commands (across
    :data:`PACKED_COMMANDS_MIN`), with keys or without, and extreme ints."""
    hints = typing.get_type_hints(cls)
    many = st.lists(strategy_for(Command), max_size=40).map(tuple)
    of_commands = (tuple[Command, ...], tuple[Command, ...] | None)
    fields = {
        f.name: many
        if codec._plain_annotation(hints[f.name]) in of_commands
        else strategy_for(hints[f.name])
        for f in dataclasses.fields(cls)
    }
    return st.builds(cls, **fields)


def _table(owner: Any) -> tuple[Any, Any]:
    """(wire table, bytes table) of ``owner``'s codec."""
    if owner is None:
        return codec._TO_WIRE, codec._TO_BYTES
    if owner == "records":
        return records._TO_WIRE, records._TO_BYTES
    mc: MessageCodec = protocol(owner).codec
    return mc._to_wire_table, mc._to_bytes_table


@EXAMPLES
@pytest.mark.parametrize(("cls", "owner"), [s[1:] for s in SPLICED], ids=[s[0] for s in SPLICED])
@given(data=st.data())
def test_spliced_bytes_are_the_whole_messages_bytes(
    cls: type, owner: Any, data: st.DataObject
) -> None:
    msg = data.draw(_with_many_commands(cls))
    to_wire, to_bytes = _table(owner)
    whole = codec._pack(to_wire[cls](msg))
    assert to_bytes[cls](msg) == whole
    assert to_bytes[cls](msg) == whole  # again, from the cache when it is long enough


@pytest.mark.parametrize("n", [0, 1, PACKED_COMMANDS_MIN - 1, PACKED_COMMANDS_MIN, 300])
@pytest.mark.parametrize("ints", [(0, 0, 0, 0, 0), (INT_MAX, INT_MIN, 2**31, -1, 15)])
def test_every_length_and_extreme_ints_round_trip(n: int, ints: tuple[int, ...]) -> None:
    cmds = commands(n, keyed=n % 2 == 0)
    accept = CAccept(*ints, cmds)
    commit = CCommit(*ints, cmds)
    for msg in (accept, commit):
        data = encode(msg)
        assert data == codec._finish(codec._to_wire(msg))
        assert decode(data) == msg
    assert decode_batch(encode_batch([accept, commit], {})) == [accept, commit]
    cached = n >= PACKED_COMMANDS_MIN
    assert (PACKED_COMMANDS.misses, PACKED_COMMANDS.hits) == ((1, 3) if cached else (0, 0))


# --------------------------------------------------------------------------
# Each tuple is packed once while its entry lives.
# --------------------------------------------------------------------------


def test_a_c_accept_and_its_c_commit_and_record_pack_their_commands_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = count_packs(monkeypatch)
    cmds = commands(50)
    accept = CAccept(1, 2, 1, 4, 3, cmds)
    frames = [encode_batch([accept], {}) for _ in range(2)]  # two sends
    commit = encode_batch([CCommit(1, 2, 1, 4, 3, cmds)], {})
    record = records.encode_record(CAccepted(1, 4, 3, cmds))
    assert seen == [cmds]
    assert frames == [encode_batch([accept])] * 2
    assert decode_batch(commit) == [CCommit(1, 2, 1, 4, 3, cmds)]
    assert records.decode_record(record) == CAccepted(1, 4, 3, cmds)
    assert (PACKED_COMMANDS.misses, PACKED_COMMANDS.hits) == (1, 3)


def test_a_protocols_record_codec_splices_too() -> None:
    """A baseline's :class:`RecordCodec` (shared records plus its own) logs a
    C-accepted record from the same cached bytes."""
    cmds = commands(40)
    encode(CAccept(1, 2, 1, 4, 3, cmds))
    rc = records.RecordCodec()
    data = rc.encode(CAccepted(1, 4, 3, cmds))
    assert data == records.encode_record(CAccepted(1, 4, 3, cmds))
    assert rc.decode(data) == CAccepted(1, 4, 3, cmds)
    assert (PACKED_COMMANDS.misses, PACKED_COMMANDS.hits) == (1, 2)


def test_short_arrays_are_not_kept() -> None:
    """Under the minimum the one-piece path packs them each time, and keeps nothing."""
    cmds = commands(PACKED_COMMANDS_MIN - 1)
    for msg in (CAccept(1, 2, 1, 4, 3, cmds), CCommit(1, 2, 1, 4, 3, cmds)):
        assert encode(msg) == codec._finish(codec._to_wire(msg))
    assert cache_state() == ((), (), 0, 0)


def test_an_equal_tuple_is_another_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """By identity, not equality: two equal tuples are two entries (a decoded
    copy never meets its original's entry, and hashing 250 commands would cost
    what the cache saves)."""
    seen = count_packs(monkeypatch)
    a, b = commands(20), commands(20)
    assert a == b and a is not b
    assert encode(CAccept(1, 2, 1, 4, 3, a)) == encode(CAccept(1, 2, 1, 4, 3, b))
    assert seen == [a, b]


def test_an_entry_for_another_object_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry keeps its tuple, so an id reused by a new tuple is told apart,
    and the stale entry is replaced (the byte count with it)."""
    old, new = commands(20, b"old"), commands(20, b"new")
    stale = codec._pack(codec._commands_to_wire(old))
    PACKED_COMMANDS.entries[id(new)] = (old, stale)
    seen = count_packs(monkeypatch)
    msg = CAccept(1, 2, 1, 4, 3, new)
    assert decode(encode(msg)) == msg
    assert seen == [new]
    entry = PACKED_COMMANDS.entries[id(new)]
    assert entry[0] is new
    assert entry[1] == codec._pack(codec._commands_to_wire(new))
    assert len(PACKED_COMMANDS.entries) == 1


# --------------------------------------------------------------------------
# Bounds.
# --------------------------------------------------------------------------


def test_at_most_packed_commands_max_entries_oldest_out_first() -> None:
    tuples = [commands(PACKED_COMMANDS_MIN) for _ in range(PACKED_COMMANDS_MAX + 5)]
    for cmds in tuples:
        encode(CAccept(1, 2, 1, 4, 3, cmds))
    kept = [v for v, _ in PACKED_COMMANDS.entries.values()]
    assert len(kept) == PACKED_COMMANDS_MAX
    assert all(k is t for k, t in zip(kept, tuples[5:], strict=True))


def test_at_most_packed_commands_bytes_max_held() -> None:
    big = b"x" * (PACKED_COMMANDS_BYTES_MAX // (3 * PACKED_COMMANDS_MIN))  # about a third each
    tuples = [commands(PACKED_COMMANDS_MIN, big) for _ in range(4)]
    for cmds in tuples:
        encode(CAccept(1, 2, 1, 4, 3, cmds))
        assert held() <= PACKED_COMMANDS_BYTES_MAX
    kept = [v for v, _ in PACKED_COMMANDS.entries.values()]
    assert len(kept) == 2
    assert kept[0] is tuples[2] and kept[1] is tuples[3]


def test_an_array_over_the_bytes_bound_is_not_kept() -> None:
    cmds = commands(PACKED_COMMANDS_MIN, b"x" * (PACKED_COMMANDS_BYTES_MAX // PACKED_COMMANDS_MIN))
    msg = CAccept(1, 2, 1, 4, 3, cmds)
    assert decode(encode(msg)) == msg
    assert (PACKED_COMMANDS.entries, list(PACKED_COMMANDS.order)) == ({}, [])


# --------------------------------------------------------------------------
# What is refused changes nothing.
# --------------------------------------------------------------------------

_GOOD = commands(PACKED_COMMANDS_MIN)
REFUSED: list[tuple[str, object, str]] = [
    ("bool seq", CAccept(1, 2, 3, 4, 5, (*_GOOD, Command(1, False, b""))), "CAccept.commands"),
    ("str payload", CCommit(1, 2, 3, 4, 5, (Command(1, 2, "x"), *_GOOD)), "CCommit.commands"),  # type: ignore[arg-type]
    ("not a command", CAccept(1, 2, 3, 4, 5, (*_GOOD, (1, 2, b"x"))), "CAccept.commands"),  # type: ignore[arg-type]
    ("str key", CAccept(1, 2, 3, 4, 5, (*_GOOD, Command(1, 2, b"x", "k"))), "CAccept.commands"),  # type: ignore[arg-type]
    ("bool int field", CAccept(True, 2, 3, 4, 5, _GOOD), "CAccept.src"),
    ("head int too large", CAccept(INT_MAX + 1, 2, 3, 4, 5, _GOOD), "out of range"),
    ("tail int too small", CAccept(1, 2, 3, 4, INT_MIN - 1, _GOOD), "out of range"),
    ("list of commands", CAccept(1, 2, 3, 4, 5, list(_GOOD)), "CAccept.commands"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("msg", "expected"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_a_refused_message_leaves_the_cache_as_it_was(msg: Any, expected: str) -> None:
    # Something already cached, so that "as it was" is not only "empty".
    encode(CAccept(1, 2, 1, 9, 3, commands(PACKED_COMMANDS_MIN + 3)))
    before = cache_state()
    # The error is the codec's own, not wrapped again by the frame's checks.
    with pytest.raises(CodecError, match=expected) as alone:
        encode(msg)
    with pytest.raises(CodecError, match=expected) as packed:
        encode_batch([msg], {})
    for exc in (alone.value, packed.value):
        assert not str(exc).startswith("cannot encode: cannot encode"), exc
    if isinstance(msg, CAccept) and expected == "CAccept.commands":
        with pytest.raises(CodecError, match=r"CAccepted\.commands"):
            records.encode_record(CAccepted(msg.owner, msg.index, msg.ballot, msg.commands))
    assert cache_state() == before
    # The packer is left clean.
    good = CAccept(1, 2, 1, 4, 3, _GOOD)
    assert decode(encode(good)) == good


# --------------------------------------------------------------------------
# Shapes no message has yet: the splice stays exact or is not used.
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class TwoArrays:
    src: int
    first: tuple[Command, ...]
    middle: int
    second: tuple[Command, ...] | None


@dataclasses.dataclass(frozen=True, slots=True)
class Wide:
    """Sixteen items with its tag: a msgpack array over a fixarray's 15 items."""

    f0: int
    f1: int
    f2: int
    f3: int
    f4: int
    f5: int
    f6: int
    f7: int
    f8: int
    f9: int
    f10: int
    f11: int
    f12: int
    f13: int
    commands: tuple[Command, ...]


def test_a_class_with_two_arrays_splices_the_first() -> None:
    mc = MessageCodec((TwoArrays, Wide))
    assert TwoArrays in mc._to_bytes_table
    first, second = commands(20, b"a"), commands(30, b"b")
    msg = TwoArrays(1, first, 2, second)
    for _ in range(2):
        frame = mc.encode_batch([msg], {})
        assert frame == mc.encode_batch([msg])
        assert mc.decode_batch(frame) == [msg]
    assert [v for v, _ in PACKED_COMMANDS.entries.values()] == [first]


def test_a_class_over_fifteen_fields_is_not_spliced() -> None:
    mc = MessageCodec((TwoArrays, Wide))
    assert Wide not in mc._to_bytes_table
    msg = Wide(*range(14), commands(20))
    assert mc.decode(mc.encode(msg)) == msg
    assert cache_state() == ((), (), 0, 0)


# --------------------------------------------------------------------------
# Threads: the cache is the process's, and nodes run on threads of their own
# (``sdpaxos.runtime.sync``), their logs on others.
# --------------------------------------------------------------------------


def test_threads_sharing_the_cache_keep_it_consistent() -> None:
    """Threads encode overlapping tuples, with thread switches forced as often
    as the interpreter allows: every frame is right, and the cache's bounds
    hold. (Its counters may miss counts under threads; they are not checked.)"""
    pool = [
        commands(PACKED_COMMANDS_MIN + i % 7, b"t%d" % i) for i in range(3 * PACKED_COMMANDS_MAX)
    ]
    expected = [
        codec._finish(codec._to_wire(CAccept(1, 2, 1, i, 3, c))) for i, c in enumerate(pool)
    ]
    wrong: list[int] = []
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for n in range(4 * len(pool)):
                i = (n * (offset + 1) + offset) % len(pool)
                if encode(CAccept(1, 2, 1, i, 3, pool[i])) != expected[i]:
                    wrong.append(i)
        except BaseException as exc:  # reported below
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and wrong == []
    entries = PACKED_COMMANDS.entries
    assert len(entries) <= PACKED_COMMANDS_MAX
    assert held() <= PACKED_COMMANDS_BYTES_MAX
    assert all(key == id(v) for key, (v, _) in entries.items())
    assert set(entries) <= set(PACKED_COMMANDS.order)


def test_an_order_emptied_by_another_thread_meanwhile_ends_the_eviction() -> None:
    """Between the length check and ``popleft``, another thread may have taken
    the last id: the eviction stops there, and the frame is still right."""

    class EmptiedMeanwhile(collections.deque[int]):
        def __len__(self) -> int:  # what this thread saw before the other one ran
            return PACKED_COMMANDS_MAX + 1

        def popleft(self) -> int:
            self.clear()
            return super().popleft()

    PACKED_COMMANDS.order = EmptiedMeanwhile()
    msg = CAccept(1, 2, 1, 4, 3, commands(PACKED_COMMANDS_MIN))
    assert decode(encode(msg)) == msg
    assert list(PACKED_COMMANDS.entries) == [id(msg.commands)]
