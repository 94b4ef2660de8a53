"""``kvstore demo``: what the kv-store does, in about a minute, on this machine.

1. starts a local cluster (3 node processes on the ``paper3`` delay profile:
   each link delayed as between the paper's regions);
2. runs a mixed workload (GET, SET, CAS, DEL on a few keys) from clients in
   every region, each through redis-py to its region's node, with a progress bar;
3. half-way, kills the sequencer with SIGKILL and restarts it a few seconds later;
4. prints per-region latency and throughput, checks the recorded history for
   linearizability (``sdpaxos.check``), writes the history (JSON lines), a
   summary (JSON) and a latency plot (SVG), and exits 0 if it is linearizable.

Its options are checked before anything starts (one line and exit 2 for a bad
one): 3 or 5 replicas (the ``paper3`` or ``paper5`` profile unless told), at
least :data:`SECONDS_MIN` seconds, and an ``--out`` folder that is new or
empty unless ``--force``. Ctrl-C stops the cluster, says so in one line, and
leaves no folder behind that it made.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdpaxos.profiles import ProfileError, builtin, sdpaxos_commit_ms
from sdpaxos.runtime.cliargs import one_line

if TYPE_CHECKING:  # the workload and the checker are imported when the demo runs
    from kvstore.workload import Sample

__all__ = ["DEMO_REPLICAS", "SECONDS_MAX", "SECONDS_MIN", "add_demo_arguments", "run_demo"]

#: Clients per region (each one operation at a time).
CLIENTS_PER_REGION = 4
#: How long the killed sequencer stays down.
DOWN_S = 3.0
#: Protocol timers for a demo on loopback: a dead sequencer is noticed in about
#: a second (the defaults are for a real wide-area network).
DEMO_PROTOCOL = {
    "heartbeat_ms": 200.0,
    "lease_ms": 600.0,
    "candidate_timeout_ms": 800.0,
    "retransmit_ms": 300.0,
    "learn_ms": 300.0,
    "recover_ms": 600.0,
}
#: The linearizability check's time limit.
CHECK_TIMEOUT_S = 60.0
#: Cluster sizes the demo runs: a failover needs a majority left when the
#: sequencer is killed (so not 1), and the paper's profiles have 3 and 5 regions.
DEMO_REPLICAS = (3, 5)
#: Shortest run: the sequencer is killed half-way and stays down DOWN_S, and a
#: shorter run would end before it is back (or before anything ran at all).
SECONDS_MIN = 2 * DOWN_S + 2
#: Longest run (the history is kept in memory and checked whole).
SECONDS_MAX = 3600.0
#: What the demo writes into ``--out``.
OUTPUTS = ("history.jsonl", "summary.json", "latency.svg")
_BAR_WIDTH = 30


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def commit_formula_ms(profile: str, replicas: int) -> dict[str, float]:
    """The protocol's commit latency per region, with the sequencer where the
    cluster starts it (node 0): what the paper's formula promises, printed beside
    what the clients saw. Empty without a profile (``--profile none``) or when
    the cluster uses only some of the profile's regions."""
    if profile == "none":
        return {}
    delays = builtin(profile)
    if delays.size != replicas:
        return {}
    return sdpaxos_commit_ms(delays, 0)


