"""Batched R-requests (``RRequestBatch`` / ``RReplyBatch``) and the reads' indexes.

Role-level tests drive :class:`~sdpaxos.core.reads.Reads` over a real Context
with the Recorder standing in for the sequencer (``read_slots``, ``has_lease``);
replica-level tests go through :meth:`Replica.step` (validation, view routing)
on the explicit-delivery network. A reader's asks travel under ask ids, not
read ids (``tests/core/test_reads_ask_ids.py`` has why): answers here name the
ask id of each read, found with :func:`ask_of`.
"""

import random
from collections.abc import Callable
from typing import Any

import pytest

from sdpaxos.core import Replica
from sdpaxos.core.messages import Message, RReply, RReplyBatch, RRequest, RRequestBatch
from sdpaxos.core.reads import ASKING, QUEUED, Reads, ask_base
from tests.core.harness import PAPER3_RTT_MS, Net
from tests.core.roles.conftest import Recorder, make_ctx
from tests.core.state import whole_state


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def reader(rec: Recorder, **config: Any) -> Reads:
    """Replica 1 of 3, following sequencer 0 in view 0."""
    return Reads(make_ctx(3, me=1, sequencer=0, **config), rec)


def sent(reads: Reads) -> list[tuple[int, Message]]:
    return list(reads.s.out.messages)


def results(reads: Reads) -> list[tuple[int, bool]]:
    return [(r.read_id, r.ok) for r in reads.s.out.reads]


def ask_of(reads: Reads, read_id: int) -> int:
    """The ask id read ``read_id`` is asking under now."""
    [ask] = [a for a, r in reads.asking.items() if r == read_id]
    return ask


def answer(
    reads: Reads, read_ids: tuple[int, ...], slots: tuple[int, ...], oks: tuple[bool, ...]
) -> RReplyBatch:
    """The sequencer's (replica 0, view 0) answer to these reads, under their ask ids."""
    return RReplyBatch(0, 0, tuple(ask_of(reads, r) for r in read_ids), slots, oks)


