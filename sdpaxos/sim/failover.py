"""Sequencer failover, the paper's Fig. 14: how long each surviving region stalls.

Setup (paper section 5.5, Fig. 14): the ``paper3`` profile with
the sequencer in CA, closed-loop clients at the other regions (OR and OH,
:data:`CLIENTS_PER_REGION` each), heartbeat and lease 500 ms. At ``kill_ms``
(2.3 s) CA crashes and never comes back; the run goes on until
``kill_ms + after_ms``.

Each surviving region's stall is reported three ways:

* ``first_ready_ms``: from the kill to the region's first READY after it, of any
  command. Commands the old sequencer ordered just before dying still turn READY
  a few ms after the kill (their last messages were in flight), so this can be
  tiny and says nothing about the failover.
* ``stall_ms`` (the exact stall): from the kill to the region's first READY given
  while its replica is in a view newer than the dead sequencer's, i.e. the first
  command answered under the new sequencer: service has resumed.
* ``binned_stall_ms`` (the paper's way): READY replies counted in
  :data:`BIN_MS` bins of virtual time (aligned to 0); the number of empty bins
  from the kill's bin to the end of the run, times :data:`BIN_MS`.

The stall depends on where in the heartbeat period the crash falls, so
:func:`failover_sweep` repeats the scenario with kill times spread uniformly over
one heartbeat period.
"""

import importlib
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.core.ready import Reply, ReplyKind
from sdpaxos.profiles import PAPER3, DelayProfile
from sdpaxos.sim.checkers import SafetyViolation
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.workload import ClosedLoopClients

#: The paper's settings (section 5.5).
HEARTBEAT_MS = 500.0
LEASE_MS = 500.0
KILL_MS = 2_300.0
#: Run on this long after the kill (the paper's figure ends at 5 s).
AFTER_MS = 2_700.0
CLIENTS_PER_REGION = 20
BIN_MS = 100
#: Commands per region: more than the clients can finish, so they never run dry.
COMMANDS_PER_REGION = 10_000_000
RUN_EVENTS_MAX = 50_000_000

Progress = Callable[[str], None]


class PlotUnavailable(RuntimeError):
    """``--plot`` needs matplotlib (the ``bench`` extra)."""


@dataclass(slots=True)
class RegionStall:
    region: str
    first_ready_ms: float | None
    stall_ms: float | None
    binned_stall_ms: int
    empty_bins: int
    ready_before_kill: int
    ready_after_kill: int

    def to_json(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "first_ready_ms": _round(self.first_ready_ms),
            "stall_ms": _round(self.stall_ms),
            "binned_stall_ms": self.binned_stall_ms,
            "empty_bins": self.empty_bins,
            "ready_before_kill": self.ready_before_kill,
            "ready_after_kill": self.ready_after_kill,
        }


@dataclass(slots=True)
class FailoverResult:
    profile: DelayProfile
    killed: str
    kill_ms: float
    end_ms: float
    seed: int
    tick_ms: float
    new_sequencer: str | None
    new_view: int | None
    checkers: str
    regions: list[RegionStall]
    #: READY replies per ``BIN_MS`` bin, per surviving region, from time 0.
    bins: dict[str, list[int]] = field(default_factory=dict)

    def region(self, name: str) -> RegionStall:
        for r in self.regions:
            if r.region == name:
                return r
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "killed": self.killed,
            "kill_ms": self.kill_ms,
            "end_ms": self.end_ms,
            "seed": self.seed,
            "tick_ms": self.tick_ms,
            "heartbeat_ms": HEARTBEAT_MS,
            "lease_ms": LEASE_MS,
            "bin_ms": BIN_MS,
            "new_sequencer": self.new_sequencer,
            "new_view": self.new_view,
            "checkers": self.checkers,
            "regions": {r.region: r.to_json() for r in self.regions},
            "bins": self.bins,
        }

    def table(self) -> str:
        lines = [
            f"failover: {self.profile.name}, sequencer {self.killed} killed at"
            f" {self.kill_ms:.1f} ms; heartbeat {HEARTBEAT_MS:.0f} ms, lease {LEASE_MS:.0f} ms,"
            f" tick {self.tick_ms:g} ms, seed {self.seed}",
            f"new sequencer {self.new_sequencer} (view {self.new_view}); checkers: {self.checkers}",
            f"{'region':<8}{'first READY ms':>16}{'stall ms (exact)':>18}"
            f"{'stall ms (100 ms bins)':>24}{'READY after':>13}",
        ]
        for r in self.regions:
            lines.append(
                f"{r.region:<8}{_fmt(r.first_ready_ms):>16}{_fmt(r.stall_ms):>18}"
                f"{r.binned_stall_ms:>24}{r.ready_after_kill:>13}"
            )
        return "\n".join(lines)


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _fmt(v: float | None) -> str:
    return "never" if v is None else f"{v:.1f}"


