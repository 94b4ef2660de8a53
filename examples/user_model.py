"""Example: a model of your own, in a few lines, and a history checked against it.

A counter with ``incr`` (returns nothing) and ``read`` (returns the count).
Run ``python examples/user_model.py``; it prints both verdicts and exits 0 if
they are the expected ones. From the command line, a JSON-lines history can be
checked against it with ``--model user_model:Counter`` (with ``examples/`` on
``PYTHONPATH``).
"""

from __future__ import annotations

import sys
from typing import Any

from sdpaxos.check import ILLEGAL, UNKNOWN, Model, Operation, Verdict, check


class Counter(Model[int]):
    """State: the count (an int, so hashable and comparable as it is)."""

    name = "counter"

    def init(self) -> int:
        return 0

    def step(self, state: int, input: Any, output: Any) -> Any:
        if input == ("incr",):
            return state + 1
        if input == ("read",):
            return state if output is UNKNOWN or output == state else ILLEGAL
        return ILLEGAL

    def read_only(self, input: Any, output: Any) -> bool:
        # Optional: a read never changes the count, so the search may place it
        # as soon as it fits instead of trying every alternative.
        return input == ("read",)

    def describe_operation(self, input: Any, output: Any) -> str:
        return "incr" if input == ("incr",) else f"read -> {output}"


def main() -> int:
    ok = [
        Operation("a", ("incr",), None, invoke=0, complete=3),
        Operation("b", ("read",), 1, invoke=1, complete=2),  # overlaps the incr: may see it
        Operation("b", ("read",), 1, invoke=4, complete=5),
    ]
    bad = [
        Operation("a", ("incr",), None, invoke=0, complete=1),
        Operation("b", ("read",), 0, invoke=2, complete=3),  # after the incr finished: stale
    ]
    first, second = check(ok, Counter()), check(bad, Counter())
    print("overlapping read:", first.verdict)
    print("stale read:", second.describe())
    expected = (Verdict.LINEARIZABLE, Verdict.NOT_LINEARIZABLE)
    return 0 if (first.verdict, second.verdict) == expected else 1


if __name__ == "__main__":
    sys.exit(main())
