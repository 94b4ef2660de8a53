"""A :class:`~sdpaxos.core.member.Member` driven like any protocol's replica.

Why an adapter: the driver, the peers and the clients run every protocol
through the one driving API of :class:`~sdpaxos.protocols.CoreReplica`. A
protocol that can change its membership (:attr:`sdpaxos.protocols.Capabilities.membership`)
runs a :class:`Member` instead of a bare replica: one replica per epoch, none at
all while the node is a learner, waits to be added, or was removed.
:class:`MemberReplica` gives it that API, so the rest of the runtime stays the
same, and says in words what the node is (:func:`role_text`).

What it translates:

- **node ids, not positions**: the member addresses its messages to node ids
  already; a round trip measured to node ``n`` goes to the replica as the
  position ``n`` has in the current epoch, and the status names the sequencer
  by its node id;
- **not a member**: a command proposed at a node that holds no replica now is
  answered :attr:`~sdpaxos.core.ready.ReplyKind.NOT_MEMBER` at the next
  ``ready()`` (with the reason in :meth:`MemberReplica.refusal`), a read is
  answered no; the callers turn both into a clear error;
- **counters** of the epochs' replicas are summed, so that a metric never
  goes back when an epoch starts with a fresh replica.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.core.app import StateMachine
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.member import Member, Role
from sdpaxos.core.membership import MEMBERSHIP_PREFIX, Membership, NodeInfo
from sdpaxos.core.ready import ReadResult, Ready, Reply, ReplyKind
from sdpaxos.core.replica import Replica
from sdpaxos.core.storage import Record, Snapshot
from sdpaxos.core.types import Command, ReplicaId, Wait
from sdpaxos.protocols import Tracer

__all__ = ["CoreStatus", "MemberReplica", "MembershipView", "initial_membership", "role_text"]

#: Most refusals (commands at a non-member) held for the next ``ready()``.
REFUSALS_MAX = 65_536
#: Most membership changes allowed and not proposed yet (one operation at a time).
ALLOWED_CHANGES_MAX = 16


def initial_membership(nodes: list[tuple[int, str, str]], sequencer: int) -> Membership:
    """Epoch 0 from the config file's replicas: ``(id, "host:port", region)``."""
    return Membership.initial(
        tuple(NodeInfo(i, address, region) for i, address, region in nodes), sequencer
    )


def role_text(member: Member) -> str:
    """What the node is, in the words its status uses."""
    role = member.role
    if role is Role.MEMBER:
        return "member"
    if role is Role.LEARNER:
        lag = max(0, member.members_executed - member.executed_upto)
        return f"learner, lag {lag} slots"
    if role is Role.REMOVED:
        return "removed"
    if role is Role.LOST:
        return "lost its data: replace it with replace-replica"
    return "waiting to be added as a learner"


@dataclass(frozen=True, slots=True)
class CoreStatus:
    """The part of a replica's status a node reports when it holds no replica."""

    snapshot_slot: int | None = None


@dataclass(frozen=True, slots=True)
class MembershipView:
    """The membership as this node knows it (:meth:`MemberReplica.view_of_membership`)."""

    epoch: int
    role: str
    members: tuple[dict[str, Any], ...]
    learners: tuple[dict[str, Any], ...]
    sequencer: int
    pending: tuple[int, ...] | None
    retired: tuple[int, ...] = field(default_factory=tuple)


