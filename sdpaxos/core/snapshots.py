"""Snapshots: compaction of an executed prefix, and state transfer (``docs/recovery.md`` 16).

A replica *captures* a snapshot at a slot boundary it has executed (every
``snapshot_slots_min`` slots, or when the driver asks). It *takes* it, forgetting
the O-instances below the slot and the C-instances those slots ran, only once a
majority executed that far (the sequencer's heartbeats carry the point): a slot
executed by a majority is final however a later view change goes, while one
executed only here might be held by too few replicas (N = 5). The driver saves
the snapshot and truncates the records it covers (:attr:`Ready.snapshot`).

Whoever asks about a compacted prefix (a learn request, a C-instance recovery,
a vote) is answered with the snapshot instead, in chunks of at most
``snapshot_chunk_bytes``; the asker fetches them in order, resumes from its
offset after a loss, and installs the snapshot atomically once it holds all of
it. At most one transfer runs at a time.
"""

from dataclasses import dataclass

from sdpaxos.core.app import StateMachine
from sdpaxos.core.context import Context
from sdpaxos.core.errors import PeerMessageError
from sdpaxos.core.messages import SnapshotChunk, SnapshotRequest
from sdpaxos.core.reactions import Reactions
from sdpaxos.core.storage import Snapshot, decode_snapshot, encode_snapshot
from sdpaxos.core.types import CIndex, ReplicaId, Slot

#: How many snapshots a replica keeps serving at once (the newest and the one
#: before): a transfer that takes longer than two compactions restarts.
SNAPSHOTS_SERVED_MAX = 2


@dataclass(slots=True)
class Transfer:
    """A snapshot being fetched from ``src``: the bytes so far, of ``total``."""

    src: ReplicaId
    slot: Slot
    total: int
    data: bytearray
    #: When we last asked, and when a chunk last arrived.
    asked_ms: float
    heard_ms: float


