"""The checker's semantics and limits on small, hand-made histories."""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest

from sdpaxos.check import (
    ILLEGAL,
    UNKNOWN,
    CasRegister,
    HistoryError,
    KeyValue,
    Model,
    ModelError,
    Operation,
    Register,
    Verdict,
    check,
)
from sdpaxos.check.formats import load
from sdpaxos.check.search import search
from tests.check.helpers import histories_dir

L, N, U = Verdict.LINEARIZABLE, Verdict.NOT_LINEARIZABLE, Verdict.UNKNOWN


def op(client: Any, inp: Any, out: Any, invoke: float, complete: float | None) -> Operation:
    return Operation(client, inp, out, invoke, complete)


def verdict(history: list[Operation], model: Model[Any] | None = None) -> Verdict:
    return check(history, model or Register(), processes=1).verdict


def test_intervals_are_closed_a_read_at_the_completion_instant_may_see_the_write() -> None:
    w = op(1, ("write", 1), None, 0, 5)
    assert verdict([w, op(2, ("read",), 1, 5, 6)]) is L
    assert verdict([w, op(2, ("read",), None, 5, 6)]) is L  # or not yet
    assert verdict([w, op(2, ("read",), None, 6, 7)]) is N  # strictly after: stale


def test_an_open_operation_may_or_may_not_have_happened_until_the_end() -> None:
    w = op(1, ("write", 1), UNKNOWN, 0, None)
    assert verdict([w, op(2, ("read",), None, 10, 11)]) is L
    assert verdict([w, op(2, ("read",), 1, 10, 11), op(2, ("read",), 1, 20, 21)]) is L
    # Once seen, it happened: it cannot be undone.
    assert verdict([w, op(2, ("read",), 1, 10, 11), op(2, ("read",), None, 20, 21)]) is N


def test_an_empty_history_is_linearizable() -> None:
    for processes in (None, 1, 2):
        result = check([], KeyValue(), processes=processes)
        assert result.ok and result.partitions == ()


def test_a_completed_operation_with_unknown_output_did_happen() -> None:
    w = op(1, ("write", 1), UNKNOWN, 0, 1)
    assert verdict([w, op(2, ("read",), None, 2, 3)]) is N
    assert verdict([w, op(2, ("read",), 1, 2, 3)]) is L
    r = op(2, ("read",), UNKNOWN, 2, 3)  # a read whose result was lost fits any state
    assert verdict([w, r]) is L


def test_a_failed_cas_ran_and_saw_a_different_value() -> None:
    w = op(1, ("write", 1), None, 0, 1)
    assert verdict([w, op(2, ("cas", (1, 2)), False, 2, 3)], CasRegister()) is N
    assert verdict([w, op(2, ("cas", (0, 2)), False, 2, 3)], CasRegister()) is L
    in_doubt = op(2, ("cas", (1, 2)), UNKNOWN, 2, None)
    assert verdict([w, in_doubt, op(3, ("read",), 2, 4, 5)], CasRegister()) is L
    assert verdict([w, in_doubt, op(3, ("read",), 1, 4, 5)], CasRegister()) is L


def test_equal_open_writes_are_interchangeable_but_each_counts_once() -> None:
    ones = [op(c, ("write", 1), UNKNOWN, c, None) for c in range(3)]
    twos = [op(8, ("write", 2), None, 5, 6), op(8, ("write", 2), None, 15, 16)]
    # Reading 1, 2, 1, 2, 1 needs all three in-doubt writes of 1 to have happened.
    values = [(1, 3), (2, 10), (1, 12), (2, 20), (1, 22)]
    reads = [op(9, ("read",), v, t, t + 1) for v, t in values]
    assert verdict([*ones, *twos, *reads]) is L
    assert verdict([*ones[:2], *twos, *reads]) is N


def test_the_witness_names_the_longest_prefix_and_what_could_not_follow() -> None:
    history = [
        op("a", ("write", 1), None, 0, 1),
        op("b", ("write", 2), None, 2, 10),
        op("c", ("read",), 3, 3, 4),  # nobody wrote 3
    ]
    result = check(history, Register(), processes=1)
    w = result.witness
    assert result.verdict is N and w is not None
    # Longest: both writes placed (the most completed operations), then the read.
    assert [p[0] for p in w.prefix] == history[:2]
    assert [p[1] for p in w.prefix] == [1, 2]
    assert w.state == 2 and w.blocking is history[2]
    [attempt] = w.attempts
    assert attempt.op is history[2] and attempt.state == 2 and attempt.next_state is ILLEGAL
    assert not attempt.legal
    text = result.describe()
    assert "not linearizable" in text and "read -> 3" in text and "illegal" in text


def _many_concurrent_appends(n: int) -> list[tuple[Any, Any, float, float | None]]:
    ops: list[tuple[Any, Any, float, float | None]] = [
        (("append", "k", f"<{i}>"), None, 0, 100) for i in range(n)
    ]
    ops.append((("get", "k"), "nope", 101, 102))
    return ops


