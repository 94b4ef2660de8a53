"""``python -m sdpaxos admin ... add-replica | remove-replica | replace-replica``
and the membership part of ``status``.

Why a room of its own: :mod:`sdpaxos.runtime.cli` holds the commands every
protocol has; these are a changing membership's (``docs/membership.md``).

A change is asked of one member (``--id``, else the config file's replicas in
turn, then the members their statuses name, skipping nodes that are down or no
member); it returns once the change is committed and the epoch has switched at
that member, and prints the new membership, or prints the refusal (the
membership is unchanged) and exits 1. The request is sent once: a change that
takes long is not resent by the client (its attempt timeout is the change's).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from sdpaxos.runtime.changes import CHANGE_TIMEOUT_S
from sdpaxos.runtime.config import NodeConfig, TlsFiles

__all__ = [
    "CHANGE_COMMANDS",
    "add_change_arguments",
    "admin_answer",
    "change_request",
    "membership_lines",
    "run_change",
    "statuses_of",
]

#: The admin commands that change the membership, and their admin operations.
CHANGE_COMMANDS = {
    "add-replica": "add_replica",
    "remove-replica": "remove_replica",
    "replace-replica": "replace_replica",
}
#: Beyond the change's own timeout, how long the command waits for its answer.
ANSWER_MARGIN_S = 15.0


def add_change_arguments(p: argparse.ArgumentParser) -> None:
    """The admin parser's options of the membership changes."""
    p.add_argument("--address", default=None, help="add/replace-replica: the new node's host:port")
    p.add_argument("--region", default=None, help="add/replace-replica: the new node's region")
    p.add_argument(
        "--timeout",
        type=float,
        default=CHANGE_TIMEOUT_S,
        help="how long to wait for a change's answer, in seconds (the node gives up"
        f" after {CHANGE_TIMEOUT_S:.0f})",
    )


