"""Plain protocol values shared by every core module.

Replica ids are the integers ``0 .. N-1``; the paper's R_n is replica ``n``.
A C-instance is named by ``(owner, index)`` (the paper's C_n^i, 0-based ``i``).
An O-instance is named by its global slot ``j`` (0-based). Its value is an
:data:`OValue`: ``(owner, count)`` means "the next ``count`` C-instances of
``owner``" (O-instance batching, paper section 4; ``count == 1`` is the paper's
basic protocol), and ``(NO_CL, 0)`` is the paper's ``no-cl``: skip the slot.

Pitfall 3 (``docs/protocol.md`` section 14), fixed once here: every counter is
0-based. Slot ``j`` holding ``(n, c)`` runs C-instances ``k .. k+c-1`` of ``n``
where ``k`` is the number of C-instances of ``n`` covered by slots ``0 .. j-1``.
"""

from enum import IntEnum
from typing import NamedTuple, NewType, TypeAlias

#: Distinct id types, so that mypy catches a slot passed as a view (at run time
#: they are plain ints: ``Slot(5) == 5``).
ReplicaId = NewType("ReplicaId", int)
Slot = NewType("Slot", int)
View = NewType("View", int)
Ballot = NewType("Ballot", int)
#: The index of a C-instance in its owner's C-log (the paper's ``i`` of C_n^i).
CIndex = NewType("CIndex", int)

#: Zeros of the id types, for defaults.
REPLICA_0 = ReplicaId(0)
VIEW_0 = View(0)
SLOT_0 = Slot(0)

#: Owner value of an O-instance that orders no C-instance (the paper's ``no-cl``).
NO_CL = ReplicaId(-1)

#: An O-instance value: ``(owner, count)``; ``(NO_CL, 0)`` is ``no-cl``.
OValue: TypeAlias = tuple[ReplicaId, int]

NO_CL_VALUE: OValue = (NO_CL, 0)

#: Owner value of the O-instance that ends an epoch (``docs/membership.md``
#: section 3): the stop orders no C-instance, nothing after it runs in its epoch,
#: and the next epoch starts at the slot after it. Every owner below 0 orders
#: nothing: code that counts C-instances tests ``owner >= 0``.
STOP = ReplicaId(-2)

#: The stop's O-value (Stoppable Paxos's stop command).
STOP_VALUE: OValue = (STOP, 0)

#: Ballots are ``round * BALLOT_STRIDE + replica``, unique per replica. The owner
#: of a C-log proposes at round 0, so recovery (round >= 1) always outranks it.
BALLOT_STRIDE = 256
REPLICAS_MAX = BALLOT_STRIDE


def make_ballot(round_: int, replica: ReplicaId) -> Ballot:
    """The ballot of ``replica`` in ``round_``; totally ordered, unique per replica."""
    return Ballot(round_ * BALLOT_STRIDE + replica)


def ballot_round(ballot: Ballot) -> int:
    return ballot // BALLOT_STRIDE


class Command(NamedTuple):
    """One client command, opaque to the protocol.

    A named tuple, not a frozen dataclass: one is built for every command a
    replica proposes or receives, and a named tuple is immutable at half the
    cost (the runtime's hot path; ``bench/README.md``).

    ``(client_id, seq)`` identifies it for exactly-once execution: a client
    session has at most one command outstanding and numbers them 1, 2, 3, ...
    ``client_id == 0`` means "no session": never deduplicated, and
    :meth:`Replica.propose` refuses it (a peer's C-instance may still hold
    one: it executes without a session). ``seq == 0``
    (with ``client_id`` a non-zero nonce) is a registration: it opens a session
    and its result is the session's id (:mod:`sdpaxos.core.sessions`).

    ``key`` names the object the command writes, if the application says so.
    The sequencer keeps, per key, the last slot it gave a write of it (the
    paper's history table, section 3.5), so a read of that key waits only for
    those writes. ``None`` is always safe: reads then wait for every write.
    """

    client_id: int
    seq: int
    payload: bytes
    key: bytes | None = None


class Wait(IntEnum):
    """What a proposer waits for."""

    #: The paper's "ready": the command's place in the global order is fixed.
    READY = 0
    #: Executed at the command leader, with the state machine's result.
    EXECUTED = 1


def keys_of(commands: tuple[Command, ...]) -> tuple[bytes, ...]:
    """The objects a batch writes; ``b""`` stands for "some unnamed object"."""
    return tuple(sorted({c.key or b"" for c in commands}))


class VoteEntry(NamedTuple):
    """One O-value a voter holds durably: slot, the view it holds it at, the value.

    An O-instance's ballot *is* a view: the sequencer of view ``v`` proposes at
    ballot ``v`` (C-instance ballots are :data:`Ballot`, a different domain).
    """

    slot: Slot
    ballot: View
    owner: ReplicaId
    #: How many C-instances of ``owner`` the value orders (``count`` is tuple's).
    instances: int


class OCommitEntry(NamedTuple):
    """One chosen O-instance: slot, the view (ballot) it was chosen at, the value."""

    slot: Slot
    ballot: View
    owner: ReplicaId
    #: How many C-instances of ``owner`` the value orders (``count`` is tuple's).
    instances: int
