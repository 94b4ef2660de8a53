"""The ``reconfig`` fault: membership changes at seeded times, hit by crashes and partitions.

Theory of operation. A :class:`ReconfigInjector` owns one
:class:`~sdpaxos.sim.member_cluster.MemberCluster` and plays
:data:`CHANGES_MIN` .. :data:`CHANGES_MAX` membership changes, one after the
other, through the operator's session (:class:`~sdpaxos.sim.member_workload.ChangeClient`,
:meth:`Member.propose_change` at a member), keeping the member count within
:data:`MEMBERS_MIN` .. :data:`MEMBERS_MAX`. Each change is drawn from
:class:`Shape`:

* ``add``: start a fresh node (empty storage, it waits), ``ADD_LEARNER`` it,
  wait until a member reports its lag at most :data:`LEARNER_LAG_OK_SLOTS`
  (``Member.learner_lag``: what an operator sees), then ``PROMOTE`` it;
* ``remove``: ``REMOVE`` a member that is not the sequencer;
* ``remove-seq``: ``REMOVE`` the node that is the sequencer (the next epoch names another);
* ``replace``: a fresh learner, caught up, takes a non-sequencer member's place;
* ``replace-seq``: the same for the sequencer's node.

and, one time in two (every time if ``hits`` leaves ``none`` out), a
:class:`Hit` aimed at the change:

* ``crash``: crash a member (the sequencer, the node the change was proposed at,
  the node leaving, or another, drawn) the moment it has *executed* the change,
  i.e. between the change's execution and the stop; restarted 0.3 .. 3 s later;
* ``partition``: isolate the sequencer the moment it has allocated the stop
  (its own acceptance of ``STOP_VALUE`` is durable) or, one time in two, the
  moment it has executed the change (before it could allocate the stop: the
  others elect a new sequencer of the old epoch, which allocates it); healed
  0.5 .. 3 s later;
  one time in two it is also crashed the moment it then starts the new epoch
  (from a peer's base snapshot, its unfinished commands proposed again in the
  same batch), and restarted 0.3 .. 3 s later;
* ``switch``: crash the k-th node (k drawn) to start the new epoch, the moment
  it starts it (a late one starts it from a peer's base snapshot, with its
  unfinished commands proposed again in the same batch); restarted 0.3 .. 3 s later;
* ``zombie`` (remove and replace only): crash the leaving node when it has
  executed the change, before it could execute the stop; restart it from its
  storage once every other member switched: it wakes up a member of the old
  epoch and keeps talking (heartbeats, votes); the members drop what it sends
  (counted, :attr:`MemberCluster.from_outsiders`) and answer with the epoch,
  until it learns it was removed.

No hit takes more than F of a list's members down at once, F for the smaller of
the old and the new list. A change is **made** when its epoch is running at
every live member of the new list; it was **interrupted** when a hit fired
while it was in flight (proposed, epoch not yet switched everywhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from sdpaxos.core.membership import MembershipOp, NodeInfo, OpKind
from sdpaxos.core.ready import Executed
from sdpaxos.core.storage import Record
from sdpaxos.sim.faults import between, pick
from sdpaxos.sim.member_cluster import NODES_MAX, MemberCluster
from sdpaxos.sim.member_workload import ChangeClient

__all__ = ["Hit", "ReconfigInjector", "Shape"]

#: Member counts a run keeps within.
MEMBERS_MIN = 3
MEMBERS_MAX = 7
#: Changes per run.
CHANGES_MIN = 2
CHANGES_MAX = 4
#: A learner is promoted once a member reports it this many slots behind or fewer.
LEARNER_LAG_OK_SLOTS = 8
#: How often the injector looks at the cluster while it waits, in ms.
POLL_MS = 50
#: Gap before the first change and between two changes, in ms.
GAP_MS_MIN = 200
GAP_MS_MAX = 1_500
#: Longest a change (learner catch-up included) may take before the run gives up on it.
CHANGE_MS_MAX = 30_000
#: ``crash``: the victim restarts this long after, in ms.
RESTART_MS_MIN = 300
RESTART_MS_MAX = 3_000
#: ``partition``: the sequencer is cut off this long, in ms.
CUT_MS_MIN = 500
CUT_MS_MAX = 3_000
#: ``zombie``: the removed node restarts this long after the others switched, in ms.
ZOMBIE_MS_MIN = 0
ZOMBIE_MS_MAX = 1_000
#: A hit armed for a change that never comes is disarmed after this long, in ms.
ARMED_MS = 10_000


class Shape(StrEnum):
    ADD = "add"
    REMOVE = "remove"
    REMOVE_SEQ = "remove-seq"
    REPLACE = "replace"
    REPLACE_SEQ = "replace-seq"


class Hit(StrEnum):
    NONE = "none"
    CRASH = "crash"
    PARTITION = "partition"
    SWITCH = "switch"
    ZOMBIE = "zombie"


@dataclass(slots=True)
class Change:
    """One member change in flight, and what happened to it."""

    shape: Shape
    hit: Hit
    target: int = -1
    fresh: int = -1
    epoch: int = -1  # the epoch it makes, once applied
    proposed_us: int = -1
    applied: bool | None = None
    message: str = ""
    made: bool = False
    interrupted: bool = False
    hits: list[str] = field(default_factory=list)


class ReconfigInjector:
    """Plays seeded membership changes on one cluster; counts what it did.

    ``counts``: ``changes-made``, ``changes-interrupted``, ``changes-refused``
    (a verdict that changed nothing), ``changes-stuck`` (not made in
    :data:`CHANGE_MS_MAX`), per shape (``shape-remove-seq``, ...) and per hit
    fired (``hit-crash``, ``hit-partition``, ``hit-zombie``), ``learners-added``.
    """

    def __init__(
        self,
        cluster: MemberCluster,
        *,
        changes: int | None = None,
        shapes: tuple[Shape, ...] = tuple(Shape),
        hits: tuple[Hit, ...] = tuple(Hit),
    ) -> None:
        self.cluster = cluster
        self.chooser = cluster.chooser
        self.shapes = shapes
        self.hits = hits
        self.planned = (
            changes if changes is not None else between(self.chooser, CHANGES_MIN, CHANGES_MAX)
        )
        self.operator = ChangeClient(cluster)
        self.changes: list[Change] = []
        self.counts: dict[str, int] = {}
        self.timeline: list[tuple[int, str]] = []
        self.finished = False
        self._next_id = max(cluster.nodes) + 1
        self._op_id = 0
        self._current: Change | None = None
        self._armed: tuple[Change, str, int] | None = None  # change, trigger, victim
        self._cut: set[int] = set()
        self._zombie: int | None = None
        #: A cut-off sequencer to crash when it starts the change's epoch: (node, epoch).
        self._crash_on_switch: tuple[Change, int] | None = None
        cluster.executed_listeners.append(self._on_executed)
        cluster.epoch_listeners.append(self._on_epoch)
        cluster.persist_listeners.append(self._on_persisted)

    # -- driving --------------------------------------------------------------

    def start(self) -> None:
        self.cluster.call_after(between(self.chooser, GAP_MS_MIN, GAP_MS_MAX) * 1000, self._next)

    def _count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def _log(self, what: str) -> None:
        self.timeline.append((self.cluster.now_us, what))

    def _next(self) -> None:
        if len(self.changes) >= self.planned or self._next_id >= NODES_MAX:
            self.finished = True
            return
        size = len(self.cluster.newest().members)
        shapes = [
            s
            for s in self.shapes
            if not (s is Shape.ADD and size >= MEMBERS_MAX)
            and not (s in (Shape.REMOVE, Shape.REMOVE_SEQ) and size <= MEMBERS_MIN)
        ]
        if not shapes:
            self.finished = True
            return
        shape = pick(self.chooser, shapes)
        # With NONE among the hits, half of the changes go unhit; without, every one is hit.
        hits = [
            h
            for h in self.hits
            if h is not Hit.NONE and (h is not Hit.ZOMBIE or shape is not Shape.ADD)
        ]
        spare = Hit.NONE in self.hits and self.chooser.below(2) == 0
        hit = Hit.NONE if spare or not hits else pick(self.chooser, hits)
        change = Change(shape, hit)
        self.changes.append(change)
        self._current = change
        self._count(f"shape-{shape.value}")
        self._log(f"change {len(self.changes)}: {shape.value}, hit {hit.value}")
        if shape in (Shape.ADD, Shape.REPLACE, Shape.REPLACE_SEQ):
            change.fresh = self._next_id
            self._next_id += 1
            self.cluster.start_node(change.fresh)
            op = MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(change.fresh), op_id=self._op())
            self._propose(op, lambda ok, msg: self._learner_added(change, ok, msg))
        else:
            self._member_change(change)

    def _op(self) -> int:
        self._op_id += 1
        return self._op_id

    def _propose(self, op: MembershipOp, then: Callable[[bool, str], None]) -> None:
        members = self.cluster.live_members() or list(self.cluster.newest().ids)
        node = members[self.chooser.below(len(members))]

        def verdict(_: MembershipOp, ok: bool, message: str) -> None:
            self._log(f"verdict of {op.kind.name}: {ok} {message!r}")
            then(ok, message)

        self.operator.propose(op, node, verdict)

    def _learner_added(self, change: Change, ok: bool, message: str) -> None:
        if not ok:
            self._refused(change, message)
            return
        self._count("learners-added")
        deadline_us = self.cluster.now_us + CHANGE_MS_MAX * 1000
        self._wait(
            lambda: self._caught_up(change.fresh),
            lambda: self._member_change(change),
            deadline_us,
            lambda: self._stuck(change, "learner never caught up"),
        )

    def _caught_up(self, fresh: int) -> bool:
        """A member reports ``fresh`` at most :data:`LEARNER_LAG_OK_SLOTS` behind,
        holding some state (it reached a slot above 0).

        Why the second half: ``Member.learner_lag`` counts a learner that has
        installed nothing yet as having reached slot 0, so early in a run (a
        member a few slots in) it reports a small lag for a node without any
        state, which a promotion then turns into a member that lost its state
        (``Role.LOST``); see ``tests/sim/test_member_regressions.py``.
        """
        for node in self.cluster.live():
            lag = node.learner_lag(fresh) if node.replica is not None else None
            if lag is not None and lag <= LEARNER_LAG_OK_SLOTS and node.executed_upto - lag > 0:
                return True
        return False

    def _member_change(self, change: Change) -> None:
        membership = self.cluster.newest()
        sequencer = membership.members[membership.sequencer_position].id
        others = [i for i in membership.ids if i != sequencer]
        if change.shape is Shape.ADD:
            op = MembershipOp(OpKind.PROMOTE, target=change.fresh, op_id=self._op())
        else:
            seq_shape = change.shape in (Shape.REMOVE_SEQ, Shape.REPLACE_SEQ)
            change.target = sequencer if seq_shape else pick(self.chooser, others)
            if change.shape in (Shape.REMOVE, Shape.REMOVE_SEQ):
                op = MembershipOp(OpKind.REMOVE, target=change.target, op_id=self._op())
            else:
                node = NodeInfo(change.fresh)
                op = MembershipOp(OpKind.REPLACE, target=change.target, node=node, op_id=self._op())
        change.epoch = membership.epoch + 1
        change.proposed_us = self.cluster.now_us
        self._arm(change, membership.ids)
        self._propose(op, lambda ok, msg: self._member_verdict(change, ok, msg))

    def _member_verdict(self, change: Change, ok: bool, message: str) -> None:
        change.applied, change.message = ok, message
        if not ok:
            self._refused(change, message)
            return
        deadline_us = change.proposed_us + CHANGE_MS_MAX * 1000
        self._wait(
            lambda: self._switched(change),
            lambda: self._made(change),
            deadline_us,
            lambda: self._stuck(change, f"epoch {change.epoch} not running everywhere"),
        )

    def _switched(self, change: Change) -> bool:
        newest = self.cluster.newest()
        if newest.epoch < change.epoch:
            return False
        for i in newest.ids:
            node = self.cluster.nodes.get(i)
            if node is not None and node.epoch < change.epoch:
                return False
        return True

    def _made(self, change: Change) -> None:
        change.made = True
        self._count("changes-made")
        if change.interrupted:
            self._count("changes-interrupted")
        self._log(f"epoch {change.epoch} runs at every live member")
        self._current = None
        self._armed = None
        if self._zombie is not None:
            zombie, self._zombie = self._zombie, None
            delay_us = between(self.chooser, ZOMBIE_MS_MIN, ZOMBIE_MS_MAX) * 1000
            self.cluster.call_after(delay_us, lambda: self._wake_zombie(zombie))
        self.start()

    def _refused(self, change: Change, message: str) -> None:
        self._count("changes-refused")
        change.applied, change.message = False, message
        self._current = None
        self._armed = None
        self.start()

    def _stuck(self, change: Change, why: str) -> None:
        self._count("changes-stuck")
        self._log(f"change stuck: {why}")
        change.message = why
        self._current = None
        self._armed = None
        self.finished = True

    def _wait(
        self,
        done: Callable[[], bool],
        then: Callable[[], None],
        deadline_us: int,
        late: Callable[[], None],
    ) -> None:
        def poll() -> None:
            if done():
                then()
            elif self.cluster.now_us >= deadline_us:
                late()
            else:
                self.cluster.call_after(POLL_MS * 1000, poll)

        poll()

    # -- hits -----------------------------------------------------------------

    def _room(self, old_ids: tuple[int, ...], victim: int) -> bool:
        """May ``victim`` go down without taking more than F of a list down?"""
        new_size = len(old_ids) + {Shape.ADD: 1, Shape.REMOVE: -1, Shape.REMOVE_SEQ: -1}.get(
            self._current.shape if self._current else Shape.REPLACE, 0
        )
        f = (min(len(old_ids), new_size) - 1) // 2
        down = {i for i in old_ids if not self.cluster.alive(i)} | self._cut
        return victim not in down and len(down) + 1 <= f

    def _arm(self, change: Change, old_ids: tuple[int, ...]) -> None:
        if change.hit is Hit.NONE:
            return
        if change.hit is Hit.PARTITION:
            sequencer = self.cluster.sequencer()
            if sequencer is not None and self.chooser.below(2) == 0:
                self._armed = (change, "executed-cut", sequencer)
            else:  # armed on the next stop (those allocated so far are old)
                self._armed = (change, "stop", len(self.cluster.stops_allocated))
        elif change.hit is Hit.SWITCH:
            size = len(old_ids) + (1 if change.shape is Shape.ADD else 0)
            self._armed = (change, "switch", 1 + self.chooser.below(size))
        elif change.hit is Hit.ZOMBIE:
            self._armed = (change, "executed", change.target)
        else:
            membership = self.cluster.newest()
            sequencer = membership.members[membership.sequencer_position].id
            proposer = self.operator.node
            choices = [sequencer, proposer, change.target, pick(self.chooser, old_ids)]
            victim = pick(self.chooser, [c for c in choices if c in old_ids] or list(old_ids))
            self._armed = (change, "executed", victim)
        armed = self._armed

        def disarm() -> None:
            if self._armed is armed:
                self._armed = None

        self.cluster.call_after(ARMED_MS * 1000, disarm)

    def _on_executed(self, node_id: int, entries: list[Executed]) -> None:
        armed = self._armed
        if armed is None or armed[1] not in ("executed", "executed-cut") or node_id != armed[2]:
            return
        change = armed[0]
        ids = {(self.operator.client_id, self.operator.seq)}
        if not any((e.command.client_id, e.command.seq) in ids for e in entries):
            return
        old_ids = self.cluster.newest().ids
        if not self._room(old_ids, node_id):
            self._armed = None
            self._log(f"hit {change.hit.value} skipped: no room to take node {node_id} down")
            return
        cut = armed[1] == "executed-cut"
        self._armed = None
        # After this batch is carried out (the hit is between execution and stop).
        if cut:
            what = "after it executed the change"
            self.cluster.call_after(0, lambda: self._isolate(change, node_id, what))
        else:
            self.cluster.call_after(0, lambda: self._crash(change, node_id))

    def _crash(self, change: Change, node_id: int) -> None:
        self.cluster.crash(node_id)
        self._hit(change, f"crash node {node_id} after it executed the change")
        if change.hit is Hit.ZOMBIE:
            self._zombie = node_id
            return
        delay_us = between(self.chooser, RESTART_MS_MIN, RESTART_MS_MAX) * 1000
        self.cluster.call_after(delay_us, lambda: self._restart(node_id))

    def _restart(self, node_id: int) -> None:
        self.cluster.restart(node_id)
        self._log(f"restart node {node_id}")

    def _wake_zombie(self, node_id: int) -> None:
        self.cluster.restart(node_id)
        self._count("hit-zombie")
        self._log(f"removed node {node_id} restarts from its storage (old epoch)")

    def _on_persisted(self, node_id: int, records: list[Record]) -> None:
        armed = self._armed
        if armed is None or armed[1] != "stop":
            return
        allocated = self.cluster.stops_allocated
        if len(allocated) <= armed[2] or allocated[-1][0] != node_id:
            return
        change = armed[0]
        if not self._room(self.cluster.newest().ids, node_id):
            self._armed = None
            self._log(f"hit partition skipped: no room to cut node {node_id} off")
            return
        self._armed = None
        what = "after it allocated the stop"
        self.cluster.call_after(0, lambda: self._isolate(change, node_id, what))

    def _isolate(self, change: Change, node_id: int, what: str) -> None:
        self.cluster.network.isolate(node_id)
        self._cut.add(node_id)
        self._hit(change, f"isolate sequencer {node_id} {what}")
        if self.chooser.below(2) == 1:
            self._crash_on_switch = (change, node_id)
        delay_us = between(self.chooser, CUT_MS_MIN, CUT_MS_MAX) * 1000
        self.cluster.call_after(delay_us, lambda: self._heal(node_id))

    def _heal(self, node_id: int) -> None:
        self._cut.discard(node_id)
        for other in range(NODES_MAX):
            if other != node_id:
                self.cluster.network.unblock(node_id, other)
        self._log(f"heal node {node_id}")

    def _on_epoch(self, node_id: int, epoch: int, slot: int) -> None:
        current = self._armed
        if current is not None and current[1] == "switch" and epoch == current[0].epoch:
            change, k = current[0], current[2]
            started = sum(1 for (_, e) in self.cluster.epoch_started if e == epoch)
            if started >= k:
                self._armed = None
                if self._room(self.cluster.newest().ids, node_id):
                    self._crash_on_switch = (change, node_id)
        armed = self._crash_on_switch
        if armed is None or armed[1] != node_id or epoch < armed[0].epoch:
            return
        self._crash_on_switch = None
        change = armed[0]

        def crash() -> None:
            self.cluster.crash(node_id)
            self._count("hit-crash-on-switch")
            what = f"crash node {node_id} as it started epoch {epoch} (global slot {slot})"
            change.hits.append(what)
            self._log(what)
            delay_us = between(self.chooser, RESTART_MS_MIN, RESTART_MS_MAX) * 1000
            self.cluster.call_after(delay_us, lambda: self._restart(node_id))

        change.interrupted = True
        self.cluster.call_after(0, crash)

    def _hit(self, change: Change, what: str) -> None:
        change.interrupted = True
        change.hits.append(what)
        if change.hit is not Hit.ZOMBIE:
            self._count(f"hit-{change.hit.value}")
        self._log(what)

    def heal_all(self) -> None:
        """End every hit: heal every link, restart every crashed node."""
        self.cluster.network.heal()
        self._cut.clear()
        self._armed = None
        for node_id in sorted(self.cluster.nodes):
            self.cluster.restart(node_id)
