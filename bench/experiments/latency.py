"""``latency``: the paper's Figures 12 and 13, per-region commit and read latency.

Setup (the paper's section 5.4), unless ``--profile`` and ``--sequencer`` name
a deployment of your own: the ``paper3`` (CA, OR, OH) and ``paper5``
(CA, OR, OH, IRE, SEL) profiles of Table 1, the SDPaxos sequencer and the
Multi-Paxos leader in CA, open-loop clients co-located with every replica, each
issuing Poisson arrivals at a fixed rate. Operations invoked during the
warm-up are not counted. Latency is measured at the replica, from ``propose``
to READY (commit) or from ``read`` to its answer; the client hop (the
profile's diagonal) is left out, as in the paper's formula.

Columns, as in Fig. 12: SDPaxos, Multi-Paxos, Mencius (balanced) and
Mencius-imbalanced (one region, OH for 3 replicas and IRE for 5, with half the
clients of the others), EPaxos at 0, 5 and 50 % conflict. SDPaxos is checked
against the formula of docs/protocol.md section 5.6 and flagged when any region is
off by more than 5 %. Reads (Fig. 13): R/W 1:1 with uniform keys (quick), plus
9:1 and 1:1 with zipfian keys (full), for every protocol; a protocol without a
read path sends its reads through the log.

With ``--engine runtime`` (:mod:`bench.runtime_engine`): one node process per
region behind the delay emulator, one load generator per region, a lighter load
(:data:`RUNTIME_QUICK`), latency measured at the client (loopback hop and TLS
included) and, for the formula, each node's own commit-latency histogram.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, md_table, save_plot, write_history_file, write_results
from bench.engines import Clients, EngineUnsupported, RunOutput, RunSpec, close_engine
from bench.runtime_engine import RuntimeEngine, describe_latency
from bench.workloads import Workload, summarize
from sdpaxos.profiles import PAPER3, PAPER5, DelayProfile

#: The region with half the clients in the imbalanced Mencius runs (the paper's
#: choice; any other profile: its last region that is not the sequencer's).
IMBALANCED_REGION = {"paper3": "OH", "paper5": "IRE"}
#: The profiles run unless ``--profile`` names others.
PROFILES: tuple[DelayProfile, ...] = (PAPER3, PAPER5)
#: Where the sequencer and the Multi-Paxos leader go unless ``--sequencer`` says:
#: the paper's region when the profile has it, else the profile's first.
SEQUENCER_REGION_DEFAULT = "CA"


def profiles(ctx: Context) -> tuple[DelayProfile, ...]:
    """The profiles this run measures: ``--profile``'s, else the paper's two."""
    return ctx.profiles or PROFILES


def leader_of(ctx: Context, profile: DelayProfile) -> int:
    """The replica that is the sequencer (and the Multi-Paxos leader) on ``profile``."""
    if ctx.sequencer is not None:
        return profile.index(ctx.sequencer)
    return default_leader(profile)


def default_leader(profile: DelayProfile) -> int:
    if SEQUENCER_REGION_DEFAULT in profile.regions:
        return profile.index(SEQUENCER_REGION_DEFAULT)
    return 0


def is_papers(profile: DelayProfile) -> bool:
    """``profile`` is one of the paper's, not another matrix under its name."""
    return profile in (PAPER3, PAPER5)


def imbalanced_region(profile: DelayProfile, leader: int) -> int:
    if is_papers(profile):
        return profile.index(IMBALANCED_REGION[profile.name])
    return max(r for r in range(profile.size) if r != leader) if profile.size > 1 else 0


def paper_figures(profile: DelayProfile, leader: int) -> bool:
    """The paper's Figs. 12 and 13 apply: its profile, its sequencer (CA)."""
    return is_papers(profile) and profile.regions[leader] == SEQUENCER_REGION_DEFAULT


@dataclass(frozen=True, slots=True)
class Variant:
    """One column of Fig. 12: a protocol under one workload and client placement."""

    column: str
    protocol: str
    conflict_pct: float = 0.0
    imbalanced: bool = False


WRITE_VARIANTS: tuple[Variant, ...] = (
    Variant("SDPaxos", "sdpaxos"),
    Variant("Multi-Paxos", "multipaxos"),
    Variant("Mencius", "mencius"),
    Variant("Mencius-imbalanced", "mencius", imbalanced=True),
    Variant("EPaxos-0%", "epaxos", 0.0),
    Variant("EPaxos-5%", "epaxos", 5.0),
    Variant("EPaxos-50%", "epaxos", 50.0),
)

#: Fig. 13's workloads: (label, read %, key distribution).
READ_WORKLOADS_QUICK: tuple[tuple[str, float, str], ...] = (("1:1 uniform", 50.0, "uniform"),)
READ_WORKLOADS_FULL: tuple[tuple[str, float, str], ...] = (
    ("1:1 uniform", 50.0, "uniform"),
    ("9:1 zipf", 90.0, "zipf"),
    ("1:1 zipf", 50.0, "zipf"),
)
TITLES = {
    "sdpaxos": "SDPaxos",
    "multipaxos": "Multi-Paxos",
    "mencius": "Mencius",
    "epaxos": "EPaxos",
}


