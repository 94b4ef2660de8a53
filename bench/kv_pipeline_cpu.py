"""The kv-store's own per-command work, in one process, without the network.

    python -m bench.kv_pipeline_cpu                       # -P 16 over 104 connections
    python -m bench.kv_pipeline_cpu --pipeline 1 --connections 1000
    python -m bench.kv_pipeline_cpu --instructions        # under valgrind: instructions/command

Why: on a machine shared with other work, wall-clock rates (and even CPU
seconds, through the caches) move with everybody else's load. This harness
runs what a kv-store node does per Redis command, in process: the RESP front
end (:class:`kvstore.resp.RespConnection` over a transport that only counts
bytes), the node's backend (:class:`kvstore.server.KVBackend`: batching,
answers) and the state machine, applied at **three** stores as every replica
applies every command. The replication itself (core, transport, TLS, log) is
not in it: a stand-in node applies each batch at once. Each round feeds every
connection one read of ``--pipeline`` commands (``SET key:<12 digits> <16
bytes>``, or GET with ``--get``, over 100,000 random keys as ``redis-benchmark
-r 100000 -d 16`` sends them), then lets the loop answer them.

It prints the thread's CPU microseconds per command. With ``--instructions`` it
runs itself twice under ``valgrind --tool=callgrind`` (rounds R and 4R, the
same requests generated both times) and prints the difference per command: a
count that other processes do not change, for comparing versions of the code.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import subprocess
import sys
import time
from typing import Any

from kvstore.codec import encode_command
from kvstore.machine import KVStore
from kvstore.resp import RespConnection, RespServer
from kvstore.server import KVBackend

#: redis-benchmark's key space with ``-r 100000``.
KEYSPACE = 100_000


class _CountingTransport:
    """What a connection writes to, keeping only the byte count."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


class _ApplyEverywhere:
    """A node stand-in: a batch is applied at this node's store and at two
    followers' at once (the leader's answer comes at the next loop turn)."""

    reads_at_every_replica = True

    def __init__(self, store: KVStore) -> None:
        self.store = store
        self.followers = [KVStore(), KVStore()]
        self.batches = 0

    def submit_nowait(
        self, payload: bytes, *, key: bytes | None = None, wait: str = "ready"
    ) -> asyncio.Future[bytes | None]:
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        result = self.store.apply(payload)
        for follower in self.followers:
            follower.apply(payload)
        self.batches += 1
        future.get_loop().call_soon(future.set_result, result)
        return future

    def read_nowait(
        self, key: bytes | None = None, request: bytes | None = None, **kw: Any
    ) -> asyncio.Future[bytes | None]:
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        future.get_loop().call_soon(future.set_result, self.store.query(request or b""))
        return future


def _request(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


async def _run(args: argparse.Namespace) -> tuple[float, int, int]:
    rng = random.Random(args.seed)
    store = KVStore()
    node = _ApplyEverywhere(store)
    # Every key present, as after redis-benchmark's first SETs (the dicts at full size).
    for start in range(0, KEYSPACE, 1000):
        fill = encode_command(
            [
                b"MSET",
                *(x for i in range(start, start + 1000) for x in (b"key:%012d" % i, b"y" * 16)),
            ]
        )
        for replica in (store, *node.followers):
            replica.apply(fill)
    server = RespServer(KVBackend(node, store))  # type: ignore[arg-type]
    connections = []
    for _ in range(args.connections):
        conn = RespConnection(server)
        transport = _CountingTransport()
        conn.connection_made(transport)  # type: ignore[arg-type]
        connections.append((conn, transport))

    def read() -> bytes:
        parts = []
        for _ in range(args.pipeline):
            key = b"key:%012d" % rng.randrange(KEYSPACE)
            parts.append(_request([b"GET", key] if args.get else [b"SET", key, b"x" * 16]))
        return b"".join(parts)

    reads = [[read() for _ in connections] for _ in range(args.generate or args.rounds)]
    for conn, _ in connections:  # warm-up: every connection once
        conn.data_received(reads[0][0])
    for _ in range(4):
        await asyncio.sleep(0)
    started = time.thread_time()
    for r in range(args.rounds):
        for (conn, _), data in zip(connections, reads[r], strict=True):
            conn.data_received(data)
        for _ in range(4):  # the batch, its answers, the replies' flush
            await asyncio.sleep(0)
    cpu_s = time.thread_time() - started
    commands = args.rounds * args.connections * args.pipeline
    replied = sum(t.written for _, t in connections)
    return cpu_s, commands, replied


def _instructions(argv: list[str], rounds: int, per_round: int) -> float:
    """Instructions per command: callgrind totals of R and 4R rounds, differenced
    (``per_round`` commands a round)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    totals = []
    for r in (rounds, 4 * rounds):
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                "-m",
                "bench.kv_pipeline_cpu",
                *argv,
                "--rounds",
                str(r),
                "--generate",
                str(4 * rounds),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        found = re.search(r"Collected : (\d+)", out.stderr)
        if found is None:
            raise SystemExit(f"no callgrind total in: {out.stderr[-500:]}")
        totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / (3 * rounds * per_round)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kv_pipeline_cpu", description=__doc__)
    p.add_argument("--pipeline", type=int, default=16, help="commands per read")
    p.add_argument("--connections", type=int, default=104, help="one node's share of 313")
    p.add_argument("--rounds", type=int, default=300, help="reads per connection")
    p.add_argument("--generate", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--get", action="store_true", help="GET instead of SET")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--instructions", action="store_true", help="count under valgrind")
    args = p.parse_args(argv)
    if args.instructions:
        keep = ["--pipeline", str(args.pipeline), "--connections", str(args.connections)]
        keep += ["--seed", str(args.seed)] + (["--get"] if args.get else [])
        rounds = max(1, args.rounds // 30)
        per = _instructions(keep, rounds, args.pipeline * args.connections)
        print(
            f"{'GET' if args.get else 'SET'} -P {args.pipeline}, {args.connections} connections:"
            f" {per:,.0f} instructions per command (front end, backend, 3 applies)"
        )
        return 0
    import uvloop

    cpu_s, commands, replied = uvloop.run(_run(args))
    print(
        f"{'GET' if args.get else 'SET'} -P {args.pipeline}, {args.connections} connections: "
        f"{1e6 * cpu_s / commands:.3f} us CPU per command ({commands:,} commands, "
        f"{replied:,} reply bytes)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
