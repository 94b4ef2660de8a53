"""Kv-store node processes: the commands, the demo, and a Jepsen-style run with a nemesis."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import redis

from kvstore.cluster import ProcessCluster, redis_ping
from kvstore.jepsen import run_jepsen
from kvstore.local import make_kv_cluster

from ..runtime.helpers import FAST_PROTOCOL, default_sigint, kill_group


def _kvstore(*args: str, **kw):
    return subprocess.run(
        [sys.executable, "-m", "kvstore", *args], capture_output=True, text=True, **kw
    )


def test_serve_and_status_show_every_node_and_its_redis_address(tmp_path):
    path = make_kv_cluster(tmp_path, 3, profile=None, protocol=FAST_PROTOCOL)
    with ProcessCluster(path, bootstrap=True) as cluster:
        cluster.start_all()
        cluster.wait_ready()
        host, port = cluster.redis_address(1)
        assert redis.Redis(host=host, port=port).set("hello", "world") is True
        done = _kvstore("status", "--config", str(path), "--json", timeout=60)
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        assert [r["redis"] for r in rows] == [f"{h}:{p}" for h, p in cluster.configs[0].redis]
        assert all(r["sequencer"] == 0 for r in rows)
        assert cluster.sequencer() == 0  # what the demo and the nemesis aim at
        table = _kvstore("status", "--config", str(path), timeout=60)
        assert "redis" in table.stdout.splitlines()[0]
        assert f"{host}:{port}" in table.stdout
        cluster.kill(2)
        down = _kvstore("status", "--config", str(path), timeout=60)
        assert down.returncode == 1 and "down" in down.stdout


def test_serve_refuses_a_bad_config_with_the_key_named(tmp_path):
    path = make_kv_cluster(tmp_path, 3, profile=None)
    path.write_text(path.read_text().replace("[kvstore]", "[kvstore]\nreads = 'eventual'"))
    done = _kvstore("serve", "--config", str(path), "--id", "0", timeout=60)
    assert done.returncode == 2 and "kvstore.reads" in done.stderr


def test_local_prints_the_redis_addresses_and_stops_on_interrupt(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvstore", "local", "--profile", "none", "--dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "Ctrl-C" in line or not line:
                break
        table = [ln.split() for ln in lines if ln.strip()[:1].isdigit()]
        assert len(table) == 3, lines
        for row in table:
            host, port = row[2].rsplit(":", 1)
            assert redis_ping(host, int(port)), row
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped." in out
    finally:
        kill_group(proc)


def test_demo_runs_a_failover_and_finds_the_history_linearizable(tmp_path):
    done = _kvstore(
        "demo",
        "--seconds",
        "8",
        "--out",
        str(tmp_path / "out"),
        timeout=240,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sequencer (node 0) killed" in done.stdout and "restarted" in done.stdout
    assert "linearizable" in done.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["verdict"] == "linearizable"
    assert {r["region"] for r in summary["rows"]} == {"CA", "OR", "OH"}
    assert all(r["operations"] > 0 for r in summary["rows"])
    assert (tmp_path / "out" / "latency.svg").read_text().startswith("<svg")
    assert sum(1 for _ in (tmp_path / "out" / "history.jsonl").open()) == summary["operations"]


def test_jepsen_short_run_kills_partitions_and_pauses_and_loses_nothing(tmp_path):
    result = run_jepsen(tmp_path, seconds=20, seed=5, progress=False)
    kinds = {what.split()[0] for _, what in result.faults}
    assert {"kill", "partition", "pause"} <= kinds, result.faults
    assert result.operations > 300
    assert result.acknowledged > 20
    assert result.lost == []
    assert result.verdict == "linearizable", result.extra["describe"]


@pytest.mark.slow
def test_jepsen_long_run(tmp_path):
    """``pytest -m slow -k jepsen_long``: five minutes of faults (see the README)."""
    seconds = float(os.environ.get("KVSTORE_JEPSEN_SECONDS", "300"))
    result = run_jepsen(tmp_path, seconds=seconds, seed=11, progress=False)
    assert result.lost == []
    assert result.verdict == "linearizable", result.extra["describe"]


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is not installed")
def test_redis_cli_talks_to_a_node(tmp_path):
    path = make_kv_cluster(tmp_path, 3, profile=None, protocol=FAST_PROTOCOL)
    with ProcessCluster(path, bootstrap=True) as cluster:
        cluster.start_all()
        cluster.wait_ready()
        _, port = cluster.redis_address(0)
        cli = ["redis-cli", "-p", str(port)]
        assert (
            subprocess.run([*cli, "SET", "a", "1"], capture_output=True, text=True).stdout == "OK\n"
        )
        got = subprocess.run([*cli, "GET", "a"], capture_output=True, text=True).stdout
        assert got == "1\n"
        # INFO replication says each node's role; the sequencer is whichever
        # node the view has (a loaded machine may have changed views since the
        # start), and exactly that node says role:sequencer.
        deadline = time.monotonic() + 30
        while True:
            infos = []
            for k in range(3):
                _, port_k = cluster.redis_address(k)
                out = subprocess.run(
                    ["redis-cli", "-p", str(port_k), "INFO", "replication"],
                    capture_output=True,
                    text=True,
                ).stdout
                infos.append(dict(line.split(":", 1) for line in out.splitlines() if ":" in line))
            assert all(info.get("role") in ("sequencer", "replica") for info in infos), infos
            sequencers = {info["sequencer"] for info in infos}
            if len(sequencers) == 1 and sequencers != {"-1"}:
                (seq,) = sequencers
                roles = [info["role"] for info in infos]
                if roles[int(seq)] == "sequencer" and roles.count("sequencer") == 1:
                    break
            assert time.monotonic() < deadline, infos
            time.sleep(0.2)


def test_a_node_whose_data_was_moved_away_refuses_to_rejoin_until_it_is_back(tmp_path):
    """The issue's scenario: node 2 SIGKILLed, its data directory moved away,
    ``kvstore serve --id 2`` started again (no --bootstrap) on an empty one. It
    exits nonzero saying why, never joins, and the others keep serving; put
    back, the same directory starts without the flag and catches up."""
    path = make_kv_cluster(tmp_path, 3, profile=None, protocol=FAST_PROTOCOL)
    with ProcessCluster(path, bootstrap=True) as cluster:
        cluster.start_all()
        cluster.wait_ready()
        first = redis.Redis(*cluster.redis_address(0), socket_timeout=30)
        assert first.set("before", "1") is True
        cluster.kill(2)
        data = cluster.configs[2].node.data_dir
        data.rename(tmp_path / "node2-moved")
        data.mkdir()  # what a new user would do: an empty directory in its place
        cluster.start(2)  # a restart: no --bootstrap
        proc = cluster.procs[2]
        assert proc is not None
        assert proc.wait(timeout=60) == 1
        log = cluster.log_path(2).read_text()
        errors = [line for line in log.splitlines() if line.startswith("error:")]
        assert errors == [
            f"error: node 2 did not start: refusing to start on an empty data "
            f"directory {data}: a node that took part before and lost its data would have "
            "forgotten its promises and acceptances (two values could be chosen for one "
            "instance); if this is a brand-new cluster, start its nodes with --bootstrap "
            "(Node(..., bootstrap=True)); a node that lost its data cannot rejoin safely yet"
        ], log
        assert "Traceback" not in log
        assert list(data.iterdir()) == []  # it wrote nothing there
        assert not redis_ping(*cluster.redis_address(2))  # it never joined
        assert first.set("while-away", "2") is True  # the majority goes on
        second = redis.Redis(*cluster.redis_address(1), socket_timeout=30)
        assert second.get("while-away") == b"2"
        # Its own directory back: it starts without the flag and catches up.
        data.rmdir()
        (tmp_path / "node2-moved").rename(data)
        cluster.start(2)
        cluster.wait_ready([2])
        third = redis.Redis(*cluster.redis_address(2), socket_timeout=30)
        assert third.get("before") == b"1" and third.get("while-away") == b"2"
