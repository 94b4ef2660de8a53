"""Replica: the only public core object (stub; being filled in)."""

import random
from collections.abc import Callable
from typing import Any, Protocol

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import Ready
from sdpaxos.core.storage import Record
from sdpaxos.core.types import Command, ReplicaId, Wait


class StateMachine(Protocol):
    """What an application gives the replica: deterministic ``apply``."""

    def apply(self, payload: bytes) -> bytes: ...


Tracer = Callable[[str, ReplicaId, dict[str, Any]], None]


class Replica:
    def __init__(
        self,
        config: ClusterConfig,
        replica_id: ReplicaId,
        state_machine: StateMachine,
        *,
        rng: random.Random | None = None,
        observe: bool = False,
        tracer: Tracer | None = None,
        records: list[Record] | None = None,
    ) -> None:
        raise NotImplementedError

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None:
        raise NotImplementedError

    def step(self, message: Message) -> None:
        raise NotImplementedError

    def tick(self) -> None:
        raise NotImplementedError

    def ready(self) -> Ready:
        raise NotImplementedError

    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None:
        raise NotImplementedError
