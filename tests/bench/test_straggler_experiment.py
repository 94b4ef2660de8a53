"""``python -m bench straggler``'s first part (the round driver) end to end on tiny settings."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from bench.common import Context
from bench.experiments import straggler
from bench.rounds import ProtocolWorkers


def test_part_one_runs_each_protocol_in_its_own_worker_and_names_one_that_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = dataclasses.replace(straggler.QUICK, sessions=10, warmup=60, commands=300)
    monkeypatch.setattr(straggler, "QUICK", tiny)
    events: list[tuple[str, str, object]] = []
    real_run, real_warm = ProtocolWorkers.run, ProtocolWorkers.warm_up

    def run(self, spec, progress=None):  # type: ignore[no-untyped-def]
        events.append(("run", spec.protocol, spec.slow))
        return real_run(self, spec, progress=progress)

    def warm_up(self, spec):  # type: ignore[no-untyped-def]
        events.append(("warm", spec.protocol, spec.slow))
        return real_warm(self, spec)

    monkeypatch.setattr(ProtocolWorkers, "run", run)
    monkeypatch.setattr(ProtocolWorkers, "warm_up", warm_up)
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
    # Each protocol's worker runs an untimed warm-up before its three cases.
    every = straggler.ROUNDS_EVERY
    assert events == [
        (kind, name, slow)
        for name in ("mencius", "epaxos")
        for kind, slow in (("warm", None), ("run", None), ("run", (0, every)), ("run", (1, every)))
    ]
