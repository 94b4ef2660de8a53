"""``kvstore serve | local | status | demo``: run and inspect kv-store nodes.

* ``serve --config cluster.toml --id N``: one node, until SIGINT or SIGTERM; it
  answers Redis clients at its ``[kvstore] redis`` address.
* ``local``: a cluster on this machine (3 replicas on the ``paper3`` delay
  profile by default; ``--replicas 5 --profile paper5``, or ``--profile
  none``); prints each node's Redis address and runs until interrupted.
* ``status --config cluster.toml [--json]``: every node's view, sequencer,
  executed slot, lag and addresses.
* ``demo``: a local cluster, a mixed workload from every region, the sequencer
  killed and restarted half-way, latency and throughput per region, and the
  linearizability verdict of what the clients saw (:mod:`kvstore.demo`).

Only these commands configure logging (the library never does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvstore.config import KVConfig, load_kv_config
from sdpaxos.core.errors import ConfigError
from sdpaxos.profiles import ProfileError, builtin
from sdpaxos.protocols import PROTOCOL_NAMES
from sdpaxos.runtime.cli import (
    GC_GEN0_DEFAULT,
    STATUS_TIMEOUT_S,
    format_table,
    keep_freezing,
    run_loop,
    setup_logging,
    statuses,
    tune_gc,
)

__all__ = ["main"]


# ------------------------------------------------------------------- serve


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        config = load_kv_config(args.config, args.id)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    context = setup_logging(args.log_level, config.node.node_id)
    tune_gc(args.gc_gen0)
    return run_loop(_serve(config, args, context))


async def _serve(config: KVConfig, args: argparse.Namespace, context: Any) -> int:
    from kvstore.server import KVNode

    metrics = None
    if args.metrics:
        from sdpaxos.runtime.metrics import NodeMetrics

        metrics = NodeMetrics(config.node.node_id)
    kv = KVNode(config, fsync=not args.no_fsync, metrics=metrics, listen_host=args.listen)
    if context is not None:
        context.node = kv.node
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = None
    async with kv:
        if metrics is not None:
            from sdpaxos.runtime.metrics import serve_metrics

            host, _, port = args.metrics.rpartition(":")
            server = await serve_metrics(metrics, host or "127.0.0.1", int(port))
        freezer = loop.create_task(keep_freezing()) if args.gc_gen0 > 0 else None
        host, _ = config.redis_address
        print(
            f"kvstore node {config.node.node_id}: Redis at {host}:{kv.redis_port}, "
            f"peers at {config.node.me.host}:{kv.node.bound_port}, data in {config.node.data_dir}",
            flush=True,
        )
        await stop.wait()
        if freezer is not None:
            freezer.cancel()
    if server is not None:
        await server.close()
    return 0


# ------------------------------------------------------------------- local


def _cmd_local(args: argparse.Namespace) -> int:
    from kvstore.cluster import ProcessCluster
    from kvstore.local import make_kv_cluster

    profile = None if args.profile == "none" else args.profile
    if profile is not None:
        try:
            builtin(profile)
        except ProfileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kvstore-local-"))
    try:
        path = make_kv_cluster(
            root,
            args.replicas,
            profile=profile,
            insecure=args.insecure,
            protocol={"name": args.protocol},
        )
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cluster = ProcessCluster(path, fsync=not args.no_fsync, log_level=args.log_level)

    def _terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        cluster.start_all()
        cluster.wait_ready()
        print(
            f"kv-store cluster of {args.replicas} running {args.protocol} in {root}"
            f" (profile {args.profile})"
        )
        print(f"{'id':>3}  {'region':<6}  {'redis':<21}  {'peers':<21}  log")
        for k, cfg in enumerate(cluster.configs):
            me = cfg.node.me
            host, port = cfg.redis_address
            print(
                f"{k:>3}  {me.region:<6}  {host + ':' + str(port):<21}  "
                f"{me.host + ':' + str(me.port):<21}  {cluster.log_path(k)}"
            )
        print(f"try:    redis-cli -p {cluster.redis_address(0)[1]} set greeting hello")
        print(f"status: kvstore status --config {path}")
        print("Ctrl-C stops the cluster.", flush=True)
        reported: set[int] = set()
        while True:
            for k in range(cluster.size):
                if not cluster.running(k) and k not in reported:
                    reported.add(k)
                    print(f"node {k} exited; see {cluster.log_path(k)}", flush=True)
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("stopping ...", flush=True)
    except (RuntimeError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        cluster.stop()
        return 1
    finally:
        cluster.stop()
    print("stopped.")
    return 0


# ------------------------------------------------------------------ status


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        config = load_kv_config(args.config, 0)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = run_loop(statuses(config.node, args.client, args.timeout))
    for row, (host, port) in zip(rows, config.redis, strict=True):
        row["redis"] = f"{host}:{port}"
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        table = format_table(rows).splitlines()
        width = max(len(line) for line in table)
        redis = ["redis"] + [r["redis"] for r in rows]
        print("\n".join(f"{line.ljust(width)}  {r}" for line, r in zip(table, redis, strict=True)))
    return 0 if all("down" not in r for r in rows) else 1


# -------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kvstore", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run one node")
    s.add_argument("--config", required=True, help="the cluster's TOML file")
    s.add_argument("--id", type=int, default=None, help="this node's id (else [node] id)")
    s.add_argument("--no-fsync", action="store_true", help="skip fsync (benchmarks only)")
    s.add_argument("--listen", default=None, help="host to listen on (default: its addresses)")
    s.add_argument("--metrics", default=None, metavar="HOST:PORT", help="serve /metrics here")
    s.add_argument("--log-level", default="INFO")
    s.add_argument("--gc-gen0", type=int, default=GC_GEN0_DEFAULT, help="0: Python's default")
    loc = sub.add_parser("local", help="a cluster of node processes on this machine")
    loc.add_argument("--replicas", type=int, default=3)
    loc.add_argument("--profile", default="paper3", help="delay profile, or 'none'")
    loc.add_argument("--dir", default=None, help="where to keep it (default: a new temp dir)")
    loc.add_argument("--insecure", action="store_true", help="no TLS between nodes (a lab only)")
    loc.add_argument(
        "--protocol", default="sdpaxos", choices=PROTOCOL_NAMES, help="the replication protocol"
    )
    loc.add_argument("--no-fsync", action="store_true")
    loc.add_argument("--log-level", default="WARNING")
    st = sub.add_parser("status", help="every node's status")
    st.add_argument("--config", required=True)
    st.add_argument("--json", action="store_true")
    st.add_argument("--client", type=int, default=0, help="client certificate number")
    st.add_argument("--timeout", type=float, default=STATUS_TIMEOUT_S)
    d = sub.add_parser("demo", help="a local cluster, a workload, a failover, a verdict")
    d.add_argument("--seconds", type=float, default=40.0, help="how long the workload runs")
    d.add_argument("--replicas", type=int, default=3)
    d.add_argument("--profile", default="paper3")
    d.add_argument("--out", default="kvstore-demo", help="where the history and plot go")
    d.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.command == "serve":
        return _cmd_serve(args)
    if args.command == "local":
        return _cmd_local(args)
    if args.command == "status":
        return _cmd_status(args)
    from kvstore.demo import run_demo

    return run_demo(args)
