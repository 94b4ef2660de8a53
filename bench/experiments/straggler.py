"""``straggler``: one slow replica (Fig. 9): throughput, and SDPaxos moving its sequencer.

Why the simulator's CPU model and not CPU time: a straggler is a replica whose
CPU is slower than its peers', and the simulator models exactly that
(:meth:`sdpaxos.sim.cluster.SimCluster.slow`): every replica spends
``processing_us`` of virtual CPU per message it handles, the straggler
``factor`` times as much (the paper throttled it to about a third of a CPU:
factor 3), and work queues behind a busy CPU. Throughput is then operations
completed per second of virtual time.

Part 1, Fig. 9(a): 3 replicas on a LAN, closed-loop clients at every replica,
16 B writes; per protocol, throughput with no straggler, with the sequencer /
leader slowed ("leader"; SDPaxos-S in the paper) and with another replica
slowed ("other"; SDPaxos-N), and the reduction from no straggler.

Part 2, Fig. 9(b): SDPaxos, the sequencer slowed at ``slow_at_ms`` under
open-loop load above what the slowed sequencer can order (a closed loop slows
down with the sequencer, so the command leaders never see it fall behind and
never suspect it). Throughput in 100 ms bins, the believed sequencer sampled
every 100 ms, and the detection time: from the slowdown to the first sample
showing another sequencer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, md_table, save_plot, write_results
from bench.engines import Clients, RunSpec
from bench.rounds import RoundSpec, run_rounds
from bench.workloads import Workload
from sdpaxos.profiles import uniform

TITLES = {
    "sdpaxos": "SDPaxos",
    "multipaxos": "Multi-Paxos",
    "mencius": "Mencius",
    "epaxos": "EPaxos",
}
#: Virtual CPU per message, and the straggler's slowdown (the paper: about 1/3 CPU).
PROCESSING_US = 100
SLOW_FACTOR = 3.0
BIN_MS = 100
#: Part 1: the straggler takes one round in this many, and its CPU counts this many times.
ROUNDS_EVERY = 3


@dataclass(frozen=True, slots=True)
class Settings:
    clients_per_region: int
    warmup_ms: float
    duration_ms: float
    #: Part 2: when the sequencer slows, how long the run lasts, the open load.
    slow_at_ms: float
    detect_run_ms: float
    detect_clients_per_region: int
    detect_rate_per_s: float
    #: Part 1 (the round driver): sessions per replica, warm-up and measured operations.
    sessions: int
    warmup: int
    commands: int


QUICK = Settings(20, 300.0, 1_500.0, 1_000.0, 6_000.0, 5, 100.0, 1000, 5_000, 20_000)
FULL = Settings(20, 1_000.0, 5_000.0, 2_000.0, 10_000.0, 5, 100.0, 2000, 20_000, 100_000)


def run(ctx: Context) -> int:
    settings = QUICK if ctx.quick else FULL
    engine = ctx.engine()
    profile = uniform(3, 0.2, local_rtt_ms=0.1, name="lan3")
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    for proto in ctx.protocols:
        row: dict[str, Any] = {"protocol": proto, "column": TITLES.get(proto, proto)}
        rows.append(row)
        why = ctx.status(proto)
        if why:
            row["status"] = why
            continue
        row["status"] = "ok"
        for case, slow in (
            ("none", None),
            ("leader", (0, ROUNDS_EVERY)),
            ("other", (1, ROUNDS_EVERY)),
        ):
            spec = RoundSpec(
                proto,
                replicas=3,
                sessions=settings.sessions,
                commands=settings.commands,
                warmup=settings.warmup,
                clients_at="leader" if proto == "multipaxos" else "all",
                slow=slow,
                seed=ctx.seed,
            )
            res = run_rounds(spec, progress=ctx.progress)
            if not res.ok:
                failures.append(f"{proto} {case}: {'; '.join(res.problems[:3])}")
                row["status"] = "FAILED"
            row[case] = round(res.capacity_per_s, 1)
            row[f"{case}_ops_per_round"] = round(res.ops_per_round, 1)
            row[f"{case}_busiest"] = res.busiest
            row[f"{case}_leaders_at_end"] = res.leaders
            ctx.progress(
                f"{proto}, straggler {case}: capacity {res.capacity_per_s:,.0f} ops/s"
                f" (busiest r{res.busiest}), {res.ops_per_round:.0f} ops per round"
            )
        for case in ("leader", "other"):
            row[f"{case}_reduction_pct"] = (
                round((row[case] / row["none"] - 1) * 100, 1) if row["none"] else None
            )
    detection = None
    if "sdpaxos" in ctx.runnable:
        detection = _detection(ctx, settings, engine, profile, failures)
    _plot(ctx, detection)
    result = {
        "settings": dataclasses.asdict(settings),
        "processing_us": PROCESSING_US,
        "slow_factor": SLOW_FACTOR,
        "part1_driver": "bench.rounds: the straggler takes one round in"
        f" {ROUNDS_EVERY} and its CPU counts {ROUNDS_EVERY}x in the capacity",
        "rows": rows,
        "detection": detection,
        "failures": failures,
    }
    write_results(ctx, result, _markdown(ctx, settings, rows, detection))
    return 1 if failures else 0


def _detection(
    ctx: Context, settings: Settings, engine: Any, profile: Any, failures: list[str]
) -> dict[str, Any]:
    spec = RunSpec(
        protocol="sdpaxos",
        profile=profile,
        workload=Workload(seed=ctx.seed),
        clients=Clients(
            "open", (settings.detect_clients_per_region,) * 3, rate_per_s=settings.detect_rate_per_s
        ),
        duration_ms=settings.detect_run_ms,
        processing_us=PROCESSING_US,
        slow=(0, SLOW_FACTOR, settings.slow_at_ms),
        sample_ms=float(BIN_MS),
        drain_ms=0.0,
        seed=ctx.seed,
    )
    out = ctx.run(engine, spec, "sdpaxos, sequencer slowed, detection")
    if not out.ok:
        failures.append(f"detection run: {out.verdict}")
    slow_us = round(settings.slow_at_ms * 1000)
    moved_us = next(
        (t for t, leader in out.leader_samples if t >= slow_us and leader not in (0, None)), None
    )
    new_leader = None if moved_us is None else dict(out.leader_samples)[moved_us]
    end_us = spec.window_us[1]
    bins = [0] * (end_us // (BIN_MS * 1000))
    for rec in out.records:
        if rec.complete_us is not None and rec.complete_us < len(bins) * BIN_MS * 1000:
            bins[rec.complete_us // (BIN_MS * 1000)] += 1
    offered = settings.detect_clients_per_region * 3 * settings.detect_rate_per_s
    return {
        "slow_at_ms": settings.slow_at_ms,
        "offered_per_s": offered,
        "detected_after_ms": None if moved_us is None else (moved_us - slow_us) / 1000,
        "new_sequencer": new_leader,
        "bin_ms": BIN_MS,
        "throughput_per_s": [b * 1000 / BIN_MS for b in bins],
        "leader_samples": [[t / 1000, leader] for t, leader in out.leader_samples],
    }


def _markdown(
    ctx: Context, settings: Settings, rows: list[dict[str, Any]], detection: dict[str, Any] | None
) -> str:
    lines = [
        "# straggler: one slow replica (the paper's Fig. 9)",
        "",
        f"Seed {ctx.seed}{', quick' if ctx.quick else ''}. Part 1: the round-based driver"
        f" (`bench/rounds.py`), 3 replicas, {settings.sessions} closed-loop sessions per replica"
        " (Multi-Paxos: at the leader), 16 B writes,"
        f" {settings.warmup:,} operations of warm-up, {settings.commands:,} measured. The"
        f" straggler takes its turn one round in {ROUNDS_EVERY} (its backlog waits) and its CPU"
        f" counts {ROUNDS_EVERY}x: capacity = 1000 / max over replicas of (CPU s per 1,000 x"
        " slowdown), ops/s with one core per replica (the straggler a third of one). The"
        " paper's Fig. 9(a) (16 B writes, thousand req/s) beside.",
        "",
    ]
    table = []
    for row in rows:
        fig = paper.FIG9A_16B.get(row["protocol"], {})
        paper_cells = [
            f"{fig[c][0]:g}K ({fig[c][1]:+.1f}%)" if c in fig else "-" for c in ("leader", "other")
        ]
        if row["status"] != "ok":
            table.append([row["column"], row["status"].split(" (")[0], "", "", *paper_cells])
            continue
        table.append(
            [
                row["column"],
                f"{row['none']:,.0f}",
                f"{row['leader']:,.0f} ({row['leader_reduction_pct']:+.1f}%)",
                f"{row['other']:,.0f} ({row['other_reduction_pct']:+.1f}%)",
                *paper_cells,
            ]
        )
    lines += [
        md_table(
            [
                "protocol",
                "no straggler",
                "leader/sequencer slow",
                "other replica slow",
                "paper: leader slow",
                "paper: other slow",
            ],
            table,
        ),
        "",
    ]
    if detection is not None:
        d = detection
        after = d["detected_after_ms"]
        lines += [
            "## SDPaxos: detecting a slow sequencer (Fig. 9(b))",
            "",
            f"Open-loop load of {d['offered_per_s']:g} ops/s; the sequencer (replica 0) slowed at"
            f" {d['slow_at_ms']:g} ms. "
            + (
                f"Another sequencer (replica {d['new_sequencer']}) was in place {after:g} ms later"
                f" (sampled every {d['bin_ms']} ms). The paper: detected within"
                f" {paper.STRAGGLER_DETECTION_S:g} s."
                if after is not None
                else "The sequencer was **not** moved before the run ended."
            ),
            "",
        ]
    for plot in ctx.plots:
        lines += [f"![{plot}]({plot})", ""]
    if ctx.skipped:
        lines += ["## Not run", ""] + [f"- {p}: {why}" for p, why in ctx.skipped.items()] + [""]
    return "\n".join(lines)


def _plot(ctx: Context, detection: dict[str, Any] | None) -> None:
    if detection is None:
        return

    def draw(plt: Any) -> None:
        _fig, ax = plt.subplots(figsize=(8, 3.6))
        ys = detection["throughput_per_s"]
        xs = [(i + 0.5) * detection["bin_ms"] / 1000 for i in range(len(ys))]
        ax.step(xs, ys, where="mid", label="completed ops/s (100 ms bins)")
        ax.axvline(
            detection["slow_at_ms"] / 1000, color="red", linestyle="--", label="sequencer slowed"
        )
        if detection["detected_after_ms"] is not None:
            at = (detection["slow_at_ms"] + detection["detected_after_ms"]) / 1000
            ax.axvline(
                at,
                color="green",
                linestyle="--",
                label=f"sequencer moved to {detection['new_sequencer']}",
            )
        ax.set_xlabel("time (s, virtual)")
        ax.set_ylabel("ops/s")
        ax.set_title("SDPaxos: a slow sequencer detected and replaced (cf. Fig. 9(b))")
        ax.legend(fontsize=8)

    save_plot(ctx, "straggler_detection.png", draw)
