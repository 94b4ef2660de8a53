"""Elections and view change (paper section 3.3, Fig. 7; ``docs/recovery.md``).

A replica that misses the sequencer's heartbeats once the lease it granted has
run out becomes a candidate for the next view (V-request). A voter promises the
view and reports its durable assignment log, its ``c_max`` and its established
view (Vote). With votes from a majority, its own included and its own lease
expired, the candidate rebuilds the log (:func:`rebuild_assignment_log`),
re-proposes it as the view's range, and sequences. A replica adopts a view only
by accepting its whole range (:meth:`Election.establish`), so heartbeats never
change what a replica reports in a vote.

The phases a replica goes through are :class:`~sdpaxos.core.views.ViewPhase`;
the transitions are data in :data:`~sdpaxos.core.views.TRANSITIONS`.
"""

from sdpaxos.core.context import Context
from sdpaxos.core.errors import InvariantViolation
from sdpaxos.core.messages import (
    Heartbeat,
    LearnRequest,
    LeaseGrant,
    Message,
    OAck,
    Vote,
    VRequest,
)
from sdpaxos.core.olog import NOT_ESTABLISHED
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.storage import ViewEstablished, ViewPromised
from sdpaxos.core.types import OValue, ReplicaId, Slot, View
from sdpaxos.core.view_change import VoteState, rebuild_assignment_log
from sdpaxos.core.views import ViewEvent


class Candidacy:
    """A view change this replica started and has not yet won."""

    __slots__ = ("o_from", "sent_ms", "started_ms", "view", "votes")

    def __init__(self, view: View, o_from: Slot, now_ms: float) -> None:
        self.view = view
        self.o_from = o_from
        self.started_ms = now_ms
        self.sent_ms = now_ms
        self.votes: dict[ReplicaId, VoteState] = {}


