"""Every shape and range check of a peer message, run before any state changes.

:func:`check` raises :class:`PeerMessageError` for a message this replica must
refuse; :meth:`Replica.step` calls it after the sender and view checks and
before anything else, so a refused message changes nothing (not even who is
suspected, or when the sequencer was last heard from). The handlers behind it
may assume well-formed input. What is checked against the replica's state (the
window, executed slots, the established view's range, whether this replica is
the sequencer) reads the shared :class:`~sdpaxos.core.context.Context` only.
"""

from collections.abc import Callable
from typing import Any

from sdpaxos.core.context import Context
from sdpaxos.core.errors import PeerMessageError
from sdpaxos.core.messages import (
    CAccept,
    CAck,
    CCommit,
    CPrepare,
    CPromise,
    CRequest,
    Heartbeat,
    LearnRequest,
    LeaseGrant,
    Message,
    NewView,
    OAccept,
    OAck,
    OCommit,
    RReply,
    RReplyBatch,
    RRequest,
    RRequestBatch,
    SequencerHandover,
    SnapshotChunk,
    SnapshotRequest,
    StragglerPoll,
    StragglerVote,
    Vote,
    VRequest,
)
from sdpaxos.core.olog import NOT_ESTABLISHED
from sdpaxos.core.types import NO_CL, STOP, OValue, Slot, View, ballot_round


def c_instance(s: Context, owner: object, index: object) -> None:
    if type(owner) is not int or not 0 <= owner < s.n:
        raise PeerMessageError(f"bad C-instance owner {owner!r}")
    if type(index) is not int or index < 0:
        raise PeerMessageError(f"bad C-instance index {index!r}")
    if index >= s.progress.count[owner] + s.config.c_index_window_max:
        raise PeerMessageError(f"C-instance {owner}.{index} is beyond the window")


def o_value(s: Context, value: object) -> None:
    if not isinstance(value, tuple) or len(value) != 2:
        raise PeerMessageError(f"bad O-value {value!r}")
    owner, count = value
    if owner in (NO_CL, STOP):
        if count != 0:
            raise PeerMessageError(f"{'no-cl' if owner == NO_CL else 'stop'} with count {count!r}")
        return
    if type(owner) is not int or not 0 <= owner < s.n:
        raise PeerMessageError(f"bad O-value owner {owner!r}")
    if type(count) is not int or not 1 <= count <= s.config.o_batch_max:
        raise PeerMessageError(f"bad O-value count {count!r}")


def against_executed(s: Context, start: Slot, values: tuple[OValue, ...], what: str) -> None:
    """A value for an executed slot must be the executed one. Anything else
    would revoke an executed slot: a protocol bug, surfaced as an alarm."""
    slot = s.olog.revoked_executed(start, values, s.progress.executed_end())
    if slot is not None:
        raise PeerMessageError(
            f"{what} would revoke executed slot {slot}: "
            f"{s.olog.value(slot)} -> {values[slot - start]}",
            alarm=True,
        )


def same_ballot(s: Context, start: Slot, values: tuple[OValue, ...], ballot: View) -> None:
    """At one ballot (a view) the sequencer proposes one value per slot."""
    slot = s.olog.conflict_at_ballot(start, values, ballot)
    if slot is not None:
        raise PeerMessageError(
            f"slot {slot} already holds {s.olog.value(slot)} at ballot {ballot}, "
            f"the sequencer now says {values[slot - start]}"
        )


def _c_accept(s: Context, m: CAccept) -> None:
    c_instance(s, m.owner, m.index)
    if type(m.ballot) is not int or m.ballot < 0:
        raise PeerMessageError(f"bad ballot {m.ballot!r}")
    if not isinstance(m.commands, tuple) or len(m.commands) > s.config.c_batch_max:
        raise PeerMessageError("C-accept carries too many commands")
    inst = s.clog.get(m.owner, m.index)
    if (
        inst is not None
        and m.ballot >= inst.promised
        and inst.committed
        and inst.commands != m.commands
    ):
        raise PeerMessageError(
            f"C-accept for chosen C-instance {m.owner}.{m.index} with a new value"
        )


