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
from collections.abc import Iterable, Mapping
from typing import Any

from kvstore.codec import decode_value, encode_command
from kvstore.commands import COMMANDS, CommandSpec, unknown_command, wrong_arity
from kvstore.config import KVConfig
from kvstore.machine import KVStore
from kvstore.resp import CommandSpec as RespSpec
from kvstore.resp import ConnState, RespLimits, RespServer
from kvstore.values import Error, Value
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.node import Node, NodeError, SessionExpired

__all__ = ["KVBackend", "KVNode", "redis_server_context"]

log = logging.getLogger(__name__)

#: A read that finds no sequencer lease for this long answers TRYAGAIN.
READ_TIMEOUT_S = 5.0

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
        self._writing: dict[int, asyncio.Future[Value]] = {}
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

    def execute(self, args: list[bytes], conn: ConnState) -> Value | asyncio.Future[Value]:
        route = self._routes.get(args[0])
        if route is None:
            route = self._routes.get(args[0].lower())
            if route is None:
                return unknown_command(args)
        n = len(args)
        if (n != route.arity) if route.arity > 0 else (n < -route.arity):
            return wrong_arity(route.name)
        payload = encode_command(args)
        key = args[1] if route.single_key else None
        try:
            if route.write:
                return self._write(conn.id, payload, key)
            prior = self._writing.get(conn.id)
            if prior is None:
                return self._read(conn.stale_reads, payload, key)
            # A read pipelined behind this connection's own write waits for it,
            # as Redis runs a connection's commands in order.
            return self._after(prior, conn.stale_reads, payload, key)
        except NodeError:
            return _STOPPED

    def _write(self, conn_id: int, payload: bytes, key: bytes | None) -> asyncio.Future[Value]:
        future = _decoded(self.node.submit_nowait(payload, key=key, wait="executed"))
        writing = self._writing
        writing[conn_id] = future

        def done(f: asyncio.Future[Value]) -> None:
            if writing.get(conn_id) is f:
                del writing[conn_id]

        future.add_done_callback(done)
        return future

    def _read(
        self, stale: bool, payload: bytes, key: bytes | None
    ) -> Value | asyncio.Future[Value]:
        if stale:
            return decode_value(self.store.query(payload))
        return _decoded(self.node.read_nowait(key, payload, timeout_s=self.read_timeout_s))

    def _after(
        self, prior: asyncio.Future[Value], stale: bool, payload: bytes, key: bytes | None
    ) -> asyncio.Future[Value]:
        out: asyncio.Future[Value] = prior.get_loop().create_future()

        def start(_: asyncio.Future[Value]) -> None:
            try:
                answer = self._read(stale, payload, key)
            except NodeError:
                out.set_result(_STOPPED)
                return
            if isinstance(answer, asyncio.Future):
                answer.add_done_callback(lambda f: out.set_result(f.result()))
            else:
                out.set_result(answer)

        prior.add_done_callback(start)
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


def _decoded(future: asyncio.Future[bytes | None]) -> asyncio.Future[Value]:
    """The future of the decoded answer; node failures become Redis errors."""
    out: asyncio.Future[Value] = future.get_loop().create_future()

    def done(f: asyncio.Future[bytes | None]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.set_result(_STOPPED)
            return
        exc = f.exception()
        if exc is None:
            raw = f.result()
            out.set_result(None if raw is None else decode_value(raw))
        elif isinstance(exc, TimeoutError):
            out.set_result(_TRYAGAIN)
        elif isinstance(exc, (NodeError, SessionExpired)):
            out.set_result(_STOPPED)
        else:
            log.error("a command failed: %r", exc)
            out.set_result(Error("ERR internal error"))

    future.add_done_callback(done)
    return out


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
