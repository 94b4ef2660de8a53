"""The normal-case rules of the core, one behaviour per test."""

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpaxos.core import (
    CAccept,
    CAck,
    CCommit,
    ClusterConfig,
    Command,
    ConfigError,
    CRequest,
    LearnRequest,
    LocalProtocolError,
    OAccept,
    OAck,
    OCommit,
    Overloaded,
    Replica,
    ReplyKind,
    SequencerHandover,
    Wait,
    decode_session_id,
)
from sdpaxos.core.messages import Heartbeat, LeaseGrant, NewView
from tests.core.harness import PAPER5_RTT_MS, Net, Register
from tests.core.state import whole_state


def fingerprint(rep: Replica) -> Any:
    """Everything about the replica, for "bad input changes nothing" checks."""
    return whole_state(rep)


# ---------------------------------------------------------------- allocation guard


def sequencer(n: int = 3, **cfg: Any) -> Replica:
    return Replica(ClusterConfig(replicas=n, sequencer=0, **cfg), 0, Register())


@settings(max_examples=200, derandomize=True)
@given(
    st.lists(
        st.tuples(st.sampled_from(["accept", "request"]), st.integers(1, 2), st.integers(0, 9)),
        min_size=1,
        max_size=40,
    )
)
def test_allocation_guard_never_over_allocates(events: list[tuple[str, int, int]]) -> None:
    """Fig. 5 line 13 / pitfall 1: however C-accepts and C-requests for an owner's
    C-instances are duplicated or reordered, the sequencer covers exactly
    (highest index heard + 1) C-instances of that owner, never more."""
    seq = sequencer(3, o_batch_max=3)
    highest = {1: -1, 2: -1}
    for kind, owner, index in events:
        if kind == "accept":
            seq.step(CAccept(owner, 0, owner, index, owner, (Command(0, 0, b""),)), 0.0)
        else:
            seq.step(CRequest(owner, 0, owner, index, 0, ()), 0.0)
        seq.ready()
        highest[owner] = max(highest[owner], index)
        for o in (1, 2):
            covered = sum(
                c for own, c in zip(seq.ctx.olog.owner, seq.ctx.olog.count, strict=True) if own == o
            )
            assert covered == highest[o] + 1
    assert all(1 <= c <= 3 for c in seq.ctx.olog.count)


def test_retransmitted_c_request_resends_lost_o_accepts_without_allocating() -> None:
    seq = sequencer(3)
    seq.step(CRequest(1, 0, 1, 0, 0, ()), 0.0)
    first = [m for _, m in seq.ready().messages if isinstance(m, OAccept)]
    assert [(m.start, m.values) for m in first] == [(0, ((1, 1),))]
    seq.step(CRequest(1, 0, 1, 0, 0, ()), 0.0)  # the O-accept was lost; the owner asks again
    again = [m for _, m in seq.ready().messages if isinstance(m, OAccept)]
    assert [(m.start, m.values) for m in again] == [(0, ((1, 1),))]
    assert seq.ctx.olog.owner == [1]


# ------------------------------------------------------------------------ batching


def test_commands_are_batched_into_c_instances_of_bounded_size() -> None:
    net = Net.build(3, c_batch_max=4)
    rep = net.replicas[1]
    for s in range(10):
        rep.propose(Command(100 + s, 1, b"p"))
    net.flush(1)
    accepts = [m for s, d, m in net.sent if isinstance(m, CAccept)]
    assert sorted({m.index: len(m.commands) for m in accepts}.items()) == [(0, 4), (1, 4), (2, 2)]
    net.deliver_all()
    assert len(net.ready_ids(1)) == 10
    assert all(len(net.executed[r]) == 10 for r in range(3))


def test_o_instances_cover_several_c_instances_of_one_replica_bounded() -> None:
    """Section 4 O-instance batching: one O-instance may order several C-instances."""
    seq = sequencer(3, o_batch_max=4)
    seq.step(CRequest(1, 0, 1, 9, 0, ()), 0.0)  # C-instances 0..9 of replica 1 exist
    seq.ready()
    assert list(zip(seq.ctx.olog.owner, seq.ctx.olog.count, strict=True)) == [
        (1, 4),
        (1, 4),
        (1, 2),
    ]