def _c_ack(s: Context, m: CAck) -> None:
    c_instance(s, m.owner, m.index)


def _c_commit(s: Context, m: CCommit) -> None:
    c_instance(s, m.owner, m.index)
    if m.commands is not None and len(m.commands) > s.config.c_batch_max:
        raise PeerMessageError("C-commit carries too many commands")


def _c_request(s: Context, m: CRequest) -> None:
    if not s.views.is_sequencer:
        raise PeerMessageError(f"C-request sent to {s.me}, not the sequencer")
    if m.owner != m.src:
        raise PeerMessageError("C-request for another replica's C-instance")
    c_instance(s, m.owner, m.index)
    upto = m.o_accepted_upto
    if type(upto) is not int or not NOT_ESTABLISHED <= upto <= s.olog.acc_upto:
        raise PeerMessageError(f"bad o_accepted_upto {upto!r}")
    keys = m.keys
    if (
        not isinstance(keys, tuple)
        or len(keys) > s.config.c_batch_max
        or any(type(k) is not bytes for k in keys)
    ):
        raise PeerMessageError("bad C-request keys")


def _o_accept(s: Context, m: OAccept) -> None:
    start, values, base = m.start, m.values, m.base
    if type(start) is not int or start < 0:
        raise PeerMessageError(f"bad O-accept start {start!r}")
    if type(base) is not int or base < 0 or type(m.rebuilt) is not bool:
        raise PeerMessageError("bad O-accept base or range flag")
    limit = s.config.c_index_window_max if m.rebuilt else s.config.o_accept_values_max
    if not isinstance(values, tuple) or len(values) > limit:
        raise PeerMessageError("O-accept carries too many values")
    for value in values:
        o_value(s, value)
    end = start + len(values)
    if m.rebuilt and not start <= base <= end:
        raise PeerMessageError(f"a range O-accept must carry the whole range, to {base}")
    if end > s.window_end():
        raise PeerMessageError(f"O-accept reaches slot {end - 1}, beyond the window")
    view = m.view
    views = s.views
    established = views.est_view == view
    if established and base != views.est_base:
        raise PeerMessageError(f"O-accept says base {base}, the view's is {views.est_base}")
    if established and m.src != views.est_seq:
        raise PeerMessageError(f"O-accept from {m.src}, not the sequencer {views.est_seq}")
    against_executed(s, start, values, f"O-accept of view {view}")
    same_ballot(s, start, values, view)


def _o_ack(s: Context, m: OAck) -> None:
    upto = m.upto
    # An acceptor may have accepted slots we have not seen yet (their O-accepts
    # to us are still in flight), so the bound is the window, not our log.
    if type(upto) is not int or not NOT_ESTABLISHED <= upto <= s.window_end():
        raise PeerMessageError(f"O-ACK upto {upto!r} beyond the window")
    if s.views.is_sequencer and upto > s.olog.acc_upto:
        raise PeerMessageError(f"O-ACK upto {upto!r} beyond the sequencer's own log")


def _o_commit(s: Context, m: OCommit) -> None:
    entries = m.entries
    if not isinstance(entries, tuple) or len(entries) > s.config.learn_o_max:
        raise PeerMessageError("O-commit carries too many entries")
    for entry in entries:
        if not isinstance(entry, tuple) or len(entry) != 4:
            raise PeerMessageError(f"bad O-commit entry {entry!r}")
        slot, ballot, owner, count = entry
        if type(slot) is not int or slot < 0:
            raise PeerMessageError(f"bad O-commit slot {slot!r}")
        if type(ballot) is not int or not 0 <= ballot <= m.view:
            raise PeerMessageError(f"bad O-commit ballot {ballot!r}")
        o_value(s, (owner, count))
    olog = s.olog
    owners, counts, ballots = olog.owner, olog.count, olog.ballot
    executed_end = s.progress.executed_end()
    b = olog.base
    end = len(olog)
    top = 0
    for slot, ballot, owner, count in entries:
        top = max(top, slot + 1)
        i = slot - b
        if i < 0:
            continue  # compacted here: executed and final (nothing left to compare)
        if slot < executed_end:
            if (owners[i], counts[i]) != (owner, count):
                raise PeerMessageError(
                    f"O-commit would revoke executed slot {slot}: "
                    f"{owners[i], counts[i]} -> {owner, count}",
                    alarm=True,
                )
        elif slot < end and ballots[i] == ballot and (owners[i], counts[i]) != (owner, count):
            raise PeerMessageError(
                f"slot {slot} holds {owners[i], counts[i]} at ballot {ballot}, "
                f"O-commit says {owner, count}"
            )
    if top > len(olog) and top > s.window_end():
        raise PeerMessageError(f"slot {top - 1} is beyond the window")


