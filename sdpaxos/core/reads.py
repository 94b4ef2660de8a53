"""Linearizable reads without the log (paper section 3.5).

A replica asks the sequencer (R-request) for the last slot a write of the key
may occupy; the sequencer answers from its history table while it holds a lease
from a majority. Once that slot has executed here, the read is served from the
local state machine. Reads without an answer in time, or refused, fall back to
the log (the embedder proposes them as commands).

Why batches: a read is one table lookup at the sequencer, and as one message
each it cost about as much as a batched write (a message object, an encode and
a decode, a handler call at the sequencer, the busiest replica, and one at the
reader). So every read a replica starts between two :meth:`Replica.ready`
calls waits in :attr:`Reads.queued_ids` and goes out at the next ``ready()`` as
one :class:`~sdpaxos.core.messages.RRequestBatch` (split at
``reads_per_message_max``), answered by one
:class:`~sdpaxos.core.messages.RReplyBatch`. The sequencer answers its own
queued reads the same way, without a message. Each read of a batch is still
judged alone, exactly as a single R-request would be at that instant (the lease
is checked once for the batch, at the time of the step that carries it), and
still emits its own ``HandleRRequest`` / ``HandleRReply`` trace event.

Why ask ids: an answer must serve only the ask it answers. The embedder
chooses read ids, and may reuse one: once its read completed, or after a
restart (the runtime node counts them from 1 in every process). Matched by read
id, a delayed or duplicated answer to an earlier read N would serve a later
read N with a slot computed before that read began: a stale read. So every ask
travels under its own *ask id*, chosen here, and the answer is matched by it:
:attr:`Reads.asking` maps the ask ids in flight to their read ids. Ask ids
count up from :func:`ask_base`, a hash of the state of the rng the replica was
built with, so an incarnation given a freshly seeded rng (the runtime seeds
each process from ``os.urandom``, the simulator derives one per start and
restart) asks under ids no earlier incarnation used: two incarnations' ranges
meet with a chance of (the asks of both) / 2**62. An rng in a state an earlier
incarnation's had (the same seed again) gives the same ids again: a fresh rng
per incarnation is what the embedder owes. A hash, not a draw: drawing would
move every later random choice of the replica (the election jitter). The wire fields
keep their names (``read_ids``), and the sequencer echoes whatever ids it gets.
The trace events keep naming the embedder's ``read_id``; the reader's
``HandleRReply`` also names the ``ask_id`` it came under, which is the id the
sequencer's ``HandleRRequest`` names as its ``read_id`` (the only one it knows).

Why indexes: a read's costs must not grow with the number of reads pending.
Reads that know their slot wait in :attr:`Reads.waiting` (slot -> read ids),
whose slots are in a heap, so serving costs O(log n) per slot executed and O(1)
per read; an answer finds its read in :attr:`Reads.asking` in O(1); unanswered
batches wait in :attr:`Reads.asked` in the order they were sent, so the timeout
looks at the oldest only.
"""

import functools
import hashlib
import heapq
import random
from collections import deque
from collections.abc import Callable, Sequence

from sdpaxos.core.context import Context
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.messages import RReply, RReplyBatch, RRequest, RRequestBatch
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.ready import ReadResult
from sdpaxos.core.types import ReplicaId, Slot

#: ``ReadResult(read_id, ok)`` from the pair ``(read_id, ok)``, built in C: a
#: named tuple's own constructor is a Python function, and one result is built
#: per read.
_result: Callable[[tuple[int, bool]], ReadResult] = functools.partial(tuple.__new__, ReadResult)

#: Ask ids start below this, so that they stay below 2**63 (a signed 64-bit
#: integer, well inside what msgpack carries) for 2**62 asks: more than a
#: century of a billion reads a second.
ASK_BASE_END = 1 << 62


