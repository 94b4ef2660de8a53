"""The Jepsen-style test with a membership nemesis: the members change while
redis-py clients run.

``python -m kvstore.nemesis_members --seed 3`` (or :func:`run_members_jepsen`):

* starts 3 node processes and 2 spares (``make_kv_cluster(spares=2)``, fsync
  on), clients on the 3 members through redis-py (:mod:`kvstore.workload`),
  and the *ack* writer of :mod:`kvstore.jepsen`, which sets fresh keys through
  the members of the moment;
* meanwhile the nemesis, one change at a time, each committed before the next
  (the admin answer comes once the change is committed and the epoch has
  switched at the node asked), with a quiet spell between:

  1. ``add-replica 3``: the first spare becomes a member;
  2. ``remove-replica R``: a member drawn by the seed leaves (its clients get
     ``NOTMEMBER`` from then on);
  3. SIGKILL of another member K, then ``replace-replica K 4``: the second
     spare takes its place;

  the node asked is the one member the nemesis never touches;
* at the end it reads every workload key at every final member (recorded),
  checks the history for linearizability (``sdpaxos.check``), and reads every
  acknowledged write back at every final member, twice: a linearizable
  ``MGET`` (answered from that node's store once it has executed every write
  before it), then ``READONLY`` and ``MGET`` again, answered from that node's
  store at once and forwarded nowhere. A key missing from either is lost.

Exit status 0 only if the history is linearizable, no acknowledged write is
lost, and the final membership is the one the changes make.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvstore.cluster import ProcessCluster
from kvstore.demo import DEMO_PROTOCOL
from kvstore.jepsen import ack_writer, final_reads
from kvstore.local import make_kv_cluster
from kvstore.workload import Workload, redis_connect, run_clients
from sdpaxos.check import KeyValue, check
from sdpaxos.check.formats import write_jsonl
from sdpaxos.check.testing import Recorder
from sdpaxos.runtime.changes import CHANGE_TIMEOUT_S

__all__ = ["MembersResult", "run_members_jepsen"]

#: The quiet spell before each change (seconds).
QUIET_S = 2.0
#: Beyond the change's own timeout, how long the nemesis waits for its answer.
ANSWER_MARGIN_S = 15.0


@dataclass
class MembersResult:
    operations: int
    verdict: str
    acknowledged: int
    lost: list[str]
    #: (seconds since the start, what) for each change and kill.
    changes: list[tuple[float, str]]
    #: The members at the end, as the node the nemesis asked names them.
    members: list[int]
    #: The members the changes should have left.
    expected: list[int]
    #: The nodes at which every acknowledged write was read back.
    read_at: list[int]
    errors: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.verdict == "linearizable"
            and not self.lost
            and self.members == self.expected == self.read_at
        )


class MembershipNemesis:
    """Adds a spare, removes a member, replaces a SIGKILLed member by a spare,
    asking ``anchor`` (a member it never touches) each time."""

    def __init__(
        self, cluster: ProcessCluster, rng: random.Random, writing: list[tuple[str, int]]
    ) -> None:
        self.cluster = cluster
        #: The Redis addresses the ack writer uses: the members of the moment.
        self.writing = writing
        order = list(range(cluster.members))
        rng.shuffle(order)
        self.anchor, self.removed, self.killed = order[0], order[1], order[2]
        self.spares = list(range(cluster.members, cluster.size))
        self.log: list[tuple[float, str]] = []
        self.started = time.monotonic()
        self.membership: dict[str, Any] = {}

    @property
    def expected(self) -> list[int]:
        return sorted([self.anchor, *self.spares[:2]])

    async def _admin(self, operation: str, argument: Any) -> dict[str, Any]:
        """Ask the anchor for a change; its answer (the new membership) once committed."""
        from sdpaxos.runtime.cli import cluster_client_tls
        from sdpaxos.runtime.client import Client

        cfg = self.cluster.configs[self.anchor].node
        client = Client(
            [(cfg.me.host, cfg.me.port)],
            tls=cluster_client_tls(cfg, 1),
            attempt_timeout_s=CHANGE_TIMEOUT_S + ANSWER_MARGIN_S,
        )
        try:
            answer: dict[str, Any] = await client.admin(
                operation, argument, CHANGE_TIMEOUT_S + ANSWER_MARGIN_S
            )
        finally:
            await client.close()
        self.membership = answer
        members = [m["id"] for m in answer.get("members", [])]
        self._note(f"{operation} {argument}: epoch {answer.get('epoch')}, members {members}")
        return answer

    def _note(self, what: str) -> None:
        self.log.append((time.monotonic() - self.started, what))

    def _spare_argument(self, node_id: int) -> list[Any]:
        spare = self.cluster.configs[0].spare(node_id)
        assert spare is not None
        return [node_id, spare.peer_text, spare.region]

    async def run(self) -> None:
        """The three changes, in order, each awaited until committed."""
        cluster = self.cluster
        added, replacement = self.spares[0], self.spares[1]
        await asyncio.sleep(QUIET_S)
        await self._admin("add_replica", self._spare_argument(added))
        self.writing.append(cluster.redis_address(added))
        await asyncio.sleep(QUIET_S)
        self.writing.remove(cluster.redis_address(self.removed))
        await self._admin("remove_replica", self.removed)
        await asyncio.sleep(QUIET_S)
        self.writing.remove(cluster.redis_address(self.killed))
        cluster.kill(self.killed)
        self._note(f"SIGKILL node {self.killed}")
        await asyncio.sleep(QUIET_S / 2)
        await self._admin("replace_replica", [self.killed, *self._spare_argument(replacement)])
        self.writing.append(cluster.redis_address(replacement))


def run_members_jepsen(
    directory: Path | str,
    *,
    seconds: float = 16.0,
    seed: int = 1,
    clients_per_node: int = 2,
    profile: str | None = None,
    fsync: bool = True,
) -> MembersResult:
    """Run the test (see the module docstring) in ``directory``; what it found."""
    rng = random.Random(seed)
    directory = Path(directory)
    path = make_kv_cluster(directory, 3, profile=profile, protocol=DEMO_PROTOCOL, spares=2)
    cluster = ProcessCluster(path, fsync=fsync, bootstrap=True)
    workload = Workload(keys=5)
    recorder = Recorder()
    connect = redis_connect()
    acked: list[str] = []
    read_at: list[int] = []
    with cluster:
        cluster.start_all()
        cluster.wait_ready()
        members = list(range(cluster.members))
        writing = [cluster.redis_address(k) for k in members]
        nemesis = MembershipNemesis(cluster, rng, writing)

        async def main() -> tuple[Any, list[str]]:
            stop = asyncio.Event()
            writer = asyncio.ensure_future(
                ack_writer(writing, stop, acked, random.Random(seed + 1), connect)
            )
            changes = asyncio.ensure_future(nemesis.run())
            try:
                result = await run_clients(
                    [cluster.redis_address(k) for k in members],
                    [cluster.configs[k].node.me.region for k in members],
                    clients_per_node=clients_per_node,
                    seconds=seconds,
                    workload=workload,
                    seed=seed,
                    connect=connect,
                    recorder=recorder,
                )
                nemesis._note("clients stopped")
                await changes  # a change still running on a slow machine ends here
            finally:
                stop.set()
                await writer
                if not changes.done():
                    changes.cancel()
            final = sorted(m["id"] for m in nemesis.membership.get("members", []))
            cluster.wait_ready(final)
            lost: list[str] = []
            for k in final:  # one member at a time: which ones were read is known
                at = [cluster.redis_address(k)]
                lost += await final_reads(at, recorder, workload.keys, acked, connect, local=True)
                read_at.append(k)
            return result, lost

        result, lost = asyncio.run(main())
    history = recorder.history()
    write_jsonl(history, directory / "history.jsonl")
    verdict = check(history, KeyValue(), timeout_s=120.0)
    return MembersResult(
        operations=len(history),
        verdict=verdict.verdict.value,
        acknowledged=len(acked),
        lost=lost,
        changes=nemesis.log,
        members=sorted(m["id"] for m in nemesis.membership.get("members", [])),
        expected=nemesis.expected,
        read_at=read_at,
        errors=sum(s.errors for s in result.samples.values()),
        seconds=result.seconds,
        extra={"describe": verdict.describe(), "epoch": nemesis.membership.get("epoch")},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvstore.nemesis_members", description=__doc__)
    p.add_argument("--seconds", type=float, default=16.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--profile", default="none", help="delay profile, or 'none'")
    p.add_argument("--dir", default=None, help="keep the cluster and history here")
    args = p.parse_args(argv)
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kvstore-members-"))
    res = run_members_jepsen(
        directory,
        seconds=args.seconds,
        seed=args.seed,
        profile=None if args.profile == "none" else args.profile,
    )
    print(f"{res.operations} operations in {res.seconds:.0f} s, {res.errors} client errors")
    for t, what in res.changes:
        print(f"  {t:6.1f} s  {what}")
    print(f"members at the end: {res.members} (expected {res.expected})")
    print(f"history: {res.verdict}; acknowledged writes: {res.acknowledged}, lost: {len(res.lost)}")
    print(f"history file: {directory / 'history.jsonl'}")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
