"""``kvstore serve | local | status | demo``: run and inspect kv-store nodes.

* ``serve --config cluster.toml --id N [--bootstrap]``: one node, until SIGINT
  or SIGTERM; it answers Redis clients at its ``[kvstore] redis`` address.
  ``--bootstrap`` only when the cluster is brand new: a node refuses an empty
  data directory without it (:mod:`sdpaxos.runtime.datadir`).
* ``local``: a cluster on this machine (3 replicas on the ``paper3`` delay
  profile by default; ``--replicas 5 --profile paper5``, or ``--profile
  none``); prints each node's Redis address and runs until interrupted.
  ``--spares K`` also starts K nodes that are not members (ids after the
  replicas'), printing ``spare node ID: redis://HOST:PORT`` for each; the file
  names them, so ``admin add-replica ID`` finds their addresses.
* ``status --config cluster.toml [--json]``: every node's view, sequencer,
  executed slot, lag, epoch, role and addresses (the spares' too), then the
  membership: members, learners with their lag, a change in progress.
* ``admin --config cluster.toml add-replica ID | remove-replica ID |
  replace-replica OLD NEW``: change the membership; a spare's addresses come
  from the file (:mod:`kvstore.admin`).
* ``demo``: a local cluster, a mixed workload from every region, the sequencer
  killed and restarted half-way, latency and throughput per region, and the
  linearizability verdict of what the clients saw (:mod:`kvstore.demo`).

Only these commands configure logging (the library never does). Bad input is
one line, ``error: ...``, and a nonzero exit, before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvstore.admin import add_admin_parser, add_status_parser, cmd_admin, cmd_status
from kvstore.config import KVConfig, load_kv_config
from kvstore.demo import add_demo_arguments, run_demo
from kvstore.local import SPARES_MAX
from sdpaxos.core.errors import ConfigError
from sdpaxos.profiles import builtin
from sdpaxos.protocols import PROTOCOL_NAMES
from sdpaxos.runtime.cli import (
    run_loop,
    serve_until_signalled,
    setup_logging,
    tune_gc,
)
from sdpaxos.runtime.cliargs import (
    LOG_LEVELS,
    OneLineParser,
    add_node_arguments,
    check_before_start,
    log_level_name,
    one_line,
)
from sdpaxos.runtime.local import LOCAL_REPLICAS_MAX

__all__ = ["main"]


# ------------------------------------------------------------------- serve


def _cmd_serve(args: argparse.Namespace) -> int:
    try:
        config = load_kv_config(args.config, args.id)
        check_before_start(config.node, args)
    except ConfigError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    context = setup_logging(args.log_level, config.node.node_id)
    tune_gc(args.gc_gen0)
    return run_loop(_serve(config, args, context))


async def _serve(config: KVConfig, args: argparse.Namespace, context: Any) -> int:
    from kvstore.server import KVNode

    metrics = None
    if args.metrics is not None:
        from sdpaxos.runtime.metrics import NodeMetrics

        metrics = NodeMetrics(config.node.node_id)
    kv = KVNode(
        config,
        fsync=not args.no_fsync,
        metrics=metrics,
        listen_host=args.listen,
        bootstrap=args.bootstrap,
    )
    if context is not None:
        context.node = kv.node

    def banner() -> str:
        host, _ = config.redis_address
        return (
            f"kvstore node {config.node.node_id}: Redis at {host}:{kv.redis_port}, "
            f"peers at {config.node.me.host}:{kv.node.bound_port}, data in {config.node.data_dir}"
        )

    return await serve_until_signalled(kv, config.node.node_id, args, metrics, banner)


# ------------------------------------------------------------------- local


def _cmd_local(args: argparse.Namespace) -> int:
    from kvstore.cluster import ProcessCluster
    from kvstore.local import make_kv_cluster

    profile = None if args.profile == "none" else args.profile
    try:
        if profile is not None:
            builtin(profile)
        if not 1 <= args.replicas <= LOCAL_REPLICAS_MAX:
            raise ValueError(f"--replicas must be in 1..{LOCAL_REPLICAS_MAX}, got {args.replicas}")
        if not 0 <= args.spares <= SPARES_MAX:
            raise ValueError(f"--spares must be in 0..{SPARES_MAX}, got {args.spares}")
    except ValueError as exc:  # a ProfileError too
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    made = args.dir is None
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kvstore-local-"))
    try:
        path = make_kv_cluster(
            root,
            args.replicas,
            profile=profile,
            insecure=args.insecure,
            protocol={"name": args.protocol},
            spares=args.spares,
        )
    except (ValueError, OSError) as exc:
        if made:
            with contextlib.suppress(OSError):
                root.rmdir()
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    # Fresh directories: the nodes' first start bootstraps.
    cluster = ProcessCluster(
        path, fsync=not args.no_fsync, log_level=args.log_level, bootstrap=True
    )

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
        for k, cfg in enumerate(cluster.configs[: cluster.members]):
            me = cfg.node.me
            host, port = cfg.redis_address
            print(
                f"{k:>3}  {me.region:<6}  {host + ':' + str(port):<21}  "
                f"{me.host + ':' + str(me.port):<21}  {cluster.log_path(k)}"
            )
        for k in range(cluster.members, cluster.size):
            host, port = cluster.redis_address(k)
            print(f"spare node {k}: redis://{host}:{port}")
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


# -------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    """``kvstore ...``; the exit status."""
    p = OneLineParser(prog="kvstore", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run one node")
    add_node_arguments(s)
    loc = sub.add_parser("local", help="a cluster of node processes on this machine")
    loc.add_argument("--replicas", type=int, default=3)
    loc.add_argument(
        "--spares", type=int, default=0, help="nodes that are no members, to add (admin)"
    )
    loc.add_argument("--profile", default="paper3", help="delay profile, or 'none'")
    loc.add_argument("--dir", default=None, help="where to keep it (default: a new temp dir)")
    loc.add_argument("--insecure", action="store_true", help="no TLS between nodes (a lab only)")
    loc.add_argument(
        "--protocol", default="sdpaxos", choices=PROTOCOL_NAMES, help="the replication protocol"
    )
    loc.add_argument("--no-fsync", action="store_true")
    loc.add_argument(
        "--log-level", type=log_level_name, default="WARNING", help=", ".join(LOG_LEVELS)
    )
    add_status_parser(sub)
    add_admin_parser(sub)
    d = sub.add_parser("demo", help="a local cluster, a workload, a failover, a verdict")
    add_demo_arguments(d)
    args = p.parse_args(argv)
    if args.command == "serve":
        return _cmd_serve(args)
    if args.command == "local":
        return _cmd_local(args)
    if args.command == "status":
        return cmd_status(args)
    if args.command == "admin":
        return cmd_admin(args)
    return run_demo(args)
