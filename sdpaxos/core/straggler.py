"""Straggler detection and hand-over of the sequencer role (paper section 4).

The paper: "each replica counts the number of O-accepts for itself received from
the sequencer every 500 ms. If the throughput is less than 50% of its
requirement for at least 3 times, it considers the sequencer as a straggler.
Then it asks others whether they make the same judgment, and if so, it will
start a view change ... we also limit the frequency". We keep that structure
(a judgement per ``straggler_window_ms``, a strike below ``straggler_ratio_pct``
of the requirement, ``straggler_strikes`` strikes, a poll, a majority, a rate
limit) and say what the *requirement* is.

Why not "what we asked for". The first version took the requirement to be the
C-instances that needed ordering in the window (those waiting at its start
plus those started in it). Under closed-loop clients that never falls behind,
however slow the sequencer: clients send their next command only when the
last one is answered, so a replica starts C-instances only as fast as they are
ordered, and batching packs more commands into each when ordering is slow.
Throughput falls with the sequencer and the count keeps up with it.

What a slow sequencer changes is the pace at which it serves our backlog.
Every tick a non-sequencer samples its backlog (own C-instances started and
not yet ordered); over a window that gives the mean backlog ``L`` and, with
the C-instances ordered in the window, the ordering rate ``X`` and, by
Little's law, the mean time a C-instance waits for its O-instance, ``W = L /
X``. The *reference* is what the healthy sequencer of this view did: ``X`` and
``L`` averaged over earlier windows that were not strikes (each one moves it
``straggler_reference_pct`` percent). A window's requirement is the least a
sequencer as fast as the reference would have ordered for us: no more than it
did then (``X_ref`` times the window), and no more than our backlog would have
got at its waiting time (``L * window / W_ref``). A window is a strike when
fewer than ``straggler_ratio_pct`` percent of that were ordered, that is when
the pace fell below half of the reference's *and* the wait grew beyond twice
the reference's. Either alone happens to a healthy sequencer: the pace falls
when load falls (but then the wait does not grow); the wait grows when load
grows past what the sequencer can serve, or with the noise of a saturated
system (but then the pace does not fall). Only a slower server does both.
Under a closed loop (the backlog bounded by the clients) a sequencer slowed to
a third shows a third of the pace and three times the wait from its first
window on; under an open load beyond what it can serve the backlog grows and
the pace falls with it.

The other candidates, and why not them. A wait measured against the round
trip to the sequencer (``rtt_ms``, ``observe_rtt``): under saturation every
replica's own queue adds far more than the network, a healthy saturated
cluster waits tens of round trips, and a node's measured round trips include
its peers' queues, so no fixed multiple separates slow from busy. A
comparison with the other replicas' response times: with thrifty quorums a
replica's C-accepts may go to the sequencer alone, leaving it nothing to
compare with. The reference instead is this replica's own history with this
sequencer, so it learns what "healthy" means on whatever machine and load it
runs, at the cost of missing a sequencer that is slow from the first window of
its view (the reference then is the slow pace). Until a reference exists the
requirement is the paper's count (what needed ordering), which catches a
sequencer that orders nothing.

A slow *command leader* is not a slow sequencer: its own backlog waits in its
own queue, so it may strike, but the others see the sequencer serve them as
before and vote no. The poll asks every peer but the sequencer; a peer agrees
if its own last window was a strike. With a majority (the poller included)
the poller starts a view change, and the agreeing peers *distrust* the
sequencer (no more lease renewals, votes for others once the lease lapses). A
poll without a majority by the next judgement has failed: the poller takes its
current pace as the sequencer's normal one (a new reference) and starts
counting again, instead of asking every window. Rate limit: a replica that
started or agreed to a straggler view change neither polls nor agrees again
for ``straggler_min_interval_ms``. The first window in a view, which carries
the previous view's backlog, is neither judged nor learned from, and a view
change forgets the reference (a new sequencer, a new normal).

Whatever this decides, it only starts a view change, which is safe. A
sequencer can also hand its role over on purpose (:meth:`Straggler.transfer_sequencer`).
"""

import math

from sdpaxos.core.context import Context
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.messages import SequencerHandover, StragglerPoll, StragglerVote
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.types import ReplicaId, View


