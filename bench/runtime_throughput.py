"""Throughput of the runtime: 3 node processes, 16-byte commands, many outstanding.

What runs
---------

A local cluster (:func:`sdpaxos.runtime.local.make_local_cluster`, TLS on
unless ``--insecure``) in a temporary directory, and its 3 replicas as real
processes (:class:`bench.cluster.SdpaxosNodes`: ``python -m sdpaxos node
--config F --id N [--no-fsync]``, the default app ``digest``). Once the
cluster is up (every node answers a status request and sees both peers, and a
sequencer holds its lease), ``--loaders`` load-generator processes
(:mod:`bench.runtime_loader`, the one every ``--engine runtime`` experiment
uses), each connected to every node, run ``--outstanding`` closed-loop
clients in total, spread evenly over the 3 nodes: one 16-byte write
outstanding each (:class:`bench.workloads.OpStream`'s, no conflicts, sent
without a key: SDPaxos orders every command), the next one sent as soon as the
node answers READY. Each client's session is registered through the log
first, as the runtime's :class:`~sdpaxos.runtime.client.Client` does.

Three load generators (``--load``):

* ``raw`` (default): the runtime's client frames
  (:mod:`sdpaxos.runtime.frames`) over one connection per node, no task or
  future per command; the commands that a read of the socket unblocks go out in
  one write, one ``SUBMIT`` frame each. It is what a lean client costs, so that
  the nodes, not the generator, are what is measured.
* ``client``: :class:`sdpaxos.runtime.client.Client` (one per node), one task
  per session calling ``submit`` (its first submit registers the session).
* ``batch``: the raw loader again, but the commands that one socket read
  unblocks go out as one ``SUBMIT_MANY`` frame, and the node answers each flush
  with one ``REPLY_MANY`` (what :class:`~sdpaxos.runtime.client.Client` does
  for the submits of one loop turn, and what ``--engine runtime`` loads do).

After ``--warmup`` seconds (not measured) the window opens: it lasts
``--seconds``, or until ``--commands`` READY replies came in it, whichever is
first. Reported for the window: commands committed (READY at the client) per
second; each node process's CPU seconds (``utime + stime`` of
``/proc/<pid>/stat``, every thread, so the log thread too) per 1,000 commands;
the load generators' CPU likewise. fsync on and fsync off run in the same
invocation (a fresh cluster each), and the table gives their ratio.

Verification (exit status 1 on failure): after the load stops and every
outstanding command was answered, a linearizable read (``Client.read``) at each
node returns the app's count and digest (:func:`digest_of`: the ``digest``
app's BLAKE2b chain, or :class:`bench.runtime_app.BenchLog`'s sum and chains
with ``--app bench.runtime_app:BenchLog``); all three must be equal, and the
count must equal the commands the generators saw answered (plus nothing else:
a session's registration is not applied to the state machine).

Run ``python -m bench.runtime_throughput --help`` for the knobs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.cluster import SdpaxosNodes, start_loader, stop_loaders
from bench.runtime_app import QUERY_BYTES, BenchLog, parse_query
from bench.runtime_procs import ChildLines, cpu_seconds, machine_cpu
from bench.runtime_procs import split as _split
from bench.workloads import Workload

REPLICAS = 3
PAYLOAD_BYTES = 16
#: How long loaders may take to open their sessions, and to drain at the end.
LOADER_TIMEOUT_S = 120.0
#: How often a loader reports its count to the parent.
REPORT_INTERVAL_S = 0.1
#: The digest app's answer: an 8-byte count and a 32-byte BLAKE2b chain.
_DIGEST_ANSWER_BYTES = 40

#: ``--app bench.runtime_throughput:CrcLog`` (bench/README.md) names the one bench
#: state machine, :class:`bench.runtime_app.BenchLog`. CrcLog was a second one, a
#: CRC-32 chain to see what a cheaper app than ``digest`` costs; BenchLog is that
#: (a CRC-32 per command, no cryptographic hash), so the command keeps working and
#: runs the app every ``--engine runtime`` experiment runs.
CrcLog = BenchLog


# ------------------------------------------------------------------ the parent


@dataclass
class ModeResult:
    fsync: bool
    seconds: float
    committed: int
    committed_per_s: float
    node_cpu_s: list[float]
    node_cpu_s_per_1000: list[float]
    loader_cpu_s: float
    loader_cpu_s_per_1000: float
    #: Commands over the CPU time of the 3 nodes and the loaders together: what one
    #: core does for the whole cluster (times the free cores: the ceiling here).
    commands_per_cpu_s: float
    #: Share of all cores' time busy during the window (every process, ours or not).
    machine_busy: float
    #: Log writes (one fsync each when fsync is on) per second, each node.
    fsyncs_per_s: list[float]
    answered_total: int
    executed: list[int]
    digests: list[str]
    retries: int
    agree: bool
    problems: list[str] = field(default_factory=list)
    node_status: list[dict[str, Any]] = field(default_factory=list)


def digest_of(value: bytes | None) -> tuple[int, str]:
    """(commands executed, digest) from a node's app answer: the ``digest`` app's
    (8-byte count, BLAKE2b chain) or :class:`~bench.runtime_app.BenchLog`'s
    (:func:`~bench.runtime_app.parse_query`: count, sum, order and hot chains)."""
    if value is not None and len(value) == QUERY_BYTES:
        count, total, chain, hot = parse_query(value)
        # The order chain first: its 61 bits fill the 16 digits a progress line shows.
        order, hot_order = int.from_bytes(chain, "big"), int.from_bytes(hot, "big")
        return count, f"{order:016x}{hot_order:016x}{total:032x}"
    if value is None or len(value) != _DIGEST_ANSWER_BYTES:
        raise ValueError(f"not an answer of the digest app or BenchLog: {value!r:.80}")
    return int.from_bytes(value[:8], "big"), value[8:].hex()


def _fsyncs(nodes: SdpaxosNodes) -> list[int]:
    """Each node's fsync count (its status), -1 for a node that did not answer."""
    statuses = nodes.ask(nodes.statuses(timeout_s=5.0))
    return [-1 if st is None else int(st["fsyncs"]) for st in statuses]