def test_five_replicas_non_sequencer_o_instances_cover_one_c_instance() -> None:
    """With N = 5 the view change infers one C-instance per hole, so counts stay 1."""
    seq = sequencer(5, o_batch_max=8)
    seq.step(CRequest(3, 0, 3, 2, 0, ()), 0.0)
    seq.ready()
    assert list(zip(seq.ctx.olog.owner, seq.ctx.olog.count, strict=True)) == [(3, 1)] * 3


def test_batched_o_instances_execute_by_counting() -> None:
    net = Net.build(3, o_batch_max=8, c_batch_max=1, c_inflight_max=8)
    for s in range(1, 6):
        net.replicas[1].propose(Command(50 + s, 1, b"c%d" % s))
    net.flush(1)
    # The sequencer steps everything in its inbox before one ready(): that is
    # where O-instance batching happens (as a driver draining its inbox does).
    to_seq = [p for p in net.pending if p[1] == 0]
    net.pending = [p for p in net.pending if p[1] != 0]
    for _, _, msg in to_seq:
        net.replicas[0].step(msg, net.now_ms)
    net.flush(0)
    net.deliver_all()
    owners = net.replicas[0].ctx.olog.owner
    assert owners == [1], "five C-instances shared one O-instance"
    for r in range(3):
        assert [e.c_index for e in net.executed[r]] == [0, 1, 2, 3, 4]


# --------------------------------------------------------------- ready vs executed


def test_wait_ready_replies_without_result_and_wait_executed_with_result() -> None:
    net = Net.build(3)
    net.propose(1, 1, 1, b"a", wait=Wait.READY)
    net.propose(1, 2, 1, b"b", wait=Wait.EXECUTED)
    net.deliver_all()
    replies = {(r.client_id, r.kind): r.result for r in net.replies[1]}
    assert replies[(1, ReplyKind.READY)] is None
    assert (2, ReplyKind.READY) not in replies
    assert replies[(2, ReplyKind.EXECUTED)] in (b"1", b"2")
    assert len(net.replies[1]) == 2


# -------------------------------------------------------------------- idempotence


@pytest.mark.parametrize("replicas", [3, 5])
def test_duplicating_every_message_changes_nothing(replicas: int) -> None:
    plain = Net.build(replicas)
    doubled = Net.build(replicas)
    for net in (plain, doubled):
        for r in range(replicas):
            net.propose(r, 10 + r, 1, b"v%d" % r)
    plain.deliver_all()
    while doubled.pending:
        _, dst, msg = doubled.pending.pop(0)
        for _ in range(2):
            doubled.replicas[dst].step(msg, doubled.now_ms)
            doubled.flush(dst)
    for r in range(replicas):
        assert doubled.executed_ids(r) == plain.executed_ids(r)
        assert sorted(doubled.ready_ids(r)) == sorted(plain.ready_ids(r))
        assert len(doubled.replies[r]) == len(plain.replies[r]) == 1


@settings(max_examples=60, derandomize=True)
@given(st.integers(0, 2**32), st.sampled_from([3, 5]))
def test_any_delivery_order_with_duplicates_agrees(seed: int, replicas: int) -> None:
    rnd = random.Random(seed)
    net = Net.build(replicas)
    for r in range(replicas):
        for s in (1, 2):
            net.propose(r, 10 + r, s, b"%d-%d" % (r, s))
    steps = 0
    while net.pending and steps < 5000:
        steps += 1
        i = rnd.randrange(len(net.pending))
        if rnd.random() < 0.2:
            net.pending.append(net.pending[i])
        net.deliver_one(i)
    assert not net.pending
    first = net.executed_ids(0)
    assert sorted(first) == sorted((10 + r, s) for r in range(replicas) for s in (1, 2))
    for r in range(replicas):
        assert net.executed_ids(r) == first
        assert len(net.ready_ids(r)) == 2


# ---------------------------------------------------------------------- proximity


def test_thrifty_quorum_follows_configured_proximity() -> None:
    rep = Replica(ClusterConfig(replicas=5, rtt_ms=PAPER5_RTT_MS), 3, Register())  # IRE
    rep.propose(Command(1, 1, b""))
    targets = sorted(d for d, m in rep.ready().messages if isinstance(m, CAccept))
    assert targets == [1, 2]  # OR 125 ms and OH 84 ms are IRE's nearest


