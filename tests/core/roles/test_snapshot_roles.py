"""The snapshot rules of single roles: below a snapshot, answer with it."""

from sdpaxos.core.election import Candidacy, Election
from sdpaxos.core.learner import Learner
from sdpaxos.core.messages import LearnRequest, Vote
from sdpaxos.core.snapshots import Snapshots
from sdpaxos.core.types import ReplicaId, Slot
from sdpaxos.sim.explicit import Register
from tests.core.roles.conftest import Recorder, make_ctx


def test_a_learn_request_below_the_snapshot_is_answered_with_it(rec: Recorder) -> None:
    s = make_ctx()
    s.olog.compact(Slot(10), [4, 3, 3])
    s.clog.compact((4, 3, 3))
    learner = Learner(s, rec)  # type: ignore[arg-type]
    learner.handle_learn_request(LearnRequest(ReplicaId(1), 0, Slot(6), ()))
    assert rec.calls == [("offer_snapshot", (1,))]
    rec.calls.clear()
    learner.handle_learn_request(LearnRequest(ReplicaId(2), 0, Slot(-1), ((ReplicaId(0), 2),)))
    assert rec.calls == [("offer_snapshot", (2,))]
    rec.calls.clear()
    learner.handle_learn_request(LearnRequest(ReplicaId(2), 0, Slot(10), ((ReplicaId(0), 4),)))
    assert rec.calls == []  # at or above the snapshot: answered from the logs


def test_a_vote_from_above_the_candidates_start_is_not_counted(rec: Recorder) -> None:
    s = make_ctx(replicas=5, me=1)  # one vote is no majority
    election = Election(s, rec)  # type: ignore[arg-type]
    election.candidate = Candidacy(1, Slot(3), 0.0)  # type: ignore[arg-type]
    vote = Vote(ReplicaId(2), 1, Slot(3), (), (-1,) * 5, 0, ReplicaId(0), Slot(0), Slot(9), Slot(8))
    election.handle_vote(vote)
    assert election.candidate.votes == {}
    assert ("ask_snapshot", (2,)) in rec.calls
    below = Vote(
        ReplicaId(0), 1, Slot(3), (), (-1,) * 5, 0, ReplicaId(0), Slot(0), Slot(9), Slot(3)
    )
    election.handle_vote(below)
    assert set(election.candidate.votes) == {0}


def test_a_captured_snapshot_waits_for_the_majority_executed_point(rec: Recorder) -> None:
    s = make_ctx(snapshot_slots_min=4)
    rec.answers["dump_sessions"] = ()
    rec.answers["next_c_index"] = 0
    snaps = Snapshots(s, rec, Register())  # type: ignore[arg-type]
    s.olog.grow(8)
    s.progress.slot = Slot(6)
    snaps.after_execute()
    assert snaps.captured is not None and snaps.captured.slot == 6
    assert s.olog.base == 0 and s.out.snapshot is None
    snaps.heard_majority_executed(Slot(5))
    assert s.olog.base == 0 and s.out.snapshot is None
    snaps.heard_majority_executed(Slot(6))
    assert s.olog.base == 6 and s.out.snapshot is not None and s.out.snapshot.slot == 6


def test_a_transfer_executed_past_is_dropped_so_learning_resumes(rec: Recorder) -> None:
    """Found by the long sweep (seed 700103, N = 3): a replica installed one
    snapshot while fetching another of the same slot; the fetch never finished
    and, while it ran, the replica sent no learn requests at all."""
    from sdpaxos.core.snapshots import Transfer

    s = make_ctx()
    snaps = Snapshots(s, rec, Register())  # type: ignore[arg-type]
    snaps.transfer = Transfer(ReplicaId(1), Slot(5), 100, bytearray(b"x" * 10), 0.0, 0.0)
    s.progress.slot = Slot(4)
    snaps.tick(1.0)
    assert snaps.transfer is not None  # still worth finishing
    s.progress.slot = Slot(5)
    snaps.tick(2.0)
    assert snaps.transfer is None
