"""A node's side of a changing membership: its member, its peers, its changes.

Why a room of its own: :class:`~sdpaxos.runtime.node.Node` is the facade of
every protocol; what only a protocol whose membership changes needs
(``Capabilities.membership``, ``docs/membership.md``) lives here, and the node
holds one :class:`Changes` when its protocol has it:

- building the :class:`~sdpaxos.runtime.membership.MemberReplica` from the log,
  with epoch 0 from the config file and the data directory's word on whether
  this node is new (:func:`~sdpaxos.runtime.datadir.is_new_node`);
- keeping the peers in step with the membership (:meth:`Changes.follow`);
- the membership part of the status (:meth:`Changes.status_fields`);
- the operators' changes (:class:`Operations`): ``add-replica`` is
  ``add-learner``, the wait for the learner to catch up, then ``promote``;
  ``replace-replica`` the same with ``replace``; ``remove-replica`` one
  ``remove``. What the core cannot check (liveness, the new node's address and
  certificate, one change at a time here) is checked before anything is
  proposed, so that a refusal changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Iterator
from typing import Any

from sdpaxos.core.app import StateMachine
from sdpaxos.core.errors import ConfigError
from sdpaxos.core.membership import (
    NODE_ID_MAX,
    Membership,
    MembershipOp,
    NodeInfo,
    OpKind,
    decode_result,
    encode_op,
)
from sdpaxos.core.storage import Record, Snapshot
from sdpaxos.core.types import Command, Wait
from sdpaxos.protocols import Tracer
from sdpaxos.runtime.calls import Calls
from sdpaxos.runtime.config import NodeConfig
from sdpaxos.runtime.datadir import is_new_node
from sdpaxos.runtime.errors import NotMember
from sdpaxos.runtime.membership import MemberReplica, initial_membership
from sdpaxos.runtime.peers import Peers

__all__ = ["CHANGE_TIMEOUT_S", "ChangeRefused", "Changes", "Operations"]


class Changes:
    """The membership side of one node (see the module docstring)."""

    def __init__(self, config: NodeConfig, member: MemberReplica) -> None:
        self.config = config
        self.member = member
        #: The membership the peers were last set from.
        self._seen: Membership | None = None

    @classmethod
    def start(
        cls,
        config: NodeConfig,
        state_machine: StateMachine,
        records: list[Record],
        snapshot: Snapshot | None,
        rng: random.Random,
        tracer: Tracer | None,
    ) -> Changes:
        """The member rebuilt from what the log holds: epoch 0 is the config
        file's replicas; a node whose directory was new (not bootstrapped)
        waits to be added."""
        initial = initial_membership(
            [(int(r.id), f"{r.host}:{r.port}", r.region) for r in config.replicas],
            int(config.cluster.sequencer),
        )
        member = MemberReplica(
            int(config.node_id),
            initial,
            state_machine,
            protocol=config.cluster,
            rng=rng,
            records=records,
            snapshot=snapshot,
            bootstrap=not is_new_node(config.data_dir),
            tracer=tracer,
        )
        return cls(config, member)

    @property
    def membership(self) -> Membership:
        return self.member.member.membership

    def changed(self) -> bool:
        """Has the membership changed since the peers were last set from it?"""
        return self.member.member.membership is not self._seen

    def follow(self, peers: Peers) -> None:
        """Dial the members and learners of the membership this node knows."""
        membership = self.membership
        self._seen = membership
        nodes: dict[int, tuple[str, int]] = {}
        regions: dict[int, str] = {}
        for n in (*membership.members, *membership.learners):
            host, sep, port = n.address.rpartition(":")
            if sep and port.isdigit():
                nodes[n.id] = (host.strip("[]"), int(port))
                regions[n.id] = n.region
        peers.update(nodes, self.member.member.replica is not None, regions)

    def describe(self) -> dict[str, Any]:
        """The membership as the operations print it."""
        view = self.member.view_of_membership()
        return {
            "epoch": view.epoch,
            "members": list(view.members),
            "learners": list(view.learners),
            "sequencer": view.sequencer,
        }

    def status_fields(self) -> dict[str, Any]:
        """The membership fields of :class:`~sdpaxos.runtime.status.NodeStatus`."""
        view = self.member.view_of_membership()
        return {
            "epoch": view.epoch,
            "role": view.role,
            "members": view.members,
            "learners": view.learners,
            "pending": view.pending,
        }


# --------------------------------------------------------------- the operations


class ChangeRefused(ValueError):
    """A membership change was refused (the message says why); the membership
    is unchanged. A :class:`ValueError`, so that the admin channel answers it
    as an error, word for word."""


#: How long an operation waits, in all, by default (the learner's catch-up,
#: the verdicts, the switch to the new epoch here).
CHANGE_TIMEOUT_S = 60.0
#: How often an operation looks at the member while it waits.
CHANGE_POLL_S = 0.05
#: How long ``add-replica`` and ``replace-replica`` wait for the new node to be
#: connected (with TLS, with a certificate that names its id).
CONNECT_WAIT_S = 10.0


class Operations:
    """add-replica, remove-replica, replace-replica at one member (``docs/membership.md``
    section 2): each returns once the change is committed and the epoch has
    switched here, or raises :class:`ChangeRefused` with the refusal."""

    def __init__(self, changes: Changes, calls: Calls, peers: Peers, rng: random.Random) -> None:
        self.changes = changes
        self.calls = calls
        self.peers = peers
        self.rng = rng
        #: One operation at a time at this node (the core refuses a second
        #: member change while one is pending; this refuses it before anything).
        self.busy: str | None = None

    # ------------------------------------------------------------- the three

    async def add_replica(
        self, node_id: int, address: str, region: str, timeout_s: float = CHANGE_TIMEOUT_S
    ) -> dict[str, Any]:
        node = _node_info(node_id, address, region)
        with self._one(f"add-replica {node_id}"):
            m = self._check_can_change()
            if node_id in m.ids:
                raise ChangeRefused(
                    f"node {node_id} is already a member of epoch {m.epoch}"
                    f" (members {list(m.ids)}); membership unchanged"
                )
            self._check_live((*m.ids, node_id), m)
            deadline = _now() + timeout_s
            await self._make_learner(node, m, deadline)
            await self._propose(MembershipOp(OpKind.PROMOTE, target=node_id), deadline)
            await self._switched(m.epoch, deadline)
            return self.changes.describe()

    async def remove_replica(
        self, node_id: int, timeout_s: float = CHANGE_TIMEOUT_S
    ) -> dict[str, Any]:
        _check_id(node_id)
        with self._one(f"remove-replica {node_id}"):
            m = self.changes.membership
            deadline = _now() + timeout_s
            if node_id in m.learner_ids:
                self._check_member()
                await self._propose(MembershipOp(OpKind.REMOVE, target=node_id), deadline)
                return self.changes.describe()
            if node_id not in m.ids:
                raise ChangeRefused(
                    f"node {node_id} is neither a member nor a learner of epoch {m.epoch}"
                    f" (members {list(m.ids)}, learners {list(m.learner_ids)});"
                    " membership unchanged"
                )
            m = self._check_can_change()
            if len(m.ids) == 1:
                raise ChangeRefused("the last member cannot be removed; membership unchanged")
            self._check_live(tuple(i for i in m.ids if i != node_id), m)
            await self._propose(MembershipOp(OpKind.REMOVE, target=node_id), deadline)
            await self._switched(m.epoch, deadline)
            return self.changes.describe()

    async def replace_replica(
        self,
        old: int,
        new: int,
        address: str,
        region: str,
        timeout_s: float = CHANGE_TIMEOUT_S,
    ) -> dict[str, Any]:
        _check_id(old)
        node = _node_info(new, address, region)
        with self._one(f"replace-replica {old} {new}"):
            m = self._check_can_change()
            if old not in m.ids:
                raise ChangeRefused(
                    f"node {old} is not a member of epoch {m.epoch} (members {list(m.ids)});"
                    " membership unchanged"
                )
            if new in m.ids:
                raise ChangeRefused(
                    f"node {new} is already a member of epoch {m.epoch}; membership unchanged"
                )
            self._check_live(tuple(new if i == old else i for i in m.ids), m)
            deadline = _now() + timeout_s
            await self._make_learner(node, m, deadline)
            op = MembershipOp(OpKind.REPLACE, target=old, node=node)
            await self._propose(op, deadline)
            await self._switched(m.epoch, deadline)
            return self.changes.describe()

    # ------------------------------------------------------------- the steps

    @contextlib.contextmanager
    def _one(self, what: str) -> Iterator[None]:
        if self.busy is not None:
            raise ChangeRefused(
                f"{self.busy} is in progress at this node: one change at a time;"
                " membership unchanged"
            )
        self.busy = what
        try:
            yield
        finally:
            self.busy = None

    def _check_member(self) -> None:
        refusal = self.changes.member.refusal()
        if refusal is not None:
            raise ChangeRefused(f"{refusal}: ask a member; membership unchanged")

    def _check_can_change(self) -> Membership:
        self._check_member()
        m = self.changes.membership
        if m.pending is not None:
            raise ChangeRefused(
                f"a change is in progress (epoch {m.epoch + 1} with members"
                f" {[n.id for n in m.pending.members]} waits for its stop);"
                " membership unchanged"
            )
        return m

    def _check_live(self, new_ids: tuple[int, ...], m: Membership) -> None:
        """Refuse a change whose new member list has fewer live members than a
        majority of the old list needs (liveness is this node's failure detector:
        itself, and the peers it is connected to)."""
        live = {self.changes.member.id} | self.peers.connected_ids()
        alive = [i for i in new_ids if i in live]
        need = len(m.ids) // 2 + 1
        if len(alive) < need:
            down = [i for i in new_ids if i not in live]
            raise ChangeRefused(
                f"the new members {list(new_ids)} would have {len(alive)} live"
                f" ({alive}), fewer than a majority of the current {len(m.ids)} ({need});"
                f" believed down: {down}; membership unchanged"
            )

    async def _make_learner(self, node: NodeInfo, m: Membership, deadline: float) -> None:
        """``node`` as a learner (added unless it is one), caught up."""
        if node.id not in m.learner_ids:
            await self._connected(node, min(deadline, _now() + CONNECT_WAIT_S))
            await self._propose(MembershipOp(OpKind.ADD_LEARNER, node=node), deadline)
        member = self.changes.member.member
        while True:
            lag = member.learner_lag(node.id)
            if lag is not None and lag <= member.learner_lag_slots_max:
                return
            if _now() > deadline:
                raise ChangeRefused(
                    f"learner {node.id} has not caught up in time (lag"
                    f" {'unknown' if lag is None else lag} slots, bound"
                    f" {member.learner_lag_slots_max}); it stays a learner: run the command"
                    f" again, or remove-replica {node.id}"
                )
            await asyncio.sleep(CHANGE_POLL_S)

    async def _connected(self, node: NodeInfo, deadline: float) -> None:
        """Wait until ``node`` is connected (dialled at its address, or dialling
        us), its certificate naming its id when the cluster runs TLS."""
        host, _, port = node.address.rpartition(":")
        refusals = self.peers.refusals
        refusals.pop(node.id, None)
        self.peers.update({node.id: (host.strip("[]"), int(port))}, True)
        while not self.peers.is_connected(node.id):
            why = refusals.get(node.id)
            if why is not None and "certificate" in why:
                raise ChangeRefused(
                    f"node {node.id} at {node.address} is refused: {why}; membership unchanged"
                )
            if _now() > deadline:
                raise ChangeRefused(
                    f"node {node.id} is not connected at {node.address}"
                    + (f" ({why})" if why else " (is it running?)")
                    + "; membership unchanged"
                )
            await asyncio.sleep(CHANGE_POLL_S)

    async def _propose(self, op: MembershipOp, deadline: float) -> str:
        """Propose ``op`` through the log; its verdict, or :class:`ChangeRefused`."""
        op = dataclasses.replace(op, op_id=self.rng.getrandbits(62) | 1)
        calls = self.calls
        session = await calls.session()
        session.seq += 1
        command = Command(session.client_id, session.seq, encode_op(op))
        self.changes.member.allow(command)
        try:
            reply = await calls.propose(command, Wait.EXECUTED, max(0.1, deadline - _now()))
        except NotMember as exc:
            raise ChangeRefused(f"{exc}; membership unchanged") from None
        except TimeoutError:
            raise ChangeRefused(
                f"no verdict on {op.kind.name.lower().replace('_', '-')} in time"
                " (is a majority of the members up?)"
            ) from None
        ok, message = decode_result(reply.result)
        if not ok:
            raise ChangeRefused(f"{message}; membership unchanged")
        return message

    async def _switched(self, epoch: int, deadline: float) -> None:
        """Wait until this node runs an epoch after ``epoch`` (the stop executed here)."""
        while self.changes.membership.epoch <= epoch:
            if _now() > deadline:
                raise ChangeRefused(
                    f"the change is committed, but epoch {epoch + 1} has not started here"
                    " in time (its stop waits for a majority of the members)"
                )
            await asyncio.sleep(CHANGE_POLL_S)


def _now() -> float:
    return time.monotonic()


def _check_id(node_id: object) -> int:
    if type(node_id) is not int or not 0 <= node_id <= NODE_ID_MAX:
        raise ChangeRefused(f"a node id is an integer in 0..{NODE_ID_MAX}, got {node_id!r}")
    return node_id


def _node_info(node_id: object, address: object, region: object) -> NodeInfo:
    """The new node, checked: its id, an address that is ``host:port``, a region."""
    _check_id(node_id)
    if not isinstance(address, str):
        raise ChangeRefused(f"the address must be host:port, got {address!r}")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ChangeRefused(f"the address must be host:port, got {address!r}")
    if not isinstance(region, str) or not region:
        raise ChangeRefused(f"the region must be a name, got {region!r}")
    try:
        return NodeInfo(int(node_id), address, region)  # type: ignore[call-overload]
    except ConfigError as exc:
        raise ChangeRefused(str(exc)) from None
