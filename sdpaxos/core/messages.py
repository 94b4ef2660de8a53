"""Protocol messages: one frozen, slotted dataclass per step of the paper.

Every message carries ``src`` (the sending replica) and ``view`` (the sender's
view number). "Every message is sent with the sender's view number, and
considered valid only if its number is not smaller than the recipient's"
(paper section 3.3); that includes C-accepts (pitfall 5).

This module defines shapes only; :mod:`sdpaxos.wire.codec` turns them into
bytes. A new message needs a class here and one line in the codec's table.
"""

from dataclasses import dataclass
from typing import TypeAlias

from sdpaxos.core.types import (
    Ballot,
    CIndex,
    Command,
    OCommitEntry,
    OValue,
    ReplicaId,
    Slot,
    View,
    VoteEntry,
)

#: Defaults of fields added after the first wire version (senders always set them).
_SLOT_0 = Slot(0)
_CINDEX_0 = CIndex(0)


@dataclass(frozen=True, slots=True)
class CAccept:
    """Phase 2a of C-instance ``(owner, index)`` (paper Fig. 5 line 3).

    Sent by the command leader to a thrifty quorum. When it reaches the
    sequencer it also triggers the O-instance (line 12).
    """

    src: ReplicaId
    view: View
    owner: ReplicaId
    index: CIndex
    ballot: Ballot
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class CAck:
    """Phase 2b of C-instance ``(owner, index)`` (Fig. 5 line 8), sent to the owner."""

    src: ReplicaId
    view: View
    owner: ReplicaId
    index: CIndex
    ballot: Ballot


@dataclass(frozen=True, slots=True)
class CCommit:
    """C-instance ``(owner, index)`` is chosen (Fig. 5 line 10).

    ``commands`` is ``None`` for a replica that already accepted the value at
    ``ballot`` (the short form); the others get the value itself.
    """

    src: ReplicaId
    view: View
    owner: ReplicaId
    index: CIndex
    ballot: Ballot
    commands: tuple[Command, ...] | None


@dataclass(frozen=True, slots=True)
class CRequest:
    """Ask the sequencer to order C-instances ``0 .. index`` of ``owner`` (Fig. 5 line 5).

    Sent when the thrifty C-quorum leaves the sequencer out, and on
    retransmission. ``o_accepted_upto`` is how much of the assignment log the
    owner has accepted from the sequencer, so a retransmitted request makes the
    sequencer resend exactly the O-accepts that were lost. ``keys``: the objects
    C-instance ``index`` writes ("Replicas should also append the name of the
    object to update to the C-requests", section 3.5), for the history table.
    """

    src: ReplicaId
    view: View
    owner: ReplicaId
    index: CIndex
    o_accepted_upto: Slot
    keys: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class OAccept:
    """Phase 2a of O-instances ``start .. start+len(values)-1`` at ballot ``view``.

    Sent by the sequencer (Fig. 5 line 14). It always carries every O-instance
    the recipient has not been sent yet: the paper's piggy-backing of earlier
    O-accepts (section 3.2, N = 5), used for every N so that a command leader
    knows the whole assignment prefix before its command is ready.

    ``base`` is where this view's rebuilt range ends (0 in view 0).

    ``rebuilt`` is true when ``values`` begin with the view's whole rebuilt
    range, slots ``start .. base-1`` (``start`` is the range's first slot): the
    view-change phase 2a (section 3.3, "make sure all O-instances have been
    accepted by a majority"). A replica accepts a range only entirely, in one
    durable record, and only then accepts the view's other O-accepts; so a
    replica holding any value of a view has established that view, which is
    what the next view change relies on (``docs/recovery.md`` section 2).
    """

    src: ReplicaId
    view: View
    start: Slot
    values: tuple[OValue, ...]
    base: Slot
    rebuilt: bool


@dataclass(frozen=True, slots=True)
class OAck:
    """Phase 2b, prefix form: ``src`` has accepted every O-instance below ``upto`` in ``view``.

    A prefix acknowledgement carries the paper's piggy-backed O-ACKs for free.
    ``upto == -1`` says "I have not accepted this view's rebuilt range yet": the
    sequencer answers with the range (or its :class:`NewView`).
    """

    src: ReplicaId
    view: View
    upto: Slot


