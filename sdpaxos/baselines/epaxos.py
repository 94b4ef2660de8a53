"""EPaxos (Moraru, Andersen, Kaminsky, SOSP 2013), normal case, as a pure core.

Why here: the paper's evaluation (the paper's section 5)
measures SDPaxos against EPaxos on the same code; this module is that EPaxos,
driven like :class:`sdpaxos.core.replica.Replica` (``propose``, ``step``,
``tick``, ``ready``, ``observe_rtt``, ``read``) and reached by name through
:func:`sdpaxos.protocols.protocol` (``"epaxos"``).

The protocol, as implemented:

* **Instances.** Every replica leads its own instances ``(replica, i)``,
  ``i = 0, 1, 2, ...``. One instance holds a batch: the proposals waiting at a
  ``ready()`` turn, at most ``config.c_batch_max`` (more waiting: more
  instances in the same turn); its keys are the union of the commands'
  :attr:`Command.key`.
* **Interference.** Two instances interfere when they share a key, or when
  either holds a command with ``key=None`` (an unnamed object: it interferes
  with everything).
* **Attributes.** ``deps`` is one integer per replica ``q``: the instance
  depends on every interfering instance ``(q, j)`` with ``j <= deps[q]`` (the
  compact form of the paper's dependency set, as in the authors' Go code); ``seq``
  is one more than the largest ``seq`` of an interfering instance known.
* **PreAccept.** The leader computes the attributes from what it knows and
  sends ``PreAccept`` to the fast quorum minus itself: F + floor((F+1)/2) - 1
  peers, the nearest ones (``config.rtt_ms``, then :meth:`observe_rtt`; equal
  round trips in ring order from the leader, as the SDPaxos core orders them,
  so that on a LAN the leaders' quorums spread over the peers) when
  ``config.thrifty``, else every peer. Each acceptor merges its own
  interference into the attributes (the per-owner, per-key table of the
  authors' ``conflicts``), makes the instance durable, and answers.
* **Fast path.** Replies from fast-quorum-minus-one peers that all equal the
  leader's attributes: commit (one round trip to the farthest of them).
* **Slow path.** Otherwise, with a majority (leader included) of replies: the
  union of the deps and the largest seq, ``Accept`` to a majority (the nearest
  when thrifty), and commit on majority-minus-one ``AcceptOK``. A peer that
  answered the PreAccept holds the commands and gets ``AcceptShort`` (the
  authors' ``Accept`` never carries commands); a retransmission carries them.
* **Commit** is durable at the leader, then broadcast; the client's ``READY``
  reply comes then (the order of interfering commands is fixed). Peers that
  answered the PreAccept or Accept get ``CommitShort`` (no commands), the
  others the full ``Commit``: the authors' thrifty ``bcastCommit``, so the
  leader sends every payload N-1 times in all, as a Multi-Paxos leader or an
  SDPaxos command leader does. Every replica makes a commit durable when it
  learns it; a ``CommitShort`` of an instance it never saw changes nothing
  (``CommitUpto`` and ``CommitRequest`` bring the full commit).
* **Execution.** A committed instance executes once every instance it depends
  on (transitively) is committed: strongly connected components of the
  dependency graph (Tarjan's algorithm, iterative), components in reverse
  topological order, each component's instances by ``seq`` (ties: replica id,
  then instance number), each instance's commands in batch order.
  Exactly-once per ``(client_id, seq)``: a command already executed is reported
  as a duplicate with its first result. ``EXECUTED`` replies for commands that
  asked for them, at the replica that proposed them.
* **Retransmission and catch-up** (so runs under message loss, duplication and
  reordering finish): a leader resends ``PreAccept``/``Accept`` every
  ``config.retransmit_ms`` to every peer that has not answered; every
  ``config.learn_ms`` it tells its peers how far its instances are committed
  (``CommitUpto``), and a replica missing a commit, or blocked in execution on
  an instance it lacks, asks for it (``CommitRequest``, at most
  ``config.learn_c_max`` instances); any replica that has the commit answers.

Left out, plainly:

* **Recovery** (explicit prepare, the paper's section 4.4, taking over a failed
  leader's instances with higher ballots) is not implemented. There are no
  ballots: an instance is only ever driven by its own leader, which restarts
  from its records (its unfinished instances are driven again). A replica that
  depends on an instance whose leader is down for good waits for that leader.
  Because nothing but the leader ever decides an instance, the fast-path
  conditions that recovery needs beyond agreeing replies are not needed either.
* Local reads: EPaxos has no linearizable local read; :meth:`read` always
  answers ``ok=False`` (the client sends the read through the log).
* Client sessions that expire (``session_lifetime_slots``) are not supported;
  exactly-once keeps every executed ``(client_id, seq)`` with its result
  (commands on different keys execute in different orders on different
  replicas, so a per-client high-water mark would not do). Snapshots are not
  taken.

Durability: :class:`InstanceRecord` (one per status change of an instance) is
all a replica keeps; a restart rebuilds every instance from its latest record,
re-executes every committed one from scratch (on the fresh state machine the
driver gives) and drives its own unfinished instances again.
"""

import math
import operator
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from sdpaxos.baselines.common import BaselineReplica
from sdpaxos.core.app import StateMachine
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import ConfigError, LocalProtocolError, Overloaded
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply, ReplyKind
from sdpaxos.core.storage import Record
from sdpaxos.core.types import Command, ReplicaId, Slot, Wait

