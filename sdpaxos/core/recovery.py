"""C-instance recovery (paper section 3.4): Paxos on a C-instance whose owner is silent.

Execution blocks on a C-instance that the committed assignment log needs but
this replica has not seen committed (``Progress.blocked``). After ``recover_ms``
(and once it knows a sequencer) it runs phase 1 at a
ballot of round >= 1 (the owner proposes at round 0, so recovery always
outranks it) on that instance and the following ones the log already needs,
then phase 2 with the value of the highest accepted ballot, or a no-op.
"""

import math

from sdpaxos.core.clog import NO_BALLOT, CInstance
from sdpaxos.core.context import Context
from sdpaxos.core.errors import PeerMessageError
from sdpaxos.core.messages import CAccept, CCommit, CPrepare, CPromise
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.types import Ballot, CIndex, Command, ReplicaId, ballot_round, make_ballot


class RecoveryRun:
    """Paxos phase 1 this replica runs on C-instances ``start .. end-1`` of ``owner``."""

    __slots__ = ("ballot", "end", "owner", "promises", "proposed", "start", "started_ms")

    def __init__(
        self, owner: ReplicaId, start: CIndex, end: CIndex, ballot: Ballot, now_ms: float
    ) -> None:
        self.owner = owner
        self.start = start
        self.end = end
        self.ballot = ballot
        self.started_ms = now_ms
        self.promises: dict[ReplicaId, CPromise] = {}
        self.proposed = False


