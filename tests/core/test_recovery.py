"""Recovery: the view change, C-instance recovery, restart, fencing and the lease.

Scenario tests drive the explicit-delivery harness with crashes and partitions;
the rebuild rule (paper Fig. 7) is also tested on its own.
"""

import pytest

from sdpaxos.core import CAccept, ClusterConfig, Command, Replica, Wait
from sdpaxos.core.messages import CCommit, Heartbeat, LearnRequest, Vote, VRequest
from sdpaxos.core.storage import ViewPromised
from sdpaxos.core.types import NO_CL_VALUE
from sdpaxos.core.view_change import VoteState, rebuild_assignment_log
from tests.core.harness import PAPER3_RTT_MS, PAPER5_RTT_MS, Net, Register

# ------------------------------------------------------------------ the rebuild rule


def vote(
    entries: list[tuple[int, int, int, int]],
    c_max: tuple[int, ...],
    est: tuple[int, int, int] = (0, 0, 0),
) -> VoteState:
    """A vote whose voter established view ``est = (view, sequencer, base)``."""
    return VoteState(tuple(entries), c_max, *est)


def rebuild(
    replicas: int, votes: dict[int, VoteState], o_from: int = 0, covered: list[int] | None = None
) -> list[tuple[int, int]]:
    out = rebuild_assignment_log(
        replicas=replicas,
        o_from=o_from,
        votes=votes,
        covered_before=covered if covered is not None else [0] * replicas,
    )
    assert out.alarms == 0
    return out.values


def test_rebuild_fills_holes_with_no_cl() -> None:
    """Section 3.3, N = 3: a hole below the last traced value becomes no-cl."""
    votes = {1: vote([(0, 0, 2, 1), (2, 0, 1, 1)], (-1, 0, 0)), 2: vote([], (-1, 0, 0))}
    assert rebuild(3, votes) == [(2, 1), NO_CL_VALUE, (1, 1)]


def test_rebuild_takes_the_highest_ballot_and_drops_what_the_newest_view_superseded() -> None:
    """Section 3.3: "picks the value with the highest ballot". Voter 2 established view 1,
    whose range ended at slot 1: an older value beyond it (voter 1's slot 2, view 0)
    was superseded by view 1's re-proposal and must not come back."""
    votes = {
        1: vote([(0, 0, 2, 1), (2, 0, 1, 1)], (-1, 0, 0)),
        2: vote([(0, 1, 1, 1)], (-1, 0, 0), est=(1, 1, 1)),
    }
    assert rebuild(3, votes) == [(1, 1)]


def test_rebuild_takes_the_old_sequencer_from_the_newest_established_view() -> None:
    """The inference is for the replica that is neither a voter nor the sequencer of the
    newest view a voter *established* (accepted the range of), whatever the voters
    promised later. Here view 1 (sequencer R1) is the newest established: R1 is the old
    sequencer, and R0 is inferred."""
    c_max = (0, -1, -1, -1, -1)
    votes = {
        2: vote([], c_max, est=(1, 1, 0)),
        3: vote([], c_max),
        4: vote([], c_max),
    }
    out = rebuild_assignment_log(replicas=5, o_from=0, votes=votes, covered_before=[0] * 5)
    assert (out.old_sequencer, out.inferred) == (1, 0)
    assert out.values == [(0, 1)]


def test_rebuild_infers_the_untraceable_replica_from_the_first_hole() -> None:
    """Section 3.3, Fig. 6 (N = 5): R0 (old sequencer) and R1 fail. The voters trace
    R0's slot (through R2), R2's and R3's; R1's O-instance, accepted only by R1 and
    R0, is the hole after them: "retries for R1 in the hole"."""
    c_max = (0, 0, 0, 0, -1)
    votes = {
        2: vote([(0, 0, 0, 1), (1, 0, 2, 1), (2, 0, 3, 1)], c_max),
        3: vote([(0, 0, 0, 1), (1, 0, 2, 1), (2, 0, 3, 1)], c_max),
        4: vote([], c_max),
    }
    assert rebuild(5, votes) == [(0, 1), (2, 1), (3, 1), (1, 1)]


