"""Straggler detection's judgement (``sdpaxos.core.straggler``), on its own.

A non-sequencer's Straggler sees two counters move: ``next_c_index`` (own
C-instances started) and ``own_ordered`` (those the sequencer ordered). The
tests drive them tick by tick from a small model of the command leader's
clients, so each window's pace and wait are exactly what the test says:

* closed loop: ``backlog`` C-instances are always waiting (each one ordered is
  replaced at once by the client it answered), and the sequencer orders
  ``pace`` of them per tick;
* open loop: ``arrivals`` commands come per tick whatever happens and start
  C-instances while fewer than ``c_inflight_max`` are unordered (the rest wait
  in the proposal queue, as in the command leader), and the sequencer orders at
  most ``pace`` per tick.

Each C-instance carries ``batch`` commands (1 unless a test says otherwise): the
judgement counts commands. A strike shows as ``strikes``; three in a row as a
``StragglerPoll`` in the outbox.
"""

import random

from sdpaxos.core import ClusterConfig, Replica
from sdpaxos.core.clog import CInstance
from sdpaxos.core.messages import Heartbeat, StragglerPoll, StragglerVote, Vote, VRequest
from sdpaxos.core.straggler import Straggler
from sdpaxos.core.types import Command, ReplicaId, Slot, View
from tests.core.harness import Register
from tests.core.roles.conftest import Recorder, make_ctx

TICK_MS = 10.0


class Loop:
    """One command leader (replica 1; the sequencer is 0) and its Straggler."""

    def __init__(self) -> None:
        self.rec = Recorder()
        self.ctx = make_ctx(3, me=1, sequencer=0)
        self.straggler = Straggler(self.ctx, self.rec)
        self.now = 0.0
        self.started = 0.0
        self.ordered = 0.0
        self.queued = 0.0
        self.polls_at: list[float] = []
        #: Where each poll went.
        self.polled: list[list[int]] = []
        self.strike_windows = 0
        #: Commands in each C-instance started from now on.
        self.batch = 1

    def _tick(self) -> None:
        self.now += TICK_MS
        log = self.ctx.clog.logs[1]
        for i in range(self.rec.answers["next_c_index"], int(self.started)):
            log[i] = inst = CInstance()
            inst.commands = tuple(Command(1, i * 1000 + k, b"") for k in range(self.batch))
        self.rec.answers["next_c_index"] = int(self.started)
        self.ctx.own_ordered = int(self.ordered)
        before = self.straggler.strikes
        self.straggler.tick(self.now)
        if self.straggler.strikes > before:
            self.strike_windows += 1
        polled = [d for d, m in self.ctx.out.take().messages if isinstance(m, StragglerPoll)]
        if polled:
            self.polls_at.append(self.now)
            self.polled.append(polled)

    def closed(self, ms: float, backlog: float, pace: float, noise: random.Random | None = None):
        """``ms`` of a closed loop: ``backlog`` waiting, ``pace`` ordered per tick
        (each drawn within +-50 % / +-25 % per tick when ``noise`` is given)."""
        for _ in range(round(ms / TICK_MS)):
            p, b = pace, backlog
            if noise is not None:
                p *= noise.uniform(0.5, 1.5)
                b *= noise.uniform(0.75, 1.25)
            self.ordered += p
            self.started = self.ordered + b
            self._tick()

    def open(self, ms: float, arrivals: float, pace: float) -> None:
        """``ms`` of an open loop: ``arrivals`` a tick, at most ``pace`` ordered a tick."""
        inflight_max = self.ctx.config.c_inflight_max
        for _ in range(round(ms / TICK_MS)):
            self.queued += arrivals
            start = min(self.queued, self.ordered + inflight_max - self.started)
            self.started += start
            self.queued -= start
            self.ordered = min(self.started, self.ordered + pace)
            self._tick()


def test_a_sequencer_slowed_to_a_third_strikes_in_a_closed_loop() -> None:
    """The paper's count would never strike here (every window ordered more than
    half of what was waiting plus started); the pace and the wait do, from the
    first slowed window, and three strikes poll the others within 2 s."""
    loop = Loop()
    loop.closed(3_000, backlog=20, pace=10)  # healthy: 500 a window, 20 ms each
    assert loop.strike_windows == 0 and not loop.polls_at
    loop.closed(2_000, backlog=20, pace=10 / 3)  # slowed to a third
    # (The count rule: need = 20 waiting + ~167 started, ~167 ordered: far above half.)
    assert loop.polls_at, "a sequencer serving a third of its pace must be suspected"
    assert loop.polls_at[0] - 3_000 <= 2_000


def test_the_poll_goes_to_the_others_and_a_majority_starts_a_view_change() -> None:
    loop = Loop()
    loop.closed(3_000, backlog=20, pace=10)
    loop.closed(2_000, backlog=20, pace=10 / 3)
    assert loop.polled == [[2]]  # every peer but the sequencer
    loop.straggler.handle_straggler_vote(StragglerVote(2, 0, True))
    assert loop.ctx.views.distrust and [n for n in loop.rec.names() if n != "next_c_index"] == [
        "start_view_change"
    ]


