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

This module is the run: the setup, each column's cell and the formula check.
``results.md`` and the figures are :mod:`bench.experiments.latency_report`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, write_history_file, write_results
from bench.engines import Clients, EngineUnsupported, RunOutput, RunSpec, close_engine
from bench.experiments.latency_report import markdown, plot
from bench.runtime_engine import RuntimeEngine
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
        plot(ctx, profile, result["profiles"][profile.name])
    result["failures"] = failures
    write_results(ctx, result, markdown(ctx, result))
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
