"""``MemberCluster``: a seeded cluster of :class:`~sdpaxos.core.member.Member` nodes.

Why a sibling of :class:`~sdpaxos.sim.cluster.SimCluster` and not a mode of it:
``SimCluster`` drives bare replicas indexed ``0 .. N-1`` for the cluster's whole
life (and is past the size a module should have). A cluster whose membership
changes runs :class:`Member` nodes instead, named by node id, and its node set
grows: a node added later starts on empty storage (``bootstrap=False``) and
waits to be made a learner. What this class keeps from ``SimCluster``: one
:class:`~sdpaxos.sim.scheduler.Scheduler` of events in virtual time, the
:class:`~sdpaxos.sim.network.Network` (delays, loss, duplication, partitions,
per-link counters; one region per node id of a uniform profile), the shared
driver :func:`~sdpaxos.sim.driver.carry_out` (records, snapshot, the epoch's
base, then messages, then answers), and the :class:`~sdpaxos.sim.checkers.Checker`.

What the checker sees, and why it is enough across epochs:

* executed entries, whose ``slot`` is the *global* slot: prefix agreement,
  integrity (exactly-once), real-time order and read freshness are judged on
  the one global log, whatever epoch executed a slot;
* an epoch's base (``Ready.epoch_base``) and every installed snapshot as "this
  node holds every slot below global slot s" (the snapshot's membership says
  the epoch's base, so the global slot is exact);
* reads (:meth:`MemberCluster.read`), each judged for freshness when a node
  answers it ``ok``: the lease belongs to an epoch, and a read is served by the
  epoch that ordered every write READY before it, or a later one;
* replies, except ``NOT_MEMBER``: that one says the command was *not* carried
  through that node, so it is no READY; the client retries at a member, with
  the same ``(client_id, seq)``, and the session table keeps it exactly-once.

One value per C- or O-instance is judged per epoch (an instance is named by
epoch, position and index; the records do not carry the epoch): a batch's
records go to that epoch's vote checker, by the node's position, except the
batch that starts an epoch, which may hold records of both (left out).

Messages travel as objects (no codec: ``EpochMessage`` and the state transfer
messages are the core's own dataclasses, frozen).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sdpaxos.core.app import Tracer
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import LocalProtocolError, Overloaded
from sdpaxos.core.member import EpochMessage, Member, NotMemberError
from sdpaxos.core.membership import Membership, MembershipOp, NodeInfo, encode_op, split_state
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply, ReplyKind
from sdpaxos.core.storage import MemoryStorage, OAccepted, Record, Snapshot
from sdpaxos.core.types import STOP_VALUE, Command, Wait
from sdpaxos.profiles import uniform
from sdpaxos.sim.checkers import Checker, SafetyViolation
from sdpaxos.sim.chooser import Chooser, derive_rng
from sdpaxos.sim.driver import Outlet, carry_out
from sdpaxos.sim.network import Network, NetworkConfig
from sdpaxos.sim.scheduler import Scheduler
from sdpaxos.sim.statemachine import DigestRegister

__all__ = ["NODES_MAX", "MemberCluster"]

#: Node ids a run may use, ``0 .. NODES_MAX-1`` (ids are used once: each add
#: or replace takes a fresh one).
NODES_MAX = 12
#: Round trip between any two nodes, in ms (one uniform region per node id).
RTT_MS_DEFAULT = 60.0
#: Most ``ready()`` calls in one drain; a node that never runs dry is a bug.
READY_ROUNDS_MAX = 1000
#: Delay of a client's request to the node it picked, in microseconds.
CLIENT_HOP_US = 250

#: ``(node, reply, now_us)`` for every reply a node gives.
ReplyListener = Callable[[int, Reply, int], None]
#: ``(node, entries)`` for every executed batch (after the checker saw it).
ExecutedListener = Callable[[int, list[Executed]], None]
#: ``(node, records)`` for every batch made durable.
PersistListener = Callable[[int, list[Record]], None]
#: ``(node, command)``: a proposal the node refused (no member): retry elsewhere.
RefusedListener = Callable[[int, Command], None]


@dataclass(frozen=True, slots=True)
class _Deliver:
    src: int
    dst: int
    messages: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Tick:
    node: int
    incarnation: int


@dataclass(frozen=True, slots=True)
class _Propose:
    node: int
    command: Command
    wait: Wait
    change: MembershipOp | None


@dataclass(frozen=True, slots=True)
class _Action:
    callback: Callable[[], None]


_Event = _Deliver | _Tick | _Propose | _Action


class MemberCluster:
    """Member nodes, their storage and the network, in virtual time.

    Args:
        replicas: members of epoch 0 (node ids ``0 .. replicas-1``), bootstrapped.
        chooser: the run's single source of nondeterminism.
        sequencer: position of epoch 0's sequencer.
        network: loss, duplication, jitter (partitions are set on :attr:`network`).
        config_overrides: extra ``ClusterConfig`` fields.
        learner_lag_slots_max: passed to every :class:`Member`.
    """

    def __init__(
        self,
        replicas: int,
        chooser: Chooser,
        *,
        sequencer: int = 0,
        network: NetworkConfig | None = None,
        tick_ms: float = 10.0,
        rtt_ms: float = RTT_MS_DEFAULT,
        config_overrides: dict[str, Any] | None = None,
        learner_lag_slots_max: int = 1024,
    ) -> None:
        if not 1 <= replicas <= NODES_MAX:
            raise ValueError(f"replicas must be in 1..{NODES_MAX}, got {replicas}")
        self.chooser = chooser
        self.rtt_ms = rtt_ms
        self.profile = uniform(NODES_MAX, rtt_ms)
        self.initial = Membership.initial(
            tuple(NodeInfo(i) for i in range(replicas)), sequencer_position=sequencer
        )
        self.protocol = ClusterConfig(
            replicas=1, rtt_ms=None, **{"tick_ms": tick_ms, **(config_overrides or {})}
        )
        self.tick_us = round(tick_ms * 1000)
        self.learner_lag_slots_max = learner_lag_slots_max
        self.network = Network(self.profile, network or NetworkConfig(), chooser)
        self.scheduler: Scheduler[_Event] = Scheduler()
        self.checker = Checker(NODES_MAX)
        #: Every node ever started, by id (``None`` while crashed).
        self.nodes: dict[int, Member | None] = {}
        self.storages: dict[int, MemoryStorage] = {}
        self._incarnation: dict[int, int] = {}
        self.reply_listeners: list[ReplyListener] = []
        self.executed_listeners: list[ExecutedListener] = []
        self.persist_listeners: list[PersistListener] = []
        self.refused_listeners: list[RefusedListener] = []
        #: ``(node, message)`` just before a node steps a message (trace validation).
        self.step_listeners: list[Callable[[int, Any], None]] = []
        self._outlet = _Outlet(self)
        self.events_processed = 0
        self.crashes = 0
        self.restarts = 0
        #: ``dropped`` of crashed incarnations (:meth:`dropped_total` adds the live ones).
        self._dropped_retired = 0
        #: Epoch messages delivered to a node that has a replica, from a node that
        #: is no member of the receiver's epoch (a removed node that keeps talking).
        self.from_outsiders = 0
        #: Same, per sender.
        self.from_outsider_by_src: dict[int, int] = {}
        #: Messages each node sent (all kinds), per node id.
        self.sent_by: dict[int, int] = {}
        #: Global slot of every epoch's base a node started: (node, epoch) -> slot.
        self.epoch_started: dict[tuple[int, int], int] = {}
        #: The global slot each epoch starts at (every node must agree).
        self.epoch_bases: dict[int, int] = {0: 0}
        #: Per epoch: one value per instance, from the records (by position).
        self.vote_checkers: dict[int, Checker] = {}
        #: ``(node, epoch, global slot)`` each time a node starts an epoch (or installs one).
        self.epoch_listeners: list[Callable[[int, int, int], None]] = []
        #: Stops a node persisted as accepted while it was the sequencer: (node, epoch).
        self.stops_allocated: list[tuple[int, int]] = []
        self.not_member_replies = 0
        #: Read ids handed out so far (unique for the run).
        self.read_ids = 0
        #: Reads answered ``ok`` (each judged for freshness) and not ``ok``.
        self.reads_ok = 0
        self.reads_refused = 0
        for node_id in range(replicas):
            self.start_node(node_id, bootstrap=True)

    def tracer_for(self, node_id: int) -> Tracer | None:
        """The tracer ``node_id``'s Member gets (none: a traced subclass gives one)."""
        return None

    # -- time -----------------------------------------------------------------

    @property
    def now_us(self) -> int:
        return self.scheduler.now_us

    @property
    def now_ms(self) -> float:
        return self.scheduler.now_us / 1000

    def call_at(self, time_us: int, callback: Callable[[], None]) -> None:
        self.scheduler.at(max(time_us, self.now_us), _Action(callback))

    def call_after(self, delay_us: int, callback: Callable[[], None]) -> None:
        self.call_at(self.now_us + delay_us, callback)

    def step(self) -> bool:
        if not self.scheduler:
            return False
        _, event = self.scheduler.pop()
        self.events_processed += 1
        self._dispatch(event)
        return True

    def run_until(self, time_us: int, *, events_max: int | None = None) -> None:
        count = 0
        while True:
            next_us = self.scheduler.peek_time_us()
            if next_us is None or next_us > time_us:
                break
            if events_max is not None and count >= events_max:
                raise RuntimeError(f"more than {events_max} events before {time_us} us")
            self.step()
            count += 1
        if time_us > self.now_us:
            self.scheduler.advance_to(time_us)

    # -- nodes ----------------------------------------------------------------

    def start_node(self, node_id: int, *, bootstrap: bool = False, config: str = "current") -> None:
        """Start ``node_id`` from its storage (empty for a new node: it waits).

        ``config``: the member list a new node's config file names, where it
        asks for the membership: ``"current"`` (what an operator writes for a
        node added later: the newest members) or ``"initial"`` (epoch 0's list;
        once every id of it is retired, such a node never finds a member: see
        ``tests/sim/test_member_regressions.py``). A node with storage, or one
        of epoch 0, always gets epoch 0's list (the core reads its epoch from
        its storage).
        """
        if not 0 <= node_id < NODES_MAX:
            raise ValueError(f"node ids are 0..{NODES_MAX - 1}, got {node_id}")
        if self.nodes.get(node_id) is not None:
            return
        storage = self.storages.setdefault(node_id, MemoryStorage())
        snapshot = storage.load_snapshot()
        incarnation = self._incarnation.get(node_id, -1) + 1
        self._incarnation[node_id] = incarnation
        rtt_us = self.rtt_ms
        initial = self.initial
        fresh = snapshot is None and not storage.load() and node_id not in initial.ids
        if fresh and config == "current":
            newest = self.newest()
            initial = Membership.initial(newest.members, newest.sequencer_position)

        def rtt(a: int, b: int) -> float | None:
            return 0.0 if a == b else rtt_us

        self.nodes[node_id] = Member(
            node_id,
            initial,
            DigestRegister(),
            protocol=self.protocol,
            rng=derive_rng(self.chooser),
            observe=True,
            snapshot=snapshot,
            records=storage.load(),
            bootstrap=bootstrap,
            rtt_ms=rtt,
            learner_lag_slots_max=self.learner_lag_slots_max,
            tracer=self.tracer_for(node_id),
        )
        self.checker.restarted(node_id)
        if snapshot is not None:
            self.checker.snapshot(node_id, _global_slot(snapshot))
        # Ticks of different nodes are spread over one tick period.
        self.scheduler.after(self.chooser.below(self.tick_us) + 1, _Tick(node_id, incarnation))
        self._drain(node_id)

    def crash(self, node_id: int) -> None:
        """Drop the node and its volatile state; its storage survives."""
        node = self.nodes.get(node_id)
        if node is None:
            return
        self._dropped_retired += node.dropped
        self.nodes[node_id] = None
        self._incarnation[node_id] += 1
        self.crashes += 1
        self.checker.crashed(node_id)

    def restart(self, node_id: int) -> None:
        """Rebuild a crashed node from its storage. A node of epoch 0 whose
        storage is still empty (it crashed before it made anything durable) is
        started as it first was (``--bootstrap``): it promised nothing, and
        without it would wait to be added, then say it lost its state."""
        if node_id in self.nodes and self.nodes[node_id] is None:
            self.restarts += 1
            storage = self.storages[node_id]
            empty = storage.load_snapshot() is None and not storage.load()
            self.start_node(node_id, bootstrap=empty and node_id in self.initial.ids)

    def alive(self, node_id: int) -> bool:
        return self.nodes.get(node_id) is not None

    def live(self) -> list[Member]:
        return [n for _, n in sorted(self.nodes.items()) if n is not None]

    def newest(self) -> Membership:
        """The newest membership any live node knows (what a client's directory says)."""
        best = self.initial
        for node in self.live():
            if node.membership.epoch > best.epoch:
                best = node.membership
        return best

    def sequencer(self) -> int | None:
        """The node that is the sequencer of the newest epoch a live member runs."""
        newest = self.newest().epoch
        for node in self.live():
            if node.epoch == newest and node.is_sequencer:
                return node.id
        return None

    def dropped_total(self) -> int:
        """Messages the nodes dropped (other epochs, non-members), every incarnation."""
        return self._dropped_retired + sum(n.dropped for n in self.live())

    def live_members(self) -> list[int]:
        """Live nodes that are members of the newest epoch."""
        ids = self.newest().ids
        return [i for i in ids if self.alive(i)]

    # -- clients --------------------------------------------------------------

    def submit(self, node_id: int, command: Command, wait: Wait = Wait.READY) -> None:
        """A client sends ``command`` to ``node_id`` (arrives one client hop later)."""
        self.scheduler.after(CLIENT_HOP_US, _Propose(node_id, command, wait, None))

    def submit_change(self, node_id: int, op: MembershipOp, client_id: int, seq: int) -> None:
        """An operator asks ``node_id`` for membership change ``op``."""
        command = Command(client_id, seq, encode_op(op))
        self.scheduler.after(CLIENT_HOP_US, _Propose(node_id, command, Wait.EXECUTED, op))

    def read(self, node_id: int, key: bytes | None) -> bool:
        """A client asks ``node_id`` for a linearizable read of ``key`` (one client
        hop later); False if the node is down or no member (nothing was asked)."""
        node = self.nodes.get(node_id)
        if node is None or node.replica is None:
            return False
        self.read_ids += 1
        read_id = self.read_ids
        self.checker.read_issued(node_id, read_id, key)
        node.read(read_id, key, self.now_ms)
        self._drain(node_id)
        return True

    # -- internals ------------------------------------------------------------

    def _dispatch(self, event: _Event) -> None:
        if isinstance(event, _Deliver):
            self._on_deliver(event)
        elif isinstance(event, _Tick):
            if self._incarnation.get(event.node) != event.incarnation:
                return  # the node crashed: this tick chain ends
            self.scheduler.after(self.tick_us, event)
            node = self.nodes.get(event.node)
            if node is not None:
                node.tick(self.now_ms)
                self._drain(event.node)
        elif isinstance(event, _Propose):
            self._on_propose(event)
        else:
            event.callback()

    def _on_deliver(self, ev: _Deliver) -> None:
        node = self.nodes.get(ev.dst)
        if not self.network.admit(ev.src, ev.dst, 0, len(ev.messages), dst_alive=node is not None):
            return
        assert node is not None
        now_ms = self.now_ms
        for message in ev.messages:
            if (
                isinstance(message, EpochMessage)
                and node.replica is not None
                and node.membership.position(message.src) is None
            ):
                self.from_outsiders += 1
                self.from_outsider_by_src[message.src] = (
                    self.from_outsider_by_src.get(message.src, 0) + 1
                )
            for listener in self.step_listeners:
                listener(ev.dst, message)
            node.step(message, now_ms)
        self._drain(ev.dst)

    def _on_propose(self, ev: _Propose) -> None:
        node = self.nodes.get(ev.node)
        if node is None:
            return  # the node is down: the request is lost, the client retries
        try:
            if ev.change is not None:
                node.propose_change(ev.change, ev.command.client_id, ev.command.seq)
            else:
                node.propose(ev.command, ev.wait)
        except NotMemberError:
            for listener in self.refused_listeners:
                listener(ev.node, ev.command)
            return
        except Overloaded:
            self.scheduler.after(self.tick_us, ev)
            return
        except LocalProtocolError:
            # e.g. a replica that refuses while it re-proposes: the client retries.
            for listener in self.refused_listeners:
                listener(ev.node, ev.command)
            return
        self.checker.proposed(ev.node, ev.command)
        self._drain(ev.node)

    def _drain(self, node_id: int) -> None:
        for _ in range(READY_ROUNDS_MAX):
            node = self.nodes.get(node_id)
            if node is None:
                return
            rd = node.ready()
            if not rd and rd.epoch_base is None:
                return
            self._carry_out(node_id, node, rd)
        raise RuntimeError(f"node {node_id} produced effects {READY_ROUNDS_MAX} times in a row")

    def _carry_out(self, node_id: int, node: Member, rd: Ready) -> None:
        position = node.membership.position(node_id)
        if rd.persist and rd.epoch_base is None and node.replica is not None:
            assert position is not None
            votes = self.vote_checkers.get(node.epoch)
            if votes is None:
                votes = self.vote_checkers[node.epoch] = Checker(len(node.membership.members))
            votes.persisted(position, rd.persist)
        carry_out(node_id, rd, self.storages[node_id], self._outlet)
        base = rd.epoch_base
        if base is not None:
            slot = _global_slot(base)
            self.checker.snapshot(node_id, slot)
            epoch = split_state(base.app)[0].epoch
            self.epoch_started.setdefault((node_id, epoch), slot)
            # A base at local slot 0 is the epoch's start; a later one, an install.
            agreed = self.epoch_bases.setdefault(epoch, slot) if base.slot == 0 else slot
            if agreed != slot:
                raise SafetyViolation(
                    f"node {node_id} started epoch {epoch} at global slot {slot}, where"
                    f" another node started it at {agreed}: the stop is not agreed"
                )
            for listener in self.epoch_listeners:
                listener(node_id, epoch, slot)

    def _send(self, src: int, batch: Sequence[tuple[int, Any]]) -> None:
        groups: dict[int, list[Any]] = {}
        for dst, message in batch:
            groups.setdefault(int(dst), []).append(message)
        for dst, messages in groups.items():
            self.sent_by[src] = self.sent_by.get(src, 0) + len(messages)
            if dst == src:
                self.scheduler.at(self.now_us, _Deliver(src, dst, tuple(messages)))
                continue
            if not 0 <= dst < NODES_MAX:
                raise RuntimeError(f"node {src} sent to unknown node id {dst}")
            for at_us in self.network.transmit(self.now_us, src, dst, 0, len(messages)):
                self.scheduler.at(at_us, _Deliver(src, dst, tuple(messages)))


