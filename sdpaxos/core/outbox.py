"""The effects a replica produces between two :meth:`Replica.ready` calls.

Every role writes here and nowhere else: records to persist, messages to send,
client replies, executed commands (when observed), read results, and trace
events. :meth:`Outbox.take` hands them over as one :class:`Ready` batch, which
the driver carries out records first.
"""

from collections.abc import Iterable
from typing import Any

from sdpaxos.core.app import Tracer
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply
from sdpaxos.core.storage import Record, Snapshot
from sdpaxos.core.types import ReplicaId


class Outbox:
    """Persist, send, broadcast, reply and trace, in the order they happen."""

    __slots__ = (
        "executed",
        "me",
        "messages",
        "persisted",
        "reads",
        "replies",
        "snapshot",
        "snapshot_installed",
        "tracer",
    )

    # Roles call :meth:`trace` directly, except on the per-message paths (a
    # C-accept, an O-accept, an execution), where they first test ``tracer is not
    # None`` so that an untraced replica does not build the event's fields.

    def __init__(self, me: ReplicaId, tracer: Tracer | None) -> None:
        self.me = me
        #: Set when a tracer is attached; roles test it before building an event's fields.
        self.tracer = tracer
        self.persisted: list[Record] = []
        self.messages: list[tuple[ReplicaId, Message]] = []
        self.replies: list[Reply] = []
        self.executed: list[Executed] = []
        self.reads: list[ReadResult] = []
        #: A snapshot to save durably (then truncate the records it covers),
        #: and whether it was installed (else taken): :attr:`Ready.snapshot_installed`.
        self.snapshot: Snapshot | None = None
        self.snapshot_installed = False

    def persist(self, record: Record) -> None:
        self.persisted.append(record)

    def send(self, dst: ReplicaId, message: Message) -> None:
        self.messages.append((dst, message))

    def broadcast(self, peers: Iterable[ReplicaId], message: Message) -> None:
        """Send one message to each of ``peers`` (the same object: it is immutable)."""
        self.messages.extend((p, message) for p in peers)

    def reply(self, reply: Reply) -> None:
        self.replies.append(reply)

    def trace(self, event: str, **fields: Any) -> None:
        """Report a trace event (named after its TLA+ action, ``tla/README.md``)."""
        if self.tracer is not None:
            self.tracer(event, self.me, fields)

    def take(self) -> Ready:
        """Hand everything over as one batch and start empty."""
        rd = Ready(
            self.persisted,
            self.messages,
            self.replies,
            self.executed,
            self.reads,
            self.snapshot,
            self.snapshot_installed,
        )
        self.snapshot = None
        self.snapshot_installed = False
        self.persisted = []
        self.messages = []
        self.replies = []
        self.executed = []
        self.reads = []
        return rd
