"""The ``throughput`` experiment's report: ``results.md``'s tables and the two figures.

Apart from the run (:mod:`bench.experiments.throughput`) because it is the
larger half and needs nothing of the run but its cells, bars and ratios
(:mod:`bench.experiments.throughput_cells`): :func:`markdown` writes the bars,
Fig. 10's and Fig. 11's tables, the per-replica detail and every write-only
ratio beside the paper's; :func:`plot_fig10` and :func:`plot_fig11` draw the
figures, measured against the paper's.
"""

from __future__ import annotations

from typing import Any

from bench import paper
from bench.common import Context, md_table, save_plot
from bench.experiments.throughput_cells import (
    TITLES,
    CellKey,
    Column,
    Settings,
    find_cell,
    passed,
    ratio_of,
)

COLORS = {
    "SDPaxos": "tab:blue",
    "Multi-Paxos": "tab:red",
    "Multi-Paxos-fwd": "tab:pink",
    "Mencius": "tab:green",
    "EPaxos": "tab:orange",
}


def _k(value: float) -> str:
    return f"{value / 1000:,.0f}K"


def _fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown(
    ctx: Context,
    settings: Settings,
    nic_mbps: float,
    fig10: list[Column],
    fig11: list[Column],
    cells: dict[CellKey, dict[str, Any]],
    bars: list[dict[str, Any]],
    ratios: list[dict[str, Any]],
    load_start: list[float] | None,
    load_end: list[float] | None,
) -> str:
    lines = [
        "# throughput: capacity vs conflict rate (Fig. 10) and read share (Fig. 11)",
        "",
        f"Round-based driver (`bench/rounds.py`), seed {ctx.seed}"
        f"{', quick' if ctx.quick else ''}: {settings.sessions} closed-loop sessions per"
        f" replica (Multi-Paxos: all at the leader), {settings.warmup:,} operations of warm-up,"
        f" {settings.commands:,} measured, {settings.repeats} run(s) per cell, one per pass over"
        " every cell (the median CPU capacity)"
        + (
            f", then {settings.bar_passes} more of the bars' cells, one per pass over them"
            if settings.bar_passes
            else ""
        )
        + (
            ", each protocol's cells in a worker process of its own (after an untimed run"
            " of its largest cell)"
            if settings.isolated
            else ", every cell in one process"
        )
        + ". State machine: an in-memory key-value store."
        f" Load average (1, 5, 15 min) at the start {load_start}, at the end {load_end}.",
        "",
        "**CPU** = ops/s with one core per replica (1000 / the busiest replica's CPU s per"
        f" 1,000 ops). **CPU+NIC** = also one {nic_mbps:g} Mbit/s NIC each way per replica"
        " (the lowest of the CPU bound and every replica's egress and ingress bound; client"
        " requests and answers count on the replica's NIC). What binds is named"
        " (`cpu r0`, `egress r0`, `ingress r2`: the bound and its replica).",
        "",
        "## The bars: SDPaxos over the other",
        "",
        md_table(
            [
                "over",
                "replicas",
                "payload",
                "conflict",
                "CPU",
                "CPU, paired (passes)",
                "CPU+NIC",
                "NIC, replica links only",
                "NIC theory",
                "closed loop",
                "bar",
                "paper",
                "binds (SDPaxos / other)",
            ],
            [
                [
                    b["over"],
                    b["replicas"],
                    f"{b['payload_bytes']} B",
                    f"{b['conflict_pct']:g}%",
                    _fmt_ratio(b["cpu"]),
                    _fmt_ratio(b["cpu_paired"])
                    + (
                        " (" + ", ".join(f"{r:.2f}" for r in b["cpu_pass_ratios"]) + ")"
                        if b["cpu_pass_ratios"]
                        else ""
                    ),
                    _fmt_ratio(b["cpu_nic"]),
                    _fmt_ratio(b["nic_peers_only"]),
                    "-"
                    if b["nic_theory_peers_only"] is None
                    else f"{b['nic_theory_with_clients']}x / {b['nic_theory_peers_only']}x",
                    _fmt_ratio(b["closed_loop"]),
                    f"{b['bar']:g}x",
                    _fmt_ratio(b["paper"]),
                    f"{b['bound_sdpaxos']} / {b['bound_other']}",
                ]
                for b in bars
            ],
        ),
        "",
        "NIC theory (Multi-Paxos): the leader sends every payload to N-1 peers, an SDPaxos"
        " replica (N-1)/N of them, so replica links alone give N; with the clients'"
        " requests on the replicas' NICs an SDPaxos replica also takes in a payload per"
        " command, which gives N-1 (shown as N-1 / N). Closed loop: operations completed per"
        " round with the same sessions (latency-bound throughput: what a fixed number of"
        " clients gets when the CPU does not limit it; no CPU noise in it).",
        "",
    ]
    # Fig. 10
    if fig10:
        lines += ["## Fig. 10: writes, capacity vs conflict rate", ""]
        for n in settings.replicas:
            for payload in settings.payloads_bytes:
                header = ["conflict"]
                for col in fig10:
                    header += [f"{col.title} CPU", f"{col.title} CPU+NIC", f"paper {col.title}"]
                if len(fig10) == 2:
                    header += ["ratio CPU", "ratio CPU+NIC", "ratio closed loop", "paper ratio"]
                table = []
                for c in settings.conflicts_pct:
                    row: list[Any] = [f"{c:g}%"]
                    got = []
                    for col in fig10:
                        cell = find_cell(cells, col.title, n, payload, 0.0, c)
                        got.append(cell)
                        row += _cpu_nic(cell)
                        row.append(_paper10(col.protocol, n, payload, c))
                    if len(got) == 2:
                        row += [
                            _fmt_ratio(ratio_of(got[0], got[1], "capacity_per_s")),
                            _fmt_ratio(ratio_of(got[0], got[1], "capacity_both_per_s")),
                            _fmt_ratio(ratio_of(got[0], got[1], "ops_per_round")),
                            _fmt_ratio(paper.sdpaxos_over(fig10[1].title, n, payload, c)),
                        ]
                    table.append(row)
                lines += [f"### {n} replicas, {payload} B", "", md_table(header, table), ""]
        if "throughput_fig10.png" in ctx.plots:
            lines += ["![Fig. 10](throughput_fig10.png)", ""]
    # Fig. 11
    if fig11:
        lines += ["## Fig. 11: no conflict, capacity vs read share (CPU / CPU+NIC)", ""]
        for n in settings.replicas:
            for payload in settings.payloads_bytes:
                table = []
                for r in settings.read_pcts:
                    row = [f"{r:g}%"]
                    for col in fig11:
                        cpu, both = _cpu_nic(find_cell(cells, col.title, n, payload, r, 0.0))
                        row.append(f"{cpu} / {both}")
                    row.append(_paper11(n, payload, r))
                    table.append(row)
                flat = ", ".join(
                    f"{TITLES[p]} {vals[(n, payload)]:g}K"
                    for p, vals in paper.FIG11_FLAT_K.items()
                    if (n, payload) in vals
                )
                lines += [
                    f"### {n} replicas, {payload} B",
                    "",
                    md_table(["reads", *[c.title for c in fig11], "paper SDPaxos"], table),
                    "",
                    f"Paper, the others (flat): {flat}.",
                    "",
                ]
        if "throughput_fig11.png" in ctx.plots:
            lines += ["![Fig. 11](throughput_fig11.png)", ""]
    # Per-replica detail
    lines += [
        "## Per replica: CPU ms per 1,000 ops; bytes out / in per op (with clients)",
        "",
    ]
    detail = []
    for cell in cells.values():
        if not passed(cell):
            continue
        detail.append(
            [
                cell["column"],
                cell["replicas"],
                f"{cell['payload_bytes']} B",
                f"{cell['read_pct']:g}%",
                f"{cell['conflict_pct']:g}%",
                " ".join(f"{v * 1000:.2f}" for v in cell["cpu_s_per_1000"]),
                " ".join(f"{e:.0f}/{i:.0f}" for e, i in cell["bytes_per_op"]),
                f"{cell['commands_per_instance']:.0f}",
                f"{cell['reads_ok']} / {cell['reads_via_log']}",
                cell["bound"],
            ]
        )
    lines += [
        md_table(
            [
                "column",
                "N",
                "payload",
                "reads",
                "conflict",
                "CPU ms / 1,000 ops (r0 r1 ...)",
                "bytes out/in per op (r0 r1 ...)",
                "cmds/instance",
                "reads ok / log",
                "binds",
            ],
            detail,
        ),
        "",
        "SDPaxos over the others, every write-only cell (CPU / CPU+NIC; paper):",
        "",
        md_table(
            ["over", "replicas", "payload", "conflict", "CPU", "CPU+NIC", "paper"],
            [
                [
                    r["over"],
                    r["replicas"],
                    f"{r['payload_bytes']} B",
                    f"{r['conflict_pct']:g}%",
                    _fmt_ratio(r["cpu"]),
                    _fmt_ratio(r["cpu_nic"]),
                    _fmt_ratio(r["paper"]),
                ]
                for r in ratios
            ],
        ),
        "",
    ]
    failed = [c for c in cells.values() if c.get("status") not in (None, "ok")]
    if failed:
        lines += ["## Not measured or failed", ""]
        lines += [
            f"- {c['column']} {c['replicas']}R {c['payload_bytes']} B {c['read_pct']:g}% reads"
            f" {c['conflict_pct']:g}% conflict: {c['status']}"
            for c in failed
        ]
        lines.append("")
    return "\n".join(lines)


