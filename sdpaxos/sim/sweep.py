"""Seeded fault sweeps: many short runs with random fault schedules.

One run (:func:`run_faulty`) is a function of ``(seed, replicas, faults,
commands)``: closed-loop clients (two per region, retrying after
:data:`CLIENT_RETRY_MS`, elsewhere half of the time with the ``elsewhere``
fault; writes of :data:`KEYS` or of no key; a linearizable read after each
READY write, checked for freshness) run while a :class:`~sdpaxos.sim.faults.FaultInjector`
injects :data:`FAULT_ACTIONS_MIN` .. :data:`FAULT_ACTIONS_MAX` faults, one every
:data:`FAULT_GAP_MS_MIN` .. :data:`FAULT_GAP_MS_MAX` ms. Then every fault ends
(network healed and benign, paused replicas resumed, everyone restarted) and the
run goes on until every client command was READY and every proposed command
executed on every replica, or :data:`DRAIN_MS` pass (a liveness violation).
The safety checkers judge every event; the core's ``invariant_alarms`` must
stay 0; any exception from the core is a violation too.

:func:`sweep` runs seeds ``seed .. seed+runs-1``, run ``k`` with
``replicas[k % len(replicas)]`` replicas. Each violation carries the command
line that replays exactly that run.
"""

import random
import statistics
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.profiles import PAPER3, PAPER5, DelayProfile, uniform
from sdpaxos.sim.checkers import LivenessViolation, SafetyViolation
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.faults import (
    PROCESSING_US_WITH_SLOW,
    TRACED_FAULTS,
    FaultInjector,
    FaultKind,
    between,
    drift_for,
    format_faults,
    limits_for,
    network_for,
)
from sdpaxos.sim.trace import TRACE_CONFIG, TRACE_FAULTS, TraceRecorder
from sdpaxos.sim.workload import ClosedLoopClients

#: Commands per region in one run (split between its clients).
COMMANDS_DEFAULT = 40
CLIENTS_PER_REGION = 2
CLIENT_RETRY_MS = 1_500.0
#: Keys the sweep's commands write (or none) and its reads read (or everything).
KEYS = (b"k0", b"k1", b"k2")
FAULT_ACTIONS_MIN = 2
FAULT_ACTIONS_MAX = 6
FAULT_GAP_MS_MIN = 200
FAULT_GAP_MS_MAX = 1_500
#: Faults keep running this long after the last one was injected.
SETTLE_MS = 2_000
#: Longest the fault phase is extended for scheduled fault chains (churn) to finish.
CHAIN_MS_MAX = 15_000
#: Virtual time allowed, after everything healed, for every command to execute everywhere.
DRAIN_MS = 60_000
DRAIN_STEP_MS = 200
#: Events one run may process before it is declared runaway.
RUN_EVENTS_MAX = 20_000_000
#: Uniform round trip of profiles other than the paper's (N = 7, ...).
UNIFORM_RTT_MS = 60.0
#: Snapshot chunk size when a sweep turns compaction on: small, so that a
#: transfer takes several chunks (and a lost one is resumed), not so small that
#: a transfer of one chunk per round trip outlasts the drain.
SNAPSHOT_CHUNK_BYTES_SWEEP = 512
#: Lines of a core traceback kept in a violation report.
TRACEBACK_LINES_MAX = 8

Progress = Callable[[str], None]


def profile_for(replicas: int) -> DelayProfile:
    """paper3 for 3 replicas, paper5 for 5, a uniform profile otherwise."""
    if replicas == 3:
        return PAPER3
    if replicas == 5:
        return PAPER5
    return uniform(replicas, UNIFORM_RTT_MS)


def replay_command(
    seed: int,
    replicas: int,
    faults: frozenset[FaultKind],
    commands: int,
    snapshot_slots: int | None = None,
) -> str:
    """The command line that replays exactly one sweep run."""
    cmd = f"python -m sdpaxos.sim --sweep 1 --faults {format_faults(faults) or 'none'}"
    cmd += f" --replicas {replicas} --seed {seed}"
    if commands != COMMANDS_DEFAULT:
        cmd += f" --commands {commands}"
    if snapshot_slots is not None:
        cmd += f" --snapshot-slots {snapshot_slots}"
    return cmd