def test_rebuild_inference_gives_the_untraceable_replica_consecutive_slots_up_to_c_max() -> None:
    """Everything from the first hole on is R_m's: its C-instances 0 .. C[m] take
    consecutive slots there (each at or before where it may have been ready), and
    nothing beyond C[m] (which no voter accepted, so never chosen)."""
    votes = {
        2: vote([(0, 0, 2, 1), (2, 0, 1, 1)], (-1, 2, 0, -1, -1)),  # R1's slot 2: an O-commit
        3: vote([], (-1, 1, 0, -1, -1)),
        4: vote([], (-1, -1, -1, -1, -1)),
    }
    assert rebuild(5, votes) == [(2, 1), (1, 1), (1, 1), (1, 1)]


def test_rebuild_inference_appends_when_there_is_no_hole() -> None:
    """An accepted but untraced C-instance of R_m, with no hole left, goes after the log."""
    votes = {
        2: vote([(0, 0, 2, 1)], (-1, 1, 0, -1, -1)),
        3: vote([], (-1, 1, -1, -1, -1)),
        4: vote([], (-1, -1, -1, -1, -1)),
    }
    # R1's C-instance 0 is covered below o_from; C-instance 1 needs a slot.
    assert rebuild(5, votes, o_from=0, covered=[0, 1, 0, 0, 0]) == [(2, 1), (1, 1)]


def test_rebuild_needs_no_inference_when_the_old_sequencer_voted() -> None:
    votes = {
        0: vote([(0, 0, 1, 1), (2, 0, 3, 1)], (-1, 0, -1, 0, -1)),
        2: vote([], (-1, 0, -1, 0, -1)),
        4: vote([], (-1, 0, -1, 0, -1)),
    }
    assert rebuild(5, votes) == [(1, 1), NO_CL_VALUE, (3, 1)]


def test_rebuild_counts_an_alarm_for_a_traced_value_of_another_replica_beyond_a_hole() -> None:
    """Acceptance is contiguous, so a voter's own slot after a hole is impossible: the
    rebuild reports it instead of silently building on it."""
    c_max = (0, 0, 0, 0, -1)
    votes = {2: vote([(0, 0, 0, 1), (2, 0, 2, 1)], c_max), 3: vote([], c_max), 4: vote([], c_max)}
    out = rebuild_assignment_log(replicas=5, o_from=0, votes=votes, covered_before=[0] * 5)
    assert out.alarms == 1


# -------------------------------------------------------------- sequencer failover


def run_commands(net: Net, leaders: list[int], client_base: int, ticks: int = 400) -> None:
    for k, r in enumerate(leaders):
        net.propose(r, client_base + k, 1, b"c%d" % (client_base + k))
    net.run(ticks)


def assert_agree(net: Net) -> list[tuple[int, int]]:
    live = [r for r in range(len(net.replicas)) if r not in net.down]
    first = net.executed_ids(live[0])
    for r in live:
        assert net.executed_ids(r) == first, f"replica {r} diverges"
    return first


def test_n3_sequencer_crash_elects_the_successor_and_service_resumes() -> None:
    """Section 3.3: a failed sequencer is replaced by a view change (R_{n+1} by default)."""
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    run_commands(net, [0, 1, 2], 10, ticks=5)
    net.crash(0)
    run_commands(net, [1, 2], 20, ticks=300)
    assert net.replicas[1].sequencer == 1 and net.replicas[1].view >= 1
    assert net.replicas[2].sequencer == 1
    executed = assert_agree(net)
    for c in (10, 11, 12, 20, 21):
        assert (c, 1) in executed
    assert net.replicas[1].stats.views_won == 1