def test_a_healthy_saturated_sequencer_never_strikes() -> None:
    """Two minutes of a noisy closed loop (pace +-50 %, backlog +-25 % per tick),
    then the load steps up (three times the clients at the same pace, saturated:
    the wait triples) and down (a third of the clients and of the pace: the wait
    stays): no strike. Each step alone meets one half of the strike condition."""
    loop = Loop()
    noise = random.Random(7)
    loop.closed(120_000, backlog=20, pace=10, noise=noise)
    loop.closed(10_000, backlog=60, pace=10, noise=noise)  # more clients, saturated
    loop.closed(10_000, backlog=20 / 3, pace=10 / 3, noise=noise)  # fewer clients
    assert loop.strike_windows == 0 and not loop.polls_at


def test_an_open_load_the_sequencer_cannot_serve_strikes_and_overload_does_not() -> None:
    """Open loop. A healthy sequencer at its capacity with more offered than it
    orders: the backlog grows, the pace holds; no strike. A sequencer slowed to a
    third of what is offered: strikes (the count rule and the pace rule both)."""
    healthy = Loop()
    healthy.open(2_000, arrivals=8, pace=10)
    healthy.open(10_000, arrivals=12, pace=10)  # overload: 2 a tick pile up
    assert healthy.strike_windows == 0
    slowed = Loop()
    slowed.open(2_000, arrivals=8, pace=10)
    slowed.open(2_000, arrivals=8, pace=8 / 3)
    assert slowed.polls_at and slowed.polls_at[0] - 2_000 <= 2_000


def test_bigger_batches_at_the_same_command_pace_are_not_a_slowdown() -> None:
    """Four times the clients at the same command throughput (saturated), their
    commands packed four to a C-instance (a busier node batches more): counted
    in C-instances that is a quarter of the pace at four times the wait, a
    slowdown; counted in commands, the pace holds. No strike."""
    loop = Loop()
    loop.closed(3_000, backlog=20, pace=10)
    loop.batch = 4
    loop.closed(5_000, backlog=20, pace=2.5)
    assert loop.strike_windows == 0


def test_a_sequencer_that_slows_by_degrees_is_not_absorbed_into_the_reference() -> None:
    """The pace falls a tenth per window while the wait grows: no window is a
    strike at first, but none is learned either, so the fall adds up to one."""
    loop = Loop()
    loop.closed(3_000, backlog=20, pace=10)
    pace = 10.0
    while not loop.polls_at and pace > 1:
        pace *= 0.9
        loop.closed(500, backlog=20, pace=pace)
    assert loop.polls_at and pace > 2.5  # caught before it slowed to a quarter


def test_a_failed_poll_takes_the_slow_pace_as_the_new_normal() -> None:
    """No majority by the next judgement: the poller stops asking, and the pace
    it judged slow becomes its reference (no poll again at that pace)."""
    loop = Loop()
    loop.closed(3_000, backlog=20, pace=10)
    loop.closed(2_000, backlog=20, pace=10 / 3)
    assert len(loop.polls_at) == 1
    loop.straggler.handle_straggler_vote(StragglerVote(2, 0, False))
    loop.closed(5_000, backlog=20, pace=10 / 3)
    assert len(loop.polls_at) == 1 and not loop.straggler.polling
    assert "start_view_change" not in loop.rec.names()


def test_the_rate_limit_holds_for_a_replica_that_agreed() -> None:
    """A replica that agreed to a straggler view change (while not polling itself)
    neither agrees again nor polls within ``straggler_min_interval_ms``."""
    loop = Loop()
    loop.closed(3_000, backlog=20, pace=10)
    loop.closed(1_000, backlog=20, pace=10 / 3)  # two strikes, not yet a poll
    assert loop.straggler.strikes > 0 and not loop.polls_at
    loop.straggler.handle_straggler_poll(StragglerPoll(2, 0))
    assert [m.agree for _, m in loop.ctx.out.take().messages] == [True]
    loop.straggler.handle_straggler_poll(StragglerPoll(2, 0))
    assert [m.agree for _, m in loop.ctx.out.take().messages] == [False]
    loop.closed(3_000, backlog=20, pace=10 / 3)  # more strikes, well within the interval
    assert loop.straggler.strikes >= 3 and not loop.polls_at


# ------------------------------------------- after the poll: no vote for the straggler
#
# The runtime straggler bench (sequencer R2 slowed to a tenth by SIGSTOP/SIGCONT)
# saw R1 poll, R0 agree, R1 start view 1, and then R2 win view 2 and stay the
# slow sequencer: R0's lease ran out first and it promised view 1; its C-accepts
# of view 1 reached R2, which ran for view 2 (``from_future_view``, no lease to
# wait for); R0 (frozen, so "no sequencer") and R1 (still following R2, which
# asked for its own next view) both voted for it at once. A replica that
# distrusted the sequencer now votes for it in no later view for
# ``lease_ms + candidate_timeout_ms``; its vote then waits (``DeferVote``).


