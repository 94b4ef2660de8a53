"""``kvstore serve | local | demo`` refuse bad input in one line, with a nonzero
exit, before anything is written; Ctrl-C stops the demo in one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kvstore import demo
from kvstore.cli import main
from kvstore.cluster import redis_ping
from kvstore.local import make_kv_cluster

from ..runtime.helpers import default_sigint, kill_group


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``kvstore argv``: it must exit 2 with one line on stderr; that line."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's refusals
        code = exc.code  # type: ignore[assignment]
    captured = capsys.readouterr()
    assert code == 2, captured
    return _one_line(captured.err)


# ------------------------------------------------------------------------ demo


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replicas", "0"], "argument --replicas: expected 3 or 5 (a failover needs a majority"),
        (["--replicas", "-1"], "argument --replicas: expected 3 or 5"),
        (["--replicas", "100000"], "argument --replicas: expected 3 or 5"),
        (["--replicas", "4"], "argument --replicas: expected 3 or 5"),
        (["--replicas", "x"], "argument --replicas: expected 3 or 5"),
        (
            ["--replicas", "5", "--profile", "paper3"],
            "error: profile paper3 has 3 regions, --replicas is 5 (paper5 has 5, or --profile",
        ),
        (["--profile", "nope"], "error: unknown profile 'nope'"),
        (["--seconds", "0"], "argument --seconds: expected 8 to 3600 seconds"),
        (["--seconds", "-5"], "argument --seconds: expected 8 to 3600 seconds"),
        (["--seconds", "nan"], "argument --seconds: expected 8 to 3600 seconds"),
        (["--seconds", "inf"], "argument --seconds: expected 8 to 3600 seconds"),
        (["--seconds", "soon"], "argument --seconds: expected seconds, got 'soon'"),
    ],
)
def test_demo_refuses_bad_options_before_making_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "out"
    assert message in _refused(["demo", "--out", str(out), *args], capsys)
    assert not out.exists()


def test_demo_refuses_an_out_it_cannot_make_or_would_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(demo, "_run", lambda args, profile, out: ran.append(profile) or 0)
    assert _refused(["demo", "--out", "/proc/x"], capsys) == (
        "error: /proc/x: No such file or directory"
    )
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.json").write_text('{"verdict": "linearizable"}\n')
    line = _refused(["demo", "--out", str(old)], capsys)
    assert line.startswith(f"error: --out {old} exists and holds files; --force writes")
    assert (old / "summary.json").read_text() == '{"verdict": "linearizable"}\n'
    (tmp_path / "file").write_text("x")
    assert "is a file" in _refused(["demo", "--out", str(tmp_path / "file")], capsys)
    assert ran == []
    assert main(["demo", "--out", str(old), "--force"]) == 0
    assert main(["demo", "--out", str(tmp_path / "new"), "--replicas", "5"]) == 0
    assert ran == ["paper3", "paper5"]  # 5 replicas take the 5-region profile


def test_an_interrupted_demo_leaves_no_folder_it_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "_run", interrupted)
    assert main(["demo", "--out", str(tmp_path / "new")]) == 130
    assert _one_line(capsys.readouterr().err) == (
        "interrupted: the cluster is stopped and nothing was written"
    )
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    assert main(["demo", "--out", str(tmp_path / "kept")]) == 130
    assert (tmp_path / "kept").is_dir()  # not this run's to remove


def test_ctrl_c_stops_the_demo_and_its_nodes_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvstore", "demo", "--seconds", "60", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        addresses = []
        while len(addresses) < 3:
            line = proc.stdout.readline()
            assert line, "the demo ended before its nodes were up"
            addresses += [(h, int(p)) for h, p in re.findall(r"redis://([\d.]+):(\d+)", line)]
        time.sleep(1.0)  # the workload is running
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert "Traceback" not in err
        lines = [x for x in err.replace("\r", "\n").splitlines() if x.strip()]
        assert lines[-1] == "interrupted: the cluster is stopped and nothing was written"
        assert not [x for x in lines[:-1] if not x.startswith("[")], err  # only the progress bar
        assert not out.exists()
        assert not any(redis_ping(h, p) for h, p in addresses)  # the nodes are stopped
    finally:
        kill_group(proc)


# ----------------------------------------------------------------- serve, local


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics", "nonsense"], "argument --metrics: expected HOST:PORT or PORT"),
        (["--log-level", "LOUD"], "argument --log-level: expected one of DEBUG"),
        (["--gc-gen0", "-5"], "argument --gc-gen0: expected an integer in 0..10000000"),
        (["--listen", "999.1.1.1"], "error: --listen 999.1.1.1: not an address of this machine"),
    ],
)
def test_serve_refuses_bad_options_and_touches_no_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = make_kv_cluster(tmp_path, 3, profile=None)
    argv = ["serve", "--config", str(path), "--id", "0", "--bootstrap", *args]
    assert message in _refused(argv, capsys)
    assert list((tmp_path / "node0").iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replicas", "0"], "error: --replicas must be in 1..16, got 0"),
        (["--replicas", "4", "--profile", "none"], "replicas must be an odd number"),
        (["--replicas", "5"], "error: profile paper3 has 3 regions, not 5"),
        (["--profile", "nope"], "error: unknown profile 'nope'"),
        (["--log-level", "LOUD"], "argument --log-level: expected one of DEBUG"),
    ],
)
def test_local_refuses_bad_options_before_making_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    where = tmp_path / "cluster"
    assert message in _refused(["local", "--dir", str(where), *args], capsys)
    assert not where.exists()