def test_n5_sequencer_and_a_leader_crash_together_and_ready_commands_survive() -> None:
    """Section 3.3 (N = 5): the old sequencer and R_m fail at once; R_m's ready command
    keeps its place because the new sequencer infers R_m's O-instances."""
    net = Net.build(5, sequencer=0, rtt_ms=PAPER5_RTT_MS)
    # R3 (IRE) commits a command; only it and the sequencer accept its O-instance.
    net.propose(3, 30, 1, b"ire")
    net.deliver_all(keep=lambda s, d, m: type(m).__name__ != "OCommit" or s != 3)
    assert net.ready_ids(3) == [(30, 1)]
    # A later command of R1 is ready after it (real-time order must hold).
    net.propose(1, 10, 1, b"or")
    net.deliver_all(keep=lambda s, d, m: type(m).__name__ != "OCommit" or s != 3)
    assert net.ready_ids(1) == [(10, 1)]
    net.crash(0)
    net.crash(3)
    net.run(400)
    executed = assert_agree(net)
    assert executed[:2] == [(30, 1), (10, 1)], executed
    new_seq = net.replicas[1].sequencer
    assert new_seq is not None and new_seq != 0


def test_old_view_c_accepts_are_fenced_after_a_view_change() -> None:
    """Pitfall 5 / appendix A.7: after voting, old-view C-accepts are rejected."""
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    net.crash(0)
    net.run(200)
    rep = net.replicas[2]
    assert rep.view >= 1
    stale_before = rep.stats.stale
    rep.step(CAccept(0, 0, 0, 5, 0, (Command(9, 1, b"old"),)), net.now_ms)
    assert rep.stats.stale == stale_before + 1
    assert 5 not in rep.ctx.clog.logs[0]


def test_voter_defers_its_vote_while_its_lease_runs() -> None:
    """Section 3.5: a replica that granted a lease never votes for another replica before
    the lease expires; it votes once it has."""
    cfg = ClusterConfig(replicas=3, sequencer=0)
    rep = Replica(cfg, 2, Register())
    rep.tick(1000.0)
    rep.step(Heartbeat(0, 0, 0, 0, -1), 1000.0)
    rep.ready()
    rep.step(VRequest(1, 1, 0), 1000.0)
    assert rep.view == 0 and not [m for _, m in rep.ready().messages]
    # It votes once its lease has run out and it has itself missed the heartbeats.
    wait_ms = cfg.lease_ms + cfg.election_margin_ms
    rep.tick(1000.0 + wait_ms - 0.5)
    assert rep.view == 0
    rep.tick(1000.0 + wait_ms)
    rd = rep.ready()
    assert rep.view == 1
    assert [type(m).__name__ for _, m in rd.messages] == ["Vote"]
    assert ViewPromised(1) in rd.persist


def test_a_heartbeat_cancels_a_deferred_vote() -> None:
    """A V-request deferred under our lease is void once the sequencer is heard again:
    if the sequencer later falls silent, that stale request must not get our vote."""
    cfg = ClusterConfig(replicas=3, sequencer=0)
    rep = Replica(cfg, 2, Register())
    rep.tick(0.0)
    rep.step(Heartbeat(0, 0, 0, 0, -1), 0.0)
    rep.step(VRequest(1, 1, 0), 0.0)  # deferred: we granted the sequencer a lease
    assert rep.election.deferred_vote is not None
    rep.tick(cfg.lease_ms / 2)
    rep.step(Heartbeat(0, 0, 0, 1, -1), cfg.lease_ms / 2)  # the sequencer is alive after all
    assert rep.election.deferred_vote is None
    rep.ready()
    # Then the sequencer falls silent for good: our lease runs out.
    now = cfg.lease_ms / 2
    votes = []
    while now < cfg.lease_ms * 3:
        now += cfg.tick_ms
        rep.tick(now)
        votes += [m for _, m in rep.ready().messages if isinstance(m, Vote)]
    assert votes == [], "a stale, cancelled V-request got our vote"
    assert rep.view == 0


def test_a_false_suspicion_does_not_depose_a_live_sequencer() -> None:
    """One replica cut off from the sequencer cannot win: the others' leases hold."""
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    net.partition({0}, {2})
    run_commands(net, [1], 10, ticks=300)
    assert net.replicas[1].view == 0 and net.replicas[1].sequencer == 0
    assert net.replicas[0].is_sequencer


# ------------------------------------------------------------- C-instance recovery


