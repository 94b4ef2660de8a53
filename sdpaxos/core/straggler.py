"""Straggler detection and hand-over of the sequencer role (paper section 4).

The paper: "each replica counts the number of O-accepts for itself received from
the sequencer every 500 ms. If the throughput is less than 50% of its
requirement for at least 3 times, it considers the sequencer as a straggler.
Then it asks others whether they make the same judgment, and if so, it will
start a view change ... we also limit the frequency". We keep that structure
(a judgement per ``straggler_window_ms``, a strike when fewer than
``straggler_ratio_pct`` percent of the requirement were ordered,
``straggler_strikes`` strikes in a row, a poll, a majority, a rate limit) and
say what the *requirement* is.

Everything is counted in commands (those in our own C-instances), not in
C-instances: batching packs more commands into each C-instance when a node is
busier, so the C-instance count moves with the shape of the load as much as
with the sequencer.

"What we asked for" is not enough. The commands that needed ordering in the
window (those waiting at its start plus those started in it) are still one
requirement: a sequencer that orders less than half of them falls behind an
open load, or orders nothing. But under closed-loop clients that count never
falls behind, however slow the sequencer: clients send their next command
only when the last one is answered, so a replica starts commands only as fast
as they are ordered. Throughput falls with the sequencer and the count with it.

What a slow sequencer changes is the pace at which it serves our backlog.
Every tick a non-sequencer samples its backlog (commands in its own
C-instances started and not yet ordered). Over a window that gives the backlog
integrated over time ``A``, the commands ordered ``X`` (the *pace*, per window)
and, by Little's law, the mean time one waited for its O-instance, ``W = A /
X`` (the *wait*).
The *reference* is what this view's sequencer did when healthy: the median
pace and the median wait of the last ``straggler_reference_windows`` healthy
windows (medians, so that one burst or one stall does not move it). The
requirement is then also the least a sequencer as fast as the reference would
have ordered for us: no more than its pace (``X_ref``) and no more than our
backlog at its wait (``A / W_ref``). A window is a strike when fewer than 50 %
of that were ordered: the pace fell below half the reference's *and* the wait
grew past twice the reference's. Either alone happens to a healthy
sequencer: the pace falls when load falls (the wait does not grow then); the
wait grows when load grows past what the sequencer can serve, and with the
noise of a system near saturation (the pace does not fall then). Only a slower
server does both. A sequencer slowed to a third under a closed loop shows a
third of the pace and three times the wait from its first slowed window on.

Learning. A window that is not a strike is learned into the reference unless
it is *degraded*: slower and longer-waiting than the reference, though not by
half. Otherwise a sequencer that slows by degrees, or an open load it still
mostly serves (the pace down a quarter, the wait up a hundredfold), would
drag the reference down until nothing looks slow. A window better in one
respect is learned: load that rises raises the pace, load that falls shortens
the wait. The first window in a view carries the old view's backlog and is
neither judged nor learned, nor is a window with fewer than
``straggler_need_min`` C-instances waiting or started (too few to judge); a
view change forgets the reference (a new sequencer, a new normal). Until a
reference exists, the requirement is the count alone.

The other candidates, and why not them. The wait against the round trip to the
sequencer (``rtt_ms``, ``observe_rtt``): under saturation every replica's own
queue adds far more than the network (a healthy saturated simulated cluster
waits ninety round trips), and a node's measured round trips include its
peers' queues, so no fixed multiple separates slow from busy. The wait against
the other replicas' response times (C-acks): with thrifty quorums a replica's
C-accepts may go to the sequencer alone, leaving it nothing to compare with.
The reference is instead this replica's own history with this sequencer, which
learns what "healthy" means on whatever machine and load it runs; the price is
that a sequencer slow from the first window of its view is judged by the
count alone.

A slow *command leader* is not a slow sequencer: its own backlog waits in its
own queue, so it may strike, but the others see the sequencer serve them as
before and vote no. The poll goes to every peer but the sequencer; a peer
agrees if its own last window was a strike. With a majority (the poller
included) the poller starts a view change, and the agreeing peers *distrust*
the sequencer (no more lease renewals, votes for others once the lease
lapses). A poll without a majority by the next judgement has failed: the
poller takes its current pace as the sequencer's normal one (the reference
restarts from this window) instead of asking every window. Rate limit: a
replica that started a straggler view change, or agreed to one while not
polling itself, neither polls nor agrees for ``straggler_min_interval_ms``.

Whatever this decides, it only starts a view change, which is safe. A
sequencer can also hand its role over on purpose (:meth:`Straggler.transfer_sequencer`).
"""

import math
from collections import deque
from statistics import median