def run_failover(
    *,
    profile: DelayProfile = PAPER3,
    sequencer: int = 0,
    kill_ms: float = KILL_MS,
    after_ms: float = AFTER_MS,
    clients_per_region: int = CLIENTS_PER_REGION,
    seed: int = 1,
    tick_ms: float = 10.0,
    protocol: str = "sdpaxos",
) -> FailoverResult:
    """Kill the sequencer at ``kill_ms`` under closed-loop load; measure each survivor.

    ``protocol``: a name from :data:`sdpaxos.protocols.PROTOCOL_NAMES` whose
    replicas expose ``sequencer`` (the believed leader) and ``view`` (growing
    with every leader change), e.g. ``"multipaxos"`` (its leader is killed).
    """
    if not (kill_ms > 0 and after_ms > 0):
        raise ValueError("kill_ms and after_ms must be > 0")
    cluster = SimCluster(
        profile,
        SeededChooser(random.Random(seed)),
        sequencer=sequencer,
        tick_ms=tick_ms,
        config_overrides={"heartbeat_ms": HEARTBEAT_MS, "lease_ms": LEASE_MS},
        protocol=protocol,
    )
    survivors = [r for r in range(profile.size) if r != sequencer]
    readies: dict[int, list[tuple[int, int]]] = {r: [] for r in survivors}

    def on_reply(replica: int, reply: Reply, now_us: int) -> None:
        if reply.kind is ReplyKind.READY and replica in readies:
            view = getattr(cluster.replicas[replica], "view", 0)
            readies[replica].append((now_us, view if isinstance(view, int) else 0))

    cluster.reply_listeners.append(on_reply)
    clients = ClosedLoopClients(
        cluster, COMMANDS_PER_REGION, clients_per_region=clients_per_region, regions=survivors
    )
    clients.start()
    kill_us = round(kill_ms * 1000)
    end_us = kill_us + round(after_ms * 1000)
    checkers = "ok"
    cluster.run_until(kill_us, events_max=RUN_EVENTS_MAX)
    old_view = getattr(cluster.replicas[sequencer], "view", 0)
    assert isinstance(old_view, int)
    cluster.crash(sequencer)
    try:
        cluster.run_until(end_us, events_max=RUN_EVENTS_MAX)
    except SafetyViolation as exc:
        checkers = f"safety violation at {cluster.now_us} us: {exc}"
        end_us = cluster.now_us

    bin_us = BIN_MS * 1000
    bins_total = end_us // bin_us  # complete bins only
    first_bin = kill_us // bin_us
    stalls: list[RegionStall] = []
    bins: dict[str, list[int]] = {}
    for r in survivors:
        times = readies[r]
        after = [(t, v) for t, v in times if t > kill_us]
        new_view = [t for t, v in after if v > old_view]
        counts = [0] * bins_total
        for t, _ in times:
            if t // bin_us < bins_total:
                counts[t // bin_us] += 1
        empty = sum(1 for b in range(first_bin, bins_total) if counts[b] == 0)
        name = profile.regions[r]
        bins[name] = counts
        stalls.append(
            RegionStall(
                region=name,
                first_ready_ms=(after[0][0] - kill_us) / 1000 if after else None,
                stall_ms=(new_view[0] - kill_us) / 1000 if new_view else None,
                binned_stall_ms=empty * BIN_MS,
                empty_bins=empty,
                ready_before_kill=len(times) - len(after),
                ready_after_kill=len(after),
            )
        )
    seqs = {getattr(cluster.replicas[r], "sequencer", None) for r in cluster.live_replicas()}
    views = {getattr(cluster.replicas[r], "view", None) for r in cluster.live_replicas()}
    new_seq = seqs.pop() if len(seqs) == 1 else None
    new_view_no = views.pop() if len(views) == 1 else None
    return FailoverResult(
        profile=profile,
        killed=profile.regions[sequencer],
        kill_ms=kill_ms,
        end_ms=end_us / 1000,
        seed=seed,
        tick_ms=tick_ms,
        new_sequencer=profile.regions[new_seq] if isinstance(new_seq, int) else None,
        new_view=new_view_no if isinstance(new_view_no, int) else None,
        checkers=checkers,
        regions=stalls,
        bins=bins,
    )


@dataclass(slots=True)
class FailoverSweep:
    """The failover scenario with the crash at several phases of the heartbeat period."""

    results: list[FailoverResult]

    def stats(self) -> dict[str, dict[str, dict[str, float | None]]]:
        """Per region, per measure: mean, median and max over the phases."""
        out: dict[str, dict[str, dict[str, float | None]]] = {}
        if not self.results:
            return out
        for region in [r.region for r in self.results[0].regions]:
            per: dict[str, dict[str, float | None]] = {}
            for measure in ("stall_ms", "binned_stall_ms", "first_ready_ms"):
                values = [getattr(res.region(region), measure) for res in self.results]
                known = [float(v) for v in values if v is not None]
                per[measure] = {
                    "mean": round(statistics.fmean(known), 3) if known else None,
                    "median": round(statistics.median(known), 3) if known else None,
                    "max": round(max(known), 3) if known else None,
                    "never": float(len(values) - len(known)),
                }
            out[region] = per
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "phases": len(self.results),
            "kill_ms": [r.kill_ms for r in self.results],
            "stats": self.stats(),
            "runs": [
                {"kill_ms": r.kill_ms, "regions": {s.region: s.to_json() for s in r.regions}}
                for r in self.results
            ],
        }

    def table(self) -> str:
        first = self.results[0]
        lines = [
            f"failover sweep: {len(self.results)} crash phases over one heartbeat period"
            f" ({HEARTBEAT_MS:.0f} ms) from {first.kill_ms:.1f} ms; {first.profile.name},"
            f" {first.killed} killed",
            f"{'region':<8}{'measure':<18}{'mean':>9}{'median':>9}{'max':>9}",
        ]
        for region, per in self.stats().items():
            for measure, label in (("stall_ms", "exact ms"), ("binned_stall_ms", "100 ms bins")):
                s = per[measure]
                lines.append(
                    f"{region:<8}{label:<18}{_fmt(s['mean']):>9}{_fmt(s['median']):>9}"
                    f"{_fmt(s['max']):>9}"
                    + (f"  (never resumed in {s['never']:.0f} runs)" if s["never"] else "")
                )
        return "\n".join(lines)