__all__ = [
    "MESSAGE_TYPES",
    "TITLE",
    "Accept",
    "AcceptOK",
    "AcceptShort",
    "Commit",
    "CommitRequest",
    "CommitShort",
    "CommitUpto",
    "EPaxosReplica",
    "InstanceRecord",
    "PreAccept",
    "PreAcceptOK",
    "fast_quorum",
    "make_replica",
]

TITLE = "EPaxos"

#: Instance status, in the order an instance goes through them.
NONE = 0
PREACCEPTED = 1
ACCEPTED = 2
COMMITTED = 3

#: Largest instance number accepted from a peer (a garbage number is refused
#: rather than making a replica scan or allocate towards it).
INDEX_MAX = 1 << 40
#: Largest seq accepted from a peer.
SEQ_MAX = 1 << 62


# -- messages (append-only: a message's tag is its index in MESSAGE_TYPES) -----


@dataclass(frozen=True, slots=True)
class PreAccept:
    """Leader ``src`` proposes instance ``(src, index)`` with its attributes."""

    src: int
    index: int
    seq: int
    deps: tuple[int, ...]
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class PreAcceptOK:
    """``src`` pre-accepted ``(owner, index)`` with these (merged) attributes."""

    src: int
    owner: int
    index: int
    seq: int
    deps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Accept:
    """Slow path: leader ``src`` asks to accept ``(src, index)`` with final attributes."""

    src: int
    index: int
    seq: int
    deps: tuple[int, ...]
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class AcceptOK:
    """``src`` accepted ``(owner, index)``."""

    src: int
    owner: int
    index: int


@dataclass(frozen=True, slots=True)
class Commit:
    """Instance ``(owner, index)`` is committed with these attributes (sent by ``src``)."""

    src: int
    owner: int
    index: int
    seq: int
    deps: tuple[int, ...]
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class CommitShort:
    """Leader ``src`` committed its instance ``index`` with these attributes; the
    commands are left out: the receiver answered the instance's PreAccept or
    Accept, so it holds them (the authors' thrifty ``CommitShort``)."""

    src: int
    index: int
    seq: int
    deps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AcceptShort:
    """Slow path, to a peer that answered the PreAccept: :class:`Accept` without
    the commands it already holds (the authors' ``Accept`` never carries them)."""

    src: int
    index: int
    seq: int
    deps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """``src`` asks for the commits of ``instances`` (``(owner, index)`` pairs)."""

    src: int
    instances: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class CommitUpto:
    """Every instance of leader ``src`` below ``upto`` is committed."""

    src: int
    upto: int


MESSAGE_TYPES: tuple[type, ...] = (
    PreAccept,
    PreAcceptOK,
    Accept,
    AcceptOK,
    Commit,
    CommitRequest,
    CommitUpto,
    CommitShort,
    AcceptShort,
)

EMessage = (
    PreAccept
    | PreAcceptOK
    | Accept
    | AcceptOK
    | Commit
    | CommitRequest
    | CommitUpto
    | CommitShort
    | AcceptShort
)


# -- durable record -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """This replica holds instance ``(owner, index)`` at ``status`` with these attributes."""

    owner: int
    index: int
    status: int
    seq: int
    deps: tuple[int, ...]
    commands: tuple[Command, ...]


#: The records the runtime's durable log must carry for EPaxos (append-only).
RECORD_TYPES: tuple[type, ...] = (InstanceRecord,)


# -- state ------------------------------------------------------------------------


@dataclass(slots=True)
class EPaxosStats:
    """Counters (summed over incarnations by the simulator)."""

    steps: int = 0
    proposals: int = 0
    instances: int = 0
    fast_commits: int = 0
    slow_commits: int = 0
    commits_learned: int = 0
    commands_ready: int = 0
    commands_executed: int = 0
    duplicates: int = 0
    sccs: int = 0
    scc_instances_max: int = 0
    rejected: int = 0
    stale: int = 0
    retransmits: int = 0
    commit_requests: int = 0
    commits_resent: int = 0


@dataclass(frozen=True, slots=True)
class EPaxosStatus:
    id: int
    next_index: int
    inflight: int
    queued: int
    committed_pending: int
    executed: int
    near: tuple[int, ...]


@dataclass(slots=True)
class _Inst:
    """One instance as this replica knows it."""

    owner: int
    index: int
    commands: tuple[Command, ...]
    #: Keys of the commands; ``wild``: one of them has no key (interferes with all).
    keys: frozenset[bytes]
    wild: bool
    seq: int
    deps: tuple[int, ...]
    status: int
    executed: bool = False
    #: The seq this instance was last entered into the interference tables with
    #: (its keys never change; only a larger seq needs entering again).
    noted_seq: int = -1
    # -- leader only
    #: Attributes the leader proposed (the fast path needs replies equal to them).
    seq0: int = 0
    deps0: tuple[int, ...] = ()
    oks: set[int] = field(default_factory=set)
    agree: int = 0
    asked: set[int] = field(default_factory=set)
    #: Peers known to hold the commands (they answered a PreAccept or an
    #: Accept): the Accept and the Commit they get leave the commands out.
    holders: set[int] = field(default_factory=set)
    sent_ms: float = 0.0


