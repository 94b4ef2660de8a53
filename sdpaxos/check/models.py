"""Built-in models: register, compare-and-set register, key-value map, set, FIFO queue.

Inputs are tuples whose first item names the operation; outputs are plain
values. Every model accepts :data:`~sdpaxos.check.UNKNOWN` as an output.

============== ======================================= ==================================
model          inputs                                  outputs
============== ======================================= ==================================
register       ``("read",)``, ``("write", v)``         read: the value; write: ignored
cas-register   the above and ``("cas", (old, new))``   cas: ``True`` if it swapped, else
                                                       ``False`` (it ran and the compare
                                                       failed)
kv             ``("get", k)``, ``("put", k, v)``,      get: the value (``missing`` if the
               ``("append", k, v)``,                   key is absent); cas: ``True`` /
               ``("delete", k)``,                      ``False``; others: ignored
               ``("cas", k, (old, new))``
set            ``("add", x)``, ``("remove", x)``,      contains: ``True`` / ``False``;
               ``("contains", x)``, ``("read",)``      read: the elements (any iterable)
fifo-queue     ``("enqueue", x)``, ``("dequeue",)``    dequeue: the head, or ``None`` if
                                                       the queue was empty
============== ======================================= ==================================

A trailing ``None`` argument is accepted everywhere (``("read", None)``,
``("get", k, None)``), which is what readers of Jepsen-style logs produce. Any
other input (an unknown operation, a missing argument, a cas without an
``(old, new)`` pair) is refused before the search (:meth:`Model.check_input`):
the history cannot be checked against the model, which is no verdict on it.

This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, ClassVar

from sdpaxos.check.history import UNKNOWN
from sdpaxos.check.model import ILLEGAL, Model, _Illegal, describe_value


def _append(current: Any, suffix: Any) -> Any:
    """``current + suffix``, treating an absent (``None``) value as empty."""
    return suffix if current is None else current + suffix


def _describe_register_op(f: Any, arg: Any, output: Any) -> str:
    """``read -> 3``, ``write 3``, ``cas 1->2 ok``: outputs only where they say something."""
    if f in ("read", "get"):
        return f"{f} -> {describe_value(output)}"
    if f == "cas" and isinstance(arg, tuple) and len(arg) == 2:
        result = {True: "ok", False: "failed"}.get(output, "?") if output is not UNKNOWN else "?"
        return f"cas {describe_value(arg[0])}->{describe_value(arg[1])} {result}"
    text = f"{f} {describe_value(arg)}" if arg is not None else str(f)
    return text if output is None else f"{text} -> {describe_value(output)}"


def _check_cas_pair(input: Any, at: int) -> None:
    """A cas's argument ``input[at]`` must be the pair ``(old, new)``."""
    if input[0] == "cas" and not (isinstance(input[at], tuple) and len(input[at]) == 2):
        raise ValueError(f"'cas' takes [old, new], got {input[at]!r}")


class Register(Model[Any]):
    """A read/write register that starts at ``initial``."""

    name: ClassVar[str] = "register"
    operations: ClassVar[Mapping[str, int] | None] = {"read": 0, "write": 1}

    def __init__(self, initial: Any = None) -> None:
        self.initial = initial

    def init(self) -> Any:
        return self.initial

    def step(self, state: Any, input: Any, output: Any) -> Any:
        f = input[0]
        if f == "read":
            return state if output is UNKNOWN or output == state else ILLEGAL
        if f == "write":
            return input[1]
        return ILLEGAL

    def check_input(self, input: Any) -> None:
        super().check_input(input)
        _check_cas_pair(input, 1)

    def read_only(self, input: Any, output: Any) -> bool:
        return input[0] == "read" or (input[0] == "cas" and output is False)

    def describe_operation(self, input: Any, output: Any) -> str:
        return _describe_register_op(input[0], input[1] if len(input) > 1 else None, output)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(initial={self.initial!r})"


class CasRegister(Register):
    """A register with compare-and-set.

    A cas whose output is ``False`` *ran* and found a different value (the
    state is unchanged and must differ from ``old``); a cas known not to have
    run at all is not in the history. A cas with an unknown output swaps if
    the compare holds and otherwise does nothing.
    """

    name: ClassVar[str] = "cas-register"
    operations: ClassVar[Mapping[str, int] | None] = {"read": 0, "write": 1, "cas": 1}

    def step(self, state: Any, input: Any, output: Any) -> Any:
        if input[0] != "cas":
            return super().step(state, input, output)
        old, new = input[1]
        if output is UNKNOWN:
            return new if state == old else state
        if output:
            return new if state == old else ILLEGAL
        return state if state != old else ILLEGAL


def _kv_value_step(missing: Any, state: Any, f: Any, arg: Any, output: Any) -> Any:
    """One key's value after operation ``f`` (shared by the map and per-key models)."""
    if f == "get":
        return state if output is UNKNOWN or output == state else ILLEGAL
    if f == "put":
        return arg
    if f == "append":
        return _append(state, arg)
    if f == "delete":
        return missing
    if f == "cas":
        old, new = arg
        if output is UNKNOWN:
            return new if state == old else state
        if output:
            return new if state == old else ILLEGAL
        return state if state != old else ILLEGAL
    return ILLEGAL


