"""``check(history, model)``: partition, search (in parallel if worth it), explain.

The history is split into independent sub-histories when the model allows it
(P-compositionality: a map is linearizable iff each key is). Each sub-history
gets its own search (:mod:`sdpaxos.check.search`). A failing sub-history
decides the whole history, so the searches are *interleaved*, a slice of
configurations at a time, easiest first: the verdict comes from the cheapest
failing key, not from whichever key happened to be first. By default the
searches start in this process, and what is still undecided after
:data:`PARALLEL_AFTER_S` is dealt out to worker processes that run the same
interleaving on their share (with ``processes=N``, straight to N workers).

Processes share nothing but plain data: the workers are forked with the
sub-histories already in memory, are told which ones to check by index, and
send back tuples of ints and strings. Where ``fork`` is not available the check
runs in this process.

No file I/O here; the clock is read only to honour the deadline.
"""

from __future__ import annotations

import enum
import multiprocessing
import os
import queue
import time
import traceback
from collections import deque
from collections.abc import Callable, Generator, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sdpaxos.check.history import (
    History,
    HistoryError,
    Operation,
    describe_position,
    validate,
)
from sdpaxos.check.model import ILLEGAL, Model
from sdpaxos.check.search import (
    ILLEGAL_VERDICT,
    MEMO_ENTRIES_MAX,
    OK,
    UNKNOWN_VERDICT,
    SearchOp,
    SearchOutcome,
    StepError,
    search_steps,
)

ACTIVE_SEARCHES_MAX: Final = 4
"""Searches in progress at once per process. Bounds memory: the memo budget is
split between them."""

SLICE_CONFIGS: Final = 256
"""Configurations a search explores between two looks at the clock."""

SLICES_PER_TURN: Final = 64
"""Slices a search runs before the next search in the round gets its turn."""

PARALLEL_AFTER_S: Final = 0.5
"""With the default choice of processes, sub-histories still undecided after
this long in this process are handed to worker processes. Most histories are
decided sooner, and starting workers would cost more than it saves."""

PROCESSES_MAX: Final = 8
"""Upper bound on worker processes chosen automatically."""

WORKER_POLL_S: Final = 1.0
"""How often the parent looks whether its workers are still alive."""

WORKER_GRACE_S: Final = 5.0
"""How long after the deadline the parent waits for workers before stopping them."""


class Verdict(enum.Enum):
    """The answer. ``UNKNOWN`` means the deadline passed before the search decided."""

    LINEARIZABLE = "linearizable"
    NOT_LINEARIZABLE = "not linearizable"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class ModelError(RuntimeError):
    """The model raised an exception (a bug in the model, or an input it does not know)."""


@dataclass(frozen=True)
class Attempt:
    """One operation tried right after the longest linearizable prefix.

    ``state`` is the state it saw; ``next_state`` is where it would lead, or
    :data:`~sdpaxos.check.ILLEGAL` if it could not return its output there.
    A legal attempt is a dead end: nothing could be placed after it either.
    """

    op: Operation
    state: Any
    next_state: Any

    @property
    def legal(self) -> bool:
        return self.next_state is not ILLEGAL


