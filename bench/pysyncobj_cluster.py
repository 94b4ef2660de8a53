"""PySyncObj 0.3.17 baseline: 3 processes on loopback, a ``ReplDict``, N writes outstanding.

What runs
---------
This script (the *orchestrator*) starts 3 node processes (this script again,
``--node-child``), each a ``SyncObj`` on a free ``127.0.0.1`` port with one
``pysyncobj.batteries.ReplDict`` consumer. Every node runs in its own process
group and is ended on every exit path (quit command, then SIGTERM, then
SIGKILL to the group, each with a timeout; ``atexit`` and SIGTERM/SIGINT
handlers too).

Where the load comes from
-------------------------
PySyncObj has no client protocol: commands are submitted by calling a
``@replicated`` method on a ``SyncObj`` member, and a follower forwards them to
the leader (``apply_command``), which answers with the log index; the callback
fires when the entry is applied *locally*. So the load generator runs
**inside a node process**, as PySyncObj is meant to be used. ``--submit-at
leader`` (default) puts it in the leader, the fastest place (no forwarding
hop); ``--submit-at all`` splits the outstanding requests over the 3 nodes,
like clients spread over every kv-store node.

The load is a closed loop: ``--outstanding`` (default 5,000) ``ReplDict.set``
calls with ``callback=``; each callback (run on PySyncObj's tick thread)
records the latency and submits the next write at once. Keys are
``k<i mod keyspace>`` (default 100,000 keys, like ``redis-benchmark -r
100000``), values 16 random bytes. After ``--warmup`` seconds the window opens
for ``--seconds``; writes/s = callbacks that reported success in the window /
window length, latencies (submit to callback) of those writes give p50/p99.

Settings (``SyncObjConf``)
--------------------------
* ``appendEntriesUseBatch=True`` (the default): the leader appends queued
  commands to its log and ships them in ``append_entries`` batches of up to
  ``appendEntriesBatchSizeBytes``; the docs say it is the throughput setting.
  Unbatched mode sends one ``append_entries`` per command and is slower.
* ``appendEntriesPeriod`` (``--append-period``, default 0.02 s instead of
  0.1 s): in batched mode the leader sends ``append_entries`` only once per
  period, and followers learn the commit index with the next one, so the period
  bounds both latency and, through Little's law with a fixed number
  outstanding, throughput. ``raftMinTimeout``/``raftMaxTimeout`` must stay above
  3x the period; we keep the library defaults (0.4 / 1.4 s), so failure
  detection is not made more aggressive than shipped.
* ``appendEntriesBatchSizeBytes`` 2**16 and socket buffers 2**16 (defaults).
* ``commandsQueueSize`` 100,000 (default) > outstanding, so no QUEUE_FULL.
* ``logCompactionMinEntries`` (``--compaction-entries``, default 1,000,000
  instead of 5,000): compaction pickles and zlib-compresses the whole dict *in
  the tick thread*, which stalls the node. Measured here (8 s windows, 5,000
  outstanding, period 0.02 s): 5,000 -> ~3,500 writes/s, p50 1.2 s; 50,000 ->
  ~15,000 writes/s with 5 elections in 8 s (the stalled leader misses its
  heartbeats); 1,000,000 (no compaction within a 20 s run) -> ~31,000 writes/s,
  p99 0.25 s, no election. The default therefore measures PySyncObj at its best,
  with the log in memory; say so when comparing with a store that compacts.
* No ``journalFile``/``fullDumpFile``: PySyncObj then keeps everything in
  memory and never fsyncs, so compare with the kv-store run without fsync.
* ``autoTick=True`` (the library's thread; ``autoTickPeriod`` 0.05 s is only the
  poll timeout when no socket is readable, never reached under load).

At the end the orchestrator waits until every replica has applied the same
log index, and reports each replica's ``len(dict)`` (they must agree), and
each process's CPU (user + system, from ``/proc``) over the window with their
sum per 1,000 writes (the load generator runs inside the leader, so its cost
is in that sum). Output: one JSON object on stdout (and ``--json FILE``); progress on stderr.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# ---------------------------------------------------------------------------
# Aggregation (pure; unit-tested)
# ---------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, nearest-rank.

    Nearest-rank (the smallest value with at least q% of the values at or
    below it) is what latency reports usually mean and needs no interpolation.
    """
    if not sorted_values:
        raise ValueError("no values")
    if not 0 <= q <= 100:
        raise ValueError("q must be in [0, 100]")
    rank = max(1, -(-len(sorted_values) * q // 100))  # ceil(n * q / 100), at least 1
    return float(sorted_values[int(rank) - 1])


def summarize(latencies_us: Sequence[int], window_s: float) -> dict[str, float]:
    """writes/s and latency figures (ms) for the writes completed in a window.

    ``latencies_us`` may come from several loaders: they are merged as raw
    values, so the percentiles are exact.
    """
    if window_s <= 0:
        raise ValueError("window must be positive")
    ordered = sorted(latencies_us)
    out: dict[str, float] = {"writes": float(len(ordered)), "writes_per_s": len(ordered) / window_s}
    if ordered:
        out.update(
            avg_ms=sum(ordered) / len(ordered) / 1000.0,
            p50_ms=percentile(ordered, 50) / 1000.0,
            p99_ms=percentile(ordered, 99) / 1000.0,
            max_ms=ordered[-1] / 1000.0,
        )
    return out


# ---------------------------------------------------------------------------
# Node process
# ---------------------------------------------------------------------------


def _emit(obj: dict[str, Any]) -> None:
    """One JSON line to the orchestrator (stdout is the control channel)."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


@dataclass
class _Load:
    """State of the closed-loop load inside a node process (touched by the tick thread)."""

    keyspace: int
    value: bytes
    phase: int = 0  # 0 warm-up, 1 window, 2 stopping
    opened_at: float = 0.0
    closed_at: float = 0.0
    next_key: int = 0
    outstanding: int = 0
    completed_total: int = 0
    errors: dict[int, int] = field(default_factory=dict)
    latencies_us: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _digest(store: Any) -> str:
    """BLAKE2b of the dict's items in key order: equal only if the contents are equal."""
    h = hashlib.blake2b(digest_size=16)
    for key in sorted(store.keys()):
        h.update(repr((key, store.get(key))).encode())
    return h.hexdigest()


def _node_main(args: argparse.Namespace) -> int:
    """Run one SyncObj node; obey JSON commands on stdin until ``quit``."""
    from pysyncobj import SyncObj, SyncObjConf
    from pysyncobj.batteries import ReplDict

    ports = [int(p) for p in args.ports.split(",")]
    addrs = [f"127.0.0.1:{p}" for p in ports]
    me = addrs[args.index]
    partners = [a for a in addrs if a != me]
    conf = SyncObjConf(
        appendEntriesUseBatch=True,
        appendEntriesPeriod=args.append_period,
        logCompactionMinEntries=args.compaction_entries,
        commandsQueueSize=100_000,
        dynamicMembershipChange=False,
    )
    store = ReplDict()
    node = SyncObj(me, partners, conf=conf, consumers=[store])
    load: _Load | None = None

    def submit(state: _Load) -> None:
        i = state.next_key
        state.next_key = i + 1
        t0 = time.perf_counter_ns()

        def done(_res: object, err: int) -> None:
            t1 = time.perf_counter_ns()
            with state.lock:
                state.outstanding -= 1
                if err == 0:
                    state.completed_total += 1
                    if state.phase == 1:
                        state.latencies_us.append((t1 - t0) // 1000)
                else:
                    state.errors[err] = state.errors.get(err, 0) + 1
                again = state.phase < 2
                if again:
                    state.outstanding += 1
            if again:
                submit(state)

        store.set(f"k{i % state.keyspace}", state.value, callback=done)

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "status":
            leader = node._getLeader()
            _emit(
                {
                    "op": "status",
                    "self": me,
                    "ready": node.isReady(),
                    "leader": None if leader is None else str(leader.address),
                    "is_leader": node._isLeader(),
                    "last_applied": node.raftLastApplied,
                    "commit_index": node.raftCommitIndex,
                    "keys": len(store),
                    "term": node.raftCurrentTerm,
                    # Key count alone cannot tell replicas apart once every key was written.
                    "digest": _digest(store) if cmd.get("digest") else None,
                }
            )
        elif op == "load":
            load = _Load(keyspace=cmd["keyspace"], value=os.urandom(cmd["value_size"]))
            with load.lock:
                load.outstanding = cmd["outstanding"]
            for _ in range(cmd["outstanding"]):
                submit(load)
            _emit({"op": "load_started"})
        elif op == "window":
            assert load is not None
            with load.lock:
                load.phase = 1
                load.latencies_us.clear()
                load.opened_at = time.monotonic()
            _emit({"op": "window_open", "completed_total": load.completed_total})
        elif op == "stop":
            assert load is not None
            with load.lock:
                load.phase = 2
                load.closed_at = time.monotonic()
                lat = list(load.latencies_us)
            deadline = time.monotonic() + 30
            while load.outstanding > 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            _emit(
                {
                    "op": "stopped",
                    "latencies_us": lat,
                    "window_s": load.closed_at - load.opened_at,
                    "left_outstanding": load.outstanding,
                    "errors": {str(k): v for k, v in load.errors.items()},
                }
            )
        elif op == "progress":
            done_total = 0 if load is None else load.completed_total
            _emit({"op": "progress", "completed_total": done_total})
        elif op == "quit":
            break
    node.destroy()
    return 0


# ---------------------------------------------------------------------------
# Orchestrator
# ---------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free a moment ago (all held open while choosing)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


class Cluster:
    """The 3 node processes and their JSON-lines control pipes; always cleaned up."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        ports = ",".join(str(p) for p in free_ports(3))
        for i in range(3):
            argv = [
                sys.executable,
                os.path.abspath(__file__),
                "--node-child",
                "--index",
                str(i),
                "--ports",
                ports,
                "--append-period",
                str(args.append_period),
                "--compaction-entries",
                str(args.compaction_entries),
            ]
            self.procs.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    start_new_session=True,  # own process group: killpg reaches everything
                )
            )

    def call(self, i: int, cmd: dict[str, Any], timeout_s: float = 60.0) -> dict[str, Any]:
        """Send one command to node ``i`` and read its one-line answer."""
        proc = self.procs[i]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        if not ready:
            raise TimeoutError(f"node {i} did not answer {cmd['op']} in {timeout_s} s")
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"node {i} exited (code {proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        """Quit politely, then SIGTERM, then SIGKILL each process group, with timeouts."""
        for proc in self.procs:
            if proc.poll() is None and proc.stdin is not None:
                with contextlib.suppress(OSError, ValueError):
                    proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                    proc.stdin.flush()
        for sig, wait_s in ((None, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            for proc in self.procs:
                if proc.poll() is None and sig is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, sig)
            deadline = time.monotonic() + wait_s
            for proc in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            if all(p.poll() is not None for p in self.procs):
                break
        for proc in self.procs:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()


def _log(msg: str) -> None:
    print(f"[pysyncobj] {msg}", file=sys.stderr, flush=True)


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, from ``/proc``
    (Linux; its threads included, its children not): what a run costs, which
    wall-clock rates on a shared machine do not say."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the cluster, load it, measure, check the replicas agree; return the report."""
    cluster = Cluster(args)
    atexit.register(cluster.close)
    try:
        # Wait for a leader that every node knows and for every node to be ready.
        deadline = time.monotonic() + 30
        while True:
            statuses = [cluster.call(i, {"op": "status"}) for i in range(3)]
            leaders = {s["leader"] for s in statuses}
            if len(leaders) == 1 and None not in leaders and all(s["ready"] for s in statuses):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no leader in 30 s: {statuses}")
            time.sleep(0.1)
        leader = next(i for i, s in enumerate(statuses) if s["is_leader"])
        term_at_start = max(s["term"] for s in statuses)
        _log(f"leader is node {leader} ({statuses[leader]['self']})")
        loaders = [leader] if args.submit_at == "leader" else [0, 1, 2]
        shares = [
            args.outstanding // len(loaders) + (1 if k < args.outstanding % len(loaders) else 0)
            for k in range(len(loaders))
        ]
        for i, share in zip(loaders, shares, strict=True):
            cluster.call(
                i,
                {
                    "op": "load",
                    "outstanding": share,
                    "keyspace": args.keyspace,
                    "value_size": args.value_size,
                },
            )
        _log(f"load started on nodes {loaders} ({shares} outstanding); warm-up {args.warmup} s")
        time.sleep(args.warmup)
        for i in loaders:
            cluster.call(i, {"op": "window"})
        cpu_open = [process_cpu_s(p.pid) for p in cluster.procs]
        t_open = time.monotonic()
        last = sum(cluster.call(i, {"op": "progress"})["completed_total"] for i in loaders)
        while (remaining := args.seconds - (time.monotonic() - t_open)) > 0:
            time.sleep(min(1.0, remaining))
            done = sum(cluster.call(i, {"op": "progress"})["completed_total"] for i in loaders)
            _log(f"t={time.monotonic() - t_open:5.1f} s  {done - last:>7} writes in the last tick")
            last = done
        cpu_s = [process_cpu_s(p.pid) - c for p, c in zip(cluster.procs, cpu_open, strict=True)]
        stops = [cluster.call(i, {"op": "stop"}) for i in loaders]
        # Each loader's own window (phase switch to phase switch); the longest is conservative.
        window_s = max(s["window_s"] for s in stops)
        latencies = [v for s in stops for v in s["latencies_us"]]
        result = summarize(latencies, window_s)
        # Every replica must end with the same applied index and the same dict size.
        deadline = time.monotonic() + 30
        while True:
            statuses = [cluster.call(i, {"op": "status", "digest": True}) for i in range(3)]
            applied = {s["last_applied"] for s in statuses}
            if len(applied) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        errors: dict[str, int] = {}
        for s in stops:
            for k, v in s["errors"].items():
                errors[k] = errors.get(k, 0) + v
        report: dict[str, Any] = {
            "system": "pysyncobj-0.3.17 ReplDict",
            "settings": {
                "nodes": 3,
                "outstanding": args.outstanding,
                "submit_at": args.submit_at,
                "loader_nodes": loaders,
                "warmup_s": args.warmup,
                "seconds": args.seconds,
                "keyspace": args.keyspace,
                "value_size": args.value_size,
                "append_period_s": args.append_period,
                "compaction_entries": args.compaction_entries,
            },
            "result": {**result, "window_s": window_s},
            # The 3 processes' CPU over the window, the in-process load generator's included.
            "cpu_s": [round(c, 2) for c in cpu_s],
            "cpu_ms_per_1k_writes": round(1e6 * sum(cpu_s) / result["writes"], 2)
            if result["writes"]
            else None,
            "errors": errors,
            # A raft term change during the run means an election (a leader lost its lease).
            "elections_during_run": max(s["term"] for s in statuses) - term_at_start,
            "left_outstanding": sum(s["left_outstanding"] for s in stops),
            "replicas": [
                {k: s[k] for k in ("self", "is_leader", "last_applied", "keys", "term", "digest")}
                for s in statuses
            ],
            "replicas_agree": len({(s["last_applied"], s["keys"], s["digest"]) for s in statuses})
            == 1,
        }
        return report
    finally:
        cluster.close()
        atexit.unregister(cluster.close)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--outstanding", type=int, default=5000)
    p.add_argument("--seconds", type=float, default=20.0, help="measured window")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--keyspace", type=int, default=100_000)
    p.add_argument("--value-size", type=int, default=16)
    p.add_argument("--submit-at", choices=("leader", "all"), default="leader")
    p.add_argument("--append-period", type=float, default=0.02)
    p.add_argument("--compaction-entries", type=int, default=1_000_000)
    p.add_argument("--json", help="write the report to this file too")
    p.add_argument("--node-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, help=argparse.SUPPRESS)
    p.add_argument("--ports", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see ``--help``."""
    args = _parser().parse_args(argv)
    if args.node_child:
        return _node_main(args)
    try:
        import pysyncobj  # noqa: F401
    except ImportError:
        print("pysyncobj is not installed (pip install pysyncobj==0.3.17)", file=sys.stderr)
        return 2

    def _on_signal(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through run()'s finally: cleanup

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    report = run(args)
    r = report["result"]
    _log(
        f"{r['writes_per_s']:,.0f} writes/s  p50 {r.get('p50_ms', float('nan')):.1f} ms  "
        f"p99 {r.get('p99_ms', float('nan')):.1f} ms  replicas agree: {report['replicas_agree']}"
    )
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if report["replicas_agree"] else 1


if __name__ == "__main__":
    sys.exit(main())
