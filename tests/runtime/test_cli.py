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
        assert cut.returncode == 0
        # Each node's answer whole (it was JSON cut off at 200 characters).
        assert cut.stdout.splitlines() == [
            "node 0: ok blocks links to 1, 2",
            "node 1: ok blocks links to 0",
            "node 2: ok blocks links to 0",
        ]
        heal = _sdpaxos("admin", "--config", str(config), "heal")
        assert heal.returncode == 0
        assert heal.stdout.splitlines() == [f"node {k}: ok blocks no link" for k in range(3)]
        snap = _sdpaxos("admin", "--config", str(config), "--id", "1", "snapshot")
        assert snap.stdout == 'node 1: ok {"requested": true}\n'
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
        [
            sys.executable,
            "-m",
            "sdpaxos",
            "node",
            "--config",
            str(config),
            "--id",
            "0",
            "--bootstrap",
        ],
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


# ------------------------------------------------------------------ bad input


def _only_error_line(stderr: str) -> str:
    """The one line a refused command prints (and no traceback)."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_help_prints_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    from sdpaxos.__main__ import main as sdpaxos_main

    for flag in ("--help", "-h"):
        assert sdpaxos_main([flag]) == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: python -m sdpaxos COMMAND")
        for command in ("certs", "node", "local", "status", "admin", "fuzz"):
            assert f"  {command} " in out
    for command in ("certs", "node", "local", "status", "admin", "fuzz"):
        with pytest.raises(SystemExit) as exited:
            sdpaxos_main([command, "--help"])
        assert exited.value.code == 0, command
        assert "usage:" in capsys.readouterr().out
    assert sdpaxos_main([]) == 2
    assert _only_error_line(capsys.readouterr().err).startswith(
        "python -m sdpaxos: error: a command is needed"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--metrics", "nonsense"],
            "argument --metrics: expected HOST:PORT or PORT, got 'nonsense'",
        ),
        (["--metrics", "127.0.0.1:99999"], "argument --metrics: expected HOST:PORT"),
        (["--listen", "999.1.1.1"], "error: --listen 999.1.1.1: not an address of this machine"),
        (["--metrics", "999.1.1.1:0"], "error: --metrics 999.1.1.1: not an address"),
        (["--log-level", "LOUD"], "argument --log-level: expected one of DEBUG, INFO, WARNING"),
        (["--gc-gen0", "-5"], "argument --gc-gen0: expected an integer in 0..10000000, got -5"),
        (["--gc-gen0", "x"], "argument --gc-gen0: expected an integer, got 'x'"),
        (["--trace-events", "Bogus"], "argument --trace-events: unknown trace event 'Bogus'"),
        (["--trace-events", "Establish,Nope"], "unknown trace event 'Nope'"),
        (["--id", "7"], "error: CFG: node.id: expected a replica id in 0..2, got 7"),
        (["--app", "nope"], "error: unknown app 'nope'"),
        (
            ["--cert", "node1"],
            "error: tls: the key CERTS/node1.key does not belong to the certificate",
        ),
        (["--cert", "garbage"], "error: tls: cannot load the certificate CERTS/node0.pem"),
    ],
)
def test_node_refuses_bad_options_in_one_line_and_changes_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """Every one with --bootstrap: had the check been missing, the node would
    have started, written its identity, and run until the timeout."""
    from sdpaxos.runtime.local import make_local_cluster

    config = make_local_cluster(tmp_path, 3)
    if args[0] == "--cert":  # the file names a key that is not the certificate's
        certs = tmp_path / "certs"
        if args[1] == "node1":
            config.write_text(
                config.read_text().replace('key = "certs/node{id}.key"', 'key = "certs/node1.key"')
            )
        else:
            (certs / "node0.pem").write_text("not a certificate\n")
        args = []
        message = message.replace("CERTS", str(certs))
    before = _files(tmp_path)
    result = _sdpaxos(
        "node", "--config", str(config), "--id", "0", "--bootstrap", *args, timeout_s=30
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message.replace("CFG", str(config)) in _only_error_line(result.stderr)
    assert _files(tmp_path) == before
    assert list((tmp_path / "node0").iterdir()) == []


def test_node_says_in_one_line_why_it_could_not_listen(tmp_path: Path) -> None:
    """A port already taken is found only when the node listens: one line, exit 1."""
    import socket

    from sdpaxos.runtime.local import make_local_cluster

    config = make_local_cluster(tmp_path, 1, insecure=True)
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        port = int(config.read_text().split("127.0.0.1:")[1].split('"')[0])
        taken.bind(("127.0.0.1", port))
        taken.listen()
        result = _sdpaxos("node", "--config", str(config), "--id", "0", "--bootstrap")
    assert result.returncode == 1
    line = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert len(line) == 1 and line[0].startswith("error: node 0 did not start: ")
    assert "address already in use" in line[0].lower(), result.stderr
    assert "Traceback" not in result.stderr


def test_node_refuses_a_kvstore_file_and_status_reads_one(tmp_path: Path) -> None:
    from kvstore.local import make_kv_cluster

    path = make_kv_cluster(tmp_path, 3, profile=None, insecure=True)
    node = _sdpaxos("node", "--config", str(path), "--id", "0", "--bootstrap", timeout_s=30)
    assert node.returncode == 2
    assert "run its nodes with kvstore serve" in _only_error_line(node.stderr)
    assert list((tmp_path / "node0").iterdir()) == []
    status = _sdpaxos("status", "--config", str(path), "--timeout", "0.5", timeout_s=30)
    assert status.returncode == 1 and status.stdout.count("down") == 3, status.stderr
    assert status.stderr == ""


def test_local_refuses_an_app_it_cannot_load_before_making_anything(tmp_path: Path) -> None:
    result = _sdpaxos("local", "--app", "nosuch", "--dir", str(tmp_path / "c"), timeout_s=30)
    assert result.returncode == 2
    assert "unknown app 'nosuch'" in _only_error_line(result.stderr)
    assert not (tmp_path / "c").exists()
    for replicas, message in [
        ("4", "replicas must be an odd number"),
        ("0", "--replicas must be in 1..16"),
    ]:
        result = _sdpaxos(
            "local", "--replicas", replicas, "--profile", "none", "--dir", str(tmp_path / "c")
        )
        assert result.returncode == 2
        assert message in _only_error_line(result.stderr)
        assert not (tmp_path / "c").exists()


def test_local_stops_once_every_node_has_exited(tmp_path: Path) -> None:
    """The launcher loads the app, the nodes refuse it: it says so and exits 1,
    instead of waiting for nodes that are gone."""
    result = _sdpaxos(
        "local",
        "--insecure",
        "--profile",
        "none",
        "--app",
        "tests.runtime.helpers:FailsInNodeProcesses",
        "--dir",
        str(tmp_path),
        timeout_s=STARTUP_TIMEOUT_S,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.count("exited with status 2") == 3
    assert _only_error_line(result.stderr) == "error: every node exited"
    assert "this app refuses to run in a node process" in (tmp_path / "node0.log").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["status", "--timeout", "0"], "argument --timeout: expected a positive number"),
        (["status", "--client", "-1"], "argument --client: expected an integer in >= 0"),
        (["admin", "--id", "9", "snapshot"], "error: --id 9: not a replica in 0..2"),
        (["admin", "bogus"], "argument operation: invalid choice: 'bogus'"),
    ],
)
def test_status_and_admin_refuse_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    from sdpaxos.runtime.local import make_local_cluster

    config = make_local_cluster(tmp_path, 3, insecure=True)
    result = _sdpaxos(args[0], "--config", str(config), *args[1:], timeout_s=30)
    assert result.returncode == 2
    assert message in _only_error_line(result.stderr)


def test_the_trace_event_names_are_the_events_the_core_emits() -> None:
    """--trace-events accepts exactly the names the core traces."""
    import re

    from sdpaxos.runtime.cliargs import TRACE_EVENT_NAMES

    core = Path(__file__).resolve().parents[2] / "sdpaxos" / "core"
    call = re.compile(r"""(?:\b_trace|\.trace)\(\s*["']([A-Za-z]\w*)["']""")
    emitted = {name for path in core.glob("*.py") for name in call.findall(path.read_text())}
    assert emitted == TRACE_EVENT_NAMES