def _global_slot(snapshot: Snapshot) -> int:
    """The global slot a snapshot of a :class:`Member`'s machine reaches."""
    return split_state(snapshot.app)[0].base + snapshot.slot


class _Outlet(Outlet):
    __slots__ = ("_c",)

    def __init__(self, cluster: MemberCluster) -> None:
        self._c = cluster

    def persisted(self, replica: int, records: list[Record]) -> None:
        c = self._c
        node = c.nodes.get(replica)
        if node is not None and node.is_sequencer:
            for rec in records:
                if isinstance(rec, OAccepted) and STOP_VALUE in rec.values:
                    c.stops_allocated.append((replica, node.epoch))
                    break
        for listener in c.persist_listeners:
            listener(replica, records)

    def send(self, replica: int, messages: Sequence[tuple[int, Message]]) -> bool:
        self._c._send(replica, messages)
        return False

    def executed(self, replica: int, entries: list[Executed]) -> None:
        c = self._c
        c.checker.executed(replica, entries)
        for listener in c.executed_listeners:
            listener(replica, entries)

    def snapshotted(self, replica: int, snapshot: Snapshot) -> None:
        self._c.checker.snapshot(replica, _global_slot(snapshot))

    def replies(self, replica: int, replies: list[Reply]) -> None:
        c = self._c
        for reply in replies:
            if reply.kind is ReplyKind.NOT_MEMBER:
                c.not_member_replies += 1
            else:
                c.checker.replied(replica, reply)
            for listener in c.reply_listeners:
                listener(replica, reply, c.now_us)

    def reads(self, replica: int, results: list[ReadResult]) -> None:
        c = self._c
        for result in results:
            c.checker.read_served(replica, result)
            if result.ok:
                c.reads_ok += 1
            else:
                c.reads_refused += 1
