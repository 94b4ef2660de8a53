"""``python -m bench straggler``'s first part (the round driver) end to end on tiny settings."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from bench.common import Context
from bench.experiments import straggler


def test_part_one_runs_each_protocol_in_its_own_worker_and_names_one_that_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = dataclasses.replace(straggler.QUICK, sessions=10, warmup=60, commands=300)
    monkeypatch.setattr(straggler, "QUICK", tiny)
    ctx = Context(
        "straggler", tmp_path, quick=True, protocols=("mencius", "nosuch", "epaxos"), quiet=True
    )
    assert straggler.run(ctx) == 0
    rows = {r["protocol"]: r for r in json.loads((tmp_path / "results.json").read_text())["rows"]}
    assert rows["nosuch"]["status"].startswith("unknown protocol") and "none" not in rows["nosuch"]
    for name in ("mencius", "epaxos"):
        row = rows[name]
        assert row["status"] == "ok"
        assert all(row[case] > 0 for case in ("none", "leader", "other"))
        # The slowed replica's CPU counts three times: the capacity falls.
        assert row["leader"] < row["none"] and row["leader_reduction_pct"] < 0
    pids = {rows["mencius"]["pid"], rows["epaxos"]["pid"]}
    assert len(pids) == 2 and os.getpid() not in pids