def _row(sample: Sample, seconds: float, formula_ms: float | None = None) -> dict[str, Any]:
    every = sample.read_ms + sample.write_ms
    return {
        "region": sample.region,
        "commit_formula_ms": formula_ms,
        "operations": len(every),
        "ops_per_s": round(len(every) / seconds, 1),
        "read_mean_ms": round(statistics.fmean(sample.read_ms), 1) if sample.read_ms else None,
        "read_p99_ms": round(_percentile(sample.read_ms, 0.99), 1) if sample.read_ms else None,
        "write_mean_ms": round(statistics.fmean(sample.write_ms), 1) if sample.write_ms else None,
        "write_p50_ms": round(_percentile(sample.write_ms, 0.5), 1) if sample.write_ms else None,
        "write_p99_ms": round(_percentile(sample.write_ms, 0.99), 1) if sample.write_ms else None,
        "errors": sample.errors,
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = [
        "region",
        "commit formula",
        "write p50",
        "write mean",
        "write p99",
        "read mean",
        "read p99",
        "ops",
        "ops/s",
        "errors",
    ]
    keys = [
        "region",
        "commit_formula_ms",
        "write_p50_ms",
        "write_mean_ms",
        "write_p99_ms",
        "read_mean_ms",
        "read_p99_ms",
        "operations",
        "ops_per_s",
        "errors",
    ]
    lines = [head] + [["-" if r.get(k) is None else str(r[k]) for k in keys] for r in rows]
    widths = [max(len(line[k]) for line in lines) for k in range(len(head))]
    out = ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(out) + (
        "\n(latencies in ms; commit formula: the protocol's one round trip with the"
        " sequencer at node 0, docs/protocol.md section 5.6; errors: client requests"
        " that failed, e.g. while the sequencer was down)"
    )


def _svg(
    rows: list[dict[str, Any]], timeline: list[tuple[float, float]], events: list[tuple[float, str]]
) -> str:
    """Two panels: mean and p99 write and read latency per region (bars), and
    operations per second over time with the failover marked."""
    w, h, pad = 760, 560, 50
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="15">'
        "kvstore demo: latency per region, and throughput over time</text>",
    ]
    series = [
        ("write_mean_ms", "write mean", "#1f77b4"),
        ("write_p99_ms", "write p99", "#aec7e8"),
        ("read_mean_ms", "read mean", "#ff7f0e"),
        ("read_p99_ms", "read p99", "#ffbb78"),
    ]
    top, bottom = 40, 260
    values = [r[k] for r in rows for k, _, _ in series if r[k] is not None]
    vmax = max(values) * 1.1 if values else 1.0
    group_w = (w - 2 * pad) / max(1, len(rows))
    bar_w = group_w / (len(series) + 1)
    parts.append(f'<line x1="{pad}" y1="{bottom}" x2="{w - pad}" y2="{bottom}" stroke="black"/>')
    step = _nice_step(vmax)
    tick = 0.0
    while tick <= vmax:
        y = bottom - tick / vmax * (bottom - top)
        parts.append(f'<text x="{pad - 5}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
        parts.append(
            f'<line x1="{pad}" y1="{y:.1f}" x2="{w - pad}" y2="{y:.1f}" stroke="#ddd" '
            'stroke-width="0.5"/>'
        )
        tick += step
    parts.append(
        f'<text x="12" y="{(top + bottom) / 2}" transform="rotate(-90 12 '
        f'{(top + bottom) / 2})" text-anchor="middle">latency (ms)</text>'
    )
    for i, r in enumerate(rows):
        x0 = pad + i * group_w + bar_w / 2
        for j, (k, _, colour) in enumerate(series):
            v = r[k]
            if v is None:
                continue
            bh = v / vmax * (bottom - top)
            parts.append(
                f'<rect x="{x0 + j * bar_w:.1f}" y="{bottom - bh:.1f}" width="{bar_w * 0.9:.1f}" '
                f'height="{bh:.1f}" fill="{colour}"><title>{r["region"]} {k}: {v}</title></rect>'
            )
        parts.append(
            f'<text x="{pad + (i + 0.5) * group_w:.1f}" y="{bottom + 15}" '
            f'text-anchor="middle">{r["region"]}</text>'
        )
    for j, (_, label, colour) in enumerate(series):
        x = pad + j * 150
        parts.append(f'<rect x="{x}" y="{bottom + 25}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{x + 16}" y="{bottom + 35}">{label}</text>')
    # throughput over time
    top2, bottom2 = 330, h - 60
    if timeline:
        parts.extend(_throughput_panel(timeline, events, pad, w - pad, top2, bottom2))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _nice_step(span: float, ticks: int = 5) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) giving about ``ticks`` ticks."""
    raw = max(span, 1e-9) / ticks
    power: float = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= raw)


def _throughput_panel(
    timeline: list[tuple[float, float]],
    events: list[tuple[float, str]],
    left: float,
    right: float,
    top: float,
    bottom: float,
) -> list[str]:
    """Operations per second over time: ticks on both axes, one caption per
    axis, and the event labels on rows of their own so that two close events
    (the kill and the restart) never print on top of each other."""
    tmax = max(t for t, _ in timeline) or 1.0
    rmax = max(v for _, v in timeline) * 1.1 or 1.0

    def x(t: float) -> float:
        return left + t / tmax * (right - left)

    def y(v: float) -> float:
        return bottom - v / rmax * (bottom - top)

    pts = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in timeline)
    parts = [
        f'<polyline points="{pts}" fill="none" stroke="#2ca02c" stroke-width="1.5"/>',
        f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="black"/>',
    ]
    step = _nice_step(rmax)
    v = 0.0
    while v <= rmax:
        parts.append(f'<text x="{left - 5}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
        parts.append(
            f'<line x1="{left}" y1="{y(v):.1f}" x2="{right}" y2="{y(v):.1f}" '
            'stroke="#ddd" stroke-width="0.5"/>'
        )
        v += step
    step = _nice_step(tmax, 8)
    t = 0.0
    while t <= tmax:
        parts.append(f'<text x="{x(t):.1f}" y="{bottom + 15}" text-anchor="middle">{t:g}</text>')
        t += step
    middle = (top + bottom) / 2
    parts.append(
        f'<text x="{(left + right) / 2}" y="{bottom + 32}" text-anchor="middle">'
        "time since the start (s)</text>"
    )
    parts.append(
        f'<text x="12" y="{middle}" transform="rotate(-90 12 {middle})" '
        'text-anchor="middle">operations/s, all regions</text>'
    )
    for row, (t, label) in enumerate(sorted(events)):
        xe = x(t)
        parts.append(
            f'<line x1="{xe:.1f}" y1="{top}" x2="{xe:.1f}" y2="{bottom}" stroke="red" '
            'stroke-dasharray="4 3"/>'
        )
        parts.append(f'<text x="{xe + 3:.1f}" y="{top + 12 + 14 * row}" fill="red">{label}</text>')
    return parts


def _timeline(samples: dict[str, Sample], seconds: float) -> list[tuple[float, float]]:
    buckets = [0] * (int(seconds) + 1)
    for s in samples.values():
        for t in s.done_at_s:
            if 0 <= t < len(buckets):
                buckets[int(t)] += 1
    return [(k + 0.5, float(n)) for k, n in enumerate(buckets[: int(seconds)])]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (math.isfinite(value) and SECONDS_MIN <= value <= SECONDS_MAX):
        raise argparse.ArgumentTypeError(
            f"expected {SECONDS_MIN:g} to {SECONDS_MAX:g} seconds (the sequencer is killed"
            f" half-way and stays down {DOWN_S:g} s), got {text}"
        )
    return value


def _replicas(text: str) -> int:
    try:
        value: int | None = int(text)
    except ValueError:
        value = None
    if value is None or value not in DEMO_REPLICAS:
        raise argparse.ArgumentTypeError(
            f"expected {' or '.join(map(str, DEMO_REPLICAS))} (a failover needs a majority"
            f" left; the profiles paper3 and paper5 have 3 and 5 regions), got {text}"
        )
    return value


def add_demo_arguments(d: argparse.ArgumentParser) -> None:
    """``kvstore demo``'s options (checked as they are read)."""
    d.add_argument(
        "--seconds",
        type=_seconds,
        default=40.0,
        help=f"how long the workload runs ({SECONDS_MIN:g} to {SECONDS_MAX:g}; default 40)",
    )
    d.add_argument("--replicas", type=_replicas, default=3, help="3 (default) or 5")
    d.add_argument(
        "--profile",
        default=None,
        help="delay profile (default paper3 for 3 replicas, paper5 for 5), or 'none'",
    )
    d.add_argument("--out", default="kvstore-demo", help="where the history and plot go")
    d.add_argument(
        "--force", action="store_true", help="write into --out even if it holds files already"
    )
    d.add_argument("--seed", type=int, default=1)


