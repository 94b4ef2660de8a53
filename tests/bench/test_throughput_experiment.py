"""``python -m bench throughput`` end to end on tiny settings, and its paper arithmetic."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench import __main__ as cli
from bench import paper
from bench.common import Context
from bench.experiments import throughput, throughput_cells
from bench.rounds import NIC_MBPS_DEFAULT, ProtocolWorkers

TINY = throughput.Settings(
    replicas=(3,),
    payloads_bytes=(1024,),
    conflicts_pct=(5.0,),
    read_pcts=(0.0, 50.0),
    sessions=10,
    warmup=60,
    commands=200,
    repeats=2,
    forwarding=True,
)


def test_the_paper_ratios_come_from_fig10_then_fig11() -> None:
    assert paper.sdpaxos_over("EPaxos", 5, 16, 5.0) == round(118 / 70, 2)
    assert paper.sdpaxos_over("EPaxos", 3, 1024, 100.0) == round(69 / 45, 2)
    assert paper.sdpaxos_over("Multi-Paxos", 5, 1024, 0.0) == round(69 / 11, 2)
    assert paper.sdpaxos_over("Mencius", 3, 16, 0.0) == round(122 / 115, 2)
    assert paper.sdpaxos_over("Mencius", 3, 16, 5.0) is None  # not in the paper
    assert paper.sdpaxos_over("Multi-Paxos-fwd", 5, 16, 0.0) is None


def test_a_tiny_run_writes_both_figures_and_the_bars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(throughput, "QUICK", TINY)
    ctx = Context(
        "throughput",
        tmp_path,
        quick=True,
        protocols=("sdpaxos", "multipaxos", "epaxos"),
        quiet=True,
        nic_mbps=100.0,
    )
    assert throughput.run(ctx) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["nic_mbps"] == 100.0
    assert set(ctx.plots) == {"throughput_fig10.png", "throughput_fig11.png"}
    assert all((tmp_path / p).stat().st_size > 10_000 for p in ctx.plots)
    cells = result["cells"]
    # Fig. 10: SDPaxos and EPaxos at 5 % conflict; Fig. 11: four columns at 0 and
    # 50 % reads.
    assert len(cells) == 2 + 4 * 2
    assert all(c["status"] == "ok" for c in cells), [c["status"] for c in cells]
    assert all(len(c["capacity_runs_per_s"]) == 2 for c in cells)
    mp = next(c for c in cells if c["column"] == "Multi-Paxos" and c["read_pct"] == 0.0)
    assert mp["clients_at"] == "leader" and mp["bound"] == "egress r0"  # 1 KB, 100 Mbit/s
    sd = next(c for c in cells if c["column"] == "SDPaxos" and c["read_pct"] == 0.0)
    assert sd["capacity_both_per_s"] == min(sd["capacity_per_s"], sd["nic_capacity_per_s"])
    # The bars name only what ran: 3 replicas, 1 KB here.
    assert all(b["cpu"] is None for b in result["bars"])
    ratios = {(r["over"], r["conflict_pct"]): r for r in result["ratios"]}
    assert set(ratios) == {
        ("Multi-Paxos", 0.0),
        ("Multi-Paxos-fwd", 0.0),
        ("EPaxos", 0.0),
        ("EPaxos", 5.0),
    }
    assert ratios[("Multi-Paxos", 0.0)]["cpu_nic"] == round(
        sd["capacity_both_per_s"] / mp["capacity_both_per_s"], 2
    )
    md = (tmp_path / "results.md").read_text()
    assert "## Fig. 10" in md and "## Fig. 11" in md and "100 Mbit/s" in md
    assert "each protocol's cells in a worker process of its own" in md
    pids = {(c["protocol"], c["pid"]) for c in cells}
    assert len(pids) == 3 and len({pid for _, pid in pids}) == 3
    assert os.getpid() not in {pid for _, pid in pids}
    assert "![Fig. 10](throughput_fig10.png)" in md


def test_the_nic_option_is_checked_and_passed_on(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["throughput", "--nic-mbps", "0", "--quiet"]) == 2
    seen: list[float | None] = []

    def fake(ctx: Context) -> int:
        seen.append(ctx.nic_mbps)
        return 0

    monkeypatch.setattr(cli, "_runner", lambda name: fake)
    assert cli.main(["throughput", "--nic-mbps", "1000", "--quiet"]) == 0
    assert cli.main(["throughput", "--quiet"]) == 0
    assert seen == [1000.0, None]
    assert NIC_MBPS_DEFAULT == 445.0


def _run_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: throughput.Settings, field: str
) -> list[tuple[str, float]]:
    """Run the experiment on ``settings`` (SDPaxos and EPaxos) and return the
    ``(protocol, spec.<field>)`` of every run, in the order they ran."""
    monkeypatch.setattr(throughput, "QUICK", settings)
    real = ProtocolWorkers.run
    calls: list[tuple[str, float]] = []

    def recording(self, spec, progress=None):  # type: ignore[no-untyped-def]
        calls.append((spec.protocol, getattr(spec, field)))
        return real(self, spec, progress=progress)

    monkeypatch.setattr(ProtocolWorkers, "run", recording)
    ctx = Context("throughput", tmp_path, quick=True, protocols=("sdpaxos", "epaxos"), quiet=True)
    assert throughput.run(ctx) == 0
    return calls


def test_the_repeats_run_in_passes_over_every_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pass runs every cell once (so a change of load falls on every
    protocol alike), and a cell's median is taken over its runs of all passes."""
    calls = _run_recording(tmp_path, monkeypatch, TINY, "read_pct")
    cells = json.loads((tmp_path / "results.json").read_text())["cells"]
    ran = [c for c in cells if c["status"] == "ok"]
    per_pass = len(ran)
    assert per_pass > 1 and calls == calls[:per_pass] * TINY.repeats
    assert all(len(c["capacity_runs_per_s"]) == TINY.repeats for c in ran)