def _node_id(text: str, what: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{what} must be a node id (an integer), got {text!r}")
    return int(text)


def change_request(command: str, words: Sequence[str], args: argparse.Namespace) -> Any:
    """The admin argument of ``command`` from the command line's words; a
    :class:`ValueError` says what is missing."""
    if command == "remove-replica":
        if len(words) != 1:
            raise ValueError("remove-replica needs one id: remove-replica ID")
        return _node_id(words[0], "ID")
    if args.address is None or args.region is None:
        raise ValueError(f"{command} needs --address HOST:PORT and --region NAME")
    host, sep, port = args.address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--address must be HOST:PORT, got {args.address!r}")
    if command == "add-replica":
        if len(words) != 1:
            raise ValueError("add-replica needs one id: add-replica ID --address ... --region ...")
        return [_node_id(words[0], "ID"), args.address, args.region]
    if len(words) != 2:
        raise ValueError("replace-replica needs two ids: replace-replica OLD NEW --address ...")
    return [_node_id(words[0], "OLD"), _node_id(words[1], "NEW"), args.address, args.region]


async def run_change(
    config: NodeConfig,
    tls: TlsFiles | None,
    operation: str,
    argument: Any,
    only: int | None,
    timeout_s: float,
) -> int:
    """Ask a member for the change; print the new membership or why not."""
    from sdpaxos.runtime.client import Client, ClientError

    targets: list[tuple[int, str, int]] = [(int(r.id), r.host, r.port) for r in config.replicas]
    if only is not None:
        targets = [t for t in targets if t[0] == only] or [(only, "", 0)]
    tried: list[str] = []
    for node_id, host, port in targets:
        if not host:
            print(f"error: node {node_id} is not in the file's replica list", file=sys.stderr)
            return 2
        client = Client([(host, port)], tls=tls, attempt_timeout_s=timeout_s + ANSWER_MARGIN_S)
        try:
            value = await client.admin(operation, argument, timeout_s + ANSWER_MARGIN_S)
        except ClientError as exc:
            text = str(exc)
            if "no member" in text and only is None:
                tried.append(f"node {node_id}: {text}")
                continue
            print(f"error: {text}", file=sys.stderr)
            return 1
        except (TimeoutError, OSError) as exc:
            tried.append(f"node {node_id}: {exc or 'no answer'}")
            continue
        finally:
            await client.close()
        print(f"ok (asked node {node_id})")
        for line in describe(value):
            print(line)
        return 0
    print("error: no member answered: " + "; ".join(tried), file=sys.stderr)
    return 1


def describe(value: Any) -> list[str]:
    """The membership an operation answered, as lines."""
    if not isinstance(value, dict):
        return [str(value)]
    lines = [f"epoch {value.get('epoch')}, sequencer {value.get('sequencer')}"]
    for n in value.get("members", []):
        lines.append(f"  member  {n.get('id')}  {n.get('address')}  {n.get('region')}")
    for n in value.get("learners", []):
        lag = n.get("lag_slots")
        lines.append(
            f"  learner {n.get('id')}  {n.get('address')}  {n.get('region')}"
            f"  lag {'-' if lag is None else lag} slots"
        )
    return lines


def membership_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What ``status`` prints under its table: the membership as the node in
    the newest epoch knows it (its members, its learners with their lag)."""
    known = [r for r in rows if "down" not in r and r.get("epoch") is not None]
    if not known:
        return []
    newest = max(known, key=lambda r: (r["epoch"], r.get("role") == "member"))
    lines = describe(
        {
            "epoch": newest["epoch"],
            "sequencer": newest.get("sequencer"),
            "members": newest.get("members", []),
            "learners": newest.get("learners", []),
        }
    )
    if newest.get("pending"):
        lines.append(f"  change in progress: next members {list(newest['pending'])}")
    return ["", f"membership (as node {newest['id']} sees it): {lines[0]}", *lines[1:]]


async def statuses_of(
    nodes: Sequence[tuple[int, str, int]], tls: TlsFiles | None, timeout_s: float
) -> list[dict[str, Any]]:
    """The statuses of ``nodes`` (``(id, host, port)``); one that does not
    answer is a row that says it is down."""
    import asyncio

    from sdpaxos.runtime.client import Client

    async def one(node_id: int, host: str, port: int) -> dict[str, Any]:
        c = Client([(host, port)], tls=tls, attempt_timeout_s=timeout_s)
        try:
            return await c.status(timeout_s)
        except Exception as exc:  # one node down is not an error
            return {"id": node_id, "address": f"{host}:{port}", "down": str(exc) or "no answer"}
        finally:
            await c.close()

    return list(await asyncio.gather(*(one(*n) for n in nodes)))


def extra_nodes(config: NodeConfig, rows: Sequence[dict[str, Any]]) -> list[tuple[int, str, int]]:
    """Members and learners the statuses name that the file does not list."""
    listed = {int(r.id) for r in config.replicas}
    found: dict[int, tuple[str, int]] = {}
    for row in rows:
        for n in [*row.get("members", []), *row.get("learners", [])]:
            node_id, address = n.get("id"), n.get("address", "")
            host, sep, port = str(address).rpartition(":")
            if type(node_id) is int and node_id not in listed and sep and port.isdigit():
                found[node_id] = (host.strip("[]"), int(port))
    return [(k, h, p) for k, (h, p) in sorted(found.items())]


def admin_answer(operation: str, value: Any) -> str:
    """What a node answered, whole: for a partition (or heal) the links it now
    blocks, else the answer's JSON."""
    if (
        operation == "partition"
        and isinstance(value, dict)
        and isinstance(value.get("links"), dict)
    ):
        blocked = sorted(int(j) for j, link in value["links"].items() if link.get("blocked"))
        return f"blocks links to {', '.join(map(str, blocked))}" if blocked else "blocks no link"
    return json.dumps(value, default=str, sort_keys=True)
