"""``python -m sdpaxos node | local | status | admin``: run and inspect nodes.

* ``node --config cluster.toml --id N [--bootstrap] [--address H:P --region R]``:
  one replica, until SIGINT or SIGTERM. ``--bootstrap`` only when the cluster
  is brand new (:mod:`sdpaxos.runtime.datadir`); without it, an empty data
  directory makes a new node, which waits to be added (SDPaxos).
* ``local --replicas 3 --profile paper3``: a whole cluster on this machine, as
  separate processes (certificates made on the fly); prints where each node
  listens and keeps its data; stops them all on Ctrl-C.
* ``status --config cluster.toml [--json]``: every node's status as a table.
* ``admin --config cluster.toml partition "0,1|2" | heal | snapshot |
  transfer-sequencer T | add-replica ID --address H:P --region R |
  remove-replica ID | replace-replica OLD NEW --address H:P --region R``:
  change a running cluster (:mod:`sdpaxos.runtime.cli_members`).

Only these commands configure logging (the library never does): one line per
event, with the node's id and view.

Bad input (an option, a file, a data directory that is not this node's) is one
line, ``error: ...``, and a nonzero exit, before anything is written: 2 for
what the operator can fix in the command or file, 1 when a node could not
start or serve.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sdpaxos.core.errors import ConfigError
from sdpaxos.profiles import ProfileError, builtin
from sdpaxos.protocols import DEFAULT_PROTOCOL, PROTOCOL_NAMES
from sdpaxos.runtime.apps import APPS, load_app
from sdpaxos.runtime.cli_members import (
    CHANGE_COMMANDS,
    add_change_arguments,
    admin_answer,
    change_request,
    extra_nodes,
    membership_lines,
    run_change,
    statuses_of,
)
from sdpaxos.runtime.cliargs import (
    GC_GEN0_DEFAULT,
    LOG_LEVELS,
    OneLineParser,
    add_node_arguments,
    bounded_int,
    check_before_start,
    load_cluster_file,
    log_level_name,
    one_line,
    positive_seconds,
    serve_node_metrics,
    start_node,
    trace_event_names,
)
from sdpaxos.runtime.config import NodeConfig, TlsFiles

__all__ = [
    "GC_GEN0_DEFAULT",
    "NodeContext",
    "cluster_client_tls",
    "format_table",
    "keep_freezing",
    "main",
    "run_loop",
    "serve_until_signalled",
    "setup_logging",
    "statuses",
    "tune_gc",
]

T = TypeVar("T")

#: The package ``python -m`` runs for a node process (this one's top package).
_PACKAGE = __name__.partition(".")[0]
#: How long ``local`` waits for its nodes to stop after SIGTERM before killing them.
STOP_GRACE_S = 10.0
#: ``node``: how often survivors are frozen out of the collector's reach.
GC_FREEZE_INTERVAL_S = 1.0
#: How long ``status`` waits for each node.
STATUS_TIMEOUT_S = 3.0


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop when it is installed (extra ``fast``), else asyncio.

    A command's own loop only: the library never installs an event-loop policy.
    """
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return asyncio.run(coro)
    result: T = uvloop.run(coro)
    return result


class NodeContext(logging.Filter):
    """Adds ``node`` and ``view`` to every log record of this process."""

    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id
        self.node: Any = None

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.node_id
        replica = getattr(self.node, "replica", None)
        # A protocol without views (Mencius) logs "-".
        record.view = getattr(replica, "view", "-") if replica is not None else "-"
        return True


def setup_logging(level: str, node_id: int | None) -> NodeContext | None:
    handler = logging.StreamHandler(sys.stderr)
    context = None
    if node_id is not None:
        context = NodeContext(node_id)
        handler.addFilter(context)
        fmt = "%(asctime)s node=%(node)s view=%(view)s %(levelname)s %(name)s: %(message)s"
    else:
        fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level.upper())
    return context


def cluster_client_tls(config: NodeConfig, client: int) -> TlsFiles | None:
    if config.tls is None:
        return None
    certs = config.tls.ca.parent
    return TlsFiles(config.tls.ca, certs / f"client{client}.pem", certs / f"client{client}.key")


# ------------------------------------------------------------------- node