from sdpaxos.core.context import Context
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.messages import SequencerHandover, StragglerPoll, StragglerVote
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.types import CIndex, ReplicaId, View


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
        #: The first window of a view is not judged (it carries the old view's backlog).
        self.window_first = True
        # In commands: waiting at the window's start, started and ordered in it.
        self.window_need_start = 0
        self.started = 0
        self.served = 0
        #: Commands in own C-instances started and not ordered at the last sample,
        #: when it was taken, and that backlog integrated over the window (ms).
        self.backlog = 0
        self.sampled_ms = 0.0
        self.backlog_ms = 0.0
        #: The C-instance counters at the last sample.
        self.seen_index = 0
        self.seen_ordered = 0
        #: The reference: the pace (commands ordered for us per ms) and the
        #: wait (ms, Little's law) of this view's last healthy windows; their
        #: medians, so that one burst or one stall does not move it.
        windows = ctx.config.straggler_reference_windows
        self.paces: deque[float] = deque(maxlen=windows)
        self.waits: deque[float] = deque(maxlen=windows)

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
        self.sample(now)
        if now - self.window_started_ms >= s.config.straggler_window_ms:
            self.judge_sequencer_speed(now)

    def sample(self, now: float) -> None:
        """Count the commands started and ordered since the last sample, and
        integrate the backlog (the last sample's, held until now)."""
        s = self.s
        next_index = self.r.next_c_index()
        ordered = s.own_ordered
        self.backlog_ms += self.backlog * (now - self.sampled_ms)
        self.sampled_ms = now
        if next_index > self.seen_index:
            self.started += self.commands_in(self.seen_index, next_index)
        if ordered > self.seen_ordered:
            self.served += self.commands_in(self.seen_ordered, ordered)
        self.seen_index, self.seen_ordered = next_index, ordered
        self.backlog = self.commands_in(ordered, next_index)

    def commands_in(self, start: int, end: int) -> int:
        """Commands in our C-instances ``start .. end-1``. Counting commands, not
        C-instances: batching packs more into each when ordering is slow, so the
        C-instance count moves with the load's shape as much as with the
        sequencer. A C-instance we no longer hold (compacted) or hold no value
        for counts one; a range longer than ``c_inflight_max`` (a jump: a
        snapshot installed) counts one per C-instance, to keep a tick cheap."""
        if end - start > self.s.config.c_inflight_max:
            return max(0, end - start)
        log = self.s.clog.logs[self.s.me]
        count = 0
        for i in range(start, end):
            inst = log.get(CIndex(i))
            count += len(inst.commands) if inst is not None and inst.commands else 1
        return count

    def start_view(self, now: float) -> None:
        """We follow the sequencer of a view we were not judging: a new normal."""
        self.window_view = self.s.views.view
        self.paces.clear()
        self.waits.clear()
        self.strikes = 0
        self.polling = set()
        self.window_first = True
        s = self.s
        self.seen_index, self.seen_ordered = self.r.next_c_index(), s.own_ordered
        self.backlog = self.commands_in(self.seen_ordered, self.seen_index)
        self.start_window(now)

    def start_window(self, now: float) -> None:
        self.window_started_ms = self.sampled_ms = now
        self.window_index_start = self.seen_index
        self.window_ordered_start = self.seen_ordered
        self.window_need_start = self.backlog
        self.started = self.served = 0
        self.backlog_ms = 0.0

    def requirement(self, duration_ms: float, need: int) -> float:
        """The larger of what needed ordering in this window and what a sequencer
        as fast as the reference would have ordered for us in it: its pace over
        the window, or our backlog at its wait (Little's law), whichever is less."""
        if not self.paces:
            return float(need)
        pace = median(self.paces) * duration_ms
        wait = median(self.waits)
        if wait > 0:
            pace = min(pace, self.backlog_ms / wait)
        return max(float(need), pace)

    def judge_sequencer_speed(self, now: float) -> None:
        """Judge the window that ends now (see the module docstring); three strikes
        in a row make us poll the others."""
        s = self.s
        cfg = s.config
        duration = now - self.window_started_ms
        # Enough to judge: C-instances that waited or started in the window.
        instances = max(0, self.window_index_start - self.window_ordered_start) + max(
            0, self.seen_index - self.window_index_start
        )
        judged = instances >= cfg.straggler_need_min and not self.window_first
        served = self.served
        required = (
            self.requirement(duration, self.window_need_start + self.started) if judged else 0.0
        )
        strike = judged and served * 100 < required * cfg.straggler_ratio_pct
        pace = served / duration
        wait = self.backlog_ms / served if served else math.inf
        poll_failed = bool(self.polling)
        self.polling = set()
        if poll_failed:
            # The others do not see a slow sequencer: this is its normal pace now.
            self.strikes = 0
            self.paces.clear()
            self.waits.clear()
            if judged and served:
                self.learn(pace, wait)
        elif strike:
            self.strikes += 1
        else:
            self.strikes = 0
            if judged and served and not self.degraded(pace, wait):
                self.learn(pace, wait)
        self.window_first = False
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
                wait_ms=round(wait, 1) if served else None,
            )
            msg = StragglerPoll(s.me, s.views.view)
            for p in s.prox.near:
                if p != s.views.sequencer:
                    s.out.send(p, msg)

    def degraded(self, pace: float, wait: float) -> bool:
        """Slower *and* longer-waiting than the reference (not by enough for a
        strike). Not learned: else a sequencer that slows by degrees, or an open
        load it still mostly serves, would drag the reference down with it. A
        window better in one respect is learned: load that rises raises the pace,
        load that falls shortens the wait."""
        return bool(self.paces) and pace < median(self.paces) and wait > median(self.waits)

    def learn(self, pace: float, wait: float) -> None:
        self.paces.append(pace)
        self.waits.append(wait)

    # ------------------------------------------------------------- the poll

    def handle_straggler_poll(self, m: StragglerPoll) -> None:
        s = self.s
        # Rate limit: a replica that took part in a straggler view change lately
        # says no, unless it is polling about the same slowness right now.
        agree = (
            self.strikes > 0
            and not s.views.is_sequencer
            and (
                bool(self.polling) or s.now_ms - self.last_ms >= s.config.straggler_min_interval_ms
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
        """Stop renewing the sequencer's lease; vote for others once it runs out;
        vote for it in no later view for a while (``Election.refuses``).

        Distrust never releases a lease we granted: only its expiry, or the
        holder's own hand-over, does.
        """
        views = self.s.views
        views.distrust = True
        if views.sequencer is not None and not views.is_sequencer:
            views.distrusted = views.sequencer
            views.distrusted_ms = self.s.now_ms

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
