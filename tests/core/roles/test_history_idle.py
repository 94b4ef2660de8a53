"""The sequencer keeps its history table only while reads come (``history_idle_ms``).

What must hold whatever the timing: a read's slot is never below the last slot
given to a write of its key (else the reader could miss that write). What the
idle rule adds: after ``history_idle_ms`` without a read the table is dropped and
no keys are kept; the next read waits for the whole log and starts the table again.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpaxos.core import sequencer as sequencer_module
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import ConfigError
from sdpaxos.core.sequencer import Sequencer
from sdpaxos.core.types import Command, Slot, keys_of
from tests.core.roles.conftest import Recorder, make_ctx
from tests.core.state import whole_state

IDLE_MS = 100.0


def make(idle_ms: float | None = IDLE_MS) -> Sequencer:
    ctx = make_ctx(3, me=0, sequencer=0, history_idle_ms=idle_ms)
    return Sequencer(ctx, Recorder())


def write(seq: Sequencer, owner: int, index: int, key: bytes) -> None:
    seq.order(owner, index, (key,))
    seq.allocate()


def test_a_fresh_sequencer_keeps_no_table_until_its_first_read() -> None:
    seq = make()
    seq.order(1, 0, (b"a",))
    assert not seq.recording and seq.pending_keys == {}  # no keys kept, even before allocating
    seq.allocate()  # slot 0
    assert not seq.recording and seq.history == {}
    assert seq.read_slot(b"b") == 0  # the whole log (i_G)
    assert seq.recording
    write(seq, 1, 1, b"b")  # slot 1: recorded
    assert seq.read_slot(b"b") == 1 and seq.read_slot(b"a") == 0 and seq.history == {b"b": 1}


def test_reads_within_the_idle_time_keep_the_table() -> None:
    seq = make()
    seq.read_slot(b"x")
    write(seq, 1, 0, b"a")  # slot 0
    write(seq, 1, 1, b"b")  # slot 1
    for step in range(5):
        seq.s.now_ms += IDLE_MS * 0.9
        assert seq.read_slot(b"a") == 0  # the key's own slot, not the whole log
        write(seq, 2, step, b"c")
    assert seq.recording and seq.history[b"a"] == 0


def test_no_read_for_the_idle_time_drops_the_table_and_keeps_no_keys() -> None:
    seq = make()
    seq.read_slot(b"x")
    write(seq, 1, 0, b"a")
    assert seq.history == {b"a": 0}
    seq.s.now_ms += IDLE_MS + 1
    seq.order(1, 1, (b"b",))
    seq.order(2, 0, (b"c",))
    seq.allocate()  # slots 1 and 2, after the table was dropped
    assert not seq.recording
    assert seq.history == {} and seq.pending_keys == {}
    seq.order(1, 2, (b"d",))  # ordered while not recording: its keys are not kept
    assert seq.pending_keys == {}


def test_the_read_after_idle_waits_for_the_whole_log_then_the_table_restarts() -> None:
    seq = make()
    seq.read_slot(b"x")
    write(seq, 1, 0, b"a")  # slot 0
    seq.s.now_ms += IDLE_MS + 1
    write(seq, 1, 1, b"b")  # slot 1: dropped the table, not recorded
    write(seq, 2, 0, b"c")  # slot 2
    assert seq.read_slot(b"a") == 2  # the whole log (i_G), not a's slot 0
    assert seq.recording
    write(seq, 1, 2, b"a")  # slot 3: recorded again
    assert seq.read_slot(b"a") == 3
    assert seq.read_slot(b"b") == 2  # written before the restart: at the floor
    assert seq.read_slot(b"never") == 2


def test_with_idle_none_the_table_is_kept_from_the_start_however_long_no_read_comes() -> None:
    seq = make(None)
    write(seq, 1, 0, b"a")
    seq.s.now_ms += 1e9
    write(seq, 1, 1, b"b")
    assert seq.recording and seq.history == {b"a": 0, b"b": 1}
    assert seq.read_slot(b"a") == 0
    seq.start_view(Slot(0), Slot(5))
    assert seq.recording and seq.history == {} and seq.history_floor == 4


def test_a_new_view_keeps_no_table_until_a_read_and_floors_at_its_rebuilt_log() -> None:
    seq = make()
    seq.read_slot(b"x")
    write(seq, 1, 0, b"a")
    assert seq.recording
    seq.start_view(Slot(0), Slot(5))
    assert not seq.recording and seq.history == {} and seq.history_floor == 4


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), "2000", True])
def test_history_idle_ms_must_be_none_or_a_positive_duration(bad: object) -> None:
    with pytest.raises(ConfigError, match="history_idle_ms"):
        ClusterConfig(replicas=3, history_idle_ms=bad)  # type: ignore[arg-type]
    assert ClusterConfig(replicas=3, history_idle_ms=None).history_idle_ms is None
    assert ClusterConfig(replicas=3, history_idle_ms=0.5).history_idle_ms == 0.5


OPS = st.lists(
    st.one_of(
        # A write of key k by owner o; ``known``: whether the sequencer learns its key.
        st.tuples(
            st.just("write"), st.integers(0, 2), st.sampled_from([b"a", b"b", b"c"]), st.booleans()
        ),
        st.tuples(st.just("allocate")),
        st.tuples(st.just("wait"), st.sampled_from([1.0, IDLE_MS / 2, IDLE_MS + 1])),
        st.tuples(st.just("read"), st.sampled_from([b"a", b"b", b"c", b""])),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(OPS)
def test_a_read_never_waits_for_less_than_the_last_write_of_its_key(ops: list[tuple]) -> None:
    """Whatever the order of writes, allocations, reads and idle periods, a
    read's slot is at least the last slot allocated to a write of its key
    (including writes whose keys the sequencer never learnt); a read of no key
    waits for the whole log."""
    seq = make()
    olog = seq.s.olog
    next_index = [0, 0, 0]
    written: dict[tuple[int, int], bytes] = {}  # what each C-instance really writes
    covered = [0, 0, 0]
    last_write: dict[bytes, int] = {}
    seen_upto = 0
    for op in ops:
        if op[0] == "write":
            _, owner, key, known = op
            index = next_index[owner]
            next_index[owner] += 1
            written[(owner, index)] = key
            seq.order(owner, index, (key,) if known else None)
        elif op[0] == "allocate":
            seq.allocate()
            for slot in range(seen_upto, olog.acc_upto):
                owner = olog.owner[slot - olog.base]
                for index in range(covered[owner], covered[owner] + olog.count[slot - olog.base]):
                    last_write[written[(owner, index)]] = slot
                covered[owner] += olog.count[slot - olog.base]
            seen_upto = olog.acc_upto
        elif op[0] == "wait":
            seq.s.now_ms += op[1]
        else:
            key = op[1]
            slot = seq.read_slot(key)
            if key:
                assert slot >= last_write.get(key, -1)
            else:
                assert slot == olog.acc_upto - 1


def test_keys_of_known_commands_are_collected_only_when_the_table_wants_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``order_commands`` (a C-accept the sequencer got, or its own) collects the
    batch's keys only while the table is kept and the instance is not ordered
    yet; otherwise it orders the instance exactly as with unknown keys."""
    collected: list[int] = []

    def counting_keys_of(commands: tuple[Command, ...]) -> tuple[bytes, ...]:
        collected.append(len(commands))
        return keys_of(commands)

    monkeypatch.setattr(sequencer_module, "keys_of", counting_keys_of)
    batch = (Command(1, 1, b"x", b"b"), Command(2, 1, b"y", b"a"), Command(3, 1, b"z", b"b"))
    idle, unknown = make(), make()
    idle.order_commands(1, 0, batch)
    unknown.order(1, 0, None)
    assert collected == [] and idle.want_upto == {1: 1}
    assert whole_state(idle) == whole_state(unknown)  # type: ignore[arg-type]
    recording = make(None)
    recording.order_commands(1, 0, batch)
    assert collected == [3] and recording.pending_keys == {(1, 0): (b"a", b"b")}
    recording.allocate()  # instance 0 of replica 1 ordered: slot 0
    recording.order_commands(1, 0, batch)  # a resent C-accept: already ordered
    recording.order_commands(1, 1, None)  # keys unknown
    assert collected == [3] and recording.pending_keys == {}
    assert recording.history == {b"a": 0, b"b": 0}
