"""The sequencer: allocation of O-instances, heartbeats and leases, the history table.

One replica per view. It turns C-accepts and C-requests into O-instances whose
value is only a replica id and a count (paper Fig. 5 lines 12-15), sends them as
O-accepts (to the command leader only for N <= 5, thrifty), retransmits from
what each acceptor acknowledged, sends heartbeats that carry lease requests
(section 3.5), and keeps, per key, the last slot it gave a write (the history
table reads wait on) while reads come (``history_idle_ms``). Its state is
volatile: a restarted sequencer is deposed and a view change rebuilds what
matters from durable votes.

Allocation guard (Fig. 5 line 13, pitfall 1 of ``docs/protocol.md``): the
sequencer allocates for ``n`` only while the C-instances of ``n`` it has
covered are fewer than ``index + 1`` for the highest C-instance of ``n`` it has
heard of, so duplicated or reordered C-accepts and C-requests can never
over-allocate.
"""

import itertools
import math

from sdpaxos.core.context import Context
from sdpaxos.core.messages import CRequest, Heartbeat, LeaseGrant, NewView, OAccept, OAck
from sdpaxos.core.olog import NOT_ESTABLISHED
from sdpaxos.core.quorum import leader_and_sequencer_suffice, majority_prefix
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.storage import OAccepted
from sdpaxos.core.types import STOP, STOP_VALUE, Command, OValue, ReplicaId, Slot, keys_of

#: When the history table outgrows ``history_keys_max`` it evicts down to this
#: fraction below the limit (``limit // 8`` keys more), in one pass.
HISTORY_EVICT_DIVISOR = 8


