"""Each checker is shown to catch a synthetic bad history (and to pass a good one)."""

import pytest

from sdpaxos.core import CAccepted, Command, Executed, OAccepted, Reply, ReplyKind
from sdpaxos.core.ready import ReadResult
from sdpaxos.sim.checkers import Checker, LivenessViolation, SafetyViolation

A = Command(1, 1, b"a")
B = Command(2, 1, b"b")
C = Command(3, 1, b"c")


def ex(slot: int, owner: int, command: Command, *, c_index: int = 0, dup: bool = False) -> Executed:
    return Executed(slot, owner, c_index, command, b"r", dup)


def ready(ch: Checker, replica: int, command: Command) -> None:
    ch.replied(replica, Reply(command.client_id, command.seq, ReplyKind.READY))


# -- (1) one value per instance ---------------------------------------------------


def test_one_chosen_c_value_passes_and_minorities_do_not_count() -> None:
    ch = Checker(3)
    ch.persisted(0, [CAccepted(0, 0, 0, (A,))])
    ch.persisted(1, [CAccepted(0, 0, 0, (A,))])  # chosen: A at ballot 0
    ch.persisted(2, [CAccepted(0, 0, 256 + 2, (B,))])  # a lone acceptance chooses nothing
    ch.persisted(1, [CAccepted(0, 0, 512 + 1, (A,))])
    ch.persisted(2, [CAccepted(0, 0, 512 + 1, (A,))])  # A again, at a higher ballot: fine
    assert ch.chosen_c == 2


def test_two_values_chosen_for_one_c_instance() -> None:
    ch = Checker(3)
    ch.persisted(0, [CAccepted(1, 4, 1, (A,))])
    ch.persisted(1, [CAccepted(1, 4, 1, (A,))])
    ch.persisted(1, [CAccepted(1, 4, 258, (B,))])
    with pytest.raises(SafetyViolation) as info:
        ch.persisted(2, [CAccepted(1, 4, 258, (B,))])
    msg = str(info.value)
    assert "C-instance (owner=1, index=4): two values chosen" in msg
    assert "at ballot 1 by replicas [0, 1]" in msg and "at ballot 258 by replicas [1, 2]" in msg


def test_two_values_chosen_for_one_o_instance_across_views() -> None:
    ch = Checker(3)
    for r in (0, 1):
        ch.persisted(r, [OAccepted(0, 0, ((1, 1), (2, 1), (3, 1)))])  # slot 2 = (3, 1)
    ch.persisted(2, [OAccepted(1, 2, ((-1, 0),))])
    with pytest.raises(SafetyViolation, match=r"O-instance 2: two values chosen: \(3, 1\)"):
        ch.persisted(1, [OAccepted(1, 1, ((2, 1), (-1, 0)))])


def test_five_replicas_may_overwrite_an_unexecuted_o_instance() -> None:
    """With N = 5 an O-instance is not Paxos: a later view may overwrite one that a
    majority accepted but nobody executed (paper section 3.3); only execution counts."""
    ch = Checker(5)
    for r in (0, 1, 2):
        ch.persisted(r, [OAccepted(0, 0, ((1, 1), (2, 1), (3, 1)))])
    for r in (2, 3, 4):
        ch.persisted(r, [OAccepted(1, 2, ((-1, 0),))])
    assert ch.chosen_o == 4


def test_a_replica_counts_once() -> None:
    ch = Checker(3)
    ch.persisted(0, [OAccepted(0, 0, ((1, 1),))])
    ch.persisted(0, [OAccepted(0, 0, ((1, 1),))])
    assert ch.chosen_o == 0


# -- (2) prefix agreement ---------------------------------------------------------


def test_executed_sequences_must_be_prefixes_of_one_another() -> None:
    ch = Checker(3)
    for c in (A, B, C):
        ch.proposed(0, c)
    ch.executed(0, [ex(0, 0, A), ex(1, 0, B, c_index=1)])
    ch.executed(1, [ex(0, 0, A)])  # a prefix: fine
    with pytest.raises(SafetyViolation, match="diverge at replica 1 position 1"):
        ch.executed(1, [ex(1, 0, C, c_index=1)])


def test_restart_rechecks_from_the_start() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    ch.proposed(0, B)
    ch.executed(0, [ex(0, 0, A), ex(1, 0, B, c_index=1)])
    ch.restarted(0)
    ch.executed(0, [ex(0, 0, A)])  # re-execution from scratch is no double execution
    with pytest.raises(SafetyViolation, match="diverge at replica 0 position 1"):
        ch.executed(0, [ex(1, 0, C)])


# -- (3) integrity ------------------------------------------------------------------