class Recovery:
    """The recoveries this replica runs, at most one per owner."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        self.runs: dict[ReplicaId, RecoveryRun] = {}
        #: When a recovery last started from what execution is blocked on: the
        #: next waits ``recover_ms`` from then, or from when execution blocked.
        self.started_ms = -math.inf

    def tick(self, now: float) -> None:
        """Start a recovery on what execution has been blocked on for
        ``recover_ms``; give up the runs that took that long (retried later)."""
        s = self.s
        recover_ms = s.config.recover_ms
        progress = s.progress
        blocked = progress.blocked
        if (
            blocked is not None
            and now - max(progress.blocked_ms, self.started_ms) >= recover_ms
            and s.views.sequencer is not None
            and self.maybe_start(*blocked)
        ):
            self.started_ms = now
        for rec in list(self.runs.values()):
            if now - rec.started_ms >= recover_ms:
                del self.runs[rec.owner]  # stuck (lost messages, duel): retry later
                if not rec.proposed:
                    self.s.out.trace("AbandonCRecovery", owner=rec.owner, start=rec.start)

    def maybe_start(self, owner: ReplicaId, index: CIndex) -> bool:
        """Execution is blocked on C-instance ``owner.index``: run Paxos phase 1 on it
        and on the following ones the committed assignment log already needs.
        True if a recovery started."""
        s = self.s
        if owner == s.me or owner in self.runs:
            return False
        olog, progress = s.olog, s.progress
        slot = progress.slot
        if slot >= len(olog) or not olog.is_committed(slot):
            return False  # no longer blocked on a committed slot (a new view revoked it)
        # How many C-instances of owner do committed slots ask for from here on?
        needed = 0
        owners, counts, committed = olog.owner, olog.count, olog.committed
        b = olog.base
        for i in range(slot - b, len(owners)):
            if not committed[i]:
                break
            if owners[i] == owner:
                needed += counts[i]
        needed -= progress.in_slot if owners[slot - b] == owner else 0
        needed = max(1, min(needed, s.config.recovery_batch_max))
        end = CIndex(index + needed)
        top = s.clog.top_promised(owner, index, end)
        # Round 1 at least: the owner's round 0 must always be outranked (and an
        # entry that exists without any promise has promised -1).
        ballot = make_ballot(max(ballot_round(top), 0) + 1, s.me)
        rec = RecoveryRun(owner, index, end, ballot, s.now_ms)
        self.runs[owner] = rec
        s.stats.c_recoveries_started += 1
        s.out.trace("StartCRecovery", owner=owner, start=index, end=end, ballot=ballot)
        own = self.r.promise_c(owner, index, end, ballot)
        assert own.ok
        rec.promises[s.me] = own
        s.out.broadcast(s.prox.near, CPrepare(s.me, s.views.view, owner, index, end, ballot))
        return True

    def forget_below(self, executed: tuple[int, ...]) -> None:
        """A snapshot covers each owner's C-instances below ``executed[owner]``:
        they were executed (chosen), so a recovery that starts below stops."""
        runs = self.runs
        for owner in [o for o, run in runs.items() if run.start < executed[o]]:
            del runs[owner]

    def check_promise(self, m: CPromise) -> None:
        """A promise for the run we are in must answer for all of its instances."""
        rec = self.runs.get(m.owner)
        if (
            rec is not None
            and m.ballot == rec.ballot
            and m.start == rec.start
            and m.compacted <= rec.start
            and len(m.ballots) != rec.end - rec.start
        ):
            raise PeerMessageError("C-promise with a bad shape")

    def handle_c_promise(self, m: CPromise) -> None:
        s = self.s
        rec = self.runs.get(m.owner)
        if rec is None or m.ballot != rec.ballot or m.start != rec.start or rec.proposed:
            return
        out = s.out
        if m.compacted > rec.start:
            # The acceptor executed these instances and forgot them: their values
            # are chosen. Never phase 2 (a no-op would replace an executed
            # command): fetch the acceptor's snapshot instead.
            del self.runs[m.owner]
            out.trace("AbandonCRecovery", owner=m.owner, start=m.start, compacted=m.compacted)
            self.r.ask_snapshot(m.src)
            return
        if not m.ok:
            # A higher ballot is out there: give up; the next attempt goes above it.
            inst = s.clog.entry(m.owner, m.start)
            inst.promised = max(inst.promised, m.promised)
            del self.runs[m.owner]
            if not rec.proposed:
                out.trace("AbandonCRecovery", owner=m.owner, start=m.start, promised=m.promised)
            return
        rec.promises[m.src] = m
        if len(rec.promises) < s.majority:
            return
        log = s.clog.logs[m.owner]
        # Phase 2 at our ballot needs our own acceptor too: if we promised a higher
        # ballot meanwhile (a competing recoverer), accepting ours would break that
        # promise, and two values could be chosen. Give up; retry above it later.
        for i in range(rec.start, rec.end):
            mine = log.get(CIndex(i))
            if mine is not None and mine.promised > rec.ballot:
                del self.runs[m.owner]
                out.trace("AbandonCRecovery", owner=m.owner, start=rec.start)
                return
        rec.proposed = True
        # The model's HandleCPromise is this step: a majority promised, phase 2.
        out.trace("HandleCPromise", owner=m.owner, start=m.start, src=m.src)
        for k in range(rec.end - rec.start):
            index = CIndex(rec.start + k)
            chosen: tuple[Command, ...] | None = None
            best = NO_BALLOT
            for promise in rec.promises.values():
                value = promise.values[k]
                if promise.committed[k] and value is not None:
                    chosen, best = value, Ballot(1 << 62)
                    break
                if promise.ballots[k] > best and value is not None:
                    chosen, best = value, promise.ballots[k]
            value = chosen if chosen is not None else ()  # no-op: nothing was traced
            inst = log.get(index) or log.setdefault(index, CInstance())
            if inst.committed:
                continue
            out.persist(s.clog.accept(m.owner, index, inst, rec.ballot, value))
            inst.acks = {s.me}
            out.broadcast(
                s.prox.near, CAccept(s.me, s.views.view, m.owner, index, rec.ballot, value)
            )

    def chosen(self, owner: ReplicaId, index: CIndex, inst: CInstance) -> None:
        """A majority accepted our recovery value for ``owner.index``: commit it."""
        s = self.s
        inst.committed = True
        inst.acks = None
        s.out.broadcast(
            s.prox.near, CCommit(s.me, s.views.view, owner, index, inst.ballot, inst.commands)
        )
        s.stats.c_instances_recovered += 1
        s.out.trace("CommitC", owner=owner, index=index, recovered=True)
        s.progress.dirty = True
        rec = self.runs.get(owner)
        if rec is not None and all(
            s.clog.is_committed(owner, CIndex(i)) for i in range(rec.start, rec.end)
        ):
            del self.runs[owner]
