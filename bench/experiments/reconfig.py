"""``reconfig``: throughput and latency per region while the membership changes (issue 31).

Three changes under closed-loop load, in one run: a replica is added (3 -> 4
members), the sequencer's node is replaced by a fresh one, a member is
removed (4 -> 3). Per region: completed commands and their mean latency over
time (a figure like the paper's Fig. 14, the changes shaded), and each
change's *stall*: the longest time without a completed command in that region
from the change's proposal to :data:`bench.reconfig.AFTER_MS` after its epoch
ran at every member, against its *baseline*, the same measure in the
:data:`~bench.reconfig.AFTER_MS` before the proposal
(:func:`bench.reconfig.stall_and_baseline`, one function for both engines).

The issue's goal, read as the simulator half reads it: a change's stall
exceeds its baseline by at most one election plus one commit round trip when
the sequencer's node is replaced, and by at most one commit round trip when
another member is added or removed. Each change is printed as met or NOT met.

``--engine sim`` runs :func:`bench.reconfig.run` (a uniform cluster, 60 ms
round trips, clients at every member). ``--engine runtime`` runs the same
timeline on real node processes
(:mod:`bench.experiments.reconfig_runtime` says what differs there).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from bench import reconfig as sim_reconfig
from bench.common import Context, md_table, plots_and_skipped, save_plot, write_results
from bench.experiments.reconfig_timeline import (
    CHANGE_NAMES,
    SEQUENCER_CHANGE,
    ChangeTimes,
    Timeline,
)

__all__ = [
    "BIN_MS",
    "CHANGE_NAMES",
    "ChangeTimes",
    "Stall",
    "Timeline",
    "bound_ms",
    "markdown",
    "measure",
    "per_bin",
    "run",
    "run_sim",
]

#: Width of one bin of the throughput and latency plot, ms.
BIN_MS = 250.0


@dataclass
class Stall:
    """One change measured: its stall and baseline per region, its bound, the verdict."""

    name: str
    took_ms: float | None
    stall_ms: dict[str, float]
    baseline_ms: dict[str, float]
    bound_ms: float
    error: str = ""
    #: From the proposal to the change shown pending (:attr:`ChangeTimes.pending_ms`).
    pending_after_ms: float | None = None

    @property
    def worst_extra_ms(self) -> float | None:
        if not self.stall_ms:
            return None
        return max(self.stall_ms[r] - self.baseline_ms[r] for r in self.stall_ms)

    @property
    def met(self) -> bool:
        extra = self.worst_extra_ms
        return not self.error and extra is not None and extra <= self.bound_ms


def bound_ms(name: str, rtt_ms: float, election_ms: float) -> float:
    """The issue's bound on a change's extra stall: one commit round trip, plus
    one election for the sequencer's node."""
    return rtt_ms + (election_ms if name == SEQUENCER_CHANGE else 0.0)


def measure(timeline: Timeline) -> list[Stall]:
    """Each change's stall and baseline per region (a change that did not finish
    has none, and is not met). The stall window is cut at the load's end, and a
    change whose window was cut is not met either (its stall is not known whole)."""
    out: list[Stall] = []
    for c in timeline.changes:
        bound = bound_ms(c.name, timeline.rtt_ms, timeline.election_ms)
        if c.done_ms is None:
            out.append(Stall(c.name, None, {}, {}, bound, c.error or "did not finish"))
            continue
        error = c.error
        cut_ms = c.done_ms + sim_reconfig.AFTER_MS - timeline.end_ms
        if cut_ms > 0 and not error:  # a stall could hide past the load's end
            error = f"the load ended {cut_ms:.0f} ms before its window did"
        stalls: dict[str, float] = {}
        baselines: dict[str, float] = {}
        for region in timeline.regions:
            times = [t for t, r, _ in timeline.completions if r == region]
            stalls[region], baselines[region] = sim_reconfig.stall_and_baseline(
                times, c.proposed_ms, c.done_ms, end_ms=timeline.end_ms
            )
        pending = None if c.pending_ms is None else c.pending_ms - c.proposed_ms
        out.append(
            Stall(c.name, c.done_ms - c.proposed_ms, stalls, baselines, bound, error, pending)
        )
    return out


