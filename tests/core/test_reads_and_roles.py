"""Reads through the sequencer (paper section 3.5), straggler detection (section 4)
and handing the sequencer role over on purpose."""

from sdpaxos.core import CRequest, RReplyBatch, RRequestBatch, StragglerVote
from sdpaxos.core.types import ReplicaId, Slot, View
from tests.core.harness import PAPER3_RTT_MS, Net


def leased(net: Net) -> Net:
    """Run until the sequencer holds a lease granted by a majority."""
    for _ in range(20):
        net.run(1)
        if net.replicas[net.config.sequencer].has_lease():
            return net
    raise AssertionError("no lease")


def test_a_read_after_a_ready_write_sees_it() -> None:
    """Section 3.5: a write ready before the read is requested is applied before
    the read is served, on any replica."""
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    net.propose(1, 10, 1, b"w1", key=b"a")
    net.deliver_all()
    assert net.ready_ids(1) == [(10, 1)]
    net.replicas[2].read(7, b"a", net.now_ms)
    net.flush(2)
    net.run(5)
    [(rid, ok, applied)] = net.reads[2]
    assert (rid, ok) == (7, True)
    assert applied == 1 and net.machines[2].log == [b"w1"]


def test_the_sequencer_serves_a_read_locally() -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    net.propose(2, 10, 1, b"w", key=b"a")
    net.deliver_all()
    before = len(net.sent)
    net.replicas[0].read(1, b"a", net.now_ms)
    net.flush(0)
    net.run(2)
    assert net.reads[0] == [(1, True, 1)]
    assert not [m for s, d, m in net.sent[before:] if "RRequest" in type(m).__name__]


def test_a_read_waits_only_for_writes_of_its_object() -> None:
    """The history table (i_A): a read of "a" is answered with a's last write slot,
    not with a later slot given to a write of "b" (the table kept throughout)."""
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS, history_idle_ms=None))
    net.propose(1, 10, 1, b"wa", key=b"a")
    net.deliver_all()
    net.propose(1, 11, 1, b"wb", key=b"b")
    net.deliver_all()
    net.replicas[2].read(3, b"a", net.now_ms)
    net.flush(2)
    [request] = [m for s, d, m in net.pending if isinstance(m, RRequestBatch)]
    net.deliver_all()
    replies = [m for s, d, m in net.sent if isinstance(m, RReplyBatch)]
    # The answer names the read's ask id (not the read id 3) and a's slot, 0.
    assert request.read_ids != (3,)
    assert [(m.read_ids, m.slots, m.oks) for m in replies] == [(request.read_ids, (0,), (True,))]
    assert net.reads[2] == [(3, True, 2)]


def test_by_default_the_table_is_kept_only_from_a_read_on() -> None:
    """``history_idle_ms``: the first read after none waits for the whole log (i_G)
    and starts the table; a read that follows is answered by key again; no read
    for ``history_idle_ms`` and the next one waits for the whole log again."""
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS, history_idle_ms=1_000.0))

    def read_slot(read_id: int, key: bytes) -> int:
        net.sent.clear()
        net.replicas[2].read(read_id, key, net.now_ms)
        net.flush(2)
        net.deliver_all()
        [reply] = [m for s, d, m in net.sent if isinstance(m, RReplyBatch)]
        return reply.slots[0]

    net.propose(1, 10, 1, b"wa", key=b"a")  # slot 0: no read yet, keys not kept
    net.deliver_all()
    net.propose(1, 11, 1, b"wb", key=b"b")  # slot 1
    net.deliver_all()
    assert read_slot(3, b"a") == 1  # the whole log
    net.propose(1, 12, 1, b"wa2", key=b"a")  # slot 2: recorded
    net.deliver_all()
    net.propose(1, 13, 1, b"wc", key=b"c")  # slot 3
    net.deliver_all()
    assert read_slot(4, b"a") == 2  # a's own slot, not 3
    assert read_slot(5, b"b") == 1  # written before the table started: its floor
    net.run(1_100)  # no read for longer than history_idle_ms
    net.propose(1, 14, 1, b"wd", key=b"d")  # slot 4: the table is dropped here
    net.deliver_all()
    assert not net.replicas[0].sequencer_role.recording
    assert read_slot(6, b"a") == 4  # the whole log again


def test_a_write_with_no_named_object_makes_every_read_wait_for_it() -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    net.propose(1, 10, 1, b"wa", key=b"a")
    net.deliver_all()
    net.propose(1, 11, 1, b"anon")  # key None: it may write anything
    net.deliver_all()
    net.replicas[2].read(3, b"a", net.now_ms)
    net.flush(2)
    net.deliver_all()
    [reply] = [m for s, d, m in net.sent if isinstance(m, RReplyBatch)]
    assert reply.slots == (1,)


def test_without_a_lease_the_read_falls_back_to_the_log() -> None:
    """The sequencer answers R-requests only "as long as [it] holds unexpired leases
    granted by a majority"; otherwise the read goes through the log."""
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    net.replicas[1].read(5, b"a", net.now_ms)  # no heartbeat has been answered yet
    net.flush(1)
    net.deliver_all()
    assert net.reads[1] == [(5, False, 0)]
    assert not net.replicas[0].has_lease()


def test_a_new_sequencer_answers_with_the_whole_log_until_it_has_history() -> None:
    """Section 3.5: "When the history table is unavailable, e.g., a new sequencer has
    been just elected, i_G is also acceptable"; never "no write seen"."""
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    net.propose(2, 10, 1, b"w", key=b"a")
    net.deliver_all()
    net.crash(0)
    net.run(200)
    new = net.replicas[1]
    assert new.is_sequencer and new.has_lease()
    assert new.sequencer_role.read_slot(b"a") >= 0
    net.replicas[2].read(9, b"a", net.now_ms)
    net.flush(2)
    net.run(5)
    assert net.reads[2] == [(9, True, 1)]


