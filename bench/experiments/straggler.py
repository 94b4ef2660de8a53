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
(:func:`_sim_detection`, a :class:`~sdpaxos.sim.cluster.SimCluster` with a
tracer, so that the core's own trace events time it), four runs: the
sequencer slowed at ``slow_at_ms`` under closed-loop clients (the paper's
setting) and under an open load above what the slowed sequencer orders;
another replica slowed (a non-sequencer straggler must move nothing); nothing
slowed, a long saturated closed loop (no suspicion allowed). Per run: the
first ``StragglerSuspect`` (a command leader polls the others), the first
``StragglerViewChange`` (a majority agreed), the first ``BecomeSequencer``,
and when a majority of replicas, sampled every 100 ms, follow another
sequencer; throughput in 100 ms bins.

With ``--engine runtime`` (:func:`_run_runtime`): three node processes on
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
import os
import random
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, md_table, save_plot, write_results
from bench.engines import Clients, RunSpec, close_engine
from bench.rounds import ProtocolWorkers, RoundSpec, lease_overrides
from bench.workloads import Workload
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
#: Part 1: the straggler takes one round in this many, and its CPU counts this many times.
ROUNDS_EVERY = 3


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


def _new_row(ctx: Context, proto: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``proto``'s table row, appended to ``rows``: None when the protocol
    cannot run (the row's status then says why), else the row, status "ok"."""
    row: dict[str, Any] = {"protocol": proto, "column": TITLES.get(proto, proto)}
    rows.append(row)
    why = ctx.status(proto)
    row["status"] = why or "ok"
    return None if why else row


def run(ctx: Context) -> int:
    if ctx.engine_name == "runtime":
        return _run_runtime(ctx)
    settings = QUICK if ctx.quick else FULL
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    with ProtocolWorkers() as workers:
        for proto in ctx.protocols:
            row = _new_row(ctx, proto, rows)
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
            detections.append(_sim_detection(ctx, settings, name, loop, slowed, failures))
    # Part 2 runs only with SDPaxos among the protocols (else no detections).
    stems = ("closed", "open", "other", "healthy") if detections else ()
    for d, stem in zip(detections, stems, strict=True):
        if d["slowed"] == 0:
            _plot(ctx, d, f"straggler_detection_{stem}.png")
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


def _sim_detection(
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
                        _ms(d["suspect_after_ms"], d["suspect_at"]),
                        _ms(d["straggler_view_change_after_ms"]),
                        _ms(d["detected_after_ms"], d["new_sequencer"]),
                        d["suspicions"],
                    ]
                    for d in detections
                ],
            ),
            "",
            f"The paper: detected within {paper.STRAGGLER_DETECTION_S:g} s (closed loop).",
            "",
        ]
    for plot in ctx.plots:
        lines += [f"![{plot}]({plot})", ""]
    if ctx.skipped:
        lines += ["## Not run", ""] + [f"- {p}: {why}" for p, why in ctx.skipped.items()] + [""]
    return "\n".join(lines)


def _ms(value: float | None, replica: int | None = None) -> str:
    """A time after the slowdown for a table (``-``: not seen), with the replica."""
    if value is None:
        return "-"
    return f"{value:,.0f}" + ("" if replica is None else f" (r{replica})")


def _plot(ctx: Context, detection: dict[str, Any], name: str) -> None:

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


# ------------------------------------------------------------- the runtime engine


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


def _run_runtime(ctx: Context) -> int:
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
        row = _new_row(ctx, proto, rows)
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
        _plot(ctx, d, f"straggler_detection_{d['loop']}_x{d['factor']:g}.png")
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
        fig = paper.FIG9A_16B.get(row["protocol"], {})
        paper_cells = [
            f"{fig[c][0]:g}K ({fig[c][1]:+.1f}%)" if c in fig else "-" for c in ("leader", "other")
        ]
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
    for plot in ctx.plots:
        lines += [f"![{plot}]({plot})", ""]
    if ctx.skipped:
        lines += ["## Not run", ""] + [f"- {p}: {why}" for p, why in ctx.skipped.items()] + [""]
    return "\n".join(lines)
