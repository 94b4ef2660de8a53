"""The loader process's command line: it is started by the harness with one
connection file, and anything else gets one line and a nonzero exit, not a
traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.runtime_loader import main


def test_help_prints_the_usage_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "usage: python -m bench.runtime_loader CONN.json" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "content", "message"),
    [
        ([], None, "usage:"),
        (["a", "b"], None, "usage:"),
        (["missing.json"], None, "cannot read"),
        (["conn.json"], "{not json", "cannot read"),
        (["conn.json"], "[1, 2]", "is not a JSON object"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    content: str | None,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "conn.json").write_text(content)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
