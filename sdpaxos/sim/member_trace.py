"""Trace validation across a membership change: a traced :class:`MemberCluster`.

:class:`~sdpaxos.sim.trace.TraceRecorder` records runs of bare replicas, whose
ids and slots are the spec's. A cluster whose membership changes runs
:class:`~sdpaxos.core.member.Member` nodes, one :class:`Replica` per epoch, and
the core numbers things per epoch where the spec (``tla/SDPaxos.tla``,
"Membership change") keeps one numbering for the whole run:

* replicas: the core names an epoch's members by *position* (``0 .. N-1`` in
  that epoch's member list); the spec by one id per replica for the whole run.
  A spec id here is the node id (a run uses ids ``0 .. K-1``), and a position
  is mapped through the member list of the epoch the event or message belongs
  to (:attr:`MemberTraceRecorder.epoch_ids`);
* slots: an epoch's replica numbers its O-instances from 0 (the executor adds
  the epoch's base: ``Execute`` already carries the global slot); the spec
  numbers them globally, so every other slot (O-accept starts, commits, the
  stop, votes' ``o_from``, heartbeats' ranges, the executed prefix) gets the
  epoch's base added;
* ballots: a C-ballot ``round * BALLOT_STRIDE + position`` becomes the spec's
  ``round * K + id``; views restart at 0 in each epoch, in both;
* every message is an epoch's (``EpochMessage``): its filter names its ``ep``.

The layer's own steps: ``StartEpoch`` (the node executed the stop) and
``InstallEpoch`` (it installed a newer epoch's base from ``src``, the node whose
chunk completed it). A node outside its epoch (a learner) that fetches the
state *of its own epoch* takes no spec step: the spec's learners hold nothing
until they install their epoch's base. A restart is the spec's ``Restart`` at
node level (the replica's own ``Restart`` event is left out: a member that
installs a later snapshot restores a replica from it too, which is no restart).

The STOP's commit at the sequencer that allocated it traces no event in the
core (``Learner.advance_safe_prefix``); the recorder stands in for it with the
spec's ``CommitO`` (``tla/README.md``, footnote "stopcommit").

:func:`run_change` plays the scripted changes of :data:`CHANGES` (replaces, with
crashes at chosen points) and :data:`CHANGES_EVEN` (a grow 3 -> 5 and a shrink
5 -> 3, through a 4-member epoch: they need a spec with even epochs).

Like the rest of the simulator, pure: no I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from sdpaxos.core.app import Tracer
from sdpaxos.core.member import EpochMessage, Member
from sdpaxos.core.membership import MembershipOp, NodeInfo, OpKind, decode_result
from sdpaxos.core.messages import (
    CAccept,
    CCommit,
    CPrepare,
    CPromise,
    CRequest,
    Heartbeat,
    NewView,
    OAccept,
    OCommit,
    StateChunk,
    VRequest,
)
from sdpaxos.core.ready import Executed, Reply, ReplyKind
from sdpaxos.core.storage import OAccepted, Record
from sdpaxos.core.types import BALLOT_STRIDE, STOP, STOP_VALUE, Command, Wait
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.member_cluster import MemberCluster
from sdpaxos.sim.trace import SILENT_EVENTS, TRACE_CONFIG, Step, TraceRecorder

__all__ = [
    "CHANGES",
    "CHANGES_EVEN",
    "Change",
    "ChangeRun",
    "MemberTraceRecorder",
    "TracedMemberCluster",
    "run_change",
]

#: ``dataclasses.replace``, untyped: a renumbered message holds spec ids and
#: global slots where the core's types say positions and epoch slots.
_renumber: Any = replace
#: The spec's value of a STOP O-instance (``Stop`` in ``tla/SDPaxos.tla``).
SPEC_STOP = -3
#: Node-level events (traced by ``Member`` with the node id, not a position).
NODE_EVENTS = frozenset({"StartEpoch", "InstallEpoch"})


class TracedMemberCluster(MemberCluster):
    """A :class:`MemberCluster` whose nodes trace, for :class:`MemberTraceRecorder`."""

    def __init__(self, replicas: int, seed: int, **kwargs: Any) -> None:
        # Set before the base class starts the first nodes (tracer_for reads it).
        self.recorder: MemberTraceRecorder | None = None
        super().__init__(replicas, SeededChooser(random.Random(seed)), **kwargs)

    def tracer_for(self, node_id: int) -> Tracer:
        """Events by node: the core names a replica's by position, the Member's by id."""

        def tracer(event: str, who: int, fields: dict[str, Any]) -> None:
            if self.recorder is not None:
                self.recorder.on_event(node_id, event, int(who), fields)

        return tracer

    def crash(self, node_id: int) -> None:
        if self.recorder is not None and self.nodes.get(node_id) is not None:
            self.recorder.on_crash(node_id)
        super().crash(node_id)

    def restart(self, node_id: int) -> None:
        if self.recorder is not None and node_id in self.nodes and self.nodes[node_id] is None:
            self.recorder.on_restart(node_id)
        super().restart(node_id)

    def _drain(self, node_id: int) -> None:
        if self.recorder is not None:
            self.recorder.close(node_id)
        super()._drain(node_id)

    def _send(self, src: int, batch: Any) -> None:
        if self.recorder is not None:
            for dst, message in batch:
                self.recorder.on_send(src, int(dst), message)
        super()._send(src, batch)


class MemberTraceRecorder(TraceRecorder):
    """Records a :class:`TracedMemberCluster`'s run as spec steps (ids and slots mapped).

    Reuses :class:`TraceRecorder`'s mapping of events and messages: each event's
    fields and each message are first translated to the spec's numbering.
    """

    def __init__(self, cluster: TracedMemberCluster, ids: int) -> None:
        cfg = cluster.protocol
        for name, value in TRACE_CONFIG.items():
            if getattr(cfg, name) != value:
                raise ValueError(f"trace validation needs {name} = {value}")
        self.mcluster = cluster
        self.cluster = cluster  # type: ignore[assignment]  # (reads now_us only)
        self.n = ids
        self.steps: list[Step] = []
        self.clock_us = 0
        self.commands: dict[tuple[int, int], int] = {}
        self.max_view = 0
        self.max_c_index = [0] * ids
        self.max_slot = 0
        self.max_round = 0
        self.crashes = 0
        self._open: dict[int, int] = {}
        self._stepping: dict[int, Any] = {}
        #: Per epoch: its members' node ids by position, and its base (global slot).
        self.epoch_ids: dict[int, tuple[int, ...]] = {0: cluster.initial.ids}
        self.epoch_base: dict[int, int] = {0: 0}
        #: Per node: the epoch the spec has it in (raised by StartEpoch, InstallEpoch).
        self.spec_epoch: dict[int, int] = {}
        #: The node whose state chunk a node steps now (InstallEpoch's ``src``).
        self._chunk_src: dict[int, int] = {}
        #: (node, epoch, global slot) of each STOP commit recorded as CommitO.
        self._stops: set[tuple[int, int, int]] = set()
        #: (node, epoch) -> the global slot of the STOP it allocated (AllocateStop).
        self._allocated: dict[tuple[int, int], int] = {}
        cluster.step_listeners.append(self._on_step)
        cluster.recorder = self

    # -- what modelcheck writes --------------------------------------------------

    def epochs(self) -> list[tuple[int, ...]]:
        """The member sets of epochs 0, 1, ... (``EpochMembers``)."""
        return [tuple(sorted(self.epoch_ids[e])) for e in sorted(self.epoch_ids)]

    def constants(self) -> dict[str, int]:
        cfg = self.mcluster.protocol
        return {
            "N": self.n,
            "MaxCmds": max(1, len(self.commands)),
            "MaxView": self.max_view,
            "MaxCRound": max(1, self.max_round),
            "MaxCrashes": self.crashes,
            "MaxSlot": self.max_slot + 2,
            "MaxCIdx": max(self.max_c_index) + 1,
            "MaxTime": self.clock_us,
            "Lease": round(cfg.lease_ms * 1000),
            "LeaseHold": round(cfg.lease_hold_ms * 1000),
        }

    # -- numbering -----------------------------------------------------------------

    def _learn_epoch(self, node: Member) -> None:
        m = node.membership
        self.epoch_ids.setdefault(m.epoch, m.ids)
        self.epoch_base.setdefault(m.epoch, m.base)

    def _id(self, epoch: int, position: int) -> int:
        if position < 0:
            return position  # NO_CL, STOP, "none"
        return self.epoch_ids[epoch][position]

    def _ovalue(self, epoch: int, value: tuple[int, int]) -> tuple[int, int]:
        owner, count = value
        return (self._id(epoch, owner), count)

    def _bal(self, epoch: int, ballot: int) -> int:
        rnd, owner = divmod(ballot, BALLOT_STRIDE)
        return rnd * BALLOT_STRIDE + self._id(epoch, owner)

    def _o(self, owner: int, count: int) -> int:
        if owner == STOP:
            return SPEC_STOP
        return super()._o(owner, count)

    def _map(self, r: int, event: str, f: dict[str, Any]) -> list[Step]:
        if event == "AllocateStop":
            self._allocated[(r, self.spec_epoch.get(r, 0))] = f["slot"]
            return [Step("AllocateStop", r, {"slot": self._slot(f["slot"])})]
        return super()._map(r, event, f)

    def globalize(self, epoch: int, m: Any) -> Any:
        """A core message of ``epoch``, in the spec's numbering (ids, global slots)."""
        base = self.epoch_base[epoch]
        i = self._id
        if isinstance(m, CAccept | CCommit):
            return _renumber(
                m, src=i(epoch, m.src), owner=i(epoch, m.owner), ballot=self._bal(epoch, m.ballot)
            )
        if isinstance(m, CRequest):
            return _renumber(m, src=i(epoch, m.src), owner=i(epoch, m.owner))
        if isinstance(m, OAccept):
            vals = tuple(self._ovalue(epoch, v) for v in m.values)
            return _renumber(
                m, src=i(epoch, m.src), start=m.start + base, base=m.base + base, values=vals
            )
        if isinstance(m, OCommit):
            entries = tuple((s + base, b, i(epoch, o), c) for s, b, o, c in m.entries)
            return _renumber(m, src=i(epoch, m.src), entries=entries)
        if isinstance(m, Heartbeat):
            return _renumber(m, src=i(epoch, m.src), base=m.base + base if m.base >= 0 else m.base)
        if isinstance(m, NewView):
            vals = tuple(self._ovalue(epoch, v) for v in m.values)
            return _renumber(m, src=i(epoch, m.src), start=m.start + base, values=vals)
        if isinstance(m, VRequest):
            return _renumber(m, src=i(epoch, m.src), o_from=m.o_from + base)
        if isinstance(m, CPrepare | CPromise):
            return _renumber(m, src=i(epoch, m.src), owner=i(epoch, m.owner))
        return m

    def _fields(self, epoch: int, event: str, f: dict[str, Any]) -> dict[str, Any]:
        """An event's fields in the spec's numbering."""
        base = self.epoch_base[epoch]
        g = dict(f)
        for key in ("owner", "candidate", "src", "target"):
            if key in g and isinstance(g[key], int):
                g[key] = self._id(epoch, g[key])
        if "ballot" in g and event in ("HandleCAccept", "HandleCPrepare", "StartCRecovery"):
            g["ballot"] = self._bal(epoch, g["ballot"])
        if event in ("AllocateO", "HandleOAccept", "HandleNewView"):
            g["start"] = f["start"] + base
        if event in ("AllocateStop", "HandleOCommit", "LearnStop"):
            g["slot"] = f["slot"] + base
        if event == "CommitO":
            g["upto"] = f["upto"] + base
        if "values" in g and isinstance(g["values"], tuple):
            vals = [self._ovalue(epoch, v) for v in g["values"]]
            if event == "AllocateO":  # the STOP is its own step (AllocateStop)
                vals = [v for v in vals if v[0] != STOP]
            g["values"] = tuple(vals)
        return g

    # -- listeners -------------------------------------------------------------------

    def _on_step(self, node_id: int, message: Any) -> None:
        node = self.mcluster.nodes.get(node_id)
        self._chunk_src.pop(node_id, None)
        self._stepping.pop(node_id, None)
        if isinstance(message, StateChunk):
            self._chunk_src[node_id] = message.src
        if node is None or not isinstance(message, EpochMessage):
            return
        if message.epoch == node.epoch and node.replica is not None:
            self._learn_epoch(node)
            self._stepping[node_id] = self.globalize(message.epoch, message.msg)

    def close(self, node_id: int) -> None:
        self._close(node_id)
        self._stepping.pop(node_id, None)

    def _post(self, r: int) -> dict[str, Any]:
        node = self.mcluster.nodes.get(r)
        if node is None or node.replica is None:
            return {}
        status = node.replica.status()
        epoch = node.epoch
        es = status.established_sequencer
        return {
            "view": status.view,
            "ev": status.established_view,
            "es": self._id(epoch, es) if es is not None and es >= 0 else es,
            "exec": status.executed_end + node.membership.base,
        }

    def on_crash(self, node_id: int) -> None:
        self.close(node_id)  # its last step's state is the one it crashed in
        self._on_crash(node_id)

    def on_restart(self, node_id: int) -> None:
        self._tick()
        self._add(Step("Restart", node_id, origin="restart"), post=False)

    def on_event(self, node_id: int, event: str, who: int, f: dict[str, Any]) -> None:
        if event in SILENT_EVENTS or event == "Restart":
            return
        node = self.mcluster.nodes.get(node_id)
        self._tick()
        if event in NODE_EVENTS:
            self._node_event(node_id, event, f)
            return
        # A replica's event: its node is built (or being built) in the node's epoch.
        epoch = node.epoch if node is not None else self.spec_epoch.get(node_id, 0)
        if node is not None:
            self._learn_epoch(node)
        start = len(self.steps)
        self._on_event(node_id, event, self._fields(epoch, event, f))
        for s in self.steps[start:]:
            if s.msg:
                s.msg["ep"] = epoch

    def _node_event(self, node_id: int, event: str, f: dict[str, Any]) -> None:
        epoch, slot = int(f["epoch"]), int(f["slot"])
        node = self.mcluster.nodes.get(node_id)
        if node is not None:
            self._learn_epoch(node)
        before = self.spec_epoch.get(node_id, 0)
        origin = f"{event} {f}"
        if event == "StartEpoch":
            stop = self._allocated.get((node_id, epoch - 1))
            if stop is not None:
                self._commit_stop(node_id, epoch - 1, stop, "it executes the STOP")
            self.spec_epoch[node_id] = epoch
            self._add(Step("StartEpoch", node_id, {"epoch": epoch, "slot": slot}, origin=origin))
            return
        if epoch <= before:
            return  # a learner fetching its own epoch's state: no spec step
        self.spec_epoch[node_id] = epoch
        params = {"epoch": epoch, "slot": slot}
        src = self._chunk_src.get(node_id)
        if src is not None:
            params["src"] = src
        self._add(Step("InstallEpoch", node_id, params, origin=origin))

    def _stop_commit(self, src: int, epoch: int, m: OCommit) -> None:
        """The sequencer committed the STOP: the spec's ``CommitO`` up to it.

        The core traces no event for it (``Learner.advance_safe_prefix`` commits
        the STOP without setting ``learned``, so no ``CommitO`` is traced unless
        an own O-instance was committed in the same call); its broadcast of the
        STOP's O-commit, which comes from that commit, stands for the event.
        """
        for slot, _, owner, _ in m.entries:
            if owner == STOP and m.src == self._position(epoch, src):
                self._commit_stop(src, epoch, slot + self.epoch_base[epoch], "its O-commit sent")

    def _commit_stop(self, node_id: int, epoch: int, slot: int, why: str) -> None:
        """Only a STOP this node allocated: one from a view change's rebuilt range
        is committed with the range (``SendNewView``, a heartbeat's base), and a
        relayed commit is a ``Sent`` step of the relay."""
        key = (node_id, epoch, slot)
        if self._allocated.get((node_id, epoch)) == slot and key not in self._stops:
            self._stops.add(key)
            origin = f"the STOP's commit at the sequencer ({why}; no CommitO event)"
            self._add(Step("CommitO", node_id, {"upto": self._slot(slot) + 1}, origin=origin))

    def _position(self, epoch: int, node_id: int) -> int:
        ids = self.epoch_ids[epoch]
        return ids.index(node_id) if node_id in ids else -1

    def on_send(self, src: int, dst: int, message: Any) -> None:
        if not isinstance(message, EpochMessage):
            return  # state transfer and notices: no spec message
        epoch = message.epoch
        if epoch not in self.epoch_ids:
            node = self.mcluster.nodes.get(src)
            if node is not None:
                self._learn_epoch(node)
        inner = message.msg
        if isinstance(inner, OCommit):
            self._stop_commit(src, epoch, inner)
        start = len(self.steps)
        self._on_send(src, dst, self.globalize(epoch, inner))
        for s in self.steps[start:]:
            if s.action == "Sent":
                s.msg["ep"] = epoch


