"""The ``latency`` experiment's report: ``results.md``'s tables and a figure per profile.

Apart from the run (:mod:`bench.experiments.latency`), which it does not
import: everything it shows is in the run's result (its settings, and per
profile the commit and read cells and the formula check), so
:func:`markdown` and :func:`plot` read that alone. The tables: SDPaxos
against the formula (the node's mean beside the client's on the runtime
engine), every protocol per region, the paper's Figs. 12 and 13 where they
apply, how reads were served, and where the lead moved.
"""

from __future__ import annotations

import math
import os
from typing import Any

from bench import paper
from bench.common import Context, md_table, save_plot
from bench.runtime_engine import describe_latency
from sdpaxos.profiles import DelayProfile


def _fmt_cell(cell: dict[str, Any], region: str) -> str:
    if "regions" not in cell:
        return str(cell.get("status", "-")).split(" (")[0]
    s = cell["regions"][region]
    if s["mean_ms"] is None:
        return "no ops"
    return f"{s['mean_ms']:.1f} / {s['p50_ms']:.1f} / {s['p99_ms']:.1f}"


def markdown(ctx: Context, result: dict[str, Any]) -> str:
    """``results.md``: what ran and how, then per profile its commit and read tables."""
    settings = result["settings"]
    runtime = ctx.engine_name == "runtime"
    where = (
        " Latency at the client, ms: mean / p50 / p99. "
        + describe_latency()
        + " The SDPaxos table also gives each node's own mean (its commit-latency"
        " histogram, proposal to READY), which is what the formula is checked against."
        if runtime
        else " Latency at the replica, ms: mean / p50 / p99."
    )
    lines = [
        "# latency: per-region commit and read latency (the paper's Figs. 12 and 13)",
        "",
        f"Engine `{ctx.engine_name}`, seed {ctx.seed}{', quick' if ctx.quick else ''}."
        f" Open-loop Poisson clients: {settings['clients_per_region']} per region at"
        f" {settings['rate_per_s']:g} ops/s each (imbalanced: half in one region);"
        f" warm-up {settings['warmup_ms']:g} ms excluded, {settings['duration_ms']:g} ms measured"
        f" ({'wall clock' if runtime else 'virtual time'})."
        " Sequencer / leader: "
        + ", ".join(f"{n} {p['sequencer']}" for n, p in result["profiles"].items())
        + "."
        + where,
        "",
    ]
    if runtime:
        lines += [runtime_setup_line(result), ""]
    for name, prof in result["profiles"].items():
        regions = prof["regions"]
        lines += [f"## {name}: commit latency", ""]
        check = prof["formula_check"]
        fig12 = paper.FIG12_MS.get(name, {}) if prof["paper_figures"] else {}
        fig12_sd = fig12.get("SDPaxos", {})
        sd = prof["commit"].get("SDPaxos")
        if not check["rows"]:
            sd = None  # no formula to hold it against (more than five replicas)
            lines += [f"No SDPaxos latency formula for {len(regions)} replicas.", ""]
        if sd is not None and check.get("judged_on") == "node":
            rows = []
            for region in regions:
                c = check["rows"][region]
                s = sd["regions"][region]
                rows.append(
                    [
                        region,
                        c["formula_ms"],
                        c["mean_ms"],
                        _off(c["off"], c["within_5pct"]),
                        s["mean_ms"],
                        s["p50_ms"],
                        s["p99_ms"],
                        _off(c.get("client_off"), True),
                        fig12_sd.get(region),
                    ]
                )
            lines += [
                "SDPaxos against the formula (docs/protocol.md 5.6)"
                + (" and the paper's Fig. 12" if fig12_sd else "")
                + "; the node's mean is judged (within 5 %), the client's is shown beside it:",
                "",
                md_table(
                    [
                        "region",
                        "formula ms",
                        "node mean ms",
                        "node vs formula",
                        "client mean ms",
                        "client p50 ms",
                        "client p99 ms",
                        "client vs formula",
                        "paper Fig. 12 ms",
                    ][: None if fig12_sd else -1],
                    [row[: None if fig12_sd else -1] for row in rows],
                ),
                "",
            ]
        elif sd is not None:
            rows = []
            for region in regions:
                c = check["rows"][region]
                s = sd["regions"][region] if "regions" in sd else None
                rows.append(
                    [
                        region,
                        c["formula_ms"],
                        None if s is None else s["mean_ms"],
                        None if s is None else s["p50_ms"],
                        None if s is None else s["p99_ms"],
                        _off(c["off"], c["within_5pct"]),
                        fig12_sd.get(region),
                    ]
                )
            lines += [
                "SDPaxos against the formula (docs/protocol.md 5.6)"
                + (" and the paper's Fig. 12:" if fig12_sd else ":"),
                "",
                md_table(
                    [
                        "region",
                        "formula ms",
                        "mean ms",
                        "p50 ms",
                        "p99 ms",
                        "vs formula",
                        "paper Fig. 12 ms",
                    ][: None if fig12_sd else -1],
                    [row[: None if fig12_sd else -1] for row in rows],
                ),
                "",
            ]
        columns = list(prof["commit"])
        if columns:
            header = ["region", *columns]
            rows = [
                [region, *(_fmt_cell(prof["commit"][c], region) for c in columns)]
                for region in regions
            ]
            lines += [
                "Every protocol (mean / p50 / p99 ms):",
                "",
                md_table(header, rows, "l" + "r" * len(columns)),
                "",
            ]
            paper_cols = [c for c in columns if c in fig12]
            if paper_cols:
                rows = [[region, *(fig12[c].get(region) for c in paper_cols)] for region in regions]
                lines += [
                    "The paper's Fig. 12 (≈ mean ms, read off the plot):",
                    "",
                    md_table(["region", *paper_cols], rows),
                    "",
                ]
        read_cols = list(prof["reads"])
        if read_cols:
            lines += [f"## {name}: read latency", ""]
            rows = [
                [region, *(_fmt_cell(prof["reads"][c], region) for c in read_cols)]
                for region in regions
            ]
            lines += [md_table(["region", *read_cols], rows, "l" + "r" * len(read_cols)), ""]
            paths = {
                c: prof["reads"][c].get("paths") for c in read_cols if prof["reads"][c].get("paths")
            }
            if paths:
                lines += [
                    "How reads were served (local: the replica's read path; log: as a command): "
                    + "; ".join(f"{c}: {p}" for c, p in paths.items()),
                    "",
                ]
            if prof["paper_figures"]:
                sd_read = paper.FIG13_SDPAXOS_UNIFORM_MS[name]
                lines += [
                    "The paper's Fig. 13, SDPaxos, uniform keys (≈ ms): "
                    + ", ".join(f"{r} {v:g}" for r, v in sd_read.items()),
                    "",
                ]
        for plot in ctx.plots:
            if plot.startswith(f"latency_{name}"):
                lines += [f"![{name}]({plot})", ""]
    moved = [
        f"- {name} {column}: at the end the nodes followed {', '.join(cell['lead_moved'])}"
        f" (the lead moved during the run, so its latencies are not those of a leader in"
        f" {prof['sequencer']})"
        for name, prof in result["profiles"].items()
        for group in ("commit", "reads")
        for column, cell in prof[group].items()
        if cell.get("lead_moved")
    ]
    if moved:
        lines += ["## The lead moved", "", *moved, ""]
    if ctx.skipped:
        lines += ["## Not run", ""] + [f"- {p}: {why}" for p, why in ctx.skipped.items()] + [""]
    if result["failures"]:
        lines += ["## Flagged", ""] + [f"- {f}" for f in result["failures"]] + [""]
    return "\n".join(lines)