class MemberReplica:
    """A :class:`Member` with the driving API of :class:`~sdpaxos.protocols.CoreReplica`."""

    def __init__(
        self,
        node_id: int,
        initial: Membership,
        app: StateMachine,
        *,
        protocol: ClusterConfig,
        rng: random.Random,
        records: list[Record],
        snapshot: Snapshot | None,
        bootstrap: bool,
        tracer: Tracer | None = None,
    ) -> None:
        self.member = Member(
            node_id,
            initial,
            app,
            protocol=protocol,
            rng=rng,
            tracer=tracer,
            snapshot=snapshot,
            records=records,
            bootstrap=bootstrap,
        )
        self.id = node_id
        self._refused: list[Reply] = []
        #: Membership changes this node's operator proposes (see :meth:`allow`).
        self._allowed: set[tuple[int, int]] = set()
        self._reads_refused: list[ReadResult] = []
        #: Counters of the replicas of earlier epochs (a fresh replica starts at 0).
        self._stats_before: dict[str, int] = {}
        self._stats_of: Replica | None = self.member.replica

    # ------------------------------------------------------------- the driving API

    def refusal(self) -> str | None:
        """Why this node takes no commands now (None: it is a member)."""
        member = self.member
        if member.replica is not None:
            return None
        ids = list(member.membership.ids)
        return f"node {self.id} is no member ({role_text(member)}); the members are {ids}"

    def allow(self, command: Command) -> None:
        """``command`` is a membership change this node's operator asked for:
        :meth:`propose` takes it (anyone else's such payload is refused)."""
        if len(self._allowed) >= ALLOWED_CHANGES_MAX:
            self._allowed.pop()
        self._allowed.add((command.client_id, command.seq))

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None:
        """Raises :class:`~sdpaxos.core.errors.LocalProtocolError` for a payload
        with the membership prefix that :meth:`allow` did not allow (the
        callers refuse those first); what a replica refuses, as it does."""
        replica = self.member.replica
        if replica is None:
            if len(self._refused) < REFUSALS_MAX:
                self._refused.append(Reply(command.client_id, command.seq, ReplyKind.NOT_MEMBER))
            return
        if command.payload.startswith(MEMBERSHIP_PREFIX):
            key = (command.client_id, command.seq)
            if key in self._allowed:
                replica.propose(command, Wait.EXECUTED)  # may raise Overloaded: kept
                self._allowed.discard(key)
                return
        self.member.propose(command, wait)

    def step(self, message: Any, now_ms: float) -> None:
        self.member.step(message, now_ms)

    def tick(self, now_ms: float) -> None:
        self.member.tick(now_ms)

    def ready(self) -> Ready:
        rd = self.member.ready()
        replica = self.member.replica
        if replica is not self._stats_of:
            self._carry_stats(replica)
        if self._refused:
            rd.replies.extend(self._refused)
            self._refused = []
        if self._reads_refused:
            rd.reads.extend(self._reads_refused)
            self._reads_refused = []
        return rd

    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None:
        if self.member.replica is None:
            self._reads_refused.append(ReadResult(read_id, False))
            return
        self.member.read(read_id, key, now_ms)

    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None:
        replica = self.member.replica
        position = self.member.membership.position(int(peer))
        if replica is not None and position is not None and position != replica.id:
            replica.observe_rtt(ReplicaId(position), rtt_ms)

    def status(self) -> Any:
        replica = self.member.replica
        return replica.status() if replica is not None else CoreStatus()

    def has_lease(self) -> bool | None:
        replica = self.member.replica
        return replica.has_lease() if replica is not None else False

    def request_snapshot(self) -> None:
        self.member.request_snapshot()

    def transfer_sequencer(self, target: ReplicaId) -> None:
        """Move the sequencer to node ``target`` (a member of this epoch)."""
        position = self.member.membership.position(int(target))
        if position is None:
            raise ValueError(f"node {target} is no member of epoch {self.member.epoch}")
        replica = self.member.replica
        if replica is None:
            raise ValueError(self.refusal() or "no replica")
        replica.transfer_sequencer(ReplicaId(position))

    @property
    def stats(self) -> Any:
        replica = self.member.replica
        now = _ints(replica.stats) if replica is not None else {}
        summed = dict(self._stats_before)
        for k, v in now.items():
            summed[k] = summed.get(k, 0) + v
        return Counters(summed)

    @property
    def executed_upto(self) -> int | None:
        return self.member.executed_upto

    @property
    def proposals_waiting(self) -> int | None:
        replica = self.member.replica
        return replica.proposals_waiting if replica is not None else 0

    @property
    def view(self) -> int | None:
        replica = self.member.replica
        return int(replica.view) if replica is not None else None

    @property
    def sequencer(self) -> int | None:
        """The sequencer's node id (the replica knows it by position)."""
        replica = self.member.replica
        ids = self.member.membership.ids
        if replica is None:
            return self.member.membership.sequencer
        position = replica.sequencer
        return ids[position] if position is not None and position < len(ids) else None

    @property
    def is_sequencer(self) -> bool | None:
        return self.member.is_sequencer

    # ------------------------------------------------------------- membership

    def view_of_membership(self) -> MembershipView:
        member = self.member
        m = member.membership
        pending = m.pending
        return MembershipView(
            epoch=m.epoch,
            role=role_text(member),
            members=tuple(_node(n) for n in m.members),
            learners=tuple({**_node(n), "lag_slots": member.learner_lag(n.id)} for n in m.learners),
            sequencer=m.sequencer,
            pending=None if pending is None else tuple(n.id for n in pending.members),
            retired=m.retired,
        )

    def _carry_stats(self, replica: Replica | None) -> None:
        old = self._stats_of
        if old is not None:
            for k, v in _ints(old.stats).items():
                self._stats_before[k] = self._stats_before.get(k, 0) + v
        self._stats_of = replica


class Counters(dict[str, int]):
    """Counters summed over the epochs' replicas, read as a dict or as
    attributes (``stats.steps``, as a replica's own ``Stats``)."""

    def __getattr__(self, name: str) -> int:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _ints(stats: object) -> dict[str, int]:
    if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        return {k: v for k, v in dataclasses.asdict(stats).items() if type(v) is int}
    return {}


def _node(n: NodeInfo) -> dict[str, Any]:
    return {"id": n.id, "address": n.address, "region": n.region}