# -- scripted runs -----------------------------------------------------------------


@dataclass
class ChangeRun:
    """A recorded run with membership changes."""

    name: str
    recorder: MemberTraceRecorder
    cluster: TracedMemberCluster
    #: Epochs the run's changes make (one per member change).
    epochs: int = 1
    log: list[str] = field(default_factory=list)

    @property
    def switched(self) -> bool:
        """Every member of the last epoch runs it."""
        newest = self.cluster.newest()
        nodes = self.cluster.nodes
        return newest.epoch >= self.epochs and all(
            (n := nodes.get(i)) is not None and n.epoch >= self.epochs for i in newest.ids
        )


@dataclass(frozen=True)
class Change:
    """A scripted run: fresh nodes are added as learners, catch up, then the
    member changes ``ops`` run one after the other, each waiting for the last
    to be switched to everywhere."""

    members: int
    #: ``(kind, target, new)``: ``REPLACE`` (``new`` takes ``target``'s place),
    #: ``PROMOTE`` (``new``; target -1) or ``REMOVE`` (``target``; new -1).
    ops: tuple[tuple[OpKind, int, int], ...]
    #: The node that crashes (-1: none), and when: ``"executed"`` (it executed the
    #: first change: before the stop; restarted once the others switched) or
    #: ``"switched"`` (it started epoch 1: restarted from the base) or ``"stop"``
    #: (it accepted the STOP as the sequencer; restarted as for "executed").
    crash: int = -1
    crash_at: str = "executed"

    @property
    def fresh(self) -> list[int]:
        return [new for _, _, new in self.ops if new >= 0]

    @property
    def ids(self) -> int:
        return max([self.members - 1, *self.fresh]) + 1


