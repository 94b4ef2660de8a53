"""Client sessions in the executor: registration, dedupe, expiry decided by the log.

Each test drives a real :class:`Executor` over a real Context: it appends
committed slots (one C-instance of this replica each, or ``no-cl``) and runs
``execute()``, as a replica does when commits arrive.
"""

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import ConfigError
from sdpaxos.core.executor import Executor
from sdpaxos.core.ready import Executed, Reply, ReplyKind
from sdpaxos.core.sessions import (
    SESSION_ID_BYTES,
    Outcome,
    Sessions,
    decode_session_id,
    encode_session_id,
    registration,
)
from sdpaxos.core.types import NO_CL, Command, ReplicaId
from tests.core.roles.conftest import committed_instance, make_ctx
from tests.core.state import whole_state

ME = ReplicaId(0)


class App:
    """Records every payload it applies; the result is ``ok:<payload>``."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []

    def apply(self, payload: bytes) -> bytes:
        self.applied.append(payload)
        return b"ok:" + payload


class Log:
    """A replica's executor, fed slot by slot."""

    def __init__(self, **config: Any) -> None:
        self.ctx = make_ctx(3, me=0, sequencer=0, **config)
        self.app = App()
        self.waiters: set[tuple[int, int]] = set()
        self.executor = Executor(self.ctx, self.app, self.waiters, observe=True)
        self.slots = 0
        self.own = 0
        self._replies: list[Reply] = []

    @property
    def sessions(self) -> Sessions:
        return self.executor.sessions

    def slot(self, *commands: Command, wait: bool = True) -> list[Executed]:
        """Commit one slot holding ``commands`` (``no-cl`` if none) and execute it."""
        olog, j = self.ctx.olog, self.slots
        olog.grow(j + 1)
        if commands:
            olog.owner[j], olog.count[j] = ME, 1
            self.ctx.clog.logs[ME][self.own] = committed_instance(commands)
            self.own += 1
            if wait:
                self.waiters.update((c.client_id, c.seq) for c in commands)
        else:
            olog.owner[j], olog.count[j] = NO_CL, 0
        olog.committed[j] = True
        self.slots += 1
        return self.execute()

    def execute(self) -> list[Executed]:
        self.executor.execute()
        rd = self.ctx.out.take()
        self._replies += rd.replies
        return rd.executed

    def replies(self) -> list[Reply]:
        out, self._replies = self._replies, []
        return out

    def register(self, nonce: int) -> int:
        (entry,) = self.slot(registration(nonce))
        return decode_session_id(entry.result)


def expiring(lifetime: int = 3, sessions_max: int = 8) -> Log:
    return Log(session_lifetime_slots=lifetime, sessions_max=sessions_max)


# ------------------------------------------------------------------ registration


def test_registration_assigns_ids_from_a_counter_and_answers_the_nonce() -> None:
    log = expiring()
    (first,) = log.slot(registration(500))
    (reply,) = log.replies()
    assert reply == Reply(500, 0, ReplyKind.EXECUTED, encode_session_id(1))
    assert first.result == (1).to_bytes(SESSION_ID_BYTES, "big") and not first.duplicate
    assert decode_session_id(reply.result) == 1
    assert log.register(500) == 2  # the same nonce again: another session
    assert log.register(77) == 3
    assert log.app.applied == []  # the state machine never sees a registration
    assert log.sessions.get(1) == (0, None, 0) and len(log.sessions) == 3


def test_session_ids_are_never_zero_and_decode_rejects_what_is_not_an_id() -> None:
    assert Sessions().next_id == 1
    for bad in (None, b"", b"ok:x", encode_session_id(0), b"\x00" * (SESSION_ID_BYTES + 1)):
        with pytest.raises(ValueError):
            decode_session_id(bad)
    with pytest.raises(ValueError):
        registration(0)