def test_a_slow_sequencer_is_detected_and_replaced() -> None:
    """Section 4: a replica counting too few O-accepts for itself for 3 windows polls
    the others; when a majority agrees, a view change replaces the straggler, even
    though it still sends heartbeats."""
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS, c_batch_max=1)

    def stuck(s: int, d: int, m: object) -> bool:
        # Alive (heartbeats, acks) but ordering nothing.
        return not (type(m).__name__ in ("CAccept", "CRequest") and d == 0) and not (
            type(m).__name__ == "OAccept" and s == 0
        )

    polls = []
    for r in (1, 2):
        net.replicas[r].ctx.out.tracer = lambda e, r, f: (
            polls.append(r) if e == "StragglerSuspect" else None
        )
    client = 100
    window = round(net.config.straggler_window_ms / net.config.tick_ms)
    for _ in range(window * 8):
        for r in (1, 2):
            net.propose(r, client, 1, b"x")
            client += 1
        net.tick()
        net.deliver_all(keep=stuck)
        if net.replicas[1].sequencer not in (0, None):
            break
    assert polls, "a replica suspected the straggler"
    assert net.replicas[1].sequencer in (1, 2) and net.replicas[1].view >= 1
    assert net.replicas[1].stats.view_changes_started + net.replicas[2].stats.view_changes_started


def test_straggler_view_changes_are_rate_limited() -> None:
    net = Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS)
    rep = net.replicas[1]
    rep.straggler.polling = {1}
    rep.straggler.last_ms = rep.ctx.now_ms  # one just happened
    rep.step(StragglerVote(2, 0, True), 0.0)
    assert rep.stats.view_changes_started == 0


def test_the_sequencer_role_can_be_handed_over() -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    net.propose(1, 10, 1, b"before")
    net.deliver_all()
    net.replicas[0].transfer_sequencer(2)
    net.flush(0)
    assert not net.replicas[0].has_lease()
    net.run(20)
    assert all(net.replicas[r].sequencer == 2 for r in range(3))
    net.propose(1, 11, 1, b"after")
    net.run(20)
    first = net.executed_ids(0)
    assert first == [(10, 1), (11, 1)]
    assert all(net.executed_ids(r) == first for r in range(3))


def _c_requests(net: Net, since: int) -> list[CRequest]:
    return [m for s, d, m in net.sent[since:] if isinstance(m, CRequest)]


def test_c_requests_carry_keys_only_while_the_sequencer_keeps_its_history_table() -> None:
    """A C-request's keys fill the sequencer's history table, and nothing else:
    while the table is not kept (no read for ``history_idle_ms``, or none yet)
    its heartbeats say so and command leaders leave the keys out; a read starts
    the table, the next heartbeat asks for keys again, and the reads that follow
    wait for their key's write. With the sequencer in OH, CA's and OR's thrifty
    quorums leave it out, so both send C-requests."""
    net = leased(Net.build(3, sequencer=2, rtt_ms=PAPER3_RTT_MS))
    assert not net.replicas[0].ctx.views.keys_wanted  # the sequencer's heartbeats said so
    assert not net.replicas[2].sequencer_role.current_heartbeat().keys_wanted
    before = len(net.sent)
    net.propose(0, 10, 1, b"wa", key=b"a")
    net.propose(1, 11, 1, b"wb", key=b"b")
    net.deliver_all()
    assert sorted((m.owner, m.keys) for m in _c_requests(net, before)) == [(0, ()), (1, ())]
    # A read (at OR) starts the table: answered with the whole log.
    net.replicas[1].read(1, b"a", net.now_ms)
    net.flush(1)
    net.deliver_all()
    seq = net.replicas[2].sequencer_role
    assert seq.recording and seq.current_heartbeat().keys_wanted
    # Until the next heartbeat a write still comes without its keys: the
    # table's floor covers it, so a read of its key waits for its slot.
    before = len(net.sent)
    net.propose(0, 10, 2, b"wa2", key=b"a")
    net.deliver_all()
    assert [(m.owner, m.keys) for m in _c_requests(net, before)] == [(0, ())]
    assert b"a" not in seq.history and seq.read_slot(b"a") == seq.s.olog.acc_upto - 1
    for _ in range(2 * int(net.config.heartbeat_ms / net.config.tick_ms)):
        net.run(1)
        if net.replicas[0].ctx.views.keys_wanted:
            break
    assert net.replicas[0].ctx.views.keys_wanted and net.replicas[1].ctx.views.keys_wanted
    before = len(net.sent)
    net.propose(0, 10, 3, b"wa3", key=b"a")
    net.deliver_all()
    net.propose(1, 11, 2, b"wc", key=b"c")
    net.deliver_all()
    assert sorted((m.owner, m.keys) for m in _c_requests(net, before)) == [
        (0, (b"a",)),
        (1, (b"c",)),
    ]
    history = seq.history
    assert history[b"c"] > history[b"a"]  # a read of a waits for a's write, not c's
    assert seq.read_slot(b"a") == history[b"a"]


def test_a_new_view_sends_keys_until_its_sequencer_says_otherwise() -> None:
    """A replica knows only its own sequencer's table: a view it establishes
    starts with keys wanted (the safe side: keys a sequencer does not keep cost
    it nothing but their decoding)."""
    net = leased(Net.build(3, sequencer=2, rtt_ms=PAPER3_RTT_MS))
    views = net.replicas[0].ctx.views
    assert not views.keys_wanted
    views.establish(View(views.view + 1), ReplicaId(1), Slot(0), Slot(0))
    assert views.keys_wanted