#: The scripted changes trace validation runs.
CHANGES: dict[str, Change] = {
    # 3 -> 3: node 3 replaces the sequencer 0 (the spec's Replace3 shape); node 1
    # crashes when it executed the change and installs the new epoch's base
    # from a member after its restart.
    "replace3-crash": Change(3, ((OpKind.REPLACE, 0, 3),), crash=1),
    # 3 -> 3: node 3 replaces node 2; node 1 crashes as it starts epoch 1.
    "replace3-switchcrash": Change(3, ((OpKind.REPLACE, 2, 3),), crash=1, crash_at="switched"),
    "replace3": Change(3, ((OpKind.REPLACE, 2, 3),)),
    # 3 -> 3: the sequencer 0 crashes once it accepted the STOP it allocated (its
    # O-accepts sent): the others learn it chosen from their acknowledgements
    # (LearnStop) and switch without it.
    "replace3-stopcrash": Change(3, ((OpKind.REPLACE, 2, 3),), crash=0, crash_at="stop"),
    # 5 -> 5: node 5 replaces node 4 (the N = 5 rules on both sides).
    "replace5": Change(5, ((OpKind.REPLACE, 4, 5),)),
}
#: Changes through an epoch of 4 members: the code changes one member per stop,
#: so a grow 3 -> 5 or a shrink 5 -> 3 passes through one, which the spec on
#: main rules out (``Size(e) \\in {3, 5}``); validated once it has even epochs.
CHANGES_EVEN: dict[str, Change] = {
    "grow3to5": Change(3, ((OpKind.PROMOTE, -1, 3), (OpKind.PROMOTE, -1, 4))),
    # the sequencer 0 removed first, then node 1
    "shrink5to3": Change(5, ((OpKind.REMOVE, 0, -1), (OpKind.REMOVE, 1, -1))),
}