def test_the_cells_a_ratio_compares_run_next_to_each_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within a pass, every protocol runs at one conflict rate before the next
    rate, and the bars pair the two cells' runs pass by pass."""
    tiny = dataclasses.replace(
        TINY, payloads_bytes=(16,), conflicts_pct=(0.0, 5.0), read_pcts=(0.0,), forwarding=False
    )
    calls = _run_recording(tmp_path, monkeypatch, tiny, "conflict_pct")
    one_pass = [("sdpaxos", 0.0), ("epaxos", 0.0), ("sdpaxos", 5.0), ("epaxos", 5.0)]
    assert calls == one_pass * tiny.repeats
    result = json.loads((tmp_path / "results.json").read_text())
    cells = {(c["protocol"], c["conflict_pct"]): c for c in result["cells"]}
    sd, ep = cells[("sdpaxos", 5.0)], cells[("epaxos", 5.0)]
    expected = [
        round(a / b, 2)
        for a, b in zip(sd["capacity_runs_per_s"], ep["capacity_runs_per_s"], strict=True)
    ]
    assert throughput_cells.pass_ratios_of(sd, ep) == expected
    assert throughput_cells.median_or_none(expected) == round(sum(expected) / 2, 2)
    assert throughput_cells.pass_ratios_of(sd, {**ep, "capacity_runs_per_s": [1.0]}) == []
    assert throughput_cells.median_or_none([]) is None
    # The bar over EPaxos at 3 replicas, 16 B, 5 %: those pass ratios, in pass order.
    (bar,) = [b for b in result["bars"] if b["over"] == "EPaxos" and b["replicas"] == 3]
    assert bar["cpu_pass_ratios"] == expected
    assert bar["cpu_paired"] == throughput_cells.median_or_none(expected)


def test_pass_ratios_pair_runs_of_the_same_pass_not_sorted_ones() -> None:
    sd = {"status": "ok", "capacity_runs_per_s": [100.0, 300.0, 200.0]}
    other = {"status": "ok", "capacity_runs_per_s": [200.0, 100.0, 100.0]}
    assert throughput_cells.pass_ratios_of(sd, other) == [0.5, 3.0, 2.0]
    assert throughput_cells.median_or_none(throughput_cells.pass_ratios_of(sd, other)) == 2.0
    assert throughput_cells.pass_ratios_of({**sd, "status": "FAILED: x"}, other) == []


def test_a_bar_carries_its_pass_ratios_in_pass_order_and_their_median() -> None:
    fields = dict.fromkeys(
        (
            "capacity_per_s",
            "capacity_both_per_s",
            "nic_capacity_per_s",
            "nic_peers_only_capacity_per_s",
            "ops_per_round",
        ),
        1.0,
    )
    sd = {"status": "ok", **fields, "capacity_runs_per_s": [300.0, 100.0, 200.0]}
    ep = {"status": "ok", **fields, "capacity_runs_per_s": [100.0, 100.0, 100.0]}
    cells = {
        ("SDPaxos", "sdpaxos", 3, 16, 0.0, 5.0): sd,
        ("EPaxos", "epaxos", 3, 16, 0.0, 5.0): ep,
    }
    (bar,) = [
        b for b in throughput_cells.bar_rows(cells) if b["over"] == "EPaxos" and b["replicas"] == 3
    ]
    assert bar["cpu_pass_ratios"] == [3.0, 1.0, 2.0]
    assert bar["cpu_paired"] == 2.0


