"""Memory and throughput with compaction: does the core stay flat over 10 million commands?

Two questions, one invocation (``docs/recovery.md`` section 16):

* **memory**: one process runs the core micro-benchmark's closed loop
  (:mod:`bench.core_micro`, N = 3, 2,000 sessions per replica) with compaction on
  and ``MemoryStorage`` (records kept, truncated behind each snapshot) for
  ``--commands`` commands, and records its peak RSS (``VmHWM``) every million
  READY commands. Flat means the peak after 10M is within 1.2x of the peak after
  1M.
* **throughput**: ``--repeat`` pairs of fresh processes, compaction off then on,
  ``--rate-commands`` commands each, the same settings otherwise; the median
  rates and their ratio. Within 10% is the bar.

Each measurement runs in its own process: a peak RSS is a process's high-water
mark, and one run's garbage would otherwise count against the next.

    python -m bench.compaction                       # 10M commands; several minutes
    python -m bench.compaction --commands 2000000 --rate-commands 300000 --repeat 1

The clock: the benchmark ticks every round (``tick_rounds=1``) and the sequencer
sends a heartbeat every :data:`HEARTBEAT_MS` (ten rounds), in both modes, so
that heartbeats carry the majority-executed point compaction waits for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.core_micro import Settings, run_once

MILLION = 1_000_000
#: Compaction on: a snapshot every this many executed slots.
SNAPSHOT_SLOTS = 64
#: Heartbeats (which announce the majority-executed point) every 10 rounds of
#: the benchmark's clock, in both modes: compaction then waits ~25,000 commands.
HEARTBEAT_MS = 100.0
#: The bars of the issue: peak RSS growth from 1M to 10M, and the throughput cost.
RSS_GROWTH_MAX = 1.2
RATE_COST_MAX = 0.10


def _child(settings: Settings) -> dict[str, Any]:
    """Run in a fresh interpreter; returns what it measured."""
    payload = json.dumps(asdict(settings))
    out = subprocess.run(
        [sys.executable, "-m", "bench.compaction", "--child", payload],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _run_child(payload: str) -> int:
    raw = json.loads(payload)
    raw["rss_at"] = tuple(raw["rss_at"])
    res = run_once(Settings(**raw))
    print(
        json.dumps(
            {
                "ok": res.ok,
                "problems": res.problems[:5],
                "committed": res.committed,
                "committed_per_s": res.committed_per_s,
                "commands_per_cpu_s": res.rates()["commands_per_cpu_s"],
                "snapshots": res.snapshots,
                "persist_records": res.persist_records,
                "rss_peak_kb": {str(k): v for k, v in res.rss_peak_kb.items()},
                "elapsed_s": res.elapsed_s,
            }
        )
    )
    return 0 if res.ok else 1


def measure(commands: int, rate_commands: int, repeat: int, progress: bool) -> dict[str, Any]:
    base = Settings(tick_rounds=1, storage="memory", heartbeat_ms=HEARTBEAT_MS)

    def say(text: str) -> None:
        if progress:
            print(text, file=sys.stderr, flush=True)

    say(f"memory: {commands:,} commands with compaction on, one process ...")
    t0 = time.perf_counter()
    milestones = tuple(range(MILLION, commands + 1, MILLION)) or (commands,)
    memory = _child(
        replace(base, commands=commands, snapshot_slots=SNAPSHOT_SLOTS, rss_at=milestones)
    )
    say(f"  done in {time.perf_counter() - t0:.0f} s: {memory['snapshots']} snapshots")
    rates: dict[str, list[float]] = {"off": [], "on": []}
    cpu_rates: dict[str, list[float]] = {"off": [], "on": []}
    for k in range(repeat):
        for mode, slots in (("off", None), ("on", SNAPSHOT_SLOTS)):
            say(f"throughput {k + 1}/{repeat}, compaction {mode}: {rate_commands:,} commands ...")
            r = _child(replace(base, commands=rate_commands, snapshot_slots=slots))
            if not r["ok"]:
                raise RuntimeError(f"compaction {mode} failed: {r['problems']}")
            rates[mode].append(r["committed_per_s"])
            cpu_rates[mode].append(r["commands_per_cpu_s"])
    rss = {int(k): v for k, v in memory["rss_peak_kb"].items()}
    first, last = rss[min(rss)], rss[max(rss)]
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    cpu_off, cpu_on = statistics.median(cpu_rates["off"]), statistics.median(cpu_rates["on"])
    return {
        "benchmark": "compaction",
        "python": sys.version.split()[0],
        "snapshot_slots": SNAPSHOT_SLOTS,
        "memory": {
            "ok": memory["ok"],
            "commands": commands,
            "snapshots": memory["snapshots"],
            "peak_rss_kb": rss,
            "growth": last / first,
            "flat": memory["ok"] and last / first <= RSS_GROWTH_MAX,
        },
        "throughput": {
            "commands": rate_commands,
            "repeat": repeat,
            "committed_per_s": rates,
            "commands_per_cpu_s": cpu_rates,
            "median_off": off,
            "median_on": on,
            "ratio": on / off,
            "cpu_ratio": cpu_on / cpu_off,
            "within": on / off >= 1 - RATE_COST_MAX,
        },
    }


def table(result: dict[str, Any]) -> str:
    mem, thr = result["memory"], result["throughput"]
    cpu_off = statistics.median(thr["commands_per_cpu_s"]["off"])
    cpu_on = statistics.median(thr["commands_per_cpu_s"]["on"])
    lines = [
        f"memory, compaction on (a snapshot every {result['snapshot_slots']} slots),"
        f" {mem['commands']:,} commands, {mem['snapshots']} snapshots:",
        "",
        "| READY commands | peak RSS (MB) |",
        "|---:|---:|",
    ]
    for k, v in sorted(mem["peak_rss_kb"].items()):
        lines.append(f"| {k:,} | {v / 1024:.1f} |")
    lines += [
        "",
        f"peak RSS after the last milestone / after the first: {mem['growth']:.3f}"
        f" (bar: <= {RSS_GROWTH_MAX}) -> {'flat' if mem['flat'] else 'NOT FLAT'}",
        "",
        f"throughput, {thr['commands']:,} commands, median of {thr['repeat']}"
        " process pairs (off, on):",
        "",
        "| compaction | committed/s | per CPU s |",
        "|---|---:|---:|",
        f"| off | {thr['median_off']:,.0f} | {cpu_off:,.0f} |",
        f"| on | {thr['median_on']:,.0f} | {cpu_on:,.0f} |",
        "",
        f"on / off: {thr['ratio']:.3f} (per CPU s: {thr['cpu_ratio']:.3f};"
        f" bar: >= {1 - RATE_COST_MAX:.2f}) -> {'within' if thr['within'] else 'NOT within'}",
    ]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> bool:
    """Peak RSS against READY commands; False if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rss = sorted(result["memory"]["peak_rss_kb"].items())
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([k / MILLION for k, _ in rss], [v / 1024 for _, v in rss], marker="o")
    ax.set_xlabel("READY commands (millions)")
    ax.set_ylabel("peak RSS (MB)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"core, N = 3, compaction every {result['snapshot_slots']} slots")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.compaction", description=__doc__.split("\n")[0]
    )
    p.add_argument("--commands", type=int, default=10 * MILLION, help="commands of the memory run")
    p.add_argument("--rate-commands", type=int, default=MILLION, help="commands per throughput run")
    p.add_argument("--repeat", type=int, default=3, help="throughput process pairs (median)")
    p.add_argument("--out", type=Path, help="write compaction.json, compaction.md and rss.png here")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        return _run_child(args.child)
    if args.commands < 1 or args.rate_commands < 1 or args.repeat < 1:
        p.error("--commands, --rate-commands and --repeat must be >= 1")
    result = measure(args.commands, args.rate_commands, args.repeat, not args.quiet)
    text = table(result)
    print(json.dumps(result, indent=2) if args.json else text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "compaction.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "compaction.md").write_text(text + "\n")
        if not plot(result, args.out / "rss.png"):
            print("(no plot: matplotlib is not installed)", file=sys.stderr)
    ok = result["memory"]["flat"] and result["throughput"]["within"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
