"""The learner: which O-instances are chosen, and catching up on what was missed.

The *safe prefix* (paper Fig. 5 lines 21, 26, 30; :mod:`sdpaxos.core.quorum`) is
where O-instances are chosen: accepted by a majority, or for N = 5 at a
non-sequencer by this replica and the sequencer once the view's rebuilt range is
chosen. Own O-instances inside it are committed and broadcast (O-commit); the
command leader then calls its C-instances ready. O-commits from peers are
recorded durably before anything executes them (``docs/recovery.md`` section 10).
A replica whose execution stalls asks its peers (LearnRequest).
"""

import math

from sdpaxos.core.context import Context
from sdpaxos.core.messages import CCommit, LearnRequest, OCommit
from sdpaxos.core.olog import NOT_ESTABLISHED
from sdpaxos.core.quorum import majority_prefix, two_acceptor_prefix, uses_two_acceptor_rule
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.storage import OAccepted
from sdpaxos.core.types import STOP, CIndex, OCommitEntry, OValue, ReplicaId, Slot, View


class Learner:
    """The safe prefix, O-commits out and in, learn requests."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        #: Every slot below this is in the safe prefix of this view.
        self.safe_upto = Slot(0)
        #: Next slot to scan for own O-instances inside the safe prefix.
        self.own_scan = Slot(0)
        #: Own O-instances committed since the last O-commit broadcast.
        self.commit_out: list[OCommitEntry] = []
        #: When the last LearnRequest was sent, and the execution position
        #: (slot, place in slot) just past the last C-instance it asked for:
        #: catching up goes at the pace of answers (:meth:`keep_learning`).
        self.asked_ms = -math.inf
        self.asked_upto: tuple[Slot, int] = (Slot(0), 0)
        #: The last request asked for all it could (``learn_c_max``): more is missing.
        self.asked_full = False
        #: The slot after a stop this view's safe prefix reached: nothing beyond
        #: it is in this epoch's order (``docs/membership.md`` section 3.2).
        self.stop_cap: Slot | None = None

    def reset(self) -> None:
        """Learner state is per view: recount from what is known now."""
        s = self.s
        olog = s.olog
        olog.acked = [NOT_ESTABLISHED] * s.n
        olog.acked[s.me] = olog.acc_upto
        # Slots below the snapshot are chosen and order base_count[me] of ours.
        self.safe_upto = olog.base
        self.own_scan = olog.base
        self.stop_cap = None
        s.own_ordered = olog.base_count[s.me]
        olog.acked_dirty = True

    def skip_to(self, base: Slot) -> None:
        """Slots below ``base`` were compacted (chosen, executed by a majority): the
        safe prefix starts there, and orders ``base_count[me]`` of ours below it."""
        s = self.s
        if self.safe_upto < base:
            self.safe_upto = base
            self.own_scan = base
            s.own_ordered = max(s.own_ordered, s.olog.base_count[s.me])
        s.olog.acked_dirty = True

    def advance_safe_prefix(self) -> None:
        """Commit O-instances in the safe prefix and make own C-instances ready."""
        s = self.s
        olog = s.olog
        olog.acked_dirty = False
        views = s.views
        seq = views.sequencer
        if seq is None or olog.acc_upto < 0:
            return
        acked = olog.acked
        me = s.me
        if self.stop_cap is not None and not views.is_sequencer:
            self.learn_stop_from_acks()
        if uses_two_acceptor_rule(s.n, me, seq):
            # Fig. 5 line 30: accepted by this replica itself and by the sequencer;
            # and the view's rebuilt range is chosen (else a view change could
            # rebuild it differently without either of us).
            if not views.range_committed:
                return
            safe = two_acceptor_prefix(acked, me, seq)
        else:
            quorum = majority_prefix(acked, s.accept_quorum)
            self.r.quorum_accepted(quorum)
            # Peers may have accepted slots we have not received yet: we can only
            # commit what we know. Slots known committed are quorum-accepted.
            safe = max(min(quorum, acked[me]), olog.committed_prefix(s.progress.slot))
        safe = min(safe, olog.advance_known(s.progress.slot, views.view))
        if self.stop_cap is not None:
            safe = min(safe, self.stop_cap)
        if safe <= self.safe_upto:
            return
        previous = self.safe_upto
        owners, counts, ballots, committed = (
            olog.owner,
            olog.count,
            olog.ballot,
            olog.committed,
        )
        before = s.own_ordered
        own = before
        out = self.commit_out
        b = olog.base
        for i in range(max(self.own_scan, b) - b, safe - b):
            owner = owners[i]
            if owner == me:
                own += counts[i]
                if not committed[i]:
                    committed[i] = True
                    olog.cballot[i] = ballots[i]
                    out.append(OCommitEntry(Slot(i + b), ballots[i], me, counts[i]))
            elif owner == STOP:
                # Nothing after the stop is in this epoch's order. The stop is
                # committed by the majority rule only, so only the sequencer
                # (which uses it at every N) commits and announces it.
                safe = self.stop_cap = Slot(i + b + 1)
                if views.is_sequencer and not committed[i]:
                    committed[i] = True
                    olog.cballot[i] = ballots[i]
                    out.append(OCommitEntry(Slot(i + b), ballots[i], STOP, 0))
                    s.progress.dirty = True
                break
        self.safe_upto = safe
        self.own_scan = safe
        if self.stop_cap is not None and not views.is_sequencer:
            self.learn_stop_from_acks()
        learned = False
        if views.is_sequencer:
            # The sequencer hears every O-ACK: it learns every O-instance, so a
            # replica whose own O-ACKs were lost (N >= 7) can learn from it.
            for i in range(max(previous, b) - b, safe - b):
                if not committed[i]:
                    committed[i] = True
                    olog.cballot[i] = ballots[i]
                    s.progress.dirty = True
                    learned = True
        if s.out.tracer is not None and (learned or own != before):
            s.out.trace("CommitO", upto=safe, own=own)
        if own == before:
            return
        s.own_ordered = own
        s.progress.dirty = True
        self.r.own_ordered(before, own)

    def learn_stop_from_acks(self) -> None:
        """A member that is not the sequencer: once a phase-2 quorum (itself among
        them) acknowledged every O-instance up to and including the stop in this
        view, all of them are chosen at this view's ballot, and it commits them
        itself (it holds their values: it accepted them) instead of waiting half
        a round trip for the sequencer's O-commit. Every acceptor acknowledges
        the stop to every member for this (``docs/membership.md`` section 4.6)."""
        s = self.s
        olog = s.olog
        cap = self.stop_cap
        assert cap is not None
        b = olog.base
        if cap <= b or olog.committed[cap - 1 - b]:
            return
        acked = olog.acked
        if min(majority_prefix(acked, s.accept_quorum), acked[s.me]) < cap:
            return
        committed, cballot, ballots = olog.committed, olog.cballot, olog.ballot
        for i in range(max(s.progress.slot, b) - b, cap - b):
            if not committed[i]:
                committed[i] = True
                cballot[i] = ballots[i]
        s.progress.dirty = True
        s.out.trace("LearnStop", slot=cap - 1, view=s.views.view)

    def broadcast_o_commit(self) -> None:
        s = self.s
        entries = tuple(self.commit_out)
        self.commit_out = []
        s.out.broadcast(s.prox.near, OCommit(s.me, s.views.view, entries))

    def handle_o_commit(self, m: OCommit) -> None:
        s = self.s
        entries = m.entries
        if s.out.tracer is None:
            self.learn_commits(entries)
            return
        # One event per slot whose knowledge changed (the model's HandleOCommit
        # learns one O-instance per step).
        before = {e[0]: s.olog.learned(e[0]) for e in entries}
        self.learn_commits(entries)
        for slot, ballot, owner, count in entries:
            if s.olog.learned(slot) != before[slot]:
                s.out.trace(
                    "HandleOCommit", src=m.src, slot=slot, ballot=ballot, owner=owner, count=count
                )

    def learn_commits(self, entries: tuple[OCommitEntry, ...]) -> None:
        """Record O-instances chosen at their ballots, durably, before executing them.

        With N = 5 a command leader commits its O-instance with two acceptors
        (itself and the sequencer). Everyone who executes the slot first records
        it, so an executed slot is held by a majority and no later view change
        can rebuild it differently (``docs/recovery.md`` section 10). The entries
        were checked against executed slots and held values
        (:func:`sdpaxos.core.validate.check_o_commit_entries`).
        """
        s = self.s
        olog = s.olog
        owners, counts, ballots, committed = (
            olog.owner,
            olog.count,
            olog.ballot,
            olog.committed,
        )
        executed_end = s.progress.executed_end()
        top = Slot(max((e[0] + 1 for e in entries), default=0))
        olog.grow(top)
        views = s.views
        runs: list[tuple[View, Slot, list[OValue]]] = []
        b = olog.base
        for entry_slot, ballot, owner, count in sorted(entries):
            if entry_slot < executed_end:
                continue
            slot = entry_slot - b
            value = (owner, count)
            # A commit is only ever relayed within one view, and whoever entered
            # that view forgot the unexecuted commits of older views: so a commit
            # at a ballot below the message's view was executed somewhere, and
            # is final.
            if ballots[slot] > ballot:
                # We hold the slot at a newer ballot (a later range re-proposed it).
                # The older commit ballot is kept: it says the value is final.
                if (owners[slot], counts[slot]) == value:
                    if not committed[slot] or ballot < olog.cballot[slot]:
                        committed[slot] = True
                        olog.cballot[slot] = ballot
                else:
                    s.stats.invariant_alarms += 1  # a range revoked a final slot
                continue
            if ballot < views.est_view and entry_slot >= views.est_base:
                # Our established view superseded older values beyond its base;
                # a final one there would mean it revoked an executed slot.
                s.stats.invariant_alarms += 1
                continue
            if ballots[slot] == ballot and committed[slot]:
                continue  # known (its commit ballot stays: an older one says "final")
            committed[slot] = True
            olog.cballot[slot] = ballot
            if ballots[slot] == ballot:
                continue  # already held durably
            owners[slot], counts[slot], ballots[slot] = owner, count, ballot
            if runs and runs[-1][0] == ballot and runs[-1][1] + len(runs[-1][2]) == entry_slot:
                runs[-1][2].append(value)
            else:
                runs.append((ballot, entry_slot, [value]))
        for ballot, start, values in runs:
            s.out.persist(OAccepted(ballot, start, tuple(values)))
        self.r.accepted_run_grew()
        if top > olog.heard_upto:
            olog.heard_upto = top
        olog.advance_known(s.progress.slot, views.view)
        s.progress.dirty = True
        olog.acked_dirty = True

    def tick(self, now: float) -> None:
        """Execution stalled while we know there is more to execute: ask every
        peer, once ``learn_ms`` passed since execution last moved and since we
        last asked (and no snapshot is on its way: peers would answer each
        request with one)."""
        s = self.s
        if (
            s.stalled()
            and now - max(s.progress.moved_ms, self.asked_ms) >= s.config.learn_ms
            and not self.r.fetching_snapshot()
        ):
            self.send_learn_request()

    def keep_learning(self) -> None:
        """Catching up goes at the pace of answers: a LearnRequest that asked for
        a full batch (``learn_c_max`` C-instances, so more is missing) and whose
        answers let execution pass the last C-instance it asked for, within
        ``learn_ms``, is followed at once by the next one (run after each
        execution). Without this, a replica far behind learned at most
        ``learn_c_max`` C-instances per ``learn_ms`` after each step of progress,
        and could take minutes (found by the long sweep, N = 7, seed 501075,
        with ``learn_c_max`` = 4). A replica that only stalled briefly asks for
        fewer, so ordinary commits arriving after its request start no chain.

        The next request waits for the end of the batch, not for any progress:
        each C-commit of an answer moves execution, and a request per step asked
        every peer again for nearly the same batch, so catching up on K commands
        cost about K x ``learn_c_max`` x peers C-commits (fuzz N = 5, seed 278:
        349,350 in one instant for 698 commands at two restarted replicas)."""
        s = self.s
        progress = s.progress
        if (
            self.asked_full
            and s.now_ms - self.asked_ms < s.config.learn_ms
            and (progress.slot, progress.in_slot) >= self.asked_upto
            and s.stalled()
        ):
            self.send_learn_request()

    def send_learn_request(self) -> None:
        """Ask every peer for what blocks execution: commits of O-instances from the
        first unexecuted slot, and of every C-instance the committed assignment
        log maps from there (in bulk, so a restarted replica catches up quickly)."""
        s = self.s
        olog = s.olog
        slot = s.progress.slot
        owners, counts, committed = olog.owner, olog.count, olog.committed
        logs = s.clog.logs
        next_k = list(s.progress.count)
        wanted: list[tuple[ReplicaId, CIndex]] = []
        cap = s.config.learn_c_max
        skip = s.progress.in_slot
        b = olog.base
        k_slot: int = slot - b
        upto = (slot, s.progress.in_slot)
        while k_slot < len(owners) and committed[k_slot] and len(wanted) < cap:
            owner = owners[k_slot]
            if owner >= 0:  # no-cl and the stop order nothing
                for j in range(skip, counts[k_slot]):
                    k = next_k[owner]
                    next_k[owner] = k + 1
                    inst = logs[owner].get(CIndex(k))
                    if (inst is None or not inst.committed) and len(wanted) < cap:
                        wanted.append((owner, CIndex(k)))
                        upto = (Slot(k_slot + b), j + 1)
            skip = 0
            k_slot += 1
        s.out.broadcast(s.prox.near, LearnRequest(s.me, s.views.view, slot, tuple(wanted)))
        self.asked_ms = s.now_ms
        self.asked_upto = upto
        self.asked_full = len(wanted) >= cap
        s.stats.learn_requests += 1
        s.out.trace("LearnRequest", o_from=slot, c_wanted=wanted)

    def handle_learn_request(self, m: LearnRequest) -> None:
        s = self.s
        olog = s.olog
        o_from = m.o_from
        view = s.views.view
        floor = s.clog.floor
        if 0 <= o_from < olog.base or any(index < floor[owner] for owner, index in m.c_wanted):
            # Below our snapshot: the asker catches up by installing it.
            self.r.offer_snapshot(m.src)
            return
        if o_from >= 0:
            stop = min(len(olog), o_from + s.config.learn_o_max)
            owners, counts, committed, cballots = (
                olog.owner,
                olog.count,
                olog.committed,
                olog.cballot,
            )
            b = olog.base
            entries = tuple(
                OCommitEntry(Slot(i + b), cballots[i], owners[i], counts[i])
                for i in range(max(o_from, b) - b, stop - b)
                if committed[i] and cballots[i] >= 0
            )
            if entries:
                s.out.send(m.src, OCommit(s.me, view, entries))
        for owner, index in m.c_wanted:
            inst = s.clog.get(owner, index)
            if inst is not None and inst.committed:
                s.out.send(m.src, CCommit(s.me, view, owner, index, inst.ballot, inst.commands))
