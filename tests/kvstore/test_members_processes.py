"""Membership change of a kv-store with real node processes: ``kvstore local
--spares K`` starts nodes that are no members; ``kvstore admin add-replica |
remove-replica | replace-replica`` changes the membership, taking a spare's
addresses from the file; ``kvstore status`` shows it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from kvstore.cluster import ProcessCluster, redis_ping
from kvstore.config import load_kv_config
from kvstore.local import make_kv_cluster
from kvstore.nemesis_members import run_members_jepsen

from ..runtime.helpers import FAST_PROTOCOL, default_sigint, kill_group

#: Long enough for a change on a loaded machine (no test asserts a duration).
ADMIN_TIMEOUT_S = 120


def _kvstore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstore", *args],
        capture_output=True,
        text=True,
        timeout=ADMIN_TIMEOUT_S,
        check=False,
    )


def _status(path: Path) -> dict[int, dict[str, Any]]:
    done = _kvstore("status", "--config", str(path), "--json")
    return {row["id"]: row for row in json.loads(done.stdout)}


def _membership(path: Path, at: int = 0) -> tuple[int, list[int]]:
    row = _status(path)[at]
    return row["epoch"], [m["id"] for m in row["members"]]


def _dialled(port: int) -> bool:
    """Whether some TCP connection to ``port`` on loopback is established (a
    paused node's kernel still completes the handshake)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
            return True
    return False


def test_local_starts_spares_that_are_no_members_and_names_them_in_the_file(
    tmp_path: Path,
) -> None:
    argv = ["local", "--profile", "none", "--no-fsync", "--spares", "2", "--dir", str(tmp_path)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvstore", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            lines.append(line)
            if "Ctrl-C" in line or not line:
                break
        spares = [ln.split() for ln in lines if ln.startswith("spare node ")]
        assert [s[2] for s in spares] == ["3:", "4:"], lines
        config = load_kv_config(tmp_path / "cluster.toml", 0)
        assert [s.id for s in config.spares] == [3, 4]
        for row, spare in zip(spares, config.spares, strict=True):
            host, port = spare.redis
            assert row[3] == f"redis://{host}:{port}"
            assert redis_ping(host, port), row  # it runs ...
            r = redis.Redis(host=host, port=port, socket_timeout=30)
            with pytest.raises(redis.ResponseError, match=r"^NOTMEMBER"):
                r.set("k", "v")  # ... and is no member
        members = redis.Redis(*config.redis[0], socket_timeout=30)
        assert members.set("k", "v") is True
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped." in out
        assert not redis_ping(*config.spares[0].redis)
    finally:
        kill_group(proc)


def test_admin_adds_removes_and_replaces_with_the_spares_addresses_and_refuses_bad_input(
    tmp_path: Path,
) -> None:
    path = make_kv_cluster(tmp_path, 3, profile=None, protocol=FAST_PROTOCOL, spares=2)
    with ProcessCluster(path, fsync=False, bootstrap=True) as cluster:
        cluster.start_all()
        cluster.wait_ready()
        spare3, spare4 = load_kv_config(path, 0).spares
        assert redis.Redis(*cluster.redis_address(0), socket_timeout=30).set("a", "1") is True

        # Bad input: refused, saying why, and the membership is unchanged.
        for words, code, why in [
            (["add-replica", "1"], 1, "node 1 is already a member"),
            (["remove-replica", "9"], 1, "node 9 is neither a member nor a learner"),
            (["replace-replica", "9", "3"], 1, "node 9 is not a member of epoch 0"),
            (["add-replica", "7"], 2, "node 7 is no spare of"),
            (["remove-replica", "1", "--id", "9"], 2, "--id 9: neither a replica nor a spare"),
            (["add-replica", "x"], 2, "a node id is an integer, got 'x'"),
        ]:
            done = _kvstore("admin", "--config", str(path), *words)
            assert (done.returncode, done.stdout) == (code, ""), done
            assert why in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert _membership(path) == (0, [0, 1, 2])

        # A second change while one is in progress: spare 4 paused, its add
        # waits to connect; a remove asked meanwhile is refused.
        cluster.pause(4)
        first = subprocess.Popen(
            [sys.executable, "-m", "kvstore", "admin", "--config", str(path), "add-replica", "4"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + ADMIN_TIMEOUT_S
            while not _dialled(spare4.address[1]):  # node 0 works on the add
                assert time.monotonic() < deadline and first.poll() is None, first.stderr
                time.sleep(0.05)
            done = _kvstore("admin", "--config", str(path), "remove-replica", "2")
            assert done.returncode == 1, done
            assert "add-replica 4 is in progress at this node: one change at a time" in done.stderr
            assert "membership unchanged" in done.stderr
            cluster.resume(4)
            out, err = first.communicate(timeout=ADMIN_TIMEOUT_S)
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode == 0, err
        assert f"member  4  {spare4.peer_text}  {spare4.region}" in out and "epoch 1" in out, out
        assert _membership(path) == (1, [0, 1, 2, 4])  # node 2 is still a member

        done = _kvstore("admin", "--config", str(path), "remove-replica", "1")
        assert done.returncode == 0 and "epoch 2" in done.stdout, done
        assert "member  1 " not in done.stdout
        with pytest.raises(redis.ResponseError, match=r"^NOTMEMBER"):
            redis.Redis(*cluster.redis_address(1), socket_timeout=30).set("b", "2")

        cluster.kill(2)
        done = _kvstore("admin", "--config", str(path), "replace-replica", "2", "3")
        assert done.returncode == 0, done
        assert f"member  3  {spare3.peer_text}" in done.stdout and "member  2 " not in done.stdout
        assert _membership(path) == (3, [0, 3, 4])
        assert redis.Redis(*cluster.redis_address(3), socket_timeout=30).set("c", "3") is True
        for k in (0, 3, 4):  # every member has every write
            r = redis.Redis(*cluster.redis_address(k), socket_timeout=30)
            assert r.mget("a", "c") == [b"1", b"3"], k

        table = _kvstore("status", "--config", str(path))
        assert table.returncode == 1  # node 2 is down
        lines = table.stdout.splitlines()
        assert "membership (as node" in table.stdout and "epoch 3" in table.stdout, lines
        assert f"  member  3  {spare3.peer_text}  {spare3.region}" in lines, lines
        row1 = next(line for line in lines if line.startswith("1 "))
        assert "removed" in row1 and ":".join(map(str, cluster.redis_address(1))) in row1


def test_membership_nemesis_under_redis_clients_keeps_the_history_linearizable(
    tmp_path: Path,
) -> None:
    """While redis-py clients run: a spare added, a member removed, a SIGKILLed
    member replaced by the other spare, each committed before the next; the
    history is linearizable and every acknowledged write is read back at every
    final member, from its own store too (``READONLY``)."""
    result = run_members_jepsen(tmp_path, seconds=16, seed=3, fsync=False)
    described = (result.changes, result.lost[:5], result.extra)
    assert [what.split()[0] for _, what in result.changes[:4]] == [
        "add_replica",
        "remove_replica",
        "SIGKILL",
        "replace_replica",
    ], described
    assert result.members == result.expected == result.read_at, described
    assert result.extra["epoch"] == 3, described
    assert result.verdict == "linearizable", described
    assert result.acknowledged > 0 and result.lost == [], described
    assert result.ok