def ask_base(rng: random.Random) -> int:
    """Where the ask ids of a replica built with ``rng`` start, in [0, 2**62).

    A hash of the rng's state, not a number drawn from it, so that every random
    choice the replica makes later is the one it made before ask ids existed.
    An rng with no state to read (``random.SystemRandom``) gives a fresh draw,
    which moves nothing either.
    """
    try:
        state = rng.getstate()
    except NotImplementedError:
        return rng.getrandbits(62)
    digest = hashlib.blake2b(repr(state).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % ASK_BASE_END


#: :attr:`Reads.pending` value of a read asked about and not answered yet (its
#: ask id is in :attr:`Reads.asking`).
ASKING = -2
#: :attr:`Reads.pending` value of a read not asked about yet: no answer may
#: serve it (one would predate the read). Any other value is the slot the read
#: waits for, and slots are >= -1.
QUEUED = -3


class Reads:
    """Reads pending at this replica, indexed by what each one waits for."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        #: Every pending read: read id -> the slot it waits for, :data:`ASKING` or
        #: :data:`QUEUED`.
        #: Bounded by ``reads_pending_max``.
        self.pending: dict[int, int] = {}
        self.pending_max = ctx.config.reads_pending_max
        #: Reads started since the last ``ready()``, to ask about in one batch.
        self.queued_ids: list[int] = []
        self.queued_keys: list[bytes] = []
        #: Slot -> the reads that wait for it (each one once, in pending with that slot).
        self.waiting: dict[int, list[int]] = {}
        #: The slots of :attr:`waiting`, as a heap (each slot once).
        self.slots: list[int] = []
        #: The ask id the next read asked about travels under (one per ask, never
        #: reused: see the module docstring).
        self.next_ask = ask_base(ctx.rng)
        #: Asks sent and not answered, timed out or voided: ask id -> read id, in
        #: the order sent. Its reads are exactly those :data:`ASKING` in
        #: :attr:`pending`, so it is bounded by ``reads_pending_max`` too.
        self.asking: dict[int, int] = {}
        #: Batches sent and maybe unanswered: (when sent, their ask ids), oldest first.
        #: Only batches holding an ask in :attr:`asking` matter, and there are at
        #: most ``reads_pending_max`` of those: :meth:`_trim_asked` keeps it so.
        self.asked: deque[tuple[float, tuple[int, ...]]] = deque()

    # ------------------------------------------------------------ the reader

    def read(self, read_id: int, key: bytes | None) -> None:
        """Start a read: answered (or refused) from the next ``ready()`` on."""
        pending = self.pending
        if read_id in pending:
            raise LocalProtocolError(f"read {read_id} is already pending")
        if len(pending) >= self.pending_max:
            self.refuse(read_id)
            return
        pending[read_id] = QUEUED
        self.queued_ids.append(read_id)
        self.queued_keys.append(key if key is not None else b"")

    def flush(self) -> None:
        """Ask about the reads started since the last ``ready()``: the sequencer
        answers its own at once, anyone else sends them to it in batches."""
        s = self.s
        ids, keys = self.queued_ids, self.queued_keys
        self.queued_ids = []
        self.queued_keys = []
        views = s.views
        seq = views.sequencer
        if seq is None:
            self._refuse_all(ids)
        elif views.is_sequencer:
            if self.r.has_lease():
                self._answered(tuple(ids), self.r.read_slots(tuple(keys)))
            else:
                self._refuse_all(ids)
        else:
            count = len(ids)
            first = self.next_ask
            self.next_ask = first + count
            asks = tuple(range(first, first + count))  # each int made once, shared below
            self.asking.update(zip(asks, ids, strict=True))
            pending = self.pending
            for rid in ids:
                pending[rid] = ASKING
            step = s.config.reads_per_message_max
            view = views.view
            now = s.now_ms
            for i in range(0, count, step):
                batch_asks = asks[i : i + step]  # a tuple's slice shares its ints
                s.out.send(seq, RRequestBatch(s.me, view, batch_asks, tuple(keys[i : i + step])))
                self.asked.append((now, batch_asks))
            if len(self.asked) > s.config.reads_pending_max:
                self._trim_asked()

    def handle_r_reply_batch(self, m: RReplyBatch) -> None:
        """Answers to our asks: ``m.read_ids`` are the ask ids we sent."""
        s = self.s
        if m.src != s.views.sequencer:
            return
        asking = self.asking
        tracer = s.out.tracer
        ids: list[int] = []
        slots: list[Slot] = []
        refused: list[int] = []
        for aid, slot, ok in zip(m.read_ids, m.slots, m.oks, strict=True):
            rid = asking.pop(aid, None)
            if rid is None:
                # Not an ask of this incarnation's (an earlier one's, under the
                # same read id maybe), answered already (a duplicate), timed out
                # or voided by a view change.
                continue
            if tracer is not None:
                s.out.trace("HandleRReply", src=m.src, read_id=rid, ask_id=aid, slot=slot, ok=ok)
            if ok:
                ids.append(rid)
                slots.append(slot)
            else:
                refused.append(rid)
        if ids:
            self._answered(ids, slots)
        if refused:
            self._refuse_all(refused)

    def handle_r_reply(self, m: RReply) -> None:
        """A single answer (from a peer that sends one message per read)."""
        self.handle_r_reply_batch(RReplyBatch(m.src, m.view, (m.read_id,), (m.slot,), (m.ok,)))

    def _answered(self, ids: Sequence[int], slots: Sequence[Slot]) -> None:
        """Reads ``ids`` may be served once ``slots`` have executed (ServeRead):
        at once if they have, else when execution passes them. The sequencer's
        own reads come here directly, a replica's from the sequencer's answers."""
        s = self.s
        done = s.progress.slot
        pending = self.pending
        waiting = self.waiting
        out = s.out.reads
        served = 0
        for rid, slot in zip(ids, slots, strict=True):
            if slot < done:
                del pending[rid]
                out.append(_result((rid, True)))
                served += 1
                continue
            pending[rid] = slot
            readers = waiting.get(slot)
            if readers is None:
                waiting[slot] = [rid]
                heapq.heappush(self.slots, slot)
            else:
                readers.append(rid)
        s.stats.reads_served += served

    def serve(self) -> None:
        """Reads whose slot has executed are served (cost: the reads served, and
        log n per slot)."""
        s = self.s
        done = s.progress.slot
        heap = self.slots
        if not heap or heap[0] >= done:
            return
        pending = self.pending
        waiting = self.waiting
        out = s.out.reads
        served = 0
        while heap and heap[0] < done:
            for rid in waiting.pop(heapq.heappop(heap)):
                del pending[rid]
                out.append(_result((rid, True)))
                served += 1
        s.stats.reads_served += served

    def expire(self) -> None:
        """Reads asked ``retransmit_ms`` ago and still unanswered fall back to the log.

        Looks at the oldest batches only: one sent later has not expired either.
        """
        asked = self.asked
        if not asked:
            return
        expired = self.s.now_ms - self.s.config.retransmit_ms
        asking = self.asking
        while asked and asked[0][0] < expired:
            _, asks = asked.popleft()
            self._refuse_all([rid for aid in asks if (rid := asking.pop(aid, None)) is not None])

    def fail_unanswered(self) -> None:
        """A view change voids outstanding R-requests: their answers may never come.

        Reads still queued are left alone: they are asked at the next ``ready()``,
        of the sequencer known then. The asking ones are refused in the order
        they were asked (that of :attr:`asking`).
        """
        asking = self.asking
        self.asking = {}
        self.asked = deque()
        self._refuse_all(list(asking.values()))

    def _trim_asked(self) -> None:
        """Forget sent batches whose asks were all answered (amortised O(1) per read)."""
        asking = self.asking
        self.asked = deque(batch for batch in self.asked if any(a in asking for a in batch[1]))

    def refuse(self, read_id: int) -> None:
        self.s.stats.reads_refused += 1
        self.s.out.reads.append(_result((read_id, False)))

    def _refuse_all(self, ids: list[int]) -> None:
        pending = self.pending
        for rid in ids:
            del pending[rid]
            self.refuse(rid)

    # --------------------------------------------------------- the sequencer

    def handle_r_request_batch(self, m: RRequestBatch) -> None:
        """Answer every read of the batch, as that many R-requests handled now.

        ``m.read_ids`` are the reader's ask ids: echoed as they came, and named
        ``read_id`` in the trace (the sequencer knows no other id of a read).
        """
        s = self.s
        if not s.views.is_sequencer:
            return
        ids = m.read_ids
        count = len(ids)
        ok = self.r.has_lease()
        slots = self.r.read_slots(m.keys) if ok else (Slot(-1),) * count
        if s.out.tracer is not None:
            for rid, slot in zip(ids, slots, strict=True):
                s.out.trace("HandleRRequest", src=m.src, read_id=rid, slot=slot, ok=ok)
        s.out.send(m.src, RReplyBatch(s.me, s.views.view, ids, slots, (ok,) * count))

    def handle_r_request(self, m: RRequest) -> None:
        """A single R-request (from a peer that sends one message per read),
        answered the same way, with a single :class:`RReply`."""
        s = self.s
        if not s.views.is_sequencer:
            return
        ok = self.r.has_lease()
        slot = self.r.read_slots((m.key,))[0] if ok else Slot(-1)
        s.out.trace("HandleRRequest", src=m.src, read_id=m.read_id, slot=slot, ok=ok)
        s.out.send(ReplicaId(m.src), RReply(s.me, s.views.view, m.read_id, slot, ok))
