"""The effects batch a :class:`~sdpaxos.core.replica.Replica` hands to its driver.

The driver loop, once (every driver does exactly this)::

    rd = replica.ready()
    storage.append(rd.persist)          # 1. durable first
    if rd.snapshot is not None:         #    (a snapshot: saved, then the records
        storage.save_snapshot(rd.snapshot)  # it covers are forgotten)
    for dst, msg in rd.messages:        # 2. then messages may leave
        send(dst, msg)
    for reply in rd.replies:            # 3. then clients may be answered
        answer(reply)

Steps 2 and 3 may run in any order relative to each other, never before 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from sdpaxos.core.messages import Message
from sdpaxos.core.storage import Record, Snapshot
from sdpaxos.core.types import Command, ReplicaId, Slot, Wait


class ReplyKind(IntEnum):
    """Which event a :class:`Reply` reports.

    ``READY`` and ``EXECUTED`` are what the proposer waited for (the values of
    :class:`~sdpaxos.core.types.Wait`). ``SESSION_EXPIRED`` answers a client
    that waited for execution when its command reached execution with no live
    session for its ``client_id`` (``ClusterConfig.session_lifetime_slots``):
    the command was not applied, ``result`` is ``None``, and the client must
    register a new session. It is never a state machine result. ``NOT_MEMBER``
    answers a command its node cannot carry into the next epoch.
    """

    READY = Wait.READY.value
    EXECUTED = Wait.EXECUTED.value
    SESSION_EXPIRED = 2
    #: This node is no member of the epoch that now runs (it was removed, or
    #: is a learner): the command was not applied through it, and the client
    #: should send it to a member (``docs/membership.md`` section 4.1).
    NOT_MEMBER = 3


class Reply(NamedTuple):
    """An answer for the client that proposed ``(client_id, seq)`` at this replica.

    A named tuple: one is built per command (see :class:`~sdpaxos.core.types.Command`).
    """

    client_id: int
    seq: int
    kind: ReplyKind
    result: bytes | None = None


@dataclass(frozen=True, slots=True)
class Executed:
    """One command applied to the state machine, reported when observation is on.

    ``duplicate`` is true when ``(client_id, seq)`` had already executed, so the
    state machine was not called again and ``result`` is the first execution's.
    ``session_expired`` is true when its client had no live session
    (``ClusterConfig.session_lifetime_slots``): the state machine was not called
    and ``result`` is ``None``. A registration (``seq`` 0) is reported with the
    new session id as its ``result`` (:func:`~sdpaxos.core.sessions.decode_session_id`).
    """

    slot: Slot
    owner: ReplicaId
    c_index: int
    command: Command
    result: bytes | None
    duplicate: bool
    session_expired: bool = False


class ReadResult(NamedTuple):
    """A read requested with :meth:`Replica.read` can be served now.

    ``ok``: every write that was ready before the read was requested has been
    applied to this replica's state machine, so the embedder reads it locally
    (linearizable). Not ``ok``: no safe answer (the sequencer had no majority
    lease, or it did not answer in time); serve the read through the log by
    proposing it as a command.

    A named tuple, like :class:`Reply`: one is built per read, and a frozen
    dataclass costs about twice as much to build.
    """

    read_id: int
    ok: bool


@dataclass(slots=True)
class Ready:
    """What the driver must do, in order: persist, then send and reply.

    Attributes:
        persist: records that must be durable before any message or reply below.
        messages: ``(destination, message)`` pairs, to send after ``persist``.
        replies: client answers, to give after ``persist``.
        executed: commands applied in this batch, in global order (only filled
            when the replica was built with ``observe=True``).
        reads: reads that may be served now (or must go through the log).
        snapshot: a snapshot this replica took or installed: save it durably
            (``Storage.save_snapshot``) after ``persist`` and before the messages.
        snapshot_installed: which of the two ``snapshot`` is. True: installed
            (a peer's, fetched whole): the batch's ``executed`` entries ran after
            it. False: taken (captured at a boundary this replica executed, in
            this batch or an earlier one, and compacted once a majority had
            executed that far). Its slot says neither: a snapshot captured
            earlier and taken in a batch that executes later slots is at or
            below the batch's first executed slot, like an installed one.
        epoch_base: a new epoch starts here (``docs/membership.md`` section 4.3):
            make this snapshot the whole of storage (``Storage.start_epoch``),
            after ``persist`` and before the messages, which belong to the new
            epoch; only :class:`~sdpaxos.core.member.Member` sets it.
    """

    persist: list[Record] = field(default_factory=list)
    messages: list[tuple[ReplicaId, Message]] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    executed: list[Executed] = field(default_factory=list)
    reads: list[ReadResult] = field(default_factory=list)
    snapshot: Snapshot | None = None
    snapshot_installed: bool = False
    epoch_base: Snapshot | None = None

    def absorb(self, more: Ready) -> None:
        """Append ``more``'s effects after this batch's (one snapshot at most: a
        second one is dropped, as a newer one replaces it anyway; used by
        :class:`~sdpaxos.core.member.Member` to hand over one batch per call)."""
        self.persist.extend(more.persist)
        self.messages.extend(more.messages)
        self.replies.extend(more.replies)
        self.executed.extend(more.executed)
        self.reads.extend(more.reads)
        if self.snapshot is None and more.snapshot is not None:
            self.snapshot = more.snapshot
            self.snapshot_installed = more.snapshot_installed
        if more.epoch_base is not None:
            self.epoch_base = more.epoch_base

    def __bool__(self) -> bool:
        return bool(
            self.persist
            or self.messages
            or self.replies
            or self.executed
            or self.reads
            or self.snapshot is not None
            or self.epoch_base is not None
        )