def per_bin(
    timeline: Timeline, bin_ms: float = BIN_MS
) -> dict[str, tuple[list[int], list[float | None]]]:
    """Per region: completions per bin and their mean latency (None: an empty bin)."""
    bins = max(1, math.ceil(timeline.end_ms / bin_ms))  # no half-empty bin past the end
    out: dict[str, tuple[list[int], list[float | None]]] = {}
    for region in timeline.regions:
        counts = [0] * bins
        sums = [0.0] * bins
        for t, r, latency in timeline.completions:
            if r == region and 0 <= t < bins * bin_ms:
                counts[int(t // bin_ms)] += 1
                sums[int(t // bin_ms)] += latency
        means = [s / c if c else None for s, c in zip(sums, counts, strict=True)]
        out[region] = (counts, means)
    return out


def run(ctx: Context) -> int:
    if ctx.engine_name == "runtime":
        from bench.experiments.reconfig_runtime import run_runtime

        timeline = run_runtime(ctx)
    else:
        timeline = run_sim(ctx)
    stalls = measure(timeline)
    for s in stalls:
        extra = s.worst_extra_ms
        ctx.progress(
            f"{s.name}: worst extra stall"
            f" {'-' if extra is None else f'{extra:.0f}'} ms, bound {s.bound_ms:.0f} ms:"
            f" {'met' if s.met else 'NOT met'}{f' ({s.error})' if s.error else ''}"
        )
    _plot(ctx, timeline)
    result = {
        "rtt_ms": timeline.rtt_ms,
        "election_ms": timeline.election_ms,
        "regions": timeline.regions,
        "end_ms": timeline.end_ms,
        "goals_met": all(s.met for s in stalls),
        "changes": [
            {**asdict(s), "worst_extra_ms": s.worst_extra_ms, "met": s.met} for s in stalls
        ],
        "timeline": [asdict(c) for c in timeline.changes],
        "bins": {
            r: {"bin_ms": BIN_MS, "counts": counts, "mean_latency_ms": means}
            for r, (counts, means) in per_bin(timeline).items()
        },
        "notes": timeline.notes,
        **timeline.extra,
    }
    write_results(ctx, result, markdown(ctx, timeline, stalls))
    return 0 if all(s.error == "" for s in stalls) else 1


def run_sim(ctx: Context) -> Timeline:
    """The simulator half (:func:`bench.reconfig.run`) as a :class:`Timeline`."""
    ctx.progress("simulator: three changes under load (virtual time) ...")
    result = sim_reconfig.run(ctx.seed, quick=ctx.quick)
    completions = [(t, f"region {home}", latency) for t, home, latency in result.completions]
    changes = [ChangeTimes(c.name, c.proposed_ms, c.done_ms) for c in result.changes]
    end_ms = max((t for t, _, _ in completions), default=0.0)
    return Timeline(
        "sim",
        result.rtt_ms,
        result.election_ms,
        [f"region {k}" for k in range(3)],
        completions,
        changes,
        end_ms,
        notes=[
            "The simulator: three members, one region each, every pair 60 ms apart;"
            f" {sim_reconfig.CLIENTS_PER_REGION} closed-loop clients per region, each at its"
            " region's node while that node is a member (at the lowest member otherwise);"
            " the spare (node 3) and the replacement (node 4) are 60 ms from every node;"
            " node 3, the added member, is removed again (the sequencer's node stays: its"
            " replacement is the second change). Latency is measured at the replica,"
            " virtual time."
        ],
    )


def markdown(ctx: Context, timeline: Timeline, stalls: list[Stall]) -> str:
    """``results.md``: how it ran, the stall table with the verdicts, the figure."""
    lines = [
        "# reconfig: throughput and latency while the membership changes (issue 31)",
        "",
        f"Engine `{ctx.engine_name}`, seed {ctx.seed}{', quick' if ctx.quick else ''}."
        f" Round trip {timeline.rtt_ms:g} ms, election {timeline.election_ms:g} ms"
        " (lease + margin). Stall: the longest time without a completed command in a"
        f" region from the change's proposal to {sim_reconfig.AFTER_MS:g} ms after its"
        " epoch ran at every member; baseline: the same in the"
        f" {sim_reconfig.AFTER_MS:g} ms before the proposal. Goal: extra stall (stall -"
        " baseline) at most one round trip, plus one election for the sequencer's node.",
        "",
        *[f"{n}" for n in timeline.notes],
        "",
    ]
    rows = []
    for s in stalls:
        per_region = ", ".join(
            f"{r}: {s.stall_ms[r]:.0f} ({s.baseline_ms[r]:.0f})" for r in s.stall_ms
        )
        extra = s.worst_extra_ms
        rows.append(
            [
                s.name,
                ("-" if s.took_ms is None else f"{s.took_ms:.0f}")
                + ("" if s.pending_after_ms is None else f" (pending at {s.pending_after_ms:.0f})"),
                per_region or s.error,
                "-" if extra is None else f"{extra:.0f}",
                f"{s.bound_ms:.0f}",
                "met" if s.met else "NOT met",
            ]
        )
    lines.append(
        md_table(
            [
                "change",
                "took ms",
                "stall ms per region (baseline)",
                "worst extra ms",
                "bound ms",
                "goal",
            ],
            rows,
            align="lllrrl",
        )
    )
    lines += ["", *plots_and_skipped(ctx)]
    return "\n".join(lines)


def _plot(ctx: Context, timeline: Timeline) -> None:
    bins = per_bin(timeline)
    styles = ("-", "--", ":", "-.")

    def draw(plt: Any) -> None:
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
        for k, (region, (counts, means)) in enumerate(bins.items()):
            xs = [i * BIN_MS / 1000 for i in range(len(counts))]
            style = styles[k % len(styles)]
            top.step(xs, [c * 1000 / BIN_MS for c in counts], where="post", ls=style, label=region)
            bottom.step(
                xs,
                [float("nan") if m is None else m for m in means],
                where="post",
                ls=style,
                label=region,
            )
        for c in timeline.changes:
            end = c.done_ms if c.done_ms is not None else timeline.end_ms
            for ax in (top, bottom):
                ax.axvspan(c.proposed_ms / 1000, end / 1000, alpha=0.2, color="grey")
            top.annotate(
                c.name, (c.proposed_ms / 1000, 0.9), xycoords=("data", "axes fraction"), fontsize=7
            )
        clock = "virtual" if timeline.engine == "sim" else "wall clock"
        top.set_ylabel(f"commands/s ({BIN_MS:g} ms bins)")
        bottom.set_ylabel("mean latency (ms)")
        bottom.set_xlabel(f"time ({clock}, s)")
        top.legend(loc="lower right", fontsize=7)
        top.set_title(
            f"membership changes under load ({timeline.engine}); the changes shaded", fontsize=9
        )
        fig.tight_layout()

    save_plot(ctx, "reconfig.png", draw)
