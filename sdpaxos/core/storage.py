"""The durability contract, as data.

A :class:`Ready` batch lists :data:`Record` values in ``persist``. They must be
on stable storage before any message of the same batch leaves and before any
reply of that batch is given: an acceptor's C-ACK or O-ACK promises that the
accepted value survives a crash, and a command leader counts its own
acceptance toward the quorum that makes a command ready.

After a crash a replica is rebuilt from exactly these records, by constructing
it with ``Replica(..., records=storage.load(), snapshot=storage.load_snapshot())``;
everything else (commit knowledge, execution state, timers) is volatile and is
re-learned from peers.

A :class:`Snapshot` in :attr:`Ready.snapshot` replaces an executed prefix: the
driver saves it durably with :meth:`Storage.save_snapshot`, which then forgets
the records it covers (``docs/recovery.md`` section 16.5).
"""

from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from sdpaxos.core.errors import PeerMessageError
from sdpaxos.core.types import Ballot, CIndex, Command, OValue, ReplicaId, Slot, View


@dataclass(frozen=True, slots=True)
class CAccepted:
    """This replica accepted ``commands`` for C-instance ``(owner, index)`` at ``ballot``."""

    owner: ReplicaId
    index: CIndex
    ballot: Ballot
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class OAccepted:
    """This replica holds O-instances ``start ..`` with ``values`` at ballot ``view``.

    Written when it accepts an O-accept of ``view``, and when it learns that
    these O-instances were committed in ``view`` (before it executes them): with
    N = 5 a command leader's O-instance commits with two acceptors only, and an
    executed slot must survive at a majority (``docs/recovery.md`` section 10).
    """

    view: View
    start: Slot
    values: tuple[OValue, ...]


@dataclass(frozen=True, slots=True)
class ViewEstablished:
    """This replica accepted the whole rebuilt range of ``view`` from its ``sequencer``.

    The range is slots ``start .. start+len(values)-1``; its end is the view's
    *base*. One record, so a range is accepted entirely or not at all. The
    newest such record is the replica's *established view*, reported in votes:
    it names the old sequencer for the N = 5 inference and says which older
    values the view superseded. Only this record raises it (never a heartbeat).
    """

    view: View
    sequencer: ReplicaId
    start: Slot
    values: tuple[OValue, ...]

    @property
    def base(self) -> Slot:
        return Slot(self.start + len(self.values))


@dataclass(frozen=True, slots=True)
class CPromised:
    """This replica promised ``ballot`` for C-instance ``(owner, index)`` (recovery phase 1)."""

    owner: ReplicaId
    index: CIndex
    ballot: Ballot


@dataclass(frozen=True, slots=True)
class ViewPromised:
    """This replica promised ``view``: it rejects older views and votes no more in it."""

    view: View