def _interferes(a: _Inst, b: _Inst) -> bool:
    return a.wild or b.wild or not a.keys.isdisjoint(b.keys)


def fast_quorum(n: int) -> int:
    """Size of EPaxos's optimised fast quorum, leader included: F + floor((F+1)/2)."""
    f = n // 2
    return max(1, f + (f + 1) // 2)


class EPaxosReplica(BaselineReplica):
    """One EPaxos replica; see the module docstring."""

    def __init__(
        self,
        config: ClusterConfig,
        replica_id: int,
        state_machine: StateMachine,
        rng: random.Random,
        observe: bool = False,
        records: list[Record] | None = None,
    ) -> None:
        super().__init__(config, replica_id, state_machine, rng, observe)
        if config.session_lifetime_slots is not None:
            raise ConfigError("the EPaxos baseline does not support expiring sessions")
        n = self.n
        self.stats = EPaxosStats()
        self.fast = fast_quorum(n)
        self._window = config.c_index_window_max
        # Proximity: configured round trips, replaced by measured ones.
        self._rtt: list[float] = [math.inf] * n
        if config.rtt_ms is not None:
            self._rtt = [float(v) for v in config.rtt_ms[replica_id]]
        self._near: list[int] = []
        self._sort_near()
        # Instances, per owner; what is committed (contiguous prefix per owner).
        self.logs: list[dict[int, _Inst]] = [{} for _ in range(n)]
        self.committed_upto = [0] * n
        #: Every instance of owner q below exec_floor[q] has executed here.
        self.exec_floor = [0] * n
        #: Committed, not yet executed.
        self.pending_exec: set[tuple[int, int]] = set()
        self.exec_dirty = False
        #: Highest instance number heard of, per owner (from CommitUpto or messages).
        self.heard_upto = [0] * n
        # Interference tables: per owner, the largest instance of that owner
        # holding each key (the authors' ``conflicts[q][key]``); per key, the
        # largest seq; wild_*: instances with no key; any_*: all instances.
        self._key_max: list[dict[bytes, int]] = [{} for _ in range(n)]
        #: Per owner, the largest instance ever entered in its ``_key_max``.
        self._key_top = [-1] * n
        self._key_seq: dict[bytes, int] = {}
        self._wild_max = [-1] * n
        self._wild_seq = 0
        self._any_max = [-1] * n
        self._any_seq = 0
        # Leader.
        self.next_index = 0
        self.proposals: list[Command] = []
        self.inflight: dict[int, _Inst] = {}
        self.exec_waiters: set[tuple[int, int]] = set()
        # Execution and exactly-once.
        self.executed_count = 0
        self._done: dict[tuple[int, int], bytes | None] = {}
        # Timers.
        self._upto_sent_ms = -math.inf
        #: Instances execution waits for and lacks (unknown, or interfering and
        #: not committed here), with the time it started waiting for each.
        self._blocked: dict[tuple[int, int], float] = {}
        self._requested_ms = -math.inf
        if records:
            self._restore(records)

    # -- API -------------------------------------------------------------------

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None:
        """Queue ``command``; answered through :attr:`Ready.replies`."""
        if not isinstance(command, Command):
            raise LocalProtocolError(f"propose() takes a Command, got {type(command).__name__}")
        if len(self.proposals) >= self.config.propose_queue_max:
            raise Overloaded(f"{len(self.proposals)} proposals are already queued")
        self.proposals.append(command)
        self.stats.proposals += 1
        if wait == Wait.EXECUTED:
            self.exec_waiters.add((command.client_id, command.seq))

    def step(self, message: Any, now_ms: float) -> None:
        """Handle one peer message; bad input is counted and ignored, never raised."""
        self._advance_clock(now_ms)
        self.stats.steps += 1
        handler = _HANDLERS.get(type(message))
        if handler is None or not self._valid(message):
            self.stats.rejected += 1
            return
        handler(self, message)

    def tick(self, now_ms: float) -> None:
        """Advance time; retransmit, announce commits, ask for missing ones."""
        self._advance_clock(now_ms)
        now = self.now_ms
        cfg = self.config
        for inst in self.inflight.values():
            if now - inst.sent_ms >= cfg.retransmit_ms:
                self._retransmit(inst)
        if now - self._upto_sent_ms >= cfg.learn_ms:
            self._upto_sent_ms = now
            upto = self.committed_upto[self.id]
            if upto > 0:
                for peer in range(self.n):
                    if peer != self.id:
                        self._send(peer, CommitUpto(self.id, upto))
        if self._blocked and now - self._requested_ms >= cfg.learn_ms:
            late = [k for k, since in self._blocked.items() if now - since >= cfg.learn_ms]
            if late:
                self._request_commits(late)

    def ready(self) -> Ready:
        """Start instances for the waiting proposals, execute, hand over effects.

        As many instances as the queue fills (``c_batch_max`` commands each, at
        most ``c_inflight_max`` in flight), as the SDPaxos command leader does:
        one per turn would leave commands queued for turns behind a full batch.
        """
        while self.proposals and len(self.inflight) < self.config.c_inflight_max:
            self._start_instance()
        if self.exec_dirty:
            self.exec_dirty = False
            self._execute()
        rd = Ready(
            persist=cast(list[Record], self._persist),
            messages=cast(list[tuple[ReplicaId, Message]], self._messages),
            replies=self._replies,
            executed=self._executed,
            reads=self._reads,
        )
        self._persist, self._messages, self._replies = [], [], []
        self._executed, self._reads = [], []
        return rd

    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None:
        """A measured round trip to ``peer``: the thrifty quorums follow it."""
        if not 0 <= peer < self.n or peer == self.id or not rtt_ms >= 0:
            raise LocalProtocolError(f"bad rtt observation {peer!r} {rtt_ms!r}")
        self._rtt[peer] = float(rtt_ms)
        self._sort_near()

    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None:
        """EPaxos has no local linearizable read: always answered not ``ok``."""
        self._advance_clock(now_ms)
        self._reads.append(ReadResult(read_id, False))

    def status(self) -> EPaxosStatus:
        return EPaxosStatus(
            id=self.id,
            next_index=self.next_index,
            inflight=len(self.inflight),
            queued=len(self.proposals),
            committed_pending=len(self.pending_exec),
            executed=self.executed_count,
            near=tuple(self._near),
        )

    # -- leader ------------------------------------------------------------------

    def _start_instance(self) -> None:
        batch = self.proposals[: self.config.c_batch_max]
        del self.proposals[: len(batch)]
        commands = tuple(batch)
        index = self.next_index
        self.next_index += 1
        keys, wild = _keys(commands)
        seq, deps = self._attributes(keys, wild, 0, None)
        inst = _Inst(self.id, index, commands, keys, wild, seq, deps, PREACCEPTED)
        inst.seq0, inst.deps0 = seq, deps
        self.logs[self.id][index] = inst
        self._note(inst)
        self._record(inst)
        self.inflight[index] = inst
        self.stats.instances += 1
        peers = self._near[: self.fast - 1] if self.config.thrifty else self._peers()
        self._send_pre_accept(inst, peers)
        self._maybe_decide(inst)

    def _send_pre_accept(self, inst: _Inst, peers: Iterable[int]) -> None:
        msg = PreAccept(self.id, inst.index, inst.seq0, inst.deps0, inst.commands)
        for p in peers:
            inst.asked.add(p)
            self._send(p, msg)
        inst.sent_ms = self.now_ms

    def _send_accept(self, inst: _Inst, peers: Iterable[int], short: bool = True) -> None:
        """Accept to ``peers``; those known to hold the commands get them left out
        (unless ``short`` is off: a retransmission carries them to everyone)."""
        full: Accept | None = None
        brief: AcceptShort | None = None
        for p in peers:
            inst.asked.add(p)
            if short and p in inst.holders:
                if brief is None:
                    brief = AcceptShort(self.id, inst.index, inst.seq, inst.deps)
                self._send(p, brief)
            else:
                if full is None:
                    full = Accept(self.id, inst.index, inst.seq, inst.deps, inst.commands)
                self._send(p, full)
        inst.sent_ms = self.now_ms

    def _retransmit(self, inst: _Inst) -> None:
        """Nothing decided within ``retransmit_ms``: ask every peer that has not answered."""
        self.stats.retransmits += 1
        missing = [p for p in self._peers() if p not in inst.oks]
        if inst.status == PREACCEPTED:
            if len(inst.oks) + 1 >= self.majority and not self._fast_possible(inst):
                self._go_slow(inst)
                return
            self._send_pre_accept(inst, missing)
        else:
            self._send_accept(inst, missing, short=False)

    def _fast_possible(self, inst: _Inst) -> bool:
        outstanding = len(inst.asked - inst.oks)
        return inst.agree + outstanding + 1 >= self.fast

    def _maybe_decide(self, inst: _Inst) -> None:
        """After a PreAcceptOK: fast commit, slow path, or keep waiting."""
        if inst.status != PREACCEPTED:
            return
        if inst.agree + 1 >= self.fast:
            # A fast quorum (leader included) holds exactly the proposed attributes;
            # replies that differed (after a retransmit to everyone) do not matter.
            inst.seq, inst.deps = inst.seq0, inst.deps0
            self.stats.fast_commits += 1
            self._commit_own(inst)
        elif len(inst.oks) + 1 >= self.majority and not self._fast_possible(inst):
            self._go_slow(inst)

    def _go_slow(self, inst: _Inst) -> None:
        inst.status = ACCEPTED
        inst.oks = set()
        inst.asked = set()
        self._note(inst)
        self._record(inst)
        peers = self._near[: self.majority - 1] if self.config.thrifty else self._peers()
        self._send_accept(inst, peers)
        if self.majority == 1:
            self.stats.slow_commits += 1
            self._commit_own(inst)

    def _commit_own(self, inst: _Inst) -> None:
        del self.inflight[inst.index]
        self._committed(inst)
        full = Commit(self.id, self.id, inst.index, inst.seq, inst.deps, inst.commands)
        brief = CommitShort(self.id, inst.index, inst.seq, inst.deps)
        holders = inst.holders
        for p in self._peers():
            self._send(p, brief if p in holders else full)
        waiters = self.exec_waiters
        ready = ReplyKind.READY
        for cmd in inst.commands:
            if (cmd.client_id, cmd.seq) not in waiters:
                self._replies.append(Reply(cmd.client_id, cmd.seq, ready))
        self.stats.commands_ready += len(inst.commands)

    def _on_pre_accept_ok(self, m: PreAcceptOK) -> None:
        inst = self.inflight.get(m.index)
        if m.owner != self.id or inst is None or inst.status != PREACCEPTED or m.src in inst.oks:
            self.stats.stale += 1
            return
        inst.oks.add(m.src)
        inst.holders.add(m.src)
        if m.seq == inst.seq0 and m.deps == inst.deps0:
            inst.agree += 1
        else:
            inst.seq = max(inst.seq, m.seq)
            inst.deps = tuple(map(max, inst.deps, m.deps))
        self._maybe_decide(inst)

    def _on_accept_ok(self, m: AcceptOK) -> None:
        inst = self.inflight.get(m.index)
        if m.owner != self.id or inst is None or inst.status != ACCEPTED or m.src in inst.oks:
            self.stats.stale += 1
            return
        inst.oks.add(m.src)
        inst.holders.add(m.src)
        if len(inst.oks) + 1 >= self.majority:
            self.stats.slow_commits += 1
            self._commit_own(inst)

    # -- acceptor ----------------------------------------------------------------

    def _on_pre_accept(self, m: PreAccept) -> None:
        owner, index = m.src, m.index
        self._heard(owner, index)
        inst = self.logs[owner].get(index)
        if inst is not None:
            if inst.status == PREACCEPTED:  # a resend: the same answer again
                self._send(owner, PreAcceptOK(self.id, owner, index, inst.seq, inst.deps))
            else:
                self.stats.stale += 1
            return
        keys, wild = _keys(m.commands)
        seq, deps = self._attributes(keys, wild, m.seq, m.deps)
        inst = _Inst(owner, index, m.commands, keys, wild, seq, deps, PREACCEPTED)
        self.logs[owner][index] = inst
        self._note(inst)
        self._record(inst)
        self._send(owner, PreAcceptOK(self.id, owner, index, seq, deps))

    def _on_accept(self, m: Accept) -> None:
        owner, index = m.src, m.index
        self._heard(owner, index)
        inst = self.logs[owner].get(index)
        if inst is None:
            keys, wild = _keys(m.commands)
            inst = _Inst(owner, index, m.commands, keys, wild, m.seq, m.deps, ACCEPTED)
            self.logs[owner][index] = inst
            self._note(inst)
            self._record(inst)
        elif inst.status < ACCEPTED:
            self._accepted(inst, m.seq, m.deps)
        self._send(owner, AcceptOK(self.id, owner, index))

    def _on_accept_short(self, m: AcceptShort) -> None:
        owner, index = m.src, m.index
        self._heard(owner, index)
        inst = self.logs[owner].get(index)
        if inst is None:
            # We never got the PreAccept (we restarted without it, or it was
            # lost and a resend is on its way): the retransmitted Accept carries
            # the commands.
            self.stats.stale += 1
            return
        if inst.status < ACCEPTED:
            self._accepted(inst, m.seq, m.deps)
        self._send(owner, AcceptOK(self.id, owner, index))

    def _accepted(self, inst: _Inst, seq: int, deps: tuple[int, ...]) -> None:
        inst.seq, inst.deps, inst.status = seq, deps, ACCEPTED
        self._note(inst)
        self._record(inst)

    def _on_commit(self, m: Commit) -> None:
        owner, index = m.owner, m.index
        if owner == self.id and index >= self.next_index:
            self.stats.rejected += 1  # an instance of ours we never started
            return
        self._heard(owner, index)
        inst = self.logs[owner].get(index)
        if inst is not None and inst.status == COMMITTED:
            self.stats.stale += 1
            return
        if inst is None:
            keys, wild = _keys(m.commands)
            inst = _Inst(owner, index, m.commands, keys, wild, m.seq, m.deps, COMMITTED)
            self.logs[owner][index] = inst
        else:  # the same instance (its leader's commands never change): new attributes
            inst.seq, inst.deps = m.seq, m.deps
        if owner == self.id:
            self.inflight.pop(index, None)
        self.stats.commits_learned += 1
        self._committed(inst)

    def _on_commit_short(self, m: CommitShort) -> None:
        owner, index = m.src, m.index
        self._heard(owner, index)
        inst = self.logs[owner].get(index)
        if inst is None or inst.status == COMMITTED:
            # Without the commands we cannot commit it: CommitUpto and execution's
            # CommitRequest fetch the whole commit later.
            self.stats.stale += 1
            return
        inst.seq, inst.deps = m.seq, m.deps
        self.stats.commits_learned += 1
        self._committed(inst)

    def _on_commit_request(self, m: CommitRequest) -> None:
        for owner, index in m.instances[: self.config.learn_c_max]:
            inst = self.logs[owner].get(index)
            if inst is not None and inst.status == COMMITTED:
                self.stats.commits_resent += 1
                self._send(m.src, Commit(self.id, owner, index, inst.seq, inst.deps, inst.commands))

    def _on_commit_upto(self, m: CommitUpto) -> None:
        owner = m.src
        if m.upto > self.heard_upto[owner]:
            self.heard_upto[owner] = m.upto
        if self.committed_upto[owner] < m.upto:
            log = self.logs[owner]
            missing = set()
            for j in range(self.committed_upto[owner], m.upto):
                inst = log.get(j)
                if inst is None or inst.status != COMMITTED:
                    missing.add((owner, j))
                    if len(missing) >= self.config.learn_c_max:
                        break
            self.stats.commit_requests += 1
            self._send(owner, CommitRequest(self.id, tuple(sorted(missing))))

    # -- shared bookkeeping ----------------------------------------------------------

    def _attributes(
        self,
        keys: frozenset[bytes],
        wild: bool,
        seq_in: int,
        deps_in: tuple[int, ...] | None,
    ) -> tuple[int, tuple[int, ...]]:
        """Attributes of an instance with ``keys``/``wild``, merged with what we know.

        An instance may end up in its own deps (an acceptor that heard of a later
        instance of the same leader first): execution skips that self-edge.
        """
        if wild:
            deps = list(self._any_max)
            top = self._any_seq
        else:
            deps = list(self._wild_max)
            top = self._wild_seq
            key_seq = self._key_seq
            # Only the keys some instance already holds matter (one pass in C;
            # usually none or a few: a hot key).
            known = key_seq.keys() & keys
            if known:
                for k in known:
                    if key_seq[k] > top:
                        top = key_seq[k]
                for q, table in enumerate(self._key_max):
                    d = deps[q]
                    for k in known:
                        j = table.get(k, -1)
                        if j > d:
                            d = j
                    deps[q] = d
        if deps_in is not None:
            deps = [max(a, b) for a, b in zip(deps, deps_in, strict=True)]
        return max(seq_in, top + 1), tuple(deps)

    def _note(self, inst: _Inst) -> None:
        """Add ``inst`` to the interference tables (they only grow).

        Keys no instance held before are entered in bulk (``dict.fromkeys``: one
        pass in C); only keys already present need a comparison. An instance is
        entered again only when its seq grew (its keys and index never change).
        """
        q, j, seq = inst.owner, inst.index, inst.seq
        if seq <= inst.noted_seq:
            return
        first = inst.noted_seq < 0
        inst.noted_seq = seq
        if j > self._any_max[q]:
            self._any_max[q] = j
        if seq > self._any_seq:
            self._any_seq = seq
        if inst.wild:
            if j > self._wild_max[q]:
                self._wild_max[q] = j
            if seq > self._wild_seq:
                self._wild_seq = seq
        keys = inst.keys
        if not keys:
            return
        key_seq = self._key_seq
        known = key_seq.keys() & keys
        if known:
            for k in known:
                if seq > key_seq[k]:
                    key_seq[k] = seq
            if len(known) < len(keys):
                key_seq.update(dict.fromkeys(keys - known, seq))
        else:
            key_seq.update(dict.fromkeys(keys, seq))
        if first:
            table = self._key_max[q]
            if j > self._key_top[q]:  # above every instance of q entered: no comparison
                self._key_top[q] = j
                table.update(dict.fromkeys(keys, j))
            else:
                get = table.get
                for k in keys:
                    if get(k, -1) < j:
                        table[k] = j

    def _committed(self, inst: _Inst) -> None:
        inst.status = COMMITTED
        self._note(inst)
        self._record(inst)
        q = inst.owner
        log = self.logs[q]
        upto = self.committed_upto[q]
        while (nxt := log.get(upto)) is not None and nxt.status == COMMITTED:
            upto += 1
        self.committed_upto[q] = upto
        self.pending_exec.add((q, inst.index))
        self.exec_dirty = True

    def _heard(self, owner: int, index: int) -> None:
        if index + 1 > self.heard_upto[owner]:
            self.heard_upto[owner] = index + 1

    def _record(self, inst: _Inst) -> None:
        self._persist.append(
            InstanceRecord(inst.owner, inst.index, inst.status, inst.seq, inst.deps, inst.commands)
        )

    def _send(self, dst: int, msg: EMessage) -> None:
        self._messages.append((ReplicaId(dst), msg))

    def _peers(self) -> list[int]:
        return [p for p in range(self.n) if p != self.id]

    def _sort_near(self) -> None:
        """Peers by round trip, ties in ring order from us (as the SDPaxos core's
        proximity does): with equal round trips, every leader's fast quorum is
        then a different set of peers instead of everyone picking the lowest ids."""
        n, me = self.n, self.id
        self._near = sorted(self._peers(), key=lambda p: (self._rtt[p], (p - me) % n))

    def _request_commits(self, wanted: list[tuple[int, int]]) -> None:
        self._requested_ms = self.now_ms
        ask = tuple(sorted(wanted)[: self.config.learn_c_max])
        self.stats.commit_requests += 1
        for p in self._peers():
            self._send(p, CommitRequest(self.id, ask))

    # -- validation ----------------------------------------------------------------

    def _valid(self, m: Any) -> bool:
        """Peer input is checked before anything changes (types come checked by the codec)."""
        src = m.src
        if type(src) is not int or not 0 <= src < self.n or src == self.id:
            return False
        n = self.n
        if isinstance(m, PreAccept | Accept | Commit):
            owner = m.owner if isinstance(m, Commit) else src
            if not (
                type(owner) is int
                and 0 <= owner < n
                and type(m.index) is int
                and 0 <= m.index < self.exec_floor[owner] + self._window
                and type(m.seq) is int
                and 0 <= m.seq < SEQ_MAX
                and _deps_ok(m.deps, n)
                and _commands_ok(m.commands, self.config.c_batch_max)
            ):
                return False
            # A dependency far beyond what we executed is garbage, not a reason to scan.
            floor, window = self.exec_floor, self._window
            return all(d < floor[q] + window for q, d in enumerate(m.deps))
        if isinstance(m, CommitShort | AcceptShort):
            floor, window = self.exec_floor, self._window
            return (
                type(m.index) is int
                and 0 <= m.index < floor[src] + window
                and type(m.seq) is int
                and 0 <= m.seq < SEQ_MAX
                and _deps_ok(m.deps, n)
                and all(d < floor[q] + window for q, d in enumerate(m.deps))
            )
        if isinstance(m, PreAcceptOK):
            return (
                type(m.index) is int
                and 0 <= m.index < INDEX_MAX
                and type(m.seq) is int
                and 0 <= m.seq < SEQ_MAX
                and _deps_ok(m.deps, n)
                and type(m.owner) is int
            )
        if isinstance(m, AcceptOK):
            return type(m.index) is int and type(m.owner) is int
        if isinstance(m, CommitRequest):
            return isinstance(m.instances, tuple) and all(
                isinstance(p, tuple)
                and len(p) == 2
                and type(p[0]) is int
                and 0 <= p[0] < n
                and type(p[1]) is int
                and 0 <= p[1] < INDEX_MAX
                for p in m.instances
            )
        if isinstance(m, CommitUpto):
            return type(m.upto) is int and 0 <= m.upto < INDEX_MAX
        return False

    # -- execution ---------------------------------------------------------------------

    def _successors(self, v: _Inst, missing: dict[tuple[int, int], float]) -> list[_Inst] | None:
        """Committed, unexecuted instances ``v`` depends on; None if one is missing.

        ``v`` depends on every instance ``(q, j)``, ``j <= deps[q]``, that
        interferes with it. Each owner's instances are scanned downwards, and the
        scan stops at the first interfering instance ``w`` that *covers* ``v``
        (``w`` has no key, or holds every key of ``v``): ``w``'s own leader ``q``
        made ``w`` depend on every earlier instance of ``q`` that interferes with
        ``w``, hence on every one that interferes with ``v``, so those edges are
        implied by ``v -> w`` (reachability, and so the components, are unchanged).
        In its own owner's column an instance stops only at a *lower* covering
        instance: then "``w`` reaches the earlier ones" holds by induction on the
        instance number (a later instance of the same leader may depend on ``v``
        and rely on ``v`` for the earlier ones: stopping there would make a cycle
        that reaches none of them). That keeps a chain of commands on one key
        linear instead of quadratic.

        Missing ones (unknown here, or interfering and not yet committed) go to
        ``missing`` (at most ``learn_c_max`` per owner), keeping the time they
        were first found missing.
        """
        out: list[_Inst] = []
        blocked = False
        cap = self.config.learn_c_max
        for q in range(self.n):
            log = self.logs[q]
            floor = self.exec_floor[q]
            lacking = 0
            for j in range(v.deps[q], floor - 1, -1):
                w = log.get(j)
                if w is not None and (w is v or w.executed or not _interferes(v, w)):
                    continue
                if w is None or w.status != COMMITTED:
                    blocked = True
                    if lacking < cap:
                        lacking += 1
                        missing[(q, j)] = self._blocked.get((q, j), self.now_ms)
                    continue
                out.append(w)
                if (w.wild or (not v.wild and v.keys <= w.keys)) and (q != v.owner or j < v.index):
                    break
        return None if blocked else out

    def _execute(self) -> None:
        """Execute every committed instance whose dependency graph is committed."""
        missing: dict[tuple[int, int], float] = {}
        stuck: set[tuple[int, int]] = set()
        for root in sorted(self.pending_exec):
            if root in stuck or root not in self.pending_exec:
                continue
            self._tarjan(self.logs[root[0]][root[1]], stuck, missing)
        self._blocked = missing

    def _tarjan(
        self,
        root: _Inst,
        stuck: set[tuple[int, int]],
        missing: dict[tuple[int, int], float],
    ) -> None:
        """Tarjan's SCC algorithm from ``root``, iterative; executes each finished
        component at once (they come out in reverse topological order). Stops at
        the first missing dependency; everything on its stack is then stuck."""
        index: dict[tuple[int, int], int] = {}
        low: dict[tuple[int, int], int] = {}
        on_stack: set[tuple[int, int]] = set()
        stack: list[_Inst] = []
        counter = 0
        work: list[tuple[_Inst, list[_Inst], int]] = []

        def visit(v: _Inst) -> bool:
            nonlocal counter
            succ = self._successors(v, missing)
            if succ is None:
                return False
            key = (v.owner, v.index)
            index[key] = low[key] = counter
            counter += 1
            stack.append(v)
            on_stack.add(key)
            work.append((v, succ, 0))
            return True

        if not visit(root):
            stuck.add((root.owner, root.index))
            return
        while work:
            v, succ, i = work[-1]
            vkey = (v.owner, v.index)
            if i < len(succ):
                work[-1] = (v, succ, i + 1)
                w = succ[i]
                wkey = (w.owner, w.index)
                if w.executed:
                    continue
                if wkey in stuck:
                    stuck.update((x.owner, x.index) for x in stack)
                    return
                if wkey not in index:
                    if not visit(w):
                        stuck.add(wkey)
                        stuck.update((x.owner, x.index) for x in stack)
                        return
                elif wkey in on_stack:
                    low[vkey] = min(low[vkey], index[wkey])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                pkey = (parent.owner, parent.index)
                low[pkey] = min(low[pkey], low[vkey])
            if low[vkey] == index[vkey]:
                component: list[_Inst] = []
                while True:
                    x = stack.pop()
                    on_stack.discard((x.owner, x.index))
                    component.append(x)
                    if x is v:
                        break
                self._execute_component(component)

    def _execute_component(self, component: list[_Inst]) -> None:
        component.sort(key=lambda x: (x.seq, x.owner, x.index))
        self.stats.sccs += 1
        self.stats.scc_instances_max = max(self.stats.scc_instances_max, len(component))
        for inst in component:
            self._apply(inst)
            inst.executed = True
            self.pending_exec.discard((inst.owner, inst.index))
            q = inst.owner
            log = self.logs[q]
            floor = self.exec_floor[q]
            while (nxt := log.get(floor)) is not None and nxt.executed:
                floor += 1
            self.exec_floor[q] = floor

    def _apply(self, inst: _Inst) -> None:
        waiters = self.exec_waiters if inst.owner == self.id else None
        done = self._done
        for cmd in inst.commands:
            key = (cmd.client_id, cmd.seq)
            duplicate = False
            if cmd.client_id and key in done:
                result = done[key]
                duplicate = True
                self.stats.duplicates += 1
            else:
                result = self.sm.apply(cmd.payload)
                if cmd.client_id:
                    done[key] = result
            self.stats.commands_executed += 1
            if waiters and key in waiters:
                waiters.discard(key)
                self._replies.append(Reply(cmd.client_id, cmd.seq, ReplyKind.EXECUTED, result))
            if self.observe:
                self._executed.append(
                    Executed(
                        Slot(self.executed_count),
                        ReplicaId(inst.owner),
                        inst.index,
                        cmd,
                        result,
                        duplicate,
                    )
                )
            self.executed_count += 1

    # -- restart ---------------------------------------------------------------------

    def _restore(self, records: list[Record]) -> None:
        latest: dict[tuple[int, int], InstanceRecord] = {}
        for rec in cast(list[object], records):  # our own record type, not the core's
            if not isinstance(rec, InstanceRecord):
                continue
            key = (rec.owner, rec.index)
            old = latest.get(key)
            if old is None or rec.status >= old.status:
                latest[key] = rec
        for (owner, index), rec in sorted(latest.items()):
            keys, wild = _keys(rec.commands)
            inst = _Inst(owner, index, rec.commands, keys, wild, rec.seq, rec.deps, rec.status)
            self.logs[owner][index] = inst
            self._note(inst)
            self._heard(owner, index)
            if owner == self.id:
                self.next_index = max(self.next_index, index + 1)
        for q in range(self.n):
            log = self.logs[q]
            upto = 0
            while (nxt := log.get(upto)) is not None and nxt.status == COMMITTED:
                upto += 1
            self.committed_upto[q] = upto
            for index, inst in log.items():
                if inst.status == COMMITTED:
                    self.pending_exec.add((q, index))
        self.exec_dirty = bool(self.pending_exec)
        # Our unfinished instances: drive them again (nobody else decides them).
        for index, inst in sorted(self.logs[self.id].items()):
            if inst.status == COMMITTED:
                continue
            self.inflight[index] = inst
            inst.sent_ms = -math.inf  # the first tick resends to every peer
            if inst.status == PREACCEPTED:
                # The attributes we proposed are the ones we recorded first.
                inst.seq0, inst.deps0 = inst.seq, inst.deps
                inst.asked = set(self._peers())


_key_of = operator.itemgetter(3)  # Command.key (Command is a named tuple)


def _keys(commands: tuple[Command, ...]) -> tuple[frozenset[bytes], bool]:
    """The keys of ``commands``, and whether one has none (it interferes with all)."""
    keys: frozenset[bytes | None] = frozenset(map(_key_of, commands))
    if None in keys:
        return cast(frozenset[bytes], keys - {None}), True
    return cast(frozenset[bytes], keys), False


def _deps_ok(deps: object, n: int) -> bool:
    return (
        isinstance(deps, tuple)
        and len(deps) == n
        and all(type(d) is int and -1 <= d < INDEX_MAX for d in deps)
    )


def _commands_ok(commands: object, batch_max: int) -> bool:
    """A batch's shape; each item's type the codec checked (as for the SDPaxos core)."""
    return isinstance(commands, tuple) and 0 < len(commands) <= batch_max


_HANDLERS: dict[type, Any] = {
    PreAccept: EPaxosReplica._on_pre_accept,
    PreAcceptOK: EPaxosReplica._on_pre_accept_ok,
    Accept: EPaxosReplica._on_accept,
    AcceptOK: EPaxosReplica._on_accept_ok,
    Commit: EPaxosReplica._on_commit,
    CommitRequest: EPaxosReplica._on_commit_request,
    CommitUpto: EPaxosReplica._on_commit_upto,
    CommitShort: EPaxosReplica._on_commit_short,
    AcceptShort: EPaxosReplica._on_accept_short,
}


def make_replica(
    config: ClusterConfig,
    replica_id: int,
    state_machine: StateMachine,
    rng: random.Random,
    observe: bool,
    records: list[Record] | None,
) -> EPaxosReplica:
    """The registry's factory (:data:`sdpaxos.protocols.MakeReplica`)."""
    return EPaxosReplica(config, replica_id, state_machine, rng, observe, records)