def test_bar_passes_rerun_each_bars_two_cells_back_to_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the passes over every cell, ``bar_passes`` more over the bars'
    cells only, SDPaxos's then the other's; their runs join the cells' (the
    median and the pass ratios), and the other cells keep ``repeats`` runs."""
    tiny = dataclasses.replace(
        TINY,
        payloads_bytes=(16,),
        conflicts_pct=(0.0, 5.0),
        read_pcts=(0.0,),
        forwarding=False,
        bar_passes=2,
    )
    calls = _run_recording(tmp_path, monkeypatch, tiny, "conflict_pct")
    one_pass = [("sdpaxos", 0.0), ("epaxos", 0.0), ("sdpaxos", 5.0), ("epaxos", 5.0)]
    # The passes over every cell, then the bar's pair (EPaxos at 3 replicas,
    # 16 B, 5 %: the only bar these settings have).
    bar_pair = [("sdpaxos", 5.0), ("epaxos", 5.0)]
    assert calls == one_pass * tiny.repeats + bar_pair * tiny.bar_passes
    result = json.loads((tmp_path / "results.json").read_text())
    cells = {(c["protocol"], c["conflict_pct"]): c for c in result["cells"]}
    runs = tiny.repeats + tiny.bar_passes
    assert len(cells[("sdpaxos", 5.0)]["capacity_runs_per_s"]) == runs
    assert len(cells[("epaxos", 5.0)]["capacity_runs_per_s"]) == runs
    assert len(cells[("sdpaxos", 0.0)]["capacity_runs_per_s"]) == tiny.repeats
    (bar,) = [b for b in result["bars"] if b["over"] == "EPaxos" and b["replicas"] == 3]
    assert len(bar["cpu_pass_ratios"]) == runs
    assert bar["cpu_paired"] == throughput_cells.median_or_none(bar["cpu_pass_ratios"])
    md = (tmp_path / "results.md").read_text()
    assert "then 2 more of the bars' cells" in md


def test_bar_keys_pair_each_bar_sdpaxos_first_and_skip_a_half_bar() -> None:
    def key(title: str, n: int, payload: int, conflict: float) -> throughput.CellKey:
        return (title, title.lower(), n, payload, 0.0, conflict)

    specs: dict[throughput.CellKey, Any] = {
        key("EPaxos", 5, 16, 5.0): None,
        key("SDPaxos", 5, 16, 5.0): None,
        key("SDPaxos", 5, 16, 0.0): None,
        key("Multi-Paxos", 5, 16, 0.0): None,
        key("SDPaxos", 3, 16, 5.0): None,  # its EPaxos cell did not run
        key("Multi-Paxos", 5, 1024, 0.0): None,  # nor this one's SDPaxos cell
    }
    assert throughput._bar_keys(specs) == [
        key("SDPaxos", 5, 16, 0.0),
        key("Multi-Paxos", 5, 16, 0.0),
        key("SDPaxos", 5, 16, 5.0),
        key("EPaxos", 5, 16, 5.0),
    ]


def test_bar_keys_run_a_cell_two_bars_share_once_per_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two bars on one SDPaxos cell: it runs once per bar pass, as its partners
    do, so every cell of a bar keeps as many runs as the other (else there are
    no pass ratios to pair)."""

    def key(title: str, conflict: float) -> throughput.CellKey:
        return (title, title.lower(), 5, 16, 0.0, conflict)

    monkeypatch.setattr(
        throughput,
        "BARS",
        [("Multi-Paxos", 5, 16, 0.0, 2.0), ("EPaxos", 5, 16, 0.0, 1.7)],
    )
    specs: dict[throughput.CellKey, Any] = {
        key("SDPaxos", 0.0): None,
        key("EPaxos", 0.0): None,
        key("Multi-Paxos", 0.0): None,
    }
    assert throughput._bar_keys(specs) == [
        key("SDPaxos", 0.0),
        key("Multi-Paxos", 0.0),
        key("EPaxos", 0.0),
    ]


def test_each_protocol_warms_up_on_its_largest_cell_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = dataclasses.replace(TINY, replicas=(3, 5), payloads_bytes=(16, 1024), read_pcts=(0.0,))
    monkeypatch.setattr(throughput, "QUICK", tiny)
    events: list[tuple[str, str, int, int]] = []
    real_run, real_warm = ProtocolWorkers.run, ProtocolWorkers.warm_up

    def run(self, spec, progress=None):  # type: ignore[no-untyped-def]
        events.append(("run", spec.protocol, spec.replicas, spec.payload_bytes))
        return real_run(self, spec, progress=progress)

    def warm_up(self, spec):  # type: ignore[no-untyped-def]
        events.append(("warm", spec.protocol, spec.replicas, spec.payload_bytes))
        return real_warm(self, spec)

    monkeypatch.setattr(ProtocolWorkers, "run", run)
    monkeypatch.setattr(ProtocolWorkers, "warm_up", warm_up)
    ctx = Context("throughput", tmp_path, quick=True, protocols=("sdpaxos", "epaxos"), quiet=True)
    assert throughput.run(ctx) == 0
    warm = [e for e in events if e[0] == "warm"]
    assert events[: len(warm)] == warm
    assert sorted(warm) == [("warm", "epaxos", 5, 1024), ("warm", "sdpaxos", 5, 1024)]