def test_past_the_deadline_the_answer_is_unknown_with_the_best_prefix_so_far() -> None:
    ticks = itertools.count()
    outcome = search(
        KeyValue().partition_model("k"),
        _many_concurrent_appends(9),
        clock=lambda: float(next(ticks)),
        deadline=3.0,
    )
    assert outcome.verdict == "unknown" and outcome.reason == "deadline"
    assert 0 < outcome.configs <= 4 * 256 and len(outcome.order) == 9


def test_a_zero_timeout_gives_unknown_not_a_hang() -> None:
    history = [op(i, ("append", "k", str(i)), None, 0, 10) for i in range(8)]
    history.append(op(9, ("get", "k"), "x", 11, 12))
    result = check(history, KeyValue(), timeout_s=0.0, processes=1)
    assert result.verdict is U and result.witness is None
    assert str(result.verdict) == "unknown"


def test_the_memo_cap_bounds_memory_and_keeps_the_verdict() -> None:
    # Concurrent writes of few values reach the same configuration many ways.
    ops: list[tuple[Any, Any, float, float | None]] = [
        (("write", i % 2), None, 0, 100) for i in range(9)
    ]
    ops.append((("read",), 5, 101, 102))
    model = Register()
    free = search(model, ops)
    capped = search(model, ops, memo_entries_max=50)
    assert free.verdict == capped.verdict == "illegal"
    assert not free.memo_full and free.memo_size > 50
    assert capped.memo_full and capped.memo_size == 50
    assert capped.configs > free.configs  # forgetting costs time, not correctness


def test_a_failing_key_decides_and_the_rest_need_not_be_checked() -> None:
    loaded = load(histories_dir() / "kv/c10-bad.txt", "kv")
    quick = check(loaded.history, loaded.model, processes=1)
    full = check(loaded.history, loaded.model, processes=1, stop_on_failure=False)
    assert quick.verdict is full.verdict is N
    assert any(not p.checked for p in quick.partitions)
    assert all(p.checked for p in full.partitions)
    bad = {p.key for p in full.partitions if p.verdict is N}
    assert {p.key for p in quick.partitions if p.verdict is N} <= bad
    assert len(bad) == 8  # every key but two is broken in this history


@pytest.mark.parametrize("name", ["kv/c10-bad.txt", "kv/c50-ok.txt", "etcd/etcd_002.log"])
def test_worker_processes_agree_with_one_process(name: str) -> None:
    fmt = "kv" if name.startswith("kv") else "etcd"
    loaded = load(histories_dir() / name, fmt)
    one = check(loaded.history, loaded.model, processes=1, stop_on_failure=False)
    two = check(loaded.history, loaded.model, processes=2, stop_on_failure=False)
    assert two.verdict is one.verdict
    assert [p.verdict for p in two.partitions] == [p.verdict for p in one.partitions]
    assert two.processes == (2 if len(one.partitions) > 1 else 1)


class Exploding(Model[int]):
    def init(self) -> int:
        return 0

    def step(self, state: int, input: Any, output: Any) -> int:
        raise ValueError(f"cannot do {input!r}")

    def partition(self, input: Any) -> Any:
        return input[1]


@pytest.mark.parametrize("processes", [1, 2])
def test_a_model_that_raises_is_reported_with_the_operation(processes: int) -> None:
    history = [op(i, ("x", i % 2), None, i, i + 1) for i in range(4)]
    with pytest.raises(ModelError) as e:
        check(history, Exploding(), processes=processes)
    assert "the model raised ValueError: cannot do ('x', " in str(e.value)
    assert "invoked at" in str(e.value) and "Traceback" not in str(e.value)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (op(1, ("read",), 1, 5, 4), "completes at 4 before it is invoked at 5"),
        (op(1, ("read",), 1, 5, None), "must have output UNKNOWN"),
        (op(1, ["read"], 1, 5, 6), "not hashable"),
    ],
)
def test_a_malformed_history_is_refused_with_the_operation_named(
    bad: Operation, message: str
) -> None:
    with pytest.raises(HistoryError, match=message) as e:
        check([op(0, ("write", 1), None, 0, 1), bad], Register())
    assert e.value.index == 1


class DiesInWorker(Model[int]):
    """Kills the worker process it runs in (as the OOM killer would)."""

    def __init__(self) -> None:
        self.parent_pid = os.getpid()

    def init(self) -> int:
        return 0

    def step(self, state: int, input: Any, output: Any) -> int:
        if os.getpid() != self.parent_pid:
            os._exit(3)
        return state

    def partition(self, input: Any) -> Any:
        return input[1]


def test_a_worker_that_dies_leaves_its_keys_unknown_and_nothing_hangs() -> None:
    history = [op(i, ("x", i % 2), None, i, i + 1) for i in range(4)]
    result = check(history, DiesInWorker(), processes=2)
    assert result.verdict is U
    assert all(p.verdict is U for p in result.partitions)
