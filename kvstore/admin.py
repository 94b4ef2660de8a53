"""``kvstore admin --config FILE add-replica ID | remove-replica ID |
replace-replica OLD NEW`` and the membership part of ``kvstore status``.

Why a room of its own: :mod:`kvstore.cli` runs nodes; this changes and shows a
running cluster's membership (``docs/membership.md``). The work is the
runtime's (:mod:`sdpaxos.runtime.cli_members`: the request, the member asked,
the answer printed); what the kv-store adds is its file: a new node's peer
address and region come from its ``[kvstore] spares`` entry (``kvstore local
--spares K`` writes them), unless ``--address`` and ``--region`` say otherwise,
and ``status`` shows every node's Redis address, the spares' too.

A change returns once it is committed and prints the new membership; a refusal
(a member added again, a non-member removed, a second change while one is in
progress, ...) prints why and exits 1, and the membership is unchanged. Bad
input the command can see itself (an id the file has no spare for, a word that
is no id) exits 2 before any node is asked.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from kvstore.config import KVConfig, load_kv_config
from sdpaxos.core.errors import ConfigError
from sdpaxos.core.types import ReplicaId
from sdpaxos.runtime.cli import (
    STATUS_TIMEOUT_S,
    cluster_client_tls,
    format_table,
    run_loop,
    statuses,
)
from sdpaxos.runtime.cli_members import (
    CHANGE_COMMANDS,
    add_change_arguments,
    change_request,
    extra_nodes,
    membership_lines,
    run_change,
    statuses_of,
)
from sdpaxos.runtime.cliargs import bounded_int, one_line, positive_seconds
from sdpaxos.runtime.config import NodeConfig, ReplicaAddress

__all__ = ["add_admin_parser", "add_status_parser", "cmd_admin", "cmd_status"]


def add_admin_parser(sub: Any) -> None:
    """``kvstore admin``'s options (``sub``: the command's subparsers)."""
    ad = sub.add_parser("admin", help="add-replica, remove-replica, replace-replica")
    ad.add_argument("--config", required=True, help="the cluster's file")
    ad.add_argument("--id", type=int, default=None, help="ask this node (default: each in turn)")
    ad.add_argument("--client", type=bounded_int(0), default=0, help="client certificate number")
    ad.add_argument("operation", choices=list(CHANGE_COMMANDS))
    ad.add_argument("argument", nargs="*", default=[], help="node ids: ID, or OLD NEW")
    add_change_arguments(ad)


def add_status_parser(sub: Any) -> None:
    st = sub.add_parser("status", help="every node's status and the membership")
    st.add_argument("--config", required=True)
    st.add_argument("--json", action="store_true")
    st.add_argument("--client", type=bounded_int(0), default=0, help="client certificate number")
    st.add_argument("--timeout", type=positive_seconds, default=STATUS_TIMEOUT_S)


def _error(text: str, code: int) -> int:
    print(f"error: {text}", file=sys.stderr)
    return code


def _with_spares(config: KVConfig) -> NodeConfig:
    """The runtime's view of the file with the spares after the replicas: the
    nodes a change is asked of, in turn (a spare added earlier may be the only
    member left that runs). Only the list of nodes to ask: nothing starts from it."""
    spares = tuple(
        ReplicaAddress(ReplicaId(s.id), s.address[0], s.address[1], s.region) for s in config.spares
    )
    return dataclasses.replace(config.node, replicas=config.node.replicas + spares)


def cmd_admin(args: argparse.Namespace) -> int:
    try:
        config = load_kv_config(args.config, 0)
    except ConfigError as exc:
        return _error(one_line(exc), 2)
    words: list[str] = list(args.argument)
    bad = [w for w in words if not w.isdigit()]
    if bad:
        return _error(f"a node id is an integer, got {bad[0]!r}", 2)
    if args.operation != "remove-replica" and words:
        # The new node's address and region: the file's (a spare's, or a
        # replica's, which the members then refuse, saying it is one).
        new = int(words[-1])
        listed = {int(r.id): r for r in _with_spares(config).replicas}
        if new not in listed and (args.address is None or args.region is None):
            known = ", ".join(str(s.id) for s in config.spares) or "none"
            return _error(
                f"node {new} is no spare of {args.config} (its spares: {known}):"
                " give --address HOST:PORT and --region NAME",
                2,
            )
        if new in listed:
            node = listed[new]
            args.address = args.address or f"{node.host}:{node.port}"
            args.region = args.region or node.region
    try:
        request = change_request(args.operation, words, args)
    except ValueError as exc:
        return _error(str(exc), 2)
    nodes = _with_spares(config)
    if args.id is not None and all(int(r.id) != args.id for r in nodes.replicas):
        return _error(f"--id {args.id}: neither a replica nor a spare of {args.config}", 2)
    tls = cluster_client_tls(config.node, args.client)
    change = CHANGE_COMMANDS[args.operation]
    code: int = run_loop(run_change(nodes, tls, change, request, args.id, args.timeout))
    return code


async def _all_statuses(config: KVConfig, client: int, timeout_s: float) -> list[dict[str, Any]]:
    """The file's replicas', its spares', and any other node the statuses name."""
    tls = cluster_client_tls(config.node, client)
    rows = await statuses(config.node, client, timeout_s)
    spares = [(s.id, s.address[0], s.address[1]) for s in config.spares]
    rows += await statuses_of(spares, tls, timeout_s) if spares else []
    more = [n for n in extra_nodes(config.node, rows) if config.spare(n[0]) is None]
    rows += await statuses_of(more, tls, timeout_s) if more else []
    return rows


def cmd_status(args: argparse.Namespace) -> int:
    try:
        config = load_kv_config(args.config, 0)
    except ConfigError as exc:
        return _error(one_line(exc), 2)
    rows = run_loop(_all_statuses(config, args.client, args.timeout))
    for row in rows:
        address = config.redis_of(int(row["id"]))
        row["redis"] = "-" if address is None else f"{address[0]}:{address[1]}"
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        table = format_table(rows).splitlines()
        width = max(len(line) for line in table)
        redis = ["redis"] + [r["redis"] for r in rows]
        print("\n".join(f"{line.ljust(width)}  {r}" for line, r in zip(table, redis, strict=True)))
        for line in membership_lines(rows):
            print(line)
    return 0 if all("down" not in r for r in rows) else 1
