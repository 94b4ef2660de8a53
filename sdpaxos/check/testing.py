"""Test your own object or service for linearizability.

Record a concurrent history while threads or asyncio tasks call your system,
then assert it is linearizable with respect to a model::

    from sdpaxos.check import KeyValue
    from sdpaxos.check.testing import assert_linearizable, record_threads

    def apply(client, op):               # one operation against your system
        f, key, *arg = op
        return store.get(key) if f == "get" else store.put(key, arg[0])

    history = record_threads([[("put", "x", "1"), ("get", "x")],
                              [("put", "x", "2"), ("get", "x")]], apply)
    assert_linearizable(history, KeyValue(), picture=tmp_path)

With Hypothesis, draw the per-client scripts with :func:`scripts` and let it
shrink a failure to a small history. On failure, :func:`assert_linearizable`
raises :class:`NotLinearizable` (an ``AssertionError``) whose message has the
witness, the path of an HTML picture of the history, and a command line that
replays the saved history.

Times: the recorder stamps each invocation and completion with the next
value of one counter shared by all threads and tasks. Within one process the
counter is a total order consistent with real time, with no clock-resolution
ties and no clock going backwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import tempfile
import threading
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sdpaxos.check.checker import CheckResult, Verdict, check
from sdpaxos.check.history import UNKNOWN, Operation
from sdpaxos.check.model import Model
from sdpaxos.check.models import MODELS

TIMEOUT_S_DEFAULT: Final = 10.0
"""Default deadline for :func:`assert_linearizable`; past it the verdict is unknown."""

RECORDED_OPS_MAX: Final = 1_000_000
"""A recorder refuses more operations than this (a runaway test, not a history)."""


@dataclass
class Pending:
    """An operation in flight: set ``output`` (or call :meth:`Recorder.complete`)."""

    client: Hashable
    input: Any
    invoke: int
    output: Any = UNKNOWN
    done: bool = field(default=False)


class Recorder:
    """Collects operations as clients issue them. Safe to share between threads
    and asyncio tasks (the counter and list are updated atomically)."""

    def __init__(self, ops_max: int = RECORDED_OPS_MAX) -> None:
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._ops: list[Operation] = []
        self._ops_max = ops_max

    def invoke(self, client: Hashable, input: Any) -> Pending:
        """Call just before sending the request."""
        with self._lock:
            return Pending(client, input, next(self._counter))

    def complete(self, pending: Pending, output: Any) -> None:
        """Call just after the response arrived: the operation took effect."""
        self._finish(pending, output, ok=True)

    def unknown(self, pending: Pending) -> None:
        """The outcome is unknown (timeout, lost connection): open to the end."""
        self._finish(pending, UNKNOWN, ok=False)

    def fail(self, pending: Pending) -> None:
        """The operation certainly did not happen: it is left out."""
        pending.done = True

    def _finish(self, pending: Pending, output: Any, ok: bool) -> None:
        if pending.done:
            raise RuntimeError(f"operation {pending.input!r} of {pending.client!r} finished twice")
        pending.done = True
        with self._lock:
            if len(self._ops) >= self._ops_max:
                raise RuntimeError(f"more than {self._ops_max} operations recorded")
            t = next(self._counter)
            self._ops.append(
                Operation(pending.client, pending.input, output, pending.invoke, t if ok else None)
            )

    def call(
        self,
        client: Hashable,
        input: Any,
        fn: Callable[[], Any],
        *,
        failures: tuple[type[BaseException], ...] = (),
    ) -> Any:
        """Record ``fn()`` as one operation and return its result.

        An exception in ``failures`` means the operation did not happen; any
        other exception leaves it open (it may have happened). Either way the
        exception propagates.
        """
        pending = self.invoke(client, input)
        try:
            output = fn()
        except failures:
            self.fail(pending)
            raise
        except BaseException:
            self.unknown(pending)
            raise
        self.complete(pending, output)
        return output

    async def acall(
        self,
        client: Hashable,
        input: Any,
        awaitable: Awaitable[Any],
        *,
        failures: tuple[type[BaseException], ...] = (),
    ) -> Any:
        """:meth:`call` for asyncio: record ``await awaitable``."""
        pending = self.invoke(client, input)
        try:
            output = await awaitable
        except failures:
            self.fail(pending)
            raise
        except BaseException:
            self.unknown(pending)
            raise
        self.complete(pending, output)
        return output

    def history(self) -> list[Operation]:
        """The operations finished so far, in completion order."""
        with self._lock:
            return list(self._ops)


def record_threads(
    scripts: Sequence[Sequence[Any]],
    apply: Callable[[int, Any], Any],
    *,
    recorder: Recorder | None = None,
    failures: tuple[type[BaseException], ...] = (),
    join_timeout_s: float = 60.0,
) -> list[Operation]:
    """Run one thread per script; client ``c`` calls ``apply(c, op)`` for each
    ``op`` of ``scripts[c]`` in turn. Threads start together (a barrier).

    An exception from ``apply`` is recorded as the module docstring says and
    the client goes on with its next operation. Returns the history.
    """
    rec = recorder or Recorder()
    barrier = threading.Barrier(len(scripts)) if scripts else None

    def client(c: int) -> None:
        if barrier is not None:
            barrier.wait()
        for op in scripts[c]:
            with contextlib.suppress(Exception):  # recorded; the client moves on
                rec.call(c, op, functools.partial(apply, c, op), failures=failures)

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(len(scripts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_timeout_s)
        if t.is_alive():
            raise TimeoutError(f"a client thread did not finish within {join_timeout_s} s")
    return rec.history()


async def record_tasks(
    scripts: Sequence[Sequence[Any]],
    apply: Callable[[int, Any], Awaitable[Any]],
    *,
    recorder: Recorder | None = None,
    failures: tuple[type[BaseException], ...] = (),
) -> list[Operation]:
    """:func:`record_threads` for asyncio: one task per script."""
    rec = recorder or Recorder()

    async def client(c: int) -> None:
        for op in scripts[c]:
            with contextlib.suppress(Exception):  # recorded; the client moves on
                await rec.acall(c, op, apply(c, op), failures=failures)

    await asyncio.gather(*(client(c) for c in range(len(scripts))))
    return rec.history()


class NotLinearizable(AssertionError):
    """Raised by :func:`assert_linearizable`; ``result`` is the full check result."""

    def __init__(self, message: str, result: CheckResult, picture: Path | None) -> None:
        super().__init__(message)
        self.result = result
        self.picture = picture


def _model_spec(model: Model[Any]) -> str:
    for name, factory in MODELS.items():
        if type(model) is factory:
            return name
    cls = type(model)
    return f"{cls.__module__}:{cls.__qualname__}"


def assert_linearizable(
    history: Sequence[Operation],
    model: Model[Any],
    *,
    timeout_s: float = TIMEOUT_S_DEFAULT,
    picture: str | Path | None = None,
    unknown_ok: bool = False,
    processes: int | None = 1,
) -> CheckResult:
    """Check ``history``; raise :class:`NotLinearizable` unless it is linearizable.

    On failure, writes an HTML picture and the history (JSON lines, if its
    values allow) to ``picture``: a ``.html`` path, or a directory (a pytest
    ``tmp_path``), or by default a new directory under the system's temporary
    directory. ``unknown_ok``: accept ``unknown`` (the deadline passed).
    """
    result = check(history, model, timeout_s=timeout_s, processes=processes)
    if result.ok or (unknown_ok and result.verdict is Verdict.UNKNOWN):
        return result
    from sdpaxos.check.formats import write_jsonl
    from sdpaxos.check.render import write_html

    if picture is None:
        target = Path(tempfile.mkdtemp(prefix="sdpaxos-check-")) / "history.html"
    else:
        target = Path(picture)
        if target.is_dir() or not target.suffix:
            target.mkdir(parents=True, exist_ok=True)
            target = target / "history.html"
    written: Path | None = None
    lines = [f"history is {result.verdict}"]
    try:
        written = write_html(result, target)
        lines.append(f"picture: {written}")
    except OSError as e:
        lines.append(f"(could not write the picture: {e})")
    try:
        saved = write_jsonl(result.history, target.with_suffix(".jsonl"))
        lines.append(
            f"replay: python -m sdpaxos.check {saved} --format jsonl --model {_model_spec(model)}"
        )
    except (OSError, TypeError, ValueError):
        pass  # values that JSON cannot hold: the picture and witness still stand
    lines.append(result.describe())
    raise NotLinearizable("\n".join(lines), result, written)


def scripts(
    operation: Any,
    *,
    clients_min: int = 1,
    clients_max: int = 4,
    ops_min: int = 1,
    ops_max: int = 6,
) -> Any:
    """A Hypothesis strategy for per-client scripts: a list (one per client) of
    lists of operations drawn from the strategy ``operation``."""
    from hypothesis import strategies as st

    return st.lists(
        st.lists(operation, min_size=ops_min, max_size=ops_max),
        min_size=clients_min,
        max_size=clients_max,
    )
