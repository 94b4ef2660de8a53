"""One test per claim the SDPaxos paper makes about the normal case.

Each test names the section of the paper (extended version, sdpaxos.pdf) whose
claim it checks. Latencies come from the deterministic timed harness with the
paper's Table 1 round trips; message-level claims use explicit delivery.
"""

import pytest

from sdpaxos.core import CAccept, CRequest, OAccept, OAck, OCommit
from tests.core.harness import (
    PAPER3_RTT_MS,
    PAPER5_RTT_MS,
    Net,
    closed_loop_latency_ms,
    uniform_rtt_ms,
)

CA, OR, OH, IRE, SEL = range(5)


def test_s4_3_three_replicas_commit_in_one_round_trip_to_the_sequencer() -> None:
    """Section 3.2 / 4.3, N = 3: latency = max(RTT to nearest peer, RTT to sequencer)."""
    lat = closed_loop_latency_ms(PAPER3_RTT_MS, sequencer=CA)
    assert lat == {CA: 20.0, OR: 20.0, OH: 52.0}


def test_s4_3_five_replicas_commit_in_one_round_trip_with_the_paper_numbers() -> None:
    """Section 4.3 / 5.4 (Fig. 12), N = 5, sequencer CA: CA 52, OR 68, OH 68, IRE 139, SEL 146."""
    lat = closed_loop_latency_ms(PAPER5_RTT_MS, sequencer=CA)
    assert lat == {CA: 52.0, OR: 68.0, OH: 68.0, IRE: 139.0, SEL: 146.0}


def test_s5_4_ire_is_bounded_by_its_round_trip_to_the_sequencer_not_its_nearest_majority() -> None:
    """Section 5.4: IRE measures ~140 ms "compared to the theoretically ideal 125 ms"."""
    lat = closed_loop_latency_ms(PAPER5_RTT_MS, sequencer=CA)
    nearest_majority_ms = sorted(PAPER5_RTT_MS[IRE][:IRE] + PAPER5_RTT_MS[IRE][IRE + 1 :])[1]
    assert nearest_majority_ms == 125
    assert lat[IRE] == PAPER5_RTT_MS[IRE][CA] == 139


def test_s3_2_seven_replicas_take_one_and_a_half_round_trips() -> None:
    """Section 3.2: for N >= 7 O-instances need a majority, so a non-sequencer takes 1.5 RTT."""
    lat = closed_loop_latency_ms(uniform_rtt_ms(7, 100.0), sequencer=0)
    assert lat[0] == 100.0
    assert all(lat[r] == 150.0 for r in range(1, 7))


def test_s3_2_three_replicas_leader_and_sequencer_form_the_majority() -> None:
    """Section 3.2, N = 3: the O-instance is committed when the sequencer's O-accept arrives,
    "the command leader and the sequencer have constituted a majority": no third replica needed."""
    net = Net.build(3, sequencer=CA, rtt_ms=PAPER3_RTT_MS)  # OR's nearest peer is CA
    net.propose(1, 7, 1)
    # Cut replica 2 off entirely: replica 1 still becomes ready.
    net.deliver_all(keep=lambda s, d, m: 2 not in (s, d))
    assert net.ready_ids(1) == [(7, 1)]
    # ...and no O-ACK was ever needed for replica 1's O-instance.
    assert not [m for s, d, m in net.sent if isinstance(m, OAck) and d == 1]


def test_s3_2_five_replicas_non_sequencer_commits_o_instance_on_the_o_accept() -> None:
    """Section 3.2 / Fig. 5 line 29, N = 5: a non-sequencer commits its O-instance on receiving
    the sequencer's O-accept; only it and the sequencer accept it (not a Paxos majority)."""
    net = Net.build(5, sequencer=CA)
    net.propose(OR, 7, 1)
    net.deliver_all()
    assert net.ready_ids(OR) == [(7, 1)]
    o_accepts = [(d, m) for s, d, m in net.sent if isinstance(m, OAccept)]
    assert [d for d, _ in o_accepts] == [OR], "thrifty: the O-accept goes only to the leader"
    o_commits = [m for s, d, m in net.sent if isinstance(m, OCommit) and s == OR]
    assert o_commits and o_commits[0].entries == ((0, 0, OR, 1),)  # (slot, ballot, owner, count)


def test_s3_2_five_replicas_sequencer_piggybacks_earlier_o_accepts() -> None:
    """Section 3.2, N = 5: the sequencer "can piggyback the O-accepts that the command leader has
    not seen on the latest O-accept sent to it"."""
    net = Net.build(5, sequencer=CA)
    net.propose(IRE, 1, 1)
    net.propose(OR, 2, 1)
    # Deliver only the C-requests/C-accepts to the sequencer in the order IRE then OR.
    net.deliver_all(keep=lambda s, d, m: not isinstance(m, OAccept) or d == OR)
    o_accepts_to_or = [m for s, d, m in net.sent if isinstance(m, OAccept) and d == OR]
    assert len(o_accepts_to_or) == 1
    (msg,) = o_accepts_to_or
    assert msg.start == 0 and msg.values == ((IRE, 1), (OR, 1))