@dataclass(frozen=True, slots=True)
class OCommit:
    """O-instances are committed (Fig. 5 lines 20, 25, 29).

    ``entries`` are ``(slot, ballot, owner, count)``: ``ballot`` is the view in
    which the value was chosen (a receiver records it durably at that ballot
    before executing it). Normally ``owner == src`` because a command leader is
    the learner of its own O-instances; answers to a :class:`LearnRequest`
    relay any commit.
    """

    src: ReplicaId
    view: View
    entries: tuple[OCommitEntry, ...]


@dataclass(frozen=True, slots=True)
class LearnRequest:
    """A replica whose execution is blocked asks for commits it has missed.

    ``o_from``: send committed O-instances from this slot on (``-1`` for none).
    ``c_wanted``: C-instances ``(owner, index)`` whose commits are missing.
    Answered with :class:`OCommit` and :class:`CCommit` messages.
    """

    src: ReplicaId
    view: View
    o_from: Slot
    c_wanted: tuple[tuple[ReplicaId, CIndex], ...]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The sequencer is alive; also asks for a lease renewal (paper section 3.5).

    ``o_len`` tells how long the assignment log is, so a replica that missed
    O-commits knows it is behind. ``stamp`` numbers the sequencer's heartbeats;
    it is echoed back in :class:`LeaseGrant`, and the sequencer dates the lease
    from when it sent that heartbeat (by its own clock).
    ``base`` is where this view's rebuilt range ends, once the range is
    committed (-1 before): it tells a replica that missed the :class:`NewView`
    that the range is chosen. A heartbeat never makes a replica adopt a view;
    one from a view it has not established is answered with ``OAck(upto=-1)``.
    ``majority_executed``: a majority of replicas executed every slot below it
    (from their lease grants): replicas may compact below it (section 16.2 of
    ``docs/recovery.md``).
    ``keys_wanted``: the sequencer keeps its history table now (reads come), so
    a :class:`CRequest` should carry its keys; without it they are dead weight
    (collecting, packing and unpacking a batch's keys was the busiest replica's
    largest cost beyond the others', with no read to serve). A hint only: a
    C-request without keys makes the sequencer's reads wait for its slot (the
    floor), never answer early.
    """

    src: ReplicaId
    view: View
    o_len: Slot
    stamp: int
    base: Slot
    majority_executed: Slot = _SLOT_0
    keys_wanted: bool = True


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """``src`` promises not to vote, for itself or anyone else, for ``lease_ms`` of its own time.

    Answers heartbeat ``stamp`` (section 3.5: "never vote for other replicas in
    a view change before the lease expires"; a candidate's own vote counts too).
    ``executed``: every slot below it was executed by ``src`` (the sequencer
    computes the majority-executed point from these).
    """

    src: ReplicaId
    view: View
    stamp: int
    executed: Slot = _SLOT_0


@dataclass(frozen=True, slots=True)
class VRequest:
    """The paper's V-request: start of a view change to ``view`` (section 3.3).

    It doubles as an O-prepare for every O-instance from ``o_from`` on.
    """

    src: ReplicaId
    view: View
    o_from: Slot


@dataclass(frozen=True, slots=True)
class Vote:
    """A vote for ``src``'s candidacy, with the voter's phase-1b state.

    ``entries``: ``(slot, ballot, owner, count)`` for every O-instance from
    ``o_from`` on that the voter holds durably (accepted, or learned committed;
    the ballot is the view it was accepted or committed in). ``c_max[m]``: the
    highest C-instance index of replica ``m`` the voter has accepted (-1 if
    none), for the N = 5 inference. ``est_view``/``est_seq``/``est_base``: the
    voter's established view (the newest view whose whole rebuilt range it
    accepted), its sequencer and where that range ends; the candidate takes the
    old sequencer from the newest of them, and with its base discards older
    values that view superseded. They do not depend on ``o_from``.
    ``executed``: every slot below it was executed (so durably recorded) by the
    voter. The winner's range starts at the lowest ``executed`` of its votes
    (or its own ``o_from``): a slot executed by the candidate but not by all of
    its voters may be held by too few replicas (N = 5, two acceptors), so it is
    re-proposed with the range to become majority-durable.
    ``snapshot``: the voter compacted every slot below it (it reports nothing
    there); a candidate that has not executed that far installs a snapshot first.
    """

    src: ReplicaId
    view: View
    o_from: Slot
    entries: tuple[VoteEntry, ...]
    c_max: tuple[int, ...]
    est_view: View
    est_seq: ReplicaId
    est_base: Slot
    executed: Slot
    snapshot: Slot = _SLOT_0


@dataclass(frozen=True, slots=True)
class NewView:
    """The paper's notification: O-instances ``start ..`` are committed in ``view``.

    Sent by the new sequencer once a majority accepted the rebuilt range, and
    resent to any replica heard from in an older view. It overrides values of
    older views in unexecuted slots (the N = 5 O-commit is revocable until
    executed, section 3.3).
    """

    src: ReplicaId
    view: View
    start: Slot
    values: tuple[OValue, ...]


@dataclass(frozen=True, slots=True)
class CPrepare:
    """Phase 1a for C-instances ``start .. end-1`` of ``owner`` (section 3.3 recovery)."""

    src: ReplicaId
    view: View
    owner: ReplicaId
    start: CIndex
    end: CIndex
    ballot: Ballot


@dataclass(frozen=True, slots=True)
class CPromise:
    """Phase 1b for C-instances ``start ..`` of ``owner`` at ``ballot``.

    ``ok`` is false if the acceptor had promised a higher ballot (``promised``).
    ``ballots[k]``/``values[k]``: what it accepted for ``start + k`` (ballot -1
    and value ``None`` if nothing); ``committed[k]``: whether it knows that value
    is chosen. ``compacted``: the acceptor executed and forgot ``owner``'s
    C-instances below it; when that is above ``start`` the promise answers
    nothing else, and the recoverer installs a snapshot instead (it must never
    take "forgotten" for "nothing accepted").
    """

    src: ReplicaId
    view: View
    owner: ReplicaId
    start: CIndex
    ballot: Ballot
    ok: bool
    promised: Ballot
    ballots: tuple[Ballot, ...]
    values: tuple[tuple[Command, ...] | None, ...]
    committed: tuple[bool, ...]
    compacted: CIndex = _CINDEX_0


@dataclass(frozen=True, slots=True)
class RRequest:
    """The paper's R-request: after which slot may ``src`` read ``key`` locally? (3.5)"""

    src: ReplicaId
    view: View
    read_id: int
    key: bytes