def _learn_request(s: Context, m: LearnRequest) -> None:
    o_from = m.o_from
    if type(o_from) is not int or o_from < -1:
        raise PeerMessageError(f"bad o_from {o_from!r}")
    if not isinstance(m.c_wanted, tuple) or len(m.c_wanted) > s.config.learn_c_max:
        raise PeerMessageError("LearnRequest asks for too many C-instances")
    for item in m.c_wanted:
        if not isinstance(item, tuple) or len(item) != 2:
            raise PeerMessageError(f"bad c_wanted item {item!r}")
        c_instance(s, *item)


def _heartbeat(s: Context, m: Heartbeat) -> None:
    if type(m.o_len) is not int or m.o_len < 0 or type(m.stamp) is not int:
        raise PeerMessageError("bad heartbeat")
    if type(m.base) is not int or m.base < -1:
        raise PeerMessageError("bad heartbeat base")
    if m.base >= 0 and m.base != s.views.est_base:
        raise PeerMessageError(f"heartbeat says base {m.base}, the view's is {s.views.est_base}")
    if type(m.majority_executed) is not int or m.majority_executed < 0:
        raise PeerMessageError(f"bad majority-executed point {m.majority_executed!r}")
    if type(m.keys_wanted) is not bool:
        raise PeerMessageError(f"bad keys-wanted flag {m.keys_wanted!r}")


def _lease_grant(s: Context, m: LeaseGrant) -> None:
    if type(m.stamp) is not int:
        raise PeerMessageError("bad lease grant")
    if type(m.executed) is not int or m.executed < 0:
        raise PeerMessageError(f"bad executed prefix {m.executed!r}")


def _v_request(s: Context, m: VRequest) -> None:
    if type(m.o_from) is not int or m.o_from < 0:
        raise PeerMessageError(f"bad o_from {m.o_from!r}")


def _vote(s: Context, m: Vote) -> None:
    if type(m.o_from) is not int or m.o_from < 0:
        raise PeerMessageError(f"vote with a bad o_from {m.o_from!r}")
    if not isinstance(m.c_max, tuple) or len(m.c_max) != s.n:
        raise PeerMessageError("vote with a bad c_max")
    if type(m.snapshot) is not int or m.snapshot < 0:
        raise PeerMessageError(f"vote with a bad snapshot slot {m.snapshot!r}")
    if not isinstance(m.entries, tuple):
        raise PeerMessageError("vote with bad entries")
    for entry in m.entries:
        if not isinstance(entry, tuple) or len(entry) != 4:
            raise PeerMessageError(f"bad vote entry {entry!r}")
        slot, ballot, owner, count = entry
        if type(slot) is not int or slot < 0 or type(ballot) is not int or ballot < 0:
            raise PeerMessageError(f"bad vote entry {entry!r}")
        if slot >= m.o_from + s.config.c_index_window_max:
            raise PeerMessageError(f"vote entry for slot {slot} is beyond the window")
        o_value(s, (owner, count))
    if any(type(i) is not int or i < -1 for i in m.c_max):
        raise PeerMessageError("vote with a bad c_max")
    if type(m.est_view) is not int or not 0 <= m.est_view < m.view:
        raise PeerMessageError("vote with a bad established view")
    if type(m.est_seq) is not int or not 0 <= m.est_seq < s.n:
        raise PeerMessageError("vote with a bad est_seq")
    if type(m.est_base) is not int or m.est_base < 0:
        raise PeerMessageError("vote with a bad est_base")
    if type(m.executed) is not int or m.executed < 0:
        raise PeerMessageError("vote with a bad executed prefix")


