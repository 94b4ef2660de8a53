"""bench.runtime_latency's judgement, without node processes: every built-in
profile of up to five regions is judged against SDPaxos's formula for it
(paper3 was once judged against nothing and printed that every region was
within 5 %), and a profile without one says it was not judged; and its
table of where each node's loop spent its time per command."""

from pathlib import Path

from bench import paper
from bench.runtime_latency import (
    _plot_stages,
    _table,
    per_command,
    region_rows,
    stage_rows,
    stages_plot_path,
    verdict,
)
from sdpaxos.profiles import PAPER3


def _result(profile: str, node_means: dict[str, float]) -> dict[str, object]:
    regions = list(node_means)
    samples = [([m + 1.0, m + 1.5], m) for m in node_means.values()]
    return {"profile": profile, "fsync": False, "rows": region_rows(profile, regions, samples)}


def test_paper3_is_judged_against_its_formula() -> None:
    assert paper.formula_ms(PAPER3, PAPER3.index("CA")) == {"CA": 20.0, "OR": 20.0, "OH": 52.0}
    over = _result("paper3", {"CA": 21.6, "OR": 21.6, "OH": 53.7})
    assert [r["within_5pct"] for r in over["rows"]] == [False, False, True]
    message, code = verdict(over)
    assert code == 1 and "OFF BY MORE THAN 5 %" in message and "fsync off" in message
    within = _result("paper3", {"CA": 20.9, "OR": 20.5, "OH": 53.0})
    assert verdict(within) == ("every region within 5 % of the formula (fsync off)", 0)


def test_paper5_rows_carry_the_formula_and_the_ratio() -> None:
    result = _result("paper5", {"CA": 53.7, "OR": 69.1, "OH": 69.2, "IRE": 140.2, "SEL": 147.3})
    rows = {r["region"]: r for r in result["rows"]}
    assert rows["CA"]["formula_ms"] == 52.0 and rows["CA"]["ratio"] == 1.033
    assert rows["SEL"]["client_mean_ms"] == 148.55
    assert verdict(result)[1] == 0


def test_any_built_in_profile_of_up_to_five_regions_is_judged() -> None:
    """uniformN: every round trip 100 ms, so every region's formula is 100 ms."""
    result = _result("uniform3", {"R0": 100.9, "R1": 101.2, "R2": 106.0})
    assert [r["formula_ms"] for r in result["rows"]] == [100.0, 100.0, 100.0]
    assert [r["within_5pct"] for r in result["rows"]] == [True, True, False]
    assert verdict(result)[1] == 1


def test_a_profile_without_a_formula_is_not_judged_and_says_so() -> None:
    result = _result("uniform7", {f"R{i}": 150.0 for i in range(7)})
    assert all(r["within_5pct"] is None and r["formula_ms"] is None for r in result["rows"])
    message, code = verdict(result)
    assert code == 0 and message.startswith("no formula for profile 'uniform7'")


def test_per_command_is_what_each_counter_grew_by_over_the_commands() -> None:
    before = [{"decode": 1.0, "step": 2.0, "log": 0.5}, {"decode": 0.0, "step": 0.0, "log": 0.0}]
    after = [
        {"decode": 1.03, "step": 2.006, "log": 0.5},
        {"decode": 0.012, "step": 0.0, "log": 0.0003},
    ]
    assert per_command(before, after, 60, scale=1e6) == [
        {"decode": 500.0, "step": 100.0, "log": 0.0},
        {"decode": 200.0, "step": 0.0, "log": 5.0},
    ]
    # Counters, unscaled.
    assert per_command([{"turns": 100.0}], [{"turns": 340.0}], 60) == [{"turns": 4.0}]


