"""``straggler``'s part 2 in the simulator (Fig. 9(b)), and what both engines' runs share.

SDPaxos straggler detection (:func:`sim_detection`): a
:class:`~sdpaxos.sim.cluster.SimCluster` with a tracer, so that the core's
own trace events time it; see :mod:`bench.experiments.straggler`. The
experiment's settings (both parts'), the table
rows (:func:`new_row`), the slowdown, the bins and the plot of a detection
run are also the runtime engine's (:mod:`bench.experiments.straggler_runtime`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, save_plot
from bench.rounds import lease_overrides
from sdpaxos.core.ready import ReplyKind
from sdpaxos.core.types import Command, Wait
from sdpaxos.profiles import uniform
from sdpaxos.sim import LivenessViolation, SafetyViolation, SeededChooser, SimCluster
from sdpaxos.sim.workload import ClosedLoopClients

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


@dataclass(frozen=True, slots=True)
class Settings:
    clients_per_region: int
    warmup_ms: float
    duration_ms: float
    #: Part 2: when the straggler slows, how long a run lasts, the open load
    #: (clients per region, each at this rate).
    slow_at_ms: float
    detect_run_ms: float
    detect_clients_per_region: int
    detect_rate_per_s: float
    #: Part 1 (the round driver): sessions per replica, warm-up and measured operations.
    sessions: int
    warmup: int
    commands: int
    #: Part 2: closed-loop clients per region, and how long the healthy run lasts.
    detect_closed_clients_per_region: int
    healthy_run_ms: float


QUICK = Settings(20, 300.0, 1_500.0, 1_000.0, 5_000.0, 5, 100.0, 1000, 5_000, 20_000, 10, 20_000.0)
FULL = Settings(
    20, 1_000.0, 5_000.0, 2_000.0, 8_000.0, 5, 100.0, 2000, 20_000, 100_000, 10, 120_000.0
)


#: Part 2's runs: (name, clients, the replica slowed or None). Replica 0 is the sequencer.
DETECTION_CASES: tuple[tuple[str, str, int | None], ...] = (
    ("sequencer slowed, closed loop", "closed", 0),
    ("sequencer slowed, open load", "open", 0),
    ("another replica slowed, closed loop", "closed", 1),
    ("nothing slowed, closed loop (saturated)", "closed", None),
)
#: The core's trace events part 2 times.
DETECTION_EVENTS = frozenset({"StragglerSuspect", "StragglerViewChange", "BecomeSequencer"})
#: Open-loop clients' ids start here.
OPEN_CLIENT_BASE = 1_000_000


def new_row(ctx: Context, proto: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``proto``'s table row, appended to ``rows``: None when the protocol
    cannot run (the row's status then says why), else the row, status "ok"."""
    row: dict[str, Any] = {"protocol": proto, "column": TITLES.get(proto, proto)}
    rows.append(row)
    why = ctx.status(proto)
    row["status"] = why or "ok"
    return None if why else row