def _cmd_node(args: argparse.Namespace) -> int:
    try:
        config = load_cluster_file(
            args.config, args.id, kvstore_ok=False, address=args.address, region=args.region
        )
        app = load_app(args.app)
        check_before_start(config, args)
    except (ConfigError, ValueError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    context = setup_logging(args.log_level, config.node_id)
    tune_gc(args.gc_gen0)
    return run_loop(_run_node(config, app, args, context))


async def keep_freezing() -> None:
    """Every :data:`GC_FREEZE_INTERVAL_S`, collect the young generations and
    freeze what survived.

    Until its log is compacted, a node keeps every command it accepted, millions
    of tuples; a full collection walks them all. That stalled the loop for 80 ms
    under saturation, long enough for peers to suspect the sequencer and change
    the view. Frozen objects are never walked, and they are still freed by
    reference counting when compaction drops them. The cost is that a reference
    cycle that becomes garbage after it was frozen is never reclaimed; the node
    makes few (its data is acyclic tuples), and young ones are collected first.
    """
    import gc

    while True:
        await asyncio.sleep(GC_FREEZE_INTERVAL_S)
        gc.collect(1)
        gc.freeze()


def tune_gc(gen0: int) -> None:
    """A node process allocates a few tuples per command and keeps almost none:
    the cyclic collector's default (a young collection every 700 allocations)
    then costs a tenth of the node's CPU for nothing. The command owns its
    process, so it sets the threshold; the library never touches the collector."""
    import gc

    if gen0 > 0:
        gc.freeze()  # what was built at start-up is never collected
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(gen0, gen1, gen2)


async def _run_node(
    config: NodeConfig, app: Any, args: argparse.Namespace, context: NodeContext | None
) -> int:
    from sdpaxos.runtime.node import Node

    metrics = None
    if args.metrics is not None:
        from sdpaxos.runtime.metrics import NodeMetrics

        metrics = NodeMetrics(config.node_id)
    node = Node(
        config,
        app,
        fsync=not args.no_fsync,
        metrics=metrics,
        listen_host=args.listen,
        trace_events=args.trace_events or (),
        bootstrap=args.bootstrap,
    )
    if context is not None:
        context.node = node

    def banner() -> str:
        return (
            f"node {config.node_id} listening on {config.me.host}:{node.bound_port}, "
            f"data in {config.data_dir}"
        )

    return await serve_until_signalled(node, config.node_id, args, metrics, banner)


class _Served(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


async def serve_until_signalled(
    served: _Served, node_id: int, args: argparse.Namespace, metrics: Any, banner: Callable[[], str]
) -> int:
    """Start ``served`` (a node, or a kv-store node), serve ``/metrics`` if
    asked, print ``banner()``, and run until SIGINT or SIGTERM; then stop.

    0 after a signal; 1, with one line saying why, if it could not start or
    serve its metrics (it is stopped again then)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if not await start_node(served.start(), node_id):
        return 1
    server = None
    try:
        if metrics is not None:
            server = await serve_node_metrics(metrics, args.metrics)
            if server is None:
                return 1
        freezer = loop.create_task(keep_freezing()) if args.gc_gen0 > 0 else None
        print(banner(), flush=True)
        await stop.wait()
        if freezer is not None:
            freezer.cancel()
    finally:
        await served.stop()
        if server is not None:
            await server.close()
    return 0


# ------------------------------------------------------------------ local


def _cmd_local(args: argparse.Namespace) -> int:
    from sdpaxos.runtime.local import LOCAL_REPLICAS_MAX, make_local_cluster

    profile = None
    try:
        load_app(args.app)  # every node would exit at once on a name it cannot load
        if not 1 <= args.replicas <= LOCAL_REPLICAS_MAX:
            raise ValueError(f"--replicas must be in 1..{LOCAL_REPLICAS_MAX}, got {args.replicas}")
        if args.profile != "none":
            profile = builtin(args.profile)
            if profile.size < args.replicas:
                raise ValueError(
                    f"profile {profile.name} has {profile.size} regions, "
                    f"--replicas is {args.replicas}"
                )
    except (ValueError, ProfileError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    made = args.dir is None
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sdpaxos-local-"))
    regions = list(profile.regions[: args.replicas]) if profile is not None else None
    try:
        path = make_local_cluster(
            root,
            args.replicas,
            insecure=args.insecure,
            regions=regions,
            emulator={"profile": profile.name} if profile is not None else None,
            protocol={
                "name": args.protocol,
                **(
                    {"rtt_ms": [list(r) for r in profile.subset(regions).replica_rtt_ms()]}
                    if profile is not None and regions is not None
                    else {}
                ),
            },
        )
    except (ValueError, OSError) as exc:
        if made:
            with contextlib.suppress(OSError):
                root.rmdir()
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    config = load_cluster_file(path, 0, kvstore_ok=False)
    # Fresh directories: the nodes bootstrap (on ones with data the flag is ignored).
    cmd = [sys.executable, "-m", _PACKAGE, "node", "--config", str(path), "--bootstrap"]
    cmd += ["--app", args.app, "--log-level", args.log_level]
    if args.no_fsync:
        cmd.append("--no-fsync")
    procs = []
    for k in range(args.replicas):
        procs.append(
            subprocess.Popen(
                [*cmd, "--id", str(k)],
                stdout=subprocess.DEVNULL,
                stderr=open(root / f"node{k}.log", "ab"),  # noqa: SIM115 - the child owns it
            )
        )
    print(f"{args.protocol} cluster of {args.replicas} in {root} (profile {args.profile})")
    print(f"{'id':>3}  {'region':<6}  {'address':<21}  data directory / log")
    for r in config.replicas:
        print(
            f"{r.id:>3}  {r.region:<6}  {r.host + ':' + str(r.port):<21}  "
            f"{root / f'node{r.id}'}  {root / f'node{r.id}.log'}"
        )
    print(f"status: python -m sdpaxos status --config {path}")
    print("Ctrl-C stops the cluster.", flush=True)
    code = _watch(procs, root)
    print("stopped.")
    return code


def _watch(procs: list[subprocess.Popen[bytes]], root: Path) -> int:
    """Report each node that exits; stop them all on Ctrl-C or SIGTERM (0), or
    once every node has exited (1: there is no cluster left to run)."""

    def _terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    reported: set[int] = set()
    code = 0
    try:
        while True:
            for k, p in enumerate(procs):
                if p.poll() is not None and k not in reported:
                    reported.add(k)
                    print(f"node {k} exited with status {p.returncode}; see {root}/node{k}.log")
            if len(reported) == len(procs):
                print("error: every node exited", file=sys.stderr)
                code = 1
                break
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("stopping ...", flush=True)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, deadline - time.monotonic()))
            if p.poll() is None:
                p.kill()
    return code


# ----------------------------------------------------------------- status


async def statuses(config: NodeConfig, client: int, timeout_s: float) -> list[dict[str, Any]]:
    from sdpaxos.runtime.client import Client

    async def one(k: int) -> dict[str, Any]:
        r = config.replicas[k]
        c = Client(
            [(r.host, r.port)], tls=cluster_client_tls(config, client), attempt_timeout_s=timeout_s
        )
        try:
            return await c.status(timeout_s)
        except (TimeoutError, OSError, Exception) as exc:  # one node down is not an error
            return {"id": k, "address": f"{r.host}:{r.port}", "down": str(exc) or "no answer"}
        finally:
            await c.close()

    return list(await asyncio.gather(*(one(k) for k in range(len(config.replicas)))))


def _cell(value: object) -> str:
    """A status field; ``-`` for one the node's protocol lacks (None)."""
    return "-" if value is None else str(value)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    head = [
        "id",
        "address",
        "region",
        "view",
        "seq",
        "lease",
        "executed",
        "max lag",
        "snapshot",
        "log MB",
        "rtt ms (peers)",
        "epoch",
        "role",
    ]
    lines = [head]
    for s in rows:
        if "down" in s:
            lines.append([str(s["id"]), s["address"], "-", "down", *[""] * (len(head) - 4)])
            continue
        peers = s.get("peers", [])
        lags = [p["lag_slots"] for p in peers if p.get("lag_slots") is not None]
        rtts = " ".join(
            f"{p['id']}:{p['rtt_ms']:.1f}" if p.get("rtt_ms") is not None else f"{p['id']}:-"
            for p in peers
        )
        lines.append(
            [
                str(s["id"]),
                s["address"],
                s["region"],
                _cell(s["view"]),
                _cell(s["sequencer"]),
                "yes" if s["has_lease"] else "",
                _cell(s["executed_upto"]),
                str(max(lags)) if lags else "-",
                _cell(s["snapshot_slot"]),
                f"{s['log_bytes'] / 1e6:.1f}",
                rtts,
                _cell(s.get("epoch")),
                _cell(s.get("role")),
            ]
        )
    widths = [max(len(row[k]) for row in lines) for k in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines
    )


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        config = load_cluster_file(args.config, 0, kvstore_ok=True)
    except ConfigError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    rows = run_loop(statuses(config, args.client, args.timeout))
    more = extra_nodes(config, rows)  # added nodes the file does not list
    tls = cluster_client_tls(config, args.client)
    rows += run_loop(statuses_of(more, tls, args.timeout)) if more else []
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        print("\n".join([format_table(rows), *membership_lines(rows)]))
    return 0 if all("down" not in r for r in rows) else 1


# ------------------------------------------------------------------ admin


def _cmd_admin(args: argparse.Namespace) -> int:
    from sdpaxos.runtime.client import Client, ClientError

    try:
        config = load_cluster_file(args.config, 0, kvstore_ok=True)
    except ConfigError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    tls = cluster_client_tls(config, args.client)
    if args.operation in CHANGE_COMMANDS:
        try:
            request = change_request(args.operation, args.argument, args)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        change = CHANGE_COMMANDS[args.operation]
        return run_loop(run_change(config, tls, change, request, args.id, args.timeout))
    if args.id is not None and not 0 <= args.id < len(config.replicas):
        print(
            f"error: --id {args.id}: not a replica in 0..{len(config.replicas) - 1}",
            file=sys.stderr,
        )
        return 2
    if len(args.argument) > 1:
        print(f"error: {args.operation} takes one argument at most", file=sys.stderr)
        return 2
    op, arg = args.operation, (args.argument[0] if args.argument else None)
    argument: Any = None
    if op == "partition":
        if arg is None:
            print('error: partition needs groups, e.g. "0,1|2"', file=sys.stderr)
            return 2
        operation, argument = "partition", arg
    elif op == "heal":
        operation = "partition"
    elif op == "snapshot":
        operation = "snapshot"
    else:
        if arg is None or not arg.isdigit():
            print("error: transfer-sequencer needs a replica id", file=sys.stderr)
            return 2
        operation, argument = "transfer_sequencer", int(arg)
    targets = [args.id] if args.id is not None else list(range(len(config.replicas)))

    async def run() -> int:
        status = 0
        for k in targets:
            r = config.replicas[k]
            c = Client([(r.host, r.port)], tls=tls)
            try:
                value = await c.admin(operation, argument, STATUS_TIMEOUT_S)
                print(f"node {k}: ok {admin_answer(operation, value)}")
            except (ClientError, TimeoutError, OSError) as exc:
                print(f"node {k}: {exc}")
                status = 1
            finally:
                await c.close()
        return status

    return run_loop(run())


# ------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineParser(prog="python -m sdpaxos", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    n = sub.add_parser("node", help="run one replica")
    add_node_arguments(n)
    n.add_argument("--app", default="digest", help=f"{', '.join(APPS)} or package.module:Class")
    n.add_argument(
        "--trace-events",
        type=trace_event_names,
        default=None,
        metavar="NAMES",
        help="comma-separated core trace events to keep, timed, in the status (protocols"
        " with a tracer; e.g. StragglerSuspect,StragglerViewChange; the names are"
        " tla/README.md's)",
    )
    n.add_argument("--address", default=None, help="HOST:PORT of a node not in the file's list")
    n.add_argument("--region", default=None, help="the region of a node not in the file's list")
    n.set_defaults(func=_cmd_node)

    loc = sub.add_parser("local", help="a cluster of node processes on this machine")
    loc.add_argument("--replicas", type=int, default=3)
    loc.add_argument("--profile", default="paper3", help="delay profile, or 'none'")
    loc.add_argument("--dir", default=None, help="where to keep it (default: a new temp dir)")
    loc.add_argument("--insecure", action="store_true", help="no TLS (a laboratory only)")
    loc.add_argument("--app", default="digest")
    loc.add_argument(
        "--protocol",
        default=DEFAULT_PROTOCOL,
        choices=PROTOCOL_NAMES,
        help="the replication protocol",
    )
    loc.add_argument("--no-fsync", action="store_true")
    loc.add_argument("--log-level", type=log_level_name, default="INFO", help=", ".join(LOG_LEVELS))
    loc.set_defaults(func=_cmd_local)

    st = sub.add_parser("status", help="every node's status")
    st.add_argument("--config", required=True, help="the cluster's file (a kv-store's too)")
    st.add_argument("--json", action="store_true")
    st.add_argument("--client", type=bounded_int(0), default=0, help="client certificate number")
    st.add_argument("--timeout", type=positive_seconds, default=STATUS_TIMEOUT_S)
    st.set_defaults(func=_cmd_status)

    ad = sub.add_parser("admin", help="partition, heal, snapshot, transfer-sequencer, *-replica")
    ad.add_argument("--config", required=True, help="the cluster's file (a kv-store's too)")
    ad.add_argument("--id", type=int, default=None, help="one node (default: every node)")
    ad.add_argument("--client", type=bounded_int(0), default=0)
    ops = ["partition", "heal", "snapshot", "transfer-sequencer", *CHANGE_COMMANDS]
    ad.add_argument("operation", choices=ops)
    ad.add_argument("argument", nargs="*", default=[], help='e.g. "0,1|2", or node ids')
    add_change_arguments(ad)
    ad.set_defaults(func=_cmd_admin)

    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    code: int = args.func(args)
    return code
