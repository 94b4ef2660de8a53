"""Seeded sweeps of the ``reconfig`` fault: membership changes under load.

One run (:func:`run_reconfig`) is a function of ``(seed, replicas, commands)``:
a :class:`~sdpaxos.sim.member_cluster.MemberCluster` of ``replicas`` members,
closed-loop clients (:data:`CLIENTS` of them, retrying at members, after
``NOT_MEMBER`` too; a linearizable read after each READY write, checked for
freshness), a network drawn per run (loss, duplication, jitter, FIFO
or not), and a :class:`~sdpaxos.sim.reconfig.ReconfigInjector` playing its
changes with their hits. When the injector is done (or :data:`CHANGES_MS_MAX`
passed), every hit ends (links healed, crashed nodes restarted, the network
benign) and the run goes on until:

* every client command was READY;
* every command proposed executed at every live member of the newest epoch;
* every live member of the newest epoch runs it, with the same membership;
* every live node the membership retired knows it was removed (``Role.REMOVED``);

or :data:`DRAIN_MS` pass (a liveness violation). The checker judges every
event on the global log (prefix agreement, exactly-once, real-time order), and
every node must start an epoch at the same global slot. A change that was not
made in time is a liveness violation too.

:func:`sweep_reconfig` runs seeds ``seed .. seed+runs-1``, run ``k`` with
``replicas[k % len(replicas)]`` members at the start.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.core.member import Role
from sdpaxos.sim.checkers import LivenessViolation, SafetyViolation
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.faults import pick
from sdpaxos.sim.member_cluster import MemberCluster
from sdpaxos.sim.member_workload import MemberClients
from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.reconfig import CHANGE_MS_MAX, ReconfigInjector

__all__ = ["ReconfigReport", "ReconfigRun", "run_cli", "run_reconfig", "sweep_reconfig"]

#: Commands per member of epoch 0 (the runs' load is this times the member count).
COMMANDS_DEFAULT = 40
#: Snapshot chunk size when compaction is on (several chunks per transfer).
SNAPSHOT_CHUNK_BYTES = 512
CLIENTS = 4
CLIENT_RETRY_MS = 1_500.0
#: Longest the change phase runs (the injector also gives up on a stuck change).
CHANGES_MS_MAX = 4 * CHANGE_MS_MAX
#: Virtual time allowed, after every hit ended, for the run to settle.
DRAIN_MS = 60_000
STEP_MS = 200
RUN_EVENTS_MAX = 20_000_000
#: How long the load is spread over, per planned change, in ms.
LOAD_MS_PER_CHANGE = 3_000
#: Network knobs drawn per run (index 0 is the benign one).
DROP_PROBABILITIES = (0.0, 0.01, 0.05)
DUP_PROBABILITIES = (0.0, 0.02)
JITTER_MS = (0.0, 5.0, 30.0)
TRACEBACK_LINES_MAX = 8

Progress = Callable[[str], None]


def replay_command(
    seed: int, replicas: int, commands: int, snapshot_slots: int | None = None
) -> str:
    cmd = f"python -m sdpaxos.sim --sweep 1 --faults reconfig --replicas {replicas} --seed {seed}"
    if commands != COMMANDS_DEFAULT:
        cmd += f" --commands {commands}"
    if snapshot_slots is not None:
        cmd += f" --snapshot-slots {snapshot_slots}"
    return cmd


@dataclass(slots=True)
class ReconfigRun:
    """The outcome of one seeded run with membership changes."""

    seed: int
    replicas: int
    ok: bool
    kind: str  # "ok", "safety", "liveness" or "exception"
    verdict: str
    replay: str
    counts: dict[str, int]
    epoch: int
    members: tuple[int, ...]
    crashes: int
    dropped: int
    from_outsiders: int
    not_member: int
    reads_ok: int
    reads_refused: int
    virtual_ms: float
    events: int
    commands_ready: int
    commands_total: int
    timeline: list[tuple[int, str]] = field(default_factory=list)

    @property
    def changes_made(self) -> int:
        return self.counts.get("changes-made", 0)

    @property
    def changes_interrupted(self) -> int:
        return self.counts.get("changes-interrupted", 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "replicas": self.replicas,
            "ok": self.ok,
            "kind": self.kind,
            "verdict": self.verdict,
            "replay": self.replay,
            "counts": dict(sorted(self.counts.items())),
            "epoch": self.epoch,
            "members": list(self.members),
            "crashes": self.crashes,
            "dropped": self.dropped,
            "from_outsiders": self.from_outsiders,
            "not_member": self.not_member,
            "reads": {"ok": self.reads_ok, "refused": self.reads_refused},
            "virtual_ms": round(self.virtual_ms, 3),
            "events": self.events,
            "commands": {"ready": self.commands_ready, "total": self.commands_total},
            "timeline": [{"at_us": t, "what": w} for t, w in self.timeline],
        }


def _network(chooser: SeededChooser) -> NetworkConfig:
    return NetworkConfig(
        drop_probability=pick(chooser, DROP_PROBABILITIES),
        duplicate_probability=pick(chooser, DUP_PROBABILITIES),
        jitter_ms_max=pick(chooser, JITTER_MS),
        fifo=chooser.below(2) == 0,
    )


def _settled(cluster: MemberCluster, clients: MemberClients) -> bool:
    newest = cluster.newest()
    live = cluster.live_members()
    return (
        clients.done()
        and all(n.epoch == newest.epoch for n in cluster.live() if n.id in newest.ids)
        and cluster.checker.executed_everywhere(live)
        and all(n.role is Role.REMOVED for n in cluster.live() if n.id in newest.retired)
    )


def _check_end(cluster: MemberCluster, clients: MemberClients, injector: ReconfigInjector) -> None:
    newest = cluster.newest()
    if not clients.done():
        raise LivenessViolation(
            f"only {clients.completed} of {clients.total} client commands were READY"
            f" {DRAIN_MS} ms after every hit ended"
        )
    # Applied but never made, or a learner that never caught up: both stuck.
    stuck = [c for c in injector.changes if c.applied is not False and not c.made]
    if stuck:
        raise LivenessViolation(
            f"change {stuck[0].shape.value} (epoch {stuck[0].epoch}) was not made:"
            f" {stuck[0].message or 'the run ended first'}"
        )
    for node in cluster.live():
        if node.id in newest.ids and node.membership != newest:
            raise LivenessViolation(
                f"member {node.id} runs epoch {node.epoch} {list(node.membership.ids)},"
                f" the newest is {newest.epoch} {list(newest.ids)}"
            )
        if node.id in newest.retired and node.role is not Role.REMOVED:
            raise LivenessViolation(
                f"node {node.id} was retired but says {node.role.value} (epoch {node.epoch})"
            )
    cluster.checker.check_liveness(cluster.live_members())


def run_reconfig(
    seed: int,
    replicas: int,
    *,
    commands: int = COMMANDS_DEFAULT,
    cluster_hook: Callable[[MemberCluster, ReconfigInjector], None] | None = None,
    injector_args: dict[str, Any] | None = None,
    snapshot_slots: int | None = None,
) -> ReconfigRun:
    """One run with seeded membership changes; never raises for a protocol failure.

    ``cluster_hook`` sees the cluster and the injector before anything runs;
    ``injector_args`` are passed to :class:`ReconfigInjector` (``changes``,
    ``shapes``, ``hits``) to aim a run at one scenario. ``commands``: per
    member of epoch 0. ``snapshot_slots``: compaction on, a snapshot every that
    many slots.
    """
    chooser = SeededChooser(random.Random(seed))
    network = _network(chooser)
    overrides: dict[str, Any] = {}
    if snapshot_slots is not None:
        overrides = {
            "snapshot_slots_min": snapshot_slots,
            "snapshot_chunk_bytes": SNAPSHOT_CHUNK_BYTES,
        }
    cluster = MemberCluster(
        replicas,
        chooser,
        sequencer=chooser.below(replicas),
        network=network,
        config_overrides=overrides,
    )
    per_client = max(1, commands * replicas // CLIENTS)
    clients = MemberClients(cluster, CLIENTS, per_client, retry_ms=CLIENT_RETRY_MS)
    injector = ReconfigInjector(cluster, **(injector_args or {}))
    clients.think_ms = LOAD_MS_PER_CHANGE * injector.planned / per_client
    if cluster_hook is not None:
        cluster_hook(cluster, injector)
    kind, verdict = "ok", "ok"
    try:
        clients.start()
        injector.start()
        end_us = CHANGES_MS_MAX * 1000
        while not injector.finished and cluster.now_us < end_us:
            cluster.run_until(cluster.now_us + STEP_MS * 1000, events_max=RUN_EVENTS_MAX)
        injector.heal_all()
        cluster.network.set_config(NetworkConfig())
        clients.think_ms = 0.0
        end_us = cluster.now_us + DRAIN_MS * 1000
        while cluster.now_us < end_us and not _settled(cluster, clients):
            cluster.run_until(cluster.now_us + STEP_MS * 1000, events_max=RUN_EVENTS_MAX)
        _check_end(cluster, clients, injector)
    except SafetyViolation as exc:
        kind, verdict = "safety", f"safety violation at {cluster.now_us} us: {exc}"
    except LivenessViolation as exc:
        kind, verdict = "liveness", f"liveness violation at {cluster.now_us} us: {exc}"
    except Exception as exc:  # a crash of the core under test is a finding
        lines = traceback.format_exception(exc)[-TRACEBACK_LINES_MAX:]
        kind = "exception"
        verdict = f"{type(exc).__name__} at {cluster.now_us} us: {exc}\n" + "".join(lines)
    newest = cluster.newest()
    return ReconfigRun(
        seed=seed,
        replicas=replicas,
        ok=kind == "ok",
        kind=kind,
        verdict=verdict,
        replay=replay_command(seed, replicas, commands, snapshot_slots),
        counts=dict(injector.counts),
        epoch=newest.epoch,
        members=newest.ids,
        crashes=cluster.crashes,
        dropped=cluster.dropped_total(),
        from_outsiders=cluster.from_outsiders,
        not_member=clients.not_member,
        reads_ok=cluster.reads_ok,
        reads_refused=cluster.reads_refused,
        virtual_ms=cluster.now_us / 1000,
        events=cluster.events_processed,
        commands_ready=clients.completed,
        commands_total=clients.total,
        timeline=list(injector.timeline),
    )


@dataclass(slots=True)
class ReconfigReport:
    """Every run of a reconfig sweep, and what they add up to."""

    seed: int
    replicas: list[int]
    commands: int
    runs: list[ReconfigRun] = field(default_factory=list)

    @property
    def violations(self) -> list[ReconfigRun]:
        return [r for r in self.runs if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> dict[str, Any]:
        per_n = {
            str(n): _summarise([r for r in self.runs if r.replicas == n])
            for n in sorted(set(self.replicas))
            if any(r.replicas == n for r in self.runs)
        }
        return {"all": _summarise(self.runs), "by_replicas": per_n}

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "replicas": self.replicas,
            "faults": "reconfig",
            "commands": self.commands,
            "ok": self.ok,
            "summary": self.summary(),
            "violations": [r.to_json() for r in self.violations],
            "runs": [r.to_json() for r in self.runs],
        }

    def table(self) -> str:
        lines: list[str] = []
        if self.violations:
            lines.append(f"{len(self.violations)} violation(s):")
            for run in self.violations:
                lines.append(f"  seed {run.seed} N={run.replicas} {run.kind}: {run.verdict}")
                lines.append(f"    replay: {run.replay}")
                for at_us, what in run.timeline:
                    lines.append(f"    {at_us / 1000:>10.1f} ms  {what}")
        else:
            lines.append("violations: none")
        lines.append("")
        lines.append(
            f"{'replicas':<9}{'runs':>6}{'failed':>8}{'made':>6}{'interr':>8}{'refused':>8}"
            f"{'stuck':>7}{'max ep':>8}{'crashes':>9}{'zombies':>9}{'outsider':>10}"
            f"{'dropped':>9}{'not-mem':>9}{'reads ok':>9}{'refused':>8}{'mean virt s':>13}"
        )
        summary = self.summary()
        for name, s in [*summary["by_replicas"].items(), ("all", summary["all"])]:
            lines.append(
                f"{name:<9}{s['runs']:>6}{s['failed']:>8}{s['changes_made']:>6}"
                f"{s['changes_interrupted']:>8}{s['changes_refused']:>8}{s['changes_stuck']:>7}"
                f"{s['epoch_max']:>8}{s['crashes']:>9}{s['zombies']:>9}"
                f"{s['from_outsiders']:>10}{s['dropped']:>9}{s['not_member']:>9}"
                f"{s['reads_ok']:>9}{s['reads_refused']:>8}"
                f"{s['mean_virtual_ms'] / 1000:>13.2f}"
            )
        lines.append("")
        lines.append(
            "made: member changes whose epoch runs at every live member; interr: of those, hit"
            " by a crash or partition while in flight; refused: verdicts that changed nothing;"
            " stuck: not made in time (a liveness failure); max ep: highest final epoch;"
            " zombies: removed nodes restarted in their old epoch; outsider: epoch messages"
            " members got from non-members; dropped: messages members dropped (other epoch or"
            " non-member); not-mem: client commands answered NOT_MEMBER or refused; reads ok:"
            " reads answered ok, each checked for freshness; refused: reads answered not ok"
        )
        lines.append("")
        totals = summary["all"]["counts"]
        lines.append("counts: " + "  ".join(f"{k} {v}" for k, v in sorted(totals.items())))
        return "\n".join(lines)


def _summarise(runs: Sequence[ReconfigRun]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for run in runs:
        for name, count in run.counts.items():
            counts[name] = counts.get(name, 0) + count
    return {
        "runs": len(runs),
        "failed": sum(1 for r in runs if not r.ok),
        "counts": dict(sorted(counts.items())),
        "changes_made": counts.get("changes-made", 0),
        "changes_interrupted": counts.get("changes-interrupted", 0),
        "changes_refused": counts.get("changes-refused", 0),
        "changes_stuck": counts.get("changes-stuck", 0),
        "zombies": counts.get("hit-zombie", 0),
        "epoch_max": max((r.epoch for r in runs), default=0),
        "crashes": sum(r.crashes for r in runs),
        "from_outsiders": sum(r.from_outsiders for r in runs),
        "dropped": sum(r.dropped for r in runs),
        "not_member": sum(r.not_member for r in runs),
        "reads_ok": sum(r.reads_ok for r in runs),
        "reads_refused": sum(r.reads_refused for r in runs),
        "mean_virtual_ms": statistics.fmean(r.virtual_ms for r in runs) if runs else 0.0,
    }


def sweep_reconfig(
    runs: int,
    *,
    seed: int,
    replicas: Sequence[int],
    commands: int = COMMANDS_DEFAULT,
    progress: Progress | None = None,
    snapshot_slots: int | None = None,
) -> ReconfigReport:
    """Runs ``seed .. seed+runs-1``; run ``k`` starts with ``replicas[k % len(replicas)]``."""
    if runs < 0 or not replicas:
        raise ValueError("a sweep needs runs >= 0 and at least one replica count")
    report = ReconfigReport(seed=seed, replicas=list(replicas), commands=commands)
    for k in range(runs):
        n = replicas[k % len(replicas)]
        run = run_reconfig(seed + k, n, commands=commands, snapshot_slots=snapshot_slots)
        report.runs.append(run)
        if progress is not None:
            status = "ok" if run.ok else f"VIOLATION ({run.kind})"
            progress(
                f"[{k + 1}/{runs}] seed {run.seed} N={n}: {status}; changes made"
                f" {run.changes_made}, interrupted {run.changes_interrupted}; epoch"
                f" {run.epoch} members {list(run.members)}; {run.virtual_ms / 1000:.1f} s virtual"
            )
            if not run.ok:
                progress(f"    replay: {run.replay}")
    return report


def run_cli(
    args: argparse.Namespace, counts: list[int], commands: int, progress: Progress | None
) -> int:
    """``python -m sdpaxos.sim --sweep N --faults reconfig``: the sweep, then its
    table (or ``--json``); exit status 1 if any run failed. (Here, not in
    ``sdpaxos.sim.__main__``, to keep that module from growing.)"""
    report = sweep_reconfig(
        args.sweep,
        seed=args.seed,
        replicas=counts,
        commands=commands,
        progress=progress,
        snapshot_slots=args.snapshot_slots,
    )
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    return 0 if report.ok else 1