def test_executing_an_unproposed_command() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    with pytest.raises(SafetyViolation, match="never proposed"):
        ch.executed(0, [ex(0, 0, Command(1, 1, b"forged"))])


def test_executing_twice_as_non_duplicate() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    ch.executed(0, [ex(0, 0, A), ex(1, 0, A, c_index=1, dup=True)])
    with pytest.raises(SafetyViolation, match=r"executed \(1, 1\) a second time"):
        ch.executed(0, [ex(2, 0, A, c_index=2)])


def test_duplicate_before_first_execution() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    with pytest.raises(SafetyViolation, match=r"marked .* a duplicate"):
        ch.executed(0, [ex(0, 0, A, dup=True)])


def test_reply_for_an_unproposed_command_or_from_the_wrong_leader() -> None:
    ch = Checker(3)
    with pytest.raises(SafetyViolation, match="never proposed"):
        ready(ch, 0, A)
    ch.proposed(1, A)
    with pytest.raises(SafetyViolation, match=r"proposed at replica\(s\) \[1\] only"):
        ready(ch, 0, A)


def test_a_command_retried_elsewhere_may_be_answered_by_either_leader() -> None:
    ch = Checker(3)
    ch.proposed(1, A)
    ch.proposed(2, A)  # the client retried at replica 2
    ready(ch, 2, A)
    ready(ch, 1, A)
    with pytest.raises(SafetyViolation, match="proposed at"):
        ready(ch, 0, A)


# -- (4) real-time order --------------------------------------------------------------


def test_real_time_order_holds_for_concurrent_commands() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    ch.proposed(1, B)  # concurrent with A: either order is fine
    ready(ch, 1, B)
    ready(ch, 0, A)
    ch.executed(2, [ex(0, 0, A), ex(1, 1, B)])
    ch.executed(0, [ex(0, 0, A), ex(1, 1, B)])


def test_real_time_order_violation() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    ready(ch, 0, A)  # A is READY ...
    ch.proposed(1, B)  # ... before B is proposed
    with pytest.raises(SafetyViolation, match=r"executed \(2, 1\) before \(1, 1\)"):
        ch.executed(2, [ex(0, 1, B), ex(1, 0, A)])


# -- liveness --------------------------------------------------------------------------


def test_liveness_lists_missing_commands() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    ch.proposed(1, B)
    ch.executed(0, [ex(0, 0, A), ex(1, 1, B)])
    ch.executed(1, [ex(0, 0, A)])
    ch.check_liveness([0])
    assert not ch.executed_everywhere([0, 1])
    with pytest.raises(
        LivenessViolation, match=r"replica 1 never executed 1 of 2.*\(2, 1\) \(leader 1\)"
    ):
        ch.check_liveness([0, 1])


def test_liveness_excuses_commands_lost_with_their_leader() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    ch.proposed(1, B)
    ready(ch, 1, B)
    ch.crashed(1)  # B was READY: it must survive the crash
    ch.crashed(0)  # A was not: it may be lost
    ch.executed(2, [ex(0, 1, B)])
    ch.check_liveness([2])
    ch2 = Checker(3)
    ch2.proposed(1, B)
    ready(ch2, 1, B)
    ch2.crashed(1)
    with pytest.raises(LivenessViolation):
        ch2.check_liveness([2])


# -- (5) read freshness ----------------------------------------------------------------

K1 = Command(4, 1, b"k1-write", key=b"k1")
K2 = Command(5, 1, b"k2-write", key=b"k2")


def test_an_ok_read_must_have_applied_every_earlier_ready_write_of_its_key() -> None:
    ch = Checker(3)
    for cmd in (K1, K2):
        ch.proposed(0, cmd)  # concurrent: either order is fine
    for cmd in (K1, K2):
        ready(ch, 0, cmd)
    ch.executed(1, [ex(0, 0, K2)])  # replica 1 applied the k2 write only
    ch.read_issued(1, 7, b"k2")
    ch.read_served(1, ReadResult(7, True))  # fresh: k2 is there, k1 does not matter
    ch.read_issued(1, 8, b"k1")
    with pytest.raises(SafetyViolation, match=r"stale read: replica 1 served read 8 of b'k1'"):
        ch.read_served(1, ReadResult(8, True))


def test_a_keyless_read_or_write_concerns_every_key() -> None:
    ch = Checker(3)
    ch.proposed(0, A)  # no key: an unnamed object
    ready(ch, 0, A)
    ch.read_issued(2, 1, b"k1")
    with pytest.raises(SafetyViolation, match="stale read"):
        ch.read_served(2, ReadResult(1, True))
    ch = Checker(3)
    ch.proposed(0, K1)
    ready(ch, 0, K1)
    ch.read_issued(2, 1, None)
    with pytest.raises(SafetyViolation, match="stale read"):
        ch.read_served(2, ReadResult(1, True))