def _cpu_nic(cell: dict[str, Any] | None) -> list[str]:
    if not passed(cell) or cell is None:
        status = "-" if cell is None else str(cell.get("status", "-")).split(":")[0][:30]
        return [status, status]
    return [_k(cell["capacity_per_s"]), _k(cell["capacity_both_per_s"])]


def _paper10(proto: str, n: int, payload: int, conflict: float) -> str:
    vals = paper.FIG10_K.get((proto, n, payload))
    if vals is None or int(conflict) not in paper.FIG10_CONFLICT_PCTS:
        return "-"
    return f"{vals[paper.FIG10_CONFLICT_PCTS.index(int(conflict))]:g}K"


def _paper11(n: int, payload: int, reads: float) -> str:
    vals = paper.FIG11_SDPAXOS_K.get((n, payload))
    if vals is None or int(reads) not in paper.FIG11_READ_PCTS:
        return "-"
    return f"{vals[paper.FIG11_READ_PCTS.index(int(reads))]:g}K"


# -- plots ---------------------------------------------------------------------------------


def _panels(settings: Settings) -> list[tuple[int, int]]:
    return [(n, p) for n in settings.replicas for p in settings.payloads_bytes]


def plot_fig10(
    ctx: Context, settings: Settings, columns: list[Column], cells: dict[CellKey, dict[str, Any]]
) -> None:
    if not columns or not any(passed(c) and c["read_pct"] == 0.0 for c in cells.values()):
        return
    panels = _panels(settings)

    rows = (
        ("capacity_per_s", "one core per replica", 1000.0, "thousand ops/s"),
        ("capacity_both_per_s", "core + NIC", 1000.0, "thousand ops/s"),
        ("ops_per_round", "closed loop", 1.0, "ops per round"),
    )

    def draw(plt: Any) -> None:
        fig, axes = plt.subplots(
            len(rows), len(panels), figsize=(4 * len(panels), 10), squeeze=False, sharex=True
        )
        for row, (field, what, scale, unit) in enumerate(rows):
            for ax, (n, payload) in zip(axes[row], panels, strict=True):
                for col in columns:
                    pts = [
                        (c, cell[field] / scale)
                        for c in settings.conflicts_pct
                        if passed(cell := find_cell(cells, col.title, n, payload, 0.0, c))
                    ]
                    color = COLORS.get(col.title)
                    if pts:
                        ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=col.title)
                    vals = paper.FIG10_K.get((col.protocol, n, payload))
                    if vals and field != "ops_per_round":
                        ax.plot(
                            paper.FIG10_CONFLICT_PCTS,
                            vals,
                            linestyle="--",
                            marker="x",
                            color=color,
                            alpha=0.6,
                            label=f"{col.title} (paper)",
                        )
                ax.set_title(f"{n} replicas, {payload} B: {what}", fontsize=9)
                ax.set_xlabel("conflict rate (%)")
                ax.set_ylabel(unit)
                ax.set_ylim(bottom=0)
                ax.legend(fontsize=7)
        fig.suptitle(
            "Fig. 10: writes vs conflict rate (solid: measured; dashed: the paper). Closed loop:"
            f" {settings.sessions} sessions per replica, operations completed per round"
        )

    save_plot(ctx, "throughput_fig10.png", draw)


