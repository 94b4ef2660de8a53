"""A replica as a running node: what an embedding application sees.

Embedding::

    async with Node(config, MyStateMachine()) as node:
        await node.submit(b"payload", key=b"k")              # ready: ordered
        result = await node.submit(b"payload", wait="executed")
        value = await node.read(b"k")                        # linearizable
        print(node.status())

This module is the facade: lifecycle, :meth:`Node.submit`, :meth:`Node.read`,
sessions, :meth:`Node.status` and :meth:`Node.admin`. The work is done by
three parts that it builds and wires together, each in its own module:

- :mod:`sdpaxos.runtime.driver`: the replica and its durable log, carried out
  once per loop turn in the durability order (group commit, release in batch
  order, the core's tick). Where a batch is made durable.
- :mod:`sdpaxos.runtime.peers`: the other replicas (dial, hello, ping, the
  delay emulator's DUE marks; frames in and out). Where a frame from a peer goes.
- :mod:`sdpaxos.runtime.clients`: remote clients' requests and answers.

Peers and clients reach the driver only through its port
(:class:`~sdpaxos.runtime.driver.DriverPort`) and never import each other; the
driver reaches them through this node (:meth:`Node.send_out`). What differs
between protocols is declared in :mod:`sdpaxos.protocols`, never tested here.

**Exactly-once**: commands are numbered ``(client_id, seq)`` within a session;
the core executes each once and answers a retry with the first result (remote
clients resubmit the same pair across reconnects). Membership changes:
:meth:`Node.add_replica` and :mod:`sdpaxos.runtime.changes`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
from collections import deque
from collections.abc import Awaitable, Collection
from typing import Any

from sdpaxos.core.app import StateMachine
from sdpaxos.core.messages import Message
from sdpaxos.core.types import ReplicaId
from sdpaxos.protocols import CoreReplica, ProtocolError, ProtocolSpec, protocol
from sdpaxos.runtime.admin import run_admin
from sdpaxos.runtime.calls import Calls, Session, check_payload, wait_of
from sdpaxos.runtime.changes import CHANGE_TIMEOUT_S, ChangeRefused, Changes, Operations
from sdpaxos.runtime.clients import Clients
from sdpaxos.runtime.config import NodeConfig, node_emulator
from sdpaxos.runtime.datadir import open_data_dir
from sdpaxos.runtime.driver import READ_TIMEOUT_S, Driver
from sdpaxos.runtime.emulator import LinkEmulator
from sdpaxos.runtime.errors import NodeError, SessionExpired, WaitName
from sdpaxos.runtime.frames import Hello, Kind
from sdpaxos.runtime.log import DurableLog
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.peers import Peers
from sdpaxos.runtime.status import (
    IO_COUNTERS,
    STAGES,
    NodeStatus,
    PeerStatus,
    Tally,
    clock_ms,
    count_rejected,
    counters_of,
    report_metrics,
)
from sdpaxos.runtime.tls import server_context
from sdpaxos.runtime.transport import Connection
from sdpaxos.wire.records import RecordCodec

__all__ = [
    "IO_COUNTERS",
    "STAGES",
    "ChangeRefused",
    "Node",
    "NodeError",
    "NodeStatus",
    "PeerStatus",
    "Session",
    "SessionExpired",
]

logger = logging.getLogger(__name__)

#: A snapshot is requested when the log holds this many bytes (``None``: never).
SNAPSHOT_LOG_BYTES_DEFAULT = 256 << 20
#: Trace events kept for the status (``trace_events``): the latest this many.
TRACE_EVENTS_KEPT = 256


class Node:
    """One replica, running: see the module docstring.

    Args:
        config: the cluster and this node (:func:`sdpaxos.runtime.config.load_config`).
        state_machine: the application. If it has ``query(request: bytes) ->
            bytes``, :meth:`read` and remote reads answer with it.
        fsync: make records durable with ``fsync`` (off only for benchmarks and
            tests that do not crash the machine: a process crash is still safe).
        emulator: a :class:`~sdpaxos.runtime.emulator.LinkEmulator` for this
            node's outgoing links, or None.
        metrics: a :class:`~sdpaxos.runtime.metrics.NodeMetrics`, or None.
        listen_host: where to listen (default: the host of this node's address).
        snapshot_log_bytes: ask the core for a snapshot once the log holds this
            many bytes (None: only by ``ClusterConfig.snapshot_slots_min``).
        rng: randomness for the core and the reconnect jitter (default: seeded
            from ``os.urandom``).
        trace_events: names of core trace events (``tla/README.md``) to keep,
            timed, in :attr:`NodeStatus.events` (protocols with a tracer only:
            :attr:`sdpaxos.protocols.Capabilities.tracer`). Meant for rare
            events, such as the straggler detection's ``StragglerSuspect`` and
            ``StragglerViewChange``: with any name given, the core calls the
            tracer for every event.
        bootstrap: this node starts a brand-new cluster: it may start on an
            empty data directory (else it refuses to, having perhaps forgotten
            its promises; ignored once the directory holds data).
            :mod:`sdpaxos.runtime.datadir` says why.
    """

    def __init__(
        self,
        config: NodeConfig,
        state_machine: StateMachine,
        *,
        fsync: bool = True,
        emulator: LinkEmulator | None = None,
        metrics: Metrics | None = None,
        listen_host: str | None = None,
        snapshot_log_bytes: int | None = SNAPSHOT_LOG_BYTES_DEFAULT,
        rng: random.Random | None = None,
        trace_events: Collection[str] = (),
        bootstrap: bool = False,
    ) -> None:
        self.config = config
        self.bootstrap = bootstrap
        self.id: ReplicaId = config.node_id
        self._rng = rng if rng is not None else random.Random(os.urandom(16))
        self.state_machine = state_machine
        self.fsync = fsync
        if emulator is None and config.emulator is not None:
            seeded = random.Random(self._rng.getrandbits(64)) if rng is not None else None
            emulator = node_emulator(config, seeded)
        self.emulator = emulator
        self._metrics = metrics
        self.listen_host = listen_host
        self.snapshot_log_bytes = snapshot_log_bytes
        try:
            self.protocol: ProtocolSpec = protocol(config.protocol)
        except (ProtocolError, ImportError) as exc:
            raise NodeError(f"protocol {config.protocol!r} cannot run here: {exc}") from exc
        #: Core trace events to keep for the status (rare ones, e.g. the
        #: straggler detection's): none by default, and then no tracer at all.
        self._trace_events = frozenset(trace_events)
        self.events: deque[tuple[float, str]] = deque(maxlen=TRACE_EVENTS_KEPT)
        #: Whether this node takes snapshots (its protocol's capability).
        self.snapshots = self.protocol.capabilities.snapshots
        #: The counters the driver, the peers and the clients keep.
        self.tally = Tally()
        self.log: DurableLog | None = None
        self.driver: Driver | None = None
        self.peers: Peers | None = None
        self.clients: Clients | None = None
        self.bound_port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._io: concurrent.futures.ThreadPoolExecutor | None = None
        self._server: asyncio.Server | None = None
        self._running = False
        #: Submits and reads of this process (made at start).
        self.calls: Calls | None = None
        self._ready_reported = 0
        #: The member, when the protocol's membership can change (else None).
        self.changes: Changes | None = None
        #: add/remove/replace-replica (a changing membership, once started).
        self.operations: Operations | None = None

    # --------------------------------------------------------------- lifecycle

    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Open the log, rebuild the replica from it, listen, and dial peers."""
        if self._running:
            raise NodeError("already started")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._io = io = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"sdpaxos-log-{self.id}"
        )
        cfg = self.config
        spec = self.protocol
        record_codec = RecordCodec(spec.record_types) if spec.record_types else None
        joins = spec.capabilities.membership
        try:
            log = await loop.run_in_executor(
                io,
                lambda: open_data_dir(
                    cfg,
                    fsync=self.fsync,
                    records=record_codec,
                    bootstrap=self.bootstrap,
                    joins=joins,
                ),
            )
        except BaseException:
            io.shutdown(wait=False)
            raise
        self.log = log
        replica = self._start_replica(log)
        query = getattr(self.state_machine, "query", None)
        self.driver = driver = Driver(
            replica,
            log,
            spec,
            loop=loop,
            io=io,
            outlet=self,
            tally=self.tally,
            metrics=self.metrics,
            query=query,
            tick_ms=cfg.cluster.tick_ms,
            propose_queue_max=cfg.cluster.propose_queue_max,
            snapshot_log_bytes=self.snapshot_log_bytes,
            refusal=self.changes.member.refusal if self.changes is not None else None,
        )
        rng = self._rng
        self.calls = Calls(driver, cfg.cluster, rng, self.metrics)
        self.peers = peers = Peers(
            cfg,
            spec,
            driver,
            tally=self.tally,
            metrics=self.metrics,
            emulator=self.emulator,
            rng=rng,
            on_ping=self._update_metrics,
        )
        self.clients = Clients(
            self.id,
            driver,
            session_table=spec.capabilities.session_table,
            tls=cfg.tls is not None,
            tally=self.tally,
            metrics=self.metrics,
            rng=rng,
            status=lambda: self.status().to_dict(),
            admin=self.admin,
        )
        if cfg.tls is None:
            logger.warning(
                "node %d: TLS is off (insecure = true): peers and clients are not "
                "authenticated and traffic is plaintext",
                self.id,
            )
        me = cfg.me
        host = self.listen_host if self.listen_host is not None else me.host
        self._server = await loop.create_server(
            lambda: Connection(self),
            host,
            me.port,
            ssl=server_context(cfg.tls) if cfg.tls is not None else None,
            reuse_address=True,
        )
        sockets = self._server.sockets
        self.bound_port = sockets[0].getsockname()[1] if sockets else me.port
        self._running = True
        driver.running = True
        peers.start(loop)
        if self.changes is not None:
            self.changes.follow(peers)
            self.operations = Operations(self.changes, self.calls, peers, rng)
        driver.start()
        logger.info("node %d: listening on %s:%d", self.id, host, self.bound_port)

    def _start_replica(self, log: DurableLog) -> CoreReplica:
        """The replica, rebuilt from what the log holds."""
        cfg, spec = self.config, self.protocol
        records = log.load()
        snapshot = log.load_snapshot()
        rng = random.Random(self._rng.getrandbits(64))
        tracer = self._keep_event if self._trace_events and spec.capabilities.tracer else None
        if spec.capabilities.membership:
            self.changes = changes = Changes.start(
                cfg, self.state_machine, records, snapshot, rng, tracer
            )
            return changes.member
        try:
            replica = spec.start_replica(
                cfg.cluster, self.id, self.state_machine, rng, records, snapshot, tracer
            )
        except ProtocolError as exc:
            raise NodeError(f"{cfg.data_dir} holds {exc}") from exc
        if not self.snapshots:
            logger.info(
                "node %d: runs %s; snapshots off (it has none): the log grows unbounded",
                self.id,
                spec.title,
            )
        if records or snapshot is not None:
            logger.info(
                "node %d: restarted from %d records%s",
                self.id,
                len(records),
                f" and a snapshot at slot {snapshot.slot}" if snapshot is not None else "",
            )
        return replica

    async def stop(self) -> None:
        """Stop serving: close connections, finish the log write in flight, close the log."""
        if not self._running:
            return
        self._running = False
        driver, peers, clients = self.driver, self.peers, self.clients
        assert driver is not None and peers is not None and clients is not None
        driver.stop()
        if self._server is not None:
            self._server.close()
        await peers.stop()
        clients.close_all()
        loop = self._loop
        assert loop is not None and self._io is not None
        # Let a write in flight finish: its records may be acknowledged already.
        log = self.log
        if log is not None:
            await loop.run_in_executor(self._io, log.close)
        self._io.shutdown(wait=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        driver.abandon_waiters()
        logger.info("node %d: stopped", self.id)

    # The driver's outlet ------------------------------------------------------

    def send_out(self, out: dict[int, list[Message]]) -> None:
        """The end of a driver turn: clients' answers first (they end a
        command's wait, and a write to a peer on the same machine can wake that
        peer and lose this CPU to it), then the peers' messages."""
        assert self.clients is not None and self.peers is not None
        changes = self.changes
        if changes is not None and changes.changed():
            changes.follow(self.peers)
        self.clients.flush()
        if out:
            self.peers.send(out)

    def failed(self, exc: BaseException) -> None:
        """The log failed: stop acknowledging anything (never lose an acked write)."""
        logger.error("node %d: durable log failed, stopping: %s", self.id, exc)
        self._running = False
        if self._server is not None:
            self._server.close()
        if self.peers is not None:
            self.peers.close_all()
        if self.clients is not None:
            self.clients.close_all()

    # The door: an accepted connection's hello ---------------------------------

    def hello(self, conn: Connection, hello: Hello, identity: tuple[str, int] | None) -> bool:
        """Hand an accepted connection to the peers or the clients, by its hello."""
        if not self._running:
            return False
        assert self.peers is not None and self.clients is not None
        if hello.kind == Kind.NODE:
            return self.peers.hello(conn, hello, identity)
        return self.clients.hello(conn, hello, identity)

    def dialed(self, conn: Connection) -> bool:
        return False  # the node's own dials belong to its peers

    def frame(self, conn: Connection, payload: bytes) -> None:
        """Never called: a connection's hello hands it to its owner first."""
        raise NodeError("a frame before the hello")

    def closed(self, conn: Connection) -> None:
        pass  # closed before its hello: nobody took it

    def reject(self, conn: Connection, reason: str) -> None:
        count_rejected(self.tally, self.metrics, self.id, conn.describe(), reason)

    # ------------------------------------------------------------- properties

    @property
    def running(self) -> bool:
        return self._running

    @property
    def metrics(self) -> Metrics | None:
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        """Metrics may be attached to (or taken from) a running node."""
        self._metrics = metrics
        for part in (self.driver, self.peers, self.clients, self.calls):
            if part is not None:
                part.metrics = metrics

    @property
    def replica(self) -> CoreReplica | None:
        return self.driver.replica if self.driver is not None else None

    @property
    def frames_rejected(self) -> int:
        return self.tally.frames_rejected

    @property
    def fsyncs(self) -> int:
        return self.tally.fsyncs

    @property
    def records_written(self) -> int:
        return self.tally.records_written

    @property
    def reads_at_every_replica(self) -> bool:
        """Does :meth:`read` serve a linearizable read at every replica? Only
        SDPaxos's does (the sequencer's lease); elsewhere :meth:`read` retries
        until its timeout: read through the log (a command that changes nothing)."""
        return self.protocol.capabilities.reads_at_every_replica

    # ------------------------------------------------------------------ admin

    def admin(self, operation: str, argument: Any) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """Operations for operators and tests (:func:`sdpaxos.runtime.admin.run_admin`
        says which); the membership changes answer later (an awaitable)."""
        return run_admin(self, operation, argument)

    async def add_replica(
        self, node_id: int, address: str, region: str, *, timeout_s: float = CHANGE_TIMEOUT_S
    ) -> dict[str, Any]:
        """Add node ``node_id`` (at ``host:port``) as a learner, then, caught up,
        as a member; the new membership once the epoch switched here, or
        :class:`ChangeRefused` saying why not (nothing changed). Also
        :meth:`remove_replica` and :meth:`replace_replica` (one change: the
        cluster is never a member short)."""
        return await self._operations().add_replica(node_id, address, region, timeout_s)

    async def remove_replica(
        self, node_id: int, *, timeout_s: float = CHANGE_TIMEOUT_S
    ) -> dict[str, Any]:
        return await self._operations().remove_replica(node_id, timeout_s)

    async def replace_replica(
        self, old: int, new: int, address: str, region: str, *, timeout_s: float = CHANGE_TIMEOUT_S
    ) -> dict[str, Any]:
        return await self._operations().replace_replica(old, new, address, region, timeout_s)

    def _operations(self) -> Operations:
        if self.operations is None:
            raise NodeError(f"no membership changes: {self.protocol.title}, or not running")
        return self.operations

    # ------------------------------------------------------------ public API

    def _calls(self) -> Calls:
        calls = self.calls
        if calls is None:
            raise NodeError("the node is not running (use `async with Node(...)`)")
        calls.check_running()
        return calls

    async def session(self) -> Session:
        """A new session of this node, for callers who number their commands
        themselves (registered through the log when sessions expire)."""
        return await self._calls().session()

    async def submit(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        wait: WaitName = "ready",
        timeout_s: float | None = None,
    ) -> bytes | None:
        """Replicate ``payload``; return when it is ready (``None``) or executed
        here (the state machine's result). ``key`` names what it writes, so that
        reads of other keys need not wait for it.

        Raises:
            NodeError: the node is not running, or stopped before answering.
            SessionExpired: the session expired; the command was not applied.
            TimeoutError: no answer within ``timeout_s``.
        """
        check_payload(payload)
        wait_of(wait)
        return await self._calls().submit(payload, key, wait, timeout_s)

    def submit_nowait(
        self, payload: bytes, *, key: bytes | None = None, wait: WaitName = "ready"
    ) -> asyncio.Future[bytes | None]:
        """:meth:`submit` without a coroutine per command: the future of its result.

        For front ends that keep thousands of commands in flight (the kv-store's
        Redis port answers a pipeline of them): a task per command costs more
        than the protocol does. The command is proposed now when the proposal
        queue has room, else as soon as it has. Cancelling the future does not
        withdraw the command. No timeout: the caller decides how long to wait.
        """
        check_payload(payload)
        wait_of(wait)
        return self._calls().submit_nowait(payload, key, wait)

    def read_nowait(
        self,
        key: bytes | None = None,
        request: bytes | None = None,
        *,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> asyncio.Future[bytes | None]:
        """:meth:`read` without a coroutine: the future of its answer (or of
        :class:`TimeoutError`). For the same front ends as :meth:`submit_nowait`."""
        return self._calls().read_nowait(key, request, timeout_s)

    async def read(
        self,
        key: bytes | None = None,
        request: bytes | None = None,
        *,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> bytes | None:
        """A linearizable read: waits until every write of ``key`` that was ready
        before the call is applied here (the sequencer's lease answers; section
        3.5), then answers with ``state_machine.query(request or key)`` (None if
        the state machine has no ``query``). ``key=None`` waits for every write.

        Raises:
            NodeError: the node is not running, or stopped before answering.
            TimeoutError: no safe answer within ``timeout_s`` (no sequencer with a lease).
        """
        return await self._calls().read(key, request, timeout_s)

    # ----------------------------------------------------------------- status

    def status(self) -> NodeStatus:
        """Where this node stands (view, sequencer, executed slot, peers, log)."""
        driver, peers = self.driver, self.peers
        if driver is None or peers is None:
            raise NodeError("node not started")
        replica = driver.replica
        core = replica.status()
        executed = replica.executed_upto
        log = self.log
        me = self.config.me
        tally = self.tally
        return NodeStatus(
            id=self.id,
            address=f"{me.host}:{self.bound_port or me.port}",
            region=me.region,
            view=replica.view,
            sequencer=replica.sequencer,
            is_sequencer=replica.is_sequencer,
            has_lease=replica.has_lease(),
            executed_upto=executed,
            snapshot_slot=core.snapshot_slot if self.snapshots else None,
            log_records=len(log) if log is not None else 0,
            log_bytes=log.log_bytes if log is not None else 0,
            snapshot_bytes=log.snapshot_bytes if log is not None else 0,
            fsyncs=tally.fsyncs,
            records_written=tally.records_written,
            frames_rejected=tally.frames_rejected,
            peers=peers.statuses(executed),
            refused=tuple(sorted(peers.refusals.items())),
            stats=counters_of(replica.stats),
            protocol=self.protocol.name,
            snapshots=self.snapshots,
            events=tuple(self.events),
            io=dict(tally.io),
            stages_s=dict(tally.stages_s),
            **(self.changes.status_fields() if self.changes is not None else {}),
        )

    def _keep_event(self, event: str, me: ReplicaId, fields: dict[str, Any]) -> None:
        """The core's tracer, when ``trace_events`` names some: keep those, with the time."""
        if event in self._trace_events:
            self.events.append((clock_ms(), event))

    def _update_metrics(self) -> None:
        metrics = self.metrics
        if metrics is None or self.driver is None:
            return
        self._ready_reported = report_metrics(
            metrics, self.status(), self.protocol.counters, self._ready_reported
        )
