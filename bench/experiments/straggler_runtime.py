"""``python -m bench straggler --engine runtime``: three node processes, one slowed.

The straggler slowed by a SIGSTOP/SIGCONT duty cycle to a third of the wall
clock; part 1 measures closed-loop throughput and CPU, part 2 SDPaxos runs
with the sequencer slowed; see :mod:`bench.experiments.straggler`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, md_table, plots_and_skipped, write_results
from bench.engines import Clients, RunSpec, close_engine
from bench.experiments.straggler_sim import (
    BIN_MS,
    SLOW_FACTOR,
    fig9a_cells,
    new_row,
    plot_detection,
)
from bench.workloads import Workload
from sdpaxos.profiles import uniform


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    #: Part 1: closed-loop clients per region (Multi-Paxos: this many times 3 at
    #: the leader), warm-up and window (wall clock, the node slowed from the start).
    sessions: int
    warmup_ms: float
    duration_ms: float
    #: Part 2: when the sequencer slows, how long a run lasts, open-loop clients
    #: per region, and the offered load as a share of part 1's unslowed SDPaxos
    #: rate (closed-loop runs use part 1's clients). The slowdown comes after a
    #: few healthy windows: straggler detection judges the sequencer against
    #: what it did when healthy.
    slow_at_ms: float
    detect_run_ms: float
    detect_clients_per_region: int
    detect_load_share: float
    #: Part 2's slowdowns: the paper's third, and a harder one.
    detect_factors: tuple[float, ...]


RUNTIME_QUICK = RuntimeSettings(1000, 500.0, 1_500.0, 2_000.0, 7_000.0, 5, 0.5, (3.0, 10.0))
RUNTIME_FULL = RuntimeSettings(1000, 1_000.0, 5_000.0, 3_000.0, 12_000.0, 5, 0.5, (3.0, 10.0))
#: Part 2's loads at runtime.
RUNTIME_DETECT_LOOPS = ("closed", "open")
#: The sequencer / leader, and the other node slowed. The leader has the highest
#: id: the others dial it as they start (a node dials the peers above it), so a
#: Multi-Paxos follower hears from it at once instead of electing itself.
RUNTIME_LEADER = 2
RUNTIME_OTHER = 1
#: Part 2's offered load is kept within these (ops/s).
DETECT_LOAD_MIN_PER_S = 2_000.0
DETECT_LOAD_MAX_PER_S = 30_000.0


def run_runtime(ctx: Context) -> int:
    """``--engine runtime``: real node processes, one of them slowed by a
    SIGSTOP/SIGCONT duty cycle (:class:`bench.runtime_procs.DutyCycle` says why)."""
    engine = ctx.engine()
    try:
        return _runtime(ctx, engine)
    finally:
        close_engine(engine)


def _runtime(ctx: Context, engine: Any) -> int:
    settings = RUNTIME_QUICK if ctx.quick else RUNTIME_FULL
    profile = uniform(3, 0.2, local_rtt_ms=0.1, name="lan3")
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    for proto in ctx.protocols:
        row = new_row(ctx, proto, rows)
        if row is None:
            continue
        per_region = [settings.sessions] * 3
        if proto == "multipaxos":
            per_region = [0, 0, 0]
            per_region[RUNTIME_LEADER] = 3 * settings.sessions
        for case, slow in (("none", None), ("leader", RUNTIME_LEADER), ("other", RUNTIME_OTHER)):
            spec = RunSpec(
                protocol=proto,
                profile=profile,
                workload=Workload(seed=ctx.seed),
                clients=Clients("closed", tuple(per_region)),
                duration_ms=settings.duration_ms,
                warmup_ms=settings.warmup_ms,
                leader=RUNTIME_LEADER,
                slow=None if slow is None else (slow, SLOW_FACTOR, 0.0),
                seed=ctx.seed,
            )
            out = ctx.run(engine, spec, f"{proto}, straggler {case}")
            if not out.ok:
                failures.append(f"{proto} {case}: {out.verdict}")
                row["status"] = "FAILED"
            cpu = out.extra.get("cpu") or {}
            per1000 = cpu.get("node_cpu_s_per_1000") or []
            # The straggler has a third of a core: its CPU counts SLOW_FACTOR times.
            weighted = [c * (SLOW_FACTOR if k == slow else 1.0) for k, c in enumerate(per1000)]
            row[case] = round(cpu.get("ops_per_s", 0.0), 1)
            row[f"{case}_capacity"] = (
                round(1000 / max(weighted), 1) if weighted and max(weighted) > 0 else None
            )
            row[f"{case}_cpu_ms_per_1000"] = [round(c * 1000, 3) for c in per1000]
            row[f"{case}_machine_busy"] = cpu.get("machine_busy")
            row[f"{case}_load_average"] = cpu.get("load_average")
            row[f"{case}_leaders_at_end"] = (out.extra.get("verify") or {}).get("leaders")
            row[f"{case}_slow"] = out.extra.get("slow")
            ctx.progress(
                f"{proto}, straggler {case}: {row[case]:,.0f} ops/s measured, capacity"
                f" {row[f'{case}_capacity'] or 0:,.0f} with one core per node (the straggler a"
                f" third), machine {100 * (cpu.get('machine_busy') or 0):.0f} % busy"
            )
        for case in ("leader", "other"):
            for suffix in ("", "_capacity"):
                base, val = row.get("none" + suffix), row.get(case + suffix)
                row[f"{case}{suffix}_reduction_pct"] = (
                    round((val / base - 1) * 100, 1) if base and val is not None else None
                )
    detections: list[dict[str, Any]] = []
    if "sdpaxos" in ctx.runnable:
        sd = next(r for r in rows if r["protocol"] == "sdpaxos")
        for loop in RUNTIME_DETECT_LOOPS:
            for factor in settings.detect_factors:
                detections.append(
                    _runtime_detection(
                        ctx, settings, engine, profile, sd.get("none"), factor, loop, failures
                    )
                )
    for d in detections:
        plot_detection(ctx, d, f"straggler_detection_{d['loop']}_x{d['factor']:g}.png")
    result = {
        "settings": dataclasses.asdict(settings),
        "slow_factor": SLOW_FACTOR,
        "straggler": "a SIGSTOP/SIGCONT duty cycle leaving the node 1/3 of the wall clock"
        " (bench.runtime_procs.DutyCycle)",
        "fsync": getattr(engine, "fsync", None),
        "rows": rows,
        "detection": detections,
        "failures": failures,
    }
    write_results(ctx, result, _runtime_markdown(ctx, settings, rows, detections, engine))
    for f in failures:
        ctx.progress(f"FLAGGED: {f}")
    return 1 if failures else 0


def _runtime_detection(
    ctx: Context,
    settings: RuntimeSettings,
    engine: Any,
    profile: Any,
    unslowed_per_s: float | None,
    factor: float,
    loop: str,
    failures: list[str],
) -> dict[str, Any]:
    offered: float | None = None
    if loop == "closed":
        clients = Clients("closed", (settings.sessions,) * 3)
    else:
        offered = min(
            DETECT_LOAD_MAX_PER_S,
            max(DETECT_LOAD_MIN_PER_S, settings.detect_load_share * (unslowed_per_s or 0.0)),
        )
        per_client = offered / (3 * settings.detect_clients_per_region)
        clients = Clients("open", (settings.detect_clients_per_region,) * 3, rate_per_s=per_client)
    spec = RunSpec(
        protocol="sdpaxos",
        profile=profile,
        workload=Workload(seed=ctx.seed),
        clients=clients,
        duration_ms=settings.detect_run_ms,
        leader=RUNTIME_LEADER,
        slow=(RUNTIME_LEADER, factor, settings.slow_at_ms),
        sample_ms=float(BIN_MS),
        drain_ms=2_000.0,
        seed=ctx.seed,
    )
    out = ctx.run(engine, spec, f"sdpaxos, {loop} loop, sequencer slowed {factor:g}x, detection")
    if not out.ok:
        failures.append(f"detection run: {out.verdict}")
    slow_us = round(settings.slow_at_ms * 1000)
    every_event = out.extra.get("events", [])
    events = [(t, name, region) for t, name, region in every_event if t >= slow_us]
    suspected_before = sum(
        1 for t, name, _ in every_event if t < slow_us and name == "StragglerSuspect"
    )

    def first(name: str) -> tuple[float, str] | None:
        hit = next(((t, r) for t, n, r in events if n == name), None)
        return None if hit is None else ((hit[0] - slow_us) / 1000, hit[1])

    moved_us = next(
        (
            t
            for t, leader in out.leader_samples
            if t >= slow_us and leader not in (RUNTIME_LEADER, None)
        ),
        None,
    )
    new_leader = None if moved_us is None else dict(out.leader_samples)[moved_us]
    suspect, straggler_vc, established = (
        first("StragglerSuspect"),
        first("StragglerViewChange"),
        first("Establish"),
    )
    won = views_won(every_event, slow_us, profile.regions)
    if straggler_vc is not None and won_back(won, RUNTIME_LEADER, straggler_vc[0]):
        failures.append(
            f"{loop} loop, 1/{factor:g}: the slowed sequencer won a view after the straggler"
            f" view change that deposed it (views won: {won})"
        )
    if moved_us is None:
        how = "not moved"
    elif straggler_vc is not None and straggler_vc[0] * 1000 + slow_us <= moved_us:
        how = "straggler detection (a majority agreed the sequencer was slow)"
    else:
        how = (
            "failure detection (the sequencer looked silent: missed heartbeats or early suspicion)"
        )
    end_us = spec.window_us[1]
    bins = [0] * (end_us // (BIN_MS * 1000))
    for rec in out.records:
        if rec.complete_us is not None and rec.complete_us < len(bins) * BIN_MS * 1000:
            bins[rec.complete_us // (BIN_MS * 1000)] += 1
    cpu = out.extra.get("cpu") or {}
    return {
        "factor": factor,
        "loop": loop,
        "slow_at_ms": settings.slow_at_ms,
        "offered_per_s": None if offered is None else round(offered, 1),
        "closed_clients_per_region": settings.sessions if loop == "closed" else None,
        "suspect_after_ms": None if suspect is None else suspect[0],
        "suspect_at": None if suspect is None else suspect[1],
        "suspicions_before_slowdown": suspected_before,
        "straggler_view_change_after_ms": None if straggler_vc is None else straggler_vc[0],
        "established_after_ms": None if established is None else established[0],
        "views_won": won,
        "detected_after_ms": None if moved_us is None else (moved_us - slow_us) / 1000,
        "new_sequencer": new_leader,
        "moved_by": how,
        "events": [[t / 1000, n, r] for t, n, r in events[:50]],
        "bin_ms": BIN_MS,
        "throughput_per_s": [b * 1000 / BIN_MS for b in bins],
        "leader_samples": [[t / 1000, leader] for t, leader in out.leader_samples],
        "machine_busy": cpu.get("machine_busy"),
        "load_average": cpu.get("load_average"),
        "status": "ok" if out.ok else out.verdict,
    }


def views_won(
    events: list[tuple[int, str, str]], slow_us: int, regions: tuple[str, ...]
) -> list[tuple[float, int]]:
    """``(ms after the slowdown, node)`` of each ``BecomeSequencer`` from the
    slowdown on, from the nodes' events ``(time_us, name, region)``. A view a
    follower established (``Establish``) says nothing of who won it: the slowed
    sequencer winning back the view change that deposed it looked like any
    other view change until this was counted."""
    return [
        ((t - slow_us) / 1000, regions.index(region))
        for t, name, region in events
        if name == "BecomeSequencer" and t >= slow_us
    ]


def won_back(won: list[tuple[float, int]], slowed: int, deposed_ms: float) -> bool:
    """The slowed node won a view at or after the straggler view change that
    deposed it (``deposed_ms``, like ``won``'s times, after the slowdown)."""
    return any(node == slowed and at_ms >= deposed_ms for at_ms, node in won)


def _case_cell(row: dict[str, Any], case: str) -> str:
    """Measured ops/s (change); capacity with one core per node (change)."""
    text = f"{row[case]:,.0f}"
    if case != "none" and row.get(f"{case}_reduction_pct") is not None:
        text += f" ({row[f'{case}_reduction_pct']:+.1f}%)"
    cap = row.get(f"{case}_capacity")
    if cap is not None:
        red = row.get(f"{case}_capacity_reduction_pct")
        text += f"; {cap:,.0f}" + (f" ({red:+.1f}%)" if case != "none" and red is not None else "")
    return text


def _runtime_markdown(
    ctx: Context,
    settings: RuntimeSettings,
    rows: list[dict[str, Any]],
    detections: list[dict[str, Any]],
    engine: Any,
) -> str:
    loads = [
        r[f"{c}_load_average"][0]
        for r in rows
        for c in ("none", "leader", "other")
        if r.get(f"{c}_load_average")
    ]
    lines = [
        "# straggler (runtime): one slow node process (the paper's Fig. 9)",
        "",
        f"Engine `runtime`, seed {ctx.seed}{', quick' if ctx.quick else ''}. Three"
        " `python -m sdpaxos node` processes on loopback (no emulated delay), fsync"
        f" {'on' if getattr(engine, 'fsync', False) else 'off'};"
        f" {settings.sessions} closed-loop clients per region (Multi-Paxos: all at the leader),"
        f" 16 B writes; warm-up {settings.warmup_ms:g} ms, window {settings.duration_ms:g} ms."
        f" The straggler (node {RUNTIME_LEADER}, the sequencer / leader, or node"
        f" {RUNTIME_OTHER}) is slowed from the start"
        f" to 1/{SLOW_FACTOR:g} of the wall clock by a SIGSTOP/SIGCONT duty cycle (run 3 ms,"
        " stop 6 ms): the paper used CPU hogs to leave it about a third of a CPU, but on this"
        " shared 2-core machine a hog cannot be confined to the straggler's core, while a duty"
        " cycle bounds its share exactly whatever the load, and its 6 ms pauses stay well"
        " under the protocols' timers.",
        "",
        f"Machine: {os.cpu_count()} cores shared with other jobs"
        + (
            f"; 1-minute load average {min(loads):.2f} to {max(loads):.2f} over the runs."
            if loads
            else "."
        )
        + " Measured ops/s share the cores with every other process (a stopped straggler"
        " leaves its CPU to the others); the capacity is 1,000 / the busiest node's CPU seconds"
        f" per 1,000 operations, the straggler's counted {SLOW_FACTOR:g} times (one core per"
        " node, the straggler a third of one), as the simulator's round driver does.",
        "",
    ]
    table = []
    for row in rows:
        paper_cells = fig9a_cells(row["protocol"])
        if row["status"] not in ("ok", "FAILED") or "none" not in row:
            table.append([row["column"], row["status"].split(" (")[0], "", "", *paper_cells])
            continue

        table.append(
            [
                row["column"],
                _case_cell(row, "none"),
                _case_cell(row, "leader"),
                _case_cell(row, "other"),
                *paper_cells,
            ]
        )
    lines += [
        "Each cell: measured ops/s (change); capacity ops/s with one core per node (change):",
        "",
        md_table(
            [
                "protocol",
                "no straggler",
                "leader/sequencer slow",
                "other node slow",
                "paper: leader slow",
                "paper: other slow",
            ],
            table,
        ),
        "",
    ]
    for row in rows:
        for case in ("leader", "other"):
            leaders = row.get(f"{case}_leaders_at_end")
            if leaders and any(v not in (RUNTIME_LEADER, None) for v in leaders.values()):
                lines.append(
                    f"- {row['column']}, {case} slow: at the end the nodes followed {leaders}"
                    " (the lead moved during the run)."
                )
    lines.append("")
    if detections:

        def ms(v: float | None) -> str:
            return "not seen" if v is None else f"{v:,.0f} ms"

        def moved(d: dict[str, Any]) -> str:
            text = ms(d["detected_after_ms"])
            return text + (
                f" (node {d['new_sequencer']})" if d["new_sequencer"] is not None else ""
            )

        def won_cell(won: list[tuple[float, int]]) -> str:
            if not won:
                return "none"
            cells = [f"node {node} at {at_ms:,.0f} ms" for at_ms, node in won[:3]]
            return "; ".join(cells) + (f" (+{len(won) - 3} more)" if len(won) > 3 else "")

        d0 = detections[0]
        opened = next((d for d in detections if d["offered_per_s"] is not None), None)
        load = (
            f" or an open load of {opened['offered_per_s']:,.0f} ops/s (half of the unslowed"
            " closed-loop rate above)"
            if opened is not None
            else ""
        )
        loop_names = {"closed": "closed loop", "open": "open load"}
        lines += [
            "## SDPaxos: a slow sequencer detected and replaced (Fig. 9(b))",
            "",
            f"Part 1's closed-loop clients ({settings.sessions} per region){load}; the"
            f" sequencer (node {RUNTIME_LEADER}) slowed at {d0['slow_at_ms']:g} ms to a third"
            " of the wall clock (the paper's) and to a tenth. Times after the slowdown, from"
            " the nodes' trace events (`--trace-events`) and their status sampled every"
            f" {d0['bin_ms']} ms; the 1-minute load average during each run:",
            "",
            md_table(
                [
                    "what",
                    *[f"{loop_names[d['loop']]}, 1/{d['factor']:g}" for d in detections],
                ],
                [
                    [
                        "first StragglerSuspect (a command leader polls the others)",
                        *[ms(d["suspect_after_ms"]) for d in detections],
                    ],
                    [
                        "first StragglerViewChange (a majority agreed)",
                        *[ms(d["straggler_view_change_after_ms"]) for d in detections],
                    ],
                    [
                        "first Establish (a new view)",
                        *[ms(d["established_after_ms"]) for d in detections],
                    ],
                    [
                        "views won (node, after the slowdown)",
                        *[won_cell(d.get("views_won", [])) for d in detections],
                    ],
                    [
                        "a majority follows another sequencer",
                        *[moved(d) for d in detections],
                    ],
                    ["moved by", *[d["moved_by"] for d in detections]],
                    [
                        "StragglerSuspect before the slowdown",
                        *[str(d["suspicions_before_slowdown"]) for d in detections],
                    ],
                    [
                        "load average",
                        *[
                            f"{d['load_average'][0]:.1f}" if d.get("load_average") else "-"
                            for d in detections
                        ],
                    ],
                ],
                "l" + "r" * len(detections),
            ),
            "",
            f"The paper: detected within {paper.STRAGGLER_DETECTION_S:g} s.",
            "",
        ]
    return "\n".join(lines + plots_and_skipped(ctx))
