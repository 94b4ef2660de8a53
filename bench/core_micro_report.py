"""What ``python -m bench.core_micro`` runs and reports: its settings, one run's
result, the summary of the timed runs, and their table.

A module of its own so that :mod:`bench.core_micro` (the knobs, the runs, the
command line) stays short; it has no other user.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.round_spec import RoundSpec
from sdpaxos.core import ClusterConfig

_CORE_DEFAULTS = ClusterConfig(replicas=3)


@dataclass(frozen=True, slots=True)
class Settings:
    """One benchmark configuration (the CLI knobs)."""

    replicas: int = 3
    sessions: int = 2000
    commands: int = 200_000
    c_batch_max: int = _CORE_DEFAULTS.c_batch_max
    o_batch_max: int = _CORE_DEFAULTS.o_batch_max
    c_inflight_max: int = _CORE_DEFAULTS.c_inflight_max
    seed: int = 1
    codec: bool = False
    #: Compaction: a snapshot every this many executed slots (None: off).
    snapshot_slots: int | None = None
    #: Also tick every this many rounds (0: only in quiet rounds): the clock moves
    #: ``tick_ms / tick_rounds`` per round. Heartbeats carry the majority-executed
    #: point compaction waits for, so a run under constant load that never goes
    #: quiet needs the clock to move.
    tick_rounds: int = 0
    #: Where records go: "counting" (counted, kept nowhere) or "memory"
    #: (``MemoryStorage``: kept, and truncated behind each snapshot).
    storage: str = "counting"
    #: Record the process's peak RSS when this many commands are READY.
    rss_at: tuple[int, ...] = ()
    #: The sequencer's heartbeat period (and lease), None: the core's default.
    #: Heartbeats announce the majority-executed point, so this sets how often
    #: compaction can happen.
    heartbeat_ms: float | None = None

    def cluster_config(self) -> ClusterConfig:
        hb = self.heartbeat_ms
        return ClusterConfig(
            replicas=self.replicas,
            c_batch_max=self.c_batch_max,
            o_batch_max=self.o_batch_max,
            c_inflight_max=self.c_inflight_max,
            propose_queue_max=max(_CORE_DEFAULTS.propose_queue_max, self.sessions),
            snapshot_slots_min=self.snapshot_slots,
            heartbeat_ms=_CORE_DEFAULTS.heartbeat_ms if hb is None else hb,
            lease_ms=_CORE_DEFAULTS.lease_ms if hb is None else hb,
        )

    def round_spec(self) -> RoundSpec:
        """The round driver's run: the core's own load, exactly ``commands``."""
        tick_ms = _CORE_DEFAULTS.tick_ms
        return RoundSpec(
            "sdpaxos",
            replicas=self.replicas,
            sessions=self.sessions,
            commands=self.commands,
            warmup=0,
            seed=self.seed,
            round_ms=tick_ms / self.tick_rounds if self.tick_rounds else 0.0,
            quiet_ticks=True,
            kv=False,
            exact=True,
            storage=self.storage,
        )


@dataclass(slots=True)
class RunResult:
    """What one run measured and what its verification found."""

    settings: Settings
    #: Until every command is READY at its leader and executed at every replica.
    elapsed_s: float = 0.0
    #: Process CPU time over the same span (the "one core" time).
    cpu_s: float = 0.0
    #: ``cpu_s / elapsed_s``; well below 1 means the machine was busy.
    cpu_share: float = 0.0
    #: Until the last READY reply.
    commit_elapsed_s: float = 0.0
    #: Per replica: until it had executed every command.
    exec_elapsed_s: list[float] = field(default_factory=list)
    steps: int = 0
    rounds: int = 0
    ready_calls: int = 0
    messages_sent: int = 0
    frames: int = 0
    wire_bytes: int = 0
    persist_records: int = 0
    c_instances: int = 0
    o_instances: int = 0
    ticks: int = 0
    committed: int = 0
    executed: list[int] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    rejected: int = 0
    stale: int = 0
    retransmissions: int = 0
    learn_requests: int = 0
    #: Snapshots taken, over every replica.
    snapshots: int = 0
    #: READY commands -> the process's peak RSS (kB) once that many were READY.
    rss_peak_kb: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def committed_per_s(self) -> float:
        return self.committed / self.commit_elapsed_s if self.commit_elapsed_s > 0 else 0.0

    @property
    def executed_per_s(self) -> list[float]:
        return [
            c / t if t > 0 else 0.0 for c, t in zip(self.executed, self.exec_elapsed_s, strict=True)
        ]

    @property
    def executed_everywhere_per_s(self) -> float:
        slowest = max(self.exec_elapsed_s, default=0.0)
        return min(self.executed, default=0) / slowest if slowest > 0 else 0.0

    def rates(self) -> dict[str, float]:
        per_cpu = 1 / self.cpu_s if self.cpu_s > 0 else 0.0
        return {
            "steps_per_s": self.steps_per_s,
            "committed_per_s": self.committed_per_s,
            "executed_everywhere_per_s": self.executed_everywhere_per_s,
            # Whole run (until executed everywhere) over process CPU time: what one
            # core does when the benchmark is not descheduled by other load.
            "steps_per_cpu_s": self.steps * per_cpu,
            "commands_per_cpu_s": self.committed * per_cpu,
            **{f"executed_per_s_r{r}": v for r, v in enumerate(self.executed_per_s)},
        }

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            name: getattr(self, name) for name in self.__slots__ if name != "settings"
        }
        out.update(self.rates())
        out["ok"] = self.ok
        return out


@dataclass(slots=True)
class Summary:
    settings: Settings
    repeat: int
    warmup: int
    gc_enabled: bool
    runs: list[RunResult]
    warmup_problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.warmup_problems and all(r.ok for r in self.runs)

    def stat(self, pick: Callable[[list[float]], float]) -> dict[str, float]:
        keys = self.runs[0].rates().keys()
        return {k: pick([r.rates()[k] for r in self.runs]) for k in keys}

    def to_json(self) -> dict[str, Any]:
        return {
            "benchmark": "core_micro",
            "python": sys.version.split()[0],
            "settings": asdict(self.settings),
            "repeat": self.repeat,
            "warmup_commands": self.warmup,
            "gc_enabled": self.gc_enabled,
            "statistic": "median",
            "median": self.stat(statistics.median),
            "best": self.stat(max),
            "worst": self.stat(min),
            "ok": self.ok,
            "warmup_problems": self.warmup_problems,
            "runs": [r.to_json() for r in self.runs],
        }


def format_table(summary: Summary) -> str:
    s = summary.settings
    med, best, worst = (
        summary.stat(statistics.median),
        summary.stat(max),
        summary.stat(min),
    )
    lines = [
        "sdpaxos core micro-benchmark (one process, in-memory FIFO links, "
        + ("wire codec in the loop)" if s.codec else "no codec)"),
        f"  N={s.replicas}  sessions/replica={s.sessions:,}  commands={s.commands:,}  "
        f"c_batch_max={s.c_batch_max}  o_batch_max={s.o_batch_max}  "
        f"c_inflight_max={s.c_inflight_max}  seed={s.seed}",
        f"  Python {sys.version.split()[0]}, gc {'on' if summary.gc_enabled else 'off'}, "
        f"{summary.repeat} timed run(s) after a {summary.warmup:,}-command warm-up; "
        "median reported",
        "",
        f"  {'metric':<36}{'median':>14}{'best':>14}{'worst':>14}",
    ]

    def row(label: str, key: str) -> None:
        lines.append(f"  {label:<36}{med[key]:>14,.0f}{best[key]:>14,.0f}{worst[key]:>14,.0f}")

    row("messages stepped / s", "steps_per_s")
    row("commands committed (READY) / s", "committed_per_s")
    row("commands executed / s, everywhere", "executed_everywhere_per_s")
    for r in range(s.replicas):
        row(f"  executed / s at replica {r}", f"executed_per_s_r{r}")
    row("messages stepped / CPU s", "steps_per_cpu_s")
    row("commands done / CPU s", "commands_per_cpu_s")

    first = summary.runs[0]
    per_c = first.committed / first.c_instances if first.c_instances else 0.0
    shares = ", ".join(f"{r.cpu_share:.0%}" for r in summary.runs)
    lines += [
        "",
        f"  per run: {first.steps:,} steps in {first.rounds:,} rounds "
        f"({first.steps / max(first.ready_calls, 1):.1f} msgs per step batch, "
        f"{first.steps / max(first.committed, 1):.3f} per command), ticks {first.ticks}",
        f"           {first.c_instances:,} C-instances ({per_c:.1f} commands each), "
        f"{first.o_instances:,} O-instances, {first.persist_records:,} records to persist",
        f"  CPU share of wall time per run: {shares} (low = the machine was busy; "
        "the / CPU s rows discount that)",
    ]
    if s.codec:
        lines.append(
            f"  wire: {first.frames:,} frames, {first.wire_bytes:,} bytes "
            f"({first.wire_bytes / max(first.committed, 1):.1f} bytes per command)"
        )
    if summary.ok:
        lines.append(
            f"  verified: every run, all {s.replicas} replicas executed all "
            f"{s.commands:,} commands, same digest {first.digests[0]}"
        )
    else:
        lines += [f"  FAILED: {problem}" for problem in all_problems(summary)]
    return "\n".join(lines)


def all_problems(summary: Summary) -> list[str]:
    """Every failed check of the warm-up and the timed runs, labelled."""
    out = [f"warm-up: {p}" for p in summary.warmup_problems]
    for i, run in enumerate(summary.runs):
        out += [f"run {i + 1}: {p}" for p in run.problems]
    return out