def test_a_crashed_leaders_committed_o_instance_gets_its_c_instance_recovered() -> None:
    """Section 3.3: "another can recover all of its committed C-instances simply by
    executing the Prepare phase"; execution does not block on a dead leader. N = 5:
    an acceptance is not a phase-2 quorum with the proposer's, so nobody learns the
    C-instance chosen but from its leader's C-commit, which never leaves."""
    net = Net.build(5, sequencer=0, rtt_ms=PAPER5_RTT_MS)
    net.propose(2, 20, 1, b"oh")
    # OH's C-accepts reach its quorum; the C-commits never leave OH before it dies.
    net.deliver_all(keep=lambda s, d, m: not (s == 2 and type(m).__name__ == "CCommit"))
    net.crash(2)
    net.propose(1, 10, 1, b"or")
    net.run(300)
    executed = assert_agree(net)
    assert (20, 1) in executed and (10, 1) in executed
    recovered = sum(net.replicas[r].stats.c_instances_recovered for r in (0, 1, 3, 4))
    assert recovered >= 1


def test_at_three_an_acceptor_learns_a_c_instance_chosen_as_it_accepts_it() -> None:
    """N = 3: the proposer accepted its value before sending, so the acceptor's
    acceptance completes a phase-2 quorum of two: the value is chosen then, and a
    crashed leader's C-instance executes with no recovery and no C-commit."""
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    net.propose(2, 20, 1, b"oh")
    net.deliver_all(keep=lambda s, d, m: not (s == 2 and type(m).__name__ == "CCommit"))
    assert net.replicas[0].ctx.clog.is_committed(2, 0)
    net.crash(2)
    net.propose(1, 10, 1, b"or")
    net.run(300)
    executed = assert_agree(net)
    assert (20, 1) in executed and (10, 1) in executed
    assert sum(net.replicas[r].stats.c_instances_recovered for r in (0, 1)) == 0


def test_an_untraceable_c_instance_is_recovered_as_a_no_op() -> None:
    """Section 3.3: "In each C-instance in which no command is traced, a special no-op
    command ... will be proposed"."""
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    # OH's C-request reaches the sequencer, but its C-accept reaches no one.
    net.propose(2, 20, 1, b"lost")
    net.deliver_all(keep=lambda s, d, m: not (s == 2 and type(m).__name__ == "CAccept"))
    net.crash(2)
    net.propose(1, 10, 1, b"or")
    net.run(300)
    executed = assert_agree(net)
    assert (20, 1) not in executed and (10, 1) in executed
    slot0 = [e for e in net.executed[0]]
    assert all(e.command.client_id != 20 for e in slot0)


def test_a_live_leader_whose_instance_became_a_no_op_proposes_again_exactly_once() -> None:
    """A leader cut off long enough to be recovered keeps its commands: it re-proposes
    them, and (client id, seq) makes the result exactly-once."""
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    net.propose(2, 20, 1, b"mine", wait=Wait.EXECUTED)
    net.deliver_all(keep=lambda s, d, m: not (s == 2 and type(m).__name__ == "CAccept"))
    net.partition({2}, {0, 1})
    net.propose(1, 10, 1, b"or")
    net.run(200)
    net.heal()
    net.run(300)
    executed = assert_agree(net)
    assert executed.count((20, 1)) == 1
    assert [r.kind for r in net.replies[2]] == [1]  # EXECUTED, once


# ------------------------------------------------------------------------ restart


def test_a_restarted_replica_rebuilds_from_durable_state_and_catches_up() -> None:
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    run_commands(net, [0, 1, 2], 10, ticks=5)
    net.crash(2)
    run_commands(net, [0, 1], 20, ticks=5)
    net.restart(2)
    run_commands(net, [0, 1, 2], 30, ticks=300)
    executed = assert_agree(net)
    assert len(executed) == 8
    assert net.machines[2].log == net.machines[0].log


