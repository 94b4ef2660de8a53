"""Where an epoch ends and the next begins, on one epoch's :class:`Replica`.

:class:`~sdpaxos.core.member.Member` calls these when the replica executed the
stop (``docs/membership.md`` section 4): what its own clients still wait for,
the state to carry over, and the state a node outside the epoch may fetch. They
reach into the replica's roles; kept out of the replica, whose facade only routes.
"""

from __future__ import annotations

from collections import deque
from typing import Any, cast

from sdpaxos.core.messages import EpochMessage, Message
from sdpaxos.core.replica import Replica
from sdpaxos.core.storage import Snapshot
from sdpaxos.core.types import CIndex, Command, ReplicaId, Slot, Wait


def wrap(
    messages: list[tuple[ReplicaId, Message]], epoch: int, me: int, ids: tuple[int, ...]
) -> list[tuple[ReplicaId, Message]]:
    """Positions to node ids, each message in its epoch's envelope. (A member's
    batch carries member messages; :class:`~sdpaxos.core.ready.Ready` is typed
    for the replica's, and drivers pass messages through unread.)"""
    return [
        (ReplicaId(ids[dst]), cast(Message, EpochMessage(epoch, me, msg))) for dst, msg in messages
    ]


def request_stop(replica: Replica) -> None:
    """A membership change is pending in the executed state: end this epoch.

    The sequencer of an established view allocates the stop after what it was
    asked to order at its next ``ready()``; a replica that becomes sequencer
    later does the same (``docs/membership.md`` section 3.1). Idempotent.
    """
    replica.ctx.stop_wanted = True


def stopped_at(replica: Replica) -> Slot | None:
    """The slot of the stop, once ``replica`` executed it: the epoch is over."""
    return replica.ctx.progress.stop


def unfinished(replica: Replica) -> list[tuple[Command, Wait]]:
    """The epoch is over: every own command not executed, to propose in the next.

    Own C-instances the executed log ran are answered first (READY where
    nobody waits for execution), as when a snapshot covers them; the others,
    and the queue, are abandoned here (nothing of this epoch after its stop
    runs) and returned with what their clients wait for.
    """
    leader = replica.command_leader
    leader.forget_below(tuple(replica.ctx.progress.count))
    waiters = leader.exec_waiters
    commands = [c for batch in leader.inflight.values() for c in batch]
    commands.extend(leader.proposals)
    leader.inflight.clear()
    leader.proposals.clear()
    return [(c, Wait.EXECUTED if (c.client_id, c.seq) in waiters else Wait.READY) for c in commands]


def dump_sessions(replica: Replica) -> tuple[Any, ...]:
    """The exactly-once table as a snapshot carries it (an epoch's base snapshot)."""
    return replica.executor.dump_sessions()


def abandon_reads(replica: Replica) -> None:
    """The epoch is over: every pending read is refused (asked again, or
    served through the log, in the next; ``docs/membership.md`` section 4.5)."""
    reads = replica.reads
    for read_id in list(reads.pending):
        reads.refuse(read_id)
    reads.pending.clear()


def capture_state(replica: Replica) -> Snapshot | None:
    """The executed state now, as a snapshot for a node outside the epoch (a
    learner), if execution is at a slot boundary; never installed by a member."""
    progress = replica.ctx.progress
    if progress.in_slot:
        return None
    return Snapshot(
        progress.slot,
        tuple(progress.count),
        tuple(c - 1 for c in progress.count),
        CIndex(0),
        replica.executor.dump_sessions(),
        replica.executor.sm.snapshot(),
    )


def begin_epoch(replica: Replica, sessions: tuple[Any, ...]) -> None:
    """A fresh epoch's replica goes on from the previous epoch's executed state:
    its exactly-once table (the caller restored the application)."""
    replica.executor.load_sessions(sessions)


def suspect_joiners(replica: Replica, ids: tuple[int, ...], before: set[int]) -> None:
    """Members of the new epoch that were not members of the last (node ``ids`` by
    position; ``before``: the last epoch's) hold no base yet: leave them out of
    thrifty quorums until they are heard from, or the first commands of the
    epoch would wait ``retransmit_ms`` for them."""
    for position, node in enumerate(ids):
        if node not in before:
            replica.ctx.prox.suspect(ReplicaId(position))


#: Most messages of the next epoch a member holds while it has not started it.
EARLY_MESSAGES_MAX = 4096


class EarlyMessages:
    """Messages of epoch e + 1 that reach a member still running e, held until
    it starts e + 1 itself (``docs/membership.md`` section 4.6).

    Why: the members do not start the next epoch at one instant. The sequencer
    knows its stop chosen first, and the first messages of the next epoch (its
    own commands carried over, the C-accepts of members that started already)
    reach members half a round trip before they know it. Dropped, each costs a
    retransmission, and a member seeing a newer epoch would fetch its whole
    state besides. Held only while a change is pending here (the stop will
    come), at most :data:`EARLY_MESSAGES_MAX`, and for ``learn_ms`` at most:
    a member that still has not switched is behind, and fetches the state.
    """

    __slots__ = ("held", "since_ms")

    def __init__(self) -> None:
        self.held: deque[EpochMessage] = deque()
        self.since_ms = 0.0

    def hold(self, m: EpochMessage, now_ms: float) -> bool:
        """Keep ``m``; False when the bound is reached (then it is dropped)."""
        if len(self.held) >= EARLY_MESSAGES_MAX:
            return False
        if not self.held:
            self.since_ms = now_ms
        self.held.append(m)
        return True

    def overdue(self, now_ms: float, wait_ms: float) -> int | None:
        """The sender of the oldest held message once held ``wait_ms`` (all of
        them dropped then: the member fetches the newer state from it)."""
        if not self.held or now_ms - self.since_ms < wait_ms:
            return None
        src = self.held[0].src
        self.held.clear()
        return src

    def take(self, epoch: int) -> list[EpochMessage]:
        """The held messages of ``epoch`` (the one just started), in arrival order."""
        taken = [m for m in self.held if m.epoch == epoch]
        self.held.clear()
        return taken
