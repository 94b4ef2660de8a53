"""A Jepsen-style test of the kv-store: real node processes, redis-py clients, a nemesis.

``python -m kvstore.jepsen --seconds 300 --seed 7`` (or :func:`run_jepsen`):

* starts a cluster of node processes on the ``paper3`` delay profile (fsync on);
* runs clients in every region through redis-py (:mod:`kvstore.workload`),
  recording every operation in the checker's format;
* meanwhile a **nemesis** works through a seeded schedule of faults, one at a
  time, each followed by a quiet spell:
  - ``kill``: SIGKILL a node (the sequencer every other time), restart it later;
  - ``partition``: cut one node off from the others through every node's delay
    emulator (``admin partition``), heal later;
  - ``pause``: SIGSTOP a node (the sequencer every other time), SIGCONT later;
* separately, an *ack* writer sets a fresh key ``ack:N`` through a random node
  over and over; every SET answered OK is an acknowledged write;
* at the end it heals everything, reads every key of the workload (recorded),
  checks the history for linearizability (``sdpaxos.check``) and reads back
  every acknowledged ``ack:N`` from every node: none may be missing.

Exit status 0 only if the history is linearizable and no acknowledged write is lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvstore.cluster import ProcessCluster
from kvstore.demo import DEMO_PROTOCOL
from kvstore.local import make_kv_cluster
from kvstore.workload import OPERATION_TIMEOUT_S, Workload, redis_connect, run_clients
from sdpaxos.check import KeyValue, check
from sdpaxos.check.formats import write_jsonl
from sdpaxos.check.testing import Recorder

__all__ = ["JepsenResult", "ack_writer", "final_reads", "run_jepsen"]

FAULTS = ("kill", "partition", "pause")
#: How long a fault lasts, and the quiet spell after it (seconds).
FAULT_S = 3.0
QUIET_S = 3.0


@dataclass
class JepsenResult:
    operations: int
    verdict: str
    acknowledged: int
    lost: list[str]
    faults: list[tuple[float, str]]
    errors: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict == "linearizable" and not self.lost


class _Nemesis:
    """The fault schedule, driven by the workload's clock (``tick``)."""

    def __init__(self, cluster: ProcessCluster, faults: tuple[str, ...], rng: random.Random):
        self.cluster = cluster
        self.faults = faults
        self.rng = rng
        self.log: list[tuple[float, str]] = []
        self.active: tuple[str, int] | None = None
        self.next_at = QUIET_S
        self.count = 0

    def _admin_all(self, operation: str, argument: Any) -> None:
        from sdpaxos.runtime.sync import SyncClient

        tls = None
        cfg = self.cluster.configs[0].node
        if cfg.tls is not None:
            from sdpaxos.runtime.cli import cluster_client_tls

            tls = cluster_client_tls(cfg, 1)
        for k, r in enumerate(cfg.replicas):
            if not self.cluster.running(k) or k in self.cluster.paused:
                continue
            client = SyncClient([(r.host, r.port)], tls=tls)
            try:
                client.admin(operation, argument)
            except Exception as exc:  # a node that cannot hear us misses the change
                self.log.append((time.monotonic(), f"admin {operation} at node {k}: {exc}"))
            finally:
                client.close()

    def _sequencer(self) -> int:
        seq = self.cluster.sequencer()
        return 0 if seq is None else seq

    def tick(self, elapsed: float) -> None:
        if elapsed < self.next_at:
            return
        n = self.cluster.size
        if self.active is None:
            kind = self.faults[self.count % len(self.faults)]
            target = self._sequencer() if self.count % 2 == 0 else self.rng.randrange(n)
            self.count += 1
            if kind == "kill":
                self.cluster.kill(target)
            elif kind == "pause":
                self.cluster.pause(target)
            else:
                others = ",".join(str(k) for k in range(n) if k != target)
                self._admin_all("partition", f"{target}|{others}")
            self.active = (kind, target)
            self.log.append((elapsed, f"{kind} node {target}"))
            self.next_at = elapsed + FAULT_S
            return
        kind, target = self.active
        if kind == "kill":
            self.cluster.start(target)
        elif kind == "pause":
            self.cluster.resume(target)
        else:
            self._admin_all("partition", None)
        self.log.append((elapsed, f"end {kind} node {target}"))
        self.active = None
        self.next_at = elapsed + QUIET_S

    def heal(self, elapsed: float) -> None:
        if self.active is not None:
            self.next_at = elapsed
            self.tick(elapsed)
        for k in range(self.cluster.size):
            if not self.cluster.running(k):
                self.cluster.start(k)
        self._admin_all("partition", None)


async def ack_writer(
    addresses: list[tuple[str, int]],
    stop: asyncio.Event,
    acked: list[str],
    rng: random.Random,
    connect: Callable[[tuple[str, int]], Any],
) -> None:
    """Set fresh keys through a node drawn from ``addresses`` each time; the
    list may change while this runs (the membership nemesis adds and drops
    nodes), and it is read afresh for every write."""
    n = 0
    clients: dict[tuple[str, int], Any] = {}
    try:
        while not stop.is_set():
            n += 1
            key = f"ack:{n}"
            address = addresses[rng.randrange(len(addresses))]
            client = clients.get(address)
            if client is None:
                client = clients[address] = connect(address)
            try:
                reply = await asyncio.wait_for(
                    client.execute_command("SET", key, "1"), OPERATION_TIMEOUT_S
                )
            except Exception:
                await clients.pop(address).aclose()
                await asyncio.sleep(0.1)
                continue
            if reply in (True, b"OK", "OK"):
                acked.append(key)
    finally:
        for c in clients.values():
            await c.aclose()


