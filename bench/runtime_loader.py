"""The benchmarks' one load generator (a process of its own): raw frames or the runtime's Client.

``python -m bench.runtime_loader CONN.json`` is started by
:func:`bench.cluster.start_loader`: one per region with clients for
:mod:`bench.runtime_engine` (every ``--engine runtime`` experiment), and
``--loaders`` of them, each connected to every node, for
:mod:`bench.runtime_throughput`. It opens one connection (TLS, like any
client) to each node of ``CONN`` and speaks the runtime's client frames itself
(:mod:`sdpaxos.runtime.frames`): no task or future per operation, and the
submits one socket read (or one timer) unblocks go out in one write, as
``SUBMIT_MANY`` frames (``load: batch``, the default) or one ``SUBMIT`` frame
each (``load: raw``). So the load generator is cheap next to the nodes it
loads, and its CPU is measured too. ``load: client`` runs
:class:`sdpaxos.runtime.client.Client` instead (one per node, a task per
client calling ``submit``): what a program using the runtime's client costs.
``profile: FILE`` runs the loader under cProfile.

Its clients draw their operations from :class:`bench.workloads.OpStream` with the
same stream numbers and seeds as the simulator engine's (a run's clients are
split evenly over the connections, in order), and issue them

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
refused. A run with ``keys: false`` sends its writes without their keys (the
throughput benchmark's: SDPaxos orders every command, and a key costs bytes at
every node). Every operation is recorded when the run names an ``out`` file, with
its invoke and complete times in microseconds of ``time.monotonic()`` from the
origin the parent gives (the same clock in every process of this machine).

Protocol with the parent, one line each. The loader is started once per
cluster (``CONN.json``: the nodes' addresses, a client certificate, the
load), connects, and says ``connected``. For each run the parent says ``run
RUN.json`` (the clients, workload, window and where to write the records);
the loader says ``ready``; the parent says ``go T0`` (the origin, a
``time.monotonic()`` value); the loader says ``count N`` (operations
completed) every ``report_s`` (half a second by default) and ``done {...}``
at the end, after writing its records (msgpack) to the run's ``out`` file.
The window ends at ``end_us``, or when the parent says ``end`` (a run without
``end_us``); then the loader waits up to ``drain_s`` for the answers still
due. ``stop`` ends a run at once; ``quit`` (or the end of input, or a lost
connection) ends the loader.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import math
import os
import random
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import msgpack

from bench.runtime_app import HOT_MARK
from bench.runtime_procs import StdinWords, run_loop, say, split
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

        def plain() -> OpTuple:
            n = next(count)
            return "write", b"u%d-%d" % (stream, n), (b"s%dn%d" % (stream, n)).ljust(size, b".")

        return plain
    ops = OpStream(workload, stream)

    def drawn() -> OpTuple:
        op = ops.next()
        return op.kind, op.key, op.payload

    return drawn


class _Client:
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
        self.clients: list[_Client] = []
        if spec is not None:
            workload = Workload(**spec["workload"])
            self.clients = [_Client(i, op_source(workload, i)) for i in spec["clients"]]
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
        if len(items) == 1 or not self.batch:
            pack, prefix = self._pack, self._prefix
            for item in items:
                packed = b"\xc1" + pack([_SUBMIT, *item])
                frames.append(prefix(len(packed)) + packed)
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
        kind, key, payload = client.next_op()
        session = client.free.pop() if client.free else self._session(client)
        self._rid += 1
        rid = self._rid
        if kind == "write":
            rec = [session.uid, KIND_WRITE, PATH_COMMIT, key, now_us, -1]
            if key == HOT_KEY:
                payload = HOT_MARK + payload[1:]
            session.seq += 1
            item = [
                rid,
                session.client_id,
                session.seq,
                payload,
                key if self.send_keys else None,
                0,
            ]
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


def _ssl_context(conn: dict[str, Any]) -> Any:
    if conn.get("tls") is None:  # (ca, cert, key) of a client certificate
        return None
    from sdpaxos.runtime.config import TlsFiles
    from sdpaxos.runtime.tls import client_context

    return client_context(TlsFiles(*(Path(f) for f in conn["tls"])))


async def _connect(conn: dict[str, Any]) -> list[Load]:
    """One :class:`Load` per node of ``conn``."""
    loop = asyncio.get_running_loop()
    ssl_ctx = _ssl_context(conn)
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


def _parts(spec: dict[str, Any], ways: int) -> list[dict[str, Any]]:
    """The run ``spec`` of each of ``ways`` connections: its clients split
    evenly, in order (the first connections take one more)."""
    clients = spec["clients"]
    out, at = [], 0
    for count in split(len(clients), ways):
        out.append({**spec, "clients": clients[at : at + count]})
        at += count
    return out


async def _serve(conn: dict[str, Any]) -> None:
    """Connect once; then run what the parent asks (``run FILE``), one run after another,
    until ``quit`` (or the end of input, or a lost connection)."""
    loads = await _connect(conn)
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
        for load, part in zip(loads, _parts(run_spec, len(loads)), strict=True):
            load.begin(part)
        say("ready")
        t0 = float(await stdin.expect("go"))
        result = await _run(loads, run_spec, t0, stdin)
        say("done " + json.dumps(result))
        if any(load.lost for load in loads):
            break
    for load in loads:
        if load.transport is not None:
            load.transport.close()


class _Listener:
    """The parent's words during a run: ``end`` ends the window now (the run
    then drains as at its end), ``stop`` ends the run now."""

    def __init__(self, stdin: StdinWords, end: Callable[[], None]) -> None:
        self.stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._listen(stdin, end))

    async def _listen(self, stdin: StdinWords, end: Callable[[], None]) -> None:
        while True:
            head = (await stdin.queue.get()).partition(" ")[0]
            if head == "end":
                end()
            elif head == "stop":
                self.stopped.set_result(None)
                return

    def cancel(self) -> None:
        self._task.cancel()


async def _report_until(
    count: Callable[[], int],
    every_s: float,
    deadline_s: float,
    done: asyncio.Future[Any],
    stopped: asyncio.Future[Any],
) -> None:
    """Say ``count N`` every ``every_s`` until ``done``, ``stopped`` or the deadline."""
    while not done.done() and not stopped.done() and time.monotonic() < deadline_s:
        say(f"count {count()}")
        await asyncio.wait(
            [done, stopped],
            timeout=min(every_s, max(0.0, deadline_s - time.monotonic())),
        )


async def _run(
    loads: list[Load], spec: dict[str, Any], t0: float, stdin: StdinWords
) -> dict[str, Any]:
    """One run on every connection: from ``t0`` until the window's end
    (``end_us``; None: until the parent says ``end``), then a drain of at most
    ``drain_s``; the records to ``out`` (if given) and the totals returned."""
    loop = asyncio.get_running_loop()
    offset = loop.time() - time.monotonic()  # loop clock = monotonic + offset
    for load in loads:
        load.t0 = t0
    await asyncio.sleep(max(0.0, t0 - time.monotonic()))
    while time.monotonic() < t0:  # uvloop's timers may fire up to a millisecond early
        await asyncio.sleep(0)
    for load in loads:
        load.running = not load.lost
    timers: list[asyncio.TimerHandle] = []
    end_us: int | None = spec.get("end_us")

    if spec.get("mode") == "closed":
        now = loads[0].now_us()
        for load in loads:
            for c in load.clients:
                load.issue(c, now)
            load._flush()
    else:
        arrivals: list[tuple[int, int, Load, _Client, Any]] = []
        for load in loads:
            for c in load.clients:
                rng_c = random.Random(f"{spec['workload']['seed']}:arrivals:{c.index}")
                times = arrivals_us(
                    spec["rate_per_s"], 0, end_us or 0, poisson=spec["poisson"], rng=rng_c
                )
                first = next(times, None)
                if first is not None:
                    heapq.heappush(arrivals, (first, c.index, load, c, times))

        def fire() -> None:
            now = loads[0].now_us()
            touched = set()
            while arrivals and arrivals[0][0] <= now + _EARLY_US:
                _, index, load, c, times = heapq.heappop(arrivals)
                if not load.running:
                    continue
                load.issue(c, now)
                touched.add(load)
                nxt = next(times, None)
                if nxt is not None:
                    heapq.heappush(arrivals, (nxt, index, load, c, times))
            for load in touched:
                load._flush()
            if arrivals:
                timers.append(loop.call_at(t0 + arrivals[0][0] / 1e6 + offset, fire))

        if arrivals:
            timers.append(loop.call_at(t0 + arrivals[0][0] / 1e6 + offset, fire))

    sample_ms = spec.get("sample_ms")
    if sample_ms:

        def sample() -> None:
            asked = [
                load
                for load in loads
                if (end_us is None or load.now_us() < end_us) and not load.lost
            ]
            for load in asked:
                load.ask_status()
            if asked:
                timers.append(loop.call_later(sample_ms / 1000, sample))

        sample()

    ended: asyncio.Future[None] = loop.create_future()

    def end() -> None:
        if not ended.done():
            ended.set_result(None)

    listener = _Listener(stdin, end)
    every_s = spec.get("report_s", REPORT_INTERVAL_S)

    def completed() -> int:
        return sum(load.completed for load in loads)

    window_s = math.inf if end_us is None else t0 + end_us / 1e6
    if end_us is not None:
        timers.append(loop.call_at(window_s + offset, end))
    await _report_until(completed, every_s, window_s + 1.0, ended, listener.stopped)
    for load in loads:
        load.running = False
        if not load.pending and not load.drained.done():
            load.drained.set_result(None)
    for t in timers:
        t.cancel()
    drained = asyncio.gather(*(load.drained for load in loads))
    await _report_until(
        completed, every_s, time.monotonic() + spec["drain_s"], drained, listener.stopped
    )
    say(f"count {completed()}")
    listener.cancel()
    if spec.get("out") is not None:
        with open(spec["out"], "wb") as f:
            f.write(
                msgpack.packb(
                    {
                        "records": [r for load in loads for r in load.records],
                        "samples": [s for load in loads for s in load.samples],
                        "events": sorted(e for load in loads for e in load.events),
                    },
                    use_bin_type=True,
                )
            )
    return {
        "sent": sum(load.sent for load in loads),
        "completed": completed(),
        "open": sum(len(load.pending) for load in loads),
        "retries": sum(load.retries for load in loads),
        "fallbacks": sum(load.fallbacks for load in loads),
        "failures": [f for load in loads for f in load.failures][:20],
        "lost": any(load.lost for load in loads),
    }


# ------------------------------------------------------------ the runtime's Client


class _ClientRun:
    """One run of ``load: client``: a task per client, one submit outstanding each."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.completed = 0
        self.running = True
        self.go: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    async def session(
        self, c: Any, next_op: Callable[[], OpTuple], registered: asyncio.Future[None]
    ) -> None:
        # The first submit registers the session (Client does it on demand).
        _, key, payload = next_op()
        await c.submit(payload, key=key)
        self.completed += 1
        registered.set_result(None)
        await self.go
        while self.running:
            _, key, payload = next_op()
            await c.submit(payload, key=key)
            self.completed += 1

    async def run(self, clients: list[Any], stdin: StdinWords) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        spec = self.spec
        workload = Workload(**spec["workload"])
        tasks, registrations = [], []
        for c, part in zip(clients, _parts(spec, len(clients)), strict=True):
            for index in part["clients"]:
                fut: asyncio.Future[None] = loop.create_future()
                registrations.append(fut)
                tasks.append(loop.create_task(self.session(c, op_source(workload, index), fut)))
        await asyncio.gather(*registrations)
        say("ready")
        await stdin.expect("go")
        self.go.set_result(None)
        listener = _Listener(stdin, self.end)
        every_s = spec.get("report_s", REPORT_INTERVAL_S)

        def count() -> int:
            return self.completed

        await _report_until(count, every_s, math.inf, self.ended, listener.stopped)
        self.running = False
        drained = asyncio.gather(*tasks, return_exceptions=True)
        deadline_s = time.monotonic() + spec["drain_s"]
        await _report_until(count, every_s, deadline_s, drained, listener.stopped)
        say(f"count {self.completed}")
        listener.cancel()
        failures = [repr(r) for r in drained.result() if isinstance(r, BaseException)]
        return {
            "sent": self.completed,
            "completed": self.completed,
            "open": 0,
            "retries": sum(c.retries for c in clients),
            "fallbacks": 0,
            "failures": failures[:20],
            "lost": False,
        }


