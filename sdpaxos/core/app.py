"""What an application plugs into a replica: its state machine, and a tracer.

Kept apart from the replica so that drivers and tools (the simulator, trace
validation) can name these types without importing the protocol itself.
"""

from collections.abc import Callable
from typing import Any, Protocol

from sdpaxos.core.types import ReplicaId


class StateMachine(Protocol):
    """What an application gives a replica.

    ``apply`` must be deterministic: every replica applies the same payloads in
    the same order and must reach the same state and results. It must not have
    effects outside the process before the driver has carried out the
    :class:`~sdpaxos.core.ready.Ready` batch of the same call (records first),
    because a crash in between re-executes the command after restart.
    """

    def apply(self, payload: bytes) -> bytes: ...

    def snapshot(self) -> bytes:
        """The whole state, as bytes that :meth:`restore` turns back into it.

        Called only when snapshots are on (``snapshot_slots_min`` or
        :meth:`Replica.request_snapshot`), right after a command was applied; it
        must be deterministic too: replicas compare nothing, but a replica that
        installs another's snapshot must reach the state the other had.
        """
        ...

    def restore(self, data: bytes) -> None:
        """Replace the whole state with the one ``data`` (from :meth:`snapshot`) holds."""


#: ``tracer(event, replica_id, fields)``; ``tla/README.md`` maps each event to its TLA+ action.
Tracer = Callable[[str, ReplicaId, dict[str, Any]], None]