def test_a_registered_session_dedupes_its_retries() -> None:
    log = expiring()
    sid = log.register(9)
    log.replies()
    (a,) = log.slot(Command(sid, 1, b"a"))
    (again,) = log.slot(Command(sid, 1, b"a"))  # a retry, in another C-instance
    assert (a.result, a.duplicate, again.result, again.duplicate) == (b"ok:a", False, b"ok:a", True)
    (b,) = log.slot(Command(sid, 2, b"b"))
    assert b.result == b"ok:b" and not b.duplicate
    (old,) = log.slot(Command(sid, 1, b"a"))  # older than the last: no stored result
    assert old.duplicate and old.result is None and not old.session_expired
    assert log.app.applied == [b"a", b"b"]
    assert [r.kind for r in log.replies()] == [ReplyKind.EXECUTED] * 4


def test_without_a_lifetime_a_client_chooses_its_id_and_nothing_expires() -> None:
    log = Log()
    assert log.sessions.lifetime_slots is None
    (a,) = log.slot(Command(42, 1, b"a"))  # unknown id: opens its session, as before
    for _ in range(50):
        log.slot()
    (dup,) = log.slot(Command(42, 1, b"a"))
    assert not a.duplicate and dup.duplicate and not dup.session_expired
    assert log.app.applied == [b"a"] and log.ctx.stats.sessions_expired == 0


# ------------------------------------------------------------------------ expiry


def test_an_unknown_client_is_answered_session_expired_and_not_applied() -> None:
    log = expiring()
    (e,) = log.slot(Command(42, 1, b"a"))
    assert e.session_expired and e.result is None and not e.duplicate
    assert log.replies() == [Reply(42, 1, ReplyKind.SESSION_EXPIRED, None)]
    assert log.app.applied == []
    assert log.ctx.stats.commands_session_expired == 1


def test_a_session_expires_lifetime_slots_after_its_last_command() -> None:
    log = expiring(lifetime=3)
    sid = log.register(1)  # slot 0
    log.slot(Command(sid, 1, b"a"))  # slot 1: last slot 1
    log.slot()  # slots 2, 3, 4: after slot 4, 1 < 4 - 3 is false: still live
    log.slot()
    log.slot()
    assert sid in log.sessions
    log.slot()  # after slot 5: 1 < 5 - 3
    assert sid not in log.sessions and log.ctx.stats.sessions_expired == 1
    log.replies()
    (late,) = log.slot(Command(sid, 1, b"a"))  # the client's retry comes too late
    assert late.session_expired and late.result is None
    assert log.replies() == [Reply(sid, 1, ReplyKind.SESSION_EXPIRED, None)]
    assert log.app.applied == [b"a"]  # applied once, never again


def test_a_duplicate_keeps_its_session_alive() -> None:
    log = expiring(lifetime=2)
    sid = log.register(1)
    log.slot(Command(sid, 1, b"a"))
    for _ in range(5):
        log.slot()
        log.slot(Command(sid, 1, b"a"))  # retries keep arriving
    assert sid in log.sessions and log.app.applied == [b"a"]


def test_the_table_bound_expires_the_oldest_last_slot_then_the_lowest_id() -> None:
    log = expiring(lifetime=100, sessions_max=3)
    a, b = log.register(1), log.register(2)  # slots 0, 1
    c = log.register(3)  # slot 2
    log.slot(Command(b, 1, b"b"), Command(a, 1, b"a"))  # slot 3: a and b tie, a < b
    assert log.sessions.order() == [c, a, b]
    d = log.register(4)  # table full: c (oldest last slot) expires
    assert c not in log.sessions and log.sessions.order() == [a, b, d]
    e = log.register(5)  # a and b tie on slot 3: the lowest id goes
    assert a not in log.sessions and b in log.sessions
    log.register(6)
    assert b not in log.sessions and log.sessions.order() == [d, e, 6]
    assert log.ctx.stats.sessions_expired == 3
    (late,) = log.slot(Command(a, 1, b"a"))
    assert late.session_expired and log.app.applied == [b"b", b"a"]


def test_a_delayed_duplicate_registration_opens_a_spare_session_that_expires() -> None:
    log = expiring(lifetime=2, sessions_max=4)
    sid = log.register(7)
    log.slot(Command(sid, 1, b"a"))
    spare = log.register(7)  # the registration's retry, executed late
    assert spare != sid
    for seq in range(2, 8):
        log.slot(Command(sid, seq, b"x%d" % seq))
    assert spare not in log.sessions and sid in log.sessions
    assert log.app.applied == [b"a"] + [b"x%d" % s for s in range(2, 8)]