def test_writes_ready_after_the_read_was_asked_and_refused_reads_are_free() -> None:
    ch = Checker(3)
    ch.proposed(0, K1)
    ch.read_issued(1, 1, b"k1")
    ready(ch, 0, K1)  # READY after the read was asked: concurrent
    ch.read_served(1, ReadResult(1, True))
    ch.read_issued(1, 2, b"k1")
    ch.read_served(1, ReadResult(2, False))  # not ok: the client falls back to the log
    assert (ch.reads_issued, ch.reads_ok, ch.reads_refused) == (2, 1, 1)


def test_a_read_answered_twice_elsewhere_or_after_a_restart_is_a_violation() -> None:
    ch = Checker(3)
    ch.read_issued(1, 1, None)
    ch.read_served(1, ReadResult(1, False))
    with pytest.raises(SafetyViolation, match="not pending"):
        ch.read_served(1, ReadResult(1, True))
    ch.read_issued(1, 2, None)
    with pytest.raises(SafetyViolation, match="asked at replica 1"):
        ch.read_served(2, ReadResult(2, True))
    ch.read_issued(1, 3, None)
    ch.crashed(1)  # the read died with the process
    with pytest.raises(SafetyViolation, match="not pending"):
        ch.read_served(1, ReadResult(3, True))


def test_a_restarted_replica_must_re_apply_before_it_serves() -> None:
    ch = Checker(3)
    ch.proposed(0, K1)
    ready(ch, 0, K1)
    ch.executed(1, [ex(0, 0, K1)])
    ch.crashed(1)
    ch.restarted(1)  # its state machine is empty again
    ch.read_issued(1, 1, b"k1")
    with pytest.raises(SafetyViolation, match="stale read"):
        ch.read_served(1, ReadResult(1, True))


def test_a_ready_command_is_required_everywhere_even_if_its_first_leader_crashed() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    ch.crashed(0)  # before READY: excused ...
    ch.check_liveness([1, 2])
    ch.proposed(1, A)  # ... until the client retried elsewhere and got READY
    ready(ch, 1, A)
    with pytest.raises(LivenessViolation, match="never executed 1 of 1"):
        ch.check_liveness([1, 2])


# -- sessions that expire ---------------------------------------------------------------


def expired(slot: int, owner: int, command: Command, *, c_index: int = 0) -> Executed:
    return Executed(slot, owner, c_index, command, None, False, session_expired=True)


def test_a_session_expired_command_is_not_an_execution_but_a_second_one_still_is() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    ch.executed(0, [expired(0, 0, A)])  # not applied, and not a violation
    assert ch.executed_count(0) == 0
    ch.executed(0, [ex(1, 0, A, c_index=1)])  # so this is its first execution
    ch.executed(0, [expired(2, 0, A, c_index=2)])  # a late retry: expired, fine
    with pytest.raises(SafetyViolation, match=r"executed \(1, 1\) a second time"):
        ch.executed(0, [ex(3, 0, A, c_index=3)])


def test_a_session_expired_command_settles_liveness_real_time_and_reads() -> None:
    ch = Checker(3)
    ch.proposed(0, K1)
    ready(ch, 0, K1)
    ch.proposed(0, B)  # proposed after K1 was READY
    ch.executed(1, [expired(0, 0, K1), ex(1, 0, B)])  # K1 reached execution first
    ch.check_liveness([1])
    assert ch.executed_everywhere([1]) and not ch.executed_everywhere([0, 1])
    with pytest.raises(LivenessViolation):
        ch.check_liveness([0])


def test_a_read_need_not_see_a_write_whose_session_expired() -> None:
    ch = Checker(3)
    for cmd in (K2, K1):
        ch.proposed(0, cmd)
    for cmd in (K2, K1):
        ready(ch, 0, cmd)
    ch.executed(1, [expired(0, 0, K1)])  # not applied; K2 (another key) not yet
    ch.read_issued(1, 1, b"k1")
    ch.read_served(1, ReadResult(1, True))


def test_expired_or_not_is_part_of_prefix_agreement() -> None:
    ch = Checker(3)
    ch.proposed(0, A)
    ch.executed(0, [ex(0, 0, A)])
    with pytest.raises(SafetyViolation, match="executed sequences diverge"):
        ch.executed(1, [expired(0, 0, A)])


def test_a_registration_may_execute_more_than_once() -> None:
    ch = Checker(3)
    reg = Command(9, 0, b"")
    ch.proposed(0, reg)
    ch.executed(0, [ex(0, 0, reg), ex(1, 0, reg, c_index=1)])  # two sessions, no harm
    assert ch.executed_count(0) == 1