def _new_view(s: Context, m: NewView) -> None:
    start, values = m.start, m.values
    if type(start) is not int or start < 0 or not isinstance(values, tuple):
        raise PeerMessageError("bad NewView")
    if len(values) > s.config.c_index_window_max:
        raise PeerMessageError("NewView carries too many values")
    for value in values:
        o_value(s, value)
    end = start + len(values)
    if end > s.window_end():
        raise PeerMessageError(f"NewView reaches slot {end - 1}, beyond the window")
    view = m.view
    views = s.views
    if views.est_view == view and (
        m.src != views.est_seq or (start, end) != (views.est_start, views.est_base)
    ):
        raise PeerMessageError(f"NewView of view {view} does not match its range")
    against_executed(s, start, values, f"NewView {view}")
    same_ballot(s, start, values, view)


def _c_prepare(s: Context, m: CPrepare) -> None:
    c_instance(s, m.owner, m.start)
    if type(m.end) is not int or not m.start < m.end <= m.start + s.config.recovery_batch_max:
        raise PeerMessageError(f"bad C-prepare range {m.start}..{m.end}")
    if type(m.ballot) is not int or ballot_round(m.ballot) < 1:
        raise PeerMessageError(f"bad recovery ballot {m.ballot!r}")


def _c_promise(s: Context, m: CPromise) -> None:
    if type(m.owner) is not int or not 0 <= m.owner < s.n:
        raise PeerMessageError(f"bad C-promise owner {m.owner!r}")
    if type(m.ok) is not bool or type(m.promised) is not int:
        raise PeerMessageError("bad C-promise verdict")
    if type(m.compacted) is not int or m.compacted < 0:
        raise PeerMessageError(f"bad C-promise compaction point {m.compacted!r}")
    size = len(m.ballots) if isinstance(m.ballots, tuple) else -1
    if not (
        isinstance(m.values, tuple)
        and isinstance(m.committed, tuple)
        and 0 <= size == len(m.values) == len(m.committed) <= s.config.recovery_batch_max
    ):
        raise PeerMessageError("C-promise with a bad shape")
    for value in m.values:
        if value is not None and (
            not isinstance(value, tuple) or len(value) > s.config.c_batch_max
        ):
            raise PeerMessageError("C-promise with a bad value")


def _r_request(s: Context, m: RRequest) -> None:
    if type(m.read_id) is not int or type(m.key) is not bytes:
        raise PeerMessageError("bad R-request")


def _r_reply(s: Context, m: RReply) -> None:
    if type(m.read_id) is not int or type(m.slot) is not int or type(m.ok) is not bool:
        raise PeerMessageError("bad R-reply")


#: The one type a tuple of read ids, or of slots, may hold (``bool`` is not ``int`` here).
_INTS = {int}
_BYTES = {bytes}
_BOOLS = {bool}


def _read_ids(s: Context, ids: object, what: str) -> int:
    """``ids`` is a tuple of at most ``reads_per_message_max`` ints; its length.

    Checked with ``set(map(type, ...))``, which runs in C: a batch holds
    hundreds of reads and this is the busiest replica's hot path.
    """
    if type(ids) is not tuple:
        raise PeerMessageError(f"bad {what}: read ids are not a tuple")
    count = len(ids)
    if count > s.config.reads_per_message_max:
        raise PeerMessageError(
            f"{what} carries {count} reads, more than reads_per_message_max"
            f" ({s.config.reads_per_message_max})"
        )
    if count and not set(map(type, ids)) <= _INTS:
        raise PeerMessageError(f"bad {what}: a read id is not an int")
    return count