#: The operator's client id.
CHANGE_CLIENT = 99
#: Virtual time a scripted run may take, in ms.
RUN_MS_MAX = 8_000
STEP_MS = 20
#: A node crashed as it starts the new epoch restarts this long after.
RESTART_US = 200_000


def run_change(name: str, *, seed: int = 1, commands: int = 1) -> ChangeRun:
    """Run one scripted change of :data:`CHANGES` (or :data:`CHANGES_EVEN`),
    recorded for trace validation."""
    change = CHANGES[name] if name in CHANGES else CHANGES_EVEN[name]
    crash_node = change.crash
    cluster = TracedMemberCluster(change.members, seed, config_overrides=dict(TRACE_CONFIG))
    rec = MemberTraceRecorder(cluster, change.ids)
    run = ChangeRun(name, rec, cluster, epochs=len(change.ops))
    verdicts: dict[tuple[int, int], tuple[int, Reply]] = {}
    # The operator's session: learners first (seq 1 ..), then the member changes.
    first_change_seq = len(change.fresh) + 1

    def on_reply(node: int, reply: Reply, now_us: int) -> None:
        if reply.client_id == CHANGE_CLIENT and reply.kind is ReplyKind.READY:
            return  # a change's verdict comes when it is executed
        verdicts[(reply.client_id, reply.seq)] = (node, reply)

    cluster.reply_listeners.append(on_reply)
    crashed: list[int] = []

    def on_executed(node: int, entries: list[Executed]) -> None:
        if node == crash_node and not crashed and change.crash_at == "executed":
            for e in entries:
                if e.command.client_id == CHANGE_CLIENT and e.command.seq == first_change_seq:
                    crashed.append(node)
                    cluster.call_after(1, lambda: cluster.crash(node))
                    run.log.append(f"crash {node} at {cluster.now_us} us")

    cluster.executed_listeners.append(on_executed)

    def on_epoch(node: int, epoch: int, slot: int) -> None:
        if node == crash_node and not crashed and change.crash_at == "switched" and epoch == 1:
            crashed.append(node)
            cluster.call_after(1, lambda: cluster.crash(node))
            cluster.call_after(RESTART_US, lambda: cluster.restart(node))
            run.log.append(f"crash {node} at {cluster.now_us} us, as it starts epoch 1")

    cluster.epoch_listeners.append(on_epoch)

    def on_persisted(node: int, records: list[Record]) -> None:
        if node == crash_node and not crashed and change.crash_at == "stop":
            for rec in records:
                if isinstance(rec, OAccepted) and STOP_VALUE in rec.values:
                    crashed.append(node)
                    cluster.call_after(1, lambda: cluster.crash(node))
                    run.log.append(f"crash {node} at {cluster.now_us} us, the STOP accepted")
                    return

    cluster.persist_listeners.append(on_persisted)

    def run_for(ms: float) -> None:
        cluster.run_until(cluster.now_us + round(ms * 1000))

    def until(done: Any, what: str) -> None:
        end = cluster.now_us + RUN_MS_MAX * 1000
        while not done():
            if cluster.now_us >= end:
                raise RuntimeError(f"{name}: no {what} within {RUN_MS_MAX} ms ({run.log})")
            run_for(STEP_MS)

    def switched_to(epoch: int, but: list[int]) -> bool:
        newest = cluster.newest()
        return newest.epoch >= epoch and all(
            (n := cluster.nodes.get(i)) is not None and n.epoch >= epoch
            for i in newest.ids
            if i not in but
        )

    seq = 0
    for new in change.fresh:
        cluster.start_node(new)
    for k in range(commands):
        cluster.submit(1, Command(1, k + 1, b"a%d" % k), Wait.READY)
    run_for(100)
    for new in change.fresh:
        seq += 1
        op = MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(new), op_id=seq)
        cluster.submit_change(0, op, CHANGE_CLIENT, seq)
        until(lambda seq=seq: (CHANGE_CLIENT, seq) in verdicts, "learner verdict")
    for new in change.fresh:
        until(
            lambda new=new: (n := cluster.nodes.get(new)) is not None and n.has_state,
            "learner state",
        )
    for epoch, (kind, target, new) in enumerate(change.ops, start=1):
        seq += 1
        if kind is OpKind.PROMOTE:
            op = MembershipOp(kind, target=new, op_id=seq)
        else:
            node = NodeInfo(new) if new >= 0 else None
            op = MembershipOp(kind, target=target, node=node, op_id=seq)
        at = next(i for i in cluster.newest().ids if i not in (target, crash_node))
        cluster.submit_change(at, op, CHANGE_CLIENT, seq)
        until(lambda seq=seq: (CHANGE_CLIENT, seq) in verdicts, "change verdict")
        verdict = verdicts[(CHANGE_CLIENT, seq)]
        applied, message = decode_result(verdict[1].result)
        if verdict[1].kind is not ReplyKind.EXECUTED or not applied:
            raise RuntimeError(f"{name}: change {op} refused: {verdict} {message}")
        run.log.append(f"change {seq} executed at {cluster.now_us} us")
        if crash_node >= 0 and change.crash_at in ("executed", "stop") and epoch == 1:
            until(lambda: bool(crashed), "crash")
            until(lambda: switched_to(1, crashed), "switch")
            cluster.restart(crashed[0])
            run.log.append(f"restart {crashed[0]} at {cluster.now_us} us")
        until(lambda epoch=epoch: switched_to(epoch, []), "switch")
        run.log.append(f"epoch {epoch} at {cluster.now_us} us")
    joiners = change.fresh or [i for i in cluster.newest().ids if i != crash_node]
    for k in range(commands):  # at a new member: its position is not its id
        cluster.submit(joiners[0], Command(2, k + 1, b"b%d" % k), Wait.READY)
    until(lambda: all((2, k + 1) in verdicts for k in range(commands)), "last epoch's commands")
    run_for(50)
    return run
