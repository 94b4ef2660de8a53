"""Each checker is shown to catch a synthetic bad history (and to pass a good one)."""

import pytest

from sdpaxos.core import CAccepted, Command, Executed, OAccepted, Reply, ReplyKind
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
    with pytest.raises(SafetyViolation, match="proposed at replica 1"):
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