def test_thrifty_quorum_follows_measured_proximity() -> None:
    rep = Replica(ClusterConfig(replicas=5), 3, Register())
    for peer, rtt in ((0, 139), (1, 125), (2, 84), (4, 229)):
        rep.observe_rtt(peer, rtt)
    rep.propose(Command(1, 1, b""))
    targets = sorted(d for d, m in rep.ready().messages if isinstance(m, CAccept))
    assert targets == [1, 2]
    for _ in range(20):  # the link to SEL becomes the fastest
        rep.observe_rtt(4, 1.0)
    rep.propose(Command(1, 2, b""))
    targets = sorted(d for d, m in rep.ready().messages if isinstance(m, CAccept))
    assert targets == [2, 4]


def test_non_thrifty_sends_to_everyone() -> None:
    rep = Replica(ClusterConfig(replicas=5, thrifty=False), 1, Register())
    rep.propose(Command(1, 1, b""))
    assert sorted(d for d, m in rep.ready().messages if isinstance(m, CAccept)) == [0, 2, 3, 4]


# ---------------------------------------------------------------------- bad input

BAD_MESSAGES = [
    CAccept(1, 0, 7, 0, 1, ()),  # owner out of range
    CAccept(1, 0, 1, -1, 1, ()),  # negative index
    CAccept(1, 0, 1, 0, -5, ()),  # negative ballot
    CAccept(1, 0, 1, 0, 1, tuple(Command(0, 0, b"") for _ in range(300))),  # oversized
    CAccept(9, 0, 1, 0, 1, ()),  # sender out of range
    CAccept(0, 0, 1, 0, 1, ()),  # claims to come from the recipient itself
    CAck(1, 0, 9, 0, 1),  # ack for an owner that does not exist
    CAck(1, 0, 0, -3, 0),  # ack for a negative index
    CCommit(1, 0, 1, 1 << 30, 1, ()),  # beyond the window
    CRequest(1, 0, 2, 0, 0, ()),  # request on behalf of another replica
    CRequest(1, 0, 1, 0, 10**6, ()),  # claims to have accepted unknown slots
    OAccept(1, 0, 0, ((1, 1),), 0, False),  # O-accept from a non-sequencer
    OAck(1, 0, 5),  # acks slots that do not exist
    OCommit(1, 0, ((0, 0, 1, 0),)),  # count 0 for a real owner
    OCommit(1, 0, ((0, 0, -1, 3),)),  # no-cl with a count
    OCommit(1, 0, ((0, 0, 1, 99),)),  # count beyond o_batch_max
    LearnRequest(1, 0, -7, ()),
    LearnRequest(1, 0, 0, ((1, -1),)),
    "not a message",
    None,
]


@pytest.mark.parametrize("bad", BAD_MESSAGES, ids=lambda m: repr(m)[:50])
def test_bad_peer_input_is_rejected_and_changes_nothing(bad: Any) -> None:
    """The whole state (every field of every role) is as it was, and the sender
    stays suspected: a refused message is no sign of life."""
    rep = sequencer(3)
    rep.propose(Command(1, 1, b"x"))
    rep.ctx.prox.suspect(1)
    rep.ctx.prox.suspect(2)
    rep.tick(50.0)
    rep.ready()
    before = fingerprint(rep)
    rep.step(bad, 50.0)
    assert rep.stats.rejected == 1
    assert fingerprint(rep) == before
    assert not rep.ready()


#: Bad messages from the sequencer itself, to a follower.
BAD_FROM_THE_SEQUENCER = [
    OAccept(0, 0, -1, ((1, 1),), 0, False),  # negative start
    OAccept(0, 0, 0, ((1, 1),), 3, False),  # base other than the view's
    Heartbeat(0, 0, -1, 1, -1),  # negative log length
    Heartbeat(0, 0, 0, 1, 4),  # base other than the view's
    OCommit(0, 0, ((0, 0, 1, 0),)),  # count 0 for a real owner
    NewView(0, 0, 0, ((1, 1),)),  # does not match view 0's (empty) range
    LeaseGrant(0, 0, "stamp"),
    SequencerHandover(1, 0, 2),  # a hand-over not from the sequencer
]