@dataclass(slots=True)
class FaultRun:
    """The outcome of one seeded run with faults."""

    seed: int
    replicas: int
    ok: bool
    kind: str  # "ok", "safety", "liveness", "alarm" or "exception"
    verdict: str
    replay: str
    faults: dict[str, int]
    network: dict[str, float | bool]
    view_changes: int
    views_won: int
    recoveries: int
    handovers: int
    reads_issued: int
    reads_ok: int
    reads_refused: int
    drift_ppm: int
    virtual_ms: float
    events: int
    commands_ready: int
    commands_total: int
    messages_lost: int
    messages_cut: int
    messages_duplicated: int
    messages_filtered: int
    #: Snapshots taken (compactions), installed (state transfers) and offered.
    snapshots_taken: int = 0
    snapshots_installed: int = 0
    snapshots_offered: int = 0
    snapshots_installed_in_view_change: int = 0
    #: Client sessions expired, summed over replicas and their incarnations (0
    #: unless the run's config sets ``session_lifetime_slots``; every replica
    #: expires the same ones, and a restarted one again as it re-executes).
    sessions_expired: int = 0
    timeline: list[tuple[int, str]] = field(default_factory=list)
    #: The run's spec steps, when it was recorded for trace validation.
    recorder: TraceRecorder | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "replicas": self.replicas,
            "ok": self.ok,
            "kind": self.kind,
            "verdict": self.verdict,
            "replay": self.replay,
            "faults": dict(sorted(self.faults.items())),
            "network": self.network,
            "view_changes": self.view_changes,
            "views_won": self.views_won,
            "recoveries": self.recoveries,
            "handovers": self.handovers,
            "reads": {
                "issued": self.reads_issued,
                "ok": self.reads_ok,
                "refused": self.reads_refused,
            },
            "drift_ppm": self.drift_ppm,
            "sessions_expired": self.sessions_expired,
            "virtual_ms": round(self.virtual_ms, 3),
            "events": self.events,
            "commands": {"ready": self.commands_ready, "total": self.commands_total},
            "messages": {
                "lost": self.messages_lost,
                "cut": self.messages_cut,
                "duplicated": self.messages_duplicated,
                "filtered": self.messages_filtered,
            },
            "snapshots": {
                "taken": self.snapshots_taken,
                "installed": self.snapshots_installed,
                "offered": self.snapshots_offered,
                "installed_in_view_change": self.snapshots_installed_in_view_change,
            },
            "timeline": [{"at_us": t, "fault": what} for t, what in self.timeline],
        }


