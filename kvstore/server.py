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
:meth:`KVBackend.execute_many`, which adds them to the loop turn's batches
(:mod:`kvstore.batcher`) and answers each run through one
:class:`~kvstore.resp.Deferred`; the front end writes the answers of a
pipeline in order.
"""

from __future__ import annotations

import logging
import ssl as _ssl
from collections.abc import Iterable, Mapping
from itertools import chain
from operator import itemgetter
from typing import Any

from kvstore.batcher import SET_BOUND, Batcher, packed_bound, refusal
from kvstore.codec import PLAIN_SET, decode_value, encode_command
from kvstore.commands import COMMANDS, CommandSpec, parse
from kvstore.config import KVConfig
from kvstore.machine import KVStore
from kvstore.resp import ConnState, Deferred, RespLimits, RespServer
from kvstore.values import Error, Value
from sdpaxos.runtime.frames import COMMAND_BYTES_MAX
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.node import Node, NodeError

__all__ = ["KVBackend", "KVNode", "redis_server_context"]

log = logging.getLogger(__name__)

#: A read that finds no sequencer lease for this long answers TRYAGAIN.
READ_TIMEOUT_S = 5.0
#: Entries in the table of connections' last writes before answered ones are swept.
WRITING_SWEEP_AT = 4096
_first = itemgetter(0)
_key_value = itemgetter(1, 2)


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
        pack = store.packed.pack
        self._writes = Batcher(
            lambda payload, key: node.submit_nowait(payload, key=key, wait="executed"), pack
        )
        if node.reads_at_every_replica:
            self._reads = Batcher(
                lambda payload, key: node.read_nowait(key, payload, timeout_s=self.read_timeout_s),
                pack,
            )
        else:
            # The protocol has no read path at every replica: a batch of reads goes
            # through the log like writes (a read changes nothing when applied).
            self._reads = Batcher(
                lambda payload, key: node.submit_nowait(payload, key=key, wait="executed"), pack
            )

    def execute(self, args: list[bytes], conn: ConnState) -> Value | Deferred:
        """One command: :meth:`execute_many` of one, whose one answer is a value
        or a :class:`Deferred` of one reply."""
        for arg in args:
            if type(arg) is not bytes:
                raise TypeError(f"a command argument must be bytes, not {type(arg).__name__}")
        (answer,) = self.execute_many([args], conn)
        return answer

    def execute_many(self, requests: list[list[bytes]], conn: ConnState) -> list[Value | Deferred]:
        """Run the consecutive data commands of one read, in order (see
        :meth:`kvstore.resp.BatchBackend.execute_many`).

        The front end hands every complete request of a read at once, so the
        per-command work is one loop iteration here: the commands that go
        through the log (or a read batch) are appended, still as argument
        lists, to the loop turn's batch (packed once, when it is sent), and a
        run of consecutive ones answers through one :class:`Deferred`. A read
        that follows a write of this connection still in flight goes through
        the log too, in the same batch as its neighbours, so it sees that
        write and none after it (Redis runs a connection's commands in order).
        Every argument must be bytes (the front end checks it).
        """
        writes = self._writes
        if len(requests) == 1:  # no pipelining: one plain SET is one add
            args = requests[0]
            if len(args) == 3 and args[0] in PLAIN_SET:
                size = len(args[1]) + len(args[2]) + SET_BOUND
                if size <= COMMAND_BYTES_MAX:
                    try:
                        writes.add_set(args[1], args[2], size)
                        sealed = writes.seal()
                    except NodeError as exc:
                        writes.drop_open()
                        return [refusal(exc)]
                    self._note_write(conn.id, sealed[-1])
                    return list(sealed)
        elif set(map(len, requests)) == {3} and PLAIN_SET.issuperset(map(_first, requests)):
            # Only plain SETs (a redis-benchmark pipeline, a bulk load): one
            # run of the batch, counted and checked a read at a time.
            n = len(requests)
            flat = list(chain.from_iterable(map(_key_value, requests)))
            size = sum(map(len, flat)) + SET_BOUND * n
            if size <= COMMAND_BYTES_MAX:  # so is each SET's
                keys = flat[::2]
                try:
                    writes.add_sets(flat, keys[0] if keys.count(keys[0]) == n else None, size)
                    sealed = writes.seal()
                except NodeError as exc:
                    writes.drop_open()
                    return [refusal(exc)] * n
                self._note_write(conn.id, sealed[-1])
                return list(sealed)
        reads = self._reads
        out: list[Value | Deferred] = []
        prior = self._writing.get(conn.id)
        logged = prior is not None and not prior.done  # a write of this connection in flight
        open_: Batcher | None = None  # the batcher with commands added since its last seal
        try:
            for args in requests:
                parsed = parse(args)  # Redis' unknown-command and arity errors
                if isinstance(parsed, Error):
                    if open_ is not None:
                        out.extend(open_.seal())
                        open_ = None
                    out.append(parsed)
                    continue
                spec = parsed[0]
                size = packed_bound(args)
                if size > COMMAND_BYTES_MAX:
                    exact = len(encode_command(args))
                    if exact > COMMAND_BYTES_MAX:
                        if open_ is not None:
                            out.extend(open_.seal())
                            open_ = None
                        out.append(
                            Error(
                                f"ERR command of {exact} bytes: the store takes at most "
                                f"{COMMAND_BYTES_MAX}"
                            )
                        )
                        continue
                key = args[1] if spec.single_key else None
                if spec.kind == "write" or logged:
                    if open_ is reads:
                        out.extend(reads.seal())
                    if len(args) == 3 and args[0] in PLAIN_SET:
                        writes.add_set(key, args[2], size)  # type: ignore[arg-type]
                    else:
                        writes.add(args, key, size)
                    open_ = writes
                    logged = True
                    continue
                if open_ is not None and (open_ is writes or conn.stale_reads):
                    out.extend(open_.seal())
                    open_ = None
                if conn.stale_reads:
                    # This replica's state at once (READONLY): no batch, no round.
                    out.append(decode_value(self.store.query(encode_command(args))))
                    continue
                reads.add(args, key, size)
                open_ = reads
            if open_ is not None:
                out.extend(open_.seal())
        except NodeError as exc:
            writes.drop_open()
            reads.drop_open()
            return [refusal(exc)] * len(requests)
        for answer in reversed(out):
            if type(answer) is Deferred:
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

    def command_table(self) -> Iterable[CommandSpec]:
        return COMMANDS.values()


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