def sim_detection(
    ctx: Context,
    settings: Settings,
    name: str,
    loop: str,
    slowed: int | None,
    failures: list[str],
) -> dict[str, Any]:
    """One part-2 run in the simulator; times are in ms after the slowdown."""
    profile = uniform(3, 0.2, local_rtt_ms=0.1, name="lan3")
    cluster = SimCluster(
        profile,
        SeededChooser(random.Random(ctx.seed)),
        traced=True,
        processing_us=PROCESSING_US,
        config_overrides=lease_overrides(),
    )
    events: list[tuple[int, str, int]] = []
    done_us: list[int] = []

    def on_trace(replica: int, event: str, _fields: object) -> None:
        if event in DETECTION_EVENTS:
            events.append((cluster.now_us, event, replica))

    def on_reply(_replica: int, reply: Any, now_us: int) -> None:
        if reply.kind is ReplyKind.READY:
            done_us.append(now_us)

    cluster.trace_listeners.append(on_trace)
    cluster.reply_listeners.append(on_reply)
    run_ms = settings.detect_run_ms if slowed is not None else settings.healthy_run_ms
    end_us = round(run_ms * 1000)
    offered = None
    if loop == "closed":
        clients = settings.detect_closed_clients_per_region
        ClosedLoopClients(cluster, 1 << 40, clients_per_region=clients).start()
    else:
        clients = settings.detect_clients_per_region
        offered = clients * 3 * settings.detect_rate_per_s
        _open_load(cluster, ctx.seed, clients, settings.detect_rate_per_s, end_us)
    slow_at_ms = settings.slow_at_ms if slowed is not None else 0.0
    slow_us = round(slow_at_ms * 1000)
    if slowed is not None:
        cluster.call_at(slow_us, lambda: cluster.slow(slowed, SLOW_FACTOR), "slow")
    samples: list[tuple[int, int | None]] = []
    bin_us = BIN_MS * 1000

    def sample() -> None:
        samples.append((cluster.now_us, cluster.believed_sequencer()))
        if cluster.now_us + bin_us < end_us:
            cluster.call_at(cluster.now_us + bin_us, sample, "sample")

    cluster.call_at(0, sample, "sample")
    ctx.progress(f"sdpaxos, {name} ...")
    status = "ok"
    try:
        while cluster.now_us < end_us:
            cluster.run_until(min(end_us, cluster.now_us + 2_000_000))
            ctx.progress(f"  {name}: {cluster.now_us / 1e6:.0f}/{end_us / 1e6:.0f} s virtual")
    except (SafetyViolation, LivenessViolation) as exc:
        status = f"{type(exc).__name__} at {cluster.now_us} us: {exc}"
        failures.append(f"detection run ({name}): {status}")

    def first(event: str) -> tuple[float, int] | None:
        hit = next(((t, r) for t, e, r in events if e == event and t >= slow_us), None)
        return None if hit is None else ((hit[0] - slow_us) / 1000, hit[1])

    moved_us = next((t for t, s in samples if t >= slow_us and s not in (0, None)), None)
    suspect, vc, won = (
        first("StragglerSuspect"),
        first("StragglerViewChange"),
        first("BecomeSequencer"),
    )
    bins = [0] * (end_us // bin_us)
    for t in done_us:
        if t < len(bins) * bin_us:
            bins[t // bin_us] += 1
    suspicions = sum(1 for _, e, _ in events if e == "StragglerSuspect")
    suspected_before = sum(1 for t, e, _ in events if e == "StragglerSuspect" and t < slow_us)
    result: dict[str, Any] = {
        "case": name,
        "loop": loop,
        "slowed": slowed,
        "factor": SLOW_FACTOR,
        "clients_per_region": clients,
        "offered_per_s": offered,
        "slow_at_ms": slow_at_ms,
        "run_ms": run_ms,
        "suspicions": suspicions,
        "suspicions_before_slowdown": suspected_before,
        "suspect_after_ms": None if suspect is None else suspect[0],
        "suspect_at": None if suspect is None else suspect[1],
        "straggler_view_change_after_ms": None if vc is None else vc[0],
        "won_after_ms": None if won is None else won[0],
        "detected_after_ms": None if moved_us is None else (moved_us - slow_us) / 1000,
        "new_sequencer": None if moved_us is None else dict(samples)[moved_us],
        "views_won": cluster.core_counters().get("views_won", 0),
        "bin_ms": BIN_MS,
        "throughput_per_s": [b * 1000 / BIN_MS for b in bins],
        "leader_samples": [[t / 1000, s] for t, s in samples],
        "status": status,
    }
    if slowed == 0 and (vc is None or moved_us is None):
        failures.append(f"{name}: straggler detection did not move the sequencer")
    if slowed != 0 and (vc is not None or moved_us is not None):
        failures.append(f"{name}: the sequencer moved ({events[:6]})")
    if suspected_before or (slowed is None and suspicions):
        failures.append(f"{name}: {suspicions} StragglerSuspect in healthy time")
    ctx.progress(
        f"sdpaxos, {name}: suspected {result['suspect_after_ms']} ms, moved"
        f" {result['detected_after_ms']} ms after the slowdown; {suspicions} suspicions"
    )
    return result


def _open_load(
    cluster: SimCluster, seed: int, clients: int, rate_per_s: float, end_us: int
) -> None:
    """``clients`` Poisson clients per replica at ``rate_per_s`` each, one fresh
    command per arrival (each its own client id), whatever the answers."""
    for r in range(cluster.n):
        rng = random.Random(f"{seed}:open:{r}")
        per_s = clients * rate_per_s
        cid = OPEN_CLIENT_BASE * (r + 1)
        at_us = 0.0
        while True:
            at_us += rng.expovariate(per_s) * 1e6
            if at_us >= end_us:
                break
            cid += 1
            cluster.propose_at(round(at_us), r, Command(cid, 1, b"x" * 16), Wait.READY)


def ms_cell(value: float | None, replica: int | None = None) -> str:
    """A time after the slowdown for a table (``-``: not seen), with the replica."""
    if value is None:
        return "-"
    return f"{value:,.0f}" + ("" if replica is None else f" (r{replica})")


def plot_detection(ctx: Context, detection: dict[str, Any], name: str) -> None:

    def draw(plt: Any) -> None:
        _fig, ax = plt.subplots(figsize=(8, 3.6))
        ys = detection["throughput_per_s"]
        xs = [(i + 0.5) * detection["bin_ms"] / 1000 for i in range(len(ys))]
        ax.step(xs, ys, where="mid", label="completed ops/s (100 ms bins)")
        ax.axvline(
            detection["slow_at_ms"] / 1000, color="red", linestyle="--", label="sequencer slowed"
        )
        suspect = detection.get("suspect_after_ms")
        if suspect is not None:
            ax.axvline(
                (detection["slow_at_ms"] + suspect) / 1000,
                color="orange",
                linestyle=":",
                label="first StragglerSuspect",
            )
        if detection["detected_after_ms"] is not None:
            at = (detection["slow_at_ms"] + detection["detected_after_ms"]) / 1000
            ax.axvline(
                at,
                color="green",
                linestyle="--",
                label=f"sequencer moved to {detection['new_sequencer']}",
            )
        ax.set_xlabel(f"time (s, {'wall clock' if ctx.engine_name == 'runtime' else 'virtual'})")
        ax.set_ylabel("ops/s")
        loop = {"closed": ", closed loop", "open": ", open load"}.get(detection.get("loop", ""), "")
        ax.set_title(
            "SDPaxos: a slow sequencer detected and replaced (cf. Fig. 9(b))\n"
            f"slowed to 1/{detection['factor']:g}{loop}",
            fontsize=10,
        )
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)

    save_plot(ctx, name, draw)


def fig9a_cells(protocol: str) -> list[str]:
    """The paper's Fig. 9(a) beside a row, for both engines' tables: throughput
    (thousand req/s) and change with the straggler at the leader, then at another
    replica; "-" where the paper has no bar."""
    fig = paper.FIG9A_16B.get(protocol, {})
    return [f"{fig[c][0]:g}K ({fig[c][1]:+.1f}%)" if c in fig else "-" for c in ("leader", "other")]