def test_expiry_is_the_same_however_execution_is_split_across_calls() -> None:
    """Expiry follows slots, not ``execute()`` calls: a slot committed before its
    C-instance arrives (execution waits mid-log) expires the same sessions."""
    whole = expiring(lifetime=1)
    split = expiring(lifetime=1)
    for log in (whole, split):
        sid = log.register(1)
        log.slot(Command(sid, 1, b"a"))
    # whole: two empty slots, then the command. split: same, but the slot with
    # the command is committed before its C-instance.
    whole.slot()
    whole.slot()
    (w,) = whole.slot(Command(1, 2, b"b"))
    split.slot()
    olog, j = split.ctx.olog, split.slots
    olog.grow(j + 2)
    olog.owner[j], olog.count[j], olog.committed[j] = NO_CL, 0, True
    olog.owner[j + 1], olog.count[j + 1], olog.committed[j + 1] = ME, 1, True
    split.slots += 2
    assert split.execute() == []  # blocked on the C-instance, after expiring one
    assert split.ctx.stats.sessions_expired == 1 and 1 not in split.sessions
    split.ctx.clog.logs[ME][split.own] = committed_instance((Command(1, 2, b"b"),))
    (s,) = split.execute()
    assert w.session_expired == s.session_expired is True
    assert whole.sessions == split.sessions


# --------------------------------------------------------------------- snapshots


def test_dump_and_load_restore_the_whole_state() -> None:
    log = expiring(lifetime=4, sessions_max=4)
    ids = [log.register(n) for n in range(1, 5)]
    log.slot(Command(ids[2], 1, b"c"), Command(ids[0], 1, b"a"))
    log.slot(Command(ids[0], 2, b"a2"))
    sessions = log.sessions
    value = sessions.dump()
    assert value == (
        1,
        4,
        4,
        5,
        (
            (ids[1], 0, None, 1),
            (ids[3], 0, None, 3),
            (ids[2], 1, b"ok:c", 4),
            (ids[0], 2, b"ok:a2", 5),
        ),
    )
    for back in (value, msgpack.unpackb(msgpack.packb(value))):  # lists come back
        restored = Sessions.load(back)
        assert restored == sessions and restored.dump() == value
        assert restored.order() == sessions.order() and restored.next_id == sessions.next_id
        assert restored.lifetime_slots == 4 and restored.sessions_max == 4
        # The same future on both: registrations (id counter, size bound), expiry.
        for table in (sessions, restored):
            table.run(registration(9), 6, App().apply)
            table.slot_executed(6)
            table.slot_executed(9)
        assert restored == sessions
        sessions = Sessions.load(value)


def test_dump_and_load_without_expiry_and_with_client_chosen_ids() -> None:
    log = Log()
    log.slot(Command(42, 3, b"x"))
    assert Sessions.load(log.sessions.dump()) == log.sessions
    assert log.sessions.dump() == (1, None, 1 << 16, 1, ((42, 3, b"ok:x", 0),))


@pytest.mark.parametrize(
    "bad",
    [
        None,
        (2, None, 8, 1, ()),
        (1, 0, 8, 1, ()),
        (1, None, 8, 0, ()),
        (1, None, 8, 1, ((0, 1, None, 0),)),
        (1, None, 8, 1, ((5, 1, "text", 0),)),
        (1, None, 8, 1, ((5, 1, None, 3), (4, 1, None, 3))),
        (1, 3, 1, 9, ((5, 1, None, 3), (6, 1, None, 3))),
    ],
)
def test_load_refuses_what_is_not_a_dump(bad: Any) -> None:
    with pytest.raises(ValueError):
        Sessions.load(bad)


# ------------------------------------------------------------------------ config