def failover_sweep(
    phases: int,
    *,
    kill_ms: float = KILL_MS,
    progress: Progress | None = None,
    **kwargs: Any,
) -> FailoverSweep:
    """:func:`run_failover` with the kill at ``kill_ms + i * heartbeat / phases``."""
    if phases < 1:
        raise ValueError(f"phases must be >= 1, got {phases}")
    results = []
    for i in range(phases):
        at_ms = kill_ms + i * HEARTBEAT_MS / phases
        result = run_failover(kill_ms=at_ms, **kwargs)
        results.append(result)
        if progress is not None:
            stalls = ", ".join(f"{s.region} {_fmt(s.stall_ms)} ms" for s in result.regions)
            progress(f"[{i + 1}/{phases}] kill at {at_ms:.1f} ms: stall {stalls}")
    return FailoverSweep(results)


def plot(result: FailoverResult, path: str) -> None:
    """Throughput per 100 ms bin per surviving region over time, the kill marked.

    Raises:
        PlotUnavailable: matplotlib is not installed.
    """
    try:
        # Imported by name, lazily: matplotlib is optional (the ``bench`` extra).
        matplotlib = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        pyplot = importlib.import_module("matplotlib.pyplot")
    except ImportError as exc:
        raise PlotUnavailable(
            "--plot needs matplotlib: pip install 'sdpaxos[bench]' (or pip install matplotlib)"
        ) from exc
    fig, ax = pyplot.subplots(figsize=(8, 4))
    for region, counts in result.bins.items():
        xs = [(b + 0.5) * BIN_MS / 1000 for b in range(len(counts))]
        ax.step(xs, [c * 1000 / BIN_MS for c in counts], where="mid", label=region)
    ax.axvline(result.kill_ms / 1000, color="red", linestyle="--", label=f"{result.killed} killed")
    ax.set_xlabel("time (s, virtual)")
    ax.set_ylabel(f"throughput (READY/s, {BIN_MS} ms bins)")
    ax.set_title(
        f"{result.profile.name}: sequencer failover (heartbeat {HEARTBEAT_MS:.0f} ms,"
        f" lease {LEASE_MS:.0f} ms)"
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot.close(fig)