def test_stage_rows_sum_the_loop_without_the_log_and_the_table_shows_them() -> None:
    per_region = [
        [
            {"decode": 50.0, "ready": 150.0, "log": 40.0},
            {"decode": 80.0, "ready": 70.0, "log": 50.0},
        ],
        [
            {"decode": 81.0, "ready": 130.0, "log": 60.0},
            {"decode": 51.0, "ready": 120.0, "log": 70.0},
        ],
    ]
    rows = stage_rows(["CA", "OR"], per_region)
    assert [(r["commands_from"], r["node"], r["loop_us"]) for r in rows] == [
        ("CA", "CA", 200.0),
        ("CA", "OR", 150.0),
        ("OR", "CA", 211.0),
        ("OR", "OR", 171.0),
    ]
    result = _result("paper3", {"CA": 21.0, "OR": 21.0})
    result.update(commands_per_region=60, stages=rows)
    text = _table(result)
    assert "| commands from | node | decode | ready | log | loop |" in text
    assert "| OR | CA | 81 | 130 | 60 | 211 |" in text
    # With the driver's counters per command: a column each, after the loop.
    io = [
        [{"turns": 4.6, "messages_in": 2.5}, {"turns": 4.2, "messages_in": 4.1}],
        [{"turns": 4.4, "messages_in": 4.4}, {"turns": 4.3, "messages_in": 2.1}],
    ]
    rows = stage_rows(["CA", "OR"], per_region, io)
    assert rows[1]["per_command"] == {"turns": 4.2, "messages_in": 4.1}
    assert rows[2]["per_command"] == {"turns": 4.4, "messages_in": 4.4}
    result.update(stages=rows)
    text = _table(result)
    head = "| commands from | node | decode | ready | log | loop | turns per command |"
    assert head + " messages_in per command |" in text
    assert "| OR | CA | 81 | 130 | 60 | 211 | 4.4 | 4.4 |" in text
    assert "| CA | OR | 80 | 70 | 50 | 150 | 4.2 | 4.1 |" in text


def test_the_stages_plot_is_written_next_to_the_latency_plot(tmp_path: Path) -> None:
    assert stages_plot_path(tmp_path / "lat.png") == tmp_path / "lat_stages.png"
    per_region = [[{"decode": 50.0, "ready": 150.0, "log": 40.0}]]
    result = {"profile": "paper3", "fsync": False, "stages": stage_rows(["CA"], per_region)}
    out = stages_plot_path(tmp_path / "lat.png")
    _plot_stages(result, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_short_run_on_node_processes_gives_every_node_s_stages() -> None:
    """End to end on three node processes (paper3, three commands per region):
    every (region, node) row has every stage and the counters per command,
    from the nodes' status over the wire; the client's work is at its own
    node only, and reading the status moves no stage (a status request is
    answered outside them), so it is exactly 0 elsewhere."""
    from bench.runtime_latency import run
    from sdpaxos.runtime.node import STAGES

    regions = ["CA", "OR", "OH"]
    result = run("paper3", commands=3, warmup=1, fsync=False)
    rows = result["stages"]
    assert [(r["commands_from"], r["node"]) for r in rows] == [
        (a, b) for a in regions for b in regions
    ]
    for r in rows:
        assert list(r["us"]) == list(STAGES)
        assert set(r["per_command"]) == {"turns", "messages_in"}
        if r["commands_from"] == r["node"]:
            # Its client's frames, its proposals' turns, and the acceptances back.
            assert r["us"]["client"] > 0 and r["us"]["answer"] > 0, r
            assert r["us"]["decode"] > 0 and r["us"]["step"] > 0 and r["us"]["ready"] > 0, r
            assert r["per_command"]["turns"] > 0 and r["per_command"]["messages_in"] > 0, r
        else:
            assert r["us"]["client"] == 0.0 and r["us"]["answer"] == 0.0, r
    for region in regions:  # some other node accepted each region's commands
        others = [r for r in rows if r["commands_from"] == region and r["node"] != region]
        assert any(r["us"]["decode"] > 0 for r in others), others
    assert [row["region"] for row in result["rows"]] == regions
