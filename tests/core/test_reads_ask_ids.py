"""Ask ids: an answer serves the ask it answers, never a later read under the same read id.

The embedder chooses read ids and may reuse one: once its read completed, or
after a restart (the runtime node counts them from 1 in every process). When
the reader matched an answer by read id, a delayed or duplicated answer to an
earlier read N served a later read N with a slot computed before that read
began: a stale read. Each scenario below is that interleaving; the stale answer
must change nothing, and each read must still be answered by its own reply.
"""

import random

from sdpaxos.core import Replica
from sdpaxos.core.messages import Message, RReplyBatch, RRequestBatch
from sdpaxos.core.reads import ASK_BASE_END, Reads, ask_base
from sdpaxos.wire.codec import decode, encode
from tests.core.harness import PAPER3_RTT_MS, Net
from tests.core.roles.conftest import Recorder, make_ctx
from tests.core.state import whole_state
from tests.core.test_reads_batching import _now, answer, leased, results


def _take(net: Net, kind: type) -> list[object]:
    """Take every in-flight message of type ``kind`` off the network (held back)."""
    taken = [m for _, _, m in net.pending if isinstance(m, kind)]
    net.drop_where(lambda s, d, m: isinstance(m, kind))
    return taken


def _write_unheard_by(net: Net, r: int) -> None:
    """The run's first write, of key ``a``, becomes READY at replica 2 while
    nothing reaches ``r``: it has slot 0."""
    net.propose(2, 10, 1, b"w", key=b"a")
    net.deliver_all(keep=lambda s, d, m: d != r)
    assert net.ready_ids(2) == [(10, 1)]
    assert net.machines[r].log == []  # r has not applied it


def _ask_and_answer(net: Net) -> None:
    """Deliver the R-requests in flight, and the sequencer's answers, now."""
    net.deliver_where(lambda s, d, m: isinstance(m, RRequestBatch | RReplyBatch))


def _changes_nothing(rep: Replica, m: Message) -> None:
    """Step ``m`` (from the sequencer, of the current view) into ``rep``: only the
    note that the sequencer was heard from may move, as for any of its messages."""
    before = whole_state(rep)
    contact = rep.election.seq_contact_ms
    rep.step(m, _now(rep))
    assert rep.election.seq_contact_ms == rep.ctx.now_ms  # heard from, by design
    rep.election.seq_contact_ms = contact
    assert whole_state(rep) == before


def _catch_up(net: Net, r: int) -> None:
    for _ in range(100):
        if net.machines[r].log:
            return
        net.run(1)
    raise AssertionError(f"replica {r} never applied the write")


# ------------------------------------------------------------------ the scenarios


def test_a_reply_to_an_earlier_incarnations_read_does_not_serve_a_new_read_of_its_id() -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    # Incarnation 1 of replica 1 (rng Random(1)) reads a as read 5; the
    # sequencer answers (a has no write: slot -1), but the answer is delayed.
    net.replicas[1].read(5, b"a", net.now_ms)
    net.flush(1)
    [old_request] = _take(net, RRequestBatch)
    net.replicas[0].step(old_request, net.now_ms)
    net.flush(0)
    [old_reply] = _take(net, RReplyBatch)
    assert isinstance(old_reply, RReplyBatch) and old_reply.slots == (-1,) and old_reply.oks
    # Replica 1 restarts: rebuilt from its records, with a fresh rng (Random(101)).
    net.crash(1)
    net.restart(1)
    net.run(5)
    rep = net.replicas[1]
    assert rep.view == 0 and rep.sequencer == 0 and net.replicas[0].has_lease()
    _write_unheard_by(net, 1)
    # Its new process counts read ids from 1 again: read 5 is a new read of a,
    # which must see the write.
    rep.read(5, b"a", net.now_ms)
    net.flush(1)
    [new_request] = [m for _, _, m in net.pending if isinstance(m, RRequestBatch)]
    assert isinstance(new_request, RRequestBatch) and isinstance(old_request, RRequestBatch)
    assert new_request.read_ids != old_request.read_ids
    # The old incarnation's answer arrives now: not an ask of this incarnation.
    _changes_nothing(rep, old_reply)
    net.flush(1)
    assert net.reads[1] == []  # not served with a slot from before the read began
    # The new read is answered by its own reply, once replica 1 applied the write.
    _ask_and_answer(net)
    assert rep.reads.pending == {5: 0}  # the write's slot and net.reads[1] == []
    _catch_up(net, 1)
    assert net.reads[1] == [(5, True, 1)]


def test_a_duplicate_reply_after_the_read_id_is_reused_serves_nothing() -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    rep = net.replicas[1]
    # Read 5 of a, answered (slot -1: no write of a yet) and served.
    rep.read(5, b"a", net.now_ms)
    net.flush(1)
    net.deliver_where(lambda s, d, m: isinstance(m, RRequestBatch))
    [first_reply] = [m for _, _, m in net.pending if isinstance(m, RReplyBatch)]
    net.deliver_all()
    assert net.reads[1] == [(5, True, 0)]
    _write_unheard_by(net, 1)
    # The embedder reuses id 5 for a later read of a, which must see the write.
    rep.read(5, b"a", net.now_ms)
    net.flush(1)
    # The network duplicates the first read's answer, and the copy arrives now.
    _changes_nothing(rep, first_reply)
    net.flush(1)
    assert net.reads[1] == [(5, True, 0)]  # nothing more served
    # The second read is answered by its own reply, once replica 1 applied the write.
    _ask_and_answer(net)
    assert rep.reads.pending == {5: 0}  # the write's slot
    _catch_up(net, 1)
    assert net.reads[1] == [(5, True, 0), (5, True, 1)]


