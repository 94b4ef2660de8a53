"""``sdpaxos.sim.explicit`` as a user writes protocol transcripts with it."""

import doctest

import sdpaxos.sim.explicit
from sdpaxos.core import CAccepted, CRequest
from sdpaxos.sim.explicit import Net


def test_the_module_docstring_transcript_runs() -> None:
    result = doctest.testmod(sdpaxos.sim.explicit, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8
    assert result.failed == 0


def test_a_lost_c_request_is_sent_again_and_the_command_becomes_ready() -> None:
    """Transcript: replica 1's C-request to the sequencer is lost. Its peers accept
    (the acceptance is on their storage), but nothing is ordered, so nothing is
    ready; after ``retransmit_ms`` the leader sends the C-request again."""
    net = Net.build(3, sequencer=0)
    net.propose(1, client=7, seq=1, payload=b"w")
    assert net.drop_where(lambda src, dst, msg: isinstance(msg, CRequest)) == 1
    net.deliver_all()
    assert net.ready_ids(1) == [] and net.in_flight() == []
    for r in (1, 2):  # the leader and its nearest peer made the C-instance durable
        (record,) = net.storages[r].load()
        assert isinstance(record, CAccepted) and record.owner == 1
    net.advance(net.config.retransmit_ms)
    assert (1, 0, "CRequest") in net.in_flight()
    net.deliver_all()
    assert net.ready_ids(1) == [(7, 1)]
    assert [net.executed_ids(r) for r in range(3)] == [[(7, 1)]] * 3
    assert net.kinds(lambda src, dst, msg: src == 1).count("CRequest") == 2


def test_a_partitioned_sequencer_loses_messages_until_healed() -> None:
    net = Net.build(3, sequencer=0)
    net.partition({0}, {1, 2})
    net.propose(1, client=7, seq=1)
    net.deliver_all()  # the C-request to replica 0 is lost on the cut link
    assert net.ready_ids(1) == [] and net.pending == []
    net.heal()
    net.advance(net.config.retransmit_ms)
    net.deliver_all()
    assert net.ready_ids(1) == [(7, 1)]