class Election:
    """Failure detection, the lease this replica granted, votes and candidacies."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        self.voted_for: ReplicaId | None = None
        self.voted_ms = 0.0
        self.candidate: Candidacy | None = None
        self.deferred_vote: VRequest | None = None
        #: We granted a lease: no vote (our own candidacy included) before this.
        self.lease_until_ms = 0.0
        self.last_hb_ms = 0.0
        self.seq_contact_ms = 0.0
        self.jitter_ms = ctx.jitter_ms()

    # ------------------------------------------------------------------ timers

    def tick(self, now: float) -> None:
        cfg = self.s.config
        c = self.candidate
        if c is not None:
            if now - c.started_ms >= cfg.candidate_timeout_ms + self.jitter_ms:
                self.start_view_change()  # no majority: try a higher view
            else:
                if now - c.sent_ms >= cfg.retransmit_ms:
                    c.sent_ms = now
                    self.send_v_requests()
                self.maybe_win()  # our own lease grant may have expired meanwhile
        elif self.should_suspect_sequencer():
            self.start_view_change()
        if self.deferred_vote is not None and self.may_vote_for(self.deferred_vote.src):
            request, self.deferred_vote = self.deferred_vote, None
            if request.view > self.s.views.view:
                self.vote(request)

    # --------------------------------------------------------- the lease, trust

    def lease_released(self) -> None:
        """The lease we granted is released (by its holder, or by ourselves as
        the sequencer handing over): it holds no vote back from now on."""
        self.lease_until_ms = self.s.now_ms

    def restarted(self) -> None:
        """We may have granted a lease just before the crash: honour it (our clock
        starts at 0 with the first time the driver gives us)."""
        self.lease_until_ms = self.s.config.lease_ms

    def heard_from_sequencer(self) -> None:
        """A message of our sequencer arrived: contact (early suspicion waits on it)."""
        self.seq_contact_ms = self.s.now_ms

    def lease_expired(self) -> bool:
        """The lease we granted has run out (or its holder released it)."""
        return self.s.now_ms >= self.lease_until_ms

    def may_vote_for_another(self) -> bool:
        """Our lease has run out and we too have missed the sequencer's heartbeats.

        The lease alone is not enough: with lease = heartbeat period (the paper's
        500 ms each), a voter's lease lapses for one network delay every period,
        and a replica cut off from a live sequencer would win in that gap. Asking
        that the voter suspect the sequencer too is the pre-vote idea of Raft.
        """
        if not self.lease_expired():
            return False
        views = self.s.views
        if views.sequencer is None or views.is_sequencer or views.distrust:
            return True
        cfg = self.s.config
        return self.s.now_ms - self.last_hb_ms >= cfg.lease_ms + cfg.election_margin_ms

    def may_vote_for(self, candidate: ReplicaId) -> bool:
        """We may vote for ``candidate`` now: we do not refuse it, and it is our
        sequencer (it asks for its own next view) or we may vote for another."""
        if self.refuses(candidate):
            return False
        return candidate == self.s.views.sequencer or self.may_vote_for_another()

    def refuses(self, candidate: ReplicaId) -> bool:
        """``candidate`` is the sequencer we distrusted (straggler detection or
        its hand-over) less than ``lease_ms + candidate_timeout_ms`` ago, or
        that long before we last voted for another candidate, and we have not
        established a view since.

        Why: the distrusted sequencer is alive. Once one voter has promised the
        successor's view, that voter's C-accepts of the new view reach the old
        sequencer, which runs for the view above it (``from_future_view``), and
        it needs no lease to expire first. The successor may still wait for its
        own grant to lapse, up to ``lease_ms``. Without this rule the voters'
        next promise went to the old sequencer, which won and was the slow
        sequencer again (the runtime straggler bench, sequencer slowed to a
        tenth). The refusal is bounded so that the old sequencer can still win
        when no other candidate does (one replica cut off or crashed after the
        poll): it only delays a vote.
        """
        views = self.s.views
        if candidate != views.distrusted:
            return False
        cfg = self.s.config
        return self.s.now_ms < views.distrusted_ms + cfg.lease_ms + cfg.candidate_timeout_ms

    def rank(self, replica: ReplicaId) -> int:
        """0 for the replica right after the old sequencer (the paper's R_{n+1})."""
        return (replica - self.s.views.est_seq - 1) % self.s.n

    def should_suspect_sequencer(self) -> bool:
        """Missed heartbeats after the lease lapsed, or an election that went quiet."""
        s = self.s
        cfg = s.config
        now = s.now_ms
        stagger = self.rank(s.me) * cfg.successor_stagger_ms + self.jitter_ms
        seq = s.views.sequencer
        if seq is None:
            # We voted (or restarted) but no sequencer showed up.
            return now - self.voted_ms >= cfg.candidate_timeout_ms + stagger
        if s.views.is_sequencer:
            return False
        if now - self.last_hb_ms >= cfg.lease_ms + cfg.election_margin_ms + stagger:
            return True
        # Early: our oldest unordered C-instance has waited several round trips to
        # the sequencer, and the sequencer has been silent all that time. (Our own
        # vote still waits for the lease we granted: see maybe_win.)
        started_ms = self.r.oldest_unordered_started_ms()
        if started_ms is None:
            return False
        rtt_ms = s.prox.rtt_ms[seq]
        if rtt_ms is None:
            return False
        wait = max(cfg.suspect_min_ms, cfg.suspect_rtts * rtt_ms)
        quiet_since = max(self.seq_contact_ms, started_ms)
        return now - quiet_since >= wait + stagger

    def handle_heartbeat(self, m: Heartbeat) -> None:
        s = self.s
        views, olog = s.views, s.olog
        views.keys_wanted = m.keys_wanted
        self.r.heard_majority_executed(m.majority_executed)
        learned = m.base >= 0 and not views.range_committed
        if learned:
            # The range is chosen (we missed the NewView): its slots are committed.
            views.range_committed = True
            for slot in range(max(views.est_start, s.progress.executed_end()), views.est_base):
                olog.commit(slot, views.view)
            s.progress.dirty = True
            olog.acked_dirty = True
        if m.o_len > olog.acked[m.src]:
            olog.acked[m.src] = m.o_len  # the sequencer accepted its whole log
            olog.acked_dirty = True
        now = s.now_ms
        out = s.out
        if views.distrust:
            if learned:
                out.trace("HandleHeartbeat", src=m.src, view=m.view, grant=False, range=True)
            return  # alive, but we want it replaced: no lease, no reprieve
        self.last_hb_ms = now
        self.jitter_ms = s.jitter_ms()
        # The sequencer is alive: a pending vote or our own candidacy is moot (this
        # is what keeps one replica's false suspicion from deposing it).
        self.deferred_vote = None
        if self.candidate is not None:
            out.trace("AbandonViewChange", view=self.candidate.view)
            self.candidate = None
        if m.o_len > olog.heard_upto:
            olog.heard_upto = min(m.o_len, s.window_end())
        # The lease: promise not to vote (for anyone, ourselves included) for
        # lease_ms of our own time.
        self.lease_until_ms = now + s.config.lease_ms
        out.send(m.src, LeaseGrant(s.me, views.view, m.stamp, s.progress.slot))
        out.trace("HandleHeartbeat", src=m.src, view=m.view, grant=True, range=learned)

    # ----------------------------------------------------------- candidacy

    def running_for_view(self) -> bool:
        """Are we a candidate now?"""
        return self.candidate is not None

    def compacted(self, slot: Slot) -> None:
        """Everything below ``slot`` is about to be forgotten. A candidacy that
        reports from below it runs again from the new executed prefix (the
        election timer restarts it)."""
        c = self.candidate
        if c is not None and c.o_from < slot:
            self.s.out.trace("AbandonViewChange", view=c.view)
            self.candidate = None

    def start_view_change(self, above: int = 0) -> None:
        """Become a candidate for the next view (paper section 3.3, "V-request")."""
        s = self.s
        views = s.views
        base = self.candidate.view if self.candidate is not None else views.view
        view = View(max(base, views.view, above) + 1)
        self.candidate = Candidacy(view, s.progress.slot, s.now_ms)
        self.jitter_ms = s.jitter_ms()
        seq = views.sequencer
        if seq is not None and seq != s.me and not above:
            s.prox.suspect(seq)
        s.stats.view_changes_started += 1
        s.out.trace("StartViewChange", view=view, o_from=s.progress.slot)
        self.send_v_requests()
        self.maybe_win()

    def send_v_requests(self) -> None:
        c = self.candidate
        assert c is not None
        s = self.s
        msg = VRequest(s.me, c.view, c.o_from)
        for p in s.prox.near:
            if p not in c.votes:
                s.out.send(p, msg)

    def handle_v_request(self, m: VRequest) -> None:
        s = self.s
        views, out = s.views, s.out
        if m.view <= views.view:
            if m.view == views.view and self.voted_for == m.src and not views.established:
                out.trace("HandleVRequest", view=m.view, candidate=m.src, again=True)
                self.send_vote(m)  # our vote was lost: send it again
            elif views.is_sequencer and m.view < views.view:
                self.from_stale_view(m)
            return
        if views.is_sequencer and views.handing_over != m.src:
            # Alive and sequencing: never vote ourselves out. If the others also
            # stopped hearing from us, their leases lapse and they elect without us.
            out.trace("IgnoreVRequest", view=m.view, candidate=m.src)
            return
        c = self.candidate
        if c is not None and c.view >= m.view and self.rank(s.me) <= self.rank(m.src):
            return  # we run for this view ourselves and take precedence
        if not self.may_vote_for(m.src):
            # We promised the sequencer not to vote for anyone else yet (section 3.5),
            # or we still hear from it and so do not share the suspicion, or the
            # candidate is the sequencer we distrusted (``refuses``).
            if self.deferred_vote is None or m.view >= self.deferred_vote.view:
                self.deferred_vote = m
            out.trace("DeferVote", view=m.view, candidate=m.src)
            return
        self.vote(m)

    def vote(self, m: VRequest) -> None:
        """Promise view ``m.view`` to ``m.src`` and send our phase-1b state (HandleVRequest)."""
        s = self.s
        views = s.views
        seq = views.sequencer
        if views.distrusted is not None and m.src != views.distrusted:
            views.distrusted_ms = s.now_ms  # its successor's election runs on
        views.view = m.view
        self.voted_for = m.src
        self.voted_ms = s.now_ms
        if seq is not None and seq != s.me:
            s.prox.suspect(seq)
        views.move(ViewEvent.VOTE)
        self.candidate = None
        self.deferred_vote = None
        views.distrust = False
        views.handing_over = None
        s.olog.acc_upto = NOT_ESTABLISHED
        views.range_committed = False
        views.new_view = None
        self.r.left_view()
        s.out.persist(ViewPromised(m.view))
        s.out.trace("HandleVRequest", view=m.view, candidate=m.src)
        self.send_vote(m)
        s.olog.forget_commits_before(m.view, s.progress.executed_end())
        s.olog.pending.clear()
        self.r.reset_learner()
        self.r.resync_toward(m.src)

    def send_vote(self, m: VRequest) -> None:
        s = self.s
        views = s.views
        executed = s.progress.executed_end()
        vote = Vote(
            s.me,
            m.view,
            m.o_from,
            s.olog.vote_entries(min(m.o_from, executed)),
            tuple(s.clog.c_max),
            views.est_view,
            views.est_seq,
            views.est_base,
            executed,
            s.olog.base,
        )
        s.out.send(m.src, vote)

    def handle_vote(self, m: Vote) -> None:
        c = self.candidate
        if c is None or m.view != c.view or m.o_from != c.o_from:
            return  # not our election (any more)
        if m.snapshot > c.o_from:
            # The voter forgot slots we have not executed: they would look empty
            # in the rebuild. Install its snapshot first, then run again from there.
            self.s.out.trace("VoteBelowSnapshot", view=m.view, voter=m.src, snapshot=m.snapshot)
            self.r.ask_snapshot(m.src)
            return
        c.votes[m.src] = VoteState(
            m.entries, m.c_max, m.est_view, m.est_seq, m.est_base, m.executed
        )
        self.s.out.trace("HandleVote", view=m.view, voter=m.src, votes=len(c.votes) + 1)
        self.maybe_win()

    def maybe_win(self) -> None:
        """With votes from a majority (ours included) we win, but our own vote may
        only be given once the lease we granted has expired, as any voter's: else
        the old sequencer's lease majority and our vote majority could meet only
        in us, and it would serve stale reads while we make writes ready."""
        c = self.candidate
        if c is None or len(c.votes) + 1 < self.s.majority:
            return
        if not self.lease_expired():
            return
        self.become_sequencer()

    def become_sequencer(self) -> None:
        """Won the election: rebuild the assignment log and re-propose it (Fig. 7)."""
        c = self.candidate
        assert c is not None
        s = self.s
        views, olog = s.views, s.olog
        view, o_from = c.view, c.o_from
        votes = dict(c.votes)
        votes[s.me] = VoteState(
            olog.vote_entries(o_from),
            tuple(s.clog.c_max),
            views.est_view,
            views.est_seq,
            views.est_base,
            s.progress.executed_end(),
        )
        owners, counts = olog.owner, olog.count
        covered_before = olog.coverage(min(o_from, len(olog)), s.n)
        rebuilt = rebuild_assignment_log(
            replicas=s.n, o_from=o_from, votes=votes, covered_before=covered_before
        )
        s.stats.invariant_alarms += rebuilt.alarms
        # The range also re-proposes what we executed below o_from and some voter
        # did not: executed by us, it may be held by two replicas only (N = 5).
        # Slots below our snapshot were executed by a majority (section 16.2 of
        # docs/recovery.md), hence final: the range never reaches below it.
        start = Slot(max(olog.base, min(o_from, *(v.executed for v in votes.values()))))
        values: tuple[OValue, ...] = olog.values(start, o_from) + tuple(rebuilt.values)
        end = Slot(start + len(values))
        # Slots we executed meanwhile must come out unchanged (ExecutedNeverRevoked).
        executed_end = s.progress.executed_end()
        b = olog.base
        for slot in range(o_from, min(executed_end, end)):
            if (owners[slot - b], counts[slot - b]) != values[slot - start]:
                raise InvariantViolation(
                    f"view {view} would revoke executed slot {slot}: "
                    f"{owners[slot - b], counts[slot - b]} -> {values[slot - start]}"
                )
        if end < executed_end:
            raise InvariantViolation(f"view {view} would drop executed slots {end}..")
        olog.grow(end)
        for slot in range(start, end):
            owners[slot - b], counts[slot - b] = values[slot - start]
            olog.ballot[slot - b] = view
            olog.committed[slot - b] = slot < executed_end
        s.out.persist(ViewPromised(view))
        s.out.persist(ViewEstablished(view, s.me, start, values))
        old_seq = rebuilt.old_sequencer
        views.establish(view, s.me, start, end)
        self.voted_for = s.me
        olog.acc_upto = olog.heard_upto = end
        self.candidate = None
        self.deferred_vote = None
        olog.pending.clear()
        self.r.won(start, end)
        olog.forget_commits_before(view, executed_end)
        self.r.reset_learner()
        self.r.resend_to_all()  # re-acceptance by everyone
        s.stats.views_won += 1
        s.out.trace(
            "BecomeSequencer",
            view=view,
            o_from=o_from,
            start=start,
            values=len(values),
            old_sequencer=old_seq,
            inferred=rebuilt.inferred,
        )
        self.r.send_heartbeats()
        self.r.resync_later()
        if old_seq != s.me:
            s.prox.suspect(old_seq)

    # ------------------------------------------------------------ establishing

    def establish(
        self, view: View, sequencer: ReplicaId, start: Slot, values: tuple[OValue, ...]
    ) -> None:
        """Accept the whole rebuilt range of ``view`` in one durable record, and adopt
        the view: its sequencer, and every later O-accept of it (section 2.5 of
        ``docs/recovery.md``). The range was validated against executed slots.
        """
        s = self.s
        views, olog = s.views, s.olog
        end = Slot(start + len(values))
        olog.grow_within(end, s.window_end())
        owners, counts, ballots, committed = olog.owner, olog.count, olog.ballot, olog.committed
        executed_end = s.progress.executed_end()
        b = olog.base
        for k, (owner, count) in enumerate(values):
            slot = start + k
            if slot < b:
                continue  # compacted here: executed, final (the range agrees)
            ballots[slot - b] = view  # as the durable record says (executed slots are equal)
            if slot < executed_end:
                continue
            owners[slot - b], counts[slot - b] = owner, count
            committed[slot - b] = False
        s.out.persist(ViewEstablished(view, sequencer, start, values))
        old = views.sequencer
        views.establish(view, sequencer, start, end)
        olog.acc_upto = max(end, olog.base)  # below the snapshot: chosen already
        self.candidate = None
        self.deferred_vote = None
        self.voted_for = None
        self.last_hb_ms = self.seq_contact_ms = s.now_ms
        self.r.left_view()
        if old is not None and old != sequencer and old != s.me:
            s.prox.suspect(old)
        olog.forget_commits_before(view, executed_end)
        olog.pending.clear()
        self.r.followed(sequencer)
        self.r.reset_learner()
        self.r.resync_later()
        s.progress.dirty = True
        s.out.trace("Establish", view=view, sequencer=sequencer, start=start, end=end)

    def from_unestablished_view(self, m: Message) -> None:
        """A sequencer message of a view whose rebuilt range we have not accepted.

        The range (a rebuilt O-accept) or the NewView establishes the view (the
        caller routes those to their handlers). A heartbeat or another O-accept
        cannot: a replica that adopted a view from a heartbeat would report it in
        its next vote as if it had accepted its range, and the next view change
        would then take the wrong old sequencer (``docs/recovery.md`` section
        2.2). We ask the sequencer for the range.
        """
        s = self.s
        s.stats.stale += 1
        s.out.trace("AskRange", view=m.view, sequencer=m.src)
        s.out.send(m.src, OAck(s.me, m.view, NOT_ESTABLISHED))

    def from_stale_view(self, m: Message) -> None:
        """A message from an older view. The sequencer tells the sender where we are;
        a replica stuck above a live sequencer's view tells that sequencer."""
        s = self.s
        views = s.views
        s.stats.stale += 1
        s.out.trace("Stale", msg=m)
        if type(m) is Heartbeat and views.sequencer is None:
            s.out.send(m.src, LearnRequest(s.me, views.view, Slot(-1), ()))
        if views.is_sequencer:
            self.r.answer_stale(m.src)

    def from_future_view(self, m: Message) -> None:
        """A non-sequencer message of a view above ours: we cannot place it yet."""
        s = self.s
        s.stats.stale += 1
        s.out.trace("FutureView", msg=m)
        if s.views.is_sequencer and (self.candidate is None or self.candidate.view < m.view):
            # The sender promised a view above ours that never got a sequencer,
            # and it still hears us: re-run the election above it so that
            # everyone is in one view again (our followers may vote for us
            # despite their leases).
            self.start_view_change(above=m.view)