@dataclass(frozen=True)
class Witness:
    """Why a sub-history is not linearizable.

    ``prefix`` is the longest linearizable prefix the search found, in
    linearization order, each operation with the state after it; ``state`` is
    the state after the whole prefix. ``attempts`` are the operations that
    could have gone next and what happened when each was tried there.
    Open (in-doubt) operations are listed only where they would change the
    state. ``blocking`` is the operation with the earliest completion not in the
    prefix: it had to be placed before anything invoked after it completed,
    and could not be.
    """

    partition: Hashable
    model: Model[Any]
    ops: tuple[Operation, ...]
    prefix: tuple[tuple[Operation, Any], ...]
    state: Any
    attempts: tuple[Attempt, ...]
    blocking: Operation | None

    def describe(self, prefix_shown: int = 12) -> str:
        """The witness as text: the end of the prefix, then the attempts."""
        m = self.model
        lines = [
            f"sub-history {_describe_key(self.partition)}: {len(self.ops)} operations; "
            f"longest linearizable prefix: {len(self.prefix)} operations"
        ]
        skipped = len(self.prefix) - prefix_shown
        if skipped > 0:
            lines.append(f"  ... {skipped} earlier operations ...")
        start = max(0, skipped)
        for n, (op, after) in enumerate(self.prefix[start:], start=start + 1):
            lines.append(f"  {n:4d}. {_describe_op(m, op)}    => {m.describe_state(after)}")
        lines.append(f"state after the prefix: {m.describe_state(self.state)}")
        lines.append("could not be placed next:")
        for a in self.attempts:
            verdict = (
                f"legal (=> {m.describe_state(a.next_state)}) but nothing could follow"
                if a.legal
                else "illegal in that state"
            )
            lines.append(f"  {_describe_op(m, a.op)}: {verdict}")
        if self.blocking is not None:
            lines.append(
                f"had to be placed before its completion: {_describe_op(m, self.blocking)}"
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class PartitionResult:
    """The verdict on one sub-history.

    ``indices`` are positions in the full history. ``order`` lists history
    positions: the linearization found (linearizable), or the longest
    linearizable prefix (otherwise). ``checked`` is False for a sub-history
    left unchecked because another one already failed.
    """

    key: Hashable
    indices: tuple[int, ...]
    verdict: Verdict
    order: tuple[int, ...]
    configs: int = 0
    memo_size: int = 0
    memo_full: bool = False
    elapsed_s: float = 0.0
    checked: bool = True


@dataclass(frozen=True)
class CheckResult:
    """The verdict on a history, per sub-history, with a witness if it failed."""

    verdict: Verdict
    history: tuple[Operation, ...]
    model: Model[Any]
    partitions: tuple[PartitionResult, ...]
    witness: Witness | None
    elapsed_s: float
    processes: int = 1
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """True only for ``LINEARIZABLE`` (``UNKNOWN`` is not ok)."""
        return self.verdict is Verdict.LINEARIZABLE

    def describe(self) -> str:
        """The verdict, a summary line, and the witness if there is one."""
        checked = [p for p in self.partitions if p.checked]
        counts = {v: sum(1 for p in checked if p.verdict is v) for v in Verdict}
        parts = [f"{n} {v.value}" for v, n in counts.items() if n]
        parts_text = ", ".join(parts) + "; " if parts else ""  # none for an empty history
        lines = [
            str(self.verdict),
            f"{len(self.history)} operations, {len(self.partitions)} "
            f"sub-histor{'y' if len(self.partitions) == 1 else 'ies'} "
            f"({parts_text}{len(self.partitions) - len(checked)} not needed), "
            f"{sum(p.configs for p in checked)} configurations, {self.elapsed_s:.3f} s",
        ]
        lines.extend(self.notes)
        if self.witness is not None:
            lines.append(self.witness.describe())
        return "\n".join(lines)


def _describe_key(key: Hashable) -> str:
    return "(whole history)" if key is None else f"key {key!r}"


def _describe_op(model: Model[Any], op: Operation) -> str:
    span = f"{op.invoke}..{'' if op.complete is None else op.complete}"
    where = f" ({op.meta})" if op.meta else ""
    return f"client {op.client} [{span}]{where} {model.describe_operation(op.input, op.output)}"


def partition_history(
    model: Model[Any], history: Sequence[Operation]
) -> list[tuple[Hashable, list[int]]]:
    """Split ``history`` by :meth:`Model.partition` into ``(key, positions)`` pairs.

    If any operation has no key (``None``), the history is one partition with
    key ``None``: an operation that may touch everything ties all keys together.
    """
    groups: dict[Hashable, list[int]] = {}
    for i, op in enumerate(history):
        try:
            key = model.partition(op.input)
        except Exception as e:  # a bug in the model, or an input it does not know
            raise ModelError(
                f"{describe_position(i, op)}: the model's partition raised {type(e).__name__}: {e}"
            ) from e
        if key is None:
            return [(None, list(range(len(history))))]
        groups.setdefault(key, []).append(i)
    return list(groups.items())


# ---------------------------------------------------------------------------
# Running the searches: interleaved in one process, or dealt out to workers.

_Task = tuple[Model[Any], list[SearchOp]]
_Report = tuple[int, str, tuple[int, ...], int, int, bool, str, float]
"""(task index, verdict, order, configs, memo size, memo full, reason, elapsed_s)."""

_FORK_TASKS: list[_Task] = []
"""The sub-histories, set just before forking so that workers inherit them."""


def _run_interleaved(
    indices: Sequence[int],
    tasks: Sequence[_Task],
    *,
    deadline: float | None,
    memo_per_search: int,
    stop_on_failure: bool,
    emit: Callable[[_Report], None],
) -> None:
    """Run the searches for ``tasks[i]`` (``i`` in ``indices``, cheapest first),
    a turn at a time, up to :data:`ACTIVE_SEARCHES_MAX` at once, reporting each
    result through ``emit`` as soon as it is known."""
    waiting = deque(sorted(indices, key=lambda i: len(tasks[i][1])))
    active: deque[tuple[int, Generator[None, bool | None, SearchOutcome], float]] = deque()
    while waiting or active:
        while waiting and len(active) < ACTIVE_SEARCHES_MAX:
            i = waiting.popleft()
            model, ops = tasks[i]
            gen = search_steps(
                model, ops, memo_entries_max=memo_per_search, slice_configs=SLICE_CONFIGS
            )
            next(gen)  # no work yet: from now on it can be sent a stop
            active.append((i, gen, 0.0))
        i, gen, spent_s = active.popleft()
        t0 = time.monotonic()
        outcome: SearchOutcome | None = None
        try:
            for _ in range(SLICES_PER_TURN):
                stop = deadline is not None and time.monotonic() > deadline
                if stop:
                    gen.send(True)
                else:
                    next(gen)
        except StopIteration as done:
            outcome = done.value
        except StepError as e:
            raise ModelError(str(e)) from e.__cause__
        spent_s += time.monotonic() - t0
        if outcome is None:
            active.append((i, gen, spent_s))
            continue
        emit(
            (
                i,
                outcome.verdict,
                outcome.order,
                outcome.configs,
                outcome.memo_size,
                outcome.memo_full,
                outcome.reason,
                spent_s,
            )
        )
        if stop_on_failure and outcome.verdict == ILLEGAL_VERDICT:
            return


def _worker(
    indices: list[int],
    results: Any,
    deadline: float | None,
    memo_per_search: int,
    stop_on_failure: bool,
) -> None:
    """A forked worker: check its share of ``_FORK_TASKS`` and report plain tuples."""
    try:
        _run_interleaved(
            indices,
            _FORK_TASKS,
            deadline=deadline,
            memo_per_search=memo_per_search,
            stop_on_failure=stop_on_failure,
            emit=lambda report: results.put(("result", report)),
        )
        results.put(("done", ()))
    except ModelError as e:
        results.put(("model", str(e)))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def _run_parallel(
    tasks: list[_Task],
    indices: Sequence[int],
    processes: int,
    *,
    deadline: float | None,
    memo_per_search: int,
    stop_on_failure: bool,
) -> dict[int, _Report]:
    """Deal the tasks out to ``processes`` forked workers (largest first, round
    robin, so each gets a fair mix) and collect their reports."""
    global _FORK_TASKS
    ctx = multiprocessing.get_context("fork")
    by_size = sorted(indices, key=lambda i: -len(tasks[i][1]))
    shares = [by_size[w::processes] for w in range(processes)]
    results = ctx.Queue()
    _FORK_TASKS = tasks
    workers = []
    try:
        for share in shares:
            p = ctx.Process(
                target=_worker,
                args=(share, results, deadline, memo_per_search, stop_on_failure),
                daemon=True,
            )
            p.start()
            workers.append(p)
    finally:
        _FORK_TASKS = []
    reports: dict[int, _Report] = {}
    running = len(workers)
    try:
        while running:
            wait_s = WORKER_POLL_S
            if deadline is not None:
                left_s = deadline + WORKER_GRACE_S - time.monotonic()
                if left_s <= 0:
                    break
                wait_s = min(wait_s, left_s)
            try:
                kind, payload = results.get(timeout=wait_s)
            except queue.Empty:
                if not any(p.is_alive() for p in workers) and results.empty():
                    break  # a worker died without a word (killed): what is missing is unknown
                continue
            if kind == "result":
                reports[payload[0]] = payload
                if stop_on_failure and payload[1] == ILLEGAL_VERDICT:
                    break
            elif kind == "done":
                running -= 1
            elif kind == "model":
                raise ModelError(payload)
            else:
                raise ModelError(f"a worker process failed:\n{payload}")
    finally:
        for p in workers:
            if p.is_alive():
                p.terminate()
        for p in workers:
            p.join()
        results.close()
    return reports


def _auto_processes(n_partitions: int) -> int:
    if n_partitions < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(os.cpu_count() or 1, n_partitions, PROCESSES_MAX))


