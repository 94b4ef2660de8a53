"""Where a runtime node's CPU goes, per command: nodes of one or more protocols
on loopback under the throughput experiment's write-only load.

For each protocol and cluster size: a cluster of real node processes
(:class:`bench.runtime_engine.RuntimeRunner`, TLS on, fsync off, no delay), the
closed-loop load of ``python -m bench throughput --engine runtime`` (16-byte
writes, 1,000 sessions per region), ``--repeat`` runs on the same cluster.
Per node and per run:

* CPU milliseconds per 1,000 commands over the measured window (the figure the
  throughput experiment reports; ``/proc/<pid>/task/*/schedstat``);
* over the whole run (warm-up and drain too, so that counters and CPU cover
  the same span), per command answered: the node's driver counters
  (:attr:`sdpaxos.runtime.node.NodeStatus.io`: loop turns, peer frames and
  writes in and out, core messages, client frames) and its system calls
  (``syscr``/``syscw`` of ``/proc/<pid>/io``: reads and writes, hence TLS
  records, not epoll waits);
* with ``--profile K``: ``py-spy`` (if installed) samples node ``K`` over
  every run (``leader``: the sequencer / leader), and the functions with the
  most samples, by own time and in total, are printed.

Figures are medians over the runs. The machine is shared: CPU seconds per
command, not wall-clock throughput, is the figure to compare, and ``uptime`` is
printed with them.

``--client-path``: no cluster; the CPU per command of a node's client path
alone, in this process (decode a 1,000-item ``SUBMIT_MANY``, propose each to a
stand-in core, answer each READY, encode the ``REPLY_MANY``), the minimum over
15 passes of 20 frames: the part of the runtime every command pays at the node
its client talks to, measured without the cluster's noise.

Usage::

    python -m bench.runtime_cpu --protocols sdpaxos,mencius --replicas 3,5 --repeat 3
    python -m bench.runtime_cpu --protocols sdpaxos --replicas 3 --profile leader
    python -m bench.runtime_cpu --client-path
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.engines import Clients, RunSpec
from bench.experiments.throughput_runtime import leader_of
from bench.runtime_engine import RuntimeRunner
from bench.workloads import Workload
from sdpaxos.profiles import uniform
from sdpaxos.runtime.node import IO_COUNTERS

IO_KEYS = IO_COUNTERS


def proc_io(pid: int) -> tuple[int, int, int, int]:
    """(read, write) system calls and bytes of a process so far (``/proc/<pid>/io``)."""
    fields = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = int(value)
    return fields["syscr"], fields["syscw"], fields["rchar"], fields["wchar"]


def node_io(runner: RuntimeRunner, n: int) -> list[dict[str, int]]:
    cluster = runner.cluster
    assert cluster is not None

    async def all_status() -> list[dict[str, int]]:
        out = []
        for k in range(n):
            st = await cluster.status(k, 5.0)
            out.append(dict(st["io"]) if st is not None and "io" in st else {})
        return out

    return asyncio.run(all_status())


def summarize_pyspy(path: Path, top: int) -> str:
    """The functions with the most samples in a py-spy ``raw`` (collapsed) file."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        samples += count
        frames = [
            f.split(" (")[0] + " " + f.split(" (")[-1].rstrip(")").split(":")[0]
            for f in stack.split(";")
        ]
        frames = [f for f in frames if f]
        own[frames[-1]] += count
        for f in set(frames):
            total[f] += count
    lines = [f"{samples} samples; by own time:"]
    lines += [f"  {100 * c / samples:5.1f} %  {f}" for f, c in own.most_common(top)]
    lines.append("in total (the function and what it calls):")
    lines += [f"  {100 * c / samples:5.1f} %  {f}" for f, c in total.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.runtime_cpu", description=__doc__.split("\n")[0]
    )
    p.add_argument("--protocols", default="sdpaxos,mencius", help="comma-separated protocol names")
    p.add_argument("--replicas", default="3,5", help="comma-separated cluster sizes")
    p.add_argument("--repeat", type=int, default=3, help="runs per cluster (medians are reported)")
    p.add_argument("--seconds", type=float, default=2.0, help="measured window per run")
    p.add_argument("--warmup", type=float, default=0.5, help="seconds before each window")
    p.add_argument("--sessions", type=int, default=1000, help="closed-loop clients per region")
    p.add_argument("--payload", type=int, default=16, help="command bytes")
    p.add_argument("--profile", default=None, help="py-spy this node: an id, or 'leader'")
    p.add_argument("--profile-out", default=None, help="keep py-spy's raw files in this directory")
    p.add_argument("--perf", default=None, help="perf record this node (an id, or 'leader')")
    p.add_argument(
        "--instructions",
        action="store_true",
        help="count each node's instructions per command (perf stat): a figure the"
        " machine's load hardly moves, unlike CPU seconds",
    )
    p.add_argument("--top", type=int, default=30, help="functions to print from a profile")
    p.add_argument("--json", default=None, help="write the figures to this file")
    p.add_argument("--client-path", action="store_true", help="the client path alone (no cluster)")
    args = p.parse_args(argv)
    if args.client_path:
        print(f"client path: {client_path_us():.3f} us of CPU per command (min of 15)")
        return 0
    results: list[dict[str, Any]] = []
    print(f"uptime: {os.popen('uptime').read().strip()}", flush=True)
    for n in [int(x) for x in args.replicas.split(",")]:
        for proto in args.protocols.split(","):
            runner = RuntimeRunner(fsync=False)
            try:
                results.append(measure(runner, proto, n, args))
            finally:
                runner.close()
    print(f"uptime: {os.popen('uptime').read().strip()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


def measure(runner: RuntimeRunner, proto: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    leader = leader_of(n)
    spec = RunSpec(
        protocol=proto,
        profile=uniform(n, 0.2, local_rtt_ms=0.1, name=f"lan{n}"),
        workload=Workload(conflict_pct=0.0, read_pct=0.0, payload_bytes=args.payload, seed=1),
        clients=Clients("closed", tuple([args.sessions] * n)),
        duration_ms=args.seconds * 1000,
        warmup_ms=args.warmup * 1000,
        leader=leader,
        seed=1,
    )
    window_cpu: list[list[float]] = []
    run_cpu: list[list[float]] = []
    syscalls: list[list[tuple[float, ...]]] = []
    counters: list[list[dict[str, float]]] = []
    ops: list[float] = []
    instructions: list[list[float]] = []
    profile_dir: Path | None = None
    if args.profile is not None or args.perf is not None or args.instructions:
        # py-spy's, perf's files: kept where asked, else in a temporary directory
        profile_dir = Path(args.profile_out or tempfile.mkdtemp(prefix="rtcpu-pyspy-"))
        profile_dir.mkdir(parents=True, exist_ok=True)
    raws: list[Path] = []
    for r in range(args.repeat):
        if runner.cluster is None:  # start it (a first short run), so that pids are known
            runner.run(
                RunSpec(**{**_fields(spec), "duration_ms": 300.0, "warmup_ms": 100.0}),
                None,
            )
        cluster = runner.cluster
        assert cluster is not None
        pids = [p for p in cluster.pids if p is not None]
        io0 = node_io(runner, n)
        sys0 = [proc_io(pid) for pid in pids]
        cpu0 = [_cpu(pid) for pid in pids]
        spy: subprocess.Popen[bytes] | None = None
        if profile_dir is not None and shutil.which("py-spy"):
            k = leader if args.profile == "leader" else int(args.profile)
            raw = profile_dir / f"{proto}-{n}-node{k}-run{r}.txt"
            raws.append(raw)
            seconds = int(args.warmup + args.seconds + 2)
            spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "-p",
                    str(pids[k]),
                    "-r",
                    "250",
                    "-d",
                    str(seconds),
                    "-f",
                    "raw",
                    "-o",
                    str(raw),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        perf: subprocess.Popen[bytes] | None = None
        if args.perf is not None and profile_dir is not None and shutil.which("perf"):
            k = leader if args.perf == "leader" else int(args.perf)
            data = profile_dir / f"{proto}-{n}-node{k}-run{r}.perf"
            perf = subprocess.Popen(
                [
                    "perf",
                    "record",
                    "-F",
                    "1999",
                    "-p",
                    str(pids[k]),
                    "-o",
                    str(data),
                    "--",
                    "sleep",
                    str(args.warmup + args.seconds),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        counting = (
            [_perf_stat(pid, profile_dir / f"stat-{k}.txt") for k, pid in enumerate(pids)]
            if args.instructions and profile_dir is not None
            else []
        )
        out = runner.run(spec, _say)
        for proc in counting:
            proc.send_signal(signal.SIGINT)
            proc.wait()
        if perf is not None:
            perf.wait()
        if spy is not None:
            spy.wait()
        if runner.cluster is not cluster or not out.ok:
            # The lead moved (a fresh cluster was started) or the run failed:
            # its figures are not comparable; the next run takes the new cluster.
            print(
                f"  run {r}: not counted"
                f" ({'FAILED ' + str(out.verdict) if not out.ok else 'cluster restarted'})",
                flush=True,
            )
            continue
        cpu1 = [_cpu(pid) for pid in pids]
        sys1 = [proc_io(pid) for pid in pids]
        io1 = node_io(runner, n)
        answered = sum(1 for rec in out.records if rec.complete_us is not None)
        per = max(answered, 1)
        if counting and profile_dir is not None:
            instructions.append(
                [_read_stat(profile_dir / f"stat-{k}.txt") / per for k in range(len(pids))]
            )
        cpu = out.extra["cpu"]
        window_cpu.append([c * 1000 for c in cpu["node_cpu_s_per_1000"]])
        ops.append(cpu["ops_per_s"])
        run_cpu.append([(b - a) * 1000 / per * 1000 for a, b in zip(cpu0, cpu1, strict=True)])
        syscalls.append(
            [
                tuple((y - x) / per for x, y in zip(a, b, strict=True))
                for a, b in zip(sys0, sys1, strict=True)
            ]
        )
        counters.append(
            [
                {key: (b.get(key, 0) - a.get(key, 0)) / per for key in IO_KEYS}
                for a, b in zip(io0, io1, strict=True)
            ]
        )
        print(
            f"  {proto} n={n} run {r}: {cpu['ops_per_s']:,.0f} ops/s, CPU ms/1000 per node "
            + " ".join(f"{c:.2f}" for c in window_cpu[-1]),
            flush=True,
        )
    if not ops:
        print(f"{proto}, {n} nodes: no run counted", flush=True)
        return {"protocol": proto, "replicas": n, "runs": 0}

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    result: dict[str, Any] = {
        "protocol": proto,
        "replicas": n,
        "runs": len(ops),
        "window_cpu_ms_per_1000_runs": window_cpu,
        "ops_per_s": med(ops),
        "window_cpu_ms_per_1000": [med([w[k] for w in window_cpu]) for k in range(n)],
        "run_cpu_ms_per_1000": [med([w[k] for w in run_cpu]) for k in range(n)],
        "reads_per_cmd": [med([s[k][0] for s in syscalls]) for k in range(n)],
        "writes_per_cmd": [med([s[k][1] for s in syscalls]) for k in range(n)],
        "bytes_in_per_cmd": [med([s[k][2] for s in syscalls]) for k in range(n)],
        "bytes_out_per_cmd": [med([s[k][3] for s in syscalls]) for k in range(n)],
        "io_per_cmd": [
            {key: med([c[k][key] for c in counters]) for key in IO_KEYS} for k in range(n)
        ],
    }
    if instructions:
        result["instructions_per_cmd_runs"] = instructions
        result["instructions_per_cmd"] = [med([w[k] for w in instructions]) for k in range(n)]
        print(
            "  instructions per command (whole run), per node: "
            + " ".join(f"{x:,.0f}" for x in result["instructions_per_cmd"]),
            flush=True,
        )
    busiest = max(result["window_cpu_ms_per_1000"])
    result["capacity_per_s"] = 1000 / busiest * 1000 if busiest > 0 else 0.0
    print(
        f"{proto}, {n} nodes: {result['ops_per_s']:,.0f} ops/s (median of {result['runs']}"
        f" counted runs of {args.repeat}),"
        f" capacity {result['capacity_per_s']:,.0f}/s with one core per node",
        flush=True,
    )
    print(
        "  node | CPU ms/1000 (window) | (whole run) | syscalls r/w per cmd | bytes r/w per cmd | "
        + " | ".join(IO_KEYS)
    )
    for k in range(n):
        io = result["io_per_cmd"][k]
        print(
            f"  {k}{'*' if k == leader else ' '}   | {result['window_cpu_ms_per_1000'][k]:6.2f}"
            f" | {result['run_cpu_ms_per_1000'][k]:6.2f}"
            f" | {result['reads_per_cmd'][k]:.3f}/{result['writes_per_cmd'][k]:.3f}"
            f" | {result['bytes_in_per_cmd'][k]:.0f}/{result['bytes_out_per_cmd'][k]:.0f} | "
            + " | ".join(f"{io[key]:.3f}" for key in IO_KEYS),
            flush=True,
        )
    if raws and profile_dir is not None:
        merged = profile_dir / f"{proto}-{n}-merged.txt"
        merged.write_text("\n".join(r.read_text() for r in raws if r.exists()))
        print(summarize_pyspy(merged, args.top), flush=True)
        print(f"  (py-spy raw files in {profile_dir})")
    return result


def client_path_us(items: int = 1000, frames: int = 20, passes: int = 15) -> float:
    """See the module docstring (``--client-path``)."""
    import asyncio
    import gc
    import random
    import time

    import msgpack

    from sdpaxos.core.ready import Reply, ReplyKind
    from sdpaxos.protocols import protocol
    from sdpaxos.runtime import frames as rf
    from sdpaxos.runtime.clients import Clients
    from sdpaxos.runtime.driver import Driver
    from sdpaxos.runtime.status import Tally

    class Core:  # stands in for the replica: takes proposals, nothing else
        def __init__(self) -> None:
            self.proposed: list[Any] = []

        def propose(self, command: Any, wait: Any) -> None:
            self.proposed.append(command)

    class Conn:  # a client connection that keeps what the node sends
        kind = rf.Kind.CLIENT

        def __init__(self) -> None:
            self.pending = 0
            self.paused = False
            self.open = True
            self.answers: list[Any] = []
            self.out: list[bytes] = []

        def send(self, payload: bytes) -> None:
            self.out.append(payload)

        def flush(self) -> None:
            self.out = []

        def pause_reading(self) -> None:
            pass

        def resume_reading(self) -> None:
            pass

    core = Core()
    loop = asyncio.new_event_loop()  # never run: nothing is scheduled
    tally = Tally()
    driver = Driver(
        core,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  # no records on this path
        protocol("sdpaxos"),
        loop=loop,
        io=None,  # type: ignore[arg-type]
        outlet=None,  # type: ignore[arg-type]
        tally=tally,
        metrics=None,
        query=None,
        tick_ms=10,
        propose_queue_max=1 << 30,
        snapshot_log_bytes=None,
    )
    driver.running = True
    driver.flush_scheduled = True  # no event loop: nothing is scheduled
    clients = Clients(
        0,
        driver,
        session_table=True,
        tls=False,
        tally=tally,
        metrics=None,
        rng=random.Random(1),
        status=dict,
        admin=lambda operation, argument: {},
    )
    batches = [
        b"\xc1"
        + msgpack.packb(
            [14, [[i, (1 << 62) | i, 7, b"x" * 16, b"u1-%d" % i, 0] for i in range(b, b + items)]],
            use_bin_type=True,
        )
        for b in range(0, items * frames, items)
    ]
    best = math.inf
    gc.disable()
    try:
        for _ in range(passes):
            conn = Conn()
            spent = 0.0
            for data in batches:
                t0 = time.thread_time()
                clients.frame(conn, data)  # type: ignore[arg-type]
                t1 = time.thread_time()
                replies = [Reply(c.client_id, c.seq, ReplyKind.READY) for c in core.proposed]
                core.proposed = []
                t2 = time.thread_time()
                driver._release([], replies, [])
                clients.flush()
                spent += (t1 - t0) + time.thread_time() - t2
            driver.waiting.clear()
            best = min(best, spent / (items * frames) * 1e6)
    finally:
        gc.enable()
        loop.close()
    return best


def _perf_stat(pid: int, path: Path) -> subprocess.Popen[bytes]:
    """``perf stat`` counting the instructions of ``pid`` (all threads) until SIGINT."""
    return subprocess.Popen(
        ["perf", "stat", "-e", "instructions", "-x", ",", "-o", str(path), "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _read_stat(path: Path) -> float:
    for line in path.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("instructions"):
            return float(fields[0]) if fields[0].replace(".", "").isdigit() else math.nan
    return math.nan


def _say(text: str) -> None:
    if text.startswith("runtime:"):  # not the engine's progress every 2 s
        print(f"    {text}", flush=True)


def _cpu(pid: int) -> float:
    from bench.runtime_procs import cpu_seconds_fine

    return cpu_seconds_fine(pid)


def _fields(spec: RunSpec) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}


if __name__ == "__main__":
    sys.exit(main())