@pytest.mark.parametrize("bad", BAD_FROM_THE_SEQUENCER, ids=lambda m: repr(m)[:50])
def test_bad_input_from_the_sequencer_does_not_count_as_contact(bad: Any) -> None:
    """Found in review: ``step`` renewed contact with the sequencer (and cleared
    suspicions) before the handler refused the message."""
    rep = Replica(ClusterConfig(replicas=3, sequencer=0), 2, Register())
    rep.tick(0.0)
    rep.step(Heartbeat(0, 0, 0, 1, -1), 0.0)
    rep.tick(300.0)
    rep.ready()
    before = fingerprint(rep)
    rep.step(bad, 300.0)
    assert rep.stats.rejected == 1
    assert fingerprint(rep) == before
    assert rep.election.seq_contact_ms == 0.0


def test_conflicting_o_accept_in_one_view_is_rejected_whole() -> None:
    rep = Replica(ClusterConfig(replicas=3), 1, Register())
    rep.step(OAccept(0, 0, 0, ((2, 1), (1, 1)), 0, False), 0.0)
    rep.ready()
    before = fingerprint(rep)
    # slot 1 was (1, 1): conflict
    rep.step(OAccept(0, 0, 1, ((2, 1), (2, 1), (2, 1)), 0, False), 0.0)
    assert rep.stats.rejected == 1
    assert fingerprint(rep) == before


def test_stale_view_is_dropped() -> None:
    """A C-accept of an older view is not accepted; the sequencer answers with
    where it is (a heartbeat of its view)."""
    rep = sequencer(3)
    rep.ctx.views.view = 2  # as if two view changes had happened
    rep.tick(0.0)
    rep.ready()
    rep.step(CAccept(1, 1, 1, 0, 1, ()), 0.0)
    assert rep.stats.stale == 1
    assert rep.ctx.clog.get(1, 0) is None
    rd = rep.ready()
    assert not rd.persist
    assert [(dst, type(m).__name__, m.view) for dst, m in rd.messages] == [(1, "Heartbeat", 2)]


def test_stale_ballot_c_accept_is_not_accepted() -> None:
    rep = Replica(ClusterConfig(replicas=3), 2, Register())
    rep.step(CAccept(1, 0, 1, 0, 257, (Command(1, 1, b"new"),)), 0.0)  # round 1 ballot
    rep.ready()
    rep.step(CAccept(1, 0, 1, 0, 1, (Command(1, 1, b"old"),)), 0.0)  # the owner's round 0
    rd = rep.ready()
    assert not rd.messages and not rd.persist
    assert rep.ctx.clog.logs[1][0].commands == (Command(1, 1, b"new"),)


# ------------------------------------------------------------------- exactly once


def test_same_command_at_two_leaders_executes_once_and_both_get_the_result() -> None:
    net = Net.build(3)
    net.propose(1, 42, 1, b"once", wait=Wait.EXECUTED)
    net.propose(2, 42, 1, b"once", wait=Wait.EXECUTED)
    net.deliver_all()
    for r in range(3):
        assert net.machines[r].log == [b"once"]
        assert [e.duplicate for e in net.executed[r]] == [False, True]
    results = {r: [x.result for x in net.replies[r]] for r in (1, 2)}
    assert results == {1: [b"1"], 2: [b"1"]}


def test_a_registered_client_is_answered_session_expired_once_its_session_expired() -> None:
    """Through the replicas: registration answers the nonce with the session id;
    the session's command executes once; after ``session_lifetime_slots`` idle
    slots its retry is answered SESSION_EXPIRED at its leader and applied nowhere."""
    net = Net.build(3, session_lifetime_slots=2)
    net.propose(1, 500, 0, b"", wait=Wait.EXECUTED)  # registration(500)
    net.deliver_all()
    (reply,) = net.replies[1]
    assert reply.kind is ReplyKind.EXECUTED and reply.client_id == 500
    sid = decode_session_id(reply.result)
    net.propose(2, sid, 1, b"a", wait=Wait.EXECUTED)
    net.deliver_all()
    net.propose(0, 600, 0, b"", wait=Wait.EXECUTED)  # registration(600): a busy client
    net.deliver_all()
    busy = decode_session_id(net.replies[0][-1].result)
    for seq, filler in enumerate((b"f1", b"f2", b"f3"), start=1):  # slots go by
        net.propose(0, busy, seq, filler)
        net.deliver_all()
    net.propose(0, sid, 1, b"a", wait=Wait.EXECUTED)  # the client's late retry
    net.deliver_all()
    assert [(x.kind, x.result) for x in net.replies[0] if x.client_id == sid] == [
        (ReplyKind.SESSION_EXPIRED, None)
    ]
    for r in range(3):
        assert net.machines[r].log == [b"a", b"f1", b"f2", b"f3"]
        assert [e.session_expired for e in net.executed[r] if e.command.client_id == sid] == [
            False,
            True,
        ]
        assert net.replicas[r].stats.sessions_expired == 1


