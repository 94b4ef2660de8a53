"""The README's checker section: its Python example runs as written, and its
JSON-lines table documents exactly the fields the reader accepts."""

from __future__ import annotations

import re

from sdpaxos.check import Verdict
from sdpaxos.check.formats import _JSONL_FIELDS
from tests.check.helpers import REPO


def _section() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Checking linearizability")
    return text[start : text.index("\n## ", start + 1)]


def test_the_example_runs_and_finds_the_stale_read() -> None:
    [block] = re.findall(r"```python\n(.*?)```", _section(), flags=re.S)
    scope: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), scope)
    result = scope["result"]
    assert result.verdict is Verdict.NOT_LINEARIZABLE  # type: ignore[attr-defined]


def test_the_jsonl_table_lists_every_field() -> None:
    fields = set(re.findall(r"^\| `(\w+)` \|", _section(), flags=re.M))
    assert fields == set(_JSONL_FIELDS)
