"""The membership as replicated state: who the members are, and the changes to it.

``docs/membership.md`` is the design. The membership of a cluster is part of the
state its log builds: a :class:`Membership` value (the epoch, its members in
position order, the learners, the retired ids, the change waiting for its stop).
A change is a command like any other (:func:`encode_op`), ordered and executed in
the global log; :class:`MemberMachine` runs it, deterministically, beside the
application, so every replica reaches the same verdict and the same membership,
and a snapshot carries it (the machine's snapshot holds both).

A change of the member list does not take effect when it executes: it becomes
*pending*, the sequencer allocates the stop, and executing the stop starts the
next epoch (:meth:`Membership.next_epoch`). Learners are in no quorum, so adding
or removing one takes effect at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

from sdpaxos.core.app import StateMachine
from sdpaxos.core.errors import ConfigError, PeerMessageError
from sdpaxos.core.storage import pack_value, unpack_value

#: Most members of one epoch (the commit rules are checked up to seven).
MEMBERS_MAX = 7
#: Most learners at once.
LEARNERS_MAX = 4
#: Largest node id (ids are small integers an operator chooses, used once).
NODE_ID_MAX = (1 << 16) - 1
#: Longest address and region names a node may have.
NODE_TEXT_BYTES_MAX = 255
#: A command whose payload starts with this is a membership change. Clients
#: cannot send one: :class:`~sdpaxos.core.member.Member` refuses such payloads
#: from :meth:`~sdpaxos.core.member.Member.propose`.
MEMBERSHIP_PREFIX = b"\x00\xffsdpaxos/membership\x00"
#: Bump when the packed layout of a membership changes.
MEMBERSHIP_FORMAT = 1


class OpKind(IntEnum):
    """The membership commands (``docs/membership.md`` section 2)."""

    ADD_LEARNER = 1
    PROMOTE = 2
    REMOVE = 3
    REPLACE = 4


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node the membership names: its id, and where and in which region it runs.

    The address and region are the runtime's business (the core only carries
    them, so that every node learns where a new one listens).
    """

    id: int
    address: str = ""
    region: str = ""

    def __post_init__(self) -> None:
        if type(self.id) is not int or not 0 <= self.id <= NODE_ID_MAX:
            raise ConfigError(f"node id must be an integer in 0..{NODE_ID_MAX}, got {self.id!r}")
        for name in ("address", "region"):
            text = getattr(self, name)
            if not isinstance(text, str) or len(text.encode()) > NODE_TEXT_BYTES_MAX:
                raise ConfigError(
                    f"node {name} must be text of at most {NODE_TEXT_BYTES_MAX} bytes"
                )

    def packed(self) -> tuple[int, bytes, bytes]:
        return (self.id, self.address.encode(), self.region.encode())

    @staticmethod
    def unpacked(value: object) -> NodeInfo:
        if (
            not isinstance(value, tuple)
            or len(value) != 3
            or not isinstance(value[1], bytes)
            or not isinstance(value[2], bytes)
        ):
            raise PeerMessageError(f"bad node in a membership: {value!r}")
        try:
            return NodeInfo(value[0], value[1].decode(), value[2].decode())
        except (ConfigError, UnicodeDecodeError) as exc:
            raise PeerMessageError(f"bad node in a membership: {exc}") from None


@dataclass(frozen=True, slots=True)
class MembershipOp:
    """One membership command.

    ``ADD_LEARNER``: ``node`` becomes a learner. ``PROMOTE``: learner ``target``
    becomes a member of the next epoch. ``REMOVE``: ``target`` (a member, or a
    learner) leaves. ``REPLACE``: learner ``node.id`` takes member ``target``'s
    place. ``sequencer``: the sequencer of the next epoch's view 0, if the
    operator names one (else the current one if it stays, else the first member).
    ``op_id``: chosen by the proposer, so that a retried command is recognised.
    """

    kind: OpKind
    target: int = -1
    node: NodeInfo | None = None
    sequencer: int = -1
    op_id: int = 0


def encode_op(op: MembershipOp) -> bytes:
    """The payload of the command that asks for ``op``."""
    node = op.node.packed() if op.node is not None else None
    return MEMBERSHIP_PREFIX + pack_value((int(op.kind), op.target, node, op.sequencer, op.op_id))


