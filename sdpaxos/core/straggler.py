"""Straggler detection and hand-over of the sequencer role (paper section 4).

Every ``straggler_window_ms`` a non-sequencer compares what the sequencer
ordered for it with what it needed; ``straggler_strikes`` windows below
``straggler_ratio_pct`` make it poll the others. A majority that agrees
distrusts the sequencer (no more lease renewals, votes for others once the lease
lapses) and starts a view change. A sequencer can also hand its role over on
purpose (:meth:`Straggler.transfer_sequencer`).
"""

import math

from sdpaxos.core.context import Context
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.messages import SequencerHandover, StragglerPoll, StragglerVote
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.types import ReplicaId


class Straggler:
    """The window counts, the poll in progress, and the rate limit."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        self.strikes = 0
        self.polling: set[ReplicaId] = set()
        self.last_ms = -math.inf
        self.window_started_ms = 0.0
        self.window_index_start = 0
        self.window_ordered_start = 0
        self.window_need_start = 0

    def tick(self, now: float) -> None:
        s = self.s
        if now - self.window_started_ms >= s.config.straggler_window_ms:
            self.window_started_ms = now
            if not s.views.is_sequencer and s.views.sequencer is not None:
                self.judge_sequencer_speed()

    def judge_sequencer_speed(self) -> None:
        """Count what the sequencer ordered for us per window; three windows below
        half of what we needed make us poll the others."""
        s = self.s
        cfg = s.config
        next_index = self.r.next_c_index()
        ordered = s.own_ordered
        need = self.window_need_start + (next_index - self.window_index_start)
        got = ordered - self.window_ordered_start
        if need >= cfg.straggler_need_min and got * 100 < need * cfg.straggler_ratio_pct:
            self.strikes += 1
        else:
            self.strikes = 0
        self.window_index_start = next_index
        self.window_ordered_start = ordered
        self.window_need_start = max(0, next_index - ordered)
        if self.strikes >= cfg.straggler_strikes and not self.polling:
            self.polling = {s.me}
            s.out.trace("StragglerSuspect", view=s.views.view, sequencer=s.views.sequencer)
            msg = StragglerPoll(s.me, s.views.view)
            for p in s.prox.near:
                if p != s.views.sequencer:
                    s.out.send(p, msg)

    def handle_straggler_poll(self, m: StragglerPoll) -> None:
        s = self.s
        agree = self.strikes > 0 and not s.views.is_sequencer
        if agree:
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
