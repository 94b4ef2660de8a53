"""A kv-store node: an SDPaxos :class:`~sdpaxos.runtime.node.Node` running
:class:`~kvstore.machine.KVStore`, with a Redis front end.

Where each Redis command goes:

* a **write** (SET, INCR, DEL, ...) is encoded (:func:`kvstore.codec.encode_command`)
  and replicated with :meth:`Node.submit_nowait`, naming its key when it has
  exactly one (the sequencer's history table then lets reads of other keys
  pass); the answer is the state machine's result once the command has
  executed here, so every replica answers it the same way;
* a **read** (GET, MGET, EXISTS, SCAN, ...) is a linearizable read
  (:meth:`Node.read_nowait`, the core's read path: it waits until every write of
  that key ready before it has executed here), answered by
  :meth:`KVStore.query`; a multi-key read waits for every write. Under a
  protocol whose reads do not serve at every replica
  (:attr:`Node.reads_at_every_replica`: Multi-Paxos, Mencius) reads go through
  the log as a batch, like writes;
* on a connection switched to stale reads (``READONLY``, or ``reads = "stale"``
  in the file) a read is answered from this replica's state at once: faster,
  and it may miss writes other nodes have acknowledged.

* a read pipelined behind a write of the same connection that is not answered
  yet goes through the log with the writes (the state machine answers reads
  in a batch too), so it sees that write and none of the connection's later
  ones, as Redis runs a connection's commands in order.

Nothing here blocks: the front end hands each read's run of data commands to
:meth:`KVBackend.execute_many` and writes the answers of a pipeline in order.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
from collections.abc import Callable, Iterable, Mapping
from itertools import chain
from operator import itemgetter
from typing import Any

from kvstore.codec import (
    PLAIN_SET,
    BatchItem,
    decode_results,
    decode_value,
    encode_batch_items,
    encode_command,
    encoded_oks,
)
from kvstore.commands import COMMANDS, parse
from kvstore.config import KVConfig
from kvstore.machine import KVStore
from kvstore.resp import CommandSpec as RespSpec
from kvstore.resp import ConnState, Deferred, DeferredList, OkList, RespLimits, RespServer
from kvstore.values import OK, Error, Value
from sdpaxos.runtime.frames import COMMAND_BYTES_MAX
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.node import Node, NodeError, SessionExpired

__all__ = ["KVBackend", "KVNode", "redis_server_context"]

log = logging.getLogger(__name__)

#: A read that finds no sequencer lease for this long answers TRYAGAIN.
READ_TIMEOUT_S = 5.0
#: Most commands, and bytes of them, replicated (or read) as one batch.
BATCH_COMMANDS_MAX = 1024
BATCH_BYTES_MAX = 256 * 1024
#: Entries in the table of connections' last writes before answered ones are swept.
WRITING_SWEEP_AT = 4096
#: What :func:`_packed_bound` adds to a plain SET's key and value lengths.
_SET_BOUND = 5 * 3 + 5 + len(b"SET")
_first = itemgetter(0)
_key_value = itemgetter(1, 2)

_TRYAGAIN = Error("TRYAGAIN no linearizable answer in time (no sequencer lease); try again")
_MALFORMED_ANSWER = Error("ERR malformed batch answer")
_STOPPED = Error("ERR this node is stopping; use another")


def redis_server_context(config: KVConfig) -> _ssl.SSLContext:
    """TLS for the Redis port: the node's certificate; a client certificate is
    checked against the cluster CA when one is shown, and not required (Redis
    clients authenticate with AUTH)."""
    files = config.node.tls
    if files is None:
        raise ValueError("the Redis port's TLS needs the cluster's [tls] files")
    ctx = _ssl.SSLContext(_ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(files.cert, files.key)
    ctx.load_verify_locations(files.ca)
    ctx.verify_mode = _ssl.CERT_OPTIONAL
    return ctx


class KVBackend:
    """The Redis front end's :class:`~kvstore.resp.Backend`, over a node and its store."""

    def __init__(self, node: Node, store: KVStore, *, read_timeout_s: float = READ_TIMEOUT_S):
        self.node = node
        self.store = store
        self.read_timeout_s = read_timeout_s
        #: Each connection's latest write not yet answered (connection id -> its part).
        self._writing: dict[int, Deferred] = {}
        # This node applies the batches it packs without unpacking them: it packs
        # them with its store's PackedBatches (kvstore.batches).
        self._writes = _Batcher(
            lambda payload, key: node.submit_nowait(payload, key=key, wait="executed"),
            store.packed.pack,
        )
        if node.reads_at_every_replica:
            self._reads = _Batcher(
                lambda payload, key: node.read_nowait(key, payload, timeout_s=self.read_timeout_s),
                store.packed.pack,
            )
        else:
            # The protocol has no read path at every replica: a batch of reads goes
            # through the log like writes (a read changes nothing when applied).
            self._reads = _Batcher(
                lambda payload, key: node.submit_nowait(payload, key=key, wait="executed"),
                store.packed.pack,
            )
        self._table = [
            RespSpec(
                spec.name,
                spec.arity,
                spec.flags,
                spec.first_key,
                spec.last_key,
                spec.key_step,
                spec.summary,
                "string" if spec.first_key else "generic",
            )
            for spec in COMMANDS.values()
        ]

    def execute(self, args: list[bytes], conn: ConnState) -> Value | Deferred:
        """One command: :meth:`execute_many` of one, answered as one value."""
        for arg in args:
            if type(arg) is not bytes:
                raise TypeError(f"a command argument must be bytes, not {type(arg).__name__}")
        (answer,) = self.execute_many([args], conn)
        if type(answer) is not DeferredList:
            return answer
        single = Deferred()

        def first(values: Value) -> None:
            single.set(values[0] if isinstance(values, list) and values else _MALFORMED_ANSWER)

        answer.add_callback(first)
        return single

    def execute_many(
        self, requests: list[list[bytes]], conn: ConnState
    ) -> list[Value | Deferred | DeferredList]:
        """Run the consecutive data commands of one read, in order (see
        :meth:`kvstore.resp.Backend.execute_many`).

        The front end hands every complete request of a read at once, so the
        per-command work is one loop iteration here: the commands that go
        through the log are appended, still as argument lists, to the loop
        turn's batch (packed once, when it is sent), and a run of them answers
        through one :class:`DeferredList`. A read that follows a write of this
        connection still in flight goes through the log too, in the same batch
        as its neighbours, so it sees that write and none after it (Redis runs
        a connection's commands in order). Every argument must be bytes (the
        front end checks it).
        """
        writes = self._writes
        if len(requests) == 1:  # no pipelining: one plain SET is one add
            args = requests[0]
            if len(args) == 3 and args[0] in PLAIN_SET:
                size = len(args[1]) + len(args[2]) + _SET_BOUND
                if size <= COMMAND_BYTES_MAX:
                    try:
                        writes.add_set(args[1], args[2], size)
                        sealed = writes.seal()
                    except NodeError:
                        writes.drop_open()
                        return [_STOPPED]
                    self._note_write(conn.id, sealed[-1])
                    return list(sealed)
        elif set(map(len, requests)) == {3} and PLAIN_SET.issuperset(map(_first, requests)):
            # Only plain SETs (a redis-benchmark pipeline, a bulk load): one
            # run of the batch, counted and checked a read at a time.
            n = len(requests)
            flat = list(chain.from_iterable(map(_key_value, requests)))
            size = sum(map(len, flat)) + _SET_BOUND * n
            if size <= COMMAND_BYTES_MAX:  # so is each SET's
                keys = flat[::2]
                try:
                    writes.add_sets(flat, keys[0] if keys.count(keys[0]) == n else None, size)
                    sealed = writes.seal()
                except NodeError:
                    writes.drop_open()
                    return [_STOPPED] * n
                self._note_write(conn.id, sealed[-1])
                return list(sealed)
        out: list[Value | Deferred | DeferredList] = []
        prior = self._writing.get(conn.id)
        logged = prior is not None and not prior.done  # a write of this connection in flight
        opened = 0  # commands added to the write batch since its last part
        try:
            for args in requests:
                parsed = parse(args)  # Redis' unknown-command and arity errors
                if isinstance(parsed, Error):
                    if opened:
                        out.extend(writes.seal())
                        opened = 0
                    out.append(parsed)
                    continue
                spec = parsed[0]
                size = _packed_bound(args)
                if size > COMMAND_BYTES_MAX:
                    exact = len(encode_command(args))
                    if exact > COMMAND_BYTES_MAX:
                        if opened:
                            out.extend(writes.seal())
                            opened = 0
                        out.append(
                            Error(
                                f"ERR command of {exact} bytes: the store takes at most "
                                f"{COMMAND_BYTES_MAX}"
                            )
                        )
                        continue
                key = args[1] if spec.single_key else None
                if len(args) == 3 and args[0] in PLAIN_SET:
                    writes.add_set(key, args[2], size)  # type: ignore[arg-type]
                    opened += 1
                    logged = True
                    continue
                if spec.kind == "write" or logged:
                    writes.add(args, key, size)
                    opened += 1
                    logged = True
                    continue
                if opened:
                    out.extend(writes.seal())
                    opened = 0
                out.append(self._read(conn.stale_reads, args, key, size))
            if opened:
                out.extend(writes.seal())
        except NodeError:
            writes.drop_open()
            return [_STOPPED] * len(requests)
        for answer in reversed(out):
            if type(answer) is DeferredList:
                self._note_write(conn.id, answer)
                break
        return out

    def _note_write(self, conn_id: int, part: Deferred) -> None:
        """Remember ``part`` as the connection's latest write (reads after it wait)."""
        writing = self._writing
        if conn_id not in writing and len(writing) >= WRITING_SWEEP_AT:
            # Connections that closed with a write answered leave an entry: sweep.
            for done in [c for c, f in writing.items() if f.done]:
                del writing[done]
        writing[conn_id] = part

    def _read(
        self, stale: bool, args: list[bytes], key: bytes | None, size: int
    ) -> Value | DeferredList:
        if stale:
            return decode_value(self.store.query(encode_command(args)))
        reads = self._reads
        reads.add(args, key, size)
        (part,) = reads.seal()
        return part

    def info(self, conn: ConnState) -> Mapping[str, Mapping[str, str | int]]:
        node = self.node
        try:
            st = node.status()
        except NodeError:
            return {"replication": {"role": "stopped"}}
        fields: dict[str, str | int | None] = {
            "role": "sequencer" if st.is_sequencer else "replica",
            "protocol": st.protocol,
            "replica_id": st.id,
            "region": st.region,
            "view": st.view,
            "sequencer": -1 if st.sequencer is None else st.sequencer,
            "sequencer_lease": None if st.has_lease is None else int(st.has_lease),
            "executed_slot": st.executed_upto,
            "snapshot_slot": st.snapshot_slot,
            "connected_peers": sum(1 for p in st.peers if p.connected),
        }
        # What the protocol does not have (a view, a lease, snapshots) is left out.
        replication = {k: v for k, v in fields.items() if v is not None}
        for p in st.peers:
            rtt = "" if p.rtt_ms is None else f",rtt_ms={p.rtt_ms:.2f}"
            lag = "" if p.lag_slots is None else f",lag={p.lag_slots}"
            replication[f"peer{p.id}"] = f"connected={int(p.connected)}{lag}{rtt}"
        return {
            "keyspace": {"db0": f"keys={len(self.store)},expires=0,avg_ttl=0"},
            "replication": replication,
        }

    def command_table(self) -> Iterable[RespSpec]:
        return self._table


