"""Property tests: histories made from a sequential run are linearizable, and a
corrupted result is caught exactly when a brute-force checker says so."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import given, note
from hypothesis import strategies as st

from sdpaxos.check import (
    ILLEGAL,
    UNKNOWN,
    CasRegister,
    FifoQueue,
    KeyValue,
    Model,
    Operation,
    SetModel,
    Verdict,
    check,
)
from tests.check.helpers import brute_force, run_kv, run_queue, run_register, run_set

VALUES = st.sampled_from([0, 1, 2])
KEYS = st.sampled_from(["a", "b"])
STRINGS = st.sampled_from(["x", "y", "z"])


@dataclass(frozen=True)
class Kind:
    """A model, a strategy for its inputs, and a reference sequential run."""

    name: str
    model: Callable[[], Model[Any]]
    inputs: st.SearchStrategy[Any]
    run: Callable[[Any, Any], tuple[Any, Any]]
    init: Any
    outputs: st.SearchStrategy[Any]


KINDS = [
    Kind(
        "cas-register",
        CasRegister,
        st.one_of(
            st.tuples(st.just("read"), st.none()),
            st.tuples(st.just("write"), VALUES),
            st.tuples(st.just("cas"), st.tuples(VALUES, VALUES)),
        ),
        run_register,
        None,
        st.one_of(st.none(), VALUES, st.booleans()),
    ),
    Kind(
        "kv",
        KeyValue,
        st.one_of(
            st.tuples(st.just("get"), KEYS),
            st.tuples(st.just("put"), KEYS, STRINGS),
            st.tuples(st.just("append"), KEYS, STRINGS),
            st.tuples(st.just("delete"), KEYS),
            st.tuples(st.just("cas"), KEYS, st.tuples(st.one_of(st.none(), STRINGS), STRINGS)),
        ),
        run_kv,
        {},
        st.one_of(st.none(), STRINGS, st.sampled_from(["xy", "yx", "xx"]), st.booleans()),
    ),
    Kind(
        "set",
        SetModel,
        st.one_of(
            st.tuples(st.just("add"), VALUES),
            st.tuples(st.just("remove"), VALUES),
            st.tuples(st.just("contains"), VALUES),
            st.tuples(st.just("read")),
        ),
        run_set,
        frozenset(),
        st.one_of(st.booleans(), st.frozensets(VALUES)),
    ),
    Kind(
        "fifo-queue",
        FifoQueue,
        st.one_of(st.tuples(st.just("enqueue"), VALUES), st.tuples(st.just("dequeue"))),
        run_queue,
        (),
        st.one_of(st.none(), VALUES),
    ),
]


@st.composite
def sequential_histories(draw: st.DrawFn, kind: Kind, ops_max: int) -> list[Operation]:
    """Run random operations one at a time, then give each an interval around
    its instant (10 * position): any such history is linearizable. Some
    operations become open (their client never heard back), and a few open
    operations that never took effect are added."""
    inputs = draw(st.lists(kind.inputs, min_size=1, max_size=ops_max))
    state = kind.init
    ops = []
    for k, inp in enumerate(inputs):
        out, state = kind.run(state, inp)
        at = 10 * k
        invoke = at - draw(st.integers(0, 25))
        if draw(st.integers(0, 5)) == 0:
            ops.append(Operation(k % 3, inp, UNKNOWN, invoke, None))
        else:
            ops.append(Operation(k % 3, inp, out, invoke, at + draw(st.integers(0, 25))))
    for inp in draw(st.lists(kind.inputs, max_size=1)):
        ops.append(Operation("late", inp, UNKNOWN, draw(st.integers(-10, 10 * len(inputs))), None))
    return draw(st.permutations(ops))


@given(st.data())
def test_histories_from_a_sequential_run_are_linearizable(data: st.DataObject) -> None:
    for kind in KINDS:
        history = data.draw(sequential_histories(kind, ops_max=12), label=kind.name)
        result = check(history, kind.model(), processes=1)
        assert result.verdict is Verdict.LINEARIZABLE, result.describe()
        # The linearization found is a real one: replay it.
        for part in result.partitions:
            model = kind.model()
            sub = model if part.key is None else model.partition_model(part.key)
            state = sub.init()
            for i in part.order:
                op = history[i]
                state = sub.step(state, op.input, op.output)
                assert state is not ILLEGAL, (part.key, op)
            placed = set(part.order)
            assert all(history[i].complete is None or i in placed for i in part.indices)


@given(st.data())
def test_a_corrupted_result_is_caught_unless_it_cannot_be_told_apart(data: st.DataObject) -> None:
    for kind in KINDS:
        history = data.draw(sequential_histories(kind, ops_max=6), label=kind.name)
        done = [i for i, op in enumerate(history) if op.complete is not None]
        if not done:
            continue
        i = data.draw(st.sampled_from(done), label="corrupted")
        wrong = data.draw(kind.outputs.filter(lambda v, old=history[i].output: v != old))
        corrupted = list(history)
        corrupted[i] = replace(history[i], output=wrong)
        note(f"{kind.name}: operation {i} now returns {wrong!r}")
        expected = brute_force(kind.model(), corrupted)
        result = check(corrupted, kind.model(), processes=1)
        assert result.verdict is (Verdict.LINEARIZABLE if expected else Verdict.NOT_LINEARIZABLE)
        # Partitioning by key is only an optimisation: the whole history agrees.
        whole = check(corrupted, kind.model(), processes=1, partition=False)
        assert whole.verdict is result.verdict


@given(st.data())
def test_random_histories_agree_with_brute_force(data: st.DataObject) -> None:
    """Arbitrary outputs and intervals, not from any run: mostly not linearizable."""
    for kind in KINDS:
        n = data.draw(st.integers(1, 5))
        ops = []
        for k in range(n):
            invoke = data.draw(st.integers(0, 20))
            is_open = data.draw(st.integers(0, 4)) == 0
            ops.append(
                Operation(
                    k,
                    data.draw(kind.inputs),
                    UNKNOWN if is_open else data.draw(kind.outputs),
                    invoke,
                    None if is_open else invoke + data.draw(st.integers(0, 10)),
                )
            )
        expected = brute_force(kind.model(), ops)
        assert check(ops, kind.model(), processes=1).ok is expected, (kind.name, ops)
