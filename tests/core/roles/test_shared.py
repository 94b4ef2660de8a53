"""The shared pieces: quorum rules (against a brute-force oracle), logs, views, outbox."""

from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sdpaxos.core.clog import CLog
from sdpaxos.core.errors import InvariantViolation, PeerMessageError
from sdpaxos.core.messages import CAck
from sdpaxos.core.olog import OLog
from sdpaxos.core.outbox import Outbox
from sdpaxos.core.quorum import (
    accept_quorum,
    leader_and_sequencer_suffice,
    learns_c_on_accept,
    majority,
    majority_prefix,
    two_acceptor_prefix,
)
from sdpaxos.core.storage import CAccepted
from sdpaxos.core.types import Command
from sdpaxos.core.views import TRANSITIONS, ViewEvent, ViewPhase, ViewState

acked_lists = st.integers(3, 7).flatmap(
    lambda n: st.lists(st.integers(-1, 12), min_size=n, max_size=n)
)


def oracle_majority_prefix(acked: list[int]) -> int:
    """The longest prefix some majority of replicas all accepted, by trying every quorum."""
    q = majority(len(acked))
    return max(min(acked[p] for p in quorum) for quorum in combinations(range(len(acked)), q))


@given(acked_lists)
def test_majority_prefix_matches_the_oracle(acked: list[int]) -> None:
    assert majority_prefix(acked, majority(len(acked))) == oracle_majority_prefix(acked)


@given(st.lists(st.integers(-1, 12), min_size=5, max_size=5), st.integers(0, 4), st.integers(0, 4))
def test_two_acceptor_prefix_matches_the_oracle(acked: list[int], me: int, seq: int) -> None:
    """N = 5: safe up to p iff this replica and the sequencer both accepted up to p."""
    oracle = max(p for p in range(-1, 13) if acked[me] >= p and acked[seq] >= p)
    assert two_acceptor_prefix(acked, me, seq) == oracle


def test_majority_sizes() -> None:
    assert [majority(n) for n in (1, 3, 5, 7)] == [1, 2, 3, 4]


@pytest.mark.parametrize("n", range(1, 8))
def test_every_phase_1_quorum_meets_every_phase_2_quorum(n: int) -> None:
    """Flexible Paxos: a view change's votes (a majority) must include one
    acceptor of whatever a phase-2 quorum chose. Checked on every pair of sets."""
    members = range(n)
    for q1 in combinations(members, majority(n)):
        for q2 in combinations(members, accept_quorum(n)):
            assert set(q1) & set(q2), (n, q1, q2)


def test_phase_2_quorums_are_smaller_only_at_four() -> None:
    """N = 4 chooses with its leader and the sequencer (one round trip, like
    N = 3); everywhere else a phase-2 quorum is a majority."""
    assert [accept_quorum(n) for n in range(1, 8)] == [1, 2, 2, 2, 3, 4, 4]
    assert [leader_and_sequencer_suffice(n) for n in range(1, 8)] == [
        True, True, True, True, True, False, False
    ]  # fmt: skip
    assert [learns_c_on_accept(n) for n in range(1, 8)] == [
        False, True, True, True, False, False, False
    ]  # fmt: skip


def test_olog_grows_its_columns_together_and_refuses_beyond_the_window() -> None:
    olog = OLog(3)
    olog.grow(4)
    assert len(olog.owner) == len(olog.count) == len(olog.ballot) == len(olog.cballot) == 4
    with pytest.raises(PeerMessageError):
        olog.grow_within(11, limit=10)
    assert len(olog) == 4


def test_olog_finds_revocations_and_conflicts() -> None:
    olog = OLog(3)
    olog.grow(3)
    olog.owner[:3], olog.count[:3], olog.ballot[:3] = [1, 2, 1], [1, 1, 1], [0, 0, 1]
    assert olog.revoked_executed(0, ((1, 1), (2, 1)), executed_end=2) is None
    assert olog.revoked_executed(0, ((1, 1), (0, 1)), executed_end=2) == 1
    assert olog.conflict_at_ballot(0, ((1, 1), (0, 1)), ballot=0) == 1
    assert olog.conflict_at_ballot(2, ((0, 1),), ballot=0) is None  # slot 2 is ballot 1


def test_olog_known_prefix_and_forgetting_old_commits() -> None:
    olog = OLog(3)
    olog.grow(4)
    olog.ballot[:4] = [2, 2, 1, 2]
    olog.committed[2] = True
    assert olog.advance_known(executed=0, view=2) == 4
    olog.forget_commits_before(view=2, executed_end=1)
    assert olog.committed[2] is False and olog.known_upto == 1


def test_clog_accept_tracks_c_max_and_returns_the_record() -> None:
    clog = CLog(3)
    inst = clog.entry(1, 5)
    record = clog.accept(1, 5, inst, 7, (Command(1, 1, b"x"),))
    assert record == CAccepted(1, 5, 7, (Command(1, 1, b"x"),))
    assert clog.c_max == [-1, 5, -1] and inst.promised == 7


def test_view_phases_follow_the_table() -> None:
    views = ViewState(me=1, sequencer=0)
    assert views.phase is ViewPhase.FOLLOWING and views.sequencer == 0
    views.move(ViewEvent.VOTE)
    assert views.sequencer is None
    views.establish(3, sequencer=1, start=0, base=4)
    assert views.phase is ViewPhase.LEADING and views.is_sequencer and views.established
    views.move(ViewEvent.VOTE)
    with pytest.raises(InvariantViolation):
        views.move(ViewEvent.RESTART_FOLLOWING)  # only from the configuration's view 0
    assert all(after in ViewPhase for _, after in TRANSITIONS.values())


def test_outbox_hands_over_in_order_and_starts_empty() -> None:
    out = Outbox(0, None)
    out.send(2, CAck(0, 0, 0, 0, 0))
    out.broadcast([1, 2], CAck(0, 0, 0, 1, 0))
    rd = out.take()
    assert [(d, m.index) for d, m in rd.messages] == [(2, 0), (1, 1), (2, 1)]
    assert not out.take()