class _KeyModel(Model[Any]):
    """The value of one key of a :class:`KeyValue` map: what a partition is checked with."""

    name: ClassVar[str] = "kv-key"

    def __init__(self, key: Hashable, missing: Any) -> None:
        self.key = key
        self.missing = missing

    def init(self) -> Any:
        return self.missing

    def step(self, state: Any, input: Any, output: Any) -> Any:
        # The two commonest operations first, without a further call: this
        # runs once per configuration the search explores.
        f = input[0]
        if f == "get":
            return state if output is UNKNOWN or output == state else ILLEGAL
        if f == "append":
            return input[2] if state is None else state + input[2]
        return _kv_value_step(self.missing, state, f, input[2] if len(input) > 2 else None, output)

    def read_only(self, input: Any, output: Any) -> bool:
        return input[0] == "get" or (input[0] == "cas" and output is False)

    def describe_operation(self, input: Any, output: Any) -> str:
        # The key is the same for the whole sub-history: leave it out.
        return _describe_register_op(input[0], input[2] if len(input) > 2 else None, output)

    def describe_state(self, state: Any) -> str:
        return f"{describe_value(self.key)}: {describe_value(state)}"


class KeyValue(Model[frozenset[tuple[Any, Any]]]):
    """A key-value map; an absent key reads as ``missing``.

    The state is a frozenset of ``(key, value)`` pairs (absent keys and keys
    holding ``missing`` are left out, so equal maps are equal states).
    Operations on different keys are independent, so the checker splits a
    history by key and checks each key as a register (:meth:`partition`).
    """

    name: ClassVar[str] = "kv"
    operations: ClassVar[Mapping[str, int] | None] = {
        "get": 1,
        "put": 2,
        "append": 2,
        "delete": 1,
        "cas": 2,
    }

    def __init__(self, missing: Any = None) -> None:
        self.missing = missing

    def check_input(self, input: Any) -> None:
        super().check_input(input)
        _check_cas_pair(input, 2)

    def init(self) -> frozenset[tuple[Any, Any]]:
        return frozenset()

    def step(
        self, state: frozenset[tuple[Any, Any]], input: Any, output: Any
    ) -> frozenset[tuple[Any, Any]] | _Illegal:
        f, key = input[0], input[1]
        arg = input[2] if len(input) > 2 else None
        current = self.missing
        for k, v in state:
            if k == key:
                current = v
                break
        value: Any = _kv_value_step(self.missing, current, f, arg, output)
        if isinstance(value, _Illegal):
            return ILLEGAL
        if value is current:
            return state
        rest = frozenset(item for item in state if item[0] != key)
        return rest if value == self.missing else rest | {(key, value)}

    def partition(self, input: Any) -> Hashable:
        return input[1]  # type: ignore[no-any-return]

    def read_only(self, input: Any, output: Any) -> bool:
        return input[0] == "get" or (input[0] == "cas" and output is False)

    def describe_operation(self, input: Any, output: Any) -> str:
        text = _describe_register_op(input[0], input[2] if len(input) > 2 else None, output)
        f, _, rest = text.partition(" ")
        return f"{f} {describe_value(input[1])} {rest}".rstrip()

    def partition_model(self, key: Hashable) -> Model[Any]:
        return _KeyModel(key, self.missing)

    def describe_state(self, state: frozenset[tuple[Any, Any]]) -> str:
        try:
            items = sorted(state)
        except TypeError:
            items = list(state)
        return "{" + ", ".join(f"{describe_value(k)}: {describe_value(v)}" for k, v in items) + "}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(missing={self.missing!r})"


class SetModel(Model[frozenset[Any]]):
    """A set of hashable elements, initially empty."""

    name: ClassVar[str] = "set"
    operations: ClassVar[Mapping[str, int] | None] = {
        "add": 1,
        "remove": 1,
        "contains": 1,
        "read": 0,
    }

    def init(self) -> frozenset[Any]:
        return frozenset()

    def read_only(self, input: Any, output: Any) -> bool:
        return input[0] in ("contains", "read")

    def step(self, state: frozenset[Any], input: Any, output: Any) -> frozenset[Any] | _Illegal:
        f = input[0]
        if f == "add":
            return state | {input[1]}
        if f == "remove":
            return state - {input[1]}
        if f == "contains":
            if output is UNKNOWN or bool(output) == (input[1] in state):
                return state
            return ILLEGAL
        if f == "read":
            if output is UNKNOWN:
                return state
            seen = output if isinstance(output, frozenset) else frozenset(_iterable(output))
            return state if seen == state else ILLEGAL
        return ILLEGAL


def _iterable(value: Any) -> Iterable[Any]:
    return value if isinstance(value, Iterable) else (value,)


class FifoQueue(Model[tuple[Any, ...]]):
    """A first-in first-out queue, initially empty; dequeue on empty returns ``None``."""

    name: ClassVar[str] = "fifo-queue"
    operations: ClassVar[Mapping[str, int] | None] = {"enqueue": 1, "dequeue": 0}

    def init(self) -> tuple[Any, ...]:
        return ()

    def step(self, state: tuple[Any, ...], input: Any, output: Any) -> tuple[Any, ...] | _Illegal:
        f = input[0]
        if f == "enqueue":
            return (*state, input[1])
        if f == "dequeue":
            if not state:
                return state if output is UNKNOWN or output is None else ILLEGAL
            if output is UNKNOWN or output == state[0]:
                return state[1:]
            return ILLEGAL
        return ILLEGAL


MODELS: dict[str, Callable[[], Model[Any]]] = {
    "register": Register,
    "cas-register": CasRegister,
    "kv": KeyValue,
    "set": SetModel,
    "fifo-queue": FifoQueue,
}
"""The built-in models by the names the command line knows them by."""