def test_a_command_without_a_session_is_refused_at_propose() -> None:
    """``client_id`` 0 means no session, so nothing could answer such a command
    if a snapshot compacted its C-instance after a recoverer made it a no-op: it
    may have executed (its value is not known here) and cannot be proposed again
    without risking a second execution. ``forget_below`` dropped it unanswered;
    now ``propose`` refuses it, as the runtime refuses ``client_id`` 0 from
    clients, and nothing changes."""
    replica = Replica(ClusterConfig(replicas=3), 0, Register())
    with pytest.raises(LocalProtocolError, match="client_id 0 has no session"):
        replica.propose(Command(0, 1, b"x"))
    assert replica.proposals_waiting == 0 and not replica.ready()


# ------------------------------------------------------------------------- limits


def test_proposal_queue_is_bounded() -> None:
    rep = Replica(ClusterConfig(replicas=3, propose_queue_max=2), 0, Register())
    rep.propose(Command(1, 1, b""))
    rep.propose(Command(2, 1, b""))
    with pytest.raises(Overloaded):
        rep.propose(Command(3, 1, b""))


def test_inflight_window_bounds_started_c_instances() -> None:
    net = Net.build(3, c_batch_max=1, c_inflight_max=2)
    for s in range(5):
        net.replicas[1].propose(Command(10 + s, 1, b""))
    net.flush(1)
    assert net.replicas[1].status().inflight == 2
    net.deliver_all()
    assert len(net.ready_ids(1)) == 5


def test_propose_rejects_non_commands() -> None:
    rep = sequencer(3)
    with pytest.raises(LocalProtocolError):
        rep.propose(b"raw bytes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"replicas": 3.0},  # (an even N is allowed: a membership passes through 4 and 6)
        {"replicas": 0},
        {"replicas": 3, "sequencer": 3},
        {"replicas": 3, "c_batch_max": 0},
        {"replicas": 3, "retransmit_ms": -1},
        {"replicas": 3, "rtt_ms": ((0, 1), (1, 0))},
        {"replicas": 3, "rtt_ms": ((0, 1, 2), (1, 0, 2), (2, -2, 0))},
    ],
)
def test_bad_config_is_a_clear_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ClusterConfig(**kwargs)


def test_replica_id_must_be_in_the_cluster() -> None:
    with pytest.raises(LocalProtocolError):
        Replica(ClusterConfig(replicas=3), 3, Register())


# ------------------------------------------------------------ loss and recovery of messages


@pytest.mark.parametrize(
    "lost", ["CAccept", "CAck", "CRequest", "OAccept", "OAck", "CCommit", "OCommit"]
)
def test_each_lost_message_kind_is_recovered_by_retransmission(lost: str) -> None:
    net = Net.build(5, sequencer=0, rtt_ms=PAPER5_RTT_MS)
    for r in range(5):
        net.propose(r, 10 + r, 1, b"%d" % r)
    dropped = 0

    def keep(s: int, d: int, m: Any) -> bool:
        nonlocal dropped
        if type(m).__name__ == lost and dropped < 3:
            dropped += 1
            return False
        return True

    net.deliver_all(keep=keep)
    assert dropped > 0
    for _ in range(10):
        net.advance(net.config.retransmit_ms)
        net.deliver_all()
    first = net.executed_ids(0)
    assert len(first) == 5
    for r in range(5):
        assert net.executed_ids(r) == first
        assert len(net.ready_ids(r)) == 1
