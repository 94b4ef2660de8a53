"""The command leader: this replica's own log of C-instances (paper section 3.1).

:meth:`CommandLeader.propose` queues a command (at most ``propose_queue_max``);
:meth:`start_c_instances` packs
queued commands into the next C-instance (batching) and sends C-accepts to the
nearest majority (thrifty), plus a C-request to the sequencer if that quorum
leaves it out (Fig. 5 lines 1-6). A C-instance is *ready* when it is committed
and the O-instance the counting rule gives it lies in the safe prefix; the
clients waiting for "ready" are answered then (Fig. 5 lines 21, 26, 30).
"""

from collections import deque
from collections.abc import Iterable

from sdpaxos.core.clog import CInstance
from sdpaxos.core.context import Context
from sdpaxos.core.errors import Overloaded
from sdpaxos.core.messages import CAccept, CAck, CCommit, CRequest
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.ready import Reply, ReplyKind
from sdpaxos.core.types import Ballot, CIndex, Command, ReplicaId, Wait, keys_of, make_ballot

_new = tuple.__new__
#: ``Wait.EXECUTED`` read once: an enum member read through its class costs
#: more than a module global, and :meth:`CommandLeader.propose` runs per command.
_EXECUTED = Wait.EXECUTED


class CommandLeader:
    """Proposals, own C-instances in flight, and the clients waiting on them."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        self.own_ballot: Ballot = make_ballot(0, ctx.me)
        #: The index the next own C-instance gets.
        self.next_index = CIndex(0)
        self.proposals: deque[Command] = deque()
        #: ``(client_id, seq)`` of proposals whose client waits for execution.
        self.exec_waiters: set[tuple[int, int]] = set()
        #: Own C-instances started but not yet ready -> the commands *proposed* in
        #: them (insertion order is index order). Not a copy of the C-log: a
        #: recoverer may have chosen another value (a no-op) for the index, and
        #: comparing with what we proposed is how we notice and propose again.
        self.inflight: dict[CIndex, tuple[Command, ...]] = {}
        #: A view was entered: resend own C-instances at the next ready() (:meth:`resync`).
        self.resync_wanted = False
        self.propose_queue_max = ctx.config.propose_queue_max

    def propose(self, command: Command, wait: Wait) -> None:
        """Queue ``command`` for the next C-instance; its client waits for ``wait``
        (:meth:`Replica.propose` checked the command).

        Raises:
            Overloaded: the queue holds ``propose_queue_max`` commands.
        """
        proposals = self.proposals
        if len(proposals) >= self.propose_queue_max:
            raise Overloaded(f"{len(proposals)} proposals are already queued")
        proposals.append(command)
        if wait == _EXECUTED:
            self.exec_waiters.add((command.client_id, command.seq))

    def start_c_instances(self) -> None:
        """Pack queued proposals into new C-instances (batching) and send C-accepts."""
        s = self.s
        cfg = s.config
        out = s.out
        proposals = self.proposals
        batch_max = cfg.c_batch_max
        me = s.me
        log = s.clog.logs[me]
        views = s.views
        while proposals and len(self.inflight) < cfg.c_inflight_max:
            if len(proposals) <= batch_max:
                commands = tuple(proposals)
                proposals.clear()
            else:
                commands = tuple(proposals.popleft() for _ in range(batch_max))
            index = self.next_index
            self.next_index = CIndex(index + 1)
            inst = CInstance()
            inst.commands = commands
            inst.sent_ms = inst.started_ms = s.now_ms
            log[index] = inst
            out.persist(s.clog.accept(me, index, inst, self.own_ballot, commands))
            inst.acks = {me}
            self.inflight[index] = commands
            s.stats.c_instances_started += 1
            if out.tracer is not None:
                out.trace(
                    "Propose",
                    index=index,
                    commands=len(commands),
                    ids=tuple((c.client_id, c.seq) for c in commands),
                )
            out.broadcast(
                s.prox.c_quorum, CAccept(me, views.view, me, index, inst.ballot, commands)
            )
            if views.is_sequencer:
                self.r.order_c_instance(me, index, commands)
            elif views.sequencer not in s.prox.c_quorum:
                self.send_c_request(index)
            if len(inst.acks) >= s.accept_quorum:
                self.commit(index, inst)

    def send_c_request(self, index: CIndex) -> None:
        seq = self.s.views.sequencer
        if seq is not None:
            self.s.out.send(seq, self.c_request(index))

    def c_request(self, index: CIndex) -> CRequest:
        s = self.s
        inst = s.clog.get(s.me, index)
        # Keys only while the sequencer keeps its history table (Heartbeat.keys_wanted).
        commands = inst.commands if inst is not None and s.views.keys_wanted else None
        keys = keys_of(commands) if commands else ()
        return CRequest(s.me, s.views.view, s.me, index, s.olog.acc_upto, keys)

    def retransmit(self, now: float) -> None:
        """Resend what the command leader has not had acknowledged (section 4:
        thrifty messages "will be aggressively resent to other replicas")."""
        s = self.s
        need_order: CIndex | None = None
        log = s.clog.logs[s.me]
        retransmit_ms = s.config.retransmit_ms
        ordered = s.own_ordered
        for index in self.inflight:
            inst = log[index]
            if now - inst.sent_ms < retransmit_ms:
                continue
            inst.sent_ms = now
            if self.resend_c_accept(index, inst, s.prox.near):
                s.stats.retransmissions += 1
            if index >= ordered:
                need_order = index
        if need_order is not None:
            if s.views.is_sequencer:
                self.r.resend_own_o_accepts()
            else:
                self.send_c_request(need_order)

    def share_with_every_member(self) -> None:
        """Send our uncommitted C-instances to every peer that has not accepted
        them. The sequencer does this when it allocates a stop: its own C-accepts
        went to its thrifty quorum only, and a member that lacks one of the values
        the stop orders could start the next epoch only after the C-commit (half a
        round trip after the sequencer learned it); with the value it learns it
        chosen as it accepts it (N <= 4) or from the C-commit at the latest."""
        log = self.s.clog.logs[self.s.me]
        for index in self.inflight:
            self.resend_c_accept(index, log[index], self.s.prox.near)

    def resend_c_accept(self, index: CIndex, inst: CInstance, targets: Iterable[ReplicaId]) -> bool:
        """Send our uncommitted C-instance ``index`` again, in the current view, to
        those of ``targets`` that have not acknowledged it. False if nothing to send."""
        if inst.committed or inst.acks is None or inst.commands is None:
            return False
        s = self.s
        msg = CAccept(s.me, s.views.view, s.me, index, inst.ballot, inst.commands)
        for p in targets:
            if p not in inst.acks:
                s.out.send(p, msg)
        return True

    def handle_c_ack(self, m: CAck) -> None:
        """An acceptor accepted a C-instance we propose: ours, or one we recover."""
        s = self.s
        inst = s.clog.get(m.owner, m.index)
        if inst is None or inst.acks is None or m.ballot != inst.ballot or inst.committed:
            return  # late, stale, or for a proposal we no longer run: harmless
        inst.acks.add(m.src)
        if s.out.tracer is not None:
            s.out.trace("HandleCAck", owner=m.owner, index=m.index, src=m.src)
        if len(inst.acks) >= s.accept_quorum:
            if m.owner == s.me:
                self.commit(m.index, inst)
            else:
                self.r.recovered_c_chosen(m.owner, m.index, inst)

    def commit(self, index: CIndex, inst: CInstance) -> None:
        """C-instance ``index`` is chosen: broadcast the C-commit (Fig. 5 line 10)."""
        s = self.s
        me, view, out = s.me, s.views.view, s.out
        inst.committed = True
        acks = inst.acks or set()
        inst.acks = None
        full = short = None
        for p in s.prox.near:
            if p in acks:
                short = short or CCommit(me, view, me, index, inst.ballot, None)
                out.send(p, short)
            else:
                full = full or CCommit(me, view, me, index, inst.ballot, inst.commands)
                out.send(p, full)
        if out.tracer is not None:
            out.trace("CommitC", owner=me, index=index)
        s.progress.dirty = True
        self.committed(index, inst)

    def committed(self, index: CIndex, inst: CInstance) -> None:
        """One of our C-instances is chosen, by us or by a recovering replica."""
        proposed = self.inflight.get(index)
        if proposed is None:
            return
        if inst.commands != proposed:
            # Another replica recovered this C-instance while we looked dead and
            # chose a no-op (or an older value): our commands lost their place.
            # Propose them again; (client id, seq) keeps execution exactly-once.
            del self.inflight[index]
            self.proposals.extendleft(reversed(proposed))
            self.s.out.trace("Repropose", index=index, commands=len(proposed))
            return
        if index < self.s.own_ordered:
            self.make_ready(index, proposed)

    def ordered(self, before: int, upto: int) -> None:
        """The safe prefix now orders our C-instances ``before .. upto-1``."""
        inflight = self.inflight
        log = self.s.clog.logs[self.s.me]
        for i in range(before, upto):
            index = CIndex(i)
            if index in inflight:
                inst = log[index]
                if inst.committed:
                    self.committed(index, inst)

    def make_ready(self, index: CIndex, commands: tuple[Command, ...]) -> None:
        """Both instances are settled: answer the clients waiting for "ready"."""
        s = self.s
        del self.inflight[index]
        s.stats.commands_ready += len(commands)
        out = s.out
        if out.tracer is not None:
            out.trace("Ready", index=index, commands=len(commands))
        waiters = self.exec_waiters
        reply = out.replies.append  # per command: the hot path, no method call per reply
        ready = ReplyKind.READY
        for cmd in commands:
            if not waiters or (cmd.client_id, cmd.seq) not in waiters:
                # Reply(cmd.client_id, cmd.seq, ready), without the named tuple's
                # Python-level constructor (half the cost, once per command).
                reply(_new(Reply, (cmd.client_id, cmd.seq, ready, None)))

    def resync_later(self) -> None:
        """A view was entered: :meth:`resync` at the next ready(), once the view's
        other effects of this step are in place."""
        self.resync_wanted = True

    def resync(self) -> None:
        """After a view change, re-send in the new view what the old one lost (section 3.3)."""
        self.resync_wanted = False
        s = self.s
        if s.views.sequencer is None or not self.inflight:
            return
        log = s.clog.logs[s.me]
        for index in self.inflight:
            self.resend_c_accept(index, log[index], s.prox.c_quorum)
        last = next(reversed(self.inflight))
        if s.views.is_sequencer:
            s.out.trace("Resync", index=last)
            self.r.order_c_instance(s.me, last, None)
        else:
            self.send_c_request(last)

    def resync_toward(self, candidate: ReplicaId) -> None:
        """Right after voting: our stuck C-instances go out again in the new view,
        and the candidate we voted for (the likely winner) hears what to order.
        Sent behind the vote, they reach the candidate as it wins."""
        if not self.inflight:
            return
        s = self.s
        log = s.clog.logs[s.me]
        for index in self.inflight:
            self.resend_c_accept(index, log[index], s.prox.c_quorum)
        last = next(reversed(self.inflight))
        if candidate not in s.prox.c_quorum:
            s.out.send(candidate, self.c_request(last))

    def forget_below(self, executed: tuple[int, ...]) -> None:
        """Our C-instances below ``executed[me]`` were executed somewhere and are
        about to be compacted (a snapshot covers them). One we still wait for was either
        chosen with our commands (they executed: ready), or replaced by a
        recoverer's value, or its value is unknown here (a peer's snapshot
        covers it): its commands are proposed again, and exactly-once execution
        answers them whether or not they executed. Every one has a session:
        :meth:`Replica.propose` refuses ``client_id`` 0, which this could
        neither answer nor propose again without risking a second execution."""
        s = self.s
        floor = executed[s.me]
        log = s.clog.logs[s.me]
        for index in [i for i in self.inflight if i < floor]:
            proposed = self.inflight[index]
            inst = log.get(index)
            if inst is not None and inst.committed and inst.commands == proposed:
                self.make_ready(index, proposed)
                continue
            del self.inflight[index]
            self.proposals.extendleft(reversed(proposed))
            s.out.trace("Repropose", index=index, commands=len(proposed))
        if self.next_index < floor:
            self.next_index = CIndex(floor)

    def installed(self, next_index: CIndex) -> None:
        """A peer's snapshot was installed: our next index is at least its own
        (never an index a peer may have accepted from us)."""
        self.next_index = max(self.next_index, next_index)

    def restart(self, next_index: CIndex) -> None:
        """Restarted from durable records: go on from ``next_index``. Our last
        ``c_inflight_max`` C-instances may not have been ready: drive them again
        (older ones were ready before we could start these)."""
        s = self.s
        self.next_index = next_index
        log = s.clog.logs[s.me]
        first = max(0, next_index - s.config.c_inflight_max)
        alone = s.majority == 1
        for i in range(s.clog.floor[s.me], next_index):
            index = CIndex(i)
            inst = log.get(index)
            if inst is None or inst.commands is None or inst.ballot != self.own_ballot:
                continue
            if i < first:
                # Ready before we could start the newer ones: chosen. Peers tell
                # us so when we ask (learning); alone (N = 1), our own durable
                # acceptance is the majority that chose it, and nobody else can.
                if alone:
                    inst.committed = True
                continue
            inst.acks = {s.me}
            inst.sent_ms = -s.config.retransmit_ms
            self.inflight[index] = inst.commands
            if alone:
                self.commit(index, inst)  # our acceptance is the majority (N = 1)

    def oldest_unordered_started_ms(self) -> float | None:
        """When our oldest C-instance the sequencer has not ordered yet started."""
        if not self.inflight:
            return None
        first = next(iter(self.inflight))
        if first < self.s.own_ordered:
            return None
        return self.s.clog.logs[self.s.me][first].started_ms