Record: TypeAlias = CAccepted | OAccepted | CPromised | ViewPromised | ViewEstablished


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a replica needs to continue from slot ``slot`` without the slots below.

    Taken at a slot boundary the replica has executed, and only once a majority
    executed it too (``docs/recovery.md`` section 16): slots below ``slot`` are
    final. ``executed[m]``: how many C-instances of replica ``m`` those slots
    ran (the counting rule continues from there). ``c_max[m]``: the highest
    C-instance index of ``m`` accepted here (votes report it; forgetting the
    records must not lower it). ``next_index``: the index this replica's next own
    C-instance gets (never one used before). ``sessions``: the executor's
    exactly-once table (:meth:`sdpaxos.core.executor.Executor.dump_sessions`).
    ``app``: :meth:`StateMachine.snapshot` after slot ``slot - 1``.
    """

    slot: Slot
    executed: tuple[int, ...]
    c_max: tuple[int, ...]
    next_index: CIndex
    sessions: tuple[Any, ...]
    app: bytes


#: The first element of an encoded snapshot: bump when the layout changes.
SNAPSHOT_FORMAT = 1
#: Deepest nesting of tuples a snapshot may hold (sessions are shallow).
SNAPSHOT_DEPTH_MAX = 8

# A tiny tagged encoding of None, bools, ints, bytes and tuples: the core may not
# import the wire codec (or msgpack), and never pickles. Ints are zigzag varints.
_NONE, _FALSE, _TRUE, _INT, _BYTES, _TUPLE = range(6)


def _varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _pack(out: bytearray, value: object, depth: int) -> None:
    if value is None:
        out.append(_NONE)
    elif value is True or value is False:
        out.append(_TRUE if value else _FALSE)
    elif type(value) is int:
        out.append(_INT)
        _varint(out, value * 2 if value >= 0 else -value * 2 - 1)
    elif isinstance(value, bytes):
        out.append(_BYTES)
        _varint(out, len(value))
        out += value
    elif isinstance(value, tuple) and depth < SNAPSHOT_DEPTH_MAX:
        out.append(_TUPLE)
        _varint(out, len(value))
        for item in value:
            _pack(out, item, depth + 1)
    else:
        raise TypeError(f"a snapshot cannot hold {type(value).__name__}")


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def varint(self) -> int:
        n = shift = 0
        while True:
            if self.pos >= len(self.data) or shift > 70:
                raise PeerMessageError("snapshot ends inside a number")
            byte = self.data[self.pos]
            self.pos += 1
            n |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return n

    def value(self, depth: int) -> object:
        if self.pos >= len(self.data):
            raise PeerMessageError("snapshot ends early")
        tag = self.data[self.pos]
        self.pos += 1
        if tag == _NONE:
            return None
        if tag in (_FALSE, _TRUE):
            return tag == _TRUE
        if tag == _INT:
            z = self.varint()
            return z >> 1 if not z & 1 else -((z + 1) >> 1)
        if tag == _BYTES:
            size = self.varint()
            if self.pos + size > len(self.data):
                raise PeerMessageError("snapshot ends inside a byte string")
            self.pos += size
            return self.data[self.pos - size : self.pos]
        if tag == _TUPLE and depth < SNAPSHOT_DEPTH_MAX:
            count = self.varint()
            if count > len(self.data) - self.pos:  # every item takes a byte at least
                raise PeerMessageError("snapshot tuple longer than the snapshot")
            return tuple(self.value(depth + 1) for _ in range(count))
        raise PeerMessageError(f"snapshot holds an unknown tag {tag}")


def pack_value(value: object) -> bytes:
    """``value`` (None, bools, ints, bytes and tuples of them) in the snapshot's
    encoding: what an application state that the core builds (the membership)
    is stored and sent as."""
    out = bytearray()
    _pack(out, value, 0)
    return bytes(out)


def unpack_value(data: bytes) -> object:
    """The value :func:`pack_value` made ``data`` from.

    Raises:
        PeerMessageError: ``data`` is not one well-formed value.
    """
    reader = _Reader(data)
    value = reader.value(0)
    if reader.pos != len(data):
        raise PeerMessageError("packed value has bytes after its end")
    return value


def encode_snapshot(snapshot: Snapshot) -> bytes:
    """The bytes a snapshot travels (in chunks) and is stored as (never a pickle)."""
    out = bytearray()
    _pack(
        out,
        (
            SNAPSHOT_FORMAT,
            snapshot.slot,
            snapshot.executed,
            snapshot.c_max,
            snapshot.next_index,
            snapshot.sessions,
            snapshot.app,
        ),
        0,
    )
    return bytes(out)


def _ints(value: object, n: int, low: int, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or len(value) != n:
        raise PeerMessageError(f"snapshot {what} is not {n} integers")
    for item in value:
        if type(item) is not int or item < low:
            raise PeerMessageError(f"snapshot {what} holds {item!r}")
    return value


def decode_snapshot(data: bytes, replicas: int) -> Snapshot:
    """The snapshot ``data`` encodes, for a cluster of ``replicas``.

    Raises:
        PeerMessageError: the bytes are not a well-formed snapshot (it came from
            a peer: nothing is installed).
    """
    reader = _Reader(data)
    value = reader.value(0)
    if reader.pos != len(data):
        raise PeerMessageError("snapshot has bytes after its end")
    if not isinstance(value, tuple) or len(value) != 7 or value[0] != SNAPSHOT_FORMAT:
        raise PeerMessageError("snapshot has an unknown layout")
    _, slot, executed, c_max, next_index, sessions, app = value
    if type(slot) is not int or slot < 0:
        raise PeerMessageError(f"snapshot slot {slot!r}")
    if type(next_index) is not int or next_index < 0:
        raise PeerMessageError(f"snapshot next index {next_index!r}")
    if not isinstance(sessions, tuple) or not isinstance(app, bytes):
        raise PeerMessageError("snapshot sessions or state are malformed")
    return Snapshot(
        Slot(slot),
        _ints(executed, replicas, 0, "executed"),
        _ints(c_max, replicas, -1, "c_max"),
        CIndex(next_index),
        sessions,
        app,
    )


def covered_records(records: list[Record], snapshot: Snapshot) -> list[Record]:
    """``records`` without what ``snapshot`` makes unnecessary (section 16.5).

    Kept: the newest :class:`ViewPromised` and the newest :class:`ViewEstablished`
    (its values cut to slots at or above the snapshot; view, sequencer and base
    stay, votes report them); C-instance records of instances not executed yet;
    O-values at or above the snapshot slot (an older range's values become an
    :class:`OAccepted` at its ballot, which replays identically). A restart from
    the snapshot and the kept records rebuilds the same logs above the snapshot.
    """
    slot = snapshot.slot
    executed = snapshot.executed
    promised: ViewPromised | None = None
    established: ViewEstablished | None = None
    kept: list[Record] = []
    for rec in records:
        if isinstance(rec, CAccepted | CPromised):
            if rec.index >= executed[rec.owner]:
                kept.append(rec)
        elif isinstance(rec, ViewPromised):
            if promised is None or rec.view >= promised.view:
                promised = rec
        elif isinstance(rec, ViewEstablished):
            if established is None or rec.view >= established.view:
                if established is not None:
                    kept.extend(
                        _o_values_from(
                            established.view, established.start, established.values, slot
                        )
                    )
                established = rec
            else:
                kept.extend(_o_values_from(rec.view, rec.start, rec.values, slot))
        else:
            kept.extend(_o_values_from(rec.view, rec.start, rec.values, slot))
    head: list[Record] = []
    if promised is not None:
        head.append(promised)
    if established is not None:
        cut = max(0, min(slot - established.start, len(established.values)))
        head.append(
            ViewEstablished(
                established.view,
                established.sequencer,
                Slot(established.start + cut),
                established.values[cut:],
            )
        )
    return head + kept


def _o_values_from(view: View, start: Slot, values: tuple[OValue, ...], slot: Slot) -> list[Record]:
    cut = max(0, slot - start)
    if cut >= len(values):
        return []
    return [OAccepted(view, Slot(start + cut), values[cut:])]


class Storage(Protocol):
    """Where a driver keeps the records a :class:`Ready` batch asks to persist."""

    def append(self, records: list[Record]) -> None:
        """Make ``records`` durable, in order, before returning."""

    def load(self) -> list[Record]:
        """Every record appended and not forgotten since, in order."""

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Make ``snapshot`` durable, then forget the records it covers
        (:func:`covered_records` says which stay). Before returning."""

    def load_snapshot(self) -> Snapshot | None:
        """The newest snapshot saved, if any."""

    def start_epoch(self, snapshot: Snapshot) -> None:
        """A new epoch (``docs/membership.md`` section 4.3): make ``snapshot`` the
        newest snapshot and forget every record, atomically, before returning
        (a crash leaves either the old epoch whole or the new one)."""


class MemoryStorage:
    """In-memory :class:`Storage` for the simulator and tests.

    A simulated crash keeps this object and drops the replica, so what survives
    is exactly what was appended (and the newest snapshot).
    """

    __slots__ = ("_records", "_snapshot")

    def __init__(self) -> None:
        self._records: list[Record] = []
        self._snapshot: Snapshot | None = None

    def append(self, records: list[Record]) -> None:
        self._records.extend(records)

    def load(self) -> list[Record]:
        return list(self._records)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        if self._snapshot is not None and snapshot.slot <= self._snapshot.slot:
            return  # an older one never replaces a newer
        self._snapshot = snapshot
        self._records = covered_records(self._records, snapshot)

    def load_snapshot(self) -> Snapshot | None:
        return self._snapshot

    def start_epoch(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        self._records = []

    def __len__(self) -> int:
        return len(self._records)
