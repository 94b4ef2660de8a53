"""The session table (:mod:`sdpaxos.core.sessions`) at the edges its other tests miss.

Each test here kills mutants that survived a mutation run of ``sessions.py``
against ``tests/core/roles/test_sessions.py`` and ``tests/core/test_snapshots.py``
(the mutant each one kills is named in its docstring). They drive
:class:`Sessions` directly: what a replica's executor, a snapshot's receiver or
a client could observe, never the table's private shape.

How to re-run the mutation test (``scripts/mutation/sessions.toml``, in a copy of
the tree: cosmic-ray rewrites the module in place), and the surviving mutants
judged equivalent with the reason for each: ``scripts/mutation/README.md``.
"""

from typing import Any

import pytest

from sdpaxos.core.messages import SnapshotChunk
from sdpaxos.core.sessions import (
    Outcome,
    Sessions,
    decode_session_id,
    encode_session_id,
    registration,
)
from sdpaxos.core.storage import Snapshot, encode_snapshot
from sdpaxos.core.types import Command, ReplicaId, Slot, View
from sdpaxos.sim.explicit import Net
from tests.core.state import whole_state


def _apply(payload: bytes) -> bytes:
    return b"ok:" + payload


def _register(table: Sessions, slot: int) -> int:
    result, outcome = table.run(registration(1), slot, _apply)
    assert outcome is Outcome.REGISTERED
    return decode_session_id(result)


# ------------------------------------------------------------ registration


def test_a_registration_result_is_the_id_in_8_bytes_big_endian() -> None:
    """``SESSION_ID_BYTES = 8`` -> 7 / 9: a client (in any language) reads its
    session id from exactly these bytes (the module docstring's format)."""
    table = Sessions(lifetime_slots=3)
    table.next_id = 0x0102030405060708
    result, _ = table.run(registration(1), 0, _apply)
    assert result == bytes([1, 2, 3, 4, 5, 6, 7, 8])
    assert encode_session_id(1) == b"\x00" * 7 + b"\x01"


def test_decode_session_id_wants_exactly_8_bytes() -> None:
    """``len(result) != SESSION_ID_BYTES`` -> ``<``: 9 bytes are no session id,
    even when they are not all zero (a state machine's result, say)."""
    with pytest.raises(ValueError):
        decode_session_id(b"\x01" * 9)
    assert decode_session_id(b"\x00" * 7 + b"\x05") == 5


def test_any_non_zero_nonce_routes_a_registration() -> None:
    """``nonce == NO_SESSION`` -> ``<=``: a nonce is a client id, and client ids
    may be negative; only 0 (no session) is refused."""
    assert registration(-7) == Command(-7, 0, b"")
    with pytest.raises(ValueError):
        registration(0)


def test_the_table_limits_are_checked() -> None:
    """``sessions_max < 1``: ``or`` -> ``and``, and 1 -> 0 / 2. A table of one
    session is allowed; none is not."""
    assert Sessions(lifetime_slots=1, sessions_max=1).sessions_max == 1
    for bad in (0, -1):
        with pytest.raises(ValueError, match="sessions_max"):
            Sessions(lifetime_slots=1, sessions_max=bad)
    with pytest.raises(ValueError, match="lifetime_slots"):
        Sessions(lifetime_slots=0)
    assert Sessions(lifetime_slots=1).lifetime_slots == 1