def _read_digests(nodes: SdpaxosNodes) -> tuple[list[int], list[str], list[dict[str, Any]]]:
    """Each node's count and digest (a linearizable read) and status."""

    async def ask(c: Any) -> tuple[tuple[int, str], dict[str, Any]]:
        value = await c.read(None, b"", timeout_s=30.0)
        return digest_of(value), await c.status()

    answers = nodes.ask(nodes.each(ask))
    return (
        [count for (count, _), _ in answers],
        [digest for (_, digest), _ in answers],
        [st for _, st in answers],
    )


def _start_loaders(args: argparse.Namespace, nodes: SdpaxosNodes, label: str) -> list[ChildLines]:
    """``--loaders`` load generators (:mod:`bench.runtime_loader`), each
    connected to every node, ``--outstanding`` closed-loop clients in all,
    told their run (until the parent says ``end``); ready once each said so."""
    loaders: list[ChildLines] = []
    workload = Workload(payload_bytes=PAYLOAD_BYTES, seed=1)
    base = 0
    for i, count in enumerate(_split(args.outstanding, args.loaders)):
        conn = nodes.loader_conn(range(REPLICAS), client_cert=i)
        conn["load"] = args.load
        if args.loader_profile:
            conn["profile"] = f"{args.loader_profile}.{i}.{label[-3:].strip()}.prof"
        lines = start_loader(conn, nodes.dir / f"loader{i}.json", nodes.dir / f"loader{i}.log")
        loaders.append(lines)
        run = {
            "region_index": i,
            "clients": list(range(base, base + count)),
            "mode": "closed",
            "workload": workload.to_json(),
            "read_path": "log",
            "end_us": None,
            "drain_s": LOADER_TIMEOUT_S,
            "report_s": REPORT_INTERVAL_S,
            "keys": False,  # SDPaxos orders every command: no key needed, none sent
            "register": True,  # sessions registered through the log, as Client does
        }
        base += count
        run_path = nodes.dir / f"run{i}.json"
        run_path.write_text(json.dumps(run))
        lines.tell(f"run {run_path}")
    for ld in loaders:
        if not ld.ready.wait(LOADER_TIMEOUT_S):
            raise RuntimeError("a loader did not open its sessions in time")
    return loaders


