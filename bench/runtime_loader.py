"""One region's load generator for ``--engine runtime`` (a process of its own).

``python -m bench.runtime_loader CONN.json`` is started by
:mod:`bench.runtime_engine`, one per region with clients. It opens one
connection (TLS, like any client) to its region's node and speaks the runtime's
client frames itself (:mod:`sdpaxos.runtime.frames`), as
:mod:`bench.runtime_throughput`'s raw loader does: no task or future per
operation, and the submits one socket read (or one timer) unblocks go out as
one ``SUBMIT_MANY`` frame in one write. So the load generator is cheap next to
the node it loads, and its CPU is measured too.

Its clients draw their operations from :class:`bench.workloads.OpStream` with the
same stream numbers and seeds as the simulator engine's, and issue them

* **closed loop**: one operation outstanding per client, the next sent as soon as
  the answer arrives (the client's real round trip, loopback and TLS, stands in
  for the simulator's client hop);
* **open loop**: at the arrival times of :func:`bench.workloads.arrivals_us`
  (Poisson or fixed interval), whatever the answers.

Each client holds sessions of its own choosing (random 63-bit ids: the
protocols' sessions never expire here, so a client may pick its id, see
:mod:`sdpaxos.core.sessions`), one operation outstanding per session; an
open-loop client opens another session when all of its sessions are busy.
Writes wait for READY; reads go through the node's read path (``READ``
frames) where the engine says the protocol has one at this node, and through
the log otherwise (a command waiting for EXECUTED), also after the read path
refused. Every operation is recorded, with its invoke and complete times in
microseconds of ``time.monotonic()`` from the origin the parent gives (the
same clock in every process of this machine).

Protocol with the parent, one line each. The loader is started once per
cluster and region (``python -m bench.runtime_loader CONN.json``: the node's
address and a client certificate), connects, and says ``connected``. For each
run the parent says ``run RUN.json`` (the clients, workload, window and where
to write the records); the loader says ``ready``; the parent says ``go T0``
(the origin, a ``time.monotonic()`` value); the loader says ``count N``
(operations completed) every half second and ``done {...}`` at the end, after
writing its records (msgpack) to the run's ``out`` file. ``stop`` ends a run
early; ``quit`` (or the end of input, or a lost connection) ends the loader.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import os
import random
import struct
import sys
import time
from pathlib import Path
from typing import Any, cast

import msgpack

from bench.runtime_app import HOT_MARK
from bench.runtime_procs import StdinWords, run_loop, say
from bench.workloads import HOT_KEY, OpStream, Workload, arrivals_us
from sdpaxos.runtime import frames as rf

#: Operation kinds and paths in the records file (see :func:`bench.runtime_engine`).
KIND_WRITE, KIND_READ = 0, 1
PATH_COMMIT, PATH_LOCAL, PATH_LOG = 0, 1, 2
#: A command the node refused for now (queue full) is sent again after this long.
RETRY_AFTER_S = 0.01
#: How often the loader tells the parent its count.
REPORT_INTERVAL_S = 0.5
#: Client ids this loader chooses have this bit set: never a registered id (those
#: count up from 1) and never 0.
_CHOSEN_ID_BIT = 1 << 62
#: Bytes of payloads and keys per SUBMIT_MANY frame, and what an item adds
#: beyond them (as :class:`sdpaxos.runtime.client.Client` splits its frames).
_MANY_BYTES_MAX = rf.COMMAND_BYTES_MAX // 2
_ITEM_OVERHEAD = 48
#: Arrivals due within this much of a timer firing go out with it.
_EARLY_US = 500

_SUBMIT, _READ, _STATUS, _SUBMIT_MANY, _REPLY_MANY = 10, 11, 12, 14, 21
_READY, _EXECUTED, _READ_OK, _RETRY = (
    int(rf.Code.READY),
    int(rf.Code.EXECUTED),
    int(rf.Code.READ_OK),
    int(rf.Code.RETRY),
)


class _Session:
    __slots__ = ("client_id", "seq", "uid")

    def __init__(self, client_id: int, uid: int) -> None:
        self.client_id = client_id
        self.seq = 0
        self.uid = uid


class _Client:
    __slots__ = ("free", "index", "stream")

    def __init__(self, index: int, stream: OpStream) -> None:
        self.index = index
        self.stream = stream
        self.free: list[_Session] = []


class Load(asyncio.Protocol):
    """The connection (kept from run to run), and one run's clients and records."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
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
        self.clients: list[_Client] = []
        if spec is not None:
            workload = Workload(**spec["workload"])
            self.clients = [_Client(i, OpStream(workload, i)) for i in spec["clients"]]
        self.closed = self.spec.get("mode") == "closed"
        self.read_local = self.spec.get("read_path") == "local"
        self.end_us: int = self.spec.get("end_us", 0)
        self.region_index: int = self.spec.get("region_index", 0)
        self.t0 = 0.0
        self.running = False
        #: [client uid, kind, path, key, invoke_us, complete_us (-1: open)]
        self.records: list[list[Any]] = []
        #: request id -> (record, session, client, submit item or None)
        self.pending: dict[int, tuple[list[Any], _Session, _Client, list[Any] | None]] = {}
        self.samples: list[list[Any]] = []
        #: Core trace events the node kept (``--trace-events``): (µs from t0, name).
        self.events: set[tuple[int, str]] = set()
        self._status_rids: set[int] = set()
        self.completed = 0
        self.sent = 0
        self.retries = 0
        self.fallbacks = 0
        self.failures: list[str] = []
        self.drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.lost:
            self.drained.set_result(None)

    # ---------------------------------------------------------------- frames

    def _frame(self, body: list[Any]) -> bytes:
        packed: bytes = b"\xc1" + self._pack(body)
        return self._prefix(len(packed)) + packed

    def _flush(self) -> None:
        items, frames = self._items, self._frames
        if not items and not frames:
            return
        if len(items) == 1:
            frames.append(self._frame([_SUBMIT, *items[0]]))
        elif items:
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

    # ---------------------------------------------------------------- operations

    def now_us(self) -> int:
        return int((time.monotonic() - self.t0) * 1e6)

    def _session(self, client: _Client) -> _Session:
        if client.free:
            return client.free.pop()
        self._sessions += 1
        cid = _CHOSEN_ID_BIT | self.rng.getrandbits(61)
        uid = self.region_index * 10_000_000 + self._sessions
        return _Session(cid, client.index + 1 if self.closed else uid)

    def issue(self, client: _Client, now_us: int) -> None:
        op = client.stream.next()
        session = self._session(client)
        self._rid += 1
        rid = self._rid
        if op.kind == "write":
            rec = [session.uid, KIND_WRITE, PATH_COMMIT, op.key, now_us, -1]
            payload = op.payload
            if op.key == HOT_KEY:
                payload = HOT_MARK + payload[1:]
            session.seq += 1
            item = [rid, session.client_id, session.seq, payload, op.key, 0]
            self._items.append(item)
            self.pending[rid] = (rec, session, client, item)
        elif self.read_local:
            rec = [session.uid, KIND_READ, PATH_LOCAL, op.key, now_us, -1]
            self._frames.append(self._frame([_READ, rid, op.key, None, False]))
            self.pending[rid] = (rec, session, client, None)
        else:
            rec = [session.uid, KIND_READ, PATH_LOG, op.key, now_us, -1]
            self._through_log(rid, rec, session, client)
        self.records.append(rec)
        self.sent += 1

    def _through_log(self, rid: int, rec: list[Any], session: _Session, client: _Client) -> None:
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
        now_us = self.now_us()
        for payload in self._incoming(data):
            body = unpack(payload[1:], use_list=False)
            if body[0] == _REPLY_MANY:
                for rid, code, value in body[1]:
                    self._reply(rid, code, value, now_us)
            else:
                self._reply(body[1], body[2], body[3], now_us)
        self._flush()
        if not self.running and not self.pending and not self.drained.done():
            self.drained.set_result(None)

    def _reply(self, rid: int, code: int, value: Any, now_us: int) -> None:
        entry = self.pending.pop(rid, None)
        if entry is None:
            if rid in self._status_rids:
                self._status_rids.discard(rid)
                self._sample(value, now_us)
            return
        rec, session, client, item = entry
        if code in (_READY, _EXECUTED, _READ_OK):
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


