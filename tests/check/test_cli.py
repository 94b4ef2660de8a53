"""``python -m sdpaxos.check``: verdict on stdout, exit status 0/1/2/3, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sdpaxos.check.__main__ import main
from tests.check.helpers import REPO, histories_dir


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_linearizable_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, str(histories_dir() / "etcd/etcd_002.log"), "--format", "etcd")
    assert code == 0 and out.splitlines()[0] == "linearizable"


def test_not_linearizable_exits_1_with_the_witness(capsys: pytest.CaptureFixture[str]) -> None:
    path = histories_dir() / "kv/c10-bad.txt"
    code, out, _ = run(capsys, str(path), "--format", "kv-edn-lines", "--timeout", "30")
    assert code == 1 and out.splitlines()[0] == "not linearizable"
    assert "longest linearizable prefix" in out and "could not be placed next" in out


def _hard_jsonl(tmp_path: Path) -> Path:
    lines = [
        {
            "client": i,
            "input": ["append", "k", f"<{i}>"],
            "output": None,
            "invoke": 0,
            "complete": 100,
        }
        for i in range(10)
    ]
    lines.append(
        {"client": 99, "input": ["get", "k"], "output": "never", "invoke": 101, "complete": 102}
    )
    path = tmp_path / "hard.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_unknown_at_the_deadline_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = run(
        capsys, str(_hard_jsonl(tmp_path)), "--format", "jsonl", "--timeout", "0.001"
    )
    assert code == 2 and out.splitlines()[0] == "unknown"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--format", "etcd"], "the following arguments are required: file"),
        (["x.log", "--format", "xml"], "invalid choice"),
        (["{kv}", "--format", "etcd"], "{kv}:1: not a Jepsen log line"),
        (["{kv}", "--format", "kv", "--model", "nosuch"], "unknown model 'nosuch'"),
        (["{kv}", "--format", "kv", "--model", "nosuch.module:X"], "cannot load it"),
        (["{kv}", "--format", "kv", "--initial", "0"], "--initial only applies"),
        (["{kv}", "--format", "kv", "--timeout", "-1"], "--timeout must be positive"),
        (["/no/such/file", "--format", "kv"], "/no/such/file: No such file"),
    ],
)
def test_usage_and_input_errors_exit_3(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    kv = str(histories_dir() / "kv/c01-ok.txt")
    code, out, err = run(capsys, *[a.replace("{kv}", kv) for a in args])
    assert code == 3 and message.replace("{kv}", kv) in err and out == ""
    assert "Traceback" not in err


def test_a_user_model_and_an_initial_value(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"client": 1, "input": ["read"], "output": 0, "invoke": 0, "complete": 1}\n')
    assert run(capsys, str(path), "--format", "jsonl", "--model", "register")[0] == 1
    assert (
        run(capsys, str(path), "--format", "jsonl", "--model", "register", "--initial", "0")[0] == 0
    )
    assert (
        run(capsys, str(path), "--format", "jsonl", "--model", "tests.check.test_cli:Zero")[0] == 0
    )


def test_pictures_are_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    html, png = tmp_path / "h.html", tmp_path / "h.png"
    path = str(histories_dir() / "kv/c01-bad.txt")
    code, out, _ = run(capsys, path, "--format", "kv", "--html", str(html), "--png", str(png))
    assert code == 1 and f"picture: {html}" in out and f"picture: {png}" in out
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = run(capsys, path, "--format", "kv", "--html", str(tmp_path / "no" / "dir.html"))
    assert code == 3 and "cannot write the picture" in err


def test_the_module_runs_as_a_program() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sdpaxos.check",
            str(histories_dir() / "etcd/etcd_001.log"),
            "--format",
            "etcd",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1 and proc.stdout.startswith("not linearizable\n")


def test_a_user_model_whose_partition_raises_is_an_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"client": 1, "input": ["read"], "output": 0, "invoke": 0, "complete": 1}\n')
    code, out, err = run(
        capsys, str(path), "--format", "jsonl", "--model", "tests.check.test_cli:Keyless"
    )
    assert (code, out) == (3, "")
    assert err == (
        f"error: {path}: operation 0 (line 1): the model's partition raised"
        " IndexError: tuple index out of range\n"
    )


from sdpaxos.check import Register  # noqa: E402  (a model for --model module:Class)


class Zero(Register):
    def __init__(self) -> None:
        super().__init__(0)


class Keyless(Register):
    """A model that splits by a key its inputs do not have (a bug in the model)."""

    def partition(self, input: object) -> object:
        return input[1]  # type: ignore[index]


NEMESIS_ONLY_EDN = """[{:process :nemesis, :type :info, :f :start, :value nil}
 {:process :nemesis, :type :info, :f :start, :value "partitioned"}
 {:process :nemesis, :type :info, :f :stop, :value nil}]