class Straggler:
    """The current window, the reference pace, the strikes, the poll, the rate limit."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        self.strikes = 0
        #: The poll in progress: who agreed so far (ourselves first); empty: none.
        self.polling: set[ReplicaId] = set()
        #: When this replica last started a straggler view change, or agreed to
        #: another's while not polling itself.
        self.last_ms = -math.inf
        # The window: the view it is judged in (None: not following a sequencer,
        # no window running), when it started, the counts at its start.
        self.window_view: View | None = None
        self.window_started_ms = 0.0
        self.window_index_start = 0
        self.window_ordered_start = 0
        self.window_need_start = 0
        #: The first window of a view is not judged (it carries the old view's backlog).
        self.window_first = True
        #: Own C-instances started and not ordered at the last sample, when it
        #: was taken, and the backlog integrated over the window (C-instance ms).
        self.backlog = 0
        self.sampled_ms = 0.0
        self.backlog_ms = 0.0
        #: The reference: C-instances ordered for us per ms, and the mean
        #: backlog, in this view's windows that were not strikes (None: none yet).
        self.ref_rate: float | None = None
        self.ref_backlog = 0.0

    # ------------------------------------------------------------- detection

    def tick(self, now: float) -> None:
        """Sample the backlog; at the end of a window, judge the sequencer."""
        s = self.s
        views = s.views
        if views.is_sequencer or views.sequencer is None:
            self.window_view = None  # nothing to judge; start afresh when we follow one
            return
        if self.window_view != views.view:
            self.start_view(now)
            return
        next_index = self.r.next_c_index()
        self.backlog_ms += self.backlog * (now - self.sampled_ms)
        self.sampled_ms = now
        self.backlog = max(0, next_index - s.own_ordered)
        if now - self.window_started_ms >= s.config.straggler_window_ms:
            self.judge_sequencer_speed(now)

    def start_view(self, now: float) -> None:
        """We follow the sequencer of a view we were not judging: a new normal."""
        self.window_view = self.s.views.view
        self.ref_rate = None
        self.ref_backlog = 0.0
        self.strikes = 0
        self.polling = set()
        self.window_first = True
        self.start_window(now)

    def start_window(self, now: float) -> None:
        s = self.s
        next_index = self.r.next_c_index()
        ordered = s.own_ordered
        self.window_started_ms = self.sampled_ms = now
        self.window_index_start = next_index
        self.window_ordered_start = ordered
        self.window_need_start = self.backlog = max(0, next_index - ordered)
        self.backlog_ms = 0.0

    def requirement(self, duration_ms: float, need: int) -> float:
        """The larger of what needed ordering in this window and what a sequencer
        as fast as the reference would have ordered for us in it."""
        if self.ref_rate is None:
            return float(need)
        return max(need, min(self.ref_rate * duration_ms, self.waited_pace(duration_ms)))

    def waited_pace(self, duration_ms: float) -> float:
        """C-instances our backlog in this window would have had ordered at the
        reference's waiting time ``W_ref = L_ref / X_ref`` (Little's law);
        infinite without a reference or if the reference waited for nothing."""
        rate = self.ref_rate
        if rate is None or not self.ref_backlog > 0:
            return math.inf
        return self.backlog_ms * rate / self.ref_backlog

    def judge_sequencer_speed(self, now: float) -> None:
        """Judge the window that ends now (see the module docstring); three strikes
        in a row make us poll the others."""
        s = self.s
        cfg = s.config
        duration = now - self.window_started_ms
        next_index = self.r.next_c_index()
        served = max(0, s.own_ordered - self.window_ordered_start)
        need = self.window_need_start + max(0, next_index - self.window_index_start)
        judged = need >= cfg.straggler_need_min and not self.window_first
        required = self.requirement(duration, need) if judged else 0.0
        strike = judged and served * 100 < required * cfg.straggler_ratio_pct
        poll_failed = bool(self.polling)
        self.polling = set()
        if poll_failed:
            # The others do not see a slow sequencer: this is its normal pace now.
            self.strikes = 0
            if judged:
                self.ref_rate = None
                self.learn(served / duration, self.backlog_ms / duration)
        elif strike:
            self.strikes += 1
        else:
            self.strikes = 0
            if judged and (
                self.ref_rate is None
                or served >= self.ref_rate * duration
                or served >= self.waited_pace(duration)
            ):
                # As fast as the reference, or as short a wait: learned (load
                # that rises raises the pace, load that falls shortens the wait).
                # A window worse in both, but not by half, is neither a strike
                # nor learned: else a sequencer that slows by degrees would drag
                # the reference down with it.
                self.learn(served / duration, self.backlog_ms / duration)
        self.window_first = False
        backlog_ms = self.backlog_ms
        self.start_window(now)
        if (
            self.strikes >= cfg.straggler_strikes
            and now - self.last_ms >= cfg.straggler_min_interval_ms
        ):
            self.polling = {s.me}
            s.out.trace(
                "StragglerSuspect",
                view=s.views.view,
                sequencer=s.views.sequencer,
                served=served,
                required=round(required, 1),
                wait_ms=round(backlog_ms / served, 1) if served else None,
            )
            msg = StragglerPoll(s.me, s.views.view)
            for p in s.prox.near:
                if p != s.views.sequencer:
                    s.out.send(p, msg)

    def learn(self, rate: float, backlog: float) -> None:
        """Move the reference toward a healthy window's pace and backlog."""
        if self.ref_rate is None:
            self.ref_rate, self.ref_backlog = rate, backlog
            return
        weight = self.s.config.straggler_reference_pct / 100
        self.ref_rate += weight * (rate - self.ref_rate)
        self.ref_backlog += weight * (backlog - self.ref_backlog)

    # ------------------------------------------------------------- the poll

    def handle_straggler_poll(self, m: StragglerPoll) -> None:
        s = self.s
        # Rate limit: a replica that took part in a straggler view change lately
        # says no, unless it is polling about the same slowness right now.
        agree = (
            self.strikes > 0
            and not s.views.is_sequencer
            and (
                bool(self.polling)
                or s.now_ms - self.last_ms >= s.config.straggler_min_interval_ms
            )
        )
        if agree:
            if not self.polling:
                self.last_ms = s.now_ms
            self.distrust_sequencer()
        s.out.send(m.src, StragglerVote(s.me, s.views.view, agree))

    def handle_straggler_vote(self, m: StragglerVote) -> None:
        s = self.s
        if not self.polling or not m.agree:
            return
        self.polling.add(m.src)
        if len(self.polling) < s.majority:
            return
        self.polling = set()
        self.strikes = 0
        if s.now_ms - self.last_ms < s.config.straggler_min_interval_ms:
            return  # rate limit
        self.last_ms = s.now_ms
        s.out.trace("StragglerViewChange", view=s.views.view, sequencer=s.views.sequencer)
        self.distrust_sequencer()
        self.r.start_view_change()

    def distrust_sequencer(self) -> None:
        """Stop renewing the sequencer's lease; vote for others once it runs out.

        Distrust never releases a lease we granted: only its expiry, or the
        holder's own hand-over, does.
        """
        self.s.views.distrust = True

    # ------------------------------------------------------------- hand-over

    def transfer_sequencer(self, target: ReplicaId) -> None:
        """Hand the sequencer role to ``target`` (see :meth:`Replica.transfer_sequencer`)."""
        s = self.s
        if not s.views.is_sequencer or self.r.rebuilding():
            raise LocalProtocolError("only an established sequencer can hand its role over")
        if not 0 <= target < s.n or target == s.me:
            raise LocalProtocolError(f"cannot hand the sequencer role to {target!r}")
        s.views.handing_over = target
        self.r.release_lease()
        s.out.broadcast(s.prox.near, SequencerHandover(s.me, s.views.view, target))
        s.out.trace("SequencerHandover", view=s.views.view, target=target)

    def handle_sequencer_handover(self, m: SequencerHandover) -> None:
        s = self.s
        self.r.lease_released()
        s.out.trace("HandleHandover", src=m.src, view=m.view, target=m.target)
        self.distrust_sequencer()
        if m.target == s.me and not self.r.running_for_view():
            self.r.start_view_change()
