"""A node's admin operations, as the ``admin`` channel and ``python -m sdpaxos
admin`` ask for them by name.

Why a room of its own: the node is the facade; what each operation does with
its parts (the driver, the emulator, the membership's operations) is here.
Operations that take long (the membership changes: a learner catches up, a
stop is committed) answer with an awaitable, which the clients' side answers
when it is done (:meth:`sdpaxos.runtime.clients.Clients._admin_request`).

==========================  =========================================================
``snapshot``                ask the core for a snapshot now
``transfer_sequencer``      argument: a node id
``partition``               argument: a spec like ``"0,1|2"``, or nil to heal
``emulator``                the delay emulator's counters
``membership``              the membership as this node knows it
``add_replica``             argument: ``[id, "host:port", region]`` (awaitable)
``remove_replica``          argument: an id (awaitable)
``replace_replica``         argument: ``[old, new, "host:port", region]`` (awaitable)
==========================  =========================================================
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from sdpaxos.core.types import ReplicaId
from sdpaxos.protocols import ProtocolSpec
from sdpaxos.runtime.changes import Changes
from sdpaxos.runtime.config import NodeConfig
from sdpaxos.runtime.driver import Driver
from sdpaxos.runtime.emulator import LinkEmulator
from sdpaxos.runtime.partition import parse_partition
from sdpaxos.runtime.peers import Peers


class Node(Protocol):
    """What the operations need of a node (the facade passes itself)."""

    driver: Driver | None
    protocol: ProtocolSpec
    emulator: LinkEmulator | None
    peers: Peers | None
    config: NodeConfig
    changes: Changes | None

    def add_replica(self, node_id: int, address: str, region: str) -> Awaitable[dict[str, Any]]: ...
    def remove_replica(self, node_id: int) -> Awaitable[dict[str, Any]]: ...
    def replace_replica(
        self, old: int, new: int, address: str, region: str
    ) -> Awaitable[dict[str, Any]]: ...


__all__ = ["MEMBERSHIP_OPERATIONS", "run_admin"]

#: The operations that change the membership (they answer with an awaitable).
MEMBERSHIP_OPERATIONS = ("add_replica", "remove_replica", "replace_replica")


def run_admin(
    node: Node, operation: str, argument: Any
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    """Carry out ``operation``; a :class:`ValueError` says why it cannot be."""
    driver = node.driver
    if driver is None:
        raise ValueError("node not started")
    spec = node.protocol
    if operation == "snapshot":
        driver.request_snapshot()
        return {"requested": True}
    if operation == "transfer_sequencer":
        if not spec.capabilities.sequencer_transfer:
            raise ValueError(f"{spec.title} has no sequencer to transfer")
        if type(argument) is not int:
            raise ValueError("transfer_sequencer needs a replica id")
        spec.transfer_sequencer(driver.replica, ReplicaId(argument))
        driver.kick()
        return {"target": argument}
    if operation in ("partition", "emulator"):
        emulator = node.emulator
        if emulator is None:
            raise ValueError("this node runs without the delay emulator")
        if operation == "partition":
            if argument is None:
                emulator.heal()
            else:
                if type(argument) is not str:
                    raise ValueError("partition needs a spec string like '0,1|2'")
                emulator.partition(parse_partition(argument, node.config.cluster.replicas))
        assert node.peers is not None
        return node.peers.emulator_json()
    if operation == "membership" or operation in MEMBERSHIP_OPERATIONS:
        return _membership(node, operation, argument)
    raise ValueError(f"unknown admin operation {operation!r}")


def _membership(
    node: Node, operation: str, argument: Any
) -> dict[str, Any] | Awaitable[dict[str, Any]]:
    if node.changes is None:
        raise ValueError(f"{node.protocol.title} runs a fixed set of replicas")
    if operation == "membership":
        return node.changes.describe()
    items = argument if isinstance(argument, list | tuple) else [argument]
    if operation == "add_replica":
        if len(items) != 3:
            raise ValueError("add_replica needs [id, 'host:port', region]")
        return node.add_replica(items[0], items[1], items[2])
    if operation == "remove_replica":
        if len(items) != 1:
            raise ValueError("remove_replica needs an id")
        return node.remove_replica(items[0])
    if len(items) != 4:
        raise ValueError("replace_replica needs [old, new, 'host:port', region]")
    return node.replace_replica(items[0], items[1], items[2], items[3])
