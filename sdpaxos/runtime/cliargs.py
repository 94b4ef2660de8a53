"""What the commands share: their options, how they fail, and what they check
before a node touches its data directory.

Every mistake is one line and a nonzero exit, never a traceback (the project's
rule for bad input): :class:`OneLineParser` makes argparse's own errors one
line, :func:`one_line` any exception's text, and the ``type=`` checkers below
refuse a value when the command line is read, before anything is written.
Used by ``python -m sdpaxos`` (:mod:`sdpaxos.runtime.cli`), ``python -m
sdpaxos certs`` and ``kvstore``.
"""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, NoReturn

from sdpaxos.core.errors import ConfigError
from sdpaxos.runtime.config import NodeConfig, parse_config, read_toml

__all__ = [
    "GC_GEN0_DEFAULT",
    "LOG_LEVELS",
    "TRACE_EVENT_NAMES",
    "OneLineParser",
    "add_node_arguments",
    "bounded_int",
    "check_before_start",
    "host_port",
    "load_cluster_file",
    "log_level_name",
    "one_line",
    "positive_seconds",
    "serve_node_metrics",
    "start_node",
    "trace_event_names",
]

#: ``node``: allocations between young collections (Python's default is 700).
GC_GEN0_DEFAULT = 50_000
#: ``--log-level`` choices (any case).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: ``--gc-gen0``: largest threshold (a young collection every this many allocations).
GC_GEN0_MAX = 10_000_000
#: The core's trace events (``tla/README.md``): what ``--trace-events`` may name.
#: ``tests/runtime/test_cli.py`` checks it against the names ``sdpaxos/core`` emits.
TRACE_EVENT_NAMES = frozenset(
    {
        "AbandonCRecovery",
        "AbandonViewChange",
        "AllocateO",
        "AllocateStop",
        "LearnStop",
        "StartEpoch",
        "InstallEpoch",
        "AskRange",
        "BecomeSequencer",
        "CommitC",
        "CommitO",
        "DeferVote",
        "Establish",
        "Execute",
        "FetchSnapshot",
        "FutureView",
        "HandleCAccept",
        "HandleCAck",
        "HandleCCommit",
        "HandleCPrepare",
        "HandleCPromise",
        "HandleCRequest",
        "HandleHandover",
        "HandleHeartbeat",
        "HandleNewView",
        "HandleOAccept",
        "HandleOAck",
        "HandleOCommit",
        "HandleRReply",
        "HandleRRequest",
        "HandleVRequest",
        "HandleVote",
        "IgnoreVRequest",
        "InstallSnapshot",
        "LearnRequest",
        "Propose",
        "Ready",
        "Reject",
        "Repropose",
        "Restart",
        "Resync",
        "SendNewView",
        "SequencerHandover",
        "Stale",
        "StartCRecovery",
        "StartViewChange",
        "StragglerSuspect",
        "StragglerViewChange",
        "TakeSnapshot",
        "VoteBelowSnapshot",
    }
)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose mistakes are one line (``prog: error: ...``)
    and exit 2, not the usage block followed by the error: the message is what
    the operator needs, ``--help`` has the rest."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def one_line(exc: BaseException) -> str:
    """An exception's text on one line (an ``OSError``: its file and reason)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    return " ".join(str(exc).split()) or type(exc).__name__


def bounded_int(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``low .. high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f"{low}..{high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"expected an integer in {bounds}, got {value}")
        return value

    return parse


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def log_level_name(text: str) -> str:
    if text.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.upper()


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` (host 127.0.0.1): where ``--metrics`` serves."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT or PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def trace_event_names(text: str) -> list[str]:
    names = [e for e in text.split(",") if e]
    unknown = [e for e in names if e not in TRACE_EVENT_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown trace event {unknown[0]!r} (the core's events are in tla/README.md;"
            " e.g. StragglerSuspect, StragglerViewChange, Establish)"
        )
    return names


def load_cluster_file(
    path: Path | str,
    node_id: int | None,
    *,
    kvstore_ok: bool,
    address: str | None = None,
    region: str | None = None,
) -> NodeConfig:
    """The runtime's view of a cluster file. A kv-store's file (a ``[kvstore]``
    section) serves ``status`` and ``admin`` too, which talk to the nodes' peer
    ports only (``kvstore_ok``); ``node`` refuses it, naming ``kvstore serve``."""
    raw = read_toml(path)
    if "kvstore" in raw:
        if not kvstore_ok:
            raise ConfigError(
                f"{path}: a kv-store's file (it has [kvstore]): run its nodes with kvstore serve"
            )
        raw = {k: v for k, v in raw.items() if k != "kvstore"}
    return parse_config(
        raw,
        base_dir=Path(path).parent,
        node_id=node_id,
        source=str(path),
        listen_at=address,
        region_of_node=region,
    )


def add_node_arguments(p: argparse.ArgumentParser, *, log_level: str = "INFO") -> None:
    """The options of a command that runs one node (``node``, ``kvstore serve``)."""
    p.add_argument("--config", required=True, help="the cluster's TOML file")
    p.add_argument("--id", type=int, default=None, help="this node's id (else [node] id)")
    p.add_argument(
        "--bootstrap",
        action="store_true",
        help="this node starts a brand-new cluster: it may start on an empty data directory"
        " (without it, it refuses to; ignored once the directory holds data)",
    )
    p.add_argument("--no-fsync", action="store_true", help="skip fsync (benchmarks only)")
    p.add_argument("--listen", default=None, help="host to listen on (default: its address)")
    p.add_argument(
        "--metrics", type=host_port, default=None, metavar="HOST:PORT", help="serve /metrics here"
    )
    p.add_argument(
        "--log-level", type=log_level_name, default=log_level, help=", ".join(LOG_LEVELS)
    )
    p.add_argument(
        "--gc-gen0",
        type=bounded_int(0, GC_GEN0_MAX),
        default=GC_GEN0_DEFAULT,
        help="allocations between young garbage collections, and survivors frozen each "
        "second (0: Python's defaults)",
    )


def _resolve(option: str, host: str) -> None:
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(
            f"{option} {host}: not an address of this machine ({one_line(exc)})"
        ) from None


def check_before_start(config: NodeConfig, args: argparse.Namespace) -> None:
    """What a node command checks before the node touches its data directory:
    that the hosts it will listen on resolve and its TLS files load (a
    :class:`ConfigError` otherwise)."""
    from sdpaxos.runtime.tls import check_tls_files

    _resolve("--listen", args.listen if args.listen is not None else config.me.host)
    if args.metrics is not None:
        _resolve("--metrics", args.metrics[0])
    if config.tls is not None:
        check_tls_files(config.tls)


async def start_node(start: Coroutine[Any, Any, None], node_id: int) -> bool:
    """Await a node's ``start()``; print why it failed, in one line, if it did.

    A refused data directory, a port in use or a listen address that is not
    this machine's is the operator's to fix, not a stack trace."""
    from sdpaxos.runtime.errors import NodeError
    from sdpaxos.runtime.log import LogCorrupted

    try:
        await start
    except (NodeError, LogCorrupted, OSError) as exc:
        print(f"error: node {node_id} did not start: {one_line(exc)}", file=sys.stderr)
        return False
    return True


async def serve_node_metrics(metrics: Any, where: tuple[str, int]) -> Any:
    """Serve ``/metrics`` at ``where`` and say so; None (and why) if it cannot."""
    from sdpaxos.runtime.metrics import serve_metrics

    host, port = where
    try:
        server = await serve_metrics(metrics, host, port)
    except OSError as exc:
        print(f"error: --metrics {host}:{port}: {one_line(exc)}", file=sys.stderr)
        return None
    print(f"metrics at http://{host}:{server.port}/metrics", flush=True)
    return server