def decode_op(payload: bytes) -> MembershipOp:
    """The op a membership command's payload holds.

    Raises:
        PeerMessageError: not a well-formed membership command.
    """
    if not payload.startswith(MEMBERSHIP_PREFIX):
        raise PeerMessageError("not a membership command")
    value = unpack_value(payload[len(MEMBERSHIP_PREFIX) :])
    if not isinstance(value, tuple) or len(value) != 5:
        raise PeerMessageError("membership command has an unknown layout")
    kind, target, node, sequencer, op_id = value
    try:
        op_kind = OpKind(kind)
    except ValueError:
        raise PeerMessageError(f"unknown membership command {kind!r}") from None
    for name, item in (("target", target), ("sequencer", sequencer), ("op_id", op_id)):
        if type(item) is not int:
            raise PeerMessageError(f"membership command {name} {item!r}")
    return MembershipOp(
        op_kind, target, None if node is None else NodeInfo.unpacked(node), sequencer, op_id
    )


def encode_result(ok: bool, message: str) -> bytes:
    """A membership command's result: whether it was applied, and what it did or why not."""
    return pack_value((ok, message.encode()))


def decode_result(result: bytes | None) -> tuple[bool, str]:
    """The ``(applied, message)`` of a membership command's result."""
    if result is None:
        return (False, "no result")
    value = unpack_value(result)
    if not isinstance(value, tuple) or len(value) != 2 or not isinstance(value[1], bytes):
        raise PeerMessageError("membership result has an unknown layout")
    return (value[0] is True, value[1].decode(errors="replace"))


@dataclass(frozen=True, slots=True)
class Pending:
    """A member change executed and waiting for its stop."""

    members: tuple[NodeInfo, ...]
    sequencer: int
    retire: tuple[int, ...]
    op_id: int