def plot_fig11(
    ctx: Context, settings: Settings, columns: list[Column], cells: dict[CellKey, dict[str, Any]]
) -> None:
    if not columns or not any(passed(c) and c["conflict_pct"] == 0.0 for c in cells.values()):
        return
    panels = _panels(settings)

    def draw(plt: Any) -> None:
        fig, axes = plt.subplots(
            2, len(panels), figsize=(4 * len(panels), 7), squeeze=False, sharex=True
        )
        for row, (field, what) in enumerate(
            (("capacity_per_s", "one core per replica"), ("capacity_both_per_s", "core + NIC"))
        ):
            for ax, (n, payload) in zip(axes[row], panels, strict=True):
                for col in columns:
                    pts = [
                        (r, cell[field] / 1000)
                        for r in settings.read_pcts
                        if passed(cell := find_cell(cells, col.title, n, payload, r, 0.0))
                    ]
                    color = COLORS.get(col.title)
                    if pts:
                        ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=col.title)
                    if col.protocol == "sdpaxos":
                        sd = paper.FIG11_SDPAXOS_K.get((n, payload))
                        if sd:
                            ax.plot(
                                paper.FIG11_READ_PCTS,
                                sd,
                                linestyle="--",
                                marker="x",
                                color=color,
                                alpha=0.6,
                                label="SDPaxos (paper)",
                            )
                    elif col.clients_at != "all" or col.protocol != "multipaxos":
                        flat = paper.FIG11_FLAT_K.get(col.protocol, {}).get((n, payload))
                        if flat is not None:
                            ax.axhline(flat, linestyle="--", color=color, alpha=0.5)
                ax.set_title(f"{n} replicas, {payload} B: {what}", fontsize=9)
                ax.set_xlabel("reads (%)")
                ax.set_ylabel("thousand ops/s")
                ax.set_ylim(bottom=0)
                ax.legend(fontsize=7)
        fig.suptitle(
            "Fig. 11: no conflict vs read share (solid: measured capacity; dashed: the paper,"
            " writes-only flat lines for the others)"
        )

    save_plot(ctx, "throughput_fig11.png", draw)
