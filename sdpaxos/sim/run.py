"""One experiment end to end: build a cluster, run closed-loop clients, heal,
drain, check liveness, and summarise. Shared by the CLI and the tests so both
measure exactly the same thing.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.profiles import DelayProfile
from sdpaxos.sim.checkers import LivenessViolation, SafetyViolation
from sdpaxos.sim.chooser import Chooser, SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.workload import ClosedLoopClients, LatencyStats

#: Granularity at which a drain re-checks whether everything has executed.
DRAIN_CHECK_MS = 100.0
#: Events one run may process before it is declared runaway.
RUN_EVENTS_MAX = 50_000_000

Progress = Callable[[str], None]


@dataclass(slots=True)
class RunResult:
    """What a run measured and what the checkers concluded."""

    seed: int | None
    profile: DelayProfile
    sequencer: int
    stats: dict[int, LatencyStats]
    verdict: str
    ok: bool
    virtual_ms: float
    events: int
    messages_sent: int
    messages_delivered: int
    messages_dropped: int
    bytes_sent: int
    chosen_c: int
    chosen_o: int
    options: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        regions = {}
        for r, s in sorted(self.stats.items()):
            regions[self.profile.regions[r]] = {
                "count": s.count,
                "mean_ms": round(s.mean_ms, 3),
                "p50_ms": round(s.p50_ms, 3),
                "p99_ms": round(s.p99_ms, 3),
            }
        return {
            "seed": self.seed,
            "profile": self.profile.name,
            "replicas": list(self.profile.regions),
            "sequencer": self.profile.regions[self.sequencer],
            "options": self.options,
            "regions": regions,
            "checkers": {"ok": self.ok, "verdict": self.verdict},
            "virtual_ms": round(self.virtual_ms, 3),
            "events": self.events,
            "messages": {
                "sent": self.messages_sent,
                "delivered": self.messages_delivered,
                "dropped": self.messages_dropped,
                "bytes_sent": self.bytes_sent,
            },
            "chosen": {"c_instances": self.chosen_c, "o_instances": self.chosen_o},
        }


def run_closed_loop(
    profile: DelayProfile,
    *,
    seed: int | None = 1,
    chooser: Chooser | None = None,
    sequencer: int = 0,
    commands_per_region: int = 100,
    clients_per_region: int = 1,
    client_retry_ms: float | None = None,
    network: NetworkConfig | None = None,
    tick_ms: float = 10.0,
    configured_proximity: bool = True,
    measured_proximity: bool = False,
    config_overrides: dict[str, Any] | None = None,
    time_limit_ms: float | None = None,
    drain_ms: float = 60_000.0,
    catch: bool = True,
    progress: Progress | None = None,
    cluster_hook: Callable[[SimCluster], None] | None = None,
    protocol: str = "sdpaxos",
    conflict_pct: int | None = None,
) -> RunResult:
    """Run closed-loop clients at every replica, then heal and drain.

    Faults (drop, duplicate) are on while clients run; then they are switched
    off, partitions healed and the run goes on for up to ``drain_ms`` until
    every command executed on every live replica (the liveness check).

    With ``catch`` a checker violation becomes the verdict; otherwise it raises
    (tests want the traceback). Core exceptions always propagate.

    ``conflict_pct``: the clients' conflict rate (``ClosedLoopClients``); by
    default every command has no key (every pair of commands interferes).
    """
    if chooser is None:
        chooser = SeededChooser(random.Random(seed))
    net = network or NetworkConfig()
    cluster = SimCluster(
        profile,
        chooser,
        sequencer=sequencer,
        network=net,
        tick_ms=tick_ms,
        configured_proximity=configured_proximity,
        measured_proximity=measured_proximity,
        config_overrides=config_overrides,
        protocol=protocol,
    )
    if cluster_hook is not None:
        cluster_hook(cluster)
    clients = ClosedLoopClients(
        cluster,
        commands_per_region,
        clients_per_region=clients_per_region,
        retry_ms=client_retry_ms,
        conflict_pct=conflict_pct,
    )
    total = clients.total
    if time_limit_ms is None:
        # Generous: every command may take a few of the slowest round trips.
        worst_rtt_ms = max(max(row) for row in profile.rtt_ms)
        per_client = -(-commands_per_region // clients_per_region)
        time_limit_ms = 60_000.0 + per_client * (worst_rtt_ms + 1.0) * 10
    limit_us = round(time_limit_ms * 1000)
    verdict = "ok"
    ok = True
    try:
        clients.start()
        step_us = round(DRAIN_CHECK_MS * 1000)
        next_report = max(1, total // 10)
        while not clients.done() and cluster.now_us < limit_us:
            cluster.run_until(min(limit_us, cluster.now_us + step_us), events_max=RUN_EVENTS_MAX)
            if progress is not None and total >= 1000 and clients.completed >= next_report:
                progress(
                    f"{clients.completed}/{total} commands ready at"
                    f" {cluster.now_us / 1e6:.1f} s virtual, {cluster.events_processed} events"
                )
                next_report += max(1, total // 10)
        cluster.network.set_config(NetworkConfig(fifo=net.fifo))
        cluster.network.heal()
        drain_end_us = cluster.now_us + round(drain_ms * 1000)
        live = cluster.live_replicas()
        while cluster.now_us < drain_end_us and not (
            clients.done() and cluster.checker.executed_everywhere(live)
        ):
            cluster.run_until(cluster.now_us + step_us, events_max=RUN_EVENTS_MAX)
        if not clients.done():
            raise LivenessViolation(
                f"only {clients.completed} of {total} client commands were READY"
                f" within {time_limit_ms:.0f} ms + {drain_ms:.0f} ms of virtual time"
            )
        cluster.checker.check_liveness(live)
    except (SafetyViolation, LivenessViolation) as exc:
        if not catch:
            raise
        ok = False
        kind = "safety" if isinstance(exc, SafetyViolation) else "liveness"
        verdict = f"{kind} violation at {cluster.now_us} us: {exc}"
    totals = cluster.network.totals()
    return RunResult(
        seed=seed,
        profile=profile,
        sequencer=sequencer,
        stats=clients.stats(),
        verdict=verdict,
        ok=ok,
        virtual_ms=cluster.now_us / 1000,
        events=cluster.events_processed,
        messages_sent=totals.sent,
        messages_delivered=totals.delivered,
        messages_dropped=totals.dropped,
        bytes_sent=totals.bytes_sent,
        chosen_c=cluster.checker.chosen_c,
        chosen_o=cluster.checker.chosen_o,
        options={
            "protocol": protocol,
            "commands_per_region": commands_per_region,
            "clients_per_region": clients_per_region,
            "tick_ms": tick_ms,
            "jitter_ms_max": net.jitter_ms_max,
            "fifo": net.fifo,
            "drop_probability": net.drop_probability,
            "duplicate_probability": net.duplicate_probability,
            "configured_proximity": configured_proximity,
            "measured_proximity": measured_proximity,
            **({} if conflict_pct is None else {"conflict_pct": conflict_pct}),
        },
    )
