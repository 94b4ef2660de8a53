"""Role unit tests: one role at a time, over a real Context, with a recording
stand-in for every other role (the Reactions port)."""

import random
from typing import Any

import pytest

from sdpaxos.core.clog import CInstance
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.context import Context
from sdpaxos.core.messages import CPromise
from sdpaxos.core.outbox import Outbox


class Recorder:
    """Implements Reactions by recording each call; queries return set answers."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.answers: dict[str, Any] = {
            "next_c_index": 0,
            "oldest_unordered_started_ms": None,
            "has_lease": True,
            "read_slot": 4,
            "rebuilding": False,
            "running_for_view": False,
        }

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def promise_c(self, owner: int, start: int, end: int, ballot: int) -> CPromise:
        self.calls.append(("promise_c", (owner, start, end, ballot)))
        n = end - start
        return CPromise(
            0, 0, owner, start, ballot, True, ballot, (-1,) * n, (None,) * n, (False,) * n
        )

    def read_slots(self, keys: tuple[bytes, ...]) -> tuple[int, ...]:
        """One answer per key: ``answers["read_slot"]``, or the key's entry in
        ``answers["read_slots"]`` (a dict key -> slot) when there is one."""
        self.calls.append(("read_slots", (keys,)))
        by_key = self.answers.get("read_slots", {})
        return tuple(by_key.get(k, self.answers["read_slot"]) for k in keys)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            return self.answers.get(name)

        return call


def make_ctx(replicas: int = 3, me: int = 0, sequencer: int = 0, **config: Any) -> Context:
    cfg = ClusterConfig(replicas=replicas, sequencer=sequencer, **config)
    return Context(cfg, me, random.Random(me), Outbox(me, None))


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def committed_instance(commands: tuple[Any, ...] = ()) -> CInstance:
    inst = CInstance()
    inst.commands = commands
    inst.committed = True
    inst.ballot = 0
    return inst