"""


@pytest.mark.parametrize(
    ("name", "text", "fmt"),
    [
        ("nemesis.edn", NEMESIS_ONLY_EDN, "edn"),
        ("empty.edn", "[]\n", "edn"),
        ("empty.jsonl", "", "jsonl"),
        ("blank.jsonl", "\n\n", "jsonl"),
        (
            "failed.jsonl",
            '{"client": 1, "input": ["get", "k"], "invoke": 0, "status": "fail"}\n',
            "jsonl",
        ),
        ("empty.txt", "", "kv"),
        ("nemesis.log", "INFO  jepsen.util - :nemesis :info :start nil\n", "etcd"),
    ],
)
def test_an_empty_history_is_linearizable(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str, fmt: str
) -> None:
    """No operation (only the nemesis's events, an empty file, only failed
    operations) is a history like any other, and it is linearizable, as
    Knossos and Porcupine say: not an input error."""
    path = tmp_path / name
    path.write_text(text)
    code, out, err = run(capsys, str(path), "--format", fmt)
    assert (code, err) == (0, "")
    verdict, summary = out.splitlines()
    assert verdict == "linearizable"
    assert summary.startswith("0 operations, 0 sub-histories (0 not needed), 0 configurations")


@pytest.mark.parametrize(
    ("model", "line", "message"),
    [
        (
            "kv",
            '["frob", "k"]',
            "unknown operation 'frob' (kv knows get, put, append, delete, cas)",
        ),
        ("kv", '["frob"]', "unknown operation 'frob' (kv knows get, put, append, delete, cas)"),
        ("kv", '["put", "k"]', "'put' takes 2 arguments, got 1: ('put', 'k')"),
        ("kv", '["cas", "k", "v"]', "'cas' takes [old, new], got 'v'"),
        ("kv", '"get"', "an input must be a list naming the operation, got 'get'"),
        ("register", '["cas", [0, 1]]', "unknown operation 'cas' (register knows read, write)"),
        (
            "cas-register",
            '["frob"]',
            "unknown operation 'frob' (cas-register knows read, write, cas)",
        ),
        ("set", '["frob", 1]', "unknown operation 'frob' (set knows add, remove, contains, read)"),
        (
            "fifo-queue",
            '["push", 1]',
            "unknown operation 'push' (fifo-queue knows enqueue, dequeue)",
        ),
    ],
)
def test_an_operation_the_model_does_not_know_is_an_input_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model: str, line: str, message: str
) -> None:
    """Not a verdict: a history the model cannot read says nothing about the
    system (it was "not linearizable", exit 1, or a traceback without a key)."""
    path = tmp_path / "h.jsonl"
    first = {"kv": '["put", "j", "v"]', "set": '["add", 1]', "fifo-queue": '["enqueue", 1]'}
    lines = [first.get(model, '["write", 1]'), line]  # the bad one second, on line 3
    path.write_text(
        "\n".join(
            f'{{"client": {i}, "input": {inp}, "output": null, "invoke": {i}, "complete": {i}}}\n'
            for i, inp in enumerate(lines)
        )
    )
    code, out, err = run(capsys, str(path), "--format", "jsonl", "--model", model)
    where = "operation 1 (line 3)"
    assert (code, out) == (3, "")
    assert err == f"error: {path}: {where}: {message}\n"