def test_the_config_validates_the_session_limits() -> None:
    assert ClusterConfig(replicas=3).session_lifetime_slots is None
    for bad in ({"session_lifetime_slots": 0}, {"session_lifetime_slots": 2.0}):
        with pytest.raises(ConfigError, match="session_lifetime_slots"):
            ClusterConfig(replicas=3, **bad)
    for bad in ({"sessions_max": 0}, {"sessions_max": None}):
        with pytest.raises(ConfigError, match="sessions_max"):
            ClusterConfig(replicas=3, **bad)


# ---------------------------------------------------------------------- property

_op = st.one_of(
    st.tuples(st.just("register"), st.integers(1, 2)),  # a client (re-)registers
    st.tuples(st.just("next"), st.integers(1, 2)),  # a client's next command
    st.tuples(st.just("retry"), st.integers(0, 7)),  # one of the last 8 sent, again
    st.tuples(st.just("old"), st.integers(0, 1_000)),  # any command sent before, again
    st.tuples(st.just("slot"), st.just(0)),  # close the slot
)


@settings(max_examples=500, derandomize=True, deadline=None)
@given(
    ops=st.lists(_op, max_size=60),
    lifetime=st.integers(1, 3),
    sessions_max=st.integers(1, 3),
)
def test_no_interleaving_applies_a_client_command_twice(
    ops: list[tuple[str, int]], lifetime: int, sessions_max: int
) -> None:
    """Registrations (and their retries), commands and retries of any earlier
    command, packed into slots in any way: the state machine applies each
    ``(session, seq)`` at most once, and a registered client's next command in
    a live session is applied."""
    log = expiring(lifetime, sessions_max)
    nonces = iter(range(1, 1_000))
    session: dict[int, int] = {}  # client -> session id
    seq: dict[int, int] = {}
    sent: list[Command] = []
    pending: list[Command] = []
    fresh: set[tuple[int, int]] = set()

    def close() -> None:
        if not pending:
            log.slot()
            return
        for entry in log.slot(*pending):
            cmd = entry.command
            if cmd.seq == 0:
                client = cmd.client_id // 1_000
                if client not in session:
                    session[client], seq[client] = decode_session_id(entry.result), 0
            elif (cmd.client_id, cmd.seq) in fresh:
                fresh.discard((cmd.client_id, cmd.seq))
                # Its first arrival: applied, unless its session expired.
                assert entry.session_expired or not entry.duplicate
        pending.clear()

    for kind, arg in ops:
        if kind == "register":
            cmd = registration(arg * 1_000 + next(nonces))
            session.pop(arg, None)
        elif kind == "next" and arg in session:
            seq[arg] += 1
            cmd = Command(session[arg], seq[arg], b"%d:%d" % (session[arg], seq[arg]))
            fresh.add((cmd.client_id, cmd.seq))
        elif kind == "retry" and sent:
            cmd = sent[-1 - arg % min(8, len(sent))]
        elif kind == "old" and sent:
            cmd = sent[arg % len(sent)]
        else:
            close()
            continue
        sent.append(cmd)
        pending.append(cmd)
    close()
    applied = log.app.applied
    assert len(applied) == len(set(applied)), f"applied twice: {applied}"


def test_outcomes_are_the_four_documented_ones() -> None:
    assert [o.name for o in Outcome] == ["APPLIED", "DUPLICATE", "EXPIRED", "REGISTERED"]


# ------------------------------------------------------------------ batches