async def _serve_clients(conn: dict[str, Any]) -> None:
    """``load: client``: :class:`sdpaxos.runtime.client.Client` (one per node),
    one task per client calling ``submit`` in a closed loop; what a program
    using the runtime's client costs. Same words with the parent as
    :func:`_serve`; no records (only the totals)."""
    from sdpaxos.runtime.client import Client
    from sdpaxos.runtime.config import TlsFiles

    tls = None if conn.get("tls") is None else TlsFiles(*(Path(f) for f in conn["tls"]))
    clients = [Client([(host, port)], tls=tls) for host, port in conn["nodes"]]
    stdin = StdinWords()
    say("connected")
    while True:
        line = await stdin.queue.get()
        word, _, rest = line.partition(" ")
        if word != "run":
            if word in ("quit", "stop"):
                break
            continue
        result = await _ClientRun(json.loads(Path(rest).read_text())).run(clients, stdin)
        say("done " + json.dumps(result))
    for c in clients:
        await c.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.runtime_loader CONN.json", file=sys.stderr)
        return 2
    conn = json.loads(Path(args[0]).read_text())
    client = conn.get("load") == "client"
    # The runtime's Client asserts an asyncio.Transport, which uvloop's is not.
    serve, fast = (_serve_clients, False) if client else (_serve, True)
    if conn.get("profile"):
        import cProfile

        prof = cProfile.Profile()
        prof.runcall(run_loop, serve(conn), fast)
        prof.dump_stats(conn["profile"])
    else:
        run_loop(serve(conn), fast=fast)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