class CountingDict(dict[int, int]):
    """A dict that counts lookups: a scan of every pending read shows up here."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.lookups = 0

    def get(self, key: int, default: Any = None) -> Any:
        self.lookups += 1
        return super().get(key, default)

    def pop(self, key: int, *default: Any) -> Any:
        self.lookups += 1
        return super().pop(key, *default)

    def __contains__(self, key: object) -> bool:
        self.lookups += 1
        return super().__contains__(key)

    def __getitem__(self, key: int) -> int:
        self.lookups += 1
        return super().__getitem__(key)

    def __iter__(self) -> Any:
        self.lookups += len(self)
        return super().__iter__()

    def items(self) -> Any:
        self.lookups += len(self)
        return super().items()

    def values(self) -> Any:
        self.lookups += len(self)
        return super().values()


# ------------------------------------------------------------------ the reader


def test_reads_started_in_one_turn_go_in_one_message(rec: Recorder) -> None:
    reads = reader(rec)
    reads.read(7, b"a")
    reads.read(3, None)  # no named key: the whole log
    reads.read(9, b"b")
    assert sent(reads) == []
    first = reads.next_ask
    assert first == ask_base(reads.s.rng)
    reads.flush()
    # Under ask ids of the replica's own, one each, in order; not the read ids.
    asks = (first, first + 1, first + 2)
    assert sent(reads) == [(0, RRequestBatch(1, 0, asks, (b"a", b"", b"b")))]
    assert reads.pending == {7: ASKING, 3: ASKING, 9: ASKING}
    assert reads.asking == {first: 7, first + 1: 3, first + 2: 9}
    reads.flush()  # nothing new started: nothing sent
    assert len(sent(reads)) == 1
    reads.read(4, b"c")
    reads.flush()  # the next ask goes on from there
    assert sent(reads)[-1] == (0, RRequestBatch(1, 0, (first + 3,), (b"c",)))


def test_a_turn_with_more_reads_than_a_message_holds_sends_several(rec: Recorder) -> None:
    reads = reader(rec, reads_per_message_max=2)
    for rid in range(5):
        reads.read(rid, b"k%d" % rid)
    f = reads.next_ask
    reads.flush()
    assert [m.read_ids for _, m in sent(reads)] == [(f, f + 1), (f + 2, f + 3), (f + 4,)]  # type: ignore[union-attr]
    assert [ids for _, ids in reads.asked] == [(f, f + 1), (f + 2, f + 3), (f + 4,)]


def test_a_batch_answered_partly_refused(rec: Recorder) -> None:
    reads = reader(rec)
    for rid in (1, 2, 3, 4):
        reads.read(rid, b"k")
    reads.flush()
    reads.s.progress.slot = 5  # slots below 5 executed
    reads.handle_r_reply_batch(
        answer(reads, (1, 2, 3, 4), (2, -1, 8, 7), (True, False, True, False))
    )
    # 1: slot 2 already executed, served now; 2 and 4: refused (to the log); 3 waits for slot 8.
    assert results(reads) == [(1, True), (2, False), (4, False)]
    assert reads.pending == {3: 8} and reads.asking == {}
    assert reads.s.stats.reads_served == 1 and reads.s.stats.reads_refused == 2
    reads.s.progress.slot = 9
    reads.serve()
    assert results(reads)[-1] == (3, True) and reads.pending == {}


def test_a_reply_for_a_read_not_asked_yet_is_ignored(rec: Recorder) -> None:
    """A read is asked at the next ready(): an answer before that would predate it."""
    reads = reader(rec)
    reads.read(5, b"k")
    early = RReplyBatch(
        0, 0, (reads.next_ask, 5), (-1, -1), (True, True)
    )  # its ask id, its read id
    reads.handle_r_reply_batch(early)
    assert results(reads) == [] and reads.pending == {5: QUEUED}
    reads.flush()
    reads.handle_r_reply_batch(RReplyBatch(0, 0, (5,), (-1,), (True,)))  # its read id: not an ask
    assert results(reads) == [] and reads.pending == {5: ASKING}
    reads.handle_r_reply_batch(answer(reads, (5,), (-1,), (True,)))
    assert results(reads) == [(5, True)]


def test_a_reply_from_another_than_the_sequencer_is_ignored(rec: Recorder) -> None:
    reads = reader(rec)
    reads.read(5, b"k")
    reads.flush()
    reads.handle_r_reply_batch(RReplyBatch(2, 0, (ask_of(reads, 5),), (-1,), (True,)))
    assert results(reads) == [] and reads.pending == {5: ASKING}


def test_each_read_of_a_reply_is_traced(rec: Recorder) -> None:
    reads = reader(rec)
    events: list[tuple[str, dict[str, Any]]] = []
    reads.s.out.tracer = lambda e, r, f: events.append((e, f))
    for rid in (1, 2):
        reads.read(rid, b"k")
    reads.flush()
    a1, a2 = ask_of(reads, 1), ask_of(reads, 2)
    reads.handle_r_reply_batch(RReplyBatch(0, 0, (a1, a2, 9), (3, -1, 0), (True, False, True)))
    assert events == [
        ("HandleRReply", {"src": 0, "read_id": 1, "ask_id": a1, "slot": 3, "ok": True}),
        ("HandleRReply", {"src": 0, "read_id": 2, "ask_id": a2, "slot": -1, "ok": False}),
    ]  # ask 9 is none of ours: no step


def test_a_single_reply_from_an_older_peer_is_handled(rec: Recorder) -> None:
    reads = reader(rec)
    reads.read(4, b"k")
    reads.flush()
    reads.handle_r_reply(RReply(0, 0, 4, -1, True))  # the read id: not an ask of ours
    assert results(reads) == []
    reads.handle_r_reply(RReply(0, 0, ask_of(reads, 4), -1, True))
    assert results(reads) == [(4, True)]


# ------------------------------------------------------- duplicates, reordering


Answer = tuple[tuple[int, ...], tuple[int, ...], tuple[bool, ...]]


def _answered_reader(deliveries: list[Answer]) -> tuple[Replica, list[tuple[int, bool]]]:
    """Replica 1 with reads 1-6 asked in two batches, then ``deliveries`` stepped in
    (read ids, slots, verdicts: sent under the reads' ask ids)."""
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    rep = net.replicas[1]
    for rid in (1, 2, 3):
        rep.read(rid, b"k", net.now_ms)
    net.flush(1)
    for rid in (4, 5, 6):
        rep.read(rid, b"k", net.now_ms)
    net.flush(1)
    net.pending.clear()  # the requests: these tests answer them by hand
    ask = {rid: ask_of(rep.reads, rid) for rid in range(1, 7)}
    now = _now(rep)
    out: list[tuple[int, bool]] = []
    for rids, slots, oks in deliveries:
        rep.step(RReplyBatch(0, 0, tuple(ask[r] for r in rids), slots, oks), now)
        out += [(r.read_id, r.ok) for r in rep.ready().reads]
    return rep, out


FIRST: Answer = ((1, 2, 3), (-1, 5, -1), (True, True, False))
SECOND: Answer = ((4, 5, 6), (5, -1, 9), (True, True, True))


def test_duplicated_and_reordered_batches_change_nothing() -> None:
    in_order, got = _answered_reader([FIRST, SECOND])
    shuffled, got2 = _answered_reader([SECOND, FIRST, SECOND, FIRST, FIRST])
    assert sorted(got) == sorted(got2) == [(1, True), (3, False), (5, True)]
    assert shuffled.reads.pending == {2: 5, 4: 5, 6: 9}
    # Reads waiting for one slot are served together: their order there is free.
    for rep in (in_order, shuffled):
        for readers in rep.reads.waiting.values():
            readers.sort()
    assert whole_state(shuffled) == whole_state(in_order)


# -------------------------------------------------------------- the slot index


@pytest.mark.parametrize("seed", range(6))
def test_reads_are_served_exactly_when_their_slot_executes(rec: Recorder, seed: int) -> None:
    rng = random.Random(seed)
    reads = reader(rec)
    ids = list(range(40))
    for rid in ids:
        reads.read(rid, b"k")
    reads.flush()
    slot_of = {rid: rng.randrange(-1, 30) for rid in ids}
    order = ids[:]
    rng.shuffle(order)
    for chunk in (order[:13], order[13:27], order[27:]):  # three replies, any order
        reads.handle_r_reply_batch(
            answer(reads, tuple(chunk), tuple(slot_of[r] for r in chunk), (True,) * len(chunk))
        )
    served_at: dict[int, int] = {r.read_id: 0 for r in reads.s.out.reads}
    done = 0
    while done < 31:
        done += rng.randrange(1, 4)  # execution moves on by a few slots at a time
        reads.s.progress.slot = done
        before = len(reads.s.out.reads)
        reads.serve()
        for r in reads.s.out.reads[before:]:
            assert r.read_id not in served_at, "served twice"
            served_at[r.read_id] = done
    for rid in ids:
        assert served_at[rid] > slot_of[rid], f"read {rid} served before its slot executed"
    # ... and not later than the first serve() after its slot executed.
    points = sorted(set(served_at.values()))
    for rid in ids:
        earlier = [p for p in points if p < served_at[rid]]
        assert not earlier or earlier[-1] <= slot_of[rid]
    assert reads.pending == {} and reads.waiting == {} and reads.slots == []


def test_serving_does_not_look_at_reads_still_waiting(rec: Recorder) -> None:
    reads = reader(rec)
    for rid in range(1000):
        reads.read(rid, b"k")
    reads.flush()
    ids = tuple(range(1000))
    reads.handle_r_reply_batch(answer(reads, ids, tuple(100 + i for i in ids), (True,) * 1000))
    reads.pending = counting = CountingDict(reads.pending)
    reads.asking = asking = CountingDict(reads.asking)
    reads.s.progress.slot = 103  # three slots executed: three reads served
    reads.serve()
    assert results(reads) == [(0, True), (1, True), (2, True)]
    assert counting.lookups == 0 and asking.lookups == 0  # no scan of the 997 others
    reads.serve()
    assert counting.lookups == 0 and asking.lookups == 0


def test_the_timeout_looks_at_the_oldest_batches_only(rec: Recorder) -> None:
    reads = reader(rec, retransmit_ms=100.0)
    for rid in range(500):
        reads.s.now_ms = float(rid)
        reads.read(rid, b"k")
        reads.flush()  # one batch per turn
    assert len(reads.asked) == 500
    reads.pending = counting = CountingDict(reads.pending)
    reads.asking = asking = CountingDict(reads.asking)
    reads.s.now_ms = 150.0
    reads.expire()  # batches sent before 50 ms expired: reads 0..49
    assert results(reads) == [(rid, False) for rid in range(50)]
    assert asking.lookups == 50 and counting.lookups == 0 and len(reads.asked) == 450
    assert len(asking) == len(reads.pending) == 450
    asking.lookups = 0
    reads.expire()
    assert asking.lookups == 0 and counting.lookups == 0  # the oldest left is not due


def test_the_timeout_spares_reads_already_answered(rec: Recorder) -> None:
    reads = reader(rec, retransmit_ms=100.0)
    for rid in (1, 2):
        reads.read(rid, b"k")
    reads.flush()
    reads.handle_r_reply_batch(answer(reads, (1,), (50,), (True,)))
    reads.s.now_ms = 500.0
    reads.expire()
    assert results(reads) == [(2, False)] and reads.pending == {1: 50}
    assert not reads.asked and not reads.asking


def test_batches_kept_for_the_timeout_stay_bounded(rec: Recorder) -> None:
    reads = reader(rec, reads_pending_max=4)
    ask: dict[int, int] = {}
    for rid in range(12):
        reads.read(rid, b"k")
        reads.flush()
        ask[rid] = ask_of(reads, rid)
        if rid != 5:
            reads.handle_r_reply_batch(answer(reads, (rid,), (-1,), (True,)))
    # 12 batches sent, only the one holding read 5 still matters: whenever more
    # than reads_pending_max are kept, those with no read left asking go (the
    # last one, read 11's, was sent asking and answered since).
    assert [ids for _, ids in reads.asked] == [(ask[5],), (ask[11],)]
    assert reads.asking == {ask[5]: 5}


def test_a_view_change_refuses_asked_reads_only(rec: Recorder) -> None:
    reads = reader(rec)
    reads.read(1, b"k")
    reads.read(2, b"k")
    reads.flush()
    late = answer(reads, (2,), (7,), (True,))
    reads.handle_r_reply_batch(answer(reads, (1,), (40,), (True,)))
    reads.read(3, b"k")  # queued, not asked yet
    reads.fail_unanswered()
    assert results(reads) == [(2, False)]
    assert reads.pending == {1: 40, 3: QUEUED} and not reads.asked and not reads.asking
    reads.handle_r_reply_batch(late)  # the voided ask's answer comes after all: ignored
    assert results(reads) == [(2, False)] and reads.pending == {1: 40, 3: QUEUED}


def test_too_many_pending_reads_are_refused_at_once(rec: Recorder) -> None:
    reads = reader(rec, reads_pending_max=2)
    for rid in (1, 2, 3):
        reads.read(rid, b"k")
    assert results(reads) == [(3, False)] and reads.queued_ids == [1, 2]


# --------------------------------------------------------------- the sequencer


def test_the_sequencer_answers_a_batch_from_its_history(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    reads = Reads(ctx, rec)
    events: list[dict[str, Any]] = []
    ctx.out.tracer = lambda e, r, f: events.append(f) if e == "HandleRRequest" else None
    rec.answers["read_slots"] = {b"a": 7, b"": 11}
    reads.handle_r_request_batch(RRequestBatch(2, 0, (5, 6, 8), (b"a", b"", b"z")))
    assert ctx.out.messages == [(2, RReplyBatch(0, 0, (5, 6, 8), (7, 11, 4), (True,) * 3))]
    assert rec.calls == [("has_lease", ()), ("read_slots", ((b"a", b"", b"z"),))]
    assert [(f["read_id"], f["slot"], f["ok"]) for f in events] == [
        (5, 7, True),
        (6, 11, True),
        (8, 4, True),
    ]


def test_the_sequencer_without_a_lease_refuses_every_read_of_a_batch(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    reads = Reads(ctx, rec)
    rec.answers["has_lease"] = False
    reads.handle_r_request_batch(RRequestBatch(2, 0, (5, 6), (b"a", b"b")))
    assert ctx.out.messages == [(2, RReplyBatch(0, 0, (5, 6), (-1, -1), (False, False)))]
    assert "read_slots" not in rec.names()


def test_a_replica_that_is_not_the_sequencer_ignores_a_batch(rec: Recorder) -> None:
    reads = reader(rec)
    reads.handle_r_request_batch(RRequestBatch(2, 0, (5,), (b"a",)))
    reads.handle_r_request(RRequest(2, 0, 5, b"a"))
    assert sent(reads) == [] and rec.calls == []


def test_the_sequencer_answers_its_own_reads_at_ready(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    reads = Reads(ctx, rec)
    rec.answers["read_slots"] = {b"old": 1, b"new": 6}
    ctx.progress.slot = 3
    reads.read(1, b"old")
    reads.read(2, b"new")
    assert rec.calls == [] and results(reads) == []  # judged at ready(), not before
    reads.flush()
    assert ctx.out.messages == []  # no message to itself
    assert results(reads) == [(1, True)] and reads.pending == {2: 6}


def test_the_sequencer_without_a_lease_refuses_its_own_reads(rec: Recorder) -> None:
    ctx = make_ctx(3, me=0, sequencer=0)
    reads = Reads(ctx, rec)
    rec.answers["has_lease"] = False
    reads.read(1, b"k")
    reads.flush()
    assert results(reads) == [(1, False)] and reads.pending == {}


# ------------------------------------------------------- through Replica.step


def leased(net: Net) -> Net:
    for _ in range(20):
        net.run(1)
        if net.replicas[net.config.sequencer].has_lease():
            return net
    raise AssertionError("no lease")


def _now(rep: Replica) -> float:
    """The latest time ``rep`` was given (stepping at it changes no clock)."""
    assert rep.ctx.clock_origin_ms is not None
    return rep.ctx.clock_origin_ms + rep.ctx.now_ms


def test_reads_of_one_turn_travel_in_one_message_and_are_answered() -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    net.propose(1, 10, 1, b"w", key=b"a")
    net.deliver_all()
    before = len(net.sent)
    for rid in (1, 2, 3):
        net.replicas[2].read(rid, b"a", net.now_ms)
    net.flush(2)
    net.deliver_all()
    assert net.kinds(lambda s, d, m: "RRequest" in type(m).__name__)[-1:] == ["RRequestBatch"]
    new = [type(m).__name__ for _, _, m in net.sent[before:]]
    assert new.count("RRequestBatch") == 1 and new.count("RReplyBatch") == 1
    assert net.reads[2] == [(1, True, 1), (2, True, 1), (3, True, 1)]


def test_a_stale_view_batch_is_ignored() -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS))
    net.crash(0)
    net.run(200)  # a new sequencer in a newer view
    net.restart(0)
    net.run(50)  # the old sequencer is back, heard from again
    rep = net.replicas[2]
    assert rep.view >= 1 and rep.sequencer != 0 and not rep.ctx.prox.suspected
    rep.read(8, b"k", net.now_ms)
    net.flush(2)
    net.pending.clear()
    before = whole_state(rep)
    stale = rep.stats.stale
    # A reply of the old sequencer's view 0, delayed until now, to read 8's ask.
    rep.step(RReplyBatch(0, 0, (ask_of(rep.reads, 8),), (-1,), (True,)), _now(rep))
    assert rep.stats.stale == stale + 1
    rep.stats.stale = stale  # the one counter a stale message moves by design
    assert whole_state(rep) == before
    assert rep.ready().reads == [] and rep.reads.pending == {8: ASKING}


#: Malformed answers to the reader's two asks ``a`` and ``b`` (so that a mistake
#: in validation would show: the reader would act on them).
BAD_REPLIES: list[tuple[str, Callable[[int, int], RReplyBatch]]] = [
    ("lengths", lambda a, b: RReplyBatch(0, 0, (a, b), (3,), (True, True))),
    ("verdicts", lambda a, b: RReplyBatch(0, 0, (a, b), (3, 4), (True,))),
    ("read id", lambda a, b: RReplyBatch(0, 0, (a, True), (3, 4), (True, True))),
    ("slot type", lambda a, b: RReplyBatch(0, 0, (a,), ("3",), (True,))),  # type: ignore[arg-type]
    ("verdict type", lambda a, b: RReplyBatch(0, 0, (a,), (3,), (1,))),  # type: ignore[arg-type]
    ("slot below -1", lambda a, b: RReplyBatch(0, 0, (a, b), (3, -2), (True, True))),
    ("not a tuple", lambda a, b: RReplyBatch(0, 0, [a], (3,), (True,))),  # type: ignore[arg-type]
    (
        "oversized",
        lambda a, b: RReplyBatch(0, 0, (a, b, b + 1, b + 2, b + 3), (0,) * 5, (True,) * 5),
    ),
]

BAD_REQUESTS = [
    ("lengths", RRequestBatch(1, 0, (1, 2), (b"a",))),
    ("read id", RRequestBatch(1, 0, (1.0,), (b"a",))),  # type: ignore[arg-type]
    ("key type", RRequestBatch(1, 0, (1,), ("a",))),  # type: ignore[arg-type]
    ("key None", RRequestBatch(1, 0, (1,), (None,))),  # type: ignore[arg-type]
    ("not a tuple", RRequestBatch(1, 0, (1,), [b"a"])),  # type: ignore[arg-type]
    ("oversized", RRequestBatch(1, 0, tuple(range(5)), (b"a",) * 5)),
]


@pytest.mark.parametrize("bad", [b for _, b in BAD_REPLIES], ids=[w for w, _ in BAD_REPLIES])
def test_a_malformed_reply_batch_is_rejected_and_changes_nothing(
    bad: Callable[[int, int], RReplyBatch],
) -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS, reads_per_message_max=4))
    rep = net.replicas[1]
    for rid in (1, 2):
        rep.read(rid, b"k", net.now_ms)
    net.flush(1)
    net.pending.clear()
    a, b = ask_of(rep.reads, 1), ask_of(rep.reads, 2)
    before = whole_state(rep)
    rejected = rep.stats.rejected
    rep.step(bad(a, b), _now(rep))
    assert rep.stats.rejected == rejected + 1
    assert whole_state(rep) == before
    # The well-formed answer still works afterwards.
    rep.step(RReplyBatch(0, 0, (a, b), (-1, -1), (True, True)), _now(rep))
    assert [(r.read_id, r.ok) for r in rep.ready().reads] == [(1, True), (2, True)]


@pytest.mark.parametrize("bad", [b for _, b in BAD_REQUESTS], ids=[w for w, _ in BAD_REQUESTS])
def test_a_malformed_request_batch_is_rejected_and_changes_nothing(bad: RRequestBatch) -> None:
    net = leased(Net.build(3, sequencer=0, rtt_ms=PAPER3_RTT_MS, reads_per_message_max=4))
    seq = net.replicas[0]
    before = whole_state(seq)
    rejected = seq.stats.rejected
    seq.step(bad, _now(seq))
    assert seq.stats.rejected == rejected + 1
    assert whole_state(seq) == before
    seq.step(RRequestBatch(1, 0, (1, 2, 3, 4), (b"a",) * 4), _now(seq))
    [(dst, reply)] = seq.ready().messages
    assert dst == 1 and reply == RReplyBatch(0, 0, (1, 2, 3, 4), (-1,) * 4, (True,) * 4)
