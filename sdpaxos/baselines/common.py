"""What the baseline cores share: start-up checks, the clock, the effects batch.

Why one place: Multi-Paxos, Mencius and EPaxos each carried a copy of these
(the duplicates report paired them), and a fix made to one copy would have
missed the others. What differs between the protocols (their messages, their
records and how a restart rebuilds from them) stays in their modules.

The hot-path constants are here for speed: an enum member looked up on its
class (``Wait.EXECUTED``, ``ReplyKind.READY``) costs about 0.2 us in CPython
3.11, as much as the rest of a ``propose``; the cores read module constants.
"""

import math
import random
from typing import Any, Final

from sdpaxos.core.app import StateMachine
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply, ReplyKind
from sdpaxos.core.sessions import Outcome
from sdpaxos.core.types import Command, ReplicaId, Wait

__all__ = [
    "APPLIED",
    "DUPLICATE",
    "EXECUTED",
    "EXPIRED",
    "READY",
    "SESSION_EXPIRED",
    "WAIT_EXECUTED",
    "BaselineReplica",
    "all_commands",
]

WAIT_EXECUTED: Final = Wait.EXECUTED
READY: Final = ReplyKind.READY
EXECUTED: Final = ReplyKind.EXECUTED
SESSION_EXPIRED: Final = ReplyKind.SESSION_EXPIRED
APPLIED: Final = Outcome.APPLIED
DUPLICATE: Final = Outcome.DUPLICATE
EXPIRED: Final = Outcome.EXPIRED

_COMMAND: Final = {Command}


def all_commands(value: object) -> bool:
    """Is ``value`` a tuple of :class:`Command`? (The codec has checked their
    fields; this keeps a message built by hand away from execution, at C speed.)"""
    return type(value) is tuple and (not value or set(map(type, value)) == _COMMAND)


class BaselineReplica:
    """The part of a baseline replica that does not depend on its protocol.

    It checks the start-up arguments, keeps the clock (``now_ms`` counts from
    the driver's first reading, so timers never see the driver's epoch) and the
    effects batch that :meth:`hand_over` gives to the driver from ``ready()``.
    """

    def __init__(
        self,
        config: ClusterConfig,
        replica_id: int,
        state_machine: StateMachine,
        rng: random.Random,
        observe: bool,
    ) -> None:
        if not isinstance(config, ClusterConfig):
            raise LocalProtocolError("config must be a ClusterConfig")
        if type(replica_id) is not int or not 0 <= replica_id < config.replicas:
            raise LocalProtocolError(
                f"replica_id {replica_id!r} is not in 0..{config.replicas - 1}"
            )
        self.config = config
        self.id = ReplicaId(replica_id)
        self.n = config.replicas
        self.majority = config.majority
        self.sm = state_machine
        self.rng = rng
        self.observe = observe
        self.now_ms = 0.0
        self._clock_origin_ms: float | None = None
        # The effects batch (see sdpaxos.core.ready for the order it is carried out in).
        self._persist: list[Any] = []
        self._messages: list[tuple[ReplicaId, Any]] = []
        self._replies: list[Reply] = []
        self._executed: list[Executed] = []
        self._reads: list[ReadResult] = []

    def _advance_clock(self, now_ms: float) -> None:
        """Move ``now_ms`` to the driver's time (never back); refuse a bad reading."""
        if type(now_ms) not in (int, float) or not math.isfinite(now_ms):
            raise LocalProtocolError(f"now_ms must be a finite number, got {now_ms!r}")
        if self._clock_origin_ms is None:
            self._clock_origin_ms = now_ms
        now = now_ms - self._clock_origin_ms
        if now > self.now_ms:
            self.now_ms = now

    # The status fields of the driving API (sdpaxos.protocols.CoreReplica): a
    # protocol without such a thing answers None; those that have it override.

    @property
    def executed_upto(self) -> int | None:
        """The executed prefix of the log (None: this protocol has none)."""
        return None

    @property
    def proposals_waiting(self) -> int | None:
        """Proposals queued here (None: the driver cannot see the queue)."""
        return None

    @property
    def view(self) -> int | None:
        return None

    @property
    def sequencer(self) -> ReplicaId | None:
        return None

    @property
    def is_sequencer(self) -> bool | None:
        return None

    def has_lease(self) -> bool | None:
        return None

    def hand_over(self) -> Ready:
        """The effects gathered since the last call, as one :class:`Ready`."""
        rd = Ready(self._persist, self._messages, self._replies, self._executed, self._reads)
        self._persist, self._messages, self._replies = [], [], []
        self._executed, self._reads = [], []
        return rd
