"""A minimal in-memory network for core tests: no codec, no time, explicit delivery.

Tests read like protocol traces: propose, deliver (all, or one message), drop,
duplicate, tick. The simulator (``sdpaxos.sim``) is the realistic harness; this
one exists so a core rule can be pinned down message by message.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from sdpaxos.core import (
    ClusterConfig,
    Command,
    Executed,
    Message,
    MemoryStorage,
    Replica,
    Reply,
    Wait,
)


class Register:
    """Deterministic state machine: appends payloads, returns the running count."""

    def __init__(self) -> None:
        self.log: list[bytes] = []

    def apply(self, payload: bytes) -> bytes:
        self.log.append(payload)
        return str(len(self.log)).encode()


@dataclass
class Net:
    config: ClusterConfig
    replicas: list[Replica] = field(default_factory=list)
    machines: list[Register] = field(default_factory=list)
    storages: list[MemoryStorage] = field(default_factory=list)
    #: In-flight messages: (src, dst, message).
    pending: list[tuple[int, int, Message]] = field(default_factory=list)
    replies: list[list[Reply]] = field(default_factory=list)
    executed: list[list[Executed]] = field(default_factory=list)
    sent: list[tuple[int, int, Message]] = field(default_factory=list)

    @classmethod
    def build(cls, replicas: int = 3, **config: object) -> Net:
        cfg = ClusterConfig(replicas=replicas, **config)  # type: ignore[arg-type]
        net = cls(cfg)
        for r in range(replicas):
            sm = Register()
            net.machines.append(sm)
            net.storages.append(MemoryStorage())
            net.replicas.append(Replica(cfg, r, sm, rng=random.Random(r), observe=True))
            net.replies.append([])
            net.executed.append([])
        return net

    def flush(self, r: int) -> None:
        rd = self.replicas[r].ready()
        self.storages[r].append(rd.persist)
        for dst, msg in rd.messages:
            self.pending.append((r, dst, msg))
            self.sent.append((r, dst, msg))
        self.replies[r].extend(rd.replies)
        self.executed[r].extend(rd.executed)

    def propose(self, r: int, client: int, seq: int, payload: bytes = b"x",
                wait: Wait = Wait.READY) -> Command:
        cmd = Command(client, seq, payload)
        self.replicas[r].propose(cmd, wait)
        self.flush(r)
        return cmd

    def deliver_one(self, i: int = 0) -> tuple[int, int, Message]:
        src, dst, msg = self.pending.pop(i)
        self.replicas[dst].step(msg)
        self.flush(dst)
        return src, dst, msg

    def deliver_all(self, *, keep: Callable[[int, int, Message], bool] | None = None,
                    limit: int = 100_000) -> int:
        """Deliver until quiet; ``keep`` returning False drops a message instead."""
        n = 0
        while self.pending:
            n += 1
            assert n < limit, "no quiescence"
            src, dst, msg = self.pending.pop(0)
            if keep is not None and not keep(src, dst, msg):
                continue
            self.replicas[dst].step(msg)
            self.flush(dst)
        return n

    def tick(self, times: int = 1) -> None:
        for _ in range(times):
            for r, rep in enumerate(self.replicas):
                rep.tick()
                self.flush(r)

    def ready_ids(self, r: int) -> list[tuple[int, int]]:
        return [(x.client_id, x.seq) for x in self.replies[r] if x.kind == 0]

    def executed_ids(self, r: int) -> list[tuple[int, int]]:
        return [(e.command.client_id, e.command.seq) for e in self.executed[r]]

    def kinds(self, pred: Callable[[int, int, Message], bool] | None = None) -> list[str]:
        return [type(m).__name__ for s, d, m in self.sent if pred is None or pred(s, d, m)]