def _votes(rep: Replica) -> list[tuple[int, Vote]]:
    return [(d, m) for d, m in rep.ready().messages if isinstance(m, Vote)]


def _follower_of_2(me: int) -> tuple[ClusterConfig, Replica]:
    """Replica ``me`` of 3, sequencer R2, holding a lease granted at 1000 ms."""
    cfg = ClusterConfig(replicas=3, sequencer=2)
    rep = Replica(cfg, me, Register())
    rep.tick(1000.0)
    rep.step(Heartbeat(2, 0, 0, 0, -1), 1000.0)
    rep.ready()
    return cfg, rep


def test_a_voter_that_agreed_the_sequencer_is_slow_does_not_elect_it_again() -> None:
    cfg, r0 = _follower_of_2(0)
    r0.straggler.strikes = 1  # its own last window was a strike
    r0.step(StragglerPoll(1, 0), 1010.0)
    assert [m for _, m in r0.ready().messages] == [StragglerVote(0, 0, True)]
    r0.step(VRequest(1, 1, 0), 1020.0)  # the poller runs; we hold R2's lease
    assert _votes(r0) == []
    now = 1000.0 + cfg.lease_ms + cfg.election_margin_ms
    r0.tick(now)
    assert [(d, m.view) for d, m in _votes(r0)] == [(1, 1)]
    # Our C-accepts of view 1 reach R2, which runs for view 2: no vote for it.
    r0.step(VRequest(2, 2, 0), now + 1)
    assert _votes(r0) == [] and r0.view == 1
    r0.tick(now + 2)
    assert _votes(r0) == []
    # R1 wins view 1 meanwhile in the bench; if nobody else does, R2 still gets
    # our vote once the refusal has run out (it only delays the vote).
    end = now + cfg.lease_ms + cfg.candidate_timeout_ms
    r0.tick(end - 1)
    assert _votes(r0) == []
    r0.tick(end + 1)
    assert [(d, m.view) for d, m in _votes(r0)] == [(2, 2)]


def test_the_poller_does_not_vote_for_the_sequencer_it_is_deposing() -> None:
    """The poller still follows R2 while it runs for view 1, and a request from
    one's own sequencer needs no expired lease: it was granted at once."""
    _, r1 = _follower_of_2(1)
    r1.straggler.polling = {1}
    r1.step(StragglerVote(0, 0, True), 1010.0)  # a majority agrees
    sent = [m for _, m in r1.ready().messages]
    assert VRequest(1, 1, 0) in sent and r1.election.candidate is not None
    r1.step(VRequest(2, 2, 0), 1020.0)
    assert _votes(r1) == [] and r1.view == 0 and r1.election.candidate is not None


def test_the_refusal_ends_when_a_view_is_established() -> None:
    """Establishing any view ends the episode: a new view, a new judgement."""
    _, r0 = _follower_of_2(0)
    r0.straggler.strikes = 1
    r0.step(StragglerPoll(1, 0), 1010.0)
    assert r0.ctx.views.distrusted == 2 and r0.election.refuses(ReplicaId(2))
    r0.ctx.views.establish(View(1), ReplicaId(1), Slot(0), Slot(0))
    assert r0.ctx.views.distrusted is None and not r0.election.refuses(ReplicaId(2))


def test_with_five_replicas_those_who_said_no_cannot_re_elect_the_straggler() -> None:
    """The poll needs a majority of agreers, the poller included, and each of
    them refuses the old sequencer; the rest are fewer than a majority, even
    with the old sequencer's own vote (``docs/recovery.md`` section 7)."""
    cfg = ClusterConfig(replicas=5, sequencer=4)
    reps = {}
    for me in range(4):
        rep = Replica(cfg, me, Register())
        rep.tick(1000.0)
        rep.step(Heartbeat(4, 0, 0, 0, -1), 1000.0)
        rep.ready()
        reps[me] = rep
    reps[0].straggler.strikes = reps[2].straggler.strikes = 1  # R3's window was fine
    reps[1].straggler.polling = {1}
    answers = []
    for me in (0, 2, 3):
        reps[me].step(StragglerPoll(1, 0), 1010.0)
        answers += [m for _, m in reps[me].ready().messages]
    no = StragglerVote(3, 0, False)
    assert answers == [StragglerVote(0, 0, True), StragglerVote(2, 0, True), no]
    for vote in answers:
        reps[1].step(vote, 1011.0)
    assert VRequest(1, 1, 0) in [m for _, m in reps[1].ready().messages]
    # R4 runs for the view above, at every replica, while they still hold its lease.
    voters = []
    for me, rep in reps.items():
        rep.step(VRequest(4, 2, 0), 1020.0)
        voters += [me for d, m in _votes(rep) if d == 4]
    assert voters == [3]
    assert len(voters) + 1 < cfg.replicas // 2 + 1  # with its own: no majority
