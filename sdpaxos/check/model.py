"""The model interface: a sequential specification, written in a few lines.

A model says what a *single-copy, one-at-a-time* object would do. The checker
asks whether a concurrent history can be explained by applying its operations
one by one to such an object, in an order consistent with real time.

Write a model by subclassing :class:`Model` and overriding :meth:`Model.init`
and :meth:`Model.step`; the rest has defaults::

    from sdpaxos.check import ILLEGAL, UNKNOWN, Model

    class Counter(Model[int]):
        name = "counter"

        def init(self) -> int:
            return 0

        def step(self, state: int, input, output):
            if input == ("incr",):
                return state + 1
            if input == ("read",):
                return state if output in (state, UNKNOWN) else ILLEGAL
            return ILLEGAL

States must be hashable and compare equal exactly when they are the same
state: the search remembers which (set of operations done, state) pairs it has
already explored, and that memo is what makes it fast. Use ints, strings,
tuples, frozensets or frozen dataclasses; if your natural state is a list or
dict, return a tuple or frozenset of items, or override :meth:`Model.state_key`.

``step`` must be a pure function: the search calls it many times on the same
state and backtracks.

This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, ClassVar, Final, Generic, TypeVar, final

from sdpaxos.check.history import UNKNOWN

S = TypeVar("S")


@final
class _Illegal:
    """The type of :data:`ILLEGAL` (a singleton)."""

    _instance: _Illegal | None = None

    def __new__(cls) -> _Illegal:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ILLEGAL"

    def __reduce__(self) -> str:
        return "ILLEGAL"


ILLEGAL: Final[_Illegal] = _Illegal()
"""What :meth:`Model.step` returns when the operation cannot produce that output
in that state. A sentinel rather than ``None`` so that ``None`` can be a state
(an empty register)."""


VALUE_CHARS_MAX: Final = 80
"""Longer renderings are cut in the middle (the full value is in the witness object)."""


def describe_value(value: Any) -> str:
    """A short, readable rendering of an input, output or state value."""
    text = _describe_value(value)
    if len(text) > VALUE_CHARS_MAX:
        head = VALUE_CHARS_MAX // 3
        text = text[:head] + "…" + text[len(text) - (VALUE_CHARS_MAX - head - 1) :]
    return text


def _describe_value(value: Any) -> str:
    if value is UNKNOWN:
        return "?"
    if value is None:
        return "nil"
    if isinstance(value, frozenset):
        try:
            items = sorted(value)
        except TypeError:
            items = list(value)
        return "{" + ", ".join(describe_value(v) for v in items) + "}"
    if isinstance(value, tuple):
        return "[" + " ".join(describe_value(v) for v in value) + "]"
    return repr(value)


class Model(Generic[S]):
    """Base class for sequential specifications. Override :meth:`init` and :meth:`step`.

    Optional overrides:

    * :attr:`operations` or :meth:`check_input`: which inputs the model knows
      (any other makes the history an input error, not a verdict).
    * :meth:`read_only`: which operations never change the state (faster).
    * :meth:`partition`: the key of the independent part of the object an
      operation touches (a map's key). The checker then splits the history by
      key and checks each part on its own, which is exponentially cheaper
      (P-compositionality). Only valid when operations on different keys never
      affect each other.
    * :meth:`partition_model`: a cheaper model for one key (optional).
    * :meth:`describe_operation`, :meth:`describe_state`: text for the witness
      and the picture.
    * :meth:`state_key`: a hashable stand-in for a state, if states themselves
      are not hashable or have several equal representations.
    """

    name: ClassVar[str] = "model"

    #: The operations the model knows, by name (an input's first item), with
    #: how many arguments each takes; a trailing ``None`` more is accepted too,
    #: as Jepsen-style readers write ``("read", None)``. ``None``: any input.
    operations: ClassVar[Mapping[str, int] | None] = None

    def init(self) -> S:
        """The state before any operation."""
        raise NotImplementedError

    def step(self, state: S, input: Any, output: Any) -> S | _Illegal:
        """The state after ``input`` is applied to ``state`` and returns ``output``,
        or :data:`ILLEGAL` if it cannot return ``output`` in ``state``.

        ``output`` may be :data:`UNKNOWN`: then return the state the operation
        would lead to (it is legal whenever some output would be).
        """
        raise NotImplementedError

    def check_input(self, input: Any) -> None:
        """Raise :class:`ValueError`, saying why, if ``input`` is no operation of this model.

        The checker asks about every operation before it searches: ``step``
        answering :data:`ILLEGAL` to an operation it does not know would make
        the verdict "not linearizable" about a history that says nothing of
        the system. The default checks the name and argument count against
        :attr:`operations`, if set; override it to check more.
        """
        known = self.operations
        if known is None:
            return
        if not isinstance(input, tuple) or not input:
            raise ValueError(f"an input must be a list naming the operation, got {input!r}")
        f, args = input[0], len(input) - 1
        if not isinstance(f, str) or f not in known:
            raise ValueError(f"unknown operation {f!r} ({self.name} knows {', '.join(known)})")
        if args != known[f] and not (args == known[f] + 1 and input[-1] is None):
            plural = "" if known[f] == 1 else "s"
            raise ValueError(f"{f!r} takes {known[f]} argument{plural}, got {args}: {input!r}")

    def read_only(self, input: Any, output: Any) -> bool:
        """True if this operation, with this output, never changes any state
        (a read; a compare-and-set known to have failed). Optional: the search
        then places such an operation as soon as it fits, without trying
        alternatives, which is a large saving on read-heavy histories. Say
        True only if it holds in *every* state: an operation that merely
        happens to leave one state unchanged (deleting an absent key) is not
        read-only. Default: False."""
        return False

    def partition(self, input: Any) -> Hashable | None:
        """The independent part of the object ``input`` touches, or ``None`` if it
        may touch all of it. Default: ``None`` (no partitioning)."""
        return None

    def partition_model(self, key: Hashable) -> Model[Any]:
        """The model to check the sub-history of one partition ``key`` with.

        The default is this model itself, which is always correct; a map can
        return a register for one key, whose states are smaller and faster to
        hash and compare.
        """
        return self

    def state_key(self, state: S) -> Hashable:
        """A hashable value equal for equal states (default: the state itself)."""
        return state

    def describe_operation(self, input: Any, output: Any) -> str:
        """One line for an operation, e.g. ``put 'k' 'v' -> nil``."""
        if isinstance(input, tuple) and input and isinstance(input[0], str):
            rest = list(input[1:])
            while rest and rest[-1] is None:  # ("read", None) reads as "read"
                rest.pop()
            args = " ".join(describe_value(a) for a in rest)
            text = f"{input[0]} {args}".rstrip()
        else:
            text = describe_value(input)
        return f"{text} -> {describe_value(output)}"

    def describe_state(self, state: S) -> str:
        """One line for a state."""
        return describe_value(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
