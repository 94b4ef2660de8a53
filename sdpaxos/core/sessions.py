"""Client sessions: exactly-once execution, and expiry decided by the log alone.

A client's commands carry ``(client_id, seq)``. The executor keeps one session
per ``client_id``: the highest ``seq`` it executed, that command's result, and
the slot of the session's latest command. A command whose ``seq`` is not above
the session's is a duplicate (a retry, or one command in two C-instances): it is
not applied again, and a duplicate of the latest one is answered with the
stored result.

**Registration** (Ongaro's thesis, section 6.3). A command ``Command(nonce, 0,
b"")`` (``seq`` 0, see :func:`registration`) opens a session: executing it
assigns the next id from a counter kept here (1, 2, 3, ...; never 0, which means
"no session") and its result is that id, :data:`SESSION_ID_BYTES` bytes big
endian (:func:`encode_session_id`; a client reads it with
:func:`decode_session_id`). The nonce only routes the reply: propose the
registration with ``Wait.EXECUTED`` to learn the id. Every replica executes the
same commands in the same order, so every replica assigns the same ids. A
registration executed twice (a retry) opens two sessions; when sessions
expire, the unused one expires like any idle session (otherwise it stays).

**Two modes**, from :class:`~sdpaxos.core.config.ClusterConfig`:

- ``session_lifetime_slots = None`` (the default): sessions never expire, and a
  client may choose its own id: a command from an unknown ``client_id`` opens
  its session (seq 1, 2, 3, ... as before). Registration works too, but an id a
  client chose may collide with an assigned one: use one or the other.
- ``session_lifetime_slots = L``: registration is required. After executing
  slot ``j``, every session whose last slot is below ``j - L`` expires; and
  opening a session when ``sessions_max`` are live first expires the one with
  the oldest last slot (ties: the lowest id). A command (``seq`` >= 1) whose
  ``client_id`` has no live session is not applied: its outcome is
  :attr:`Outcome.EXPIRED` (a reply of kind ``ReplyKind.SESSION_EXPIRED``). It
  may have executed before its session expired, and applying it now could
  execute it twice.

Cost: a session used or opened costs O(1); expiry by lifetime O(1) per expired
session; expiry by size O(log b) amortised, ``b`` the sessions that share the
oldest last slot. Sessions are kept in buckets by last slot, oldest first (last
slots only grow, since slots execute in order).

Snapshots: :meth:`Sessions.dump` gives a value of ints, bytes, ``None`` and
tuples (msgpack-friendly; lists are accepted back), :meth:`Sessions.load`
restores it exactly: the id counter, every session, the expiry order.
"""

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Any

from sdpaxos.core.errors import PeerMessageError
from sdpaxos.core.types import Command

#: ``client_id`` 0: no session, never deduplicated; never an assigned id.
NO_SESSION = 0
#: The ``seq`` of a registration command.
REGISTRATION_SEQ = 0
#: Length of a registration's result: the assigned id, unsigned big endian.
SESSION_ID_BYTES = 8
#: Default of ``ClusterConfig.sessions_max``.
SESSIONS_MAX_DEFAULT = 1 << 16
#: The first element of :meth:`Sessions.dump`'s value.
DUMP_FORMAT = 1


def registration(nonce: int) -> Command:
    """The command that opens a session; ``nonce`` (not 0) routes its reply."""
    if type(nonce) is not int or nonce == NO_SESSION:
        raise ValueError(f"a registration needs a non-zero int nonce, got {nonce!r}")
    return Command(nonce, REGISTRATION_SEQ, b"")


def encode_session_id(session_id: int) -> bytes:
    """A registration's result: ``session_id`` as 8 bytes, unsigned big endian."""
    return session_id.to_bytes(SESSION_ID_BYTES, "big")