class Sequencer:
    """Allocation, O-accept transmission, heartbeats and leases, the history table."""

    def __init__(self, ctx: Context, reactions: Reactions) -> None:
        self.s = ctx
        self.r = reactions
        n = ctx.n
        #: Per owner: C-instances covered by allocated O-instances. Derivable from
        #: the O-log (``OLog.coverage``) but kept: the allocation guard reads it on
        #: every C-accept and C-request, and a scan of the log there would be O(log).
        self.covered: list[int] = [0] * n
        #: Owners with a pending allocation, in arrival order -> wanted coverage.
        self.want_upto: dict[ReplicaId, int] = {}
        #: Per peer: O-instances sent so far (prefix; -1: the range is to be sent).
        self.sent_upto: list[Slot] = [Slot(0)] * n
        #: Peers to send what they lack at the next allocation.
        self.resend: set[ReplicaId] = set()
        self.lazy_ms = 0.0
        self.resend_check_ms = 0.0
        #: Acknowledged prefixes one retransmission period ago.
        self.acked_before: list[Slot] = [Slot(0)] * n
        #: New sequencer only: the rebuilt range ``[start, end)`` until a
        #: majority accepted it in this view.
        self.rebuild: tuple[Slot, Slot] | None = None
        # Heartbeats and the lease (section 3.5).
        self.hb_sent_ms = -math.inf
        self.hb_stamp = 0
        #: Heartbeat stamp -> (when it was sent, who granted a lease).
        self.lease_grants: dict[int, tuple[float, set[ReplicaId]]] = {}
        #: Our lease holds while ``now < lease_valid_until_ms``.
        self.lease_valid_until_ms = -math.inf
        # The history table: key -> the last slot given a write of it.
        self.history: dict[bytes, Slot] = {}
        self.history_floor = Slot(-1)
        self.pending_keys: dict[tuple[ReplicaId, int], tuple[bytes, ...]] = {}
        #: Is the history table kept now? Only while reads come (or always, with
        #: ``history_idle_ms`` None): a read starts it (:meth:`start_recording`),
        #: ``history_idle_ms`` without one drops it (:meth:`stop_recording`), and
        #: until then reads wait for the whole log.
        self.recording = ctx.config.history_idle_ms is None
        #: When this sequencer last answered a read (``read_slots``).
        self.last_read_ms = -math.inf
        #: Per replica: the highest executed prefix its lease grants reported
        #: (facts that never go stale: an executed slot stays recorded there).
        self.executed_of: list[Slot] = [Slot(0)] * n
        #: The stop in this view's log, once allocated or rebuilt: nothing is
        #: allocated after it (``docs/membership.md`` section 3.2).
        self.stop_slot: Slot | None = None

    # ------------------------------------------------------------ allocation

    def order(self, owner: ReplicaId, index: int, keys: tuple[bytes, ...] | None) -> None:
        """C-instances ``0 .. index`` of ``owner`` exist: order them (``keys``: what
        ``owner.index`` writes, for the history table, if known)."""
        if keys is not None and self.recording and index >= self.covered[owner]:
            self.pending_keys[(owner, index)] = keys
        want = index + 1
        if want > self.covered[owner] and want > self.want_upto.get(owner, 0):
            self.want_upto[owner] = want

    def order_commands(
        self, owner: ReplicaId, index: int, commands: tuple[Command, ...] | None
    ) -> None:
        """:meth:`order`, for a C-instance whose ``commands`` are known here (a
        C-accept the sequencer got, or its own); ``None``: not known.

        Their keys are collected only while the history table is kept, and only
        for an instance not ordered yet: collecting them is a set and a sort of
        the batch's keys (about 23 us for 250 commands), which the sequencer
        otherwise paid on every C-accept it got, with no read to serve.
        """
        if commands is None or not self.recording or index < self.covered[owner]:
            self.order(owner, index, None)
        else:
            self.order(owner, index, keys_of(commands))

    def handle_c_request(self, m: CRequest) -> None:
        s = self.s
        if s.out.tracer is not None:
            s.out.trace("HandleCRequest", owner=m.owner, index=m.index)
        if m.index < self.covered[m.owner]:
            # Already ordered: a retransmission. Resend what the owner lacks.
            if m.o_accepted_upto < self.sent_upto[m.owner]:
                self.rewind_sent(m.owner, m.o_accepted_upto)
            self.resend.add(m.owner)
        else:
            self.order(m.owner, m.index, m.keys if m.keys else None)

    def allocate(self) -> None:
        """Turn pending wants into O-instances and send O-accepts (Fig. 5 lines 12-15).

        The log ends at ``acc_upto`` (the sequencer accepted all it allocated);
        slots beyond it may still hold values of older views, never chosen, which
        new allocations overwrite (they stay in the durable records too).
        """
        s = self.s
        if self.stop_slot is not None:
            self.want_upto.clear()  # the epoch is over: its leaders propose again in the next
            self.flush_resend()
            return
        olog = s.olog
        cfg = s.config
        start = olog.acc_upto
        end: int = start
        covered = self.covered
        new_owners: set[ReplicaId] = set()
        allocated: list[OValue] = []
        idle_ms = cfg.history_idle_ms
        if self.recording and idle_ms is not None and s.now_ms - self.last_read_ms > idle_ms:
            self.stop_recording()
        record = self.record_history if self.recording else None
        for owner, want in self.want_upto.items():
            batch_max = 1 if (s.n == 5 and owner != s.me) else cfg.o_batch_max
            while covered[owner] < want:
                count = min(want - covered[owner], batch_max)
                if record is not None:
                    record(Slot(end), owner, covered[owner], count)
                allocated.append((owner, count))
                covered[owner] += count
                end += 1
            new_owners.add(owner)
        self.want_upto.clear()
        if s.stop_wanted and self.rebuild is None:
            # A membership change is pending: the stop goes after what was wanted.
            self.stop_slot = Slot(end)
            allocated.append(STOP_VALUE)
            end += 1
            new_owners.add(STOP)
            self.r.share_own_before_stop()
        if allocated:
            olog.grow(end)
            owners, counts, ballots, committed = (
                olog.owner,
                olog.count,
                olog.ballot,
                olog.committed,
            )
            view = s.views.view
            i0 = start - olog.base
            for k, (owner, count) in enumerate(allocated):
                slot = i0 + k
                owners[slot], counts[slot], ballots[slot], committed[slot] = (
                    owner,
                    count,
                    view,
                    False,
                )
            values = tuple(allocated)
            s.out.persist(OAccepted(view, start, values))
            s.stats.o_instances_allocated += len(values)
            if s.out.tracer is not None:
                s.out.trace("AllocateO", start=start, values=values)
                if self.stop_slot is not None and self.stop_slot >= start:
                    s.out.trace("AllocateStop", slot=self.stop_slot)
            olog.acc_upto = Slot(end)
            olog.heard_upto = max(olog.heard_upto, olog.acc_upto)
            olog.advance_known(s.progress.slot, view)
            olog.acked[s.me] = olog.acc_upto
            olog.acked_dirty = True
        for owner in new_owners:
            self.resend.update(self.o_accept_targets(owner))
        self.flush_resend()

    def flush_resend(self) -> None:
        """Send every peer marked for it what it has not been sent."""
        recipients = self.resend
        self.resend = set()
        for p in sorted(recipients):
            self.send_o_accepts(p)

    def stop_due(self) -> bool:
        """A membership change is pending and this view's log has no stop yet."""
        return self.s.stop_wanted and self.stop_slot is None

    def o_accept_targets(self, owner: ReplicaId) -> tuple[ReplicaId, ...]:
        """Who receives the O-accept for ``owner``'s new O-instance (paper section 4).

        The stop goes to every member: it is committed by the majority rule at
        every N (``docs/membership.md`` section 3.1), and each member learns it
        chosen from the others' acknowledgements (they ack it to every member),
        so all of them start the next epoch one round trip after it is
        allocated (section 4.6). Once per epoch: the thrifty rule saves nothing.
        """
        s = self.s
        if owner == STOP:
            return tuple(s.prox.near)
        if owner == s.me:
            return s.prox.c_quorum  # the sequencer's own: its nearest majority
        if not s.config.thrifty:
            return tuple(s.prox.near)
        if leader_and_sequencer_suffice(s.n):
            return (owner,)  # "only sent to the command leader"
        prox = s.prox
        live = [p for p in prox.near if p != owner and p not in prox.suspected]
        extra = (live or [p for p in prox.near if p != owner])[: s.accept_quorum - 2]
        return (owner, *extra)

    def rewind_sent(self, peer: ReplicaId, acked: Slot) -> None:
        """Resend to ``peer`` from what it acknowledged; a peer that has not
        acknowledged the range gets the range again (-1: not sent)."""
        self.sent_upto[peer] = acked if acked >= self.s.views.est_base else NOT_ESTABLISHED

    def send_o_accepts(self, peer: ReplicaId) -> None:
        """Send ``peer`` every O-instance it has not been sent (prefix piggy-backing).

        A peer that has not acknowledged this view's rebuilt range first gets the
        whole range in one O-accept (accepted atomically), whatever its size.
        """
        s = self.s
        olog = s.olog
        end = olog.acc_upto
        sent: int = self.sent_upto[peer]
        base = s.views.est_base
        chunk = s.config.o_accept_values_max
        me, view = s.me, s.views.view
        if sent < base or sent == NOT_ESTABLISHED:
            # (Below our snapshot the range is executed by a majority: the peer
            # establishes the view from our snapshot slot and learns the rest by
            # snapshot.)
            sent = max(s.views.est_start, olog.base)
            stop = max(base, min(end, sent + chunk))
            s.out.send(peer, OAccept(me, view, Slot(sent), olog.values(sent, stop), base, True))
            sent = stop
        sent = max(sent, olog.base)
        while sent < end:
            stop = min(end, sent + chunk)
            s.out.send(peer, OAccept(me, view, Slot(sent), olog.values(sent, stop), base, False))
            sent = stop
        self.sent_upto[peer] = Slot(sent)

    def resend_own_o_accepts(self) -> None:
        """The sequencer's own O-instances lack a quorum: resend from each peer's ack."""
        s = self.s
        acked = s.olog.acked
        end = s.olog.acc_upto
        for p in s.prox.near:
            if acked[p] < end and self.sent_upto[p] > acked[p]:
                self.rewind_sent(p, acked[p])
                self.resend.add(p)
        s.stats.retransmissions += 1

    def handle_o_ack(self, m: OAck) -> None:
        """An acceptor's accepted prefix (the sequencer, and owners for N >= 7, get these)."""
        s = self.s
        olog = s.olog
        upto = m.upto
        if s.out.tracer is not None:
            s.out.trace("HandleOAck", src=m.src, upto=upto)
        leading = s.views.is_sequencer
        if upto < s.views.est_base:
            if leading:
                # The peer lacks this view's range: the NewView if the range is
                # chosen (then everything after it), else the range itself.
                p = m.src
                if s.views.new_view is not None:
                    s.out.send(p, s.views.new_view)
                    self.sent_upto[p] = s.views.est_base
                else:
                    self.sent_upto[p] = NOT_ESTABLISHED
                self.resend.add(p)
            return
        if upto > olog.acked[m.src]:
            olog.acked[m.src] = upto
            olog.acked_dirty = True
        if leading and upto > self.sent_upto[m.src]:
            self.sent_upto[m.src] = upto

    def tick(self, now: float) -> None:
        """Heartbeats, and lazy and stalled-peer retransmission of the assignment log."""
        s = self.s
        cfg = s.config
        if now - self.hb_sent_ms >= cfg.heartbeat_ms:
            self.send_heartbeats()
        if now - self.lazy_ms >= cfg.retransmit_ms / 3:
            # Lazily push the assignment log to peers that are behind.
            self.lazy_ms = now
            end = s.olog.acc_upto
            for p in s.prox.near:
                if self.sent_upto[p] < end:
                    self.resend.add(p)
        if now - self.resend_check_ms >= cfg.retransmit_ms:
            # A peer whose acknowledgement did not move for a whole period
            # while it lags has lost something: resend from its ack.
            self.resend_check_ms = now
            end = s.olog.acc_upto
            previous = self.acked_before
            acked_now = s.olog.acked
            for p in s.prox.near:
                acked = acked_now[p]
                if acked == previous[p] and acked < end and self.sent_upto[p] > acked:
                    self.rewind_sent(p, acked)
                    self.resend.add(p)
            self.acked_before = list(acked_now)

    # ------------------------------------------------------------ view change

    def start_view(self, start: Slot, end: Slot) -> None:
        """We won: sequence from the rebuilt range ``[start, end)`` on, from nothing."""
        s = self.s
        olog = s.olog
        self.covered = olog.coverage(end, s.n)
        # A rebuilt range ends at its first stop (view_change drops what follows).
        b = olog.base
        self.stop_slot = next(
            (
                Slot(i + b)
                for i in range(max(start, b) - b, min(end - b, len(olog.owner)))
                if olog.owner[i] == STOP
            ),
            None,
        )
        self.want_upto.clear()
        self.sent_upto = [NOT_ESTABLISHED] * s.n
        self.rebuild = (start, end)
        # A new sequencer has no history: reads wait for the whole log (i_G).
        self.history.clear()
        self.pending_keys.clear()
        self.history_floor = Slot(end - 1)
        self.recording = s.config.history_idle_ms is None
        self.lease_valid_until_ms = -math.inf
        self.lease_grants.clear()

    def stop_view(self) -> None:
        """Another view is established here: nothing of ours is pending any more."""
        self.want_upto.clear()
        self.resend.clear()

    def left_view(self) -> None:
        """The view we were in is over: a range we were rebuilding is no longer ours."""
        self.rebuild = None

    def rebuilding(self) -> bool:
        """Is our rebuilt range still unchosen (a phase-2 quorum has not accepted it)?"""
        return self.rebuild is not None

    def resend_to_all(self) -> None:
        """A new range: every peer must accept it, so every peer is sent what it lacks."""
        self.resend.update(self.s.prox.near)

    def quorum_accepted(self, upto: Slot) -> None:
        """A phase-2 quorum accepted every slot below ``upto``: our rebuilt range,
        if it ends there or before, is chosen."""
        if self.rebuild is not None and upto >= self.rebuild[1]:
            self.commit_rebuilt_range()

    def reset_acked_before(self) -> None:
        """The learner recounts the acknowledged prefixes: the stalled-peer check
        (:meth:`tick`) compares with the new ones from now on."""
        self.acked_before = list(self.s.olog.acked)

    def commit_rebuilt_range(self) -> None:
        """A phase-2 quorum accepted the rebuilt range: it is chosen; notify everyone."""
        assert self.rebuild is not None
        s = self.s
        olog = s.olog
        start, end = self.rebuild
        self.rebuild = None
        s.views.range_committed = True
        view = s.views.view
        start = max(start, olog.base)  # below: executed by a majority and compacted
        for slot in range(start, end):
            if not olog.is_committed(slot):
                olog.commit(slot, view)
        values = olog.values(start, end)
        msg = NewView(s.me, view, start, values)
        s.views.new_view = msg
        s.out.broadcast(s.prox.near, msg)
        s.progress.dirty = True
        s.out.trace("SendNewView", view=view, start=start, values=len(values))

    # ------------------------------------------------- heartbeats and lease

    def send_heartbeats(self) -> None:
        s = self.s
        now = s.now_ms
        self.hb_sent_ms = now
        self.hb_stamp += 1
        msg = self.current_heartbeat()
        s.out.broadcast(s.prox.near, msg)
        self.r.heard_majority_executed(msg.majority_executed)
        self.lease_grants[msg.stamp] = (now, {s.me})
        horizon = now - s.config.lease_ms
        for old in [k for k, (sent, _) in self.lease_grants.items() if sent < horizon]:
            del self.lease_grants[old]

    def heartbeat_base(self) -> Slot:
        """The view's base once the rebuilt range is chosen, else -1."""
        views = self.s.views
        return views.est_base if views.range_committed and views.is_sequencer else Slot(-1)

    def answer_stale(self, dst: ReplicaId) -> None:
        """``dst`` wrote to an older view: tell it where we are (the latest
        heartbeat, and our NewView once the range is chosen)."""
        s = self.s
        s.out.send(dst, self.current_heartbeat())
        if s.views.new_view is not None:
            s.out.send(dst, s.views.new_view)

    def release_lease(self) -> None:
        """Hand-over: serve no read under our lease from now on."""
        self.lease_valid_until_ms = -math.inf

    def current_heartbeat(self) -> Heartbeat:
        """The heartbeat of stamp ``hb_stamp``: the one :meth:`send_heartbeats`
        sends, and the latest again (for a replica that wrote to an old view)."""
        s = self.s
        return Heartbeat(
            s.me,
            s.views.view,
            s.olog.acc_upto,
            self.hb_stamp,
            self.heartbeat_base(),
            self.majority_executed(),
            self.recording,
        )

    def majority_executed(self) -> Slot:
        """The highest slot below which a majority executed everything (section 16.2)."""
        s = self.s
        executed = self.executed_of
        executed[s.me] = max(executed[s.me], s.progress.slot)
        return majority_prefix(executed, s.majority)

    def handle_lease_grant(self, m: LeaseGrant) -> None:
        s = self.s
        if not s.views.is_sequencer:
            return
        if m.executed > self.executed_of[m.src]:
            self.executed_of[m.src] = m.executed
        grant = self.lease_grants.get(m.stamp)
        if grant is None:
            return  # too old to matter
        sent_ms, grantors = grant
        grantors.add(m.src)
        if len(grantors) >= s.majority:
            # Dated from when we asked, on our clock, shortened for clock rates.
            until = sent_ms + s.config.lease_hold_ms
            if until > self.lease_valid_until_ms:
                self.lease_valid_until_ms = until

    def has_lease(self) -> bool:
        """Do we hold a sequencer lease granted by a majority at the latest time given?"""
        s = self.s
        return (
            s.views.is_sequencer
            and self.rebuild is None
            and self.stop_slot is None  # the lease ends with the epoch (membership.md 4.5)
            and s.views.handing_over is None
            and s.now_ms < self.lease_valid_until_ms
        )

    # ---------------------------------------------------------- history table

    def read_slot(self, key: bytes | None) -> Slot:
        """The last slot a write of ``key`` may occupy (i_A, or i_G when unsure)."""
        return self.read_slots((key or b"",))[0]

    def read_slots(self, keys: tuple[bytes, ...]) -> tuple[Slot, ...]:
        """The last slot a write of each key may occupy (``b""``: a read of no
        named key, which waits for the whole log), in one pass: the history
        table's slot (i_A) or the floor, whichever is later; the whole log (i_G)
        while the table is not kept (:attr:`recording`), which this read restarts.

        Why a batch: an R-request batch from a busy replica carries hundreds of
        reads, and at the sequencer, the busiest replica, two calls per read
        cost more than the lookup itself.
        """
        s = self.s
        self.last_read_ms = s.now_ms
        whole = Slot(s.olog.acc_upto - 1)
        if not self.recording:
            self.start_recording(whole)
            return (whole,) * len(keys)
        floor = self.history_floor
        get = self.history.get
        return tuple(
            [
                whole if not key else (slot if (slot := get(key, floor)) > floor else floor)
                for key in keys
            ]
        )

    def start_recording(self, whole: Slot) -> None:
        """Keep the history table again, from now on: every slot allocated so far
        (``whole`` is the last) is below the floor, since no keys were kept for
        them."""
        self.recording = True
        self.history_floor = max(self.history_floor, whole)

    def stop_recording(self) -> None:
        """No read for ``history_idle_ms``: drop the history table and stop keeping
        it (the paper lets the sequencer deactivate the read optimisation under
        load, section 3.5; its cost is a dict update per written key, the
        sequencer's largest cost beyond the other replicas'). Until the next
        read, reads wait for the whole log (:meth:`read_slots`)."""
        self.recording = False
        self.history.clear()
        self.pending_keys.clear()

    def record_history(self, slot: Slot, owner: ReplicaId, first: int, count: int) -> None:
        """Slot ``slot`` orders C-instances ``first ..`` of ``owner``."""
        history = self.history
        take_keys = self.pending_keys.pop
        forget = history.pop  # bound once: this loop runs once per command
        for index in range(first, first + count):
            keys = take_keys((owner, index), None)
            if keys is None or b"" in keys:
                # Unknown objects (the request was lost, or a write named none):
                # every read must wait for this slot.
                self.history_floor = slot
                continue
            for key in keys:
                forget(key, None)
                history[key] = slot
        limit = self.s.config.history_keys_max
        if len(history) > limit:
            self._evict_history(len(history) - limit + limit // HISTORY_EVICT_DIVISOR)

    def _evict_history(self, count: int) -> None:
        """Forget the ``count`` least recently written keys; reads of them then
        wait for the latest slot forgotten (the floor), which is always safe.

        Why in chunks: a dict keeps the places of removed entries until it is
        resized, and iterating it from the start walks over them. Taking the
        oldest key one at a time made each write past the limit cost as much as
        every key evicted since the last resize (the sequencer's CPU per command
        grew with run length, measured: 71K instead of about 450K commands/s
        after 120,000 operations). One pass per ``limit // 8`` keys makes it O(1)
        per key, amortised.
        """
        history = self.history
        # The slots of the forgotten keys, popped in C (map), not a Python loop.
        slots = list(map(history.pop, list(itertools.islice(history, count))))
        if slots:
            self.history_floor = max(self.history_floor, max(slots))
