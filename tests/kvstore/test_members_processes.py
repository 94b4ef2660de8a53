"""Membership change of a kv-store with real node processes: ``kvstore local
--spares K`` starts nodes that are no members; ``kvstore admin add-replica |
remove-replica | replace-replica`` changes the membership, taking a spare's
addresses from the file; ``kvstore status`` shows it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from kvstore.cluster import redis_ping
from kvstore.config import load_kv_config

from ..runtime.helpers import default_sigint, kill_group


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