def run_faulty(
    seed: int,
    replicas: int,
    faults: frozenset[FaultKind],
    *,
    commands: int = COMMANDS_DEFAULT,
    trace: bool = False,
    cluster_hook: Callable[[SimCluster], None] | None = None,
    snapshot_slots: int | None = None,
    config_overrides: dict[str, Any] | None = None,
) -> FaultRun:
    """One run with a random fault schedule; never raises for a protocol failure.

    ``trace=True`` records the run for trace validation (``FaultRun.recorder``):
    the spec's granularity (:data:`~sdpaxos.sim.trace.TRACE_CONFIG`), the
    sequencer of view 0 at replica 0, no clock drift, no reads, and faults
    outside :data:`~sdpaxos.sim.trace.TRACE_FAULTS` rejected. ``cluster_hook``
    sees the cluster before anything runs (to attach listeners).
    ``snapshot_slots``: compaction on, a snapshot every that many executed slots
    (``ClusterConfig.snapshot_slots_min``); small values make snapshots, state
    transfers and installs happen during the faults.
    ``config_overrides`` sets ``ClusterConfig`` fields on top of the run's
    drawn limits (e.g. ``session_lifetime_slots``: the clients then register);
    the replay command line does not carry them, so it names them.
    """
    if trace and not faults <= TRACE_FAULTS:
        raise ValueError(f"trace validation covers only {sorted(TRACE_FAULTS)}")
    chooser = SeededChooser(random.Random(seed))
    profile = profile_for(replicas)
    network = network_for(faults, chooser)
    drift_ppm = drift_for(faults, chooser)
    limits = limits_for(faults, chooser)
    sequencer = chooser.below(replicas)
    if trace:
        sequencer, drift_ppm, limits = 0, 0, {**limits, **TRACE_CONFIG}
    if snapshot_slots is not None:
        limits = {
            **limits,
            "snapshot_slots_min": snapshot_slots,
            "snapshot_chunk_bytes": SNAPSHOT_CHUNK_BYTES_SWEEP,
        }
    if config_overrides:
        limits = {**limits, **config_overrides}
    slow = bool(faults & {FaultKind.SLOW, FaultKind.STRAGGLER})
    cluster = SimCluster(
        profile,
        chooser,
        sequencer=sequencer,
        network=network,
        config_overrides=limits,
        processing_us=PROCESSING_US_WITH_SLOW if slow else 0,
        clock_drift_ppm=drift_ppm,
        traced=trace or bool(faults & TRACED_FAULTS),
    )
    if cluster_hook is not None:
        cluster_hook(cluster)
    recorder = TraceRecorder(cluster) if trace else None
    clients = ClosedLoopClients(
        cluster,
        commands,
        clients_per_region=CLIENTS_PER_REGION,
        retry_ms=CLIENT_RETRY_MS,
        retry_elsewhere=FaultKind.ELSEWHERE in faults,
        keys=KEYS,
        reads=not trace,
    )
    injector = FaultInjector(cluster, faults, read_keys=(None, *KEYS))
    gaps_ms = [
        between(chooser, FAULT_GAP_MS_MIN, FAULT_GAP_MS_MAX)
        for _ in range(between(chooser, FAULT_ACTIONS_MIN, FAULT_ACTIONS_MAX))
    ]
    # Pace the clients so that their load lasts as long as the faults are
    # injected (an idle cluster has nothing in flight to recover); once every
    # fault has ended they go flat out.
    per_client = max(1, commands // CLIENTS_PER_REGION)
    clients.think_ms = sum(gaps_ms) / per_client
    kind, verdict = "ok", "ok"
    try:
        clients.start()
        t_us = 0
        for gap_ms in gaps_ms:
            t_us += gap_ms * 1000
            cluster.run_until(t_us, events_max=RUN_EVENTS_MAX)
            injector.inject()
        cluster.run_until(t_us + SETTLE_MS * 1000, events_max=RUN_EVENTS_MAX)
        chains_end_us = t_us + CHAIN_MS_MAX * 1000
        while cluster.now_us < min(injector.busy_until_us, chains_end_us):
            cluster.run_until(min(injector.busy_until_us, chains_end_us), events_max=RUN_EVENTS_MAX)
        injector.heal_all()
        clients.think_ms = 0.0
        end_us = cluster.now_us + DRAIN_MS * 1000
        while cluster.now_us < end_us and not (
            clients.done() and cluster.checker.executed_everywhere(cluster.live_replicas())
        ):
            cluster.run_until(cluster.now_us + DRAIN_STEP_MS * 1000, events_max=RUN_EVENTS_MAX)
        if not clients.done():
            raise LivenessViolation(
                f"only {clients.completed} of {clients.total} client commands were READY"
                f" {DRAIN_MS} ms after every fault ended"
            )
        cluster.checker.check_liveness(cluster.live_replicas())
        alarms = cluster.core_counters().get("invariant_alarms", 0)
        if alarms:
            kind, verdict = "alarm", f"the core raised {alarms} invariant alarm(s)"
    except SafetyViolation as exc:
        kind, verdict = "safety", f"safety violation at {cluster.now_us} us: {exc}"
    except LivenessViolation as exc:
        kind, verdict = "liveness", f"liveness violation at {cluster.now_us} us: {exc}"
    except Exception as exc:  # a crash of the core under test is a finding, not a sweep crash
        lines = traceback.format_exception(exc)[-TRACEBACK_LINES_MAX:]
        kind = "exception"
        verdict = f"{type(exc).__name__} at {cluster.now_us} us: {exc}\n" + "".join(lines)
    counters = cluster.core_counters()
    totals = cluster.network.totals()
    return FaultRun(
        seed=seed,
        replicas=replicas,
        ok=kind == "ok",
        kind=kind,
        verdict=verdict,
        replay=replay_command(seed, replicas, faults, commands, snapshot_slots)
        + (f"  (plus ClusterConfig overrides {config_overrides})" if config_overrides else ""),
        faults=dict(injector.counts),
        network={
            "drop_probability": network.drop_probability,
            "duplicate_probability": network.duplicate_probability,
            "jitter_ms_max": network.jitter_ms_max,
            "fifo": network.fifo,
        },
        view_changes=counters.get("view_changes_started", 0),
        views_won=counters.get("views_won", 0),
        recoveries=counters.get("c_recoveries_started", 0),
        handovers=cluster.handovers,
        reads_issued=cluster.checker.reads_issued,
        reads_ok=cluster.checker.reads_ok,
        reads_refused=cluster.checker.reads_refused,
        drift_ppm=drift_ppm,
        virtual_ms=cluster.now_us / 1000,
        events=cluster.events_processed,
        commands_ready=clients.completed,
        commands_total=clients.total,
        messages_lost=totals.lost,
        messages_cut=totals.cut,
        messages_duplicated=totals.duplicated,
        messages_filtered=cluster.rule_dropped + cluster.rule_held,
        snapshots_taken=counters.get("snapshots_taken", 0),
        snapshots_installed=counters.get("snapshots_installed", 0),
        snapshots_offered=counters.get("snapshots_offered", 0),
        snapshots_installed_in_view_change=counters.get("snapshots_installed_in_view_change", 0),
        sessions_expired=counters.get("sessions_expired", 0),
        timeline=list(injector.timeline),
        recorder=recorder,
    )


@dataclass(slots=True)
class SweepReport:
    """Every run of a sweep, and what they add up to."""

    seed: int
    replicas: list[int]
    faults: frozenset[FaultKind]
    commands: int
    runs: list[FaultRun] = field(default_factory=list)

    @property
    def violations(self) -> list[FaultRun]:
        return [r for r in self.runs if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.violations

    def fault_totals(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for run in self.runs:
            for name, count in run.faults.items():
                total[name] = total.get(name, 0) + count
        return dict(sorted(total.items()))

    def summary(self) -> dict[str, Any]:
        """Totals over all runs, and per replica count."""
        per_n: dict[str, Any] = {}
        for n in sorted(set(self.replicas)):
            runs = [r for r in self.runs if r.replicas == n]
            if runs:
                per_n[str(n)] = _summarise(runs)
        return {"all": _summarise(self.runs), "by_replicas": per_n}

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "replicas": self.replicas,
            "faults": format_faults(self.faults),
            "commands": self.commands,
            "ok": self.ok,
            "summary": self.summary(),
            "violations": [r.to_json() for r in self.violations],
            "runs": [r.to_json() for r in self.runs],
        }

    def table(self) -> str:
        """A human summary: violations with replay commands, then the totals."""
        lines: list[str] = []
        if self.violations:
            lines.append(f"{len(self.violations)} violation(s):")
            for run in self.violations:
                first = run.verdict.splitlines()[0]
                lines.append(f"  seed {run.seed} N={run.replicas} {run.kind}: {first}")
                lines.append(f"    replay: {run.replay}")
                net = ", ".join(f"{k} {v}" for k, v in run.network.items())
                lines.append(f"    network: {net}")
                for at_us, what in run.timeline:
                    lines.append(f"    {at_us / 1000:>10.1f} ms  {what}")
        else:
            lines.append("violations: none")
        lines.append("")
        header = (
            f"{'replicas':<9}{'runs':>6}{'failed':>8}{'view chg':>10}{'won':>6}"
            f"{'handover':>9}{'c-recov':>9}{'reads':>8}{'ok':>8}{'mean virt s':>13}"
            f"{'lost':>9}{'cut':>9}{'dup':>8}{'filtered':>9}"
            f"{'snap taken':>11}{'installed':>10}{'offered':>9}"
        )
        lines.append(header)
        summary = self.summary()
        rows = [*summary["by_replicas"].items(), ("all", summary["all"])]
        for name, s in rows:
            lines.append(
                f"{name:<9}{s['runs']:>6}{s['failed']:>8}{s['view_changes']:>10}"
                f"{s['views_won']:>6}{s['handovers']:>9}{s['recoveries']:>9}"
                f"{s['reads_checked']:>8}{s['reads_ok']:>8}{s['mean_virtual_ms'] / 1000:>13.2f}"
                f"{s['messages_lost']:>9}{s['messages_cut']:>9}{s['messages_duplicated']:>8}"
                f"{s['messages_filtered']:>9}"
                f"{s['snapshots_taken']:>11}{s['snapshots_installed']:>10}"
                f"{s['snapshots_offered']:>9}"
            )
        lines.append("")
        lines.append(
            "view chg: view changes started; won: views won; reads: reads answered (ok or"
            " not); ok: reads answered ok, each checked for freshness; snap taken,"
            " installed, offered: snapshots taken (compactions), installed from a peer"
            " (state transfers), and offered to a peer below one"
        )
        lines.append("")
        lines.append("faults injected: " + (_format_counts(self.fault_totals()) or "none"))
        return "\n".join(lines)


def _summarise(runs: Sequence[FaultRun]) -> dict[str, Any]:
    faults: dict[str, int] = {}
    for run in runs:
        for name, count in run.faults.items():
            faults[name] = faults.get(name, 0) + count
    return {
        "runs": len(runs),
        "failed": sum(1 for r in runs if not r.ok),
        "faults": dict(sorted(faults.items())),
        "view_changes": sum(r.view_changes for r in runs),
        "views_won": sum(r.views_won for r in runs),
        "recoveries": sum(r.recoveries for r in runs),
        "handovers": sum(r.handovers for r in runs),
        "reads_issued": sum(r.reads_issued for r in runs),
        "reads_checked": sum(r.reads_ok + r.reads_refused for r in runs),
        "reads_ok": sum(r.reads_ok for r in runs),
        "mean_virtual_ms": statistics.fmean(r.virtual_ms for r in runs) if runs else 0.0,
        "events": sum(r.events for r in runs),
        "messages_lost": sum(r.messages_lost for r in runs),
        "messages_cut": sum(r.messages_cut for r in runs),
        "messages_duplicated": sum(r.messages_duplicated for r in runs),
        "messages_filtered": sum(r.messages_filtered for r in runs),
        "snapshots_taken": sum(r.snapshots_taken for r in runs),
        "snapshots_installed": sum(r.snapshots_installed for r in runs),
        "snapshots_offered": sum(r.snapshots_offered for r in runs),
        "runs_with_install": sum(1 for r in runs if r.snapshots_installed),
        "runs_with_install_in_view_change": sum(
            1 for r in runs if r.snapshots_installed_in_view_change
        ),
    }


def _format_counts(counts: dict[str, int]) -> str:
    return "  ".join(f"{name} {count}" for name, count in sorted(counts.items()))


def sweep(
    runs: int,
    *,
    seed: int,
    replicas: Sequence[int],
    faults: frozenset[FaultKind],
    commands: int = COMMANDS_DEFAULT,
    progress: Progress | None = None,
    snapshot_slots: int | None = None,
) -> SweepReport:
    """Runs ``seed .. seed+runs-1``; run ``k`` has ``replicas[k % len(replicas)]`` replicas."""
    if runs < 0 or not replicas:
        raise ValueError("a sweep needs runs >= 0 and at least one replica count")
    report = SweepReport(seed=seed, replicas=list(replicas), faults=faults, commands=commands)
    for k in range(runs):
        n = replicas[k % len(replicas)]
        run = run_faulty(seed + k, n, faults, commands=commands, snapshot_slots=snapshot_slots)
        report.runs.append(run)
        if progress is not None:
            status = "ok" if run.ok else f"VIOLATION ({run.kind})"
            progress(
                f"[{k + 1}/{runs}] seed {run.seed} N={n}: {status};"
                f" faults {_format_counts(run.faults) or 'none'};"
                f" {run.view_changes} view changes; {run.reads_ok} reads ok;"
                f" snapshots {run.snapshots_taken}/{run.snapshots_installed};"
                f" {run.virtual_ms / 1000:.1f} s virtual"
            )
            if not run.ok:
                progress(f"    replay: {run.replay}")
    return report
