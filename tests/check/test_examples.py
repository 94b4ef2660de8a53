"""Every example in examples/ runs: as a program (exit 0, printing what it
promises) and, for the checker's examples, under pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.check.helpers import REPO

EXAMPLES = sorted((REPO / "examples").glob("*.py"))
EXAMPLE_TIMEOUT_S = 300


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLES} >= {
        "test_stale_cache.py",
        "user_model.py",
        "replicated_counter.py",
        "replicated_dict_sync.py",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_example_runs_as_a_program(path: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=EXAMPLE_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    expected = {
        "test_stale_cache.py": ["StaleCacheStore: caught", "picture: "],
        "replicated_counter.py": ["total at node 2: 30"],
        "replicated_dict_sync.py": ["colour at node 2: blue", "shape at node 0: round"],
    }
    for line in expected.get(path.name, []):
        assert line in proc.stdout, proc.stdout[-3000:]


def test_the_example_tests_pass_under_pytest(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(REPO / "examples")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=EXAMPLE_TIMEOUT_S,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "3 passed" in proc.stdout and "failed" not in proc.stdout
