"""A node of a cluster whose membership changes: one :class:`Replica` per epoch.

``docs/membership.md`` is the design. Each epoch is a plain SDPaxos cluster of
the epoch's members, which the core knows by *position* (``0 .. N-1``). A
:class:`Member` is what a driver runs instead of a bare replica: it wraps every
message in an :class:`EpochMessage` (its epoch and the sender's node id), hands
the replica of the current epoch only messages of that epoch from its members,
asks the replica for the stop once a member change is pending, and when the
replica has executed the stop, starts the next epoch from the state there
(:attr:`Ready.epoch_base`) as a member, a learner or a removed node.

Non-members (learners, nodes waiting to be added) hold no replica and fetch the
newest state from a member (:class:`StatePull`, :class:`StateChunk`) every
``learn_ms``. A node with no state of its own never becomes a member by fetching
one: named a member, it lost its state and says so (:attr:`Role.LOST`). Pure like
the rest of the core: no I/O, no clock, randomness only from ``rng``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from typing import cast

from sdpaxos.core import epochs
from sdpaxos.core.app import StateMachine, Tracer
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import LocalProtocolError, PeerMessageError
from sdpaxos.core.membership import (
    MEMBERSHIP_PREFIX,
    MemberMachine,
    Membership,
    MembershipOp,
    encode_op,
    snapshot_membership,
    split_state,
)
from sdpaxos.core.messages import (
    EpochMessage,
    EpochNotice,
    MemberMessage,
    Message,
    StateChunk,
    StatePull,
)
from sdpaxos.core.ready import Ready, Reply, ReplyKind
from sdpaxos.core.replica import Replica
from sdpaxos.core.sessions import load_checked
from sdpaxos.core.storage import (
    Record,
    Snapshot,
    decode_snapshot,
    encode_snapshot,
    pack_value,
    unpack_value,
)
from sdpaxos.core.types import CIndex, Command, ReplicaId, Slot, Wait

#: Default of the learner catch-up bound (``docs/membership.md`` section 2).
LEARNER_LAG_SLOTS_MAX = 1024
#: Most peers a member remembers having told of a newer epoch (bounded memory).
NOTICED_PEERS_MAX = 64


class NotMemberError(LocalProtocolError):
    """This node is no member of the epoch that runs: it cannot take commands or reads."""


class Role(Enum):
    """What this node is in the newest epoch it knows."""

    MEMBER = "member"
    LEARNER = "learner"
    #: No state, not named by the membership (yet): waits to be added as a learner.
    WAITING = "waiting"
    REMOVED = "removed"
    #: Named as a member, but this node has no state: it lost its data
    #: directory, and must be replaced (``docs/membership.md`` section 8).
    LOST = "lost"


@dataclass(slots=True)
class _Fetch:
    src: int
    epoch: int
    slot: int
    total: int
    data: bytearray
    asked_ms: float


class Member:
    """One node across epochs: drive it like a :class:`Replica` (step, tick, ready).

    Args:
        node_id: this node's id (the membership's ``NodeInfo.id``).
        initial: epoch 0's membership (the config file's replicas).
        app: the application state machine.
        protocol: the protocol's settings; ``replicas``, ``sequencer`` and
            ``rtt_ms`` are set per epoch from the membership.
        snapshot, records: what this node's storage holds (the newest epoch's).
        bootstrap: a new cluster's first start: with empty storage, join epoch 0
            as a member (without it, empty storage is a new node: it waits).
        rtt_ms: configured round trip between two node ids, if known.
        learner_lag_slots_max: a learner counts as caught up within this many slots.
    """

    def __init__(
        self,
        node_id: int,
        initial: Membership,
        app: StateMachine,
        *,
        protocol: ClusterConfig,
        rng: random.Random | None = None,
        observe: bool = False,
        tracer: Tracer | None = None,
        snapshot: Snapshot | None = None,
        records: list[Record] | None = None,
        bootstrap: bool = False,
        rtt_ms: Callable[[int, int], float | None] | None = None,
        learner_lag_slots_max: int = LEARNER_LAG_SLOTS_MAX,
    ) -> None:
        self.id = node_id
        self.protocol = protocol
        self.rng = rng if rng is not None else random.Random(node_id)
        self.observe, self.tracer, self.rtt_ms = observe, tracer, rtt_ms
        self.learner_lag_slots_max = learner_lag_slots_max
        self.machine = MemberMachine(app, initial)
        self.replica: Replica | None = None
        self.role = Role.WAITING
        #: Does this node hold state of its own (it may be promoted)?
        self.has_state = False
        #: The newest snapshot this node serves, with its epoch.
        self.newest: tuple[int, Snapshot] | None = None
        #: The global slot this node's state reaches when it holds no replica.
        self.state_slot = 0
        #: Effects of this layer, handed over with the replica's at ``ready()``.
        self.out = Ready()
        self.now_ms, self.fetch, self.last_pull_ms = 0.0, cast(_Fetch | None, None), -math.inf
        #: Node ids to pull from when no member is known to be ahead.
        self.seeds = initial.ids
        #: Members: per learner, the global slot it reported.
        self.learner_have: dict[int, int] = {}
        self.members_executed = 0  # a learner: the highest slot a member said it executed
        self.noticed: dict[int, float] = {}  # peer -> when last told of our epoch
        self.early = epochs.EarlyMessages()  # the next epoch's, before this node starts it
        self.stop_requested = False
        #: The snapshot being served in chunks: (epoch, local slot, bytes).
        self.serving: tuple[int, int, bytes] | None = None
        #: Messages of epochs this node does not run, or from non-members, dropped.
        self.dropped = 0
        if snapshot is None and not records:
            if bootstrap and node_id in initial.ids:
                self._start_member(initial, sessions=None)
                self.has_state = True
            return
        self.has_state = True
        if snapshot is None:
            self.role = Role.MEMBER
            self.replica = self._build(initial, records=records or [])
            return
        membership = split_state(snapshot.app)[0]
        self.machine.membership = membership
        self.newest = (membership.epoch, snapshot)
        if membership.position(node_id) is not None:
            self.role = Role.MEMBER
            self.replica = self._build(membership, snapshot=snapshot, records=records or [])
        else:
            self._settle_outside(membership, snapshot)

    # ------------------------------------------------------------ the driver's API

    @property
    def membership(self) -> Membership:
        return self.machine.membership

    @property
    def epoch(self) -> int:
        return self.machine.membership.epoch

    @property
    def executed_upto(self) -> int:
        """Global slots below this are executed (or installed) here."""
        if self.replica is not None:
            return self.membership.base + self.replica.executed_upto
        return self.state_slot

    @property
    def is_sequencer(self) -> bool:
        return self.replica is not None and self.replica.is_sequencer

    def learner_lag(self, node_id: int) -> int | None:
        """Slots learner ``node_id`` is behind this member's execution, or None if unheard."""
        have = self.learner_have.get(node_id)
        return None if have is None else max(0, self.executed_upto - have)

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None:
        """:meth:`Replica.propose`, at a member.

        Raises:
            NotMemberError: this node is no member now.
            LocalProtocolError: the payload is a membership command's (use
                :meth:`propose_change`), or what the replica refuses.
        """
        if command.payload.startswith(MEMBERSHIP_PREFIX):
            raise LocalProtocolError("payloads may not start with the membership prefix")
        self._replica().propose(command, wait)

    def propose_change(self, op: MembershipOp, client_id: int, seq: int) -> Command:
        """Propose membership change ``op`` under session ``(client_id, seq)``; its
        reply (EXECUTED) carries the verdict (:func:`~sdpaxos.core.membership.decode_result`)."""
        command = Command(client_id, seq, encode_op(op))
        self._replica().propose(command, Wait.EXECUTED)
        return command

    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None:
        self._replica().read(read_id, key, now_ms)

    def request_snapshot(self) -> None:
        if self.replica is not None:
            self.replica.request_snapshot()

    def _replica(self) -> Replica:
        if self.replica is None:
            raise NotMemberError(
                f"node {self.id} is no member of epoch {self.epoch} ({self.role.value});"
                f" members are {list(self.membership.ids)}"
            )
        return self.replica

    def step(self, message: MemberMessage, now_ms: float) -> None:
        """Handle one message from a peer; never raises for bad peer input."""
        self.now_ms = now_ms
        try:
            self._step(message, now_ms)
        except PeerMessageError:
            self.dropped += 1

    def tick(self, now_ms: float) -> None:
        self.now_ms = now_ms
        if self.replica is not None:
            self.replica.tick(now_ms)
            behind = self.early.overdue(now_ms, self.protocol.learn_ms)
            if behind is not None and self.fetch is None:
                self._pull(behind)
            return
        fetch = self.fetch
        learn_ms = self.protocol.learn_ms
        if fetch is not None and now_ms - fetch.asked_ms >= learn_ms:
            self.fetch = None  # the source went quiet: pull from another
        if (
            self.role in (Role.LEARNER, Role.WAITING)
            and self.fetch is None
            and now_ms - self.last_pull_ms >= learn_ms
        ):
            self._pull(self._pull_source())

    def ready(self) -> Ready:
        """The effects batch, with messages addressed to node ids (see :class:`Ready`)."""
        r = self.replica
        out = self.out
        self.out = Ready()
        if r is None or out.epoch_base is not None:
            # A base installed since the last batch goes alone: the driver makes
            # it the whole of storage after the batch's records, so the new
            # epoch's records must come in the next batch, or it would forget them.
            return out
        if self.membership.pending is not None and not self.stop_requested:
            self.stop_requested = True
            epochs.request_stop(r)
        epoch, ids = self.epoch, self.membership.ids
        rd = r.ready()
        if rd.snapshot is not None:
            self.newest = (epoch, rd.snapshot)
        if epochs.stopped_at(r) is not None:
            self._end_epoch(r, rd)
        rd.messages = epochs.wrap(rd.messages, epoch, self.id, ids)
        rd.absorb(out)
        rd.absorb(self.out)  # what the end of an epoch added (notices, refusals)
        self.out = Ready()
        return rd

    # ------------------------------------------------------------ epochs

    def _trace(self, event: str, **fields: int) -> None:
        """A trace event of this layer (by node id; the replica's are by position)."""
        if self.tracer is not None:
            self.tracer(event, ReplicaId(self.id), fields)

    def _config(self, membership: Membership) -> ClusterConfig:
        n = len(membership.members)
        rtt = None
        if self.rtt_ms is not None:
            ids = membership.ids
            rows = [[self.rtt_ms(a, b) for b in ids] for a in ids]
            if all(v is not None for row in rows for v in row):
                rtt = tuple(tuple(float(v or 0.0) for v in row) for row in rows)
        return replace(
            self.protocol,
            replicas=n,
            sequencer=ReplicaId(membership.sequencer_position),
            rtt_ms=rtt,
        )

    def _build(
        self,
        membership: Membership,
        *,
        snapshot: Snapshot | None = None,
        records: list[Record] | None = None,
    ) -> Replica:
        position = membership.position(self.id)
        assert position is not None
        self.stop_requested = False
        return Replica(
            self._config(membership),
            ReplicaId(position),
            self.machine,
            rng=self.rng,
            observe=self.observe,
            tracer=self.tracer,
            snapshot=snapshot,
            records=records,
            slot_offset=membership.base,
        )

    def _start_member(self, membership: Membership, sessions: tuple[object, ...] | None) -> None:
        """A fresh replica of ``membership``'s epoch, as at a cluster's start."""
        self.role = Role.MEMBER
        self.machine.membership = membership
        replica = self._build(membership)
        if sessions is not None:
            epochs.begin_epoch(replica, sessions)
        self.replica = replica

    def _settle_outside(self, membership: Membership, snapshot: Snapshot) -> None:
        """No replica in this epoch: a learner, or a removed node."""
        self.replica = None
        self.state_slot = membership.base + snapshot.slot
        self.role = Role.LEARNER if self.id in membership.learner_ids else Role.REMOVED

    def _end_epoch(self, old: Replica, rd: Ready) -> None:
        """``old`` executed the stop: start the next epoch from the state there."""
        stop = epochs.stopped_at(old)
        assert stop is not None
        base = self.membership.base + stop + 1
        unfinished = epochs.unfinished(old)
        epochs.abandon_reads(old)
        rd.absorb(old.ready())
        sessions = epochs.dump_sessions(old)
        before = set(self.membership.ids)
        self.machine.next_epoch(base)
        membership = self.membership
        # A joiner holds no base yet: tell it now, not at its next pull (the new
        # epoch's quorums may need it; its pull would come up to learn_ms late).
        packed = pack_value(membership.packed())
        for joiner in set(membership.ids) - before - {self.id}:
            notice = EpochNotice(self.id, membership.epoch, packed)
            self.out.messages.append((ReplicaId(joiner), cast(Message, notice)))
        n = len(membership.members)
        snap = Snapshot(Slot(0), (0,) * n, (-1,) * n, CIndex(0), sessions, self.machine.snapshot())
        rd.epoch_base = snap
        self.newest = (membership.epoch, snap)
        self._trace("StartEpoch", epoch=membership.epoch, slot=base)
        if membership.position(self.id) is not None:
            self._start_member(membership, sessions)
            assert self.replica is not None
            epochs.suspect_joiners(self.replica, membership.ids, before)
            self._carry(unfinished)
            for early in self.early.take(membership.epoch):
                self._step_epoch(early, self.now_ms)
        else:
            self._settle_outside(membership, snap)
            self._refuse(unfinished)

    def _carry(self, unfinished: list[tuple[Command, Wait]]) -> None:
        replica = self.replica
        assert replica is not None
        for command, wait in unfinished:
            replica.propose(command, wait)

    def _refuse(self, unfinished: list[tuple[Command, Wait]]) -> None:
        for command, _ in unfinished:
            self.out.replies.append(Reply(command.client_id, command.seq, ReplyKind.NOT_MEMBER))

    def _install(self, epoch: int, data: bytes) -> None:
        """A whole snapshot of a newer state than ours arrived: take it up."""
        membership = snapshot_membership(data)
        if membership.epoch != epoch:
            raise PeerMessageError("snapshot's epoch is not the one announced")
        snap = decode_snapshot(data, len(membership.members))
        # Checked before anything changes: a refusal changes nothing.
        load_checked(
            snap.sessions, self.protocol.session_lifetime_slots, self.protocol.sessions_max
        )
        if (membership.epoch, membership.base + snap.slot) <= (self.epoch, self.executed_upto):
            return
        position = membership.position(self.id)
        if position is not None and membership.epoch == self.epoch and self.replica is not None:
            return  # our replica catches up by itself, within its epoch
        if position is not None and not self.has_state:
            self.role = Role.LOST
            self.machine.membership = membership
            return
        old = self.replica
        unfinished = epochs.unfinished(old) if old is not None else []
        if old is not None:
            epochs.abandon_reads(old)
            last = old.ready()
            last.messages = epochs.wrap(last.messages, self.epoch, self.id, self.membership.ids)
            self.out.absorb(last)
        self.machine.restore(snap.app)
        self.early.held.clear()  # a state past them: what they asked is in it
        self._trace("InstallEpoch", epoch=epoch, slot=membership.base + snap.slot)
        if position is None:
            if self.id not in membership.learner_ids and not self.has_state:
                return  # still waiting: keep nothing (the membership is known now)
            self.has_state = True
            self.out.epoch_base = snap
            self.newest = (membership.epoch, snap)
            self._settle_outside(membership, snap)
            self._refuse(unfinished)
            return
        self.out.epoch_base = snap
        self.newest = (membership.epoch, snap)
        if snap.slot == 0:
            # The epoch's base: exactly what executing the stop would give.
            self._start_member(membership, snap.sessions)
        else:
            # Never acted in this epoch: its C-instance bounds are the executed ones.
            mine = replace(
                snap,
                c_max=tuple(e - 1 for e in snap.executed),
                next_index=CIndex(snap.executed[position]),
            )
            self.out.epoch_base = mine
            self.role = Role.MEMBER
            self.replica = self._build(membership, snapshot=mine, records=[])
        self._carry(unfinished)

    # ------------------------------------------------------------ messages

    def _step(self, m: MemberMessage, now_ms: float) -> None:
        if isinstance(m, EpochMessage):
            self._step_epoch(m, now_ms)
        elif isinstance(m, StatePull):
            self._answer_pull(m)
        elif isinstance(m, StateChunk):
            self._take_chunk(m)
        elif isinstance(m, EpochNotice):
            self._take_notice(m)
        else:
            raise PeerMessageError(f"not a member message: {type(m).__name__}")

    def _take_notice(self, m: EpochNotice) -> None:
        """A peer runs epoch ``m.epoch``: fetch its state if this node belongs there."""
        membership = Membership.unpacked(unpack_value(m.membership))
        if membership.epoch != m.epoch:
            raise PeerMessageError("notice's membership is of another epoch")
        if self.replica is not None:
            if m.epoch > self.epoch:
                self._pull(m.src)  # a late member: take the newer epoch's state
            return
        if self.id in membership.learner_ids and (m.epoch, 1) > (self.epoch, 0):
            self._pull(m.src)
        elif self.role is Role.LEARNER and m.epoch > self.epoch:
            self._pull(m.src)  # promoted, or removed: the state says which
        elif not self.has_state and m.epoch >= self.epoch:
            # Nothing of ours to keep consistent: just know the membership.
            self.machine.membership = membership
            if self.id in membership.ids:
                self.role = Role.LOST
            elif self.id in membership.learner_ids:
                self._pull(m.src)

    def _step_epoch(self, m: EpochMessage, now_ms: float) -> None:
        epoch = self.epoch
        if m.epoch == epoch and self.replica is not None:
            position = self.machine.membership.positions.get(m.src)
            if position is None or getattr(m.msg, "src", None) != position:
                self.dropped += 1  # a non-member (a removed replica) never counts
                return
            self.replica.step(m.msg, now_ms)
            return
        if m.epoch == epoch + 1 and self.replica is not None and self.machine.membership.pending:
            if not self.early.hold(m, now_ms):  # its stop is coming: start it, then take these
                self.dropped += 1
            return
        self.dropped += 1
        if m.epoch < epoch and self.has_state:
            last = self.noticed.get(m.src, -float("inf"))
            if now_ms - last >= self.protocol.learn_ms:
                if len(self.noticed) >= NOTICED_PEERS_MAX:
                    self.noticed.pop(next(iter(self.noticed)))
                self.noticed[m.src] = now_ms
                packed = pack_value(self.membership.packed())
                notice = EpochNotice(self.id, epoch, packed)
                self.out.messages.append((ReplicaId(m.src), cast(Message, notice)))
        elif m.epoch > epoch and self.fetch is None:
            self._pull(m.src)

    def _pull_source(self) -> int:
        ids = [i for i in self.membership.ids if i != self.id] or [
            i for i in self.seeds if i != self.id
        ]
        return ids[self.rng.randrange(len(ids))] if ids else self.id

    def _pull(self, src: int) -> None:
        if src == self.id:
            return
        self.last_pull_ms = self.now_ms
        fetch = self.fetch
        if fetch is not None and fetch.src == src:
            slot, offset = fetch.slot, len(fetch.data)
        else:
            self.fetch = None
            slot, offset = -1, 0
        epoch = self.epoch if self.has_state else -1
        pull = StatePull(self.id, epoch, self.executed_upto, slot, offset)
        self.out.messages.append((ReplicaId(src), cast(Message, pull)))

    def _answer_pull(self, m: StatePull) -> None:
        """Serve a node outside this epoch: a late node gets the newest snapshot
        taken (or the base), a learner the state now (its lag stays small). A node
        without a replica serves what it holds: a removed node may be the only one
        left that executed the stop, whose base a late member needs."""
        replica = self.replica
        if replica is None and (self.newest is None or not self.has_state):
            return
        membership = self.membership
        epoch = self.epoch
        if m.src in membership.learner_ids:
            if m.epoch >= 0:
                # Only a learner that holds state has a lag (one with none is not
                # caught up at slot 0: promoted, it could only be Role.LOST).
                self.learner_have[m.src] = m.have
        elif m.src not in membership.ids and not 0 <= m.epoch < epoch:
            # A waiting node needs the membership, not the state. (A node of an
            # older epoch gets the base below: it learns it was removed by it.)
            notice = EpochNotice(self.id, epoch, pack_value(membership.packed()))
            self.out.messages.append((ReplicaId(m.src), cast(Message, notice)))
            return
        serving = self.serving
        if m.offset and serving is not None and (epoch, m.slot) == serving[:2]:
            slot, data, offset = serving[1], serving[2], m.offset
        else:
            newest = self.newest[1] if self.newest is not None else None
            # A late member installs what this epoch's replicas took (its base,
            # or a snapshot taken since); anyone else gets the state now.
            late = 0 <= m.epoch < epoch
            live = None if late or replica is None else epochs.capture_state(replica)
            snap = live or newest
            if snap is None:
                return  # epoch 0 mid-slot, no snapshot yet: the next pull gets one
            slot, data, offset = snap.slot, encode_snapshot(snap), 0
            self.serving = (epoch, slot, data)
        if m.epoch == epoch and membership.base + slot <= m.have:
            return  # nothing newer to give
        part = data[offset : offset + self.protocol.snapshot_chunk_bytes]
        chunk = StateChunk(self.id, epoch, slot, self.executed_upto, offset, len(data), part)
        self.out.messages.append((ReplicaId(m.src), cast(Message, chunk)))

    def _take_chunk(self, m: StateChunk) -> None:
        if m.total > self.protocol.snapshot_bytes_max or m.total < 0:
            raise PeerMessageError(f"snapshot of {m.total} bytes")
        self.members_executed = max(self.members_executed, m.executed)
        fetch = self.fetch
        if m.offset == 0:
            fetch = self.fetch = _Fetch(m.src, m.epoch, m.slot, m.total, bytearray(), self.now_ms)
        same = (m.src, m.epoch, m.slot, m.total)
        if fetch is None or (fetch.src, fetch.epoch, fetch.slot, fetch.total) != same:
            return
        if m.offset != len(fetch.data) or len(fetch.data) + len(m.data) > m.total:
            return
        fetch.data += m.data
        fetch.asked_ms = self.now_ms
        if len(fetch.data) < fetch.total:
            self._pull(m.src)
            return
        self.fetch = None
        self._install(m.epoch, bytes(fetch.data))


__all__ = [
    "LEARNER_LAG_SLOTS_MAX",
    "EpochMessage",
    "EpochNotice",
    "Member",
    "MemberMessage",
    "NotMemberError",
    "Role",
    "StateChunk",
    "StatePull",
    "snapshot_membership",
]