@dataclass(frozen=True, slots=True)
class RReply:
    """Answer to :class:`RRequest`: read once every slot up to ``slot`` has executed.

    ``ok`` is false when the sequencer cannot answer safely (no majority lease):
    the read then goes through the log like a write.
    """

    src: ReplicaId
    view: View
    read_id: int
    slot: Slot
    ok: bool


@dataclass(frozen=True, slots=True)
class RRequestBatch:
    """Several R-requests in one message: ``read_ids[k]`` asks about ``keys[k]``.

    Every read a replica starts between two ``Replica.ready`` calls goes to the
    sequencer in one of these (split at ``reads_per_message_max``), so a read
    costs the sequencer a table lookup, not a message. The sequencer handles it
    as ``len(read_ids)`` :class:`RRequest` messages delivered together, answered
    at one instant (the model's ``HandleRRequest``, once per read). ``b""`` is a
    read of no named key (it waits for the whole log).
    """

    src: ReplicaId
    view: View
    read_ids: tuple[int, ...]
    keys: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class RReplyBatch:
    """Answer to :class:`RRequestBatch`: read ``read_ids[k]`` once every slot up to
    ``slots[k]`` has executed, if ``oks[k]``; if not, it goes through the log.

    One answer per read, in the request's order; ``oks[k]`` is false when the
    sequencer cannot answer that read safely (no majority lease): ``slots[k]``
    is then meaningless (-1).
    """

    src: ReplicaId
    view: View
    read_ids: tuple[int, ...]
    slots: tuple[Slot, ...]
    oks: tuple[bool, ...]


