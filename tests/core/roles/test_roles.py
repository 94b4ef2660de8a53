"""Each role on its own: a real Context, the Recorder standing in for every other role."""

import pytest

from sdpaxos.core.acceptor import Acceptor
from sdpaxos.core.clog import CLog
from sdpaxos.core.command_leader import CommandLeader
from sdpaxos.core.election import Election
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.executor import Executor
from sdpaxos.core.learner import Learner
from sdpaxos.core.messages import (
    CAccept,
    CAck,
    CPrepare,
    CRequest,
    LeaseGrant,
    OAccept,
    RReplyBatch,
    RRequest,
    RRequestBatch,
    StragglerVote,
    Vote,
    VRequest,
)
from sdpaxos.core.olog import OLog
from sdpaxos.core.reads import Reads
from sdpaxos.core.recovery import Recovery
from sdpaxos.core.restore import replay
from sdpaxos.core.sequencer import Sequencer
from sdpaxos.core.storage import CAccepted, OAccepted, ViewEstablished, ViewPromised
from sdpaxos.core.straggler import Straggler
from sdpaxos.core.types import Command, ReplicaId, Slot, View
from sdpaxos.core.views import ViewPhase
from tests.core.roles.conftest import Recorder, committed_instance, make_ctx


def kinds(ctx) -> list[tuple[int, str]]:
    return [(dst, type(m).__name__) for dst, m in ctx.out.messages]


def test_command_leader_batches_and_sends_c_accepts_to_its_thrifty_quorum(rec: Recorder) -> None:
    ctx = make_ctx(3, me=1, sequencer=0)
    leader = CommandLeader(ctx, rec)
    leader.proposals.extend([Command(1, 1, b"a", b"k"), Command(2, 1, b"b")])
    leader.start_c_instances()
    assert ctx.out.persisted == [CAccepted(1, 0, leader.own_ballot, leader.inflight[0])]
    assert kinds(ctx) == [(p, "CAccept") for p in ctx.prox.c_quorum] + (
        [] if 0 in ctx.prox.c_quorum else [(0, "CRequest")]
    )
    assert leader.next_index == 1 and list(leader.inflight) == [0]
    assert rec.calls == []  # not the sequencer: nothing to order itself