def _failure(future: asyncio.Future[bytes | None]) -> Value | None:
    """The Redis error for a node's failed future, or None if it succeeded."""
    if future.cancelled():
        return _STOPPED
    exc = future.exception()
    if exc is None:
        return None
    if isinstance(exc, TimeoutError):
        return _TRYAGAIN
    if isinstance(exc, (NodeError, SessionExpired)):
        return _STOPPED
    log.error("a command failed: %r", exc)
    return Error("ERR internal error")


def _packed_bound(args: list[bytes]) -> int:
    """An upper bound on ``len(encode_command(args))``: msgpack spends at most 5
    header bytes on the array and on each bin string (an exact size would cost
    a packb per command; the batch limits only need a bound)."""
    return sum(map(len, args)) + 5 * len(args) + 5


class _Batcher:
    """Gathers the commands of one event-loop turn into one log command (or one read).

    Every command the node replicates costs a session, a log record and a
    slot in a C-instance, whatever its size; a Redis pipeline, or many clients
    at once, bring hundreds of small commands per loop turn. So the commands
    that arrive in one turn travel as one :func:`~kvstore.codec.encode_batch`
    payload (packed by one ``msgpack.packb`` of their items when the batch is
    sent; consecutive plain SETs as one run, see :mod:`kvstore.codec`), and
    the array of results is handed back in *parts*: a part is a
    :class:`DeferredList` for a run of consecutive commands of one connection
    (:meth:`add` them, then :meth:`seal`), so the answers cost one callback
    per run, not per command. The batch names a key only if all its commands
    name the same one. It is linearizable still: the batch takes effect at one
    point, inside every command's interval. A batch is sent early when it
    reaches :data:`BATCH_COMMANDS_MAX` commands or :data:`BATCH_BYTES_MAX`
    bytes (counted with :func:`_packed_bound`).
    """

    __slots__ = (
        "_bytes",
        "_count",
        "_items",
        "_key",
        "_keyed",
        "_open",
        "_pack",
        "_parts",
        "_run_at",
        "_scheduled",
        "_sealed",
        "_submit",
    )

    def __init__(
        self,
        submit: Callable[[bytes, bytes | None], asyncio.Future[bytes | None]],
        pack: Callable[[list[BatchItem]], bytes] = encode_batch_items,
    ) -> None:
        self._submit = submit
        #: Packs a batch's items into its payload (the store's
        #: :meth:`kvstore.batches.PackedBatches.pack`, which remembers them).
        self._pack = pack
        #: The batch's items: argument lists, and SET runs (a count, then keys and values).
        self._items: list[Any] = []
        self._count = 0  # commands in the batch
        self._run_at = -1  # index of the open SET run's count in _items, or -1
        #: (part, how many commands) in batch order; the open run is not in it yet.
        self._parts: list[tuple[DeferredList, int]] = []
        self._open = 0  # commands added since the last part was made
        self._sealed: list[DeferredList] = []  # parts made for the caller's open run
        self._bytes = 0
        self._key: bytes | None = None
        self._keyed = True  # every command so far names self._key
        self._scheduled = False

    def _note_key(self, key: bytes | None) -> None:
        if not self._count:
            self._key, self._keyed = key, key is not None
        elif self._keyed and key != self._key:
            self._keyed = False

    def _added(self, count: int, size: int) -> None:
        self._count += count
        self._open += count
        self._bytes += size
        if self._count >= BATCH_COMMANDS_MAX or self._bytes >= BATCH_BYTES_MAX:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def add(self, args: list[bytes], key: bytes | None, size: int) -> None:
        """Append one command (``size``: its :func:`_packed_bound`); its answer
        comes in the part :meth:`seal` makes."""
        if self._count and self._bytes + size > BATCH_BYTES_MAX:
            self.flush()  # a big command goes alone, never over the payload limit
        self._note_key(key)
        self._items.append(args)
        self._run_at = -1
        self._added(1, size)

    def add_set(self, key: bytes, value: bytes, size: int) -> None:
        """Append ``SET key value`` (a plain SET: no options) to the batch's
        open SET run; as :meth:`add` otherwise."""
        if self._count and self._bytes + size > BATCH_BYTES_MAX:
            self.flush()
        self._note_key(key)
        items = self._items
        at = self._run_at
        if at < 0:
            self._run_at = len(items)
            items.append(1)
        else:
            items[at] += 1
        items.append(key)
        items.append(value)
        self._added(1, size)

    def add_sets(self, flat: list[bytes], key: bytes | None, size: int) -> None:
        """Append plain SETs at once: ``flat`` is key, value, key, value, ...;
        ``key`` the one key they all name (else None), ``size`` the sum of
        their :func:`_packed_bound`. What does not fit the batch goes into the
        next, as :meth:`add_set` would send it."""
        count = len(flat) // 2
        if self._bytes + size > BATCH_BYTES_MAX:
            for i in range(0, len(flat), 2):
                k, v = flat[i], flat[i + 1]
                self.add_set(k, v, len(k) + len(v) + _SET_BOUND)
            return
        room = BATCH_COMMANDS_MAX - self._count
        if count > room:  # the batch fills up part-way: the rest starts the next
            head = flat[: 2 * room]
            self.add_sets(head, key, sum(map(len, head)) + _SET_BOUND * room)
            tail = flat[2 * room :]
            self.add_sets(tail, key, sum(map(len, tail)) + _SET_BOUND * (count - room))
            return
        self._note_key(key)
        items = self._items
        at = self._run_at
        if at < 0:
            self._run_at = len(items)
            items.append(count)
        else:
            items[at] += count
        items += flat
        self._added(count, size)

    def _close_run(self) -> None:
        if self._open:
            part = DeferredList(self._open)
            self._parts.append((part, self._open))
            self._sealed.append(part)
            self._open = 0

    def seal(self) -> list[DeferredList]:
        """The parts answering the commands added since the last seal, in order
        (more than one if a batch was sent in between)."""
        self._close_run()
        sealed = self._sealed
        self._sealed = []
        return sealed

    def drop_open(self) -> None:
        """Forget the parts of an abandoned run (the node stopped while adding)."""
        self._close_run()
        for part in self._sealed:
            part.set([_STOPPED] * part.count)
        self._sealed = []

    def flush(self) -> None:
        self._scheduled = False
        count = self._count
        if not count:
            return
        self._close_run()
        items = self._items
        parts = self._parts
        key = self._key if self._keyed else None
        self._items = []
        self._parts = []
        self._count = 0
        self._run_at = -1
        self._bytes = 0
        if count > 1:
            payload = self._pack(items)
        elif type(items[0]) is int:  # one plain SET
            payload = encode_command([b"SET", items[1], items[2]])
        else:
            payload = encode_command(items[0])
        try:
            future = self._submit(payload, key)
        except NodeError:
            for part, n in parts:
                part.set([_STOPPED] * n)
            return
        if count == 1:
            future.add_done_callback(lambda f: _answer_one(f, parts[0][0]))
        else:
            future.add_done_callback(lambda f: _answer_many(f, parts, count))


