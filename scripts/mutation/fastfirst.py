"""Pytest plugin for the mutation runs: deterministic tests first, Hypothesis tests last.

Why: each mutant runs the test files with ``-x``, so a mutant is killed as soon as
one test fails; the example-based tests are cheap and kill most mutants, and the
Hypothesis ones are what takes the seconds. Reordering changes only how soon a
mutant is killed, never whether (every test still runs for a survivor).
Load with ``-p scripts.mutation.fastfirst`` from the repository root.
"""

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Stable sort: tests not driven by Hypothesis keep their order and go first."""

    def uses_hypothesis(item: pytest.Item) -> bool:
        return bool(getattr(getattr(item, "obj", None), "is_hypothesis_test", False))

    items.sort(key=uses_hypothesis)
