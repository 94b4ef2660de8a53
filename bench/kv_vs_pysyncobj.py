"""The kv-store against PySyncObj 0.3.17, in one run, on this machine.

    python -m bench.kv_vs_pysyncobj                 # about 3 minutes
    python -m bench.kv_vs_pysyncobj --quick --out /tmp/kvbench
    python -m bench.kv_vs_pysyncobj --set-only --skip-pysyncobj   # the SET row alone

1. **PySyncObj**: 3 processes on loopback, its ``ReplDict``, 5,000 writes
   outstanding from inside the leader, memory only (no journal, so no fsync;
   compaction effectively off: see ``bench/pysyncobj_cluster.py`` for every
   setting and why). Writes per second, p50 and p99.
2. **kv-store, fsync off** (the like-for-like comparison): 3 node processes on
   loopback (TLS between them, as by default), no emulated delay;
   ``redis-benchmark`` SET and GET with 16-byte values over 100,000 random
   keys, spread over the 3 nodes, with pipelining (16 per connection, 313
   connections: 5,008 outstanding) and without (5,001 connections, one each).
3. **kv-store, fsync on**: SET, pipelined, the durable figure.

Each row also gives the CPU (user + system, from ``/proc``) its servers and
its load generator used per 1,000 requests: the cost of a write, which other
work on a shared machine disturbs less than the rate. Writes the JSON, a
Markdown table and a PNG (writes/s, p99 and CPU per write side by side) to
``--out``; prints the table and the kv-store-over-PySyncObj ratio. Needs
``redis-benchmark`` (Debian ``redis-tools``) and ``pip install
'.[bench]'`` (PySyncObj, matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from bench.cluster import KvNodes
from bench.redis_benchmark import Address, run_spread
from bench.runtime_procs import cpu_seconds
from kvstore.local import make_kv_cluster

#: Outstanding requests, as in the PySyncObj run (clients x pipeline).
OUTSTANDING = 5000
PIPELINED = (313, 16)
UNPIPELINED = (5001, 1)
#: Loopback, no emulated delay: the sequencer's heartbeat well inside its lease.
PROTOCOL = {"heartbeat_ms": 100.0}


def _log(text: str) -> None:
    print(f"[kv-vs-pysyncobj] {text}", file=sys.stderr, flush=True)


def run_pysyncobj(seconds: float, out: Path) -> dict[str, Any]:
    path = out / "pysyncobj.json"
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("pysyncobj_cluster.py")),
        "--outstanding",
        str(OUTSTANDING),
        "--seconds",
        str(seconds),
        "--json",
        str(path),
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=seconds + 180)
    report: dict[str, Any] = json.loads(path.read_text())
    return report


def run_kvstore(
    fsync: bool, tests: list[str], shapes: list[tuple[int, int]], requests: int
) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="kv-bench-") as d:
        path = make_kv_cluster(d, 3, profile=None, protocol=PROTOCOL)
        with KvNodes(path, fsync=fsync) as cluster:
            cluster.start_up()
            addresses = [cluster.redis_address(k) for k in range(3)]
            for clients, pipeline in shapes:
                for test in tests:
                    _log(
                        f"kv-store fsync {'on' if fsync else 'off'}: {test} -c {clients} "
                        f"-P {pipeline}"
                    )
                    nodes_before = [cpu_seconds(pid) for pid in cluster.pids if pid is not None]
                    load_before = _children_cpu_s()
                    result = run_spread(
                        [Address(h, p) for h, p in addresses],
                        [test],
                        data_size=16,
                        pipeline=pipeline,
                        clients=clients,
                        requests=requests,
                        keyspace=100_000,
                    )
                    # redis-benchmark's processes are reaped: their CPU is the children's.
                    load_s = _children_cpu_s() - load_before
                    nodes = [cpu_seconds(pid) for pid in cluster.pids if pid is not None]
                    nodes_s = sum(nodes) - sum(nodes_before)
                    merged = cast(dict[str, dict[str, float]], result["results"])
                    for name, r in merged.items():
                        rows.append(
                            {
                                "system": f"kv-store (fsync {'on' if fsync else 'off'})",
                                "test": name,
                                "clients": clients,
                                "pipeline": pipeline,
                                "outstanding": clients * pipeline,
                                "per_s": round(r["rps"]),
                                "p50_ms": round(r["p50_ms"], 2),
                                "p99_ms": round(r["p99_ms"], 2),
                                "server_cpu_ms_per_1k": round(1e6 * nodes_s / requests, 2),
                                "load_cpu_ms_per_1k": round(1e6 * load_s / requests, 2),
                            }
                        )
    return rows


def _children_cpu_s() -> float:
    """CPU seconds of this process's reaped children (the redis-benchmarks)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| system | test | outstanding (clients x pipeline) | per second | p50 ms | p99 ms "
        "| server CPU ms / 1k | load generator CPU ms / 1k |"
    )
    lines = [head, "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        load = r["load_cpu_ms_per_1k"]
        lines.append(
            f"| {r['system']} | {r['test']} | {r['outstanding']} ({r['clients']} x "
            f"{r['pipeline']}) | {r['per_s']:,} | {r['p50_ms']} | {r['p99_ms']} "
            f"| {r['server_cpu_ms_per_1k']} | {'in the server' if load is None else load} |"
        )
    return "\n".join(lines)


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    writes = [r for r in rows if r["test"] in ("SET", "writes")]
    labels = [f"{r['system']}\n{r['test']} -P {r['pipeline']}" for r in writes]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(16, 4.5))
    colours = ["#d62728" if r["system"] == "PySyncObj" else "#1f77b4" for r in writes]
    a.barh(labels, [r["per_s"] for r in writes], color=colours)
    a.set_xlabel("writes per second (higher is better)")
    b.barh(labels, [r["p99_ms"] for r in writes], color=colours)
    b.set_xlabel("p99 latency, ms (lower is better)")
    b.set_yticklabels([])
    server = [r["server_cpu_ms_per_1k"] or 0.0 for r in writes]
    load = [r["load_cpu_ms_per_1k"] or 0.0 for r in writes]
    c.barh(labels, server, color=colours, label="servers")
    c.barh(labels, load, left=server, color="#aaaaaa", label="redis-benchmark")
    c.set_xlabel("CPU ms per 1,000 writes (lower is better)")
    c.set_yticklabels([])
    c.legend(loc="lower right")
    fig.suptitle("3 replicas on loopback, 16-byte values, ~5,000 writes outstanding")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kv_vs_pysyncobj", description=__doc__)
    p.add_argument("--quick", action="store_true", help="shorter runs (about a minute)")
    p.add_argument("--out", default="bench/results/kv_vs_pysyncobj")
    p.add_argument("--skip-pysyncobj", action="store_true")
    p.add_argument(
        "--set-only",
        action="store_true",
        help="of the kv-store rows, only SET pipelined with fsync off (before/after runs)",
    )
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seconds = 8.0 if args.quick else 20.0
    requests = 600_000 if args.quick else 2_000_000
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    if not args.skip_pysyncobj:
        _log(f"PySyncObj, {OUTSTANDING} outstanding, {seconds:.0f} s; load average {_load()}")
        pso = run_pysyncobj(seconds, out)
        rows.append(
            {
                "system": "PySyncObj",
                "test": "writes",
                "clients": 1,
                "pipeline": OUTSTANDING,
                "outstanding": OUTSTANDING,
                "per_s": round(pso["result"]["writes_per_s"]),
                "p50_ms": round(pso["result"]["p50_ms"], 2),
                "p99_ms": round(pso["result"]["p99_ms"], 2),
                "server_cpu_ms_per_1k": pso.get("cpu_ms_per_1k_writes"),
                "load_cpu_ms_per_1k": None,  # PySyncObj's load runs inside its leader
            }
        )
    if args.set_only:
        rows += run_kvstore(False, ["set"], [PIPELINED], requests)
    else:
        rows += run_kvstore(False, ["set", "get"], [PIPELINED, UNPIPELINED], requests)
        rows += run_kvstore(True, ["set"], [PIPELINED], requests)
    table = _table(rows)
    pso_rows = [r for r in rows if r["system"] == "PySyncObj"]
    kv = next(r for r in rows if r["system"] == "kv-store (fsync off)" and r["test"] == "SET")
    lines = [table, ""]
    if pso_rows:
        pso_row = pso_rows[0]
        ratio = kv["per_s"] / pso_row["per_s"]
        lines.append(
            f"kv-store SET (fsync off, pipelined) over PySyncObj: {ratio:.2f}x the writes per "
            f"second; p99 {kv['p99_ms']} ms against {pso_row['p99_ms']} ms"
        )
        if pso_row["server_cpu_ms_per_1k"] is not None:
            lines.append(
                f"CPU per 1,000 writes: kv-store {kv['server_cpu_ms_per_1k']} ms in its nodes + "
                f"{kv['load_cpu_ms_per_1k']} ms in redis-benchmark, PySyncObj "
                f"{pso_row['server_cpu_ms_per_1k']} ms (its load generator included)"
            )
    lines.append(
        "CPU: user + system seconds of the 3 server processes over each run (the kv-store "
        "nodes; PySyncObj's processes, its in-process load generator included) and of the "
        "redis-benchmark processes, per 1,000 requests; a machine shared with other work "
        f"inflates wall-clock rates more than these. Load average at the end: {_load()}."
    )
    text = "\n".join(lines)
    print(text)
    (out / "results.md").write_text(text + "\n")
    (out / "results.json").write_text(
        json.dumps({"rows": rows, "seconds": round(time.monotonic() - started)}, indent=2) + "\n"
    )
    try:
        _plot(rows, out / "kv_vs_pysyncobj.png")
    except ImportError:
        _log("matplotlib is not installed: no plot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
