"""Benchmark of the linearizability checker on the reference histories.

    python -m bench.check_bench [--histories DIR] [--repeat 3] [--timeout 60]
                                [--full] [--json OUT.json]

Measures, with ``time.perf_counter`` (wall) and ``time.process_time`` (CPU):

* every etcd log of ``MANIFEST.tsv``, checked one after another in this
  process (one core), reading excluded; the total is the number the issue's
  3-second budget is about; the median of ``--repeat`` runs;
* every kv history, in this process and with worker processes (the default
  choice), with a ``--timeout`` deadline; ``c50-bad`` is the hard one;
* with ``--full``, ``c50-bad`` again with every key checked (no stopping at
  the first failing key), to show how far the search gets on each key.

Progress goes to stderr; a Markdown table to stdout; ``--json`` writes every
number. Exit status 1 if a verdict differs from the manifest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from sdpaxos.check import Verdict, check
from sdpaxos.check.formats import load

EXPECTED = {"linearizable": Verdict.LINEARIZABLE, "not-linearizable": Verdict.NOT_LINEARIZABLE}


def _default_histories() -> Path:
    here = Path(__file__).resolve().parents[1]
    for c in (here.parent / "shared" / "histories", Path("/work/shared/histories")):
        if (c / "MANIFEST.tsv").is_file():
            return c
    return here.parent / "shared" / "histories"


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _timed(history: Any, model: Any, **kw: Any) -> tuple[Any, float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    result = check(history, model, **kw)
    return result, time.perf_counter() - w0, time.process_time() - c0


def run(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(args.histories)
    rows = [
        line.split("\t")
        for line in (root / "MANIFEST.tsv").read_text().splitlines()[1:]
        if line.strip()
    ]
    out: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "settings": {"repeat": args.repeat, "timeout_s": args.timeout},
        "mismatches": [],
    }

    etcd = [
        (name, EXPECTED[exp], load(root / name, fmt))
        for name, exp, fmt in rows
        if fmt == "jepsen-etcd-log"
    ]
    totals_wall, totals_cpu = [], []
    slowest: list[tuple[float, str]] = []
    for r in range(args.repeat):
        wall = cpu = 0.0
        per: list[tuple[float, str]] = []
        for name, expected, loaded in etcd:
            result, w, c = _timed(loaded.history, loaded.model, processes=1, timeout_s=args.timeout)
            wall += w
            cpu += c
            per.append((w, name))
            if result.verdict is not expected and r == 0:
                out["mismatches"].append(name)
        totals_wall.append(wall)
        totals_cpu.append(cpu)
        slowest = sorted(per, reverse=True)[:3]
        _progress(
            f"etcd run {r + 1}/{args.repeat}: {len(etcd)} logs in {wall:.3f} s wall, "
            f"{cpu:.3f} s CPU"
        )
    out["etcd"] = {
        "logs": len(etcd),
        "operations": sum(len(x[2].history) for x in etcd),
        "total_wall_s_median": statistics.median(totals_wall),
        "total_wall_s_runs": totals_wall,
        "total_cpu_s_median": statistics.median(totals_cpu),
        "slowest": [{"log": n, "wall_s": w} for w, n in slowest],
    }

    kv = []
    for name, exp, fmt in rows:
        if fmt != "kv-edn-lines":
            continue
        loaded = load(root / name, fmt)
        for label, processes in (("1 process", 1), ("auto", None)):
            result, w, c = _timed(
                loaded.history, loaded.model, processes=processes, timeout_s=args.timeout
            )
            if result.verdict is not EXPECTED[exp]:
                out["mismatches"].append(f"{name} ({label})")
            checked = [p for p in result.partitions if p.checked]
            kv.append(
                {
                    "history": name,
                    "mode": label,
                    "processes": result.processes,
                    "operations": len(loaded.history),
                    "expected": exp,
                    "verdict": str(result.verdict),
                    "wall_s": w,
                    "cpu_s_this_process": c,
                    "keys_checked": len(checked),
                    "keys": len(result.partitions),
                    "configurations": sum(p.configs for p in checked),
                }
            )
            _progress(
                f"{name} [{label}]: {result.verdict} in {w:.3f} s "
                f"({len(checked)}/{len(result.partitions)} keys checked)"
            )
    out["kv"] = kv

    if args.full:
        loaded = load(root / "kv/c50-bad.txt", "kv")
        _progress(f"c50-bad, every key, {args.timeout:g} s deadline (this takes a while)")
        result, w, c = _timed(
            loaded.history,
            loaded.model,
            processes=None,
            timeout_s=args.timeout,
            stop_on_failure=False,
        )
        out["c50_bad_every_key"] = {
            "verdict": str(result.verdict),
            "wall_s": w,
            "keys": [
                {
                    "key": p.key,
                    "operations": len(p.indices),
                    "verdict": str(p.verdict),
                    "configurations": p.configs,
                    "memo_full": p.memo_full,
                    "search_s": p.elapsed_s,
                    "longest_prefix": len(p.order),
                }
                for p in result.partitions
            ],
        }
        for p in result.partitions:
            _progress(
                f"  key {p.key}: {p.verdict} after {p.configs} configurations, {p.elapsed_s:.2f} s"
            )
    return out


def markdown(res: dict[str, Any]) -> str:
    e = res["etcd"]
    lines = [
        "| history | mode | operations | verdict | wall s |",
        "|---|---|---:|---|---:|",
        f"| all {e['logs']} etcd logs (sum, median of {res['settings']['repeat']}) | 1 process "
        f"| {e['operations']} | as expected | {e['total_wall_s_median']:.3f} |",
    ]
    for row in res["kv"]:
        lines.append(
            f"| {row['history']} | {row['mode']} ({row['processes']}) | {row['operations']} "
            f"| {row['verdict']} ({row['keys_checked']}/{row['keys']} keys) | {row['wall_s']:.3f} |"
        )
    if "c50_bad_every_key" in res:
        full = res["c50_bad_every_key"]
        lines += [
            "",
            "| c50-bad key | operations | verdict | configurations | search s |",
            "|---|---:|---|---:|---:|",
        ]
        for k in full["keys"]:
            lines.append(
                f"| {k['key']} | {k['operations']} | {k['verdict']} "
                f"| {k['configurations']} | {k['search_s']:.2f} |"
            )
    slow = ", ".join(f"{s['log']} {s['wall_s']:.3f} s" for s in e["slowest"])
    lines += ["", f"Slowest etcd logs: {slow}. Mismatches: {res['mismatches'] or 'none'}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.check_bench", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--histories", default=str(_default_histories()), help="folder with MANIFEST.tsv"
    )
    p.add_argument("--repeat", type=int, default=3, help="runs over the etcd logs (median)")
    p.add_argument("--timeout", type=float, default=60.0, help="deadline per history, seconds")
    p.add_argument("--full", action="store_true", help="also check every key of c50-bad")
    p.add_argument("--json", metavar="OUT", help="write all numbers as JSON ('-' for stdout)")
    args = p.parse_args(argv)
    res = run(args)
    if args.json == "-":
        print(json.dumps(res, indent=2, default=str))
    else:
        print(markdown(res))
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2, default=str) + "\n")
    return 1 if res["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
