"""The durability contract, as data.

A :class:`Ready` batch lists :data:`Record` values in ``persist``. They must be
on stable storage before any message of the same batch leaves and before any
reply of that batch is given: an acceptor's C-ACK or O-ACK promises that the
accepted value survives a crash, and a command leader counts its own
acceptance toward the quorum that makes a command ready.

After a crash a replica is rebuilt from exactly these records
(:meth:`Replica.restore`); everything else (commit knowledge, execution state,
timers) is volatile and is re-learned from peers.
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
    """This replica accepted O-instances ``start ..`` with ``values`` at ballot ``view``.

    ``base`` is that view's base (see :class:`~sdpaxos.core.messages.OAccept`);
    it is reported in votes after a restart too.
    """

    view: View
    start: Slot
    values: tuple[OValue, ...]
    base: Slot = -1


@dataclass(frozen=True, slots=True)
class CPromised:
    """This replica promised ``ballot`` for C-instance ``(owner, index)`` (recovery phase 1)."""

    owner: ReplicaId
    index: int
    ballot: Ballot


@dataclass(frozen=True, slots=True)
class ViewPromised:
    """This replica entered ``view``: it rejects older views and votes no more in it.

    ``sequencer`` is the view's sequencer once known (-1 while the election runs).
    """

    view: View
    sequencer: ReplicaId


Record: TypeAlias = CAccepted | OAccepted | CPromised | ViewPromised


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
