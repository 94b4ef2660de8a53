"""``python -m bench reconfig --engine runtime``: the timeline, the operator's
schedule and bookkeeping (against a fake cluster), and one small run on real
node processes.

No test asserts a duration: the schedule is checked by the order of the times
it recorded, which the code guarantees whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bench import __main__ as cli
from bench.engines import Clients, RunOutput, RunSpec
from bench.experiments import reconfig_runtime as rt
from bench.experiments.reconfig import CHANGE_NAMES
from bench.workloads import OpRecord, Workload


def test_the_plan_adds_the_spare_replaces_the_sequencer_and_removes_the_spare() -> None:
    addresses = {rt.SPARE: "127.0.0.1:1", rt.REPLACEMENT: "127.0.0.1:2"}
    steps = rt.plan(rt.Settings(4, 10.0, 1_000.0, 2_500.0, 9_000.0), addresses)
    assert [s.name for s in steps] == list(CHANGE_NAMES)
    assert [s.at_ms for s in steps] == [1_000.0, 3_500.0, 6_000.0]
    assert [(s.operation, s.argument) for s in steps] == [
        ("add_replica", [rt.SPARE, "127.0.0.1:1", "R0"]),  # a second replica in R0
        ("replace_replica", [rt.SEQUENCER, rt.REPLACEMENT, "127.0.0.1:2", "R0"]),
        ("remove_replica", rt.SPARE),
    ]
    # The operator's node and the client regions stay members throughout.
    assert rt.OPERATOR_NODE not in (rt.SEQUENCER, rt.SPARE)
    assert rt.SEQUENCER not in rt.CLIENT_REGIONS


class _FakeCluster:
    """What the operator's thread touches of a cluster: ``kill``."""

    def __init__(self) -> None:
        self.killed: list[int] = []

    def kill(self, k: int) -> None:
        self.killed.append(k)


def _operator(monkeypatch: pytest.MonkeyPatch, admin: Any) -> tuple[rt.Operator, list[str]]:
    said: list[str] = []
    op = rt.Operator(rt.Settings(1, 10.0, 0.0, 1.0, 1_000.0), said.append)
    op.addresses = {rt.SPARE: "127.0.0.1:1", rt.REPLACEMENT: "127.0.0.1:2"}
    monkeypatch.setattr(rt, "MIN_GAP_MS", 30.0)
    monkeypatch.setattr(rt, "_admin", admin)

    async def status(cluster: Any, address: str, *rest: Any) -> dict[str, Any]:
        return {"epoch": 99}

    monkeypatch.setattr(rt, "_status", status)
    return op, said


def test_each_change_waits_for_the_previous_one_and_the_replaced_node_is_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    async def admin(cluster: Any, operation: str, argument: Any) -> dict[str, Any]:
        calls.append(operation)
        await asyncio.sleep(0.05 if operation == "add_replica" else 0.0)
        return {"epoch": len(calls), "members": [{"address": "127.0.0.1:9"}]}

    op, said = _operator(monkeypatch, admin)
    cluster = _FakeCluster()
    import time

    op.run(cluster, time.monotonic())  # type: ignore[arg-type]
    assert calls == ["add_replica", "replace_replica", "remove_replica"]
    assert [c.name for c in op.changes] == list(CHANGE_NAMES)
    for before, after in zip(op.changes, op.changes[1:], strict=False):
        assert before.done_ms is not None and before.committed_ms is not None
        assert before.proposed_ms <= before.committed_ms <= before.done_ms
        assert after.proposed_ms >= before.done_ms + rt.MIN_GAP_MS
    assert cluster.killed == [rt.SEQUENCER]
    assert [a["epoch"] for a in op.answers] == [1, 2, 3]
    assert any("committed after" in line for line in said)


def test_a_refused_change_is_recorded_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def admin(cluster: Any, operation: str, argument: Any) -> dict[str, Any]:
        if operation == "replace_replica":
            raise RuntimeError("learner 4 has not caught up in time")
        return {"epoch": 1, "members": []}

    op, said = _operator(monkeypatch, admin)
    cluster = _FakeCluster()
    import time

    op.run(cluster, time.monotonic())  # type: ignore[arg-type]
    add, replace, remove = op.changes
    assert add.done_ms is not None and remove.done_ms is not None
    assert replace.done_ms is None and "has not caught up" in replace.error
    assert any("FAILED" in line for line in said)
    assert cluster.killed == [rt.SEQUENCER]


def test_the_timeline_holds_the_completed_writes_in_ms_and_the_client_regions() -> None:
    spec = RunSpec(
        protocol="sdpaxos",
        profile=rt.PROFILE,
        workload=Workload(),
        clients=Clients("closed", (0, 1, 1)),
        duration_ms=5_000.0,
    )
    records = [
        OpRecord(0, 1, "R1", "write", b"k", invoke_us=1_000, complete_us=61_000),
        OpRecord(1, 2, "R2", "write", b"k", invoke_us=2_000, complete_us=None),
    ]
    op = rt.Operator(rt.QUICK, lambda _: None)
    timeline = rt.timeline_of(RunOutput(spec, records), op, 510.0)
    assert timeline.completions == [(61.0, "R1", 60.0)]
    assert timeline.regions == ["R1", "R2"] and timeline.end_ms == 5_000.0
    assert timeline.rtt_ms == rt.RTT_MS and timeline.election_ms == 510.0


@pytest.mark.slow  # ~30 s of node processes; CI keeps the plan and operator tests on fakes
def test_a_small_run_on_real_processes_makes_the_three_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five node processes (three members, two spares), two load generators."""
    monkeypatch.setattr(rt, "QUICK", rt.Settings(2, 20.0, 2_000.0, 2_000.0, 14_000.0))
    code = cli.main(
        ["reconfig", "--engine", "runtime", "--quick", "--quiet", "--out", str(tmp_path)]
    )
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["engine"] == "runtime" and data["regions"] == ["R1", "R2"]
    timeline = data["timeline"]
    assert [c["name"] for c in timeline] == list(CHANGE_NAMES)
    assert all(c["error"] == "" and c["done_ms"] is not None for c in timeline), timeline
    assert code == 0, data["changes"]
    assert data["runtime"]["ok"], data["runtime"]["verdict"]
    # Nodes 1 and 2 (the engine's verification) and node 4, the new sequencer.
    assert "2 nodes executed the same" in data["runtime"]["verify"]
    assert "node 4 (the new sequencer) executed the same" in data["runtime"]["verify"]
    assert [a["epoch"] for a in data["runtime"]["answers"]] == [1, 2, 3]
    assert sorted(m["id"] for m in data["runtime"]["answers"][-1]["members"]) == [1, 2, 4]
    for c in data["changes"]:
        assert sorted(c["stall_ms"]) == ["R1", "R2"]
    assert (tmp_path / "reconfig.png").stat().st_size > 0


def test_the_simulator_refuses_a_script() -> None:
    from bench.engines import EngineUnsupported, SimEngine

    spec = RunSpec(
        protocol="sdpaxos",
        profile=rt.PROFILE,
        workload=Workload(),
        clients=Clients("closed", (0, 1, 1)),
        duration_ms=100.0,
        script=rt.Operator(rt.QUICK, lambda _: None),
    )
    with pytest.raises(EngineUnsupported, match="--engine runtime"):
        SimEngine().run(spec)