_batch_command = st.one_of(
    st.builds(registration, st.integers(1, 5)),
    st.builds(
        Command,
        st.integers(0, 6),  # 0: no session
        st.integers(1, 6),
        st.binary(max_size=2),
        st.none(),
    ),
)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(
    slots=st.lists(st.lists(_batch_command, max_size=8), max_size=8),
    lifetime=st.one_of(st.none(), st.integers(1, 3)),
    sessions_max=st.integers(1, 3),
)
def test_run_batch_is_run_per_command(
    slots: list[list[Command]], lifetime: int | None, sessions_max: int
) -> None:
    """:meth:`Sessions.run_batch` ends in the same whole state as :meth:`run`
    per command (``apply`` for ``client_id`` 0): every field of the table
    (sessions, expiry buckets and their heaps, counters), the state machine's
    applies and each command's result and outcome; with or without ``results``."""

    def per_command() -> tuple[Sessions, App, list[tuple[bytes | None, Outcome]]]:
        table, app, results = Sessions(lifetime, sessions_max), App(), []
        for slot, commands in enumerate(slots):
            for cmd in commands:
                if cmd.client_id:
                    results.append(table.run(cmd, slot, app.apply))
                else:
                    results.append((app.apply(cmd.payload), Outcome.APPLIED))
            table.slot_executed(slot)
        return table, app, results

    def batched(keep: bool) -> tuple[Sessions, App, list[tuple[bytes | None, Outcome]]]:
        table, app, results = Sessions(lifetime, sessions_max), App(), []
        for slot, commands in enumerate(slots):
            table.run_batch(commands, slot, app.apply, results if keep else None)
            table.slot_executed(slot)
        return table, app, results

    def whole(table: Sessions) -> Any:
        return whole_state(table)  # type: ignore[arg-type]  # every slot, walked

    want, want_app, want_results = per_command()
    assert want.duplicates == sum(o is Outcome.DUPLICATE for _, o in want_results)
    assert want.refused == sum(o is Outcome.EXPIRED for _, o in want_results)
    for keep in (True, False):
        got, got_app, got_results = batched(keep)
        assert whole(got) == whole(want)
        assert got_app.applied == want_app.applied
        assert got_results == (want_results if keep else [])


def _ok(payload: bytes) -> bytes:
    return b"ok:" + payload


def test_run_batch_moves_a_session_to_its_new_slot_for_expiry() -> None:
    """The next command of a live session in a later slot keeps it alive from
    that slot on (its expiry bucket moves), whether or not the batch is the
    first to touch it."""
    table = Sessions(lifetime_slots=2)
    (sid_result, _), (other_result, _) = (
        table.run(registration(1), 0, _ok),
        table.run(registration(2), 0, _ok),
    )
    sid, other = decode_session_id(sid_result), decode_session_id(other_result)
    table.run_batch((Command(sid, 1, b"a"), Command(other, 1, b"b")), 2, _ok)
    table.run_batch((Command(sid, 2, b"c"),), 4, _ok)
    table.slot_executed(5)  # expires last slots below 3: other (2), not sid (4)
    assert sid in table and other not in table
    assert table.order() == [sid]


def test_an_executor_without_observer_counts_refused_commands_and_answers_waiters() -> None:
    """Not observed, the executor still counts refused commands
    (``commands_session_expired``) whether or not a client waits here, and
    answers the one that waits: without waiters it passes the session table
    no ``results``, with one it does."""
    ctx = make_ctx(3, me=0, sequencer=0, session_lifetime_slots=3)
    app = App()
    waiters: set[tuple[int, int]] = set()
    executor = Executor(ctx, app, waiters, observe=False)
    olog = ctx.olog

    def commit(j: int, *commands: Command) -> None:
        olog.grow(j + 1)
        olog.owner[j], olog.count[j], olog.committed[j] = ME, 1, True
        ctx.clog.logs[ME][j] = committed_instance(commands)
        executor.execute()

    commit(0, registration(7))
    (sid,) = executor.sessions.order()
    commit(1, Command(sid + 1, 1, b"x"), Command(sid, 1, b"y"), Command(sid + 2, 1, b"z"))
    assert ctx.stats.commands_session_expired == 2
    assert app.applied == [b"y"]
    assert ctx.out.take().replies == []
    waiters.update({(sid, 2), (sid + 1, 2)})
    commit(2, Command(sid, 2, b"w"), Command(sid + 1, 2, b"v"))
    assert ctx.stats.commands_session_expired == 3
    assert ctx.stats.commands_executed == 6
    assert app.applied == [b"y", b"w"]
    rd = ctx.out.take()
    assert rd.replies == [
        Reply(sid, 2, ReplyKind.EXECUTED, b"ok:w"),
        Reply(sid + 1, 2, ReplyKind.SESSION_EXPIRED, None),
    ]
    assert rd.executed == []
