"""The acceptor of everyone's C-instances and of the sequencer's O-instances.

C-instances (paper Fig. 5 lines 7-9): accept a C-accept unless a higher ballot
was promised, acknowledge it, learn the commit. O-instances: accept the
sequencer's O-accepts *contiguously* within a view, after the view's whole
rebuilt range (rule 4 of ``docs/protocol.md``), and acknowledge the accepted
prefix. Phase 1 of C-instance recovery (:meth:`Acceptor.promise_c`) is here too.

Messages reach these handlers validated (:mod:`sdpaxos.core.validate`).
"""

from sdpaxos.core.clog import NO_BALLOT, CInstance
from sdpaxos.core.context import Context
from sdpaxos.core.errors import PeerMessageError
from sdpaxos.core.messages import CAccept, CAck, CCommit, CPrepare, CPromise, NewView, OAccept, OAck
from sdpaxos.core.quorum import leader_and_sequencer_suffice, learns_c_on_accept
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.storage import CPromised, OAccepted
from sdpaxos.core.types import (
    STOP,
    Ballot,
    CIndex,
    Command,
    OValue,
    ReplicaId,
    Slot,
    View,
)


class Acceptor:
    """Acceptor handlers; its state is the C-log and the assignment log (shared)."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        #: O-ACKs also go to the owners of the slots an O-accept carries (N = 4,
        #: 6, 7 and up: the leader needs a majority, not just the sequencer).
        self.acks_to_owners = not leader_and_sequencer_suffice(ctx.n)
        #: N <= 4: our acceptance of a C-accept is the second of a phase-2 quorum
        #: of two (its proposer accepted first), so the value is chosen as we
        #: accept it, half a round trip before the proposer's C-commit would say so.
        self.learns_on_accept = learns_c_on_accept(ctx.n)

    # ------------------------------------------------------------ C-instances

    def handle_c_accept(self, m: CAccept) -> None:
        s = self.s
        owner, index = m.owner, m.index
        if index < s.clog.floor[owner]:
            return  # executed and compacted here: chosen; its owner learns that by snapshot
        log = s.clog.logs[owner]
        inst = log.get(index)
        if inst is not None and m.ballot < inst.promised:
            s.out.trace("Reject", reason="stale ballot", owner=owner, index=index)
            return
        if inst is None:
            inst = log[index] = CInstance()
        if inst.ballot != m.ballot or inst.commands != m.commands:
            inst.acks = None  # someone else proposes here now
            s.out.persist(s.clog.accept(owner, index, inst, m.ballot, m.commands))
        # The proposer (owner or recoverer) accepted (m.ballot, m.commands) before
        # sending; with ours that is a phase-2 quorum when it is two. (A value
        # committed here already is the one every higher ballot proposes.)
        learned = self.learns_on_accept and m.src != s.me and not inst.committed
        if s.out.tracer is not None:
            s.out.trace("HandleCAccept", owner=owner, index=index, ballot=m.ballot, learned=learned)
        s.out.send(m.src, CAck(s.me, s.views.view, owner, index, m.ballot))
        if learned:
            self.chosen_here(owner, index, inst)
        if s.views.is_sequencer and m.src == owner:
            self.r.order_c_instance(owner, index, m.commands)

    def handle_c_commit(self, m: CCommit) -> None:
        s = self.s
        owner, index = m.owner, m.index
        if index < s.clog.floor[owner]:
            return  # executed and compacted here
        inst = s.clog.entry(owner, index)
        if inst.committed:
            return
        if m.commands is not None:
            inst.commands = m.commands
        elif inst.commands is None or inst.ballot < m.ballot:
            # Short form, but we never accepted that ballot: the value is learned
            # through a LearnRequest once execution blocks on this C-instance.
            return
        # A value accepted at a ballot >= the committed one is the chosen value
        # (Paxos: every higher ballot proposes the chosen value).
        if s.out.tracer is not None:
            s.out.trace("HandleCCommit", owner=owner, index=index)
        self.chosen_here(owner, index, inst)

    def chosen_here(self, owner: ReplicaId, index: CIndex, inst: CInstance) -> None:
        """``owner.index`` is chosen with the value we hold: execution may use it."""
        inst.committed = True
        inst.acks = None
        self.s.progress.dirty = True
        if owner == self.s.me:
            self.r.own_c_chosen(index, inst)

    def promise_c(self, owner: ReplicaId, start: CIndex, end: CIndex, ballot: Ballot) -> CPromise:
        """Phase 1 for a range of ``owner``'s C-instances; persists the promise when given.

        Instances we compacted are answered with where our compaction ends and
        nothing else: "forgotten" must never read as "nothing accepted", or the
        recoverer would choose a no-op for an executed command.
        """
        s = self.s
        floor = s.clog.floor[owner]
        if start < floor:
            return CPromise(
                s.me,
                s.views.view,
                owner,
                start,
                ballot,
                False,
                NO_BALLOT,
                (),
                (),
                (),
                CIndex(floor),
            )
        log = s.clog.logs[owner]
        top = s.clog.top_promised(owner, start, end)
        ok = ballot >= top
        ballots: list[Ballot] = []
        values: list[tuple[Command, ...] | None] = []
        committed: list[bool] = []
        for k in range(start, end):
            i = CIndex(k)
            inst = log.get(i)
            if inst is None:
                if ok:
                    inst = log[i] = CInstance()
                else:
                    ballots.append(NO_BALLOT)
                    values.append(None)
                    committed.append(False)
                    continue
            if ok and ballot > inst.promised:
                inst.promised = ballot
                inst.acks = None if inst.ballot != ballot else inst.acks
                s.out.persist(CPromised(owner, i, ballot))
            ballots.append(inst.ballot)
            values.append(inst.commands)
            committed.append(inst.committed)
        return CPromise(
            s.me,
            s.views.view,
            owner,
            start,
            ballot,
            ok,
            max(top, ballot) if not ok else ballot,
            tuple(ballots),
            tuple(values),
            tuple(committed),
            CIndex(floor),
        )

    def handle_c_prepare(self, m: CPrepare) -> None:
        s = self.s
        s.out.trace("HandleCPrepare", owner=m.owner, start=m.start, end=m.end, ballot=m.ballot)
        s.out.send(m.src, self.promise_c(m.owner, m.start, m.end, m.ballot))

    # ------------------------------------------------------------ O-instances

    def handle_o_accept(self, m: OAccept) -> None:
        s = self.s
        olog, out = s.olog, s.out
        start, values, base = m.start, m.values, m.base
        end = Slot(start + len(values))
        view = m.view
        if s.views.est_view != view:
            self.r.establish(view, m.src, start, values[: base - start])
        if end > olog.heard_upto:
            olog.heard_upto = end
        if start > olog.acc_upto and not m.rebuilt:
            # Acceptance is contiguous within a view: what this replica accepted
            # in the view is always a prefix from the view's range, so a later
            # view change can trust it. Out of order: keep it until the gap fills.
            pending = olog.pending
            if start not in pending and len(pending) >= s.config.o_pending_max:
                pending.pop(max(pending))  # bounded; the sequencer resends from our ack
            pending[start] = values
        else:
            self.accept_o_from(start, values)
            if out.tracer is not None:
                out.trace(
                    "HandleOAccept", view=view, start=start, count=len(values), range=m.rebuilt
                )
            pending = olog.pending
            while pending:
                first = min(pending)
                if first > olog.acc_upto:
                    break
                buffered = pending.pop(first)
                try:
                    self.accept_o_from(first, buffered)
                except PeerMessageError:
                    break  # that buffered O-accept conflicts: drop it, keep ours
                if out.tracer is not None:
                    # The buffered O-accept, handled now (the spec's step on it).
                    out.trace(
                        "HandleOAccept",
                        view=view,
                        start=first,
                        count=len(buffered),
                        range=False,
                        values=buffered,
                    )
            return self.ack_o_accept(m, view, end, values)
        if out.tracer is not None:
            out.trace("HandleOAccept", view=view, start=start, count=len(values), range=m.rebuilt)
        self.ack_o_accept(m, view, end, values)

    def ack_o_accept(self, m: OAccept, view: View, end: Slot, values: tuple[OValue, ...]) -> None:
        s = self.s
        olog = s.olog
        seq = m.src
        acked = olog.acked
        if end > acked[seq]:
            acked[seq] = end  # the sequencer accepted what it sends
        acked[s.me] = olog.acc_upto
        olog.acked_dirty = True
        # Always acknowledge to the sequencer (a prefix ack, one small message):
        # it needs a majority for its own O-instances and for a rebuilt range,
        # and it retransmits from what each acceptor acknowledged.
        ack = OAck(s.me, view, olog.acc_upto)
        s.out.send(seq, ack)
        if self.acks_to_owners and values:
            for owner in sorted({o for o, _ in values if o >= 0 and o not in (seq, s.me)}):
                s.out.send(owner, ack)
        if values and values[-1][0] == STOP:
            # The stop is the last O-instance of its epoch (nothing is allocated
            # after it): acknowledged to every member, so each learns it chosen
            # from the acks, as soon as the sequencer would, and starts the next
            # epoch then (docs/membership.md section 4.6).
            for p in s.prox.near:
                if p != seq:
                    s.out.send(p, ack)

    def accept_o_from(self, start: Slot, values: tuple[OValue, ...]) -> None:
        """Accept the part of ``values`` (from ``start``) that extends our accepted prefix."""
        s = self.s
        olog = s.olog
        first = olog.acc_upto
        end = Slot(start + len(values))
        if end <= first or start > first:
            return
        view = s.views.view
        # (Checked again here: a buffered O-accept may meet commits learned since.)
        revoked = olog.revoked_executed(start, values, s.progress.executed_end())
        if revoked is not None:
            s.stats.invariant_alarms += 1
            raise PeerMessageError(f"O-accept of view {view} would revoke executed slot {revoked}")
        if olog.conflict_at_ballot(start, values, view) is not None:
            raise PeerMessageError(f"O-accept conflicts with view {view}'s values")
        olog.grow_within(end, s.window_end())
        owners, counts, ballots = olog.owner, olog.count, olog.ballot
        new = values[first - start :]
        i0 = first - olog.base
        for k, (owner, count) in enumerate(new):
            i = i0 + k
            owners[i] = owner
            counts[i] = count
            ballots[i] = view
        s.out.persist(OAccepted(view, first, new))
        olog.acc_upto = end
        self.advance_acc()
        olog.advance_known(s.progress.slot, view)

    def advance_acc(self) -> None:
        """Extend the accepted prefix over slots we hold durably at this view's
        ballot (values learned committed in this view count: they are chosen at
        it). Always what a restart would compute from the records."""
        s = self.s
        olog = s.olog
        if olog.acc_upto < 0:
            return
        k = olog.accepted_run_end(s.views.view)
        if k != olog.acc_upto:
            olog.acc_upto = k
            if not s.views.is_sequencer:
                olog.acked[s.me] = k
                olog.acked_dirty = True

    def handle_new_view(self, m: NewView) -> None:
        s = self.s
        olog = s.olog
        start, values = m.start, m.values
        end = Slot(start + len(values))
        view = m.view
        if s.views.est_view != view:
            self.r.establish(view, m.src, start, values)
        committed, cballots = olog.committed, olog.cballot
        b = olog.base
        for i in range(max(start, s.progress.executed_end()) - b, end - b):
            if not committed[i]:  # (a commit known already keeps its ballot: final if older)
                committed[i] = True
                cballots[i] = view
        s.views.range_committed = True
        s.views.new_view = m
        if end > olog.acked[m.src]:
            olog.acked[m.src] = end
        if end > olog.heard_upto:
            olog.heard_upto = end
        olog.advance_known(s.progress.slot, s.views.view)
        olog.acked_dirty = True
        s.progress.dirty = True
        s.out.trace("HandleNewView", view=view, start=start, values=len(values))