async def _connect(spec: dict[str, Any]) -> Load:
    loop = asyncio.get_running_loop()
    host, port = spec["host"], spec["port"]
    ssl_ctx = None
    if spec.get("tls") is not None:  # (ca, cert, key) of a client certificate
        from sdpaxos.runtime.config import TlsFiles
        from sdpaxos.runtime.tls import client_context

        ssl_ctx = client_context(TlsFiles(*(Path(f) for f in spec["tls"])))
    rng = random.Random(os.urandom(16))
    _, proto = await loop.create_connection(
        lambda: Load(rng),
        host,
        port,
        ssl=ssl_ctx,
        server_hostname=host if ssl_ctx is not None else None,
    )
    assert isinstance(proto, Load)
    return proto


async def _serve(spec: dict[str, Any]) -> None:
    """Connect once; then run what the parent asks (``run FILE``), one run after another,
    until ``quit`` (or the end of input, or a lost connection)."""
    load = await _connect(spec)
    stdin = StdinWords()
    say("connected")
    while True:
        line = await stdin.queue.get()
        word, _, rest = line.partition(" ")
        if word != "run":
            if word in ("quit", "stop"):
                break
            continue
        run_spec = json.loads(Path(rest).read_text())
        load.begin(run_spec)
        say("ready")
        t0 = float(await stdin.expect("go"))
        result = await _run(load, run_spec, t0, stdin)
        say("done " + json.dumps(result))
        if load.lost:
            break
    if load.transport is not None:
        load.transport.close()


