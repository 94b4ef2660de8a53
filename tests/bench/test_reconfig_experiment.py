"""``python -m bench reconfig``: the experiment on the simulator engine, and its
measurement (stall, baseline, verdict, bins) on synthetic timelines.

Fixed seeds and virtual time or made-up times: nothing here depends on the
machine's speed.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import __main__ as cli
from bench.experiments.reconfig import (
    CHANGE_NAMES,
    SEQUENCER_CHANGE,
    ChangeTimes,
    Timeline,
    measure,
    per_bin,
)


def _timeline(changes: list[ChangeTimes], completions: list[tuple[float, str, float]]) -> Timeline:
    return Timeline("sim", 60.0, 510.0, ["A", "B"], completions, changes, end_ms=6_000.0)


def _every(ms: float, region: str, start: float, end: float) -> list[tuple[float, str, float]]:
    out = []
    t = start
    while t < end:
        out.append((t, region, 50.0))
        t += ms
    return out


def test_a_gap_after_the_epoch_started_counts_and_the_verdict_follows_the_bound() -> None:
    # Region A completes every 20 ms but for a 300 ms hole that opens 200 ms
    # after the change ran everywhere (inside the 1 s after it); B never stops.
    a = [c for c in _every(20.0, "A", 0.0, 6_000.0) if not 2_400.0 < c[0] < 2_700.0]
    b = _every(20.0, "B", 0.0, 6_000.0)
    add = ChangeTimes(CHANGE_NAMES[0], proposed_ms=2_000.0, done_ms=2_200.0)
    (stall,) = measure(_timeline([add], a + b))
    assert stall.took_ms == 200.0
    assert stall.stall_ms == {"A": 300.0, "B": 20.0}
    assert stall.baseline_ms == {"A": 20.0, "B": 20.0}
    assert stall.worst_extra_ms == 280.0 and stall.bound_ms == 60.0
    assert not stall.met


def test_the_sequencer_change_is_allowed_an_election_and_a_short_stall_is_met() -> None:
    a = [c for c in _every(20.0, "A", 0.0, 6_000.0) if not 2_100.0 < c[0] < 2_500.0]
    b = _every(20.0, "B", 0.0, 6_000.0)
    replace = ChangeTimes(SEQUENCER_CHANGE, proposed_ms=2_000.0, done_ms=2_300.0)
    add = ChangeTimes(CHANGE_NAMES[0], proposed_ms=2_000.0, done_ms=2_300.0)
    seq, other = measure(_timeline([replace, add], a + b))
    assert seq.bound_ms == 60.0 + 510.0 and seq.worst_extra_ms == 380.0 and seq.met
    assert other.bound_ms == 60.0 and not other.met  # the same hole, a tighter bound


def test_a_change_that_did_not_finish_is_not_met_and_the_window_stops_at_the_run_end() -> None:
    a = _every(20.0, "A", 0.0, 5_800.0)  # the last 200 ms of the run are empty
    b = _every(20.0, "B", 0.0, 6_000.0)
    lost = ChangeTimes(CHANGE_NAMES[2], proposed_ms=3_000.0, done_ms=None, error="timed out")
    late = ChangeTimes(CHANGE_NAMES[0], proposed_ms=5_500.0, done_ms=5_700.0)
    first, second = measure(_timeline([lost, late], a + b))
    assert first.stall_ms == {} and not first.met and first.error == "timed out"
    # Cut at 6,000 ms (the load's end), not 6,700: A's empty tail is 6,000 - 5,780;
    # and with 700 ms of its window unseen, the change is not met whatever it shows.
    assert second.stall_ms["A"] == 220.0 and second.baseline_ms["A"] == 20.0
    assert not second.met and second.error == "the load ended 700 ms before its window did"


def test_bins_count_completions_and_average_latency_per_region() -> None:
    completions = [(10.0, "A", 40.0), (20.0, "A", 60.0), (300.0, "B", 70.0)]
    bins = per_bin(_timeline([], completions), bin_ms=250.0)
    counts, means = bins["A"]
    assert counts[:2] == [2, 0] and means[:2] == [50.0, None]
    assert bins["B"][0][:2] == [0, 1] and bins["B"][1][1] == 70.0


def test_the_experiment_runs_quick_on_the_simulator_and_writes_its_files(tmp_path: Path) -> None:
    assert cli.main(["reconfig", "--quick", "--quiet", "--seed", "1", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["experiment"] == "reconfig" and data["engine"] == "sim"
    assert [c["name"] for c in data["changes"]] == list(CHANGE_NAMES)
    regions = ["region 0", "region 1", "region 2"]
    assert data["regions"] == regions
    for c in data["changes"]:
        assert sorted(c["stall_ms"]) == sorted(c["baseline_ms"]) == regions
        assert c["took_ms"] > 0
        assert c["met"] == (c["worst_extra_ms"] <= c["bound_ms"])
        assert c["bound_ms"] == 60.0 + (data["election_ms"] if c["name"] == SEQUENCER_CHANGE else 0)
    assert data["goals_met"] == all(c["met"] for c in data["changes"])
    assert set(data["bins"]) == set(regions) and sum(data["bins"]["region 0"]["counts"]) > 0
    md = (tmp_path / "results.md").read_text()
    for c in data["changes"]:
        assert f"| {c['name']} |" in md
        assert ("| met |" if c["met"] else "| NOT met |") in md.split(c["name"])[1].split("\n")[0]
    assert (tmp_path / "reconfig.png").stat().st_size > 0