def _r_request_batch(s: Context, m: RRequestBatch) -> None:
    count = _read_ids(s, m.read_ids, "R-request batch")
    keys = m.keys
    if type(keys) is not tuple or len(keys) != count:
        raise PeerMessageError("bad R-request batch: not one key per read")
    if count and not set(map(type, keys)) <= _BYTES:
        raise PeerMessageError("bad R-request batch: a key is not bytes")


def _r_reply_batch(s: Context, m: RReplyBatch) -> None:
    count = _read_ids(s, m.read_ids, "R-reply batch")
    slots, oks = m.slots, m.oks
    if type(slots) is not tuple or type(oks) is not tuple or not len(slots) == len(oks) == count:
        raise PeerMessageError("bad R-reply batch: not one slot and one verdict per read")
    if count and not (set(map(type, slots)) <= _INTS and set(map(type, oks)) <= _BOOLS):
        raise PeerMessageError("bad R-reply batch: a slot is not an int or a verdict not a bool")
    if count and min(slots) < -1:
        raise PeerMessageError(f"bad R-reply batch: slot {min(slots)}")


def _straggler_poll(s: Context, m: StragglerPoll) -> None:
    """Nothing to check beyond sender and view."""


def _straggler_vote(s: Context, m: StragglerVote) -> None:
    if type(m.agree) is not bool:
        raise PeerMessageError("bad straggler vote")


def _sequencer_handover(s: Context, m: SequencerHandover) -> None:
    if m.src != s.views.sequencer or type(m.target) is not int:
        raise PeerMessageError("hand-over not from the sequencer")


def _snapshot_request(s: Context, m: SnapshotRequest) -> None:
    if type(m.slot) is not int or m.slot < 0 or type(m.offset) is not int or m.offset < 0:
        raise PeerMessageError("bad snapshot request")


def _snapshot_chunk(s: Context, m: SnapshotChunk) -> None:
    cfg = s.config
    if type(m.slot) is not int or m.slot < 1:
        raise PeerMessageError(f"bad snapshot slot {m.slot!r}")
    if type(m.total) is not int or not 0 < m.total <= cfg.snapshot_bytes_max:
        raise PeerMessageError(f"snapshot of {m.total!r} bytes (most: {cfg.snapshot_bytes_max})")
    if not isinstance(m.data, bytes) or len(m.data) > cfg.snapshot_chunk_bytes:
        raise PeerMessageError("snapshot chunk too large")
    if type(m.offset) is not int or not 0 <= m.offset < m.total:
        raise PeerMessageError(f"bad snapshot offset {m.offset!r}")
    if not m.data or m.offset + len(m.data) > m.total:
        raise PeerMessageError("snapshot chunk does not fit its snapshot")


#: Message type -> its check. Every message type the replica handles has one.
CHECKS: dict[type, Callable[[Context, Any], None]] = {
    CAccept: _c_accept,
    CAck: _c_ack,
    CCommit: _c_commit,
    CRequest: _c_request,
    OAccept: _o_accept,
    OAck: _o_ack,
    OCommit: _o_commit,
    LearnRequest: _learn_request,
    Heartbeat: _heartbeat,
    LeaseGrant: _lease_grant,
    VRequest: _v_request,
    Vote: _vote,
    NewView: _new_view,
    CPrepare: _c_prepare,
    CPromise: _c_promise,
    RRequest: _r_request,
    RReply: _r_reply,
    StragglerPoll: _straggler_poll,
    StragglerVote: _straggler_vote,
    SequencerHandover: _sequencer_handover,
    SnapshotRequest: _snapshot_request,
    SnapshotChunk: _snapshot_chunk,
    RRequestBatch: _r_request_batch,
    RReplyBatch: _r_reply_batch,
}


def check(s: Context, m: Message) -> None:
    """Refuse ``m`` (raise :class:`PeerMessageError`) unless every check passes."""
    checker = CHECKS.get(type(m))
    if checker is None:
        raise PeerMessageError(f"unknown message type {type(m).__name__}")
    checker(s, m)
