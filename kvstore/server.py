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
  :meth:`KVStore.query`; a multi-key read waits for every write;
* on a connection switched to stale reads (``READONLY``, or ``reads = "stale"``
  in the file) a read is answered from this replica's state at once: faster,
  and it may miss writes other nodes have acknowledged.

Nothing here blocks: the front end hands a future per command and writes the
answers of a pipeline in order.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kvstore.codec import decode_results, decode_value, encode_batch, encode_command
from kvstore.commands import COMMANDS, CommandSpec, unknown_command, wrong_arity
from kvstore.config import KVConfig
from kvstore.machine import KVStore
from kvstore.resp import CommandSpec as RespSpec
from kvstore.resp import ConnState, Deferred, RespLimits, RespServer
from kvstore.values import Error, Value
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

_TRYAGAIN = Error("TRYAGAIN no linearizable answer in time (no sequencer lease); try again")
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


class _Route:
    """What the backend needs of one command, worked out once per name."""

    __slots__ = ("arity", "name", "single_key", "write")

    def __init__(self, spec: CommandSpec) -> None:
        self.name = spec.name
        self.arity = spec.arity
        self.write = spec.kind == "write"
        # The key the sequencer's history table is asked about: a command that
        # names exactly one key (GET k, SET k v ...); else None ("any key").
        self.single_key = spec.first_key == 1 and spec.last_key == 1


class KVBackend:
    """The Redis front end's :class:`~kvstore.resp.Backend`, over a node and its store."""

    def __init__(self, node: Node, store: KVStore, *, read_timeout_s: float = READ_TIMEOUT_S):
        self.node = node
        self.store = store
        self.read_timeout_s = read_timeout_s
        #: Each connection's latest write not yet answered (connection id -> its future).
        self._writing: dict[int, Deferred] = {}
        self._writes = _Batcher(
            lambda payload, key: node.submit_nowait(payload, key=key, wait="executed")
        )
        self._reads = _Batcher(
            lambda payload, key: node.read_nowait(key, payload, timeout_s=self.read_timeout_s)
        )
        self._routes: dict[bytes, _Route] = {}
        for spec in COMMANDS.values():
            route = _Route(spec)
            self._routes[spec.name.encode()] = route
            self._routes[spec.name.upper().encode()] = route
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
        route = self._routes.get(args[0])
        if route is None:
            route = self._routes.get(args[0].lower())
            if route is None:
                return unknown_command(args)
        n = len(args)
        if (n != route.arity) if route.arity > 0 else (n < -route.arity):
            return wrong_arity(route.name)
        payload = encode_command(args)
        if len(payload) > COMMAND_BYTES_MAX:
            return Error(
                f"ERR command of {len(payload)} bytes: the store takes at most {COMMAND_BYTES_MAX}"
            )
        key = args[1] if route.single_key else None
        try:
            if route.write:
                return self._write(conn.id, payload, key)
            prior = self._writing.get(conn.id)
            if prior is None or prior.done:
                return self._read(conn.stale_reads, payload, key)
            # A read pipelined behind this connection's own write waits for it,
            # as Redis runs a connection's commands in order.
            return self._after(prior, conn.stale_reads, payload, key)
        except NodeError:
            return _STOPPED

    def _write(self, conn_id: int, payload: bytes, key: bytes | None) -> Deferred:
        future = self._writes.add(payload, key)
        writing = self._writing
        if conn_id not in writing and len(writing) >= WRITING_SWEEP_AT:
            # Connections that closed with a write answered leave an entry: sweep.
            for done in [c for c, f in writing.items() if f.done]:
                del writing[done]
        writing[conn_id] = future
        return future

    def _read(self, stale: bool, payload: bytes, key: bytes | None) -> Value | Deferred:
        if stale:
            return decode_value(self.store.query(payload))
        return self._reads.add(payload, key)

    def _after(self, prior: Deferred, stale: bool, payload: bytes, key: bytes | None) -> Deferred:
        out = Deferred()

        def start(_: Value) -> None:
            try:
                answer = self._read(stale, payload, key)
            except NodeError:
                out.set(_STOPPED)
                return
            if type(answer) is Deferred:
                answer.add_callback(out.set)
            else:
                out.set(answer)  # type: ignore[arg-type]

        prior.add_callback(start)
        return out

    def info(self, conn: ConnState) -> Mapping[str, Mapping[str, str | int]]:
        node = self.node
        try:
            st = node.status()
        except NodeError:
            return {"replication": {"role": "stopped"}}
        replication: dict[str, str | int] = {
            "role": "sequencer" if st.is_sequencer else "replica",
            "replica_id": st.id,
            "region": st.region,
            "view": st.view,
            "sequencer": -1 if st.sequencer is None else st.sequencer,
            "sequencer_lease": int(st.has_lease),
            "executed_slot": st.executed_upto,
            "snapshot_slot": st.snapshot_slot,
            "connected_peers": sum(1 for p in st.peers if p.connected),
        }
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