# ------------------------------------------------------------------------ load


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        # The sessions are not an array: the executor refuses a peer's snapshot
        # on ValueError only, so a TypeError here would escape the core (a bug,
        # fixed: ``load`` used to iterate whatever it was given).
        ((1, None, 8, 1, 5), "array"),
        ((1, None, 8, 1, None), "array"),
        # An entry that is not a 4-item array (ExceptionReplacer on TypeError).
        ((1, None, 8, 1, (7,)), "bad session"),
        ((1, None, 8, 1, ((5, 1, None),)), "bad session"),
        # A next id below 1 (``next_id <= NO_SESSION`` -> ``==``).
        ((1, None, 8, -1, ()), "next id"),
        # Another format, below or as a bool (``fmt != DUMP_FORMAT`` -> ``>``).
        ((0, None, 8, 1, ()), "format"),
        ((True, None, 8, 1, ()), "format"),
        # One entry twice (``(slot, sid) <= previous`` -> ``<``).
        ((1, 3, 8, 9, ((5, 1, None, 3), (5, 1, None, 3))), "expiry order"),
        # One id at two slots (a bug, fixed: it loaded, and expiring the older
        # slot later raised KeyError mid-execution).
        ((1, 3, 8, 9, ((5, 1, None, 3), (5, 2, None, 4))), "twice"),
        ((1, None, 8, 9, ((5, 1, None, 3), (5, 2, None, 4))), "twice"),
    ],
)
def test_load_refuses_a_malformed_dump_with_value_error(bad: Any, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Sessions.load(bad)


def test_a_repeated_id_in_a_dump_cannot_crash_expiry_later() -> None:
    """The bug the ``twice`` refusal fixes, as a replica met it: the table loaded,
    then executing slots 6 and 7 raised KeyError (session 5 sat in two buckets)."""
    dump = (1, 2, 8, 9, ((5, 1, None, 3), (5, 2, None, 4)))
    with pytest.raises(ValueError):
        Sessions.load(dump)
    good = Sessions.load((1, 2, 8, 9, ((5, 2, None, 4),)))
    good.slot_executed(6)
    assert 5 in good  # last slot 4 is not below 6 - 2
    good.slot_executed(7)
    assert 5 not in good and good.expired == 1


def test_a_peer_snapshot_whose_sessions_are_not_an_array_is_refused_not_a_crash() -> None:
    """The bug above as a replica meets it: a peer's snapshot whose session
    list is a number used to raise TypeError out of ``Replica.step``; now the
    replica refuses the snapshot and nothing changes."""
    net = Net.build(3, sequencer=0, snapshot_slots_min=2, snapshot_chunk_bytes=16)
    rep = net.replicas[2]
    rep.tick(0.0)
    rep.ready()
    before = whole_state(rep)
    sessions = (1, None, 1 << 16, 1, 5)
    snap = Snapshot(Slot(5), (2, 1, 1), (3, 2, 4), 0, sessions, b"log")  # type: ignore[arg-type]
    data = encode_snapshot(snap)
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        rep.step(SnapshotChunk(ReplicaId(0), View(0), Slot(5), offset, len(data), chunk), 0.0)
    rep.ready()
    assert rep.stats.rejected == 1
    assert whole_state(rep) == before


def test_a_table_under_its_bound_loads() -> None:
    """``len > sessions_max`` -> ``!=`` / ``is not``: a dump holding fewer sessions
    than the bound (the usual case) must load, and behave the same afterwards."""
    table = Sessions(lifetime_slots=5, sessions_max=8)
    sid = _register(table, 0)
    restored = Sessions.load(table.dump())
    assert restored == table and len(restored) == 1 and restored.get(sid) == (0, None, 0)


def test_client_chosen_ids_below_zero_survive_a_snapshot() -> None:
    """``sid == NO_SESSION`` -> ``<=``: without expiry a client picks its own id,
    any non-zero int; the snapshot must carry it back."""
    table = Sessions()
    assert table.run(Command(-5, 1, b"a"), 0, _apply) == (b"ok:a", Outcome.APPLIED)
    restored = Sessions.load(table.dump())
    assert restored.get(-5) == (1, b"ok:a", 0)
    assert restored.run(Command(-5, 1, b"a"), 1, _apply) == (b"ok:a", Outcome.DUPLICATE)


# ------------------------------------------------------------------ equality


def test_tables_are_equal_exactly_when_their_state_is() -> None:
    """``and`` -> ``or`` and ``dump() == dump()`` -> ``>=`` / ``is not``."""
    assert Sessions(3) == Sessions(3)
    assert Sessions(4) != Sessions(3) and Sessions(3) != Sessions(4)
    a, b = Sessions(3), Sessions(3)
    _register(a, 0)
    assert a != b and b != a
    assert Sessions() != object() and Sessions() != Sessions().dump()


# ----------------------------------------------------------------- execution


def test_a_negative_seq_is_not_a_registration() -> None:
    """``seq == REGISTRATION_SEQ`` -> ``<=``: only seq 0 opens a session."""
    expiring = Sessions(lifetime_slots=3)
    assert expiring.run(Command(9, -1, b"x"), 0, _apply) == (None, Outcome.EXPIRED)
    assert len(expiring) == 0 and expiring.next_id == 1


def test_the_table_bound_holds_beyond_small_ints() -> None:
    """``len(table) >= sessions_max`` -> ``is``: CPython shares ints up to 256
    only, so a bound of 300 tells an identity test from a comparison."""
    table = Sessions(lifetime_slots=10_000, sessions_max=300)
    for slot in range(301):
        _register(table, slot)
    assert len(table) == 300 and table.expired == 1 and 1 not in table


def test_a_retry_of_the_latest_command_gets_its_result_at_any_seq() -> None:
    """``seq == session.seq`` -> ``is``: the retry's seq is another int object
    (it came off the wire) than the one stored, beyond the shared small ints."""
    table = Sessions(lifetime_slots=5)
    sid = _register(table, 0)
    seq = int("1000")
    assert table.run(Command(sid, seq, b"a"), 1, _apply) == (b"ok:a", Outcome.APPLIED)
    retry = Command(sid, int("1000"), b"a")
    assert retry.seq is not seq
    assert table.run(retry, 2, _apply) == (b"ok:a", Outcome.DUPLICATE)


def test_the_expired_counter_starts_at_zero_and_counts_each_expiry() -> None:
    """``self.expired = 0`` -> 1 / -1: the documented counter (the executor adds
    its differences to ``stats.sessions_expired``)."""
    table = Sessions(lifetime_slots=1)
    assert table.expired == 0
    _register(table, 0)
    _register(table, 0)
    table.slot_executed(2)
    assert table.expired == 2 and len(table) == 0
    assert Sessions.load(Sessions(2).dump()).expired == 0
