"""The durability contract, as data.

A :class:`Ready` batch lists :data:`Record` values in ``persist``. They must be
on stable storage before any message of the same batch leaves and before any
reply of that batch is given: an acceptor's C-ACK or O-ACK promises that the
accepted value survives a crash, and a command leader counts its own
acceptance toward the quorum that makes a command ready.

After a crash a replica is rebuilt from exactly these records, by constructing
it with ``Replica(..., records=storage.load())``; everything else (commit
knowledge, execution state, timers) is volatile and is re-learned from peers.
"""

from dataclasses import dataclass
from typing import Protocol, TypeAlias

from sdpaxos.core.types import Ballot, Command, OValue, ReplicaId, Slot, View


@dataclass(frozen=True, slots=True)
class CAccepted:
    """This replica accepted ``commands`` for C-instance ``(owner, index)`` at ``ballot``."""

    owner: ReplicaId
    index: int
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
        return self.start + len(self.values)


@dataclass(frozen=True, slots=True)
class CPromised:
    """This replica promised ``ballot`` for C-instance ``(owner, index)`` (recovery phase 1)."""

    owner: ReplicaId
    index: int
    ballot: Ballot


@dataclass(frozen=True, slots=True)
class ViewPromised:
    """This replica promised ``view``: it rejects older views and votes no more in it."""

    view: View


Record: TypeAlias = CAccepted | OAccepted | CPromised | ViewPromised | ViewEstablished


class Storage(Protocol):
    """Where a driver keeps the records a :class:`Ready` batch asks to persist."""

    def append(self, records: list[Record]) -> None:
        """Make ``records`` durable, in order, before returning."""

    def load(self) -> list[Record]:
        """Every record appended so far, in order."""


class MemoryStorage:
    """In-memory :class:`Storage` for the simulator and tests.

    A simulated crash keeps this object and drops the replica, so what survives
    is exactly what was appended.
    """

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: list[Record] = []

    def append(self, records: list[Record]) -> None:
        self._records.extend(records)

    def load(self) -> list[Record]:
        return list(self._records)

    def __len__(self) -> int:
        return len(self._records)
