"""Regression tests for the 13 recovery bugs of the code review (issue 6).

Each test drives the explicit-delivery harness through the interleaving the
review describes (or the nearest one that reproduces on the code at the time of
writing, said so in the docstring) and asserts the SAFE outcome. On that code
every test here failed; each docstring records the failure observed then. They
pass since the recovery redesign, and stay as regressions (``docs/recovery.md``
section 14 says what removed each bug).

Messages are chosen by type, source and destination only (``where``), never by
their fields, so that the choreography survives a change of message contents.
A few tests also look at one internal counter of the core; that is said where
it happens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sdpaxos.core import messages as M
from sdpaxos.core.messages import Message
from tests.core.harness import Net, uniform_rtt_ms

Pred = Callable[[int, int, Message], bool]


# ----------------------------------------------------------------------- helpers


def _ids(x: int | Iterable[int] | None) -> set[int] | None:
    if x is None:
        return None
    return {x} if isinstance(x, int) else set(x)


def where(
    type_: type | tuple[type, ...] | None = None,
    src: int | Iterable[int] | None = None,
    dst: int | Iterable[int] | None = None,
) -> Pred:
    """A predicate on pending messages, by type, source and destination only."""
    types = None if type_ is None else (type_ if isinstance(type_, tuple) else (type_,))
    srcs, dsts = _ids(src), _ids(dst)

    def pred(s: int, d: int, m: Message) -> bool:
        return (
            (types is None or isinstance(m, types))
            and (srcs is None or s in srcs)
            and (dsts is None or d in dsts)
        )

    return pred


def anyof(*preds: Pred) -> Pred:
    return lambda s, d, m: any(p(s, d, m) for p in preds)


def noneof(*preds: Pred) -> Pred:
    return lambda s, d, m: not any(p(s, d, m) for p in preds)


def deliver_where(net: Net, pred: Pred) -> int:
    """Deliver every pending message ``pred`` accepts (and follow-ups it accepts)."""
    return net.deliver_where(pred)


def drop_where(net: Net, pred: Pred) -> int:
    return net.drop_where(pred)


def run_until(
    net: Net,
    done: Callable[[], bool],
    *,
    drop: Pred | None = None,
    hold: Pred | None = None,
    ticks: int = 600,
) -> None:
    """Tick everyone and deliver everything, except that messages ``drop`` accepts
    are lost and those ``hold`` accepts stay pending, until ``done()``."""
    never: Pred = lambda s, d, m: False  # noqa: E731
    lose, keep_back = drop or never, hold or never
    for _ in range(ticks):
        drop_where(net, lose)
        if done():
            return
        net.tick()
        deliver_where(net, noneof(lose, keep_back))
    drop_where(net, lose)
    assert done(), "the scenario did not reach its next stage"


def build(n: int, **config: object) -> Net:
    """Uniform round trips: proximity is ring order, so quorums are predictable."""
    return Net.build(n, sequencer=0, rtt_ms=uniform_rtt_ms(n), **config)


def live(net: Net) -> list[int]:
    return [r for r in range(len(net.replicas)) if r not in net.down]


def sequencer_among(net: Net, rs: Iterable[int]) -> int | None:
    return next((r for r in rs if net.replicas[r].is_sequencer), None)


def executed_logs(net: Net) -> dict[int, list[tuple[int, int]]]:
    return {r: net.executed_ids(r) for r in live(net)}


def assert_logs_agree(net: Net) -> None:
    """Every live replica's executed log is a prefix of every other's."""
    logs = executed_logs(net)
    for a, la in logs.items():
        for b, lb in logs.items():
            k = min(len(la), len(lb))
            assert la[:k] == lb[:k], f"executed logs diverge: R{a} {la} vs R{b} {lb}"


def assert_before_everywhere(net: Net, first: tuple[int, int], then: tuple[int, int]) -> None:
    """``first`` (READY before ``then`` was proposed) executes before it, everywhere."""
    for r, log in executed_logs(net).items():
        if then in log:
            assert first in log and log.index(first) < log.index(then), (
                f"R{r} executed {then} before READY {first}: {log}"
            )


def assert_executed_everywhere(net: Net, cmd: tuple[int, int]) -> None:
    for r, log in executed_logs(net).items():
        assert cmd in log, f"READY command {cmd} never executed at R{r}: {log}"


# ------------------------------------------------------------------------ bug 1


def test_bug01_rebuilt_range_slot_is_not_ready_after_two_acceptors() -> None:
    """A non-sequencer must not execute a slot of a new view's rebuilt range that
    only it and the new sequencer accepted (``_advance_safe_prefix`` skips the cap
    by the committed prefix when ``safe <= base``).

    As described (N = 5). R3's own O-commit broadcast is lost too, so that nobody
    but R3 learns slot 0 of view 1; R3 takes no part in view 2's election (its
    V-requests and votes are lost).

    HEAD: ``AssertionError: executed logs diverge: R0 [(1, 1), (3, 1)] vs R3
    [(3, 1)]`` (R3 also counts 1 invariant alarm, on view 2's NewView).
    """
    net = build(5)
    net.propose(0, 1, 1, b"A")  # R0 (sequencer) allocates O0 = R0 ...
    net.propose(3, 3, 1, b"X")  # ... and O1 = R3 once R3's C-accept reaches it
    # C-instances are chosen, but every O-accept is lost.
    deliver_where(net, noneof(where(M.OAccept)))
    drop_where(net, where(M.OAccept))
    net.crash(0)
    # R1 wins view 1 with R2 and R4 (R3 never hears the V-request): the N = 5
    # inference gives slot 0 to R3, the untraceable replica.
    run_until(
        net,
        lambda: net.replicas[1].is_sequencer,
        drop=where(M.VRequest, dst=3),
        hold=where((M.OAccept, M.NewView, M.Heartbeat)),
    )
    # The range reaches R3 only: R3 commits slot 0, answers READY and executes X.
    drop_where(net, where((M.OAccept, M.Heartbeat), src=1, dst=[0, 2, 4]))
    deliver_where(net, where(None, src=1, dst=3))
    # (On HEAD, R3 now reports X READY and executes it at slot 0.)
    drop_where(net, where(M.OCommit, src=3))
    # R1 crashes before anyone else accepted the range; R0 comes back and view 2
    # is rebuilt from R0's log (R3 is not asked), with A at slot 0.
    net.crash(1)
    net.restart(0)
    others = [0, 2, 4]
    r3_out = anyof(where((M.VRequest, M.Vote), src=3), where((M.VRequest, M.Vote), dst=3))
    run_until(net, lambda: sequencer_among(net, others) is not None, drop=r3_out)
    net.run(300)
    assert_logs_agree(net)


# ------------------------------------------------------------------------ bug 2


def _n5_ready_on_two_acceptors(net: Net, leader: int, cmd: tuple[int, int]) -> None:
    """``leader``'s command becomes READY at the next slot with its O-instance
    accepted by the leader and the sequencer only (the N = 5 rule); the leader's
    O-commit broadcast is lost, so nobody else learns the slot."""
    net.propose(leader, cmd[0], cmd[1], b"%d" % cmd[0])
    deliver_where(net, noneof(where(M.OCommit, src=leader)))
    drop_where(net, where(M.OCommit, src=leader))
    assert cmd in net.ready_ids(leader)


def test_bug02_a_heartbeat_alone_does_not_establish_a_view() -> None:
    """A voter's "established view" must be the last view whose range it accepted;
    ``_adopt_view`` sets it from any sequencer message, a heartbeat included.

    As described (N = 5): X of R1 is READY at slot 0 of view 0 (accepted by R1
    and R0); R0 crashes; R1 wins view 1 with R2 and R3 but only its heartbeat
    reaches R4 before it crashes; view 2 (R2, R3, R4) takes R1 as the old
    sequencer, infers for R0, and rebuilds an empty log.

    HEAD: ``AssertionError: R2 executed (20, 1) before READY (10, 1): [(20, 1)]``.
    """
    net = build(5)
    x, y = (10, 1), (20, 1)
    _n5_ready_on_two_acceptors(net, 1, x)
    net.crash(0)
    # View 1: R1 wins with R2 and R3; R4 never sees the V-request.
    run_until(
        net,
        lambda: net.replicas[1].is_sequencer,
        drop=where(M.VRequest, dst=4),
        hold=where((M.OAccept, M.NewView, M.Heartbeat), src=1),
    )
    # Only the winner's heartbeat reaches R4; its range O-accepts reach nobody.
    drop_where(net, where((M.OAccept, M.NewView)))
    deliver_where(net, where(M.Heartbeat, src=1, dst=4))
    drop_where(net, where(None, src=1))
    net.crash(1)
    # View 2 among R2, R3, R4; then Y is proposed, after X was READY.
    run_until(net, lambda: sequencer_among(net, [2, 3, 4]) is not None)
    net.propose(2, y[0], y[1], b"Y")
    net.run(400)
    assert_before_everywhere(net, x, y)
    assert_executed_everywhere(net, x)


# ------------------------------------------------------------------------ bug 3


def _read_at(net: Net, r: int, read_id: int, key: bytes) -> tuple[bool, int]:
    """``r.read()``, then what came back: (ok, commands applied when served)."""
    net.replicas[r].read(read_id, key, net.now_ms)
    net.flush(r)
    net.flush(r)
    got = [(ok, applied) for rid, ok, applied in net.reads[r] if rid == read_id]
    assert got, "the read was not answered at once"
    return got[0]


def test_bug03_an_early_suspecting_candidate_honours_its_own_lease_grant() -> None:
    """The early-suspicion path lets a candidate count its own vote while its lease
    grant to the old sequencer still runs: lease majority {S, R1, R2} and vote
    majority {R1, R3, R4} meet only in R1.

    As described (N = 5, perfect clocks: every replica ticks together). The public
    ``lease_valid_until`` attribute dates S's lease.

    HEAD: ``AssertionError: S served a read of b'k' without the READY write:
    (ok, applied) = (True, 0)``.
    """
    net = build(5)
    s = net.replicas[0]
    # S's heartbeats (lease requests) reach R1 and R2 only: S leases from {S, R1, R2}.
    run_until(net, lambda: s.has_lease(), drop=where(None, src=0, dst=[3, 4]), ticks=120)
    # R1's next command never reaches S, and S is silent towards R1: after 3 round
    # trips R1 suspects S early, while its own lease grant to S is still running.
    w = (30, 1)
    net.propose(1, 10, 1, b"r1")
    cut_s = anyof(where(None, src=0, dst=[1, 3, 4]), where(None, src=[1, 3, 4], dst=0))
    run_until(net, lambda: net.replicas[1].is_sequencer, drop=cut_s, ticks=300)
    # A write is READY in the new view.
    net.propose(3, w[0], w[1], b"w", key=b"k")
    run_until(net, lambda: w in net.ready_ids(3), drop=anyof(cut_s, where(None, dst=0)))
    # (On HEAD, S still believes it holds a majority lease here.)
    ok, applied = _read_at(net, 0, 1, b"k")
    assert not ok or applied >= 1, (
        f"S served a read of b'k' without the READY write: (ok, applied) = {(ok, applied)}"
    )


# ------------------------------------------------------------------------ bug 4


def test_bug04_a_paused_sequencer_does_not_keep_its_lease() -> None:
    """The lease is counted in the sequencer's own ticks: a sequencer whose ticks
    stop (paused, CPU-starved) keeps its lease while real time moves on.

    As described (N = 3): R0 holds a majority lease, then its ticks are withheld
    (``Net.paused``) and the messages sent to it stay queued, as for a stopped
    process; R1 and R2 elect R1 and make a write READY; R0 wakes and serves its
    own ``read()``.

    HEAD: ``AssertionError: the paused sequencer served a stale read: (ok,
    applied) = (True, 0)``.
    """
    net = build(3)
    s = net.replicas[0]
    run_until(net, s.has_lease, ticks=20)
    net.paused.add(0)
    w = (20, 1)
    run_until(net, lambda: net.replicas[1].is_sequencer, hold=where(None, dst=0))
    net.propose(2, w[0], w[1], b"w", key=b"k")
    run_until(net, lambda: w in net.ready_ids(2), hold=where(None, dst=0))
    ok, applied = _read_at(net, 0, 1, b"k")
    assert not ok or applied >= 1, (
        f"the paused sequencer served a stale read: (ok, applied) = {(ok, applied)}"
    )


# ------------------------------------------------------------------------ bug 5


def test_bug05_a_recoverer_keeps_the_promise_it_gave_a_higher_ballot() -> None:
    """``_handle_c_promise`` overwrites the recoverer's own acceptance with its
    (lower) recovery ballot without checking the higher ballot it promised and
    accepted meanwhile: one C-instance gets two chosen values.

    As described (N = 3): R1's C-instance 0 (v) reaches only R1, its O-instance
    is committed; R0 (ballot round 1, id 0) and R2 (round 1, id 2: higher) both
    recover it. R2 chooses a no-op with R0; then R0's prepare reaches R1, R0
    proposes v at its lower ballot, R1 accepts and R0 commits v.

    HEAD: ``AssertionError: executed logs diverge: R0 [(10, 1), (20, 1), (10, 1)]
    vs R1 [(20, 1), (10, 1)]`` (R0 executed v in C-instance 1.0, R1 the no-op and
    then its re-proposal of v).
    """
    net = build(3)
    v, y = (10, 1), (20, 1)
    lost_c_accept = where(M.CAccept, src=1)  # R1's C-accepts never arrive
    net.propose(1, v[0], v[1], b"v")
    run_until(net, lambda: net.replicas[1].status().o_safe_upto >= 1, drop=lost_c_accept)
    # Execution blocks on C-instance 1.0 at R0 and R2: both start recovering it.
    recovery = where((M.CPrepare, M.CPromise, M.CAccept, M.CAck, M.CCommit), src=[0, 2])
    run_until(
        net,
        lambda: all(net.replicas[r].status().recovering == (1,) for r in (0, 2)),
        drop=lost_c_accept,
        hold=anyof(recovery, where((M.CPromise, M.CAck), src=1)),
    )
    drop_where(net, noneof(where(M.CPrepare)))  # only the two prepares are in flight
    # R2's prepare (higher ballot) reaches R0 first; R2 proposes a no-op, R0 accepts
    # it and R2 commits it. R2's messages to R1 are delayed.
    deliver_where(net, where(M.CPrepare, src=2, dst=0))
    deliver_where(net, where(M.CPromise, src=0, dst=2))
    deliver_where(net, where(M.CAccept, src=2, dst=0))
    deliver_where(net, where(M.CAck, src=0, dst=2))
    assert net.replicas[2].stats.c_instances_recovered == 1
    # R0's older prepare reaches R1, which reports v: R0 proposes v at its lower
    # ballot, over the no-op it accepted; R1 accepts; R0 commits v.
    deliver_where(net, where(M.CPrepare, src=0, dst=1))
    deliver_where(net, where(M.CPromise, src=1, dst=0))
    deliver_where(net, where(M.CAccept, src=0, dst=1))
    deliver_where(net, where(M.CAck, src=1, dst=0))
    drop_where(net, where((M.CPrepare, M.CAccept), src=2, dst=1))
    net.propose(2, y[0], y[1], b"y")
    net.run(300)
    assert_logs_agree(net)


# ------------------------------------------------------------------------ bug 6


def _hand_over(net: Net, old: int, new: int) -> None:
    """An orderly hand-over from ``old`` to ``new``, delivered everywhere."""
    net.replicas[old].transfer_sequencer(new)
    net.flush(old)
    run_until(
        net,
        lambda: all(net.replicas[r].sequencer == new for r in live(net)),
        ticks=300,
    )
    net.run(3)


def test_bug06_a_restart_remembers_the_established_view() -> None:
    """``_restore`` sets the established view only if the last ``ViewPromised``
    names a sequencer, but a vote persists ``ViewPromised(v, -1)``: a replica that
    restarts after voting in a view it never adopted reports view 0 and the
    configured sequencer.

    As described (N = 5). View 1 (sequencer R1) is reached by an orderly hand-over;
    R2 restarts once during the lost elections so that it votes too (it was the
    candidate of the first ones).

    HEAD: ``AssertionError: READY command (30, 1) never executed at R0: [(40,
    1)]``, and once R3 is back: ``R0 executed (40, 1) before READY (30, 1)``.
    """
    net = build(5)
    _hand_over(net, 0, 1)
    x, y = (30, 1), (40, 1)
    _n5_ready_on_two_acceptors(net, 3, x)  # slot accepted by R3 and R1 only
    net.crash(1)
    net.crash(3)
    # R0, R2 and R4 hold elections whose votes are all lost. R2 (R1's successor)
    # runs first and R0 and R4 vote for it; R2 then restarts, which ends its
    # candidacy, and votes in R4's election.
    run_until(net, lambda: all(net.replicas[r].view >= 3 for r in (0, 4)), drop=where(M.Vote))
    net.crash(2)
    net.restart(2)
    run_until(net, lambda: net.replicas[2].view >= 2, drop=where(M.Vote))
    # All three restart: each one's last durable view record is a vote.
    for r in (0, 2, 4):
        net.crash(r)
        net.restart(r)
    # The next election rebuilds the log; then Y is proposed (after X was READY).
    run_until(net, lambda: sequencer_among(net, [0, 2, 4]) is not None)
    net.propose(0, y[0], y[1], b"y")
    net.run(300)
    assert_executed_everywhere(net, x)
    net.restart(3)
    net.restart(1)
    net.run(400)
    assert_before_everywhere(net, x, y)


# ------------------------------------------------------------------------ bug 7


def test_bug07a_votes_from_o_from_still_show_the_newest_view() -> None:
    """With ``o_from > 0`` votes report only slots at or above ``o_from``: when the
    newest view allocated nothing there, the rebuild filter cannot see it, and a
    stale older-view value is re-proposed.

    Adapted (N = 3, one partition and one hand-over instead of two hand-overs):
    the view-0 sequencer R0 allocates slots 0 and 1 to R2's two commands but its
    O-accepts are lost and it is cut off; view 1 (R1, R2) orders both in slot 0
    and executes them; R0 rejoins view 1 keeping its stale slot 1. The view-1
    sequencer hands over with ``o_from = 1``; R0's vote reports only its stale
    slot 1 (ballot 0), which is re-proposed: R2's next C-instance is already
    ordered, ahead of a write that becomes READY before it is proposed.

    HEAD: ``AssertionError: R0 executed (23, 1) before READY (50, 1): [(21, 1),
    (22, 1), (23, 1), (50, 1)]``.
    """
    net = build(3)
    for seq in (1, 2):  # R0 allocates a slot for each; the O-accepts are lost
        net.propose(2, 20 + seq, 1, b"c%d" % seq)
        deliver_where(net, noneof(where(M.OAccept)))
        drop_where(net, where(M.OAccept))
    # R0 is cut off; R1 and R2 elect a view-1 sequencer and execute both commands.
    cut0 = anyof(where(None, src=0), where(None, dst=0))
    run_until(net, lambda: all(len(net.executed_ids(r)) == 2 for r in (1, 2)), drop=cut0)
    s1 = sequencer_among(net, [1, 2])
    assert s1 is not None
    target = 3 - s1
    run_until(net, lambda: net.replicas[0].sequencer == s1)  # R0 rejoins view 1
    net.run(5)
    # Hand-over; the target wins with R0's vote (o_from = 1).
    net.replicas[s1].transfer_sequencer(target)
    net.flush(s1)
    run_until(net, lambda: net.replicas[target].is_sequencer, hold=where(M.Vote, src=s1))
    net.run(5)
    w, c3 = (50, 1), (23, 1)
    net.propose(0, w[0], w[1], b"w")
    run_until(net, lambda: w in net.ready_ids(0))
    net.propose(2, c3[0], c3[1], b"c3")
    net.run(200)
    assert_before_everywhere(net, w, c3)


def _stale_allocation_then_view1(net: Net) -> int:
    """N = 3: the view-0 sequencer R0 allocates slots 0 and 1 to R2's commands
    c1 and c2, but its O-accepts are lost and it is cut off; R1 and R2 elect a
    view-1 sequencer (empty range, base 0), which orders both in slot 0, and
    they execute them. Returns the view-1 sequencer."""
    for seq in (1, 2):
        net.propose(2, 20 + seq, 1, b"c%d" % seq)
        deliver_where(net, noneof(where(M.OAccept)))
        drop_where(net, where(M.OAccept))
    cut0 = anyof(where(None, src=0), where(None, dst=0))
    run_until(net, lambda: all(len(net.executed_ids(r)) == 2 for r in (1, 2)), drop=cut0)
    s1 = sequencer_among(net, [1, 2])
    assert s1 is not None
    return s1


def test_bug07b_an_empty_range_view_persists_its_base() -> None:
    """A new sequencer whose rebuilt range is empty never persists its view's base
    (``OAccepted`` is written only ``if values``; ``_allocate`` writes base -1):
    after a restart its votes carry base -1 and the rebuild filter is off.

    As described (N = 3): view 1's sequencer s1 (empty range) allocates slot 0
    for R2's c1, c2; its acceptor crashes; s1 and R0 (the deposed view-0
    sequencer, with its stale slots 0 and 1) restart and elect s1 again: the
    stale slot 1 comes back. R2's next command c3 takes it, ahead of a write
    READY before c3 was proposed.

    HEAD: ``AssertionError: R0 executed (23, 1) before READY (50, 1): [(21, 1),
    (22, 1), (23, 1), (50, 1)]``.
    """
    net = build(3)
    s1 = _stale_allocation_then_view1(net)
    acceptor = 3 - s1
    net.crash(acceptor)
    for r in (0, s1):  # both restart from their durable records
        net.crash(r)
        net.restart(r)
    run_until(net, lambda: sequencer_among(net, [0, s1]) is not None)
    net.run(5)
    w, c3 = (50, 1), (23, 1)
    net.propose(0, w[0], w[1], b"w")
    run_until(net, lambda: w in net.ready_ids(0))
    net.restart(acceptor)
    net.propose(2, c3[0], c3[1], b"c3")
    net.run(300)
    assert_before_everywhere(net, w, c3)


def test_bug07c_a_commit_learned_during_an_election_keeps_a_known_ballot() -> None:
    """``_handle_o_commit`` stamps a commit learned while a view is being elected
    with that view as its ballot: a view with no sequencer yet, whose base nobody
    knows, so a vote reporting it switches the rebuild filter off.

    As described (N = 3). After the stale-allocation setup of 7b, R0 rejoins view
    1 learning none of view 1's commits (on HEAD through a heartbeat only; once
    fixed, a heartbeat cannot make it join, so it gets view 1's range O-accept); the view-1
    sequencer s1 hands over to a, whose view-2 votes (R0, s1) are lost and which
    crashes; R0, stalled, learns slot 0's commit from s1 in view 2 (ballot 2, base
    unknown). s1 crashes; a restarts and wins with R0's vote (o_from = 0): R0's
    stale slot 1 is re-proposed.

    HEAD: ``AssertionError: R0 executed (23, 1) before READY (50, 1): [(21, 1),
    (22, 1), (23, 1), (50, 1)]``.
    """
    net = build(3)
    s1 = _stale_allocation_then_view1(net)
    a = 3 - s1

    def blind0(src: int, dst: int, m: object) -> bool:
        # R0 learns view 1 only from what makes it join: on HEAD a heartbeat (the
        # bug), once fixed the range O-accept (``rebuilt``); no commit, no learning.
        if dst != 0:
            return False
        if isinstance(m, M.OAccept):
            return not getattr(m, "rebuilt", False)
        return isinstance(m, (M.NewView, M.OCommit, M.LearnRequest))

    run_until(net, lambda: net.replicas[0].sequencer == s1, drop=blind0)
    # Hand-over to a; R0 and s1 vote in view 2, the votes are lost; a crashes.
    net.replicas[s1].transfer_sequencer(a)
    net.flush(s1)
    run_until(
        net,
        lambda: all(net.replicas[r].view == 2 for r in (0, s1)),
        drop=anyof(blind0, where(M.Vote)),
    )
    net.crash(a)
    # R0 is behind: its learn request (view 2) is answered by s1 with an O-commit.
    run_until(net, lambda: len(net.executed_ids(0)) == 2, drop=where((M.VRequest, M.Vote)))
    net.crash(s1)
    net.restart(a)
    run_until(net, lambda: net.replicas[a].is_sequencer, drop=where(M.VRequest, src=0))
    net.run(5)
    w, c3 = (50, 1), (23, 1)
    net.propose(0, w[0], w[1], b"w")
    run_until(net, lambda: w in net.ready_ids(0))
    net.restart(s1)
    net.propose(2, c3[0], c3[1], b"c3")
    net.run(300)
    assert_before_everywhere(net, w, c3)


# ------------------------------------------------------------------------ bug 8


def test_bug08_an_executed_slot_is_durable_at_a_majority() -> None:
    """At N = 5 a non-sequencer's O-instance committed by the two-acceptor rule is
    durable at the command leader and the sequencer only; the others execute it
    from an O-commit held in memory, and a view change with ``o_from > 0`` never
    re-proposes it. Once both holders are down and the voters restarted, the
    executed slot is rebuilt empty and reused.

    As described (N = 5): X of R3 is READY and executed everywhere at slot 0
    (persisted by R3 and R0 only); R0 crashes, R1 wins view 1 with ``o_from = 1``;
    R3 crashes; R1, R2, R4 restart one by one; a new command Y is proposed.

    HEAD: ``AssertionError: executed slot 0 revoked: R1 first executed [(30, 1)]
    before its restart, now [(40, 1)]``.
    """
    net = build(5)
    x, y = (30, 1), (40, 1)
    net.propose(3, x[0], x[1], b"x")
    net.run(5)
    assert all(net.executed_ids(r) == [x] for r in range(5))
    first = {r: net.executed_ids(r) for r in range(5)}
    net.crash(0)
    run_until(net, lambda: sequencer_among(net, [1, 2, 4]) is not None)
    net.run(5)
    net.crash(3)
    for r in (1, 2, 4):
        net.crash(r)
        net.restart(r)
    run_until(net, lambda: sequencer_among(net, [1, 2, 4]) is not None)
    net.propose(1, y[0], y[1], b"y")
    net.run(300)
    for r, log in executed_logs(net).items():
        assert log[:1] == first[r], (
            f"executed slot 0 revoked: R{r} first executed {first[r]} before its restart, now {log}"
        )


# ------------------------------------------------------------------------ bug 9


def test_bug09_the_n5_inference_never_trims_a_traced_slot() -> None:
    """``_infer_untraceable`` trims m's excess coverage walking back over m's slots
    with ``count <= excess`` and skips a batched slot whose count is larger, so it
    trims an EARLIER slot that every voter reports (and that executed everywhere
    long ago); the counting rule then moves m's C-instances behind other
    replicas' commands.

    A unit test of ``rebuild_assignment_log`` (N = 5, o_from = 0: the candidate
    restarted). m = R1 was sequencer before: slot 0 = (R1, 1) is its C-instance 0,
    executed everywhere; slot 2 = (R1, 2) batches its C-instances 1 and 2, and no
    voter accepted C-instance 2 (C[m] = 1). Old sequencer R0 did not vote; voters
    R2, R3, R4 all report slots 0-2. The executed slot that gets trimmed is slot 0.

    HEAD: ``AssertionError: traced, executed slot 0 was trimmed: [(-1, 0), (2, 1),
    (1, 2)]``.
    """
    from sdpaxos.core.view_change import VoteState, rebuild_assignment_log

    entries = ((0, 1, 1, 1), (1, 1, 2, 1), (2, 1, 1, 2))
    c_max = (-1, 1, 0, -1, -1)
    # The voters established view 1, whose sequencer R0 rebuilt up to slot 0 and
    # then ordered these slots (ballot 1).
    votes = {r: VoteState(entries, c_max, est_view=1, est_seq=0, est_base=0) for r in (2, 3, 4)}
    values = rebuild_assignment_log(
        replicas=5, o_from=0, votes=votes, covered_before=[0] * 5
    ).values
    assert values[0] == (1, 1), f"traced, executed slot 0 was trimmed: {values}"
    assert values[1] == (2, 1)


# ----------------------------------------------------------------------- bug 10


def test_bug10_the_straggler_path_honours_the_candidates_lease_grant() -> None:
    """A candidate that distrusts the sequencer (straggler detection) treats its own
    lease grant as released and wins at once; the deposed sequencer still holds a
    majority lease ({S, R1, R2}) and serves a stale read.

    As described (N = 5, straggler windows of 20 ticks; S is far from everyone so
    that no early suspicion fires, and the test checks that R1 polled). R1, R3
    and R4 each have
    10 C-instances S never orders (their C-requests and C-accepts to S are lost);
    S's heartbeats reach R3 and R4 only at first, then R1 and R2 only. R1 polls
    after three slow windows, R3 and R4 agree, R1 wins with their votes while its
    own grant to S runs; a write becomes READY in the new view; S reads.

    HEAD: ``AssertionError: S served a read of b'k' without the READY write: (ok,
    applied) = (True, 0)``.
    """
    # S is far from everyone (1 s round trips), so nobody suspects it early
    # (``suspect_rtts``): only the straggler poll can start the view change.
    rtt = [[1.0 if i == j else 100.0 for j in range(5)] for i in range(5)]
    for i in range(1, 5):
        rtt[i][0] = rtt[0][i] = 1000.0
    net = Net.build(5, sequencer=0, rtt_ms=tuple(map(tuple, rtt)), straggler_window_ms=200.0)
    s = net.replicas[0]
    for r in (1, 3, 4):
        for k in range(10):
            net.propose(r, 100 * r + k, 1, b"%d" % k)
    unordered = where((M.CRequest, M.CAccept), src=[1, 3, 4], dst=0)
    # First heartbeat (tick 1) reaches everyone; the later ones only R1 and R2.
    run_until(net, lambda: s.has_lease(), drop=unordered, ticks=5)
    late_hb = anyof(unordered, where(None, src=0, dst=[3, 4]))
    # (a lease dated from a heartbeat after the first one: granted by R1 and R2 only)
    run_until(net, lambda: s.sequencer_role.lease_valid_until_ms > 600, drop=late_hb, ticks=80)
    # The poll: R1 starts a view change and wins with R3 and R4; S hears nothing.
    cut_s = anyof(late_hb, where(None, dst=0))
    run_until(net, lambda: net.replicas[1].is_sequencer, drop=cut_s, ticks=300)
    assert any(isinstance(m, M.StragglerPoll) for src, _, m in net.sent if src == 1)
    w = (30, 1)
    net.propose(3, w[0], w[1], b"w", key=b"k")
    run_until(net, lambda: w in net.ready_ids(3), drop=cut_s, ticks=60)
    # (On HEAD, S still believes it holds a majority lease here.)
    ok, applied = _read_at(net, 0, 1, b"k")
    assert not ok or applied >= 1, (
        f"S served a read of b'k' without the READY write: (ok, applied) = {(ok, applied)}"
    )


# ----------------------------------------------------------------------- bug 11


def test_bug11_a_lost_o_ack_does_not_stall_execution_at_n7() -> None:
    """At N >= 7 the command leader learns its O-instances from O-ACKs that the
    extra acceptors send it once, when the O-accept arrives; nothing asks them
    again, so if those are lost the slot is never committed and nothing after it
    executes, even on a perfect network afterwards.

    As described (N = 7): R3's O-instance; every O-ACK addressed to R3 is lost
    while the sequencer pushes the slot to every acceptor (the extra acceptors
    first, the others lazily); then the network is perfect for 500 ticks and
    another command follows.

    HEAD: ``AssertionError: READY command (30, 1) never executed at R0: []``
    (X is never even READY; nothing executes).
    """
    net = build(7)
    x, y = (30, 1), (40, 1)
    net.propose(3, x[0], x[1], b"x")
    run_until(
        net,
        lambda: all(net.replicas[r].status().o_accepted_upto >= 1 for r in range(7)),
        drop=where(M.OAck, dst=3),
    )
    net.run(500)
    net.propose(1, y[0], y[1], b"y")
    net.run(200)
    assert_executed_everywhere(net, x)
    assert_executed_everywhere(net, y)


# ----------------------------------------------------------------------- bug 12


def test_bug12_a_recoverers_own_phase2_acceptance_counts_in_c_max() -> None:
    """A recoverer persists its own phase-2 acceptance but does not count it in its
    per-owner highest accepted C-instance (``_c_max``), which votes report as
    ``c_max`` for the N = 5 inference: the inference then undercounts and may
    trim a chosen, executed slot.

    Unit-level, as the review allows (the scenario needs the other fixes first),
    looking at the internal ``_c_max``: it must equal what a restart rebuilds
    from the same durable records. N = 3: R1's C-instance 0 reaches nobody but
    its O-instance is committed; R1 crashes; R0 or R2 recovers it (a no-op).

    HEAD: ``AssertionError: R2 accepted C-instance 1.0 in recovery phase 2 but
    reports c_max[1] = -1 (a restart from its records says 0)``.
    """
    from sdpaxos.core import Replica
    from tests.core.harness import Register

    net = build(3)
    net.propose(1, 10, 1, b"v")
    run_until(
        net,
        lambda: net.replicas[1].status().o_safe_upto >= 1,
        drop=where(M.CAccept, src=1),
    )
    net.crash(1)
    run_until(net, lambda: sum(net.replicas[r].stats.c_instances_recovered for r in (0, 2)) > 0)
    recoverer = next(r for r in (0, 2) if net.replicas[r].stats.c_instances_recovered)
    rep = net.replicas[recoverer]
    restored = Replica(net.config, recoverer, Register(), records=net.storages[recoverer].load())
    assert rep.ctx.clog.c_max[1] == restored.ctx.clog.c_max[1], (
        f"R{recoverer} accepted C-instance 1.0 in recovery phase 2 but reports "
        f"c_max[1] = {rep.ctx.clog.c_max[1]} "
        f"(a restart from its records says {restored.ctx.clog.c_max[1]})"
    )


# ----------------------------------------------------------------------- bug 13


def _transfer_once_established(net: Net, old: int, new: int) -> None:
    """Hand over from ``old`` to ``new`` as soon as ``old`` may (its rebuilt range is
    committed), and run until ``new`` is the sequencer everywhere."""
    from sdpaxos.core import LocalProtocolError

    for _ in range(200):
        try:
            net.replicas[old].transfer_sequencer(new)
            break
        except LocalProtocolError:
            net.run(1)
    net.flush(old)
    run_until(net, lambda: all(net.replicas[r].sequencer == new for r in live(net)), ticks=300)


def test_bug13a_the_rebuild_filter_never_runs_blind() -> None:
    """The filter is off when a voter's base for the ballot it reports is unknown:
    ``_bases`` entries older than ``view - 8`` are pruned (and a commit learned
    from an O-commit has none), which reopens the stale-allocation resurrection
    the filter exists for.

    Variant with pruning (N = 3). After the stale-allocation setup of 7b, R0 is
    down while s1 and a hand the role back and forth with empty ranges until a
    has voted in view 10 (view 1's base, 0, is pruned there; a's entries stay at
    ballot 1). s1 crashes; R0 restarts and wins with a's vote (o_from = 0): R0's
    stale slot 1 comes back.

    HEAD: ``AssertionError: R0 executed (23, 1) before READY (50, 1): [(21, 1),
    (22, 1), (23, 1), (50, 1)]``.
    """
    net = build(3)
    s1 = _stale_allocation_then_view1(net)
    a = 3 - s1
    net.crash(0)
    cur = s1
    while net.replicas[a].view < 10 or net.replicas[a].is_sequencer:
        _transfer_once_established(net, cur, 3 - cur)
        cur = 3 - cur
    net.crash(s1)
    net.restart(0)
    run_until(net, lambda: net.replicas[0].is_sequencer, drop=where(M.VRequest, src=a), ticks=2000)
    net.run(5)
    w, c3 = (50, 1), (23, 1)
    net.propose(0, w[0], w[1], b"w")
    run_until(net, lambda: w in net.ready_ids(0))
    net.restart(s1)
    net.propose(2, c3[0], c3[1], b"c3")
    net.run(300)
    assert_before_everywhere(net, w, c3)


def test_bug13b_an_o_accept_against_an_executed_slot_raises_the_alarm() -> None:
    """An O-accept that conflicts with an EXECUTED slot is a safety violation and
    must count in ``stats.invariant_alarms``, like a NewView that would revoke an
    executed slot; ``_handle_o_accept`` rejects it silently ("slot 0 already
    holds"). Bug 1's interleaving ends this way on HEAD (R3 rejects every view-2
    O-accept for its executed slot 0).

    Made independent of bug 1 so that it stays meaningful once bug 1 is fixed
    (then no correct peer sends such an O-accept): R1's X executes everywhere at
    slot 0 in view 0; R1 then receives an O-accept of view 1, from R2 as its
    sequencer, putting R0's C-instance at slot 0. Built by hand, the only test
    here that constructs a message.

    HEAD: ``AssertionError: R1 rejected the O-accept (rejected 0 -> 1) and counts
    0 invariant alarms``.
    """
    net = build(3)
    net.propose(1, 10, 1, b"x")
    net.run(5)
    r1 = net.replicas[1]
    assert net.executed_ids(1) == [(10, 1)]
    rejected = r1.stats.rejected
    # View 1's rebuilt range [0, 1), as if from its sequencer R2.
    r1.step(M.OAccept(2, 1, 0, ((0, 1),), 1, True), net.now_ms)
    net.flush(1)
    assert r1.stats.invariant_alarms == 1, (
        f"R1 rejected the O-accept (rejected {rejected} -> {r1.stats.rejected}) and counts "
        f"{r1.stats.invariant_alarms} invariant alarms"
    )


# ------------------------------------------------------- bug 14 (found after the redesign)


def test_bug14_a_slot_executed_by_its_owner_only_survives_the_owners_view() -> None:
    """Found while rewriting docs/recovery.md for the redesign (not in the review's
    list). At N = 5 a slot committed by the two-acceptor rule and executed only by
    its owner is held durably by the owner and the old sequencer alone. If the
    owner then wins a view with ``o_from`` past that slot, its range does not
    re-propose it; once both holders are down, the next view rebuilds it empty.

    N = 5: X of R1 is READY and executed at slot 0, held by R1 and R0; R0
    crashes; R1 wins view 1 (R2, R3) with ``o_from = 1``, and R2 and R3 accept its
    range; R1 crashes; R2 wins view 2 with R3 and R4 from ``o_from = 0``: slot 0
    was a hole and Y, proposed after X was READY, took it. Now votes report their
    executed prefix and the range starts at the lowest, so R1's range re-proposes
    slot 0 and R2 and R3 hold it.

    Before the fix: ``R2 executed (20, 1) before READY (10, 1)``.
    """
    net = build(5)
    x, y = (10, 1), (20, 1)
    _n5_ready_on_two_acceptors(net, 1, x)
    assert x in net.executed_ids(1)  # R1 executed X (it committed both instances)
    net.crash(0)
    run_until(
        net,
        lambda: net.replicas[1].is_sequencer,
        drop=where(M.VRequest, dst=4),
        hold=where((M.OAccept, M.NewView, M.Heartbeat), src=1),
    )
    # The range reaches R2 and R3 (they establish view 1), nothing else does.
    deliver_where(net, where(M.OAccept, src=1, dst=[2, 3]))
    drop_where(net, where(None, src=1))
    drop_where(net, where(M.OAck))
    assert all(net.replicas[r].status().established_view == 1 for r in (2, 3))
    net.crash(1)
    run_until(net, lambda: sequencer_among(net, [2, 3, 4]) is not None)
    net.propose(2, y[0], y[1], b"Y")
    net.run(400)
    net.restart(1)
    net.run(400)
    assert all(net.replicas[r].stats.invariant_alarms == 0 for r in range(1, 5))
    assert_before_everywhere(net, x, y)
    assert_executed_everywhere(net, x)
