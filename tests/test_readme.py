"""The README's embedding example runs as written (docs that cannot rot)."""

import re
from pathlib import Path

from sdpaxos.core import CAccept, CRequest, MemoryStorage


def test_the_readme_embedding_example_runs() -> None:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README.md has a python example"
    scope: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    storage = scope["storage"]
    rd = scope["rd"]
    assert isinstance(storage, MemoryStorage) and len(storage) == 1  # the accepted C-instance
    kinds = sorted(type(m).__name__ for _, m in rd.messages)  # type: ignore[attr-defined]
    assert kinds == [CAccept.__name__, CRequest.__name__]