def test_a_restarted_sequencer_does_not_resume_sequencing_blindly() -> None:
    """A sequencer that crashed forgot allocations it made after its last durable record:
    it must not hand out slots again; it rejoins through a view change."""
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    run_commands(net, [1, 2], 10, ticks=5)
    net.crash(0)
    net.restart(0)
    assert not net.replicas[0].is_sequencer
    run_commands(net, [0, 1, 2], 20, ticks=400)
    executed = assert_agree(net)
    assert len(executed) == 5


def test_rebuild_inference_never_covers_more_than_c_max() -> None:
    """Found by the fault sweep (N = 5): the paper's rule (fill the first holes) gave
    R_m a slot for a C-instance beyond C[m]; R_m's next new command then took that
    early slot and executed before a command that was ready before it was proposed
    (over-allocation, pitfall 1). R_m is covered exactly up to C[m]."""
    own = [(13, 0, 0, 1), (14, 0, 2, 1), (15, 0, 1, 1), (16, 0, 2, 1), (18, 0, 1, 1), (19, 0, 1, 1)]
    votes = {
        2: vote(own, (4, 5, 5, 3, 3)),
        3: vote([], (-1, -1, 5, 3, 2)),
        4: vote([], (-1, -1, 5, 3, 3)),
    }
    values = rebuild(5, votes, o_from=13, covered=[5, 3, 2, 2, 2])
    ones = [13 + k for k, v in enumerate(values) if v == (1, 1)]
    assert 3 + len(ones) == 5 + 1, "R1 covered exactly up to C[1] = 5"
    assert ones == [15, 17, 18]
    assert len(values) == 18 - 13 + 1


def test_a_vote_with_an_absurd_slot_is_rejected_and_changes_nothing() -> None:
    from sdpaxos.core.messages import Vote

    rep = Replica(ClusterConfig(replicas=3, sequencer=0), 1, Register())
    rep.election.start_view_change()
    rep.ready()
    view = rep.election.candidate.view if rep.election.candidate else -1
    rep.step(Vote(2, view, 0, ((1 << 40, 1, 2, 1),), (-1, -1, -1), 0, 0, 0, 0), 0.0)
    assert rep.stats.rejected == 1
    assert rep.election.candidate is not None and not rep.election.candidate.votes
    assert rep.view == 0


def test_rebuild_drops_older_view_values_beyond_the_newest_views_base() -> None:
    """Found by the fault sweep (N = 3, seed 211): a deposed sequencer kept allocating
    in view 0 (slot 23 = R2's next two C-instances, accepted only by itself); view 1,
    which never saw it, rebuilt up to slot 20 and allocated R2's C-instances afresh at
    slots 24-25. In view 3 the deposed sequencer voted and nobody had view 1's slot 23:
    per-slot highest ballot resurrected the stale value, ordering R2's C-instances twice,
    so a command proposed later landed in an old slot. Values of older views at or
    beyond the newest view's base were never chosen and must be dropped."""
    votes = {
        0: vote([(23, 0, 2, 2)], (5, 5, 9)),  # the deposed sequencer's stale allocation
        2: vote(
            [(20, 1, 1, 2), (21, 1, 1, 1), (22, 1, 1, 1), (24, 1, 2, 1), (25, 1, 2, 1)],
            (5, 5, 9),
            est=(1, 1, 20),  # view 1's base is 20
        ),
    }
    values = rebuild(3, votes, o_from=20)
    assert values[23 - 20] == NO_CL_VALUE
    assert values[24 - 20] == (2, 1) and values[25 - 20] == (2, 1)


def test_o_accepts_are_accepted_contiguously_within_a_view() -> None:
    """Acceptance is a prefix from the view's base: an O-accept beyond a gap waits."""
    rep = Replica(ClusterConfig(replicas=3), 1, Register())
    from sdpaxos.core import OAccept

    rep.step(OAccept(0, 0, 2, ((2, 1),), 0, False), 0.0)
    rd = rep.ready()
    assert not rd.persist and rep.status().o_accepted_upto == 0
    rep.step(OAccept(0, 0, 0, ((2, 1), (1, 1)), 0, False), 0.0)
    rd = rep.ready()
    assert rep.status().o_accepted_upto == 3
    assert [r.start for r in rd.persist] == [0, 2]