class _Batcher:
    """Gathers the commands of one event-loop turn into one log command (or one read).

    Every command the node replicates costs a session, a log record and a
    slot in a C-instance, whatever its size; a Redis pipeline, or many clients
    at once, bring hundreds of small commands per loop turn. So the commands
    that arrive in one turn travel as one :func:`~kvstore.codec.encode_batch`
    payload, and the array of results is handed back one by one. The batch
    names a key only if all its commands name the same one. It is linearizable
    still: the batch takes effect at one point, inside every command's
    interval. A batch is sent early when it reaches :data:`BATCH_COMMANDS_MAX`
    commands or :data:`BATCH_BYTES_MAX` bytes.
    """

    __slots__ = ("_bytes", "_items", "_scheduled", "_submit")

    def __init__(
        self, submit: Callable[[bytes, bytes | None], asyncio.Future[bytes | None]]
    ) -> None:
        self._submit = submit
        self._items: list[tuple[bytes, bytes | None, Deferred]] = []
        self._bytes = 0
        self._scheduled = False

    def add(self, payload: bytes, key: bytes | None) -> Deferred:
        future = Deferred()
        if self._items and self._bytes + len(payload) > BATCH_BYTES_MAX:
            self.flush()  # a big command goes alone, never over the payload limit
        items = self._items
        items.append((payload, key, future))
        self._bytes += len(payload)
        if len(items) >= BATCH_COMMANDS_MAX or self._bytes >= BATCH_BYTES_MAX:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)
        return future

    def flush(self) -> None:
        self._scheduled = False
        items = self._items
        if not items:
            return
        self._items = []
        self._bytes = 0
        if len(items) == 1:
            payload, key, out = items[0]
        else:
            payload = encode_batch([p for p, _, _ in items])
            first = items[0][1]
            key = first if all(k == first for _, k, _ in items) else None
        try:
            future = self._submit(payload, key)
        except NodeError:
            for _, _, out in items:
                out.set(_STOPPED)
            return
        if len(items) == 1:
            future.add_done_callback(lambda f: _answer_one(f, out))
        else:
            future.add_done_callback(lambda f: _answer_many(f, items))


def _answer_one(future: asyncio.Future[bytes | None], out: Deferred) -> None:
    failed = _failure(future)
    if failed is not None:
        out.set(failed)
        return
    raw = future.result()
    out.set(None if raw is None else decode_value(raw))


def _answer_many(
    future: asyncio.Future[bytes | None],
    items: list[tuple[bytes, bytes | None, Deferred]],
) -> None:
    failed = _failure(future)
    if failed is None:
        raw = future.result()
        try:
            results: Value = None if raw is None else decode_results(raw)
        except ValueError:
            results = decode_value(raw) if raw is not None else None
        if type(results) is list and len(results) == len(items):
            for (_, _, out), value in zip(items, results, strict=True):
                out.set(value)
            return
        failed = results if isinstance(results, Error) else Error("ERR malformed batch answer")
    for _, _, out in items:
        out.set(failed)


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