def _answer_one(future: asyncio.Future[bytes | None], out: DeferredList) -> None:
    failed = _failure(future)
    if failed is not None:
        out.set([failed])
        return
    raw = future.result()
    out.set([None if raw is None else decode_value(raw)])


def _answer_many(
    future: asyncio.Future[bytes | None],
    parts: list[tuple[DeferredList, int]],
    total: int,
) -> None:
    failed = _failure(future)
    if failed is None:
        raw = future.result()
        if raw == encoded_oks(total):
            # Every command answered OK (a batch of plain SETs): no decoding,
            # and the front end writes each part without looking at its items.
            for part, count in parts:
                part.set(OkList([OK] * count))
            return
        try:
            results: Value = None if raw is None else decode_results(raw)
        except ValueError:
            results = decode_value(raw) if raw is not None else None
        if type(results) is list and len(results) == total:
            if len(parts) == 1:
                parts[0][0].set(results)
                return
            at = 0
            for part, count in parts:
                part.set(results[at : at + count])
                at += count
            return
        failed = results if isinstance(results, Error) else _MALFORMED_ANSWER
    for part, count in parts:
        part.set([failed] * count)


class KVNode:
    """One kv-store node: ``async with KVNode(config) as kv:`` serves Redis clients
    at ``config.redis_address`` until the block ends."""

    def __init__(
        self,
        config: KVConfig,
        *,
        fsync: bool = True,
        metrics: Metrics | None = None,
        listen_host: str | None = None,
        limits: RespLimits | None = None,
        **node_kw: Any,
    ) -> None:
        self.config = config
        self.store = KVStore()
        self.node = Node(
            config.node,
            self.store,
            fsync=fsync,
            metrics=metrics,
            listen_host=listen_host,
            **node_kw,
        )
        self.backend = KVBackend(self.node, self.store)
        self.listen_host = listen_host
        self.limits = limits
        self.resp: RespServer | None = None

    @property
    def redis_port(self) -> int:
        """The port the Redis front end listens on."""
        if self.resp is None or self.resp.port is None:
            raise NodeError("the kv-store node is not running")
        return self.resp.port

    async def start(self) -> None:
        await self.node.start()
        config = self.config
        try:
            self.resp = RespServer(
                self.backend,
                ssl=redis_server_context(config) if config.tls else None,
                users=config.users,
                limits=self.limits,
                clients_max=config.clients_max,
                stale_reads=config.reads == "stale",
            )
            host, port = config.redis_address
            await self.resp.start(self.listen_host or host, port)
        except BaseException:
            await self.node.stop()
            raise

    async def stop(self) -> None:
        """Stop answering Redis clients, then stop the node."""
        if self.resp is not None:
            await self.resp.close()
        await self.node.stop()

    async def __aenter__(self) -> KVNode:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