def test_a_late_reply_to_a_timed_out_read_does_not_serve_its_ids_next_read() -> None:
    reads = Reads(make_ctx(3, me=1, sequencer=0, retransmit_ms=100.0), Recorder())
    reads.read(5, b"a")
    reads.flush()
    late = answer(reads, (5,), (-1,), (True,))
    reads.s.now_ms = 500.0
    reads.expire()  # unanswered in time: refused, to the log
    assert results(reads) == [(5, False)] and reads.pending == {}
    reads.read(5, b"a")  # the id is free again, and reused
    reads.flush()
    reads.handle_r_reply_batch(late)
    assert results(reads) == [(5, False)] and reads.pending == {5: -2}
    reads.handle_r_reply_batch(answer(reads, (5,), (9,), (True,)))
    assert reads.pending == {5: 9}


# --------------------------------------------------------------- the ask ids


def test_the_ask_base_draws_nothing_from_the_rng() -> None:
    ctx = make_ctx(3, me=1, sequencer=0)
    state = ctx.rng.getstate()
    reads = Reads(ctx, Recorder())
    assert ctx.rng.getstate() == state  # every later random choice is unchanged
    assert reads.next_ask == ask_base(random.Random(1))  # make_ctx's rng: Random(me)


def test_ask_bases_differ_with_the_rng_state_and_leave_room_below_2_63() -> None:
    bases = [ask_base(random.Random(seed)) for seed in range(1000)]
    assert len(set(bases)) == 1000
    assert all(0 <= b < ASK_BASE_END for b in bases) and ASK_BASE_END * 2 == 2**63
    assert max(bases) > ASK_BASE_END // 2  # the whole range is used, not a corner
    moved = random.Random(3)
    moved.random()  # an rng drawn from since: another state, another base
    assert ask_base(moved) != ask_base(random.Random(3)) == ask_base(random.Random(3))


class _Stateless(random.Random):
    """An rng whose state cannot be read, as ``random.SystemRandom``."""

    def getstate(self) -> tuple[object, ...]:
        raise NotImplementedError


def test_an_rng_without_a_readable_state_gives_a_drawn_base() -> None:
    assert ask_base(_Stateless(4)) == random.Random(4).getrandbits(62)
    assert 0 <= ask_base(random.SystemRandom()) < ASK_BASE_END


def test_ask_ids_near_2_63_cross_the_codec_and_validation() -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    rep = net.replicas[1]
    rep.reads.next_ask = 2**63 - 2  # the last two ask ids below 2**63
    rep.read(1, b"a", net.now_ms)
    rep.read(2, b"b", net.now_ms)
    net.flush(1)
    [request] = [m for _, _, m in net.pending if isinstance(m, RRequestBatch)]
    assert isinstance(request, RRequestBatch) and request.read_ids == (2**63 - 2, 2**63 - 1)
    rejected = net.replicas[0].stats.rejected + rep.stats.rejected
    net.pending = [(s, d, decode(encode(m))) for s, d, m in net.pending]
    net.deliver_where(lambda s, d, m: isinstance(m, RRequestBatch))
    [reply] = [m for _, _, m in net.pending if isinstance(m, RReplyBatch)]
    assert decode(encode(reply)) == reply
    net.pending = [(s, d, decode(encode(m))) for s, d, m in net.pending]
    net.deliver_all()
    assert net.replicas[0].stats.rejected + rep.stats.rejected == rejected
    assert net.reads[1] == [(1, True, 0), (2, True, 0)]


def test_asks_in_flight_are_exactly_the_asking_reads() -> None:
    reads = Reads(make_ctx(3, me=1, sequencer=0, reads_per_message_max=3), Recorder())
    rng = random.Random(11)
    seen: set[int] = set()
    live = 0
    for _turn in range(30):
        for _ in range(rng.randrange(0, 5)):
            live += 1
            reads.read(live, b"k")
        reads.flush()
        for _, m in reads.s.out.messages:
            assert isinstance(m, RRequestBatch)
            assert not seen & set(m.read_ids), "an ask id used twice"
            seen |= set(m.read_ids)
        reads.s.out.messages.clear()
        asking = sorted(reads.asking)
        rng.shuffle(asking)
        answered = asking[: len(asking) // 2]
        if answered:
            rids = tuple(reads.asking[a] for a in answered)
            reads.handle_r_reply_batch(answer(reads, rids, (-1,) * len(rids), (True,) * len(rids)))
        asking_reads = {rid for rid, v in reads.pending.items() if v == -2}
        assert sorted(reads.asking.values()) == sorted(asking_reads)
    assert reads.asking and set(reads.asking) <= seen  # every ask in flight was sent