def decode_session_id(result: bytes | None) -> int:
    """The session id a registration's result carries.

    Raises:
        ValueError: ``result`` is not a registration's result.
    """
    if not isinstance(result, bytes) or len(result) != SESSION_ID_BYTES:
        raise ValueError(f"not a session id ({SESSION_ID_BYTES} bytes): {result!r}")
    session_id = int.from_bytes(result, "big")
    if session_id == NO_SESSION:
        raise ValueError("session id 0 is never assigned")
    return session_id


class Outcome(IntEnum):
    """What executing one command of a session did."""

    #: The state machine applied it.
    APPLIED = 0
    #: Its ``seq`` was not above the session's: not applied again.
    DUPLICATE = 1
    #: Its client has no live session: not applied (``ReplyKind.SESSION_EXPIRED``).
    EXPIRED = 2
    #: A registration: a session was opened; the result is its id.
    REGISTERED = 3


_APPLIED, _DUPLICATE, _EXPIRED, _REGISTERED = (
    Outcome.APPLIED,
    Outcome.DUPLICATE,
    Outcome.EXPIRED,
    Outcome.REGISTERED,
)


class _Session:
    __slots__ = ("result", "seq", "slot")

    def __init__(self, seq: int, result: bytes | None, slot: int) -> None:
        self.seq = seq
        self.result = result
        self.slot = slot


class _Bucket:
    """The sessions whose last slot is one slot; ``heap`` (their ids, built on
    the first eviction from this bucket) may hold ids that moved on."""

    __slots__ = ("heap", "ids")

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.heap: list[int] | None = None