async def _run(load: Load, spec: dict[str, Any], t0: float, stdin: StdinWords) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    load.t0 = t0
    offset = loop.time() - time.monotonic()  # loop clock = monotonic + offset
    await asyncio.sleep(max(0.0, t0 - time.monotonic()))
    while time.monotonic() < t0:  # uvloop's timers may fire up to a millisecond early
        await asyncio.sleep(0)
    load.running = not load.lost
    timers: list[asyncio.TimerHandle] = []
    end_us = load.end_us

    if load.closed:
        now = load.now_us()
        for c in load.clients:
            load.issue(c, now)
        load._flush()
    else:
        arrivals: list[tuple[int, int, Any]] = []
        for k, c in enumerate(load.clients):
            rng_c = random.Random(f"{spec['workload']['seed']}:arrivals:{c.index}")
            times = arrivals_us(spec["rate_per_s"], 0, end_us, poisson=spec["poisson"], rng=rng_c)
            first = next(times, None)
            if first is not None:
                heapq.heappush(arrivals, (first, k, times))

        def fire() -> None:
            if not load.running:
                return
            now = load.now_us()
            while arrivals and arrivals[0][0] <= now + _EARLY_US:
                _, k, times = heapq.heappop(arrivals)
                load.issue(load.clients[k], now)
                nxt = next(times, None)
                if nxt is not None:
                    heapq.heappush(arrivals, (nxt, k, times))
            load._flush()
            if arrivals:
                timers.append(loop.call_at(t0 + arrivals[0][0] / 1e6 + offset, fire))

        if arrivals:
            timers.append(loop.call_at(t0 + arrivals[0][0] / 1e6 + offset, fire))

    sample_ms = spec.get("sample_ms")
    if sample_ms:

        def sample() -> None:
            if load.now_us() < end_us and not load.lost:
                load.ask_status()
                timers.append(loop.call_later(sample_ms / 1000, sample))

        sample()

    stopped = loop.create_task(stdin.expect("stop"))

    async def report_until(deadline_s: float, done: asyncio.Future[Any]) -> None:
        while not done.done() and not stopped.done() and time.monotonic() < deadline_s:
            say(f"count {load.completed}")
            await asyncio.wait(
                [done, stopped],
                timeout=min(REPORT_INTERVAL_S, max(0.0, deadline_s - time.monotonic())),
            )

    ended: asyncio.Future[None] = loop.create_future()

    def end() -> None:
        if not ended.done():
            ended.set_result(None)

    timers.append(loop.call_at(t0 + end_us / 1e6 + offset, end))
    await report_until(t0 + end_us / 1e6 + 1.0, ended)
    load.running = False
    for t in timers:
        t.cancel()
    if not load.pending and not load.drained.done():
        load.drained.set_result(None)
    await report_until(time.monotonic() + spec["drain_s"], load.drained)
    say(f"count {load.completed}")
    open_ops = len(load.pending)
    stopped.cancel()
    with open(spec["out"], "wb") as f:
        f.write(
            msgpack.packb(
                {
                    "records": load.records,
                    "samples": load.samples,
                    "events": sorted(load.events),
                },
                use_bin_type=True,
            )
        )
    return {
        "sent": load.sent,
        "completed": load.completed,
        "open": open_ops,
        "retries": load.retries,
        "fallbacks": load.fallbacks,
        "failures": load.failures[:20],
        "lost": load.lost,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.runtime_loader CONN.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    run_loop(_serve(spec), fast=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