@dataclass(frozen=True, slots=True)
class Settings:
    clients_per_region: int
    rate_per_s: float
    warmup_ms: float
    duration_ms: float


QUICK = Settings(clients_per_region=2, rate_per_s=50.0, warmup_ms=500.0, duration_ms=2_000.0)
FULL = Settings(clients_per_region=4, rate_per_s=50.0, warmup_ms=2_000.0, duration_ms=10_000.0)
#: The runtime engine's: a lighter load (20 operations per second per region).
#: The formula is a light-load figure, and on a 2-core machine five node
#: processes and five load generators compete for the CPU: more load there is
#: queueing for a core, not the protocol.
RUNTIME_QUICK = Settings(
    clients_per_region=2, rate_per_s=10.0, warmup_ms=500.0, duration_ms=2_500.0
)
RUNTIME_FULL = Settings(
    clients_per_region=2, rate_per_s=10.0, warmup_ms=2_000.0, duration_ms=15_000.0
)


def _spec(
    ctx: Context,
    settings: Settings,
    profile: DelayProfile,
    proto: str,
    workload: Workload,
    imbalanced: bool,
) -> RunSpec:
    per_region = [settings.clients_per_region] * profile.size
    leader = leader_of(ctx, profile)
    if imbalanced:
        per_region[imbalanced_region(profile, leader)] = max(1, settings.clients_per_region // 2)
    return RunSpec(
        protocol=proto,
        profile=profile,
        workload=workload,
        clients=Clients("open", tuple(per_region), rate_per_s=settings.rate_per_s),
        duration_ms=settings.duration_ms,
        warmup_ms=settings.warmup_ms,
        leader=leader,
        seed=ctx.seed,
    )


def _measured(ctx: Context, out: RunOutput) -> list[Any]:
    """The operations invoked in the measured window."""
    start, end = out.spec.window_us
    return [r for r in out.records if start <= r.invoke_us < end]


def run(ctx: Context) -> int:
    engine = ctx.engine()
    if isinstance(engine, RuntimeEngine):
        # Each node's own commit-latency histogram: the replica's view, the
        # formula's, beside the client's.
        engine.metrics = True
    try:
        return _run(ctx, engine)
    finally:
        close_engine(engine)


def _run(ctx: Context, engine: Any) -> int:
    if isinstance(engine, RuntimeEngine):
        settings = RUNTIME_QUICK if ctx.quick else RUNTIME_FULL
    else:
        settings = QUICK if ctx.quick else FULL
    read_workloads = READ_WORKLOADS_QUICK if ctx.quick else READ_WORKLOADS_FULL
    outputs: list[RunOutput] = []
    result: dict[str, Any] = {"settings": dataclasses.asdict(settings), "profiles": {}}
    if isinstance(engine, RuntimeEngine):
        result["fsync"] = engine.fsync
        result["latency_measured_at"] = "client (loopback hop, TLS, client included)"
    failures: list[str] = []
    for profile in profiles(ctx):
        regions = list(profile.regions)
        leader = leader_of(ctx, profile)
        commit: dict[str, dict[str, Any]] = {}
        reads: dict[str, dict[str, Any]] = {}
        for v in WRITE_VARIANTS:
            if v.protocol not in ctx.protocols:
                continue
            workload = Workload(conflict_pct=v.conflict_pct, seed=ctx.seed)
            commit[v.column] = _one(
                ctx,
                engine,
                _spec(ctx, settings, profile, v.protocol, workload, v.imbalanced),
                f"{profile.name} {v.column}",
                "write",
                regions,
                outputs,
                failures,
            )
        for label, read_pct, keys in read_workloads:
            for proto in ctx.protocols:
                workload = Workload(read_pct=read_pct, keys=keys, seed=ctx.seed)  # type: ignore[arg-type]
                column = f"{TITLES.get(proto, proto)} {label}"
                reads[column] = _one(
                    ctx,
                    engine,
                    _spec(ctx, settings, profile, proto, workload, False),
                    f"{profile.name} reads {column}",
                    "read",
                    regions,
                    outputs,
                    failures,
                )
        check = _formula_check(profile, commit.get("SDPaxos"), leader)
        if check["flagged"]:
            failures.append(f"{profile.name}: SDPaxos off the formula by more than 5 %")
        result["profiles"][profile.name] = {
            "regions": regions,
            "sequencer": profile.regions[leader],
            "paper_figures": paper_figures(profile, leader),
            "commit": commit,
            "reads": reads,
            "formula_check": check,
        }
    if outputs:
        history = write_history_file(ctx, outputs)
        ctx.progress(f"wrote {history}")
    for profile in profiles(ctx):
        _plot(ctx, profile, result["profiles"][profile.name])
    result["failures"] = failures
    write_results(ctx, result, _markdown(ctx, settings, result))
    for f in failures:
        ctx.progress(f"FLAGGED: {f}")
    return 1 if failures else 0


def _one(
    ctx: Context,
    engine: Any,
    spec: RunSpec,
    label: str,
    kind: str,
    regions: list[str],
    outputs: list[RunOutput],
    failures: list[str],
) -> dict[str, Any]:
    """Run one column; its per-region summaries, or why it did not run."""
    why = ctx.status(spec.protocol)
    if why:
        return {"status": why}
    check = getattr(engine, "check", None)  # only engines with limits have one
    if check is not None:
        try:
            check(spec)
        except EngineUnsupported as exc:
            return {"status": f"not run: {exc}"}
    out = ctx.run(engine, spec, label)
    outputs.append(out)
    if not out.ok:
        failures.append(f"{label}: {out.verdict}")
    measured = _measured(ctx, out)
    stats = summarize(measured, regions, kind)  # type: ignore[arg-type]
    unfinished = sum(1 for r in measured if r.complete_us is None)
    paths: dict[str, int] = {}
    for r in measured:
        if r.kind == kind:
            paths[r.path] = paths.get(r.path, 0) + 1
    cell = {
        "status": "ok" if out.ok else out.verdict,
        "workload": spec.workload.to_json(),
        "clients_per_region": list(spec.clients.per_region),
        "regions": {r: s.to_json() for r, s in stats.items()},
        "unfinished": unfinished,
        "paths": paths,
        "virtual_ms": out.virtual_ms,
        "wall_s": round(out.wall_s, 2),
    }
    if out.extra:  # the runtime: node-side commit latency, CPU, machine load, verification
        cpu = out.extra.get("cpu") or {}
        cell["node_commit_ms"] = out.extra.get("node_commit_ms")
        cell["machine_busy"] = cpu.get("machine_busy")
        cell["load_average"] = cpu.get("load_average")
        cell["node_cpu_s_per_1000"] = cpu.get("node_cpu_s_per_1000")
        cell["loader_cpu_s_per_1000"] = cpu.get("loader_cpu_s_per_1000")
        verify = out.extra.get("verify") or {}
        cell["verify"] = verify.get("verdict")
        # Who the nodes followed at the end: a leader protocol's lead may have
        # moved during the run (a busy machine delays heartbeats).
        leaders = {str(k): v for k, v in (verify.get("leaders") or {}).items()}
        cell["leaders_at_end"] = leaders
        if spec.protocol in ("sdpaxos", "multipaxos") and any(
            v != spec.leader for v in leaders.values()
        ):
            regions_of = spec.profile.regions
            cell["lead_moved"] = sorted(
                {regions_of[v] if isinstance(v, int) else str(v) for v in leaders.values()}
            )
    return cell


def _formula_check(
    profile: DelayProfile, sd: dict[str, Any] | None, leader: int | None = None
) -> dict[str, Any]:
    """SDPaxos's mean commit latency per region against the formula, flagged beyond 5 %.

    The runtime engine's cells carry the nodes' own mean (``node_commit_ms``,
    from proposal to READY at the replica: what the formula and the simulator
    measure) beside the client's; the check is on the node's, and the client's
    offset is shown beside it (it adds the loopback hop and TLS). With no
    formula (more than five replicas) nothing is judged.
    """
    sequencer = default_leader(profile) if leader is None else leader
    want_by_region = paper.formula_ms(profile, sequencer)
    if want_by_region is None:
        return {"rows": {}, "flagged": False, "measured": False, "judged_on": None}
    rows = {}
    flagged = False
    measured = sd is not None and "regions" in sd
    node_side = (sd or {}).get("node_commit_ms") or None
    for region, want in want_by_region.items():
        mean = client = None
        if sd is not None and "regions" in sd:
            mean = client = sd["regions"][region]["mean_ms"]
        if node_side is not None:
            mean = node_side.get(region)
        off = None if mean is None else mean / want - 1
        bad = off is None or abs(off) > paper.FORMULA_TOLERANCE
        if measured:
            flagged = flagged or bad
        rows[region] = {
            "formula_ms": want,
            "mean_ms": mean,
            "off": None if off is None else round(off, 4),
            "within_5pct": not bad,
        }
        if node_side is not None:
            rows[region]["client_mean_ms"] = client
            rows[region]["client_off"] = None if client is None else round(client / want - 1, 4)
    return {
        "rows": rows,
        "flagged": flagged,
        "measured": measured,
        "judged_on": "node" if node_side is not None else "engine",
    }


def _fmt_cell(cell: dict[str, Any], region: str) -> str:
    if "regions" not in cell:
        return str(cell.get("status", "-")).split(" (")[0]
    s = cell["regions"][region]
    if s["mean_ms"] is None:
        return "no ops"
    return f"{s['mean_ms']:.1f} / {s['p50_ms']:.1f} / {s['p99_ms']:.1f}"


def _markdown(ctx: Context, settings: Settings, result: dict[str, Any]) -> str:
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
        f" Open-loop Poisson clients: {settings.clients_per_region} per region at"
        f" {settings.rate_per_s:g} ops/s each (imbalanced: half in one region);"
        f" warm-up {settings.warmup_ms:g} ms excluded, {settings.duration_ms:g} ms measured"
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


def _plot(ctx: Context, profile: DelayProfile, prof: dict[str, Any]) -> None:
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