class Snapshots:
    """Capture, take, offer, fetch and install snapshots."""

    def __init__(self, ctx: Context, reactions: Reactions, state_machine: StateMachine) -> None:
        self.s = ctx
        self.r = reactions
        self.sm = state_machine
        #: The newest snapshot taken or installed (what peers below it are sent).
        self.current: Snapshot | None = None
        #: The snapshots we still serve, by slot (``current`` and the one before
        #: it, at most :data:`SNAPSHOTS_SERVED_MAX`): a peer fetching the older
        #: one finishes it rather than restarting each time we compact again.
        #: Each is encoded when a peer first asks for it (most never travel).
        self.served: dict[Slot, Snapshot | bytes] = {}
        #: Captured at an executed boundary, waiting for a majority to execute it.
        self.captured: Snapshot | None = None
        #: The highest majority-executed point heard (the sequencer's heartbeats).
        self.majority_executed = Slot(0)
        #: The driver asked for a snapshot (:meth:`Replica.request_snapshot`).
        self.requested = False
        #: The one transfer in flight, if any.
        self.transfer: Transfer | None = None

    def request(self) -> None:
        """The driver asked for a snapshot (:meth:`Replica.request_snapshot`):
        capture one at the next executed boundary, looked at the next ready()."""
        self.requested = True
        self.s.progress.dirty = True

    def fetching(self) -> bool:
        """Is a snapshot on its way (a transfer in flight)?"""
        return self.transfer is not None

    # ------------------------------------------------------------ taking

    def after_execute(self) -> None:
        """Capture a snapshot at the executed boundary when one is due, and take
        the captured one once a majority executed that far."""
        self.capture()
        self.maybe_take()

    def capture(self) -> None:
        s = self.s
        progress = s.progress
        threshold = s.config.snapshot_slots_min
        if (
            self.captured is None
            and progress.in_slot == 0
            and progress.slot > s.olog.base
            and (
                self.requested
                or (threshold is not None and progress.slot - s.olog.base >= threshold)
            )
        ):
            self.requested = False
            self.captured = Snapshot(
                progress.slot,
                tuple(progress.count),
                (),
                CIndex(0),
                self.r.dump_sessions(),
                self.sm.snapshot(),
            )

    def maybe_take(self) -> None:
        captured = self.captured
        if self.s.out.snapshot is not None:
            return  # one snapshot per batch (an install came first): take it next time
        if captured is not None and captured.slot <= self.majority_executed:
            self.captured = None
            if captured.slot > self.s.olog.base:
                self.take(captured)
            # The state is at the executed boundary now: the next one may be due
            # already (execution went on while this one waited for a majority).
            self.capture()

    def take(self, captured: Snapshot) -> None:
        """Compact below ``captured.slot`` (executed here and by a majority): TakeSnapshot."""
        s = self.s
        snap = Snapshot(
            captured.slot,
            captured.executed,
            tuple(s.clog.c_max),
            self.r.next_c_index(),
            captured.sessions,
            captured.app,
        )
        self.compact(snap, installed=False)
        s.stats.snapshots_taken += 1
        s.out.trace("TakeSnapshot", slot=snap.slot)

    def compact(self, snap: Snapshot, *, installed: bool) -> None:
        """Forget what ``snap`` covers, in memory; the driver saves it and truncates
        (``installed``: it came from a peer, else this replica took it)."""
        s = self.s
        olog = s.olog
        self.r.compacted(snap)
        olog.compact(snap.slot, list(snap.executed))
        s.clog.compact(snap.executed)
        self.r.skip_learner(snap.slot)
        if olog.acc_upto >= 0 and olog.acc_upto < snap.slot:
            # Slots below a snapshot are chosen (a majority executed them), so an
            # acknowledgement that covers them tells the sequencer nothing false.
            olog.acc_upto = snap.slot
            olog.acked[s.me] = max(olog.acked[s.me], snap.slot)
        olog.known_upto = max(olog.known_upto, snap.slot)
        olog.heard_upto = max(olog.heard_upto, snap.slot)
        self.keep(snap)
        s.out.snapshot = snap
        s.out.snapshot_installed = installed

    def ask(self, src: ReplicaId) -> None:
        """Ask ``src`` for its snapshot, whatever its slot (slot 0 is never one)."""
        s = self.s
        if self.transfer is None:
            s.out.send(src, SnapshotRequest(s.me, s.views.view, Slot(0), 0))

    def keep(self, snap: Snapshot) -> None:
        """``snap`` is the newest: serve it, and the one before it a while longer."""
        self.current = snap
        served = self.served
        served[snap.slot] = snap
        while len(served) > SNAPSHOTS_SERVED_MAX:
            del served[min(served)]

    def encoded(self, slot: Slot) -> bytes:
        """The bytes of the served snapshot at ``slot`` (encoded once, on demand)."""
        kept = self.served[slot]
        if isinstance(kept, Snapshot):
            kept = self.served[slot] = encode_snapshot(kept)
        return kept

    def heard_majority_executed(self, slot: Slot) -> None:
        if slot > self.majority_executed:
            self.majority_executed = slot
            self.maybe_take()

    # ------------------------------------------------------------ offering

    def offer(self, dst: ReplicaId) -> None:
        """``dst`` asked about something below our snapshot: send its first chunk."""
        if self.current is not None:
            self.send_chunk(dst, self.current.slot, 0)
            self.s.stats.snapshots_offered += 1

    def send_chunk(self, dst: ReplicaId, slot: Slot, offset: int) -> None:
        s = self.s
        data = self.encoded(slot)
        chunk = data[offset : offset + s.config.snapshot_chunk_bytes]
        s.out.send(dst, SnapshotChunk(s.me, s.views.view, slot, offset, len(data), chunk))

    def handle_snapshot_request(self, m: SnapshotRequest) -> None:
        if self.current is None:
            return
        data = self.encoded(m.slot) if m.slot in self.served else None
        if data is not None and m.offset < len(data):
            self.send_chunk(m.src, m.slot, m.offset)
        else:
            self.send_chunk(m.src, self.current.slot, 0)  # the newest, from its start

    # ------------------------------------------------------------ fetching

    def handle_snapshot_chunk(self, m: SnapshotChunk) -> None:
        s = self.s
        self.drop_stale_transfer()
        if m.slot <= s.progress.slot:
            return  # nothing we have not executed
        t = self.transfer
        if t is None or t.slot != m.slot or t.src != m.src:
            # Another snapshot's first chunk: switch to it only if it is newer,
            # or if ours went quiet (its source may be down); else resume ours.
            quiet = t is not None and s.now_ms - t.heard_ms >= 2 * s.config.learn_ms
            if m.offset != 0 or (t is not None and m.slot <= t.slot and not quiet):
                return
            t = self.transfer = Transfer(m.src, m.slot, m.total, bytearray(), s.now_ms, s.now_ms)
            s.out.trace("FetchSnapshot", slot=m.slot, src=m.src, total=m.total)
        if m.offset != len(t.data) or m.total != t.total:
            return  # a duplicate or an old chunk
        t.data += m.data
        t.asked_ms = t.heard_ms = s.now_ms
        if len(t.data) < t.total:
            s.out.send(t.src, SnapshotRequest(s.me, s.views.view, t.slot, len(t.data)))
            return
        self.transfer = None
        try:
            snap = decode_snapshot(bytes(t.data), s.n)
        except PeerMessageError:
            s.stats.rejected += 1
            return
        if snap.slot != t.slot:
            s.stats.rejected += 1
            return
        self.install(snap, t.src)

    def drop_stale_transfer(self) -> None:
        """A transfer of a snapshot we executed past (learned, or installed another)
        is over: else it would hold learning off for good."""
        t = self.transfer
        if t is not None and t.slot <= self.s.progress.slot:
            self.transfer = None

    def tick(self, now: float) -> None:
        """A transfer that went quiet resumes from where it stopped."""
        self.drop_stale_transfer()
        t = self.transfer
        if t is not None and now - t.asked_ms >= self.s.config.learn_ms:
            t.asked_ms = now
            s = self.s
            s.stats.retransmissions += 1
            s.out.send(t.src, SnapshotRequest(s.me, s.views.view, t.slot, len(t.data)))

    def install(self, snap: Snapshot, src: ReplicaId) -> None:
        """Replace everything below ``snap.slot`` with ``snap``, atomically: InstallSnapshot."""
        s = self.s
        progress = s.progress
        if snap.slot <= progress.slot:
            return
        self.r.load_sessions(snap.sessions)  # first: it checks them (a refusal changes nothing)
        self.sm.restore(snap.app)
        progress.slot = snap.slot
        progress.in_slot = 0
        progress.count = list(snap.executed)
        progress.dirty = True
        # Our c_max stays ours: votes report what *this* replica accepted (the
        # N = 5 inference reasons about it); the peer's only bounds our next index.
        c_max = tuple(s.clog.c_max)
        me = s.me
        next_index = CIndex(max(self.r.next_c_index(), snap.executed[me], snap.c_max[me] + 1))
        mine = Snapshot(snap.slot, snap.executed, c_max, next_index, snap.sessions, snap.app)
        if self.captured is not None and self.captured.slot <= snap.slot:
            self.captured = None
        self.drop_stale_transfer()
        self.compact(mine, installed=True)
        s.stats.snapshots_installed += 1
        if s.views.sequencer is None:
            s.stats.snapshots_installed_in_view_change += 1
        s.out.trace("InstallSnapshot", slot=snap.slot, src=src)
        progress.blocked = None  # execution starts again from the snapshot
        progress.moved_ms = s.now_ms
        self.r.installed(mine)

    def restart_from(self, snap: Snapshot) -> None:
        """A restart: the newest durable snapshot comes first, then the records."""
        s = self.s
        self.r.load_sessions(snap.sessions)
        self.sm.restore(snap.app)
        progress = s.progress
        progress.slot = snap.slot
        progress.count = list(snap.executed)
        s.olog.compact(snap.slot, list(snap.executed))
        s.clog.compact(snap.executed)
        s.clog.c_max = list(snap.c_max)
        self.keep(snap)