class Sessions:
    """The session table of one replica's executor (see the module docstring).

    Counted since this object was built or loaded (observability only: not part
    of :meth:`dump`): ``expired``, the sessions expired; ``duplicates``, the
    commands not applied as duplicates; ``refused``, the commands not applied
    because their client had no live session (:attr:`Outcome.EXPIRED`).
    """

    __slots__ = (
        "_buckets",
        "_table",
        "duplicates",
        "expired",
        "lifetime_slots",
        "next_id",
        "refused",
        "sessions_max",
    )

    def __init__(
        self, lifetime_slots: int | None = None, sessions_max: int = SESSIONS_MAX_DEFAULT
    ) -> None:
        if lifetime_slots is not None and (type(lifetime_slots) is not int or lifetime_slots < 1):
            raise ValueError(f"lifetime_slots must be None or >= 1, got {lifetime_slots!r}")
        if type(sessions_max) is not int or sessions_max < 1:
            raise ValueError(f"sessions_max must be >= 1, got {sessions_max!r}")
        self.lifetime_slots = lifetime_slots
        self.sessions_max = sessions_max
        #: The id the next registration gets.
        self.next_id = NO_SESSION + 1
        self.expired = 0
        self.duplicates = 0
        self.refused = 0
        self._table: dict[int, _Session] = {}
        #: Last slot -> its sessions, oldest slot first; only when sessions expire.
        self._buckets: OrderedDict[int, _Bucket] | None = (
            None if lifetime_slots is None else OrderedDict()
        )

    # -- queries --------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._table

    def get(self, session_id: int) -> tuple[int, bytes | None, int] | None:
        """``(last seq, its result, last slot)`` of a live session, or None."""
        s = self._table.get(session_id)
        return None if s is None else (s.seq, s.result, s.slot)

    def order(self) -> list[int]:
        """Live session ids in expiry order: oldest last slot first, then lowest id."""
        return sorted(self._table, key=lambda sid: (self._table[sid].slot, sid))

    # -- execution ------------------------------------------------------------

    def run(
        self, command: Command, slot: int, apply: Callable[[bytes], bytes]
    ) -> tuple[bytes | None, Outcome]:
        """Execute ``command`` (``client_id`` != 0) of ``slot``; ``apply`` is the
        state machine's. Returns its result and what happened."""
        seq = command.seq
        session = self._table.get(command.client_id)
        if session is not None and seq > session.seq:  # the next command of a live session
            result = session.result = apply(command.payload)
            session.seq = seq
            if session.slot != slot:
                if self._buckets is not None:
                    self._move(command.client_id, session.slot, slot)
                session.slot = slot
            return result, _APPLIED
        if seq == REGISTRATION_SEQ:
            session_id = self.next_id
            self.next_id = session_id + 1
            if self._buckets is not None and len(self._table) >= self.sessions_max:
                self._expire_oldest()
            self._open(session_id, REGISTRATION_SEQ, None, slot)
            return encode_session_id(session_id), _REGISTERED
        if session is None:
            if self._buckets is not None:
                self.refused += 1
                return None, _EXPIRED
            first = apply(command.payload)  # a client-chosen id (no expiry)
            self._table[command.client_id] = _Session(seq, first, slot)
            return first, _APPLIED
        # A duplicate: not above the session's last seq.
        self.duplicates += 1
        if session.slot != slot:
            if self._buckets is not None:
                self._move(command.client_id, session.slot, slot)
            session.slot = slot
        return (session.result if seq == session.seq else None), _DUPLICATE

    def run_batch(
        self,
        commands: Iterable[Command],
        slot: int,
        apply: Callable[[bytes], bytes],
        results: list[tuple[bytes | None, Outcome]] | None = None,
    ) -> None:
        """Execute ``commands`` of ``slot`` in order, each as :meth:`run` would
        (one with ``client_id`` 0 has no session: it is applied, never
        deduplicated); append each one's ``(result, outcome)`` to ``results``
        if given.

        Why a batch: every replica executes every command, and one call per
        command into :meth:`run` (with its returned tuple) was a sixth of a
        replica's execution cost. Here the common case (the next command of a
        live session, whose last slot needs no move) is handled inline, and
        the rest falls back to :meth:`run`. Executors that need no per-command
        outcome (a replica answering none of the batch's clients, not
        observed) pass no ``results`` and read :attr:`duplicates` and
        :attr:`refused` instead.
        """
        table_get = self._table.get
        moves = self._buckets is not None
        run = self.run
        result: bytes | None
        for command in commands:
            client_id, seq, payload, _ = command
            if client_id:
                session = table_get(client_id)
                if (
                    session is not None
                    and seq > session.seq
                    and (session.slot == slot or not moves)
                ):
                    result = session.result = apply(payload)
                    session.seq = seq
                    session.slot = slot
                    outcome = _APPLIED
                else:
                    result, outcome = run(command, slot, apply)
            else:
                result, outcome = apply(payload), _APPLIED
            if results is not None:
                results.append((result, outcome))

    def slot_executed(self, slot: int) -> None:
        """Slot ``slot`` is executed: expire the sessions whose last slot is below
        ``slot - lifetime_slots`` (nothing when sessions never expire)."""
        buckets = self._buckets
        if buckets is None or self.lifetime_slots is None:
            return
        limit = slot - self.lifetime_slots
        table = self._table
        while buckets:
            oldest = next(iter(buckets))
            if oldest >= limit:
                return
            ids = buckets.popitem(last=False)[1].ids
            for session_id in ids:
                del table[session_id]
            self.expired += len(ids)

    # -- snapshots ------------------------------------------------------------

    def dump(self) -> tuple[Any, ...]:
        """The whole state as ints, bytes, None and tuples:
        ``(DUMP_FORMAT, lifetime_slots, sessions_max, next_id, sessions)``, with
        ``sessions`` the ``(id, last seq, result, last slot)`` of every live
        session in expiry order."""
        table = self._table
        sessions = tuple(
            (sid, table[sid].seq, table[sid].result, table[sid].slot) for sid in self.order()
        )
        return (DUMP_FORMAT, self.lifetime_slots, self.sessions_max, self.next_id, sessions)

    @classmethod
    def load(cls, value: Any) -> "Sessions":
        """The sessions :meth:`dump` gave ``value`` (tuples may come back as lists).

        The limits come from the dump: whoever installs it checks them against
        its ``ClusterConfig`` (every replica must use the same ones).

        Raises:
            ValueError: ``value`` is not such a value.
        """
        try:
            fmt, lifetime, sessions_max, next_id, sessions = value
        except (TypeError, ValueError):
            raise ValueError("not a dump of Sessions") from None
        if type(fmt) is not int or fmt != DUMP_FORMAT:
            raise ValueError(f"unknown Sessions dump format {fmt!r}")
        out = cls(lifetime, sessions_max)
        if type(next_id) is not int or next_id <= NO_SESSION:
            raise ValueError(f"bad next id {next_id!r}")
        out.next_id = next_id
        # Iterating anything else would raise TypeError, which the executor does
        # not expect from a peer's snapshot (it refuses on ValueError).
        if not isinstance(sessions, (tuple, list)):
            raise ValueError(f"sessions must be an array, got {type(sessions).__name__}")
        previous: tuple[int, int] | None = None
        for entry in sessions:
            try:
                sid, seq, result, slot = entry
            except (TypeError, ValueError):
                raise ValueError(f"bad session {entry!r}") from None
            if (
                any(type(v) is not int for v in (sid, seq, slot))
                or sid == NO_SESSION
                or not (result is None or isinstance(result, bytes))
            ):
                raise ValueError(f"bad session {entry!r}")
            if previous is not None and (slot, sid) <= previous:
                raise ValueError("sessions are not in expiry order")
            previous = (slot, sid)
            if sid in out._table:
                # Opened twice, it would sit in two expiry buckets: the first to
                # expire deletes it and the second raises KeyError mid-execution.
                raise ValueError(f"session {sid} appears twice")
            out._open(sid, seq, result, slot)
        if out._buckets is not None and len(out._table) > out.sessions_max:
            raise ValueError(f"more than sessions_max ({out.sessions_max}) sessions")
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sessions) and self.dump() == other.dump()

    __hash__ = None  # type: ignore[assignment]

    # -- internals ------------------------------------------------------------

    def _open(self, session_id: int, seq: int, result: bytes | None, slot: int) -> None:
        self._table[session_id] = _Session(seq, result, slot)
        if self._buckets is not None:
            bucket = self._bucket(slot)
            bucket.ids.add(session_id)
            if bucket.heap is not None:
                heapq.heappush(bucket.heap, session_id)

    def _bucket(self, slot: int) -> _Bucket:
        """The bucket of ``slot``, made newest if new (last slots only grow)."""
        assert self._buckets is not None
        bucket = self._buckets.get(slot)
        if bucket is None:
            bucket = self._buckets[slot] = _Bucket()
        return bucket

    def _move(self, session_id: int, old: int, new: int) -> None:
        assert self._buckets is not None
        bucket = self._buckets[old]
        bucket.ids.remove(session_id)
        if not bucket.ids:
            del self._buckets[old]
        target = self._bucket(new)
        target.ids.add(session_id)
        if target.heap is not None:
            heapq.heappush(target.heap, session_id)

    def _expire_oldest(self) -> None:
        """Expire the session with the oldest last slot, the lowest id among ties."""
        assert self._buckets is not None
        slot, bucket = next(iter(self._buckets.items()))
        if bucket.heap is None:
            bucket.heap = sorted(bucket.ids)  # a sorted list is a heap
        while True:
            session_id = heapq.heappop(bucket.heap)
            if session_id in bucket.ids:
                break
        bucket.ids.remove(session_id)
        if not bucket.ids:
            del self._buckets[slot]
        del self._table[session_id]
        self.expired += 1


def load_checked(value: Any, lifetime_slots: int | None, sessions_max: int) -> Sessions:
    """A peer's session table (from a snapshot), refused whole when malformed or
    kept under other limits than ``lifetime_slots`` and ``sessions_max``.

    Raises:
        PeerMessageError: either refusal (nothing is installed).
    """
    try:
        table = Sessions.load(value)
    except ValueError as exc:
        raise PeerMessageError(f"bad sessions in snapshot: {exc}") from None
    if (table.lifetime_slots, table.sessions_max) != (lifetime_slots, sessions_max):
        raise PeerMessageError("snapshot sessions have other limits than this cluster's")
    return table