def test_a_replica_far_behind_catches_up_at_the_pace_of_answers() -> None:
    """Found by the long fault sweep (N = 7, seed 501075, learn_c_max = 4): a replica
    that missed many C-commits learned at most learn_c_max C-instances per learn_ms,
    because it waited learn_ms after every step of progress. Now a request whose
    answers moved execution is followed at once by the next one."""
    cfg = {"learn_c_max": 4, "learn_ms": 300.0}
    net = Net.build(3, sequencer=0, **cfg)
    net.partition({2}, {0, 1})
    for k in range(40):
        net.propose(0, 100 + k, 1, b"w%d" % k)
        net.deliver_all()
    net.run(10)
    assert len(net.executed_ids(0)) == 40 and len(net.executed_ids(2)) == 0
    net.heal()
    # Learning 40 C-instances four at a time: ten requests. At one per learn_ms
    # that took 3 s; at the pace of answers it takes one learn_ms to start.
    for _ in range(60):  # 600 ms of ticks, each followed by full delivery
        net.tick()
        net.deliver_all()
        if len(net.executed_ids(2)) == 40:
            break
    assert net.executed_ids(2) == net.executed_ids(0)
    assert net.now_ms - 0 < 10 * cfg["learn_ms"]


def test_catching_up_asks_once_per_batch_not_once_per_step() -> None:
    """Found by the fuzzer (N = 5, seed 278, 4000 steps: "no quiescence" in the
    settle phase). Two replicas restarted 698 commands behind; each C-commit of
    an answer moved execution one step, and every step sent the next full
    LearnRequest to all four peers, each answering with up to learn_c_max
    C-commits: 349,350 C-commits in one instant. Now the next request waits
    until execution passed the last C-instance the previous one asked for, so
    each peer sends each missing C-commit once (here 2,364 before, 320 now)."""
    n, commands, cap = 5, 80, 8
    net = Net.build(n, sequencer=0, learn_c_max=cap, learn_ms=300.0)
    lagger = n - 1
    net.partition({lagger}, set(range(n - 1)))
    for k in range(commands):
        net.propose(0, 100 + k, 1, b"w%d" % k)
        net.deliver_all()
    net.run(10)
    assert len(net.executed_ids(0)) == commands and len(net.executed_ids(lagger)) == 0
    net.heal()
    before = len(net.sent)
    start_ms = net.now_ms
    for _ in range(60):
        net.tick()
        net.deliver_all()
        if len(net.executed_ids(lagger)) == commands:
            break
    assert net.executed_ids(lagger) == net.executed_ids(0)
    sent = net.sent[before:]
    requests = sum(1 for s, d, m in sent if isinstance(m, LearnRequest) and d == 0)
    c_commits = sum(1 for s, d, m in sent if isinstance(m, CCommit) and d == lagger)
    assert requests <= commands // cap + 2
    assert c_commits <= (n - 1) * commands
    # Still at the pace of answers: one learn_ms to start, then no waiting.
    assert net.now_ms - start_ms <= 2 * 300.0


@pytest.mark.parametrize("inflight", [128, 2], ids=["all-in-flight", "older-than-in-flight"])
def test_a_lone_replica_serves_again_after_a_restart(inflight: int) -> None:
    """N = 1: the replica's own durable acceptance is the majority that chose each of
    its C-instances, and no peer can tell it so after a restart. It used to wait on its
    own first C-instance for ever (nothing executed, nothing served); with
    ``c_inflight_max`` 2 most instances are older than the ones driven again."""
    net = Net.build(1, sequencer=0, c_batch_max=1, c_inflight_max=inflight)
    for k in range(6):
        net.propose(0, 10 + k, 1, b"a%d" % k)
        net.run(20)
    assert len(net.executed_ids(0)) == 6
    net.crash(0)
    net.restart(0)
    net.propose(0, 20, 1, b"b")
    net.run(400)
    executed = net.executed_ids(0)
    assert executed == [(10 + k, 1) for k in range(6)] + [(20, 1)]
    assert net.machines[0].log == [b"a%d" % k for k in range(6)] + [b"b"]