def test_command_leader_at_the_sequencer_orders_its_own_instance(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    leader = CommandLeader(ctx, rec)
    command = Command(1, 1, b"a", b"k")
    leader.proposals.append(command)
    leader.start_c_instances()
    assert rec.calls == [("order_c_instance", (0, 0, (command,)))]


def test_command_leader_commits_on_a_majority_and_reports_a_recovered_instance(
    rec: Recorder,
) -> None:
    ctx = make_ctx(3, me=1, sequencer=0)
    leader = CommandLeader(ctx, rec)
    leader.proposals.append(Command(1, 1, b"a"))
    leader.start_c_instances()
    ctx.out.take()
    leader.handle_c_ack(CAck(2, 0, 1, 0, leader.own_ballot))
    assert ctx.clog.get(1, 0).committed and ctx.progress.dirty
    assert {type(m).__name__ for _, m in ctx.out.messages} == {"CCommit"}
    inst = ctx.clog.entry(2, 0)  # one we recover for replica 2
    inst.ballot, inst.acks = 257, {1}
    leader.handle_c_ack(CAck(0, 0, 2, 0, 257))
    assert rec.names() == ["recovered_c_chosen"]


def test_acceptor_accepts_acknowledges_and_refuses_a_stale_ballot(rec: Recorder) -> None:
    ctx = make_ctx(3, me=2, sequencer=0)
    acceptor = Acceptor(ctx, rec)
    acceptor.handle_c_accept(CAccept(1, 0, 1, 0, 257, (Command(1, 1, b"x"),)))
    assert ctx.out.persisted == [CAccepted(1, 0, 257, (Command(1, 1, b"x"),))]
    assert kinds(ctx) == [(1, "CAck")] and ctx.clog.c_max[1] == 0
    ctx.out.take()
    acceptor.handle_c_accept(CAccept(1, 0, 1, 0, 1, (Command(1, 1, b"old"),)))
    assert not ctx.out.persisted and not ctx.out.messages


def test_acceptor_buffers_an_o_accept_beyond_a_gap(rec: Recorder) -> None:
    ctx = make_ctx(3, me=1, sequencer=0)
    acceptor = Acceptor(ctx, rec)
    acceptor.handle_o_accept(OAccept(0, 0, 2, ((2, 1),), 0, False))
    assert ctx.olog.acc_upto == 0 and 2 in ctx.olog.pending and not ctx.out.persisted
    acceptor.handle_o_accept(OAccept(0, 0, 0, ((2, 1), (1, 1)), 0, False))
    assert ctx.olog.acc_upto == 3
    assert [r.start for r in ctx.out.persisted if isinstance(r, OAccepted)] == [0, 2]


def test_sequencer_allocation_guard_never_over_allocates(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    seq = Sequencer(ctx, rec)
    for _ in range(3):  # duplicated and reordered C-requests and C-accepts for R1's 0..1
        seq.handle_c_request(CRequest(1, 0, 1, 1, 0, ()))
        seq.order(1, 0, None)  # what a C-accept from R1 says
        seq.order(1, 1, None)
        seq.allocate()
    assert sum(c for o, c in zip(ctx.olog.owner, ctx.olog.count, strict=True) if o == 1) == 2
    assert seq.covered[1] == 2
    assert "OAccept" in {type(m).__name__ for _, m in ctx.out.messages}


def test_sequencer_history_table_answers_reads_by_key(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0, history_idle_ms=None)  # the table kept throughout
    seq = Sequencer(ctx, rec)
    seq.order(1, 0, (b"a",))
    seq.order(2, 0, (b"b",))
    seq.allocate()
    assert seq.read_slot(b"a") == 0 and seq.read_slot(b"b") == 1 and seq.read_slot(b"z") == -1


def test_sequencer_answers_a_batch_of_keys_as_it_answers_each(rec: Recorder) -> None:
    """``read_slots`` (one pass, for R-request batches) is ``read_slot`` of each key:
    the history table where it is above the floor, the floor otherwise, and a read
    of no named key (``b""``) waits for the whole log (i_G)."""
    ctx = make_ctx(3, me=0, sequencer=0, history_idle_ms=None)
    seq = Sequencer(ctx, rec)
    seq.order(1, 0, (b"a",))
    seq.order(2, 0, (b"b",))
    seq.allocate()
    keys = (b"a", b"b", b"z", b"")
    assert seq.read_slots(keys) == (0, 1, -1, 1)
    seq.history_floor = 0  # e.g. a write of unknown objects at slot 0
    assert seq.read_slots(keys) == (0, 1, 0, 1)
    assert seq.read_slots(keys) == tuple(seq.read_slot(k) for k in keys)


def test_sequencer_history_table_evicts_the_least_recently_written_keys_in_chunks(
    rec: Recorder,
) -> None:
    """Past ``history_keys_max`` the oldest keys go, ``limit // 8`` more than needed
    in one pass; a forgotten key is read at the floor (the latest slot forgotten),
    a key written again since stays exact, and the table never outgrows the limit."""
    ctx = make_ctx(3, me=0, sequencer=0, history_keys_max=16, history_idle_ms=None)
    seq = Sequencer(ctx, rec)
    for i in range(16):  # one O-instance each: key k<i> at slot i
        seq.order(1, i, (b"k%d" % i,))
        seq.allocate()
    assert len(seq.history) == 16 and seq.history_floor == -1
    seq.order(1, 16, (b"k0",))  # rewritten: now the most recent
    seq.allocate()
    seq.order(1, 17, (b"new",))
    seq.allocate()
    slot_k0 = seq.read_slot(b"k0")
    # 17 keys > 16: evict 1 + 16 // 8 = 3, the least recently written: k1, k2, k3.
    assert len(seq.history) == 14
    assert seq.history_floor == 3 == seq.read_slot(b"k3") == seq.read_slot(b"k1")
    assert seq.read_slot(b"k4") == 4 and seq.read_slot(b"k4") > seq.history_floor
    assert seq.read_slot(b"k0") == slot_k0 > seq.history_floor
    assert seq.read_slot(b"never") == seq.history_floor
    for i in range(100):
        seq.order(2, i, (b"x%d" % i,))
        seq.allocate()
        assert len(seq.history) <= 16


def test_learner_commits_own_o_instances_in_the_majority_prefix(rec: Recorder) -> None:
    ctx = make_ctx(3, me=1, sequencer=0)
    learner = Learner(ctx, rec)
    ctx.olog.grow(2)
    ctx.olog.owner[:2], ctx.olog.count[:2], ctx.olog.ballot[:2] = [1, 2], [1, 1], [0, 0]
    ctx.olog.acked = [2, 2, -1]
    learner.advance_safe_prefix()
    assert learner.safe_upto == 2 and ctx.own_ordered == 1
    assert [tuple(e) for e in learner.commit_out] == [(0, 0, 1, 1)]
    assert rec.calls == [("quorum_accepted", (2,)), ("own_ordered", (0, 1))]


def test_executor_runs_slots_in_order_once_per_session(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    applied: list[bytes] = []

    class App:
        def apply(self, payload: bytes) -> bytes:
            applied.append(payload)
            return payload

    executor = Executor(ctx, App(), set(), observe=False)
    ctx.olog.grow(3)
    ctx.olog.owner[:3], ctx.olog.count[:3] = [1, 2, 1], [1, 1, 1]
    ctx.olog.committed[:3] = [True, True, True]
    ctx.clog.logs[1][0] = committed_instance((Command(7, 1, b"a"),))
    ctx.clog.logs[2][0] = committed_instance((Command(7, 1, b"a"),))  # a retry elsewhere
    executor.execute()
    assert applied == [b"a"] and ctx.progress.slot == 2 and ctx.progress.blocked == (1, 1)


def test_election_defers_a_vote_under_its_lease_then_votes(rec: Recorder) -> None:
    ctx = make_ctx(3, me=2, sequencer=0)
    election = Election(ctx, rec)
    election.lease_until_ms = 500.0
    election.handle_v_request(VRequest(1, 1, 0))
    assert election.deferred_vote is not None and not ctx.out.messages
    cfg = ctx.config
    # Past the lease and the margin, before this replica would run itself (its stagger).
    ctx.now_ms = cfg.lease_ms + cfg.election_margin_ms + 1
    assert cfg.successor_stagger_ms > 1
    election.tick(ctx.now_ms)
    assert ctx.out.persisted == [ViewPromised(1)]
    assert kinds(ctx) == [(1, "Vote")]
    assert ctx.views.sequencer is None and ctx.views.view == 1
    queries = {"oldest_unordered_started_ms"}
    assert [n for n in rec.names() if n not in queries] == [
        "left_view",
        "reset_learner",
        "resync_toward",
    ]


def test_recovery_prepares_with_a_ballot_above_the_owners(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    recovery = Recovery(ctx, rec)
    ctx.olog.grow(1)
    ctx.olog.owner[0], ctx.olog.count[0], ctx.olog.committed[0] = 1, 1, True
    assert recovery.maybe_start(1, 0)
    prepare = [m for _, m in ctx.out.messages if isinstance(m, CPrepare)]
    assert prepare and prepare[0].ballot >= 256  # round >= 1 outranks the owner's round 0
    assert rec.names() == ["promise_c"] and 1 in recovery.runs


def test_reads_ask_the_sequencer_then_wait_for_the_slot(rec: Recorder) -> None:
    ctx = make_ctx(3, me=1, sequencer=0)
    reads = Reads(ctx, rec)
    reads.read(7, b"k")
    assert kinds(ctx) == []  # asked at the next ready(), with the turn's other reads
    reads.flush()
    assert kinds(ctx) == [(0, "RRequestBatch")]
    [(_, request)] = ctx.out.messages
    assert isinstance(request, RRequestBatch) and request.keys == (b"k",)
    reads.handle_r_reply_batch(RReplyBatch(0, 0, request.read_ids, (3,), (True,)))
    assert reads.pending[7] == 3
    reads.serve()
    assert not ctx.out.reads  # slot 3 not executed yet
    ctx.progress.slot = 4
    reads.serve()
    assert [(r.read_id, r.ok) for r in ctx.out.reads] == [(7, True)]


def test_reads_at_the_sequencer_answer_from_its_history(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    reads = Reads(ctx, rec)
    reads.handle_r_request(RRequest(1, 0, 9, b"k"))
    assert [(d, type(m).__name__, m.slot, m.ok) for d, m in ctx.out.messages] == [
        (1, "RReply", 4, True)
    ]
    with pytest.raises(LocalProtocolError):
        reads.read(3, b"k")
        reads.read(3, b"k")


def test_straggler_majority_starts_a_view_change(rec: Recorder) -> None:
    ctx = make_ctx(3, me=1, sequencer=0)
    straggler = Straggler(ctx, rec)
    straggler.polling = {1}
    straggler.handle_straggler_vote(StragglerVote(2, 0, True))
    assert ctx.views.distrust and rec.names() == ["start_view_change"]
    with pytest.raises(LocalProtocolError):
        straggler.transfer_sequencer(2)  # not the sequencer


def test_restore_replays_records_and_never_reuses_an_index() -> None:
    clog, olog = CLog(3), OLog(3)
    records = [
        CAccepted(1, 4, 1, (Command(1, 1, b"x"),)),
        OAccepted(2, 0, ((1, 1),)),
        ViewPromised(3),
    ]
    replayed = replay(records, me=1, own_ballot=1, sequencer=0, clog=clog, olog=olog)
    assert replayed.next_index == 5 and replayed.promised == 3
    assert clog.c_max[1] == 4 and olog.owner == [1] and olog.ballot == [2]


def test_election_establishes_a_range_whole(rec: Recorder) -> None:
    ctx = make_ctx(3, me=2, sequencer=0)
    election = Election(ctx, rec)
    election.establish(View(1), ReplicaId(1), Slot(0), ((0, 1), (2, 1)))
    assert ctx.out.persisted == [ViewEstablished(1, 1, 0, ((0, 1), (2, 1)))]
    assert ctx.views.view == 1 and ctx.views.sequencer == 1 and ctx.olog.acc_upto == 2
    assert ctx.views.phase is ViewPhase.FOLLOWING and not ctx.views.range_committed
    assert 0 in ctx.prox.suspected  # the old sequencer
    assert rec.names() == ["left_view", "followed", "reset_learner", "resync_later"]


def test_election_wins_with_a_majority_once_its_own_lease_expired(rec: Recorder) -> None:
    ctx = make_ctx(3, me=1, sequencer=0)
    election = Election(ctx, rec)
    election.lease_until_ms = 100.0
    election.start_view_change()
    election.handle_vote(
        Vote(
            ReplicaId(2),
            View(1),
            Slot(0),
            (),
            (-1, -1, -1),
            View(0),
            ReplicaId(0),
            Slot(0),
            Slot(0),
        )
    )
    assert ctx.views.is_sequencer is False  # our own lease grant still holds
    ctx.now_ms = 100.0
    election.maybe_win()
    assert ctx.views.is_sequencer and ctx.views.view == 1
    assert [type(r).__name__ for r in ctx.out.persisted] == ["ViewPromised", "ViewEstablished"]
    assert "won" in rec.names() and "send_heartbeats" in rec.names()


def test_sequencer_lease_needs_a_majority_of_grants(rec: Recorder) -> None:
    ctx = make_ctx(5, me=0, sequencer=0)
    seq = Sequencer(ctx, rec)
    seq.send_heartbeats()
    stamp = seq.hb_stamp
    seq.handle_lease_grant(LeaseGrant(ReplicaId(1), View(0), stamp))
    assert not seq.has_lease()  # two of five
    seq.handle_lease_grant(LeaseGrant(ReplicaId(2), View(0), stamp))
    assert seq.has_lease()
    ctx.now_ms = ctx.config.lease_hold_ms
    assert not seq.has_lease()  # expired on our own clock


def test_learner_n5_two_acceptor_rule_waits_for_the_range(rec: Recorder) -> None:
    ctx = make_ctx(5, me=2, sequencer=0)
    learner = Learner(ctx, rec)
    ctx.olog.grow(1)
    ctx.olog.owner[0], ctx.olog.count[0], ctx.olog.ballot[0] = ReplicaId(2), 1, View(0)
    ctx.olog.acc_upto = Slot(1)
    ctx.olog.acked = [Slot(1), Slot(-1), Slot(1), Slot(-1), Slot(-1)]  # us and the sequencer
    ctx.views.range_committed = False
    learner.advance_safe_prefix()
    assert learner.safe_upto == 0  # the view's range is not known chosen
    ctx.views.range_committed = True
    learner.advance_safe_prefix()
    assert learner.safe_upto == 1 and ctx.own_ordered == 1


# ------------------------------------------- rules that moved out of the facade


def test_learner_asks_once_learn_ms_passed_since_execution_moved_and_since_it_asked(
    rec: Recorder,
) -> None:
    ctx = make_ctx(3, me=1, sequencer=0)
    learner = Learner(ctx, rec)
    learn_ms = ctx.config.learn_ms
    ctx.olog.heard_upto = Slot(3)  # heard of slots not executed: stalled
    ctx.progress.moved_ms = 100.0
    ctx.now_ms = 100.0 + learn_ms - 1
    learner.tick(ctx.now_ms)
    assert kinds(ctx) == []  # execution moved less than learn_ms ago
    ctx.now_ms = 100.0 + learn_ms
    learner.tick(ctx.now_ms)
    assert sorted(kinds(ctx)) == [(0, "LearnRequest"), (2, "LearnRequest")]
    assert learner.asked_ms == ctx.now_ms
    ctx.out.messages.clear()
    ctx.now_ms += learn_ms - 1
    learner.tick(ctx.now_ms)
    assert kinds(ctx) == []  # asked less than learn_ms ago
    rec.answers["fetching_snapshot"] = True
    ctx.now_ms += 1
    learner.tick(ctx.now_ms)
    assert kinds(ctx) == []  # a snapshot is on its way: peers would answer with it


def test_recovery_starts_on_what_execution_is_blocked_on_then_waits_recover_ms(
    rec: Recorder,
) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    recovery = Recovery(ctx, rec)
    ctx.olog.grow(1)
    ctx.olog.owner[0], ctx.olog.count[0], ctx.olog.committed[0] = 1, 1, True
    ctx.progress.blocked, ctx.progress.blocked_ms = (ReplicaId(1), 0), 50.0
    recover_ms = ctx.config.recover_ms

    def tick_at(now: float) -> None:
        ctx.now_ms = now  # (the facade advances the clock, then ticks)
        recovery.tick(now)

    tick_at(50.0 + recover_ms - 1)
    assert recovery.runs == {}  # blocked for less than recover_ms
    tick_at(50.0 + recover_ms)
    assert 1 in recovery.runs and recovery.started_ms == 50.0 + recover_ms
    del recovery.runs[1]  # (as if it ended without a commit)
    tick_at(50.0 + 2 * recover_ms - 1)
    assert recovery.runs == {}  # started less than recover_ms ago
    tick_at(50.0 + 2 * recover_ms)
    assert 1 in recovery.runs


def test_a_compaction_stops_what_ran_below_it(rec: Recorder) -> None:
    """Recoveries and a candidacy that start below a snapshot stop; the command
    leader answers its own instances there, or proposes them again."""
    ctx = make_ctx(3, me=1, sequencer=0)
    recovery = Recovery(ctx, rec)
    ctx.olog.grow(1)
    ctx.olog.owner[0], ctx.olog.count[0], ctx.olog.committed[0] = 0, 2, True
    assert recovery.maybe_start(ReplicaId(0), 0)
    recovery.forget_below((0, 0, 0))
    assert list(recovery.runs) == [0]  # nothing of 0's compacted: it goes on
    recovery.forget_below((1, 0, 0))
    assert recovery.runs == {}
    election = Election(ctx, rec)
    election.start_view_change()
    assert election.running_for_view()
    election.compacted(Slot(0))
    assert election.running_for_view()  # it reports from slot 0: nothing below
    election.compacted(Slot(1))
    assert not election.running_for_view()
    leader = CommandLeader(ctx, rec)
    leader.proposals.extend([Command(7, 1, b"a"), Command(8, 1, b"b")])
    leader.start_c_instances()
    ctx.clog.logs[1][0].commands = ()  # a recoverer chose a no-op for it
    leader.forget_below((0, 1, 0))
    assert list(leader.proposals) == [Command(7, 1, b"a"), Command(8, 1, b"b")]
    assert leader.inflight == {} and leader.next_index == 1