async def _get_text(r: Any, key: str) -> str | None:
    raw = await asyncio.wait_for(r.execute_command("GET", key), OPERATION_TIMEOUT_S)
    return None if raw is None else bytes(raw).decode()


async def final_reads(
    addresses: list[tuple[str, int]],
    recorder: Recorder,
    keys: int,
    acked: list[str],
    connect: Callable[[tuple[str, int]], Any],
    *,
    local: bool = False,
) -> list[str]:
    """Read every workload key (recorded) and every acknowledged key, at every node.

    ``local``: each node's own state is read too: after its linearizable
    reads (which wait until the node has executed every write before them),
    ``READONLY`` and the acknowledged keys again, answered from that node's
    store at once, forwarded nowhere: what that node holds."""
    lost: set[str] = set()
    for k, address in enumerate(addresses):
        r = connect(address)
        deadline = time.monotonic() + 60
        try:
            while True:  # until this node answers linearizable reads again
                try:
                    await asyncio.wait_for(r.execute_command("GET", "k0"), OPERATION_TIMEOUT_S)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await r.aclose()
                    r = connect(address)
                    await asyncio.sleep(0.5)
            for key in (f"k{j}" for j in range(keys)):
                await recorder.acall(10_000 + k, ("get", key), _get_text(r, key))
            for start in range(0, len(acked), 500):
                chunk = acked[start : start + 500]
                values = await r.execute_command("MGET", *chunk)
                lost.update(key for key, v in zip(chunk, values, strict=True) if v is None)
            if local:
                await r.execute_command("READONLY")
                for start in range(0, len(acked), 500):
                    chunk = acked[start : start + 500]
                    values = await r.execute_command("MGET", *chunk)
                    lost.update(
                        f"{key} at node {k}"
                        for key, v in zip(chunk, values, strict=True)
                        if v is None
                    )
        finally:
            await r.aclose()
    return sorted(lost)


def run_jepsen(
    directory: Path | str,
    *,
    seconds: float = 20.0,
    seed: int = 1,
    replicas: int = 3,
    faults: tuple[str, ...] = FAULTS,
    clients_per_node: int = 3,
    profile: str = "paper3",
    progress: bool = True,
) -> JepsenResult:
    """Run the test (see the module docstring) in ``directory``; return what it found."""
    rng = random.Random(seed)
    directory = Path(directory)
    path = make_kv_cluster(directory, replicas, profile=profile, protocol=DEMO_PROTOCOL)
    cluster = ProcessCluster(path, bootstrap=True)
    workload = Workload(keys=5)
    recorder = Recorder()
    connect = redis_connect()
    acked: list[str] = []
    with cluster:
        cluster.start_all()
        cluster.wait_ready()
        addresses = [cfg.redis_address for cfg in cluster.configs]
        regions = [cfg.node.me.region for cfg in cluster.configs]
        nemesis = _Nemesis(cluster, faults, rng)

        def tick(elapsed: float, done: int) -> None:
            nemesis.tick(elapsed)
            if progress:
                note = nemesis.log[-1][1] if nemesis.log else "-"
                sys.stderr.write(f"\r{elapsed:5.0f}/{seconds:.0f} s {done:7d} ops  {note:<28}")
                sys.stderr.flush()

        async def main() -> tuple[Any, list[str]]:
            stop = asyncio.Event()
            writer = asyncio.ensure_future(
                ack_writer(addresses, stop, acked, random.Random(seed + 1), connect)
            )
            try:
                result = await run_clients(
                    addresses,
                    regions,
                    clients_per_node=clients_per_node,
                    seconds=seconds,
                    workload=workload,
                    seed=seed,
                    connect=connect,
                    on_tick=tick,
                    recorder=recorder,
                )
            finally:
                stop.set()
                await writer
            nemesis.heal(result.seconds)
            cluster.wait_ready()
            lost = await final_reads(addresses, recorder, workload.keys, acked, connect)
            return result, lost

        result, lost = asyncio.run(main())
        if progress:
            sys.stderr.write("\n")
    history = recorder.history()
    write_jsonl(history, directory / "history.jsonl")
    verdict = check(history, KeyValue(), timeout_s=120.0)
    errors = sum(s.errors for s in result.samples.values())
    return JepsenResult(
        operations=len(history),
        verdict=verdict.verdict.value,
        acknowledged=len(acked),
        lost=lost,
        faults=nemesis.log,
        errors=errors,
        seconds=result.seconds,
        extra={"describe": verdict.describe()},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvstore.jepsen", description=__doc__)
    p.add_argument("--seconds", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--faults", default=",".join(FAULTS), help="kill,partition,pause")
    p.add_argument("--dir", default=None, help="keep the cluster and history here")
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)
    faults = tuple(f for f in args.faults.split(",") if f)
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        print(f"error: unknown fault {unknown[0] if unknown else '(none)'}", file=sys.stderr)
        return 2
    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="kvstore-jepsen-"))
    res = run_jepsen(
        directory, seconds=args.seconds, seed=args.seed, replicas=args.replicas, faults=faults
    )
    print(f"{res.operations} operations in {res.seconds:.0f} s, {res.errors} client errors")
    for t, what in res.faults:
        print(f"  {t:6.1f} s  {what}")
    print(f"history: {res.verdict}; acknowledged writes: {res.acknowledged}, lost: {len(res.lost)}")
    print(f"history file: {directory / 'history.jsonl'}")
    if args.json:
        Path(args.json).write_text(json.dumps(res.__dict__, indent=2, default=str) + "\n")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
