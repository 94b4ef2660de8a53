"""``python -m sdpaxos local | status | admin | node`` as an operator runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import default_sigint, kill_group

#: How long the commands may take to start and stop (not a measured duration).
STARTUP_TIMEOUT_S = 60.0


def _sdpaxos(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdpaxos", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_local_prints_its_nodes_serves_status_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sdpaxos",
            "local",
            "--replicas",
            "3",
            "--profile",
            "paper3",
            "--dir",
            str(cluster),
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    try:
        assert proc.stdout is not None
        lines = []
        while not any(line.startswith("Ctrl-C") for line in lines):
            line = proc.stdout.readline()
            assert line, f"local exited early: {''.join(lines)}"
            lines.append(line)
        text = "".join(lines)
        config = cluster / "cluster.toml"
        for k, region in enumerate(["CA", "OR", "OH"]):
            assert f"{k}  {region}" in text.replace("   ", "  ")
            assert str(cluster / f"node{k}") in text
        assert f"python -m sdpaxos status --config {config}" in text
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            status = _sdpaxos("status", "--config", str(config), "--json")
            rows = json.loads(status.stdout) if status.stdout.strip().startswith("[") else []
            if status.returncode == 0 and all(r.get("sequencer") is not None for r in rows):
                break
            assert time.monotonic() < deadline, status.stdout + status.stderr
            time.sleep(0.2)
        assert [r["region"] for r in rows] == ["CA", "OR", "OH"]
        table = _sdpaxos("status", "--config", str(config))
        assert table.returncode == 0 and table.stdout.splitlines()[0].startswith("id")
        cut = _sdpaxos("admin", "--config", str(config), "partition", "0|1,2")
        assert cut.returncode == 0 and cut.stdout.count(": ok") == 3
        heal = _sdpaxos("admin", "--config", str(config), "heal")
        assert heal.returncode == 0
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=STARTUP_TIMEOUT_S)
        assert proc.returncode == 0
        assert "stopped." in out
        down = _sdpaxos("status", "--config", str(config), "--timeout", "0.5")
        assert down.returncode == 1 and down.stdout.count("down") == 3
    finally:
        kill_group(proc)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["node", "--config", "missing.toml", "--id", "0"], "cannot read it"),
        (["admin", "--config", "CFG", "partition"], "partition needs groups"),
        (["admin", "--config", "CFG", "transfer-sequencer", "x"], "needs a replica id"),
        (["node", "--config", "CFG", "--id", "9"], "node.id: expected a replica id in 0..2"),
        (["node", "--config", "CFG", "--id", "0", "--app", "nope"], "unknown app 'nope'"),
        (["local", "--replicas", "5", "--profile", "paper3"], "has 3 regions"),
    ],
)
def test_operator_mistakes_get_a_clear_error(tmp_path: Path, args: list[str], message: str) -> None:
    from sdpaxos.runtime.local import make_local_cluster

    config = make_local_cluster(tmp_path, 3, insecure=True)
    args = [str(config) if a == "CFG" else a for a in args]
    result = _sdpaxos(*args, timeout_s=30)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_status_json_of_a_node_process(tmp_path: Path) -> None:
    """``node`` prints where it listens; ``status --json`` reads it."""
    from sdpaxos.runtime.local import make_local_cluster

    config = make_local_cluster(tmp_path, 1, insecure=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sdpaxos", "node", "--config", str(config), "--id", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("node 0 listening on 127.0.0.1:")
        status = _sdpaxos("status", "--config", str(config), "--json")
        (row,) = json.loads(status.stdout)
        assert row["id"] == 0 and row["peers"] == []
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STARTUP_TIMEOUT_S)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
