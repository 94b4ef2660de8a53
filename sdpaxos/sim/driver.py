"""The in-memory driver every in-process cluster shares: carry out a ``Ready`` batch.

Why: a :class:`~sdpaxos.core.replica.Replica` does no I/O; whoever runs it (the
simulator, the explicit-delivery harness :mod:`sdpaxos.sim.explicit`, the core
micro-benchmark, a test's timed loop) must carry out each batch it hands over
with :meth:`~sdpaxos.core.replica.Replica.ready` in the durability order of
:mod:`sdpaxos.core.ready`: the records first, then the messages, then the
answers. :func:`carry_out` is that order, written once; what "send" or "answer"
means is each driver's business, given as an :class:`Outlet`.

One batch, in order:

1. ``persist``: appended to the node's storage, then :meth:`Outlet.persisted`;
   then ``snapshot``, if any: saved (the storage forgets the records it covers);
2. ``messages``: :meth:`Outlet.send`, called once per batch (with an empty list
   when there are none: it is the moment the batch's messages leave, and the one
   point where a driver may let the node die mid-batch by returning ``True``);
3. ``executed``: :meth:`Outlet.executed` (observation only; the state machine
   already applied them inside ``ready()``), and :meth:`Outlet.snapshotted`
   (before them for an installed snapshot, after them for a taken one, as
   ``Ready.snapshot_installed`` says);
4. ``replies``, then ``reads``: :meth:`Outlet.replies`, :meth:`Outlet.reads`;
   skipped when the node died in step 2: a dead process answers nobody.

Each hook gets the whole list of its batch (or is not called when it is empty,
except ``send``), so a driver's per-message loop stays its own. Pure: no time,
no I/O; the caller decides when to call ``ready()`` and how often.

Who uses it: :class:`~sdpaxos.sim.cluster.SimCluster` (checker, listeners, a
crash cut at ``send``), :class:`~sdpaxos.sim.explicit.Net` (pending messages
and per-replica lists), ``bench/rounds.py``, the benchmarks' round driver (FIFO
inboxes, closed-loop sessions), and the closed-loop latency loop of
``tests/core/harness.py``. What stays each driver's own: when ``ready()`` is
called (the simulator drains until a batch is empty, to aim a crash at a quiet
event too; the others call it once per event or round, which is what their
tests and counters see), how messages travel, and the replica's lifecycle
(crash, restart, pause).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from sdpaxos.core.app import StateMachine
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply
from sdpaxos.core.replica import Replica
from sdpaxos.core.storage import Record, Snapshot, Storage

__all__ = ["Node", "Outlet", "carry_out"]

M = TypeVar("M", bound=StateMachine)


class Outlet:
    """Where a node's effects go. The defaults drop them; override what you need.

    Every hook receives the id of the replica whose batch is being carried out,
    so one outlet can serve a whole cluster.
    """

    __slots__ = ()

    def persisted(self, replica: int, records: list[Record]) -> None:
        """``records`` are durable in the node's storage (they were appended first)."""

    def send(self, replica: int, messages: Sequence[tuple[int, Message]]) -> bool:
        """Route the batch's ``(destination, message)`` pairs, possibly none.

        Return ``True`` when the node died while sending (say, a crash aimed at
        this batch let only a prefix leave): :func:`carry_out` then reports the
        batch's executed entries and gives no reply and no read result.
        """
        return False

    def executed(self, replica: int, entries: list[Executed]) -> None:
        """The state machine applied ``entries``, in this order (``observe=True`` only)."""

    def snapshotted(self, replica: int, snapshot: Snapshot) -> None:
        """``replica`` took or installed ``snapshot`` (saved to its storage already):
        a taken one is reported after the batch's executed entries it covers, an
        installed one before the entries executed after it."""

    def replies(self, replica: int, replies: list[Reply]) -> None:
        """Answers for the clients that proposed at ``replica``."""

    def reads(self, replica: int, results: list[ReadResult]) -> None:
        """Reads that ``replica`` may serve now (or must send through the log)."""


def carry_out(replica: int, ready: Ready, storage: Storage, outlet: Outlet) -> bool:
    """Carry out one ``Ready`` batch of ``replica`` in the durability order.

    Returns ``False`` when the outlet's :meth:`~Outlet.send` said the node died
    mid-batch (no reply or read result was given), else ``True``.
    """
    if ready.persist:
        storage.append(ready.persist)
        outlet.persisted(replica, ready.persist)
    if ready.snapshot is not None:
        storage.save_snapshot(ready.snapshot)
    if ready.epoch_base is not None:
        storage.start_epoch(ready.epoch_base)
    died = outlet.send(replica, ready.messages)
    snapshot = ready.snapshot
    # A batch holds at most one snapshot: an installed one comes before the
    # commands executed after it, a taken one after those it covers. Ready says
    # which: the slot cannot (a snapshot captured earlier and taken in a batch
    # that executes later slots is at or below the first of them).
    installed = snapshot is not None and ready.snapshot_installed
    if installed and snapshot is not None:
        outlet.snapshotted(replica, snapshot)
    if ready.executed:
        outlet.executed(replica, ready.executed)
    if snapshot is not None and not installed:
        outlet.snapshotted(replica, snapshot)
    if died:
        return False
    if ready.replies:
        outlet.replies(replica, ready.replies)
    if ready.reads:
        outlet.reads(replica, ready.reads)
    return True


@dataclass(eq=False, slots=True)
class Node(Generic[M]):
    """One in-memory replica process: the core, its storage and its state machine.

    ``machine`` is the object the replica applies commands to (the caller built
    the replica with it); the node keeps it so that a driver can look at it.
    """

    id: int
    replica: Replica
    storage: Storage
    machine: M

    def flush(self, outlet: Outlet) -> bool:
        """Call ``ready()`` once and carry out the batch (see :func:`carry_out`)."""
        return carry_out(self.id, self.replica.ready(), self.storage, outlet)