def _check_profile(name: str, replicas: int) -> None:
    if name == "none":
        return
    size = builtin(name).size
    if size < replicas:
        raise ProfileError(
            f"profile {name} has {size} regions, --replicas is {replicas}"
            f" (paper5 has 5, or --profile none)"
        )


def _prepare_out(out: Path, force: bool) -> bool:
    """Make ``out`` (True if this made it); refuse a folder holding files unless ``force``."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {out} is a file")
    if out.is_dir():
        if any(out.iterdir()) and not force:
            raise FileExistsError(
                f"--out {out} exists and holds files; --force writes"
                f" {', '.join(OUTPUTS)} into it, or choose another --out"
            )
        return False
    out.mkdir(parents=True)
    return True


def run_demo(args: argparse.Namespace) -> int:
    """Check the options, run the demo, and clean up after Ctrl-C (exit 130)."""
    profile = args.profile or f"paper{args.replicas}"
    out = Path(args.out)
    try:
        _check_profile(profile, args.replicas)
        made = _prepare_out(out, args.force)
    except (ValueError, OSError) as exc:  # a ProfileError is a ValueError
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    try:
        return _run(args, profile, out)
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        print("interrupted: the cluster is stopped and nothing was written", file=sys.stderr)
        return 130
    finally:
        if made:  # the folder this run made, if it is still empty
            with contextlib.suppress(OSError):
                out.rmdir()


def _run(args: argparse.Namespace, profile: str, out: Path) -> int:
    from kvstore.cluster import ProcessCluster
    from kvstore.local import make_kv_cluster
    from kvstore.workload import Workload, run_clients
    from sdpaxos.check import KeyValue, check

    seconds = float(args.seconds)
    with tempfile.TemporaryDirectory(prefix="kvstore-demo-") as d:
        path = make_kv_cluster(
            d,
            args.replicas,
            profile=None if profile == "none" else profile,
            protocol=DEMO_PROTOCOL,
        )
        cluster = ProcessCluster(path, bootstrap=True)
        with cluster:
            print(f"starting {args.replicas} kv-store nodes (profile {profile}) ...", flush=True)
            cluster.start_all()
            try:
                cluster.wait_ready()
            except (RuntimeError, TimeoutError) as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 1
            regions = [cfg.node.me.region for cfg in cluster.configs]
            addresses = [cfg.redis_address for cfg in cluster.configs]
            for k, (region, (host, port)) in enumerate(zip(regions, addresses, strict=True)):
                print(f"  node {k} in {region}: redis://{host}:{port}")
            events: list[tuple[float, str]] = []
            state: dict[str, Any] = {"killed": None, "killed_at": None, "restarted": False}

            def tick(elapsed: float, done: int) -> None:
                if state["killed"] is None and elapsed >= seconds / 2:
                    victim = cluster.sequencer()
                    victim = 0 if victim is None else victim
                    cluster.kill(victim)
                    state["killed"], state["killed_at"] = victim, elapsed
                    events.append((elapsed, f"sequencer (node {victim}) killed"))
                elif (
                    state["killed"] is not None
                    and not state["restarted"]
                    and elapsed >= state["killed_at"] + DOWN_S
                ):
                    cluster.start(state["killed"])
                    state["restarted"] = True
                    events.append((elapsed, f"node {state['killed']} restarted"))
                filled = int(_BAR_WIDTH * min(1.0, elapsed / seconds))
                note = events[-1][1] if events else "running"
                bar = "#" * filled + "." * (_BAR_WIDTH - filled)
                sys.stderr.write(
                    f"\r[{bar}] {elapsed:4.0f}/{seconds:.0f} s  {done:6d} ops  {note:<32}"
                )
                sys.stderr.flush()

            result = asyncio.run(
                run_clients(
                    addresses,
                    regions,
                    clients_per_node=CLIENTS_PER_REGION,
                    seconds=seconds,
                    workload=Workload(),
                    seed=args.seed,
                    on_tick=tick,
                )
            )
            sys.stderr.write("\n")
    formula = commit_formula_ms(profile, args.replicas)
    rows = [_row(result.samples[r], result.seconds, formula.get(r)) for r in regions]
    history = result.recorder.history()
    print()
    print(_table(rows))
    total = sum(r["operations"] for r in rows)
    print(f"throughput: {total / result.seconds:.0f} operations/s over {result.seconds:.0f} s")
    for t, label in events:
        print(f"at {t:5.1f} s: {label}")
    if not any(not op.is_open for op in history):
        # An empty history is trivially linearizable; saying so would claim a check.
        print("error: no operation completed: nothing to check", file=sys.stderr)
        return 1
    print(f"checking {len(history)} operations for linearizability ...", flush=True)
    started = time.monotonic()
    verdict = check(history, KeyValue(), timeout_s=CHECK_TIMEOUT_S)
    print(verdict.describe().splitlines()[0], f"({time.monotonic() - started:.1f} s)")
    try:
        _write(out, history, rows, events, result, args, profile, verdict)
    except OSError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    print(f"wrote {', '.join(str(out / name) for name in OUTPUTS)}")
    if not verdict.ok:
        print(verdict.describe())
    return 0 if verdict.ok else 1


def _write(
    out: Path,
    history: Any,
    rows: list[dict[str, Any]],
    events: list[tuple[float, str]],
    result: Any,
    args: argparse.Namespace,
    profile: str,
    verdict: Any,
) -> None:
    from sdpaxos.check.formats import write_jsonl

    write_jsonl(history, out / "history.jsonl")
    timeline = _timeline(result.samples, result.seconds)
    (out / "latency.svg").write_text(_svg(rows, timeline, events))
    summary = {
        "replicas": args.replicas,
        "profile": profile,
        "seconds": round(result.seconds, 1),
        "rows": rows,
        "events": events,
        "operations": len(history),
        "verdict": verdict.verdict.value,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
