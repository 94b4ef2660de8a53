"""Linearizable reads without the log (paper section 3.5).

A replica asks the sequencer (R-request) for the last slot a write of the key
may occupy; the sequencer answers from its history table while it holds a lease
from a majority. Once that slot has executed here, the read is served from the
local state machine. Reads without an answer in time, or refused, fall back to
the log (the embedder proposes them as commands).
"""

from sdpaxos.core.context import Context
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.messages import RReply, RRequest
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.ready import ReadResult
from sdpaxos.core.types import Slot


class Reads:
    """Pending reads: read id -> (slot to wait for, or None while asking; when asked)."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        self.pending: dict[int, tuple[Slot | None, float]] = {}
        self.checked_ms = 0.0

    def read(self, read_id: int, key: bytes | None) -> None:
        s = self.s
        if read_id in self.pending:
            raise LocalProtocolError(f"read {read_id} is already pending")
        seq = s.views.sequencer
        if seq is None or len(self.pending) >= s.config.reads_pending_max:
            self.refuse(read_id)
            return
        if s.views.is_sequencer:
            if self.r.has_lease():
                self.pending[read_id] = (self.r.read_slot(key), s.now_ms)
                s.progress.dirty = True  # served at the next ready() if already executed
            else:
                self.refuse(read_id)
            return
        self.pending[read_id] = (None, s.now_ms)
        s.out.send(seq, RRequest(s.me, s.views.view, read_id, key if key is not None else b""))

    def refuse(self, read_id: int) -> None:
        self.s.stats.reads_refused += 1
        self.s.out.reads.append(ReadResult(read_id, False))

    def handle_r_request(self, m: RRequest) -> None:
        s = self.s
        if not s.views.is_sequencer:
            return
        ok = self.r.has_lease()
        slot = self.r.read_slot(m.key) if ok else Slot(-1)
        s.out.trace("HandleRRequest", src=m.src, read_id=m.read_id, slot=slot, ok=ok)
        s.out.send(m.src, RReply(s.me, s.views.view, m.read_id, slot, ok))

    def handle_r_reply(self, m: RReply) -> None:
        s = self.s
        pending = self.pending.get(m.read_id)
        if pending is None or pending[0] is not None or m.src != s.views.sequencer:
            return
        if m.ok and m.slot >= -1:
            self.pending[m.read_id] = (m.slot, pending[1])
            s.progress.dirty = True
        else:
            del self.pending[m.read_id]
            self.refuse(m.read_id)

    def serve(self) -> None:
        """Reads whose slot has executed are served; stale requests fall back."""
        s = self.s
        done = s.progress.slot
        expired = s.now_ms - s.config.retransmit_ms
        finished = [
            rid
            for rid, (slot, asked) in self.pending.items()
            if (slot is not None and slot < done) or (slot is None and asked < expired)
        ]
        for rid in finished:
            slot, _ = self.pending.pop(rid)
            if slot is None:
                self.refuse(rid)
            else:
                s.stats.reads_served += 1
                s.out.reads.append(ReadResult(rid, True))

    def fail_unanswered(self) -> None:
        """A view change voids outstanding R-requests: their answers may never come."""
        for rid in [rid for rid, (slot, _) in self.pending.items() if slot is None]:
            del self.pending[rid]
            self.refuse(rid)
