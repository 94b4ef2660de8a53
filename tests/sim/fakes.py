"""Tiny stand-ins for the core and the codec, so simulator tests do not depend on
the protocol being right (or finished)."""

import pickle
import random
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.core import ClusterConfig, Command, Ready, Record, Reply, ReplyKind, Wait
from sdpaxos.core.app import StateMachine


class PickleCodec:
    """Round-trips arbitrary picklable test messages as bytes."""

    def encode_batch(self, messages: list[Any]) -> bytes:
        return pickle.dumps(list(messages))

    def decode_batch(self, data: bytes) -> list[Any]:
        result = pickle.loads(data)
        assert isinstance(result, list)
        return result


@dataclass(frozen=True)
class Ping:
    src: int
    n: int


@dataclass
class FakeReplica:
    """Answers each proposal READY at once and sends a ``Ping`` to every peer.

    Records everything it is asked to do, so tests can see what the simulator
    delivered and when.
    """

    config: ClusterConfig
    id: int
    sm: StateMachine
    rng: random.Random
    restored: list[Record] | None = None
    ticks: int = 0
    #: The clock readings the driver passed (tick and step).
    clock_ms: list[float] = field(default_factory=list)
    received: list[Any] = field(default_factory=list)
    rtts: list[tuple[int, float]] = field(default_factory=list)
    _out: Ready = field(default_factory=Ready)
    sent: int = 0

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None:
        self._out.replies.append(Reply(command.client_id, command.seq, ReplyKind.READY))
        for peer in range(self.config.replicas):
            if peer != self.id:
                self.sent += 1
                self._out.messages.append((peer, Ping(self.id, self.sent)))

    def step(self, message: Any, now_ms: float) -> None:
        self.received.append(message)
        self.clock_ms.append(now_ms)

    def tick(self, now_ms: float) -> None:
        self.ticks += 1
        self.clock_ms.append(now_ms)

    def ready(self) -> Ready:
        out, self._out = self._out, Ready()
        return out

    def observe_rtt(self, peer: int, rtt_ms: float) -> None:
        self.rtts.append((peer, rtt_ms))

    def send(self, dst: int, message: Any) -> None:
        """Test hook: queue a message as if the protocol had produced it."""
        self._out.messages.append((dst, message))


def fake_factory(
    config: ClusterConfig,
    replica_id: int,
    sm: StateMachine,
    rng: random.Random,
    observe: bool,
    records: list[Record] | None,
) -> FakeReplica:
    return FakeReplica(config, replica_id, sm, rng, records)
