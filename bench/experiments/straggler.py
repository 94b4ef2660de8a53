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

Part 2, Fig. 9(b): SDPaxos straggler detection in the simulator
(:func:`bench.experiments.straggler_sim.sim_detection`, a
:class:`~sdpaxos.sim.cluster.SimCluster` with a tracer, so that the core's own
trace events time it), four runs: the
sequencer slowed at ``slow_at_ms`` under closed-loop clients (the paper's
setting) and under an open load above what the slowed sequencer orders;
another replica slowed (a non-sequencer straggler must move nothing); nothing
slowed, a long saturated closed loop (no suspicion allowed). Per run: the
first ``StragglerSuspect`` (a command leader polls the others), the first
``StragglerViewChange`` (a majority agreed), the first ``BecomeSequencer``,
and when a majority of replicas, sampled every 100 ms, follow another
sequencer; throughput in 100 ms bins.

With ``--engine runtime`` (:mod:`bench.experiments.straggler_runtime`): three node processes on
loopback, the straggler slowed by a SIGSTOP/SIGCONT duty cycle to a third of
the wall clock; part 1 measures closed-loop throughput and CPU, part 2 SDPaxos
runs with the sequencer slowed (to a third and to a tenth), under part 1's
closed-loop clients and under an open load, timed by the nodes' trace events
(``StragglerSuspect``, ``StragglerViewChange``, ``Establish``,
``BecomeSequencer``) and their sampled status; a run where the slowed sequencer
wins a view after the straggler view change that deposed it is flagged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench import paper
from bench.common import Context, md_table, plots_and_skipped, write_results
from bench.experiments.straggler_runtime import run_runtime, views_won, won_back
from bench.experiments.straggler_sim import (
    BIN_MS,
    DETECTION_CASES,
    FULL,
    PROCESSING_US,
    QUICK,
    SLOW_FACTOR,
    Settings,
    fig9a_cells,
    ms_cell,
    new_row,
    plot_detection,
    sim_detection,
)
from bench.rounds import ProtocolWorkers, RoundSpec

__all__ = ["FULL", "QUICK", "ROUNDS_EVERY", "Settings", "run", "views_won", "won_back"]

#: Part 1: the straggler takes one round in this many, and its CPU counts this many times.
ROUNDS_EVERY = 3


def run(ctx: Context) -> int:
    if ctx.engine_name == "runtime":
        return run_runtime(ctx)
    settings = QUICK if ctx.quick else FULL
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    with ProtocolWorkers() as workers:
        for proto in ctx.protocols:
            row = new_row(ctx, proto, rows)
            if row is None:
                continue
            base = RoundSpec(
                proto,
                replicas=3,
                sessions=settings.sessions,
                commands=settings.commands,
                warmup=settings.warmup,
                clients_at="leader" if proto == "multipaxos" else "all",
                seed=ctx.seed,
            )
            # An untimed run first: the worker's heap grows to a run's size
            # there, not in the "none" case the reductions are taken from.
            ctx.progress(f"{proto}: an untimed warm-up run")
            row["pid"] = workers.warm_up(base).pid  # the protocol's worker
            for case, slow in (
                ("none", None),
                ("leader", (0, ROUNDS_EVERY)),
                ("other", (1, ROUNDS_EVERY)),
            ):
                res = workers.run(dataclasses.replace(base, slow=slow), progress=ctx.progress)
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
    detections: list[dict[str, Any]] = []
    if "sdpaxos" in ctx.runnable:
        for name, loop, slowed in DETECTION_CASES:
            detections.append(sim_detection(ctx, settings, name, loop, slowed, failures))
    # Part 2 runs only with SDPaxos among the protocols (else no detections).
    stems = ("closed", "open", "other", "healthy") if detections else ()
    for d, stem in zip(detections, stems, strict=True):
        if d["slowed"] == 0:
            plot_detection(ctx, d, f"straggler_detection_{stem}.png")
    result = {
        "settings": dataclasses.asdict(settings),
        "processing_us": PROCESSING_US,
        "slow_factor": SLOW_FACTOR,
        "part1_driver": "bench.rounds: the straggler takes one round in"
        f" {ROUNDS_EVERY} and its CPU counts {ROUNDS_EVERY}x in the capacity",
        "rows": rows,
        "detection": detections,
        "failures": failures,
    }
    write_results(ctx, result, _markdown(ctx, settings, rows, detections))
    for f in failures:
        ctx.progress(f"FLAGGED: {f}")
    return 1 if failures else 0


def _markdown(
    ctx: Context, settings: Settings, rows: list[dict[str, Any]], detections: list[dict[str, Any]]
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
        paper_cells = fig9a_cells(row["protocol"])
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
    if detections:
        lines += [
            "## SDPaxos: detecting a slow sequencer (Fig. 9(b))",
            "",
            f"The simulator, 3 replicas on a LAN, {PROCESSING_US} us of CPU per message, the"
            f" straggler's CPU {SLOW_FACTOR:g}x slower from {settings.slow_at_ms:g} ms;"
            f" closed loop: {settings.detect_closed_clients_per_region} clients per replica;"
            f" open load: {settings.detect_clients_per_region * 3 * settings.detect_rate_per_s:g}"
            " ops/s (Poisson). Times in ms after the slowdown (virtual), from the replicas'"
            f" trace events and the sequencer a majority follows, sampled every {BIN_MS} ms:",
            "",
            md_table(
                [
                    "run",
                    "first StragglerSuspect",
                    "first StragglerViewChange",
                    "new sequencer followed",
                    "suspicions",
                ],
                [
                    [
                        f"{d['case']} ({d['run_ms'] / 1000:g} s)",
                        ms_cell(d["suspect_after_ms"], d["suspect_at"]),
                        ms_cell(d["straggler_view_change_after_ms"]),
                        ms_cell(d["detected_after_ms"], d["new_sequencer"]),
                        d["suspicions"],
                    ]
                    for d in detections
                ],
            ),
            "",
            f"The paper: detected within {paper.STRAGGLER_DETECTION_S:g} s (closed loop).",
            "",
        ]
    return "\n".join(lines + plots_and_skipped(ctx))
