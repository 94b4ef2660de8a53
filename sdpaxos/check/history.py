"""Operations and histories: what the checker is asked about.

A *history* is a sequence of :class:`Operation` records, one per operation a
client issued. Each has an invocation time and, if the client heard back, a
completion time. Times are any totally ordered numbers (seconds from
``time.monotonic``, nanoseconds, or simply the index of the log line the event
was on): only their order matters, so they carry no unit in their names.

Intervals are closed: an operation that completes at ``t`` overlaps one invoked
at ``t``, so the checker may order them either way. This is Porcupine's
convention, and the safe one when timestamps are coarse.

Three kinds of outcome:

* completed with a known output: the operation took effect exactly once,
  somewhere between its invocation and its completion;
* completed with output :data:`UNKNOWN` (a read that timed out but whose
  client moved on): it took effect in that interval, and any output fits;
* open (``complete is None``): the client never learned the outcome (a Jepsen
  ``:info``, a timeout, a crash). The operation may or may not have taken
  effect, at any point after its invocation, up to the end of the history.
  Its output is :data:`UNKNOWN`.

An operation known *not* to have happened (a Jepsen ``:fail`` in most formats)
is simply left out of the history by the format readers.

This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Final, final


@final
class _Unknown:
    """The type of :data:`UNKNOWN`; a singleton that survives copying and pickling."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final[_Unknown] = _Unknown()
"""The output of an operation whose result the client never saw.

Models must accept it as the output of any operation: a step with an unknown
output is legal whenever *some* output would be, and moves the state the way
the operation would have.
"""


class HistoryError(ValueError):
    """A history that cannot be checked (for example an operation that completes
    before it is invoked). ``index`` is the position of the offending operation."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation of a history.

    ``client`` names who issued it (a thread, a Jepsen process): operations of
    one client should not overlap, but the checker does not rely on it.
    ``input`` says what was asked (the model interprets it, e.g.
    ``("put", "k", "v")``) and must be hashable; ``output`` is what came back,
    or :data:`UNKNOWN`. ``invoke`` and ``complete`` are the times the request
    was sent and the answer received; ``complete`` is ``None`` for an open
    operation (see the module docstring). ``meta`` is free-form text carried
    through to the witness and the picture (e.g. ``"line 17"``).
    """

    client: Hashable
    input: Any
    output: Any
    invoke: float
    complete: float | None
    meta: str = ""

    @property
    def is_open(self) -> bool:
        """True if the client never heard back: the operation may or may not have happened."""
        return self.complete is None


History = Sequence[Operation]


def validate(history: History) -> None:
    """Raise :class:`HistoryError` if ``history`` cannot be checked.

    Checks what the search relies on: completion not before invocation, open
    operations carrying :data:`UNKNOWN` as output, hashable inputs. Every
    failure names the operation by position and by its ``meta``.
    """
    for i, op in enumerate(history):
        where = describe_position(i, op)
        if not isinstance(op, Operation):
            raise HistoryError(f"{where}: expected an Operation, got {type(op).__name__}", i)
        if op.complete is not None and op.complete < op.invoke:
            raise HistoryError(
                f"{where}: completes at {op.complete!r} before it is invoked at {op.invoke!r}", i
            )
        if op.complete is None and op.output is not UNKNOWN:
            raise HistoryError(
                f"{where}: an open operation (no completion) must have output UNKNOWN, "
                f"got {op.output!r}",
                i,
            )
        try:
            hash(op.input)
        except TypeError:
            raise HistoryError(
                f"{where}: the input {op.input!r} is not hashable (use tuples, not lists)", i
            ) from None


def describe_position(index: int, op: Operation) -> str:
    """How an error names an operation: its position, and its ``meta`` (the file's line)."""
    return f"operation {index}" + (f" ({op.meta})" if op.meta else "")