@dataclass(frozen=True, slots=True)
class Membership:
    """The membership of one epoch, as the executed log left it.

    ``members`` are in position order (position ``p`` is the core's replica
    ``p`` in this epoch); ``sequencer`` is the node id of view 0's sequencer;
    ``base`` the global slot of the epoch's first slot.
    """

    epoch: int
    members: tuple[NodeInfo, ...]
    sequencer: int
    base: int = 0
    learners: tuple[NodeInfo, ...] = ()
    retired: tuple[int, ...] = ()
    pending: Pending | None = None
    #: The op id of the last command applied (a retry of it is answered the same).
    last_op: int = 0
    #: Node id -> position (every message a member gets is looked up here).
    positions: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ids = [n.id for n in self.members]
        object.__setattr__(self, "positions", {node: p for p, node in enumerate(ids)})
        if not 1 <= len(ids) <= MEMBERS_MAX:
            raise ConfigError(f"a membership has 1..{MEMBERS_MAX} members, got {len(ids)}")
        everyone = ids + [n.id for n in self.learners]
        if len(set(everyone)) != len(everyone):
            raise ConfigError(f"a node is listed twice in {everyone}")
        if self.sequencer not in ids:
            raise ConfigError(f"sequencer {self.sequencer} is not a member of {ids}")
        if set(everyone) & set(self.retired):
            raise ConfigError("a retired id is listed as a member or learner")

    @staticmethod
    def initial(nodes: tuple[NodeInfo, ...], sequencer_position: int = 0) -> Membership:
        """Epoch 0: the config file's replicas, in order."""
        if not 0 <= sequencer_position < len(nodes):
            raise ConfigError(f"sequencer position {sequencer_position} is not a member")
        return Membership(0, tuple(nodes), nodes[sequencer_position].id)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.members)

    @property
    def learner_ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.learners)

    def position(self, node_id: int) -> int | None:
        """``node_id``'s position in this epoch, or None if it is no member."""
        return self.positions.get(node_id)

    def node(self, node_id: int) -> NodeInfo | None:
        for n in self.members + self.learners:
            if n.id == node_id:
                return n
        return None

    @property
    def sequencer_position(self) -> int:
        position = self.position(self.sequencer)
        assert position is not None  # __post_init__
        return position

    # ------------------------------------------------------------- changes

    def apply(self, op: MembershipOp) -> tuple[Membership, bool, str]:
        """Execute ``op``: the new membership, whether it was applied, and a message.

        Deterministic: reads only this value. A refused op returns ``self``.
        """
        if op.op_id and op.op_id == self.last_op:
            return (self, True, f"already applied (op {op.op_id})")
        refusal = self._refusal(op)
        if refusal is not None:
            return (self, False, refusal)
        done = replace(self, last_op=op.op_id or self.last_op)
        if op.kind is OpKind.ADD_LEARNER:
            assert op.node is not None
            new = replace(done, learners=(*self.learners, op.node))
            return (new, True, f"node {op.node.id} is a learner")
        if op.kind is OpKind.REMOVE and op.target in self.learner_ids:
            learners = tuple(n for n in self.learners if n.id != op.target)
            new = replace(done, learners=learners, retired=(*self.retired, op.target))
            return (new, True, f"learner {op.target} removed")
        members, retire = self._next_members(op)
        ids = [n.id for n in members]
        if op.sequencer >= 0:
            sequencer = op.sequencer
        elif self.sequencer in ids:
            sequencer = self.sequencer
        else:
            # A member that stays: a joiner must fetch the base before it can act.
            sequencer = next((i for i in ids if i in self.ids), ids[0])
        pending = Pending(members, sequencer, retire, op.op_id)
        return (
            replace(done, pending=pending),
            True,
            f"epoch {self.epoch + 1} will have members {ids} (sequencer {sequencer})",
        )

    def _refusal(self, op: MembershipOp) -> str | None:
        ids, learners = self.ids, self.learner_ids
        kind, target = op.kind, op.target
        if kind is OpKind.ADD_LEARNER:
            if op.node is None:
                return "add-learner names no node"
            new = op.node.id
            if new in ids:
                return f"node {new} is already a member"
            if new in learners:
                return f"node {new} is already a learner"
            if new in self.retired:
                return f"node id {new} was removed before; ids are never reused"
            if len(learners) >= LEARNERS_MAX:
                return f"at most {LEARNERS_MAX} learners at once"
            return None
        if kind is OpKind.REMOVE and target in learners:
            return None
        if self.pending is not None:
            return (
                f"a change is in progress (epoch {self.epoch + 1} with members"
                f" {[n.id for n in self.pending.members]} waits for its stop)"
            )
        if kind is OpKind.PROMOTE:
            if target not in learners:
                return f"node {target} is not a learner (add it first)"
            if len(ids) + 1 > MEMBERS_MAX:
                return f"at most {MEMBERS_MAX} members"
        elif kind is OpKind.REMOVE:
            if target not in ids:
                return f"node {target} is neither a member nor a learner"
            if len(ids) == 1:
                return "the last member cannot be removed"
        elif kind is OpKind.REPLACE:
            if target not in ids:
                return f"node {target} is not a member"
            new = op.node.id if op.node is not None else -1
            if new not in learners:
                return f"node {new} is not a learner (add it first)"
        if op.sequencer >= 0:
            members, _ = self._next_members(op)
            if op.sequencer not in [n.id for n in members]:
                return f"sequencer {op.sequencer} would not be a member"
        return None

    def _next_members(self, op: MembershipOp) -> tuple[tuple[NodeInfo, ...], tuple[int, ...]]:
        if op.kind is OpKind.PROMOTE:
            joining = self.node(op.target)
            assert joining is not None
            return ((*self.members, joining), ())
        if op.kind is OpKind.REMOVE:
            return (tuple(n for n in self.members if n.id != op.target), (op.target,))
        # REPLACE: the learner takes the member's position.
        assert op.node is not None
        joining = self.node(op.node.id)
        assert joining is not None
        members = tuple(joining if n.id == op.target else n for n in self.members)
        return (members, (op.target,))

    def next_epoch(self, base: int) -> Membership:
        """The stop at slot ``base - 1`` executed: the pending change takes effect."""
        pending = self.pending
        if pending is None:
            raise ValueError("no change is pending")
        joined = {n.id for n in pending.members}
        return Membership(
            self.epoch + 1,
            pending.members,
            pending.sequencer,
            base,
            tuple(n for n in self.learners if n.id not in joined),
            (*self.retired, *pending.retire),
            None,
            self.last_op,
        )

    # ------------------------------------------------------------ encoding

    def packed(self) -> tuple[object, ...]:
        pending = self.pending
        return (
            MEMBERSHIP_FORMAT,
            self.epoch,
            tuple(n.packed() for n in self.members),
            self.sequencer,
            self.base,
            tuple(n.packed() for n in self.learners),
            self.retired,
            None
            if pending is None
            else (
                tuple(n.packed() for n in pending.members),
                pending.sequencer,
                pending.retire,
                pending.op_id,
            ),
            self.last_op,
        )

    @staticmethod
    def unpacked(value: object) -> Membership:
        """The membership :meth:`packed` made.

        Raises:
            PeerMessageError: malformed, or not a valid membership.
        """
        if not isinstance(value, tuple) or len(value) != 9 or value[0] != MEMBERSHIP_FORMAT:
            raise PeerMessageError("membership has an unknown layout")
        _, epoch, members, sequencer, base, learners, retired, pending, last_op = value
        for name, item in (("epoch", epoch), ("base", base), ("sequencer", sequencer)):
            if type(item) is not int or item < 0:
                raise PeerMessageError(f"membership {name} {item!r}")
        if type(last_op) is not int:
            raise PeerMessageError(f"membership last op {last_op!r}")
        if not isinstance(members, tuple) or not isinstance(learners, tuple):
            raise PeerMessageError("membership lists are malformed")
        if not isinstance(retired, tuple) or not all(type(r) is int for r in retired):
            raise PeerMessageError("membership retired ids are malformed")
        parsed_pending: Pending | None = None
        if pending is not None:
            if (
                not isinstance(pending, tuple)
                or len(pending) != 4
                or not isinstance(pending[0], tuple)
                or type(pending[1]) is not int
                or not isinstance(pending[2], tuple)
                or not all(type(r) is int for r in pending[2])
                or type(pending[3]) is not int
            ):
                raise PeerMessageError("membership pending change is malformed")
            parsed_pending = Pending(
                tuple(NodeInfo.unpacked(n) for n in pending[0]), pending[1], pending[2], pending[3]
            )
        try:
            return Membership(
                epoch,
                tuple(NodeInfo.unpacked(n) for n in members),
                sequencer,
                base,
                tuple(NodeInfo.unpacked(n) for n in learners),
                retired,
                parsed_pending,
                last_op,
            )
        except ConfigError as exc:
            raise PeerMessageError(f"invalid membership: {exc}") from None