def _off(off: float | None, ok: bool) -> str:
    if off is None:
        return "-"
    return f"{off * 100:+.1f} %" + ("" if ok else " **FLAGGED**")


def runtime_setup_line(result: dict[str, Any]) -> str:
    """The runtime runs' machine: load averages and busy share seen over the runs."""
    loads = []
    busy = []
    for prof in result["profiles"].values():
        for group in ("commit", "reads"):
            for cell in prof[group].values():
                if cell.get("load_average"):
                    loads.append(cell["load_average"][0])
                if cell.get("machine_busy") is not None:
                    busy.append(cell["machine_busy"])
    if not loads:
        return "Machine: no runtime run measured."
    return (
        f"Machine: {os.cpu_count()} cores shared with other jobs; 1-minute load average"
        f" {min(loads):.2f} to {max(loads):.2f} over the runs, all cores busy"
        f" {100 * min(busy):.0f} to {100 * max(busy):.0f} % of each window (every process"
        " counted). Nodes run with fsync "
        + ("on." if result.get("fsync") else "off, as in the paper's prototype.")
    )


def plot(ctx: Context, profile: DelayProfile, prof: dict[str, Any]) -> None:
    regions = prof["regions"]
    commit = {c: v for c, v in prof["commit"].items() if "regions" in v}
    reads = {c: v for c, v in prof["reads"].items() if "regions" in v}
    if not commit and not reads:
        return

    side = "client" if ctx.engine_name == "runtime" else "replica"
    expected = {r: c["formula_ms"] for r, c in prof["formula_check"]["rows"].items()}

    def bars(ax: Any, data: dict[str, Any], title: str, formula: dict[str, float] | None) -> None:
        width = 0.8 / max(1, len(data))
        for k, (column, cell) in enumerate(data.items()):
            xs = [i + (k - (len(data) - 1) / 2) * width for i in range(len(regions))]
            means = [cell["regions"][r]["mean_ms"] or math.nan for r in regions]
            p99 = [cell["regions"][r]["p99_ms"] or math.nan for r in regions]
            err = [max(0.0, p - m) for p, m in zip(p99, means, strict=True)]
            ax.bar(xs, means, width, yerr=[[0] * len(err), err], capsize=2, label=column)
        if formula:
            ax.scatter(
                range(len(regions)),
                [formula[r] for r in regions],
                marker="_",
                s=400,
                color="black",
                zorder=3,
                label="SDPaxos formula",
            )
        ax.set_xticks(range(len(regions)), regions)
        ax.set_ylabel(f"{side} latency (ms), bar mean, whisker p99")
        ax.set_title(title)
        ax.legend(fontsize=7)

    def draw(plt: Any) -> None:
        panels = [
            p
            for p in (
                (commit, "commit latency", expected or None),
                (reads, "read latency", None),
            )
            if p[0]
        ]
        fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
        for ax, (data, title, formula) in zip(axes[0], panels, strict=True):
            bars(ax, data, f"{profile.name}: {title}", formula)
        fig.suptitle(
            f"{ctx.engine_name} engine, sequencer/leader in {prof['sequencer']}"
            + (", client-side latency (loopback, TLS included)" if side == "client" else "")
        )

    save_plot(ctx, f"latency_{profile.name}.png", draw)
