"""Shared by the checker's tests: where the reference histories are, a brute-force
checker, and reference sequential implementations to generate histories from."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sdpaxos.check import ILLEGAL, Model, Operation

REPO = Path(__file__).resolve().parents[2]


def histories_dir() -> Path:
    """The reference histories: ``$SDPAXOS_HISTORIES``, or ``shared/histories``
    beside the repository (the CI layout), or ``/work/shared/histories``."""
    candidates = [
        Path(os.environ["SDPAXOS_HISTORIES"]) if "SDPAXOS_HISTORIES" in os.environ else None,
        REPO.parent / "shared" / "histories",
        Path("/work/shared/histories"),
    ]
    for c in candidates:
        if c is not None and (c / "MANIFEST.tsv").is_file():
            return c
    raise FileNotFoundError(
        "reference histories not found: set SDPAXOS_HISTORIES or put shared/histories "
        f"beside the repository ({REPO.parent / 'shared' / 'histories'})"
    )


def manifest() -> list[tuple[str, str, str]]:
    lines = (histories_dir() / "MANIFEST.tsv").read_text().splitlines()
    rows = [tuple(line.split("\t")) for line in lines[1:] if line.strip()]
    return [(r[0], r[1], r[2]) for r in rows]


def brute_force(model: Model[Any], ops: Sequence[Operation]) -> bool:
    """Linearizable? By trying every order of the operations that respects real
    time, extending a prefix one legal step at a time, where every open
    operation may also be left out. No memo and none of the checker's
    reductions: a second opinion, exponential, for a handful of operations."""
    inf = float("inf")

    def precedes(a: Operation, b: Operation) -> bool:
        return (inf if a.complete is None else a.complete) < b.invoke

    def extend(state: Any, rest: list[Operation]) -> bool:
        if all(op.complete is None for op in rest):
            return True  # the open ones may simply not have happened
        for k, op in enumerate(rest):
            if any(precedes(other, op) for other in rest if other is not op):
                continue  # something still to place had finished before op began
            after = model.step(state, op.input, op.output)
            if after is not ILLEGAL and extend(after, rest[:k] + rest[k + 1 :]):
                return True
        return False

    return extend(model.init(), list(ops))


# Reference sequential implementations: (state, input) -> (output, new state).


def run_register(state: Any, op: tuple[Any, ...]) -> tuple[Any, Any]:
    if op[0] == "read":
        return state, state
    if op[0] == "write":
        return None, op[1]
    old, new = op[1]
    return (True, new) if state == old else (False, state)


def run_kv(state: dict[Any, Any], op: tuple[Any, ...]) -> tuple[Any, dict[Any, Any]]:
    f, key = op[0], op[1]
    data = dict(state)
    if f == "get":
        return data.get(key), data
    if f == "put":
        data[key] = op[2]
    elif f == "append":
        data[key] = data.get(key, "") + op[2]
    elif f == "delete":
        data.pop(key, None)
    else:
        old, new = op[2]
        if data.get(key) != old:
            return False, data
        data[key] = new
        return True, data
    return None, data


def run_set(state: frozenset[Any], op: tuple[Any, ...]) -> tuple[Any, frozenset[Any]]:
    if op[0] == "add":
        return None, state | {op[1]}
    if op[0] == "remove":
        return None, state - {op[1]}
    if op[0] == "contains":
        return op[1] in state, state
    return state, state


def run_queue(state: tuple[Any, ...], op: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    if op[0] == "enqueue":
        return None, (*state, op[1])
    if not state:
        return None, state
    return state[0], state[1:]