class MemberMachine:
    """The state machine a member's replica applies: the application, and the membership.

    A membership command (its payload starts with :data:`MEMBERSHIP_PREFIX`)
    changes :attr:`membership`; anything else goes to the application. The
    snapshot holds both, so a restart and a snapshot install know the epoch.
    """

    def __init__(self, app: StateMachine, membership: Membership) -> None:
        self.app = app
        self.membership = membership
        #: A member change became pending (the member asks its replica for a stop).
        self.changed = False

    def apply(self, payload: bytes) -> bytes:
        if not payload.startswith(MEMBERSHIP_PREFIX):
            return self.app.apply(payload)
        try:
            op = decode_op(payload)
        except PeerMessageError as exc:
            return encode_result(False, f"malformed membership command: {exc}")
        new, ok, message = self.membership.apply(op)
        if new is not self.membership:
            self.membership = new
            self.changed = True
        return encode_result(ok, message)

    def snapshot(self) -> bytes:
        return pack_value((self.membership.packed(), self.app.snapshot()))

    def restore(self, data: bytes) -> None:
        membership, app = split_state(data)
        self.app.restore(app)
        self.membership = membership

    def next_epoch(self, base: int) -> None:
        """Executing the stop: the pending change takes effect."""
        self.membership = self.membership.next_epoch(base)


def split_state(data: bytes) -> tuple[Membership, bytes]:
    """The membership and the application's snapshot a :class:`MemberMachine` snapshot holds.

    Raises:
        PeerMessageError: malformed.
    """
    value = unpack_value(data)
    if not isinstance(value, tuple) or len(value) != 2 or not isinstance(value[1], bytes):
        raise PeerMessageError("member state has an unknown layout")
    return (Membership.unpacked(value[0]), value[1])


def snapshot_membership(data: bytes) -> Membership:
    """The membership inside an encoded snapshot of a :class:`MemberMachine`.

    Raises:
        PeerMessageError: malformed.
    """
    value = unpack_value(data)
    if not isinstance(value, tuple) or len(value) != 7 or not isinstance(value[6], bytes):
        raise PeerMessageError("snapshot has an unknown layout")
    return split_state(value[6])[0]