def test_s3_2_five_replicas_ready_needs_every_earlier_o_instance_accepted_by_the_leader() -> None:
    """Fig. 5 line 30: ready only if every O_k, k <= j, is accepted by the leader and sequencer."""
    net = Net.build(5, sequencer=CA)
    leader = net.replicas[OR]
    net.propose(OR, 7, 1)
    # Let the C-instance commit but withhold every O-accept.
    net.deliver_all(keep=lambda s, d, m: not isinstance(m, OAccept))
    assert net.ready_ids(OR) == []
    # An O-accept that names only slot 1 for OR (slot 0 unseen) must not make it ready.
    leader.step(OAccept(CA, 0, 1, ((OR, 1),), 0, False), 0.0)
    net.flush(OR)
    assert net.ready_ids(OR) == []
    # Once slot 0 arrives, slot 1 is the leader's first O-instance and the command is ready.
    leader.step(OAccept(CA, 0, 0, ((SEL, 1),), 0, False), 0.0)
    net.flush(OR)
    assert net.ready_ids(OR) == [(7, 1)]


def test_s3_2_five_replicas_sequencer_own_commands_need_a_real_majority() -> None:
    """Section 3.2, N = 5: the sequencer's O-instances are committed "by a majority rather than
    by only two replicas"."""
    net = Net.build(5, sequencer=CA, rtt_ms=PAPER5_RTT_MS)
    net.propose(CA, 7, 1)
    # The sequencer's nearest majority is OR and OH. Without OH's O-ACK it is not ready,
    # even though OR's O-ACK and the C-ACKs of OR and OH arrive.
    net.deliver_all(keep=lambda s, d, m: not (isinstance(m, OAck) and s == OH))
    assert net.ready_ids(CA) == []
    net.advance(net.config.retransmit_ms)
    net.deliver_all()
    assert net.ready_ids(CA) == [(7, 1)]


def test_s3_2_the_c_request_is_sent_only_when_the_quorum_leaves_the_sequencer_out() -> None:
    """Fig. 5 lines 3-5: C-request "if that set does not include the sequencer"."""
    net = Net.build(5, sequencer=CA, rtt_ms=PAPER5_RTT_MS)
    net.propose(OR, 1, 1)  # nearest majority of OR: CA, OH -> includes the sequencer
    net.propose(IRE, 2, 1)  # nearest majority of IRE: OH, OR -> excludes it
    requests = [(s, d) for s, d, m in net.sent if isinstance(m, CRequest)]
    assert requests == [(IRE, CA)]
    c_accept_targets = sorted((s, d) for s, d, m in net.sent if isinstance(m, CAccept))
    assert c_accept_targets == [(OR, CA), (OR, OH), (IRE, OR), (IRE, OH)]


def test_s3_1_o_instances_carry_only_replica_ids_and_execution_counts() -> None:
    """Section 3.1: "the command proposed in C-instance C_n^i will be executed in the jth slot
    ... O_j is the ith O-instance for R_n in the assignment log"."""
    net = Net.build(3, sequencer=0)
    for seq in range(1, 4):
        net.propose(1, 10, seq, b"a%d" % seq)
        net.deliver_all()
        net.propose(2, 20, seq, b"b%d" % seq)
        net.deliver_all()
    # Alternating leaders -> alternating slots; each replica executes the same interleaving.
    expected = [(10, 1), (20, 1), (10, 2), (20, 2), (10, 3), (20, 3)]
    for r in range(3):
        assert net.executed_ids(r) == expected
        assert [(e.slot, e.owner, e.c_index) for e in net.executed[r]] == [
            (0, 1, 0),
            (1, 2, 0),
            (2, 1, 1),
            (3, 2, 1),
            (4, 1, 2),
            (5, 2, 2),
        ]


@pytest.mark.parametrize("replicas", [3, 5])
def test_s5_commit_latency_is_the_time_to_ready_not_to_execution(replicas: int) -> None:
    """Section 5: "commit latency" is until the command is ready; execution may come later.

    A non-sequencer's command is ready before the O-commit of another replica's earlier slot
    reaches it, so it is ready but not yet executed at that point."""
    net = Net.build(replicas, sequencer=0)
    net.propose(2, 1, 1)  # will take slot 0
    # Deliver everything except replica 2's O-commit to replica 1.
    net.deliver_all(keep=lambda s, d, m: not (isinstance(m, OCommit) and s == 2 and d == 1))
    net.propose(1, 2, 1)  # slot 1
    net.deliver_all(keep=lambda s, d, m: not (isinstance(m, OCommit) and s == 2 and d == 1))
    assert net.ready_ids(1) == [(2, 1)]
    assert net.executed_ids(1) == []  # blocked on slot 0's O-commit
    net.advance(net.config.learn_ms)
    net.deliver_all()
    assert net.executed_ids(1) == [(1, 1), (2, 1)]
