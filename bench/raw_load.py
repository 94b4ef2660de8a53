"""The benchmarks' one raw loader: a connection speaking the runtime's client frames itself.

:class:`Load` is one connection to one node (TLS, like any client) carrying
many clients' operations, with no task or future per operation: the submits
that one socket read (or one timer) unblocks go out in one write, as
``SUBMIT_MANY`` frames or one ``SUBMIT`` frame each. So the load generator is
cheap next to the nodes it loads. It keeps what the ``--engine runtime``
experiments need of each operation (its record, its session, its read path,
its retries) and the nodes' status samples. The process around it, and the
words it exchanges with the benchmark, are :mod:`bench.runtime_loader`'s.
Light to import (no simulator, no wire package): a loader process starts
faster.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import random
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import msgpack

from bench.runtime_app import HOT_MARK
from bench.workloads import HOT_KEY, OpStream, Workload
from sdpaxos.runtime import frames as rf

#: Operation kinds and paths in the records file (read back by :mod:`bench.runtime_runner`).
KIND_WRITE, KIND_READ = 0, 1
PATH_COMMIT, PATH_LOCAL, PATH_LOG = 0, 1, 2
#: A command the node refused for now (queue full) is sent again after this long.
RETRY_AFTER_S = 0.01
#: Client ids this loader chooses have this bit set: never a registered id (those
#: count up from 1) and never 0.
_CHOSEN_ID_BIT = 1 << 62
#: Bytes of payloads and keys per SUBMIT_MANY frame, and what an item adds
#: beyond them (as :class:`sdpaxos.runtime.client.Client` splits its frames).
_MANY_BYTES_MAX = rf.COMMAND_BYTES_MAX // 2
_ITEM_OVERHEAD = 48

_SUBMIT, _READ, _STATUS, _SUBMIT_MANY, _REPLY_MANY = 10, 11, 12, 14, 21
_READY, _EXECUTED, _READ_OK, _RETRY = (
    int(rf.Code.READY),
    int(rf.Code.EXECUTED),
    int(rf.Code.READ_OK),
    int(rf.Code.RETRY),
)
#: The answers that complete an operation.
_DONE = frozenset({_READY, _EXECUTED, _READ_OK})


class _Session:
    __slots__ = ("client_id", "seq", "uid")

    def __init__(self, client_id: int, uid: int) -> None:
        self.client_id = client_id
        self.seq = 0
        self.uid = uid


#: An operation as the loader issues it: (kind, key, payload).
OpTuple = tuple[str, bytes, bytes]


def op_source(workload: Workload, stream: int) -> Callable[[], OpTuple]:
    """Client ``stream``'s operations: :class:`bench.workloads.OpStream`'s, as tuples.

    A workload of writes only, each on a key of its own (no reads, no
    conflicts: the throughput benchmark's), draws nothing at random that
    changes an operation: its keys and payloads are spelled here without
    OpStream's two draws and its ``Op`` per operation, the same ones (a test
    compares them). Why: at 10^5 commands a second on a shared 2-core machine
    the load generator's CPU is taken from the nodes it measures, and
    ``OpStream.next`` was a third of it.
    """
    w = workload
    if w.read_pct == 0 and w.conflict_pct == 0 and w.keys == "conflict":
        count = itertools.count(1)
        size = w.payload_bytes
        key_head, payload_head = b"u%d-" % stream, b"s%dn" % stream

        def plain() -> OpTuple:
            n = b"%d" % next(count)
            return "write", key_head + n, (payload_head + n).ljust(size, b".")

        return plain
    ops = OpStream(workload, stream)

    def drawn() -> OpTuple:
        op = ops.next()
        return op.kind, op.key, op.payload

    return drawn


class LoadClient:
    __slots__ = ("free", "index", "next_op")

    def __init__(self, index: int, next_op: Callable[[], OpTuple]) -> None:
        self.index = index
        self.next_op = next_op
        self.free: list[_Session] = []


class Load(asyncio.Protocol):
    """The connection (kept from run to run), and one run's clients and records."""

    def __init__(self, rng: random.Random, batch: bool = True) -> None:
        self.rng = rng
        #: The submits one flush sends go as ``SUBMIT_MANY`` frames; else one
        #: ``SUBMIT`` frame each (``python -m bench.runtime_throughput --load raw``).
        self.batch = batch
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.lost = False
        #: Request ids count on across runs: a late answer to an earlier run's
        #: request names no request of this one.
        self._rid = 0
        self._sessions = 0
        self._items: list[list[Any]] = []
        self._frames: list[bytes] = []
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._prefix = struct.Struct(">I").pack
        self.begin(None)

    def begin(self, spec: dict[str, Any] | None) -> None:
        """Forget the last run; set up the clients of ``spec`` (None: none)."""
        self.spec = spec or {}
        self.clients: list[LoadClient] = []
        if spec is not None:
            workload = Workload(**spec["workload"])
            self.clients = [LoadClient(i, op_source(workload, i)) for i in spec["clients"]]
        self.closed = self.spec.get("mode") == "closed"
        self.read_local = self.spec.get("read_path") == "local"
        end_us = self.spec.get("end_us", 0)
        #: The window's end (µs from the origin); a run without one lasts until ``end``.
        self.end_us: float = math.inf if end_us is None else end_us
        self.region_index: int = self.spec.get("region_index", 0)
        self.t0 = 0.0
        self.running = False
        #: [client uid, kind, path, key, invoke_us, complete_us (-1: open)],
        #: kept when the run writes them (``out``).
        self.records: list[list[Any]] = []
        self.keep_records = self.spec.get("out") is not None
        #: Writes name their key (the protocols that order by conflicts need it);
        #: ``keys: false`` sends none, as a client of SDPaxos alone may.
        self.send_keys: bool = self.spec.get("keys", True)
        #: request id -> (record, session, client, submit item or None)
        self.pending: dict[int, tuple[list[Any], _Session, LoadClient, list[Any] | None]] = {}
        self.samples: list[list[Any]] = []
        #: Core trace events the node kept (``--trace-events``): (µs from t0, name).
        self.events: set[tuple[int, str]] = set()
        self._status_rids: set[int] = set()
        #: Registrations sent and not answered yet: request id -> session.
        self._registering: dict[int, _Session] = {}
        self.registered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.completed = 0
        self.sent = 0
        self.retries = 0
        self.fallbacks = 0
        self.failures: list[str] = []
        self.drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.lost:
            self.drained.set_result(None)
            self.registered.set_result(None)

    # ---------------------------------------------------------------- frames

    def _frame(self, body: list[Any]) -> bytes:
        packed: bytes = b"\xc1" + self._pack(body)
        return self._prefix(len(packed)) + packed

    def _flush(self) -> None:
        items, frames = self._items, self._frames
        if not items and not frames:
            return
        if not items:
            pass  # reads and status requests only
        elif len(items) == 1 or not self.batch:
            pack, prefix = self._pack, self._prefix
            for item in items:
                packed = b"\xc1" + pack([_SUBMIT, *item])
                frames.append(prefix(len(packed)) + packed)
        elif (
            len(items) <= rf.MANY_ITEMS_MAX
            and sum(len(item[3]) + len(item[4] or b"") + _ITEM_OVERHEAD for item in items)
            <= _MANY_BYTES_MAX
        ):
            frames.append(self._frame([_SUBMIT_MANY, items]))
        else:
            # At most MANY_ITEMS_MAX items and _MANY_BYTES_MAX bytes of payload per
            # frame: a node closes a connection that sends a frame over its limit.
            chunk: list[list[Any]] = []
            size = 0
            for item in items:
                grow = len(item[3]) + len(item[4] or b"") + _ITEM_OVERHEAD
                if chunk and (len(chunk) == rf.MANY_ITEMS_MAX or size + grow > _MANY_BYTES_MAX):
                    frames.append(self._frame([_SUBMIT_MANY, chunk]))
                    chunk, size = [], 0
                chunk.append(item)
                size += grow
            frames.append(self._frame([_SUBMIT_MANY, chunk]))
        self._items, self._frames = [], []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(frames))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport
        hello = rf.encode_runtime(rf.Hello(rf.Kind.CLIENT, 0))
        self.transport.write(struct.pack(">I", len(hello)) + hello)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.running = False
        self.failures.append(f"connection lost: {exc}")
        if not self.drained.done():
            self.drained.set_result(None)
        if not self.registered.done():
            self.registered.set_result(None)

    # ---------------------------------------------------------------- operations

    def now_us(self) -> int:
        return int((time.monotonic() - self.t0) * 1e6)

    def _session(self, client: LoadClient) -> _Session:
        if client.free:
            return client.free.pop()
        self._sessions += 1
        cid = _CHOSEN_ID_BIT | self.rng.getrandbits(61)
        uid = self.region_index * 10_000_000 + self._sessions
        return _Session(cid, client.index + 1 if self.closed else uid)

    def issue(self, client: LoadClient, now_us: int) -> None:
        kind, key, payload = client.next_op()
        session = client.free.pop() if client.free else self._session(client)
        self._rid += 1
        rid = self._rid
        if kind == "write":
            rec = [session.uid, KIND_WRITE, PATH_COMMIT, key, now_us, -1]
            if key == HOT_KEY:
                payload = HOT_MARK + payload[1:]
            seq = session.seq = session.seq + 1
            item = [rid, session.client_id, seq, payload, key if self.send_keys else None, 0]
            self._items.append(item)
            self.pending[rid] = (rec, session, client, item)
        elif self.read_local:
            rec = [session.uid, KIND_READ, PATH_LOCAL, key, now_us, -1]
            self._frames.append(self._frame([_READ, rid, key, None, False]))
            self.pending[rid] = (rec, session, client, None)
        else:
            rec = [session.uid, KIND_READ, PATH_LOG, key, now_us, -1]
            self._through_log(rid, rec, session, client)
        if self.keep_records:
            self.records.append(rec)
        self.sent += 1

    def _through_log(self, rid: int, rec: list[Any], session: _Session, client: LoadClient) -> None:
        rec[2] = PATH_LOG
        session.seq += 1
        item = [rid, session.client_id, session.seq, b"r" + rec[3], rec[3], 1]
        self._items.append(item)
        self.pending[rid] = (rec, session, client, item)

    def _incoming(self, data: bytes) -> list[bytes]:
        """The complete frames in what arrived (length-prefixed, as
        :mod:`sdpaxos.wire.framing`; not imported: a loader starts faster without
        the wire package)."""
        buf = self.buffer
        buf += data
        out = []
        at = 0
        while len(buf) - at >= 4:
            size = int.from_bytes(buf[at : at + 4], "big")
            if size > rf.RUNTIME_FRAME_BYTES_MAX:
                raise ValueError(f"a {size}-byte frame from the node")
            if len(buf) - at - 4 < size:
                break
            out.append(bytes(buf[at + 4 : at + 4 + size]))
            at += 4 + size
        del buf[:at]
        return out

    def data_received(self, data: bytes) -> None:
        unpack = msgpack.unpackb
        reply = self._reply
        now_us = self.now_us()
        for payload in self._incoming(data):
            body = unpack(payload[1:], use_list=False)
            if body[0] == _REPLY_MANY:
                for rid, code, value in body[1]:
                    reply(rid, code, value, now_us)
            else:
                reply(body[1], body[2], body[3], now_us)
        self._flush()
        if not self.running and not self.pending and not self.drained.done():
            self.drained.set_result(None)

    def register(self) -> asyncio.Future[None]:
        """Register one session per client through the log (seq 0, as the
        runtime's :class:`~sdpaxos.runtime.client.Client` does) instead of
        choosing its id; done when every one is. Why: an id the node assigned
        counts up from 1, and a small id costs the nodes less in every message
        than a chosen 63-bit one (``python -m bench.runtime_throughput``: about
        8 % of their CPU per command)."""
        for client in self.clients:
            self._rid += 1
            self._sessions += 1
            session = _Session(0, client.index + 1)
            self._registering[self._rid] = session
            client.free.append(session)
            # Distinct and odd (never 0): two registrations with one nonce share a reply.
            nonce = (os.getpid() << 24 | self._sessions) << 1 | 1
            self._items.append([self._rid, nonce, 0, b"", None, 1])
        if not self._registering and not self.registered.done():
            self.registered.set_result(None)
        self._flush()
        return self.registered

    def _registration(self, rid: int, code: int, value: Any) -> None:
        session = self._registering.pop(rid)
        if code in _DONE and isinstance(value, bytes):
            session.client_id = int.from_bytes(value, "big")
        else:
            self.failures.append(f"registration refused: code {code}, {value!r:.200}")
        if not self._registering and not self.registered.done():
            self.registered.set_result(None)

    def _reply(self, rid: int, code: int, value: Any, now_us: int) -> None:
        entry = self.pending.pop(rid, None)
        if entry is None:
            if rid in self._status_rids:
                self._status_rids.discard(rid)
                self._sample(value, now_us)
            elif rid in self._registering:
                self._registration(rid, code, value)
            return
        rec, session, client, item = entry
        if code in _DONE:
            rec[5] = now_us
            self.completed += 1
            client.free.append(session)
            if self.closed and self.running and now_us < self.end_us:
                self.issue(client, now_us)
        elif code == _RETRY:
            self.retries += 1
            if item is None:  # the read path refused: through the log, as the simulator does
                self.fallbacks += 1
                self._through_log(rid, rec, session, client)
            else:
                self.pending[rid] = entry
                asyncio.get_running_loop().call_later(RETRY_AFTER_S, self._resend, item)
        else:
            self.failures.append(f"reply code {code} to request {rid}: {value!r:.200}")
            client.free.append(session)  # never answered: the record stays open

    def _resend(self, item: list[Any]) -> None:
        if item[0] in self.pending:
            self._items.append(item)
            self._flush()

    # ---------------------------------------------------------------- status samples

    def ask_status(self) -> None:
        self._rid += 1
        self._status_rids.add(self._rid)
        self._frames.append(self._frame([_STATUS, self._rid]))
        self._flush()

    def _sample(self, value: Any, now_us: int) -> None:
        if not isinstance(value, dict):
            return
        stats = value.get("stats") or {}
        self.samples.append(
            [
                now_us,
                value.get("sequencer"),
                value.get("view"),
                value.get("is_sequencer"),
                value.get("has_lease"),
                stats.get("view_changes_started", stats.get("elections_started")),
            ]
        )
        for at_ms, name in value.get("events") or ():
            self.events.add((int((at_ms / 1000 - self.t0) * 1e6), str(name)))


def ssl_context(conn: dict[str, Any]) -> Any:
    if conn.get("tls") is None:  # (ca, cert, key) of a client certificate
        return None
    from sdpaxos.runtime.config import TlsFiles
    from sdpaxos.runtime.tls import client_context

    return client_context(TlsFiles(*(Path(f) for f in conn["tls"])))


async def connect(conn: dict[str, Any]) -> list[Load]:
    """One :class:`Load` per node of ``conn``."""
    loop = asyncio.get_running_loop()
    ssl_ctx = ssl_context(conn)
    rng = random.Random(os.urandom(16))
    batch = conn.get("load", "batch") != "raw"
    loads = []
    for host, port in conn["nodes"]:
        _, proto = await loop.create_connection(
            lambda: Load(rng, batch),
            host,
            port,
            ssl=ssl_ctx,
            server_hostname=host if ssl_ctx is not None else None,
        )
        assert isinstance(proto, Load)
        loads.append(proto)
    return loads