def check(
    history: History,
    model: Model[Any],
    *,
    timeout_s: float | None = None,
    processes: int | None = None,
    memo_entries_max: int = MEMO_ENTRIES_MAX,
    stop_on_failure: bool = True,
    partition: bool = True,
) -> CheckResult:
    """Check ``history`` for linearizability with respect to ``model``.

    ``timeout_s`` bounds the wall time: past it, undecided sub-histories are
    ``unknown`` (and so is the verdict, unless one failed). ``processes``: how
    many worker processes (``None``: this process first, then as many workers
    as cores for what is undecided after :data:`PARALLEL_AFTER_S`; 1: this
    process only). ``memo_entries_max`` caps the remembered configurations of
    all searches together (memory). ``stop_on_failure=False`` checks every
    sub-history even after one fails (for the picture). ``partition=False``
    checks the history as a whole even if the model could split it.

    Raises :class:`~sdpaxos.check.HistoryError` for a malformed history or an
    operation the model does not know (:meth:`Model.check_input`), and
    :class:`ModelError` if the model's ``step`` or ``partition`` raises
    (naming the operation).
    """
    started = time.monotonic()
    deadline = None if timeout_s is None else started + timeout_s
    ops = tuple(history)
    validate(ops)
    for i, op in enumerate(ops):
        try:
            model.check_input(op.input)
        except ValueError as e:
            raise HistoryError(f"{describe_position(i, op)}: {e}", i) from None
    groups: list[tuple[Hashable, list[int]]] = (
        partition_history(model, ops) if partition else [(None, list(range(len(ops))))]
    )
    tasks: list[_Task] = []
    for key, positions in groups:
        sub_model = model if key is None else model.partition_model(key)
        sub_ops = [(ops[i].input, ops[i].output, ops[i].invoke, ops[i].complete) for i in positions]
        tasks.append((sub_model, sub_ops))

    n_proc = _auto_processes(len(tasks)) if processes is None else processes
    n_proc = max(1, min(n_proc, len(tasks)))
    if n_proc > 1 and "fork" not in multiprocessing.get_all_start_methods():
        n_proc = 1
    reports: dict[int, _Report] = {}

    def keep(report: _Report) -> None:
        reports[report[0]] = report

    def in_process(indices: Sequence[int], until: float | None) -> None:
        _run_interleaved(
            indices,
            tasks,
            deadline=until,
            memo_per_search=max(
                1, memo_entries_max // max(1, min(ACTIVE_SEARCHES_MAX, len(tasks)))
            ),
            stop_on_failure=stop_on_failure,
            emit=keep,
        )

    everything = range(len(tasks))
    if n_proc == 1:
        in_process(everything, deadline)
    else:
        if processes is None:
            # Most histories are decided quickly: try here first, and hand
            # only what is still undecided to the workers.
            soon = started + PARALLEL_AFTER_S
            in_process(everything, soon if deadline is None else min(soon, deadline))
            for i in [i for i, r in reports.items() if r[1] == UNKNOWN_VERDICT]:
                del reports[i]
        failed = any(r[1] == ILLEGAL_VERDICT for r in reports.values())
        rest = [i for i in everything if i not in reports]
        past_deadline = deadline is not None and time.monotonic() >= deadline
        if rest and not (failed and stop_on_failure) and not past_deadline:
            n_proc = min(n_proc, len(rest))
            per_process = min(ACTIVE_SEARCHES_MAX, -(-len(rest) // n_proc))
            reports.update(
                _run_parallel(
                    tasks,
                    rest,
                    n_proc,
                    deadline=deadline,
                    memo_per_search=max(1, memo_entries_max // (n_proc * per_process)),
                    stop_on_failure=stop_on_failure,
                )
            )
        else:
            n_proc = 1
    return _assemble(ops, model, groups, tasks, reports, time.monotonic() - started, n_proc)


_VERDICTS = {
    OK: Verdict.LINEARIZABLE,
    ILLEGAL_VERDICT: Verdict.NOT_LINEARIZABLE,
    UNKNOWN_VERDICT: Verdict.UNKNOWN,
}


def _assemble(
    ops: tuple[Operation, ...],
    model: Model[Any],
    groups: list[tuple[Hashable, list[int]]],
    tasks: list[_Task],
    reports: dict[int, _Report],
    elapsed_s: float,
    n_proc: int,
) -> CheckResult:
    partitions: list[PartitionResult] = []
    failed = any(r[1] == ILLEGAL_VERDICT for r in reports.values())
    witness: Witness | None = None
    notes: list[str] = []
    for t, (key, positions) in enumerate(groups):
        report = reports.get(t)
        if report is None:
            partitions.append(
                PartitionResult(key, tuple(positions), Verdict.UNKNOWN, (), checked=not failed)
            )
            continue
        _, code, order, configs, memo_size, memo_full, _reason, spent_s = report
        v = _VERDICTS[code]
        partitions.append(
            PartitionResult(
                key,
                tuple(positions),
                v,
                tuple(positions[j] for j in order),
                configs,
                memo_size,
                memo_full,
                spent_s,
            )
        )
        if memo_full:
            notes.append(f"note: the memo of {_describe_key(key)} reached its cap")
        if v is Verdict.NOT_LINEARIZABLE and witness is None:
            witness = build_witness(tasks[t][0], key, [ops[i] for i in positions], order)
    if failed:
        verdict = Verdict.NOT_LINEARIZABLE
    elif all(p.verdict is Verdict.LINEARIZABLE for p in partitions):
        verdict = Verdict.LINEARIZABLE
    else:
        verdict = Verdict.UNKNOWN
    return CheckResult(
        verdict, ops, model, tuple(partitions), witness, elapsed_s, n_proc, tuple(notes)
    )


def build_witness(
    model: Model[Any], key: Hashable, ops: Sequence[Operation], prefix: Sequence[int]
) -> Witness:
    """Replay ``prefix`` (positions in ``ops``) and try every operation that
    could come next: the states come from the model again, not from the
    search, so the witness is checkable on its own."""
    state = model.init()
    placed: list[tuple[Operation, Any]] = []
    for j in prefix:
        op = ops[j]
        state = model.step(state, op.input, op.output)
        if state is ILLEGAL:  # pragma: no cover - the search only reports legal prefixes
            raise AssertionError(f"the reported prefix is not legal at {op}")
        placed.append((op, state))
    done = set(prefix)
    rest = [j for j in range(len(ops)) if j not in done]
    completes = [c for j in rest if (c := ops[j].complete) is not None]
    first_complete = min(completes) if completes else None
    attempts = []
    blocking = None
    for j in sorted(rest, key=lambda j: (ops[j].invoke, j)):
        op = ops[j]
        if first_complete is not None and op.invoke > first_complete:
            continue
        after = model.step(state, op.input, op.output)
        if op.complete is None and (after is ILLEGAL or after == state):
            continue  # an in-doubt operation with no effect here: not doing it is as good
        attempts.append(Attempt(op, state, after))
    if first_complete is not None:
        blocking = min(
            (ops[j] for j in rest if ops[j].complete is not None),
            key=lambda op: (op.complete, op.invoke),
        )
    return Witness(key, model, tuple(ops), tuple(placed), state, tuple(attempts), blocking)