@dataclass(frozen=True, slots=True)
class StragglerPoll:
    """``src`` thinks the sequencer is too slow; does the recipient agree? (section 4)"""

    src: ReplicaId
    view: View


@dataclass(frozen=True, slots=True)
class StragglerVote:
    """Answer to :class:`StragglerPoll`."""

    src: ReplicaId
    view: View
    agree: bool


@dataclass(frozen=True, slots=True)
class SequencerHandover:
    """The sequencer gives up its role on purpose: ``target`` should take over.

    Recipients stop honouring the sequencer's lease, so they can vote at once.
    """

    src: ReplicaId
    view: View
    target: ReplicaId


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """Send me bytes ``offset ..`` of your snapshot at ``slot`` (a transfer resumes here)."""

    src: ReplicaId
    view: View
    slot: Slot
    offset: int


@dataclass(frozen=True, slots=True)
class SnapshotChunk:
    """Bytes ``offset .. offset+len(data)-1`` of ``src``'s snapshot at ``slot``, ``total`` long.

    The chunk at offset 0 doubles as the offer: it answers a request for
    instances ``src`` compacted (learning, C-instance recovery, a vote).
    """

    src: ReplicaId
    view: View
    slot: Slot
    offset: int
    total: int
    data: bytes


Message: TypeAlias = (
    CAccept
    | CAck
    | CCommit
    | CRequest
    | OAccept
    | OAck
    | OCommit
    | LearnRequest
    | Heartbeat
    | LeaseGrant
    | VRequest
    | Vote
    | NewView
    | CPrepare
    | CPromise
    | RRequest
    | RReply
    | StragglerPoll
    | StragglerVote
    | SequencerHandover
    | SnapshotRequest
    | SnapshotChunk
    | RRequestBatch
    | RReplyBatch
)

#: Every message class, in wire-tag order. Append only: the index is the tag.
MESSAGE_TYPES: tuple[type, ...] = (
    CAccept,
    CAck,
    CCommit,
    CRequest,
    OAccept,
    OAck,
    OCommit,
    LearnRequest,
    Heartbeat,
    LeaseGrant,
    VRequest,
    Vote,
    NewView,
    CPrepare,
    CPromise,
    RRequest,
    RReply,
    StragglerPoll,
    StragglerVote,
    SequencerHandover,
    SnapshotRequest,
    SnapshotChunk,
    RRequestBatch,
    RReplyBatch,
)


# ------------------------------------------------------------ membership envelopes
# Between :class:`~sdpaxos.core.member.Member` nodes (docs/membership.md): never
# handed to a Replica, so not part of :data:`Message`. ``src`` is a node id here.


@dataclass(frozen=True, slots=True)
class EpochMessage:
    """A core message of epoch ``epoch`` from node ``src`` (its ``msg.src`` is a position)."""

    epoch: int
    src: int
    msg: Message


@dataclass(frozen=True, slots=True)
class EpochNotice:
    """``src`` runs epoch ``epoch``, whose membership is ``membership`` (packed)."""

    src: int
    epoch: int
    membership: bytes


@dataclass(frozen=True, slots=True)
class StatePull:
    """Send me part of your newest snapshot: epoch ``epoch``'s local slot ``slot``
    (-1: whatever is newest) from byte ``offset``. ``have``: the global slot this
    node's state reaches (a learner's lag is measured from it)."""

    src: int
    epoch: int
    have: int
    slot: int
    offset: int


@dataclass(frozen=True, slots=True)
class StateChunk:
    """Bytes ``offset ..`` of the snapshot at local slot ``slot`` of epoch ``epoch``
    (``total`` bytes in all); ``executed``: the global slot the sender executed."""

    src: int
    epoch: int
    slot: int
    executed: int
    offset: int
    total: int
    data: bytes


MemberMessage: TypeAlias = EpochMessage | EpochNotice | StatePull | StateChunk