def run_mode(args: argparse.Namespace, fsync: bool, progress: Any) -> ModeResult:
    label = "fsync on" if fsync else "fsync off"
    root = Path(tempfile.mkdtemp(prefix="sdpaxos-rtbench-"))
    profile = None
    if args.node_profile is not None:
        profile = (args.node_profile_id, f"{args.node_profile}.{label.replace(' ', '-')}.prof")
    nodes = SdpaxosNodes.create(
        root,
        REPLICAS,
        cluster={"insecure": args.insecure},
        app=args.app,
        fsync=fsync,
        profile=profile,
        own_dir=not args.keep,
    )
    loaders: list[ChildLines] = []
    try:
        nodes.start_up()
        progress(f"{label}: cluster up in {root}")
        loaders = _start_loaders(args, nodes, label)
        progress(f"{label}: {args.outstanding} sessions open; warm-up {args.warmup} s")
        t_go = time.monotonic()
        for ld in loaders:
            ld.tell(f"go {t_go!r}")

        def snapshot() -> tuple[float, int, list[float], float, tuple[float, float]]:
            t = time.perf_counter()
            count = sum(ld.count for ld in loaders)
            return (
                t,
                count,
                [cpu_seconds(pid) for pid in nodes.pids if pid is not None],
                sum(cpu_seconds(ld.proc.pid) for ld in loaders),
                machine_cpu(),
            )

        time.sleep(args.warmup)
        f0 = _fsyncs(nodes)
        t0, c0, n0, l0, m0 = snapshot()
        last = t0
        while True:
            time.sleep(0.05)
            now = time.perf_counter()
            count = sum(ld.count for ld in loaders) - c0
            if now - t0 >= args.seconds or (args.commands and count >= args.commands):
                break
            if nodes.exited():
                raise RuntimeError(f"a node exited; see {root}/node*.log")
            if now - last >= 1.0:
                last = now
                progress(
                    f"{label}: {now - t0:.1f} s, {count:,} committed, {count / (now - t0):,.0f}/s"
                )
        t1, c1, n1, l1, m1 = snapshot()
        f1 = _fsyncs(nodes)
        for ld in loaders:
            ld.tell("end")
        for ld in loaders:
            if not ld.done_event.wait(LOADER_TIMEOUT_S):
                raise RuntimeError("a loader did not drain in time")
        seconds, committed = t1 - t0, c1 - c0
        node_cpu = [b - a for a, b in zip(n0, n1, strict=True)]
        loader_cpu = l1 - l0
        busy = (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
        fsyncs = [b - a for a, b in zip(f0, f1, strict=True)]
        executed, digests, statuses = _read_digests(nodes)
        problems = []
        answered = 0
        retries = 0
        for k, ld in enumerate(loaders):
            if ld.done is None:
                problems.append(f"loader {k} exited without a result")
                continue
            answered += ld.done["completed"]
            retries += ld.done["retries"]
            problems += [f"loader {k}: {f}" for f in ld.done["failures"]]
        if len(set(digests)) != 1 or len(set(executed)) != 1:
            problems.append(f"nodes diverged: executed {executed}, digests {digests}")
        if executed and executed[0] != answered:
            problems.append(
                f"nodes executed {executed[0]} commands, loaders saw {answered} READY "
                f"(sent {[ld.done and ld.done.get('sent') for ld in loaders]})"
            )
        per1000 = max(committed, 1) / 1000
        return ModeResult(
            fsync=fsync,
            seconds=seconds,
            committed=committed,
            committed_per_s=committed / seconds if seconds > 0 else 0.0,
            node_cpu_s=node_cpu,
            node_cpu_s_per_1000=[c / per1000 for c in node_cpu],
            loader_cpu_s=loader_cpu,
            loader_cpu_s_per_1000=loader_cpu / per1000,
            commands_per_cpu_s=committed / max(1e-9, sum(node_cpu) + loader_cpu),
            machine_busy=busy,
            fsyncs_per_s=[f / seconds for f in fsyncs],
            answered_total=answered,
            executed=executed,
            digests=digests,
            retries=retries,
            agree=not problems,
            problems=problems,
            node_status=[
                {k: s.get(k) for k in ("id", "fsyncs", "records_written", "log_bytes", "view")}
                for s in statuses
            ],
        )
    finally:
        stop_loaders(loaders)
        nodes.close()


def format_table(results: list[ModeResult]) -> str:
    head = (
        "| fsync | commands/s | CPU s / 1000 cmds, node 0 / 1 / 2 | loader CPU s / 1000 "
        "| commands / CPU s (all 4) | machine busy | log writes/s, node 0 / 1 / 2 | window |"
    )
    lines = [head, "|---|---:|---|---:|---:|---:|---|---|"]
    for r in results:
        cpu = " / ".join(f"{c:.4f}" for c in r.node_cpu_s_per_1000)
        lines.append(
            f"| {'on' if r.fsync else 'off'} | {r.committed_per_s:,.0f} | {cpu} | "
            f"{r.loader_cpu_s_per_1000:.4f} | {r.commands_per_cpu_s:,.0f} | "
            f"{100 * r.machine_busy:.0f} % | "
            f"{' / '.join(f'{f:,.0f}' for f in r.fsyncs_per_s)} | "
            f"{r.committed:,} in {r.seconds:.1f} s |"
        )
    by = {r.fsync: r for r in results}
    if True in by and False in by and by[True].committed_per_s > 0:
        ratio = by[False].committed_per_s / by[True].committed_per_s
        lines.append("")
        lines.append(f"fsync off / fsync on: {ratio:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.runtime_throughput", description=__doc__.split("\n")[0]
    )
    p.add_argument("--seconds", type=float, default=10.0, help="measured window (default 10)")
    p.add_argument("--commands", type=int, default=0, help="end the window after this many")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds not measured (default 3)")
    p.add_argument("--outstanding", type=int, default=3000, help="sessions in total")
    p.add_argument("--loaders", type=int, default=1, help="load-generator processes")
    p.add_argument(
        "--load",
        choices=["raw", "client", "batch"],
        default="raw",
        help="raw frames (default), the runtime's Client, or raw SUBMIT_MANY frames",
    )
    p.add_argument("--insecure", action="store_true", help="no TLS")
    p.add_argument(
        "--app",
        default="digest",
        help="the nodes' app: digest (default), or bench.runtime_app:BenchLog (cheaper;"
        " bench.runtime_throughput:CrcLog names it too)",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument("--fsync-only", action="store_true")
    only.add_argument("--no-fsync-only", action="store_true")
    p.add_argument("--quick", action="store_true", help="short windows (about a minute)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--keep", action="store_true", help="keep the cluster directories")
    p.add_argument("--node-profile", default=None, help="cProfile node --node-profile-id to FILE")
    p.add_argument("--node-profile-id", type=int, default=0)
    p.add_argument("--loader-profile", default=None, help="cProfile each loader to FILE.*")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 5.0)
        args.warmup = min(args.warmup, 2.0)
    if args.outstanding < REPLICAS * args.loaders:
        p.error("--outstanding must be at least 3 per loader")

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    modes = [True, False]
    if args.fsync_only:
        modes = [True]
    elif args.no_fsync_only:
        modes = [False]
    results = [run_mode(args, fsync, progress) for fsync in modes]
    settings = {
        k: getattr(args, k)
        for k in (
            "seconds",
            "commands",
            "warmup",
            "outstanding",
            "loaders",
            "load",
            "insecure",
            "app",
        )
    }
    settings.update(replicas=REPLICAS, payload_bytes=PAYLOAD_BYTES, cores=os.cpu_count())
    if args.json:
        out: dict[str, Any] = {"settings": settings, "results": [asdict(r) for r in results]}
        by = {r.fsync: r for r in results}
        if True in by and False in by and by[True].committed_per_s > 0:
            out["off_over_on"] = by[False].committed_per_s / by[True].committed_per_s
        print(json.dumps(out, indent=2))
    else:
        print(
            f"3 nodes, {PAYLOAD_BYTES}-byte commands, {args.outstanding} outstanding, "
            f"{args.loaders} loader(s) ({args.load}), TLS {'off' if args.insecure else 'on'}"
        )
        print(format_table(results))
    ok = True
    for r in results:
        for problem in r.problems:
            print(f"FAILED ({'fsync on' if r.fsync else 'fsync off'}): {problem}", file=sys.stderr)
            ok = False
        if r.agree:
            progress(
                f"{'fsync on' if r.fsync else 'fsync off'}: all {REPLICAS} nodes executed "
                f"{r.executed[0]:,} commands, digest {r.digests[0][:16]}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
