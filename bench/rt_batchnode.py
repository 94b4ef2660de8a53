"""A *prototype*, for measurement only: a node that takes many client commands in
one frame and answers them in one frame per flush. Not the runtime: it subclasses
:class:`sdpaxos.runtime.node.Node` to estimate what batched client frames would
gain (``python -m bench.runtime_throughput --load batch``), before anyone changes
the runtime's frame set.

Frames (client connections only; first byte :data:`BATCH_PREFIX`, which neither
the codec nor the runtime frames use), msgpack after it::

    client -> node   [[request_id, client_id, seq, payload], ...]   wait READY, no key
    node -> client   [[request_id, code], ...]                       READY replies

Anything else (registrations, status, reads) goes through the runtime's frames.
There are no strict checks beyond msgpack's types: a laboratory tool.

Run as ``python -m bench.rt_batchnode --config F --id N [--no-fsync]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import zlib
from functools import partial
from typing import Any

import msgpack

from sdpaxos.core.ready import Reply, ReplyKind
from sdpaxos.core.types import Command, Wait
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.apps import load_app
from sdpaxos.runtime.config import load_config
from sdpaxos.runtime.node import Node
from sdpaxos.runtime.transport import Connection

BATCH_PREFIX = 0xC2
_COUNT_BYTES = 8


class CrcLog:
    """A cheaper stand-in for the ``digest`` app, to see what the app costs: the
    count and a CRC-32 chained over the payloads in execution order (weaker than
    BLAKE2b, enough to see replicas diverge in a benchmark). ``query`` answers
    like :class:`~sdpaxos.runtime.apps.DigestLog`: count (8 bytes) + 32 bytes.

    ``python -m sdpaxos node --app bench.rt_batchnode:CrcLog``."""

    def __init__(self) -> None:
        self.count = 0
        self.crc = 0

    def apply(self, payload: bytes) -> bytes:
        self.crc = zlib.crc32(payload, self.crc)
        self.count += 1
        return b""

    def snapshot(self) -> bytes:
        return self.count.to_bytes(_COUNT_BYTES, "big") + self.crc.to_bytes(4, "big") + bytes(28)

    def restore(self, data: bytes) -> None:
        self.count = int.from_bytes(data[:_COUNT_BYTES], "big")
        self.crc = int.from_bytes(data[_COUNT_BYTES : _COUNT_BYTES + 4], "big")

    def query(self, request: bytes) -> bytes:
        return self.snapshot()


_PREFIX = bytes([BATCH_PREFIX])


class BatchNode(Node):
    """:class:`Node` plus the batch frames of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._batched: dict[Connection, list[tuple[int, int]]] = {}
        self._pack = msgpack.Packer(use_bin_type=True).pack

    def frame(self, conn: Connection, payload: bytes) -> None:
        if payload[0] != BATCH_PREFIX or conn.kind != rf.Kind.CLIENT:
            super().frame(conn, payload)
            return
        if self.replica is None or not self._running:
            return
        items = msgpack.unpackb(payload[1:], use_list=False)
        enqueue, answer = self._enqueue, self._batch_answer
        for rid, cid, seq, data in items:
            if not enqueue(Command(cid, seq, data, None), Wait.READY, partial(answer, conn, rid)):
                self._batched.setdefault(conn, []).append((rid, int(rf.Code.RETRY)))
                self._kick()

    def _batch_answer(self, conn: Connection, rid: int, reply: Reply | None) -> None:
        if reply is None or not conn.open:
            return
        code = rf.Code.READY if reply.kind == ReplyKind.READY else rf.Code.SESSION_EXPIRED
        batch = self._batched.get(conn)
        if batch is None:
            self._batched[conn] = [(rid, int(code))]
        else:
            batch.append((rid, int(code)))

    def _send_out(self) -> None:
        batched = self._batched
        if batched:
            self._batched = {}
            pack = self._pack
            for conn, items in batched.items():
                if conn.open:
                    conn.send(_PREFIX + pack(items))
                    self._dirty_conns.add(conn)
        super()._send_out()


async def _run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.id)
    node = BatchNode(config, load_app(args.app), fsync=not args.no_fsync)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with node:
        await stop.wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.rt_batchnode")
    p.add_argument("--config", required=True)
    p.add_argument("--id", type=int, required=True)
    p.add_argument("--no-fsync", action="store_true")
    p.add_argument("--app", default="digest")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    result: int = asyncio.run(_run(args))
    return result


if __name__ == "__main__":
    sys.exit(main())
