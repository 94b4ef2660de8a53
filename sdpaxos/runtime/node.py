"""A replica as a running node: the core, its durable log, its connections.

Embedding::

    async with Node(config, MyStateMachine()) as node:
        await node.submit(b"payload", key=b"k")              # ready: ordered
        result = await node.submit(b"payload", wait="executed")
        value = await node.read(b"k")                        # linearizable
        print(node.status())

**The driver loop** (one per node, on the event loop; the core never awaits):
a peer's frame is decoded and each message stepped at once; a timer ticks
the core every ``tick_ms``; and once per loop turn (``call_soon``) the node
takes :meth:`Replica.ready` and carries it out in the durability order of
:mod:`sdpaxos.core.ready`:

1. its records (and snapshot) go to the durable log, on one worker thread, so
   the event loop never waits on the disk. While a write is in flight, the
   records of later batches gather and go in the next write: **group commit**,
   one ``fsync`` for many batches;
2. a batch's messages, replies and read results are held until every record of
   that batch *and of every batch before it* is durable, then released in
   batch order. A batch with no records whose predecessors are durable leaves
   at once.

**Messages** for one peer gathered in a loop turn go as one frame (a core
batch), written once; the delay emulator, when configured, says when each frame is
due (:mod:`sdpaxos.runtime.emulator`): the frame is written at once behind a
DUE mark, and the receiving node holds it until then
(:mod:`sdpaxos.runtime.delivery`).

**Exactly-once**: :meth:`Node.submit` numbers commands within a session
(``client_id``, ``seq``); the core executes each ``(client_id, seq)`` once and
answers a retry with the first result. Remote clients
(:mod:`sdpaxos.runtime.client`) keep their session across reconnects and
resubmit the same ``(client_id, seq)``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import random
import time
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn, Protocol

from sdpaxos.core.app import StateMachine
from sdpaxos.core.errors import LocalProtocolError, Overloaded
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import ReadResult, Ready, Reply, ReplyKind
from sdpaxos.core.replica import Replica
from sdpaxos.core.sessions import decode_session_id, encode_session_id, registration
from sdpaxos.core.storage import Record, Snapshot
from sdpaxos.core.types import Command, ReplicaId, Wait
from sdpaxos.protocols import ProtocolError, ProtocolSpec, protocol
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.config import NodeConfig
from sdpaxos.runtime.datadir import open_data_dir
from sdpaxos.runtime.delivery import DelayedFrames, clock_token, due_here_s, make_alarm
from sdpaxos.runtime.emulator import LinkEmulator, parse_partition
from sdpaxos.runtime.log import DurableLog
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.tls import client_context, server_context
from sdpaxos.runtime.transport import SEND_BUFFER_BYTES_MAX, Connection
from sdpaxos.wire.codec import MESSAGES_PER_BATCH_MAX, VERSION, CodecError, PackedMessages
from sdpaxos.wire.codec import decode_batch as _decode_batch
from sdpaxos.wire.codec import encode_batch as _encode_batch
from sdpaxos.wire.framing import frame
from sdpaxos.wire.records import RecordCodec

_perf = time.perf_counter
#: The delay emulator's clock (its due times, the DUE marks); tests replace it.
_monotonic = time.monotonic

__all__ = ["Node", "NodeError", "NodeStatus", "PeerStatus", "Session", "SessionExpired"]

logger = logging.getLogger(__name__)

#: How often each connected peer is pinged (round trip and its executed slot).
PING_INTERVAL_S = 1.0
#: The driver's counters in :attr:`NodeStatus.io`, in the order tools print them.
IO_COUNTERS = (
    "turns",
    "peer_frames_in",
    "peer_frames_out",
    "peer_writes",
    "messages_in",
    "messages_out",
    "client_frames_in",
    "client_frames_out",
    "client_writes",
)
#: The parts of the node's loop whose seconds it keeps (:attr:`NodeStatus.stages_s`).
STAGES = ("decode", "step", "client", "ready", "carry_out", "log", "send", "answer")
#: Bytes of one peer's frames a node holds for the delay emulator; past this a
#: new frame is dropped and counted, as a connection drops unsent bytes (the
#: same bound as :data:`~sdpaxos.runtime.transport.SEND_BUFFER_BYTES_MAX`).
HELD_BYTES_MAX = SEND_BUFFER_BYTES_MAX
#: Reconnect backoff: first wait, cap (full jitter between 0 and the current step).
RECONNECT_BACKOFF_MIN_S = 0.05
RECONNECT_BACKOFF_MAX_S = 2.0
#: A dial that has not connected (and finished its TLS handshake) by then is abandoned.
DIAL_TIMEOUT_S = 5.0
#: How often a dialler looks whether its connection is still up.
_DIAL_CHECK_S = 0.05
#: Idle local sessions kept for reuse by :meth:`Node.submit`.
SESSIONS_IDLE_MAX = 4096
#: Requests one client connection may have waiting before the node stops reading it.
CLIENT_REQUESTS_PENDING_MAX = 8192
#: A read the sequencer could not serve is asked again after this long ...
READ_RETRY_S = 0.02
#: ... until this long has passed; then the client is told to retry.
READ_TIMEOUT_S = 5.0
#: ``ready()`` calls in one flush before yielding to the loop (a batch may
#: leave more deferred work, e.g. an execution that unblocks another).
READY_CALLS_PER_FLUSH_MAX = 64
#: A snapshot is requested when the log holds this many bytes (``None``: never).
SNAPSHOT_LOG_BYTES_DEFAULT = 256 << 20
#: A pong answering a ping older than this (or from the future) is a lie.
_PONG_RTT_MS_MAX = 3_600_000.0
_WaitName = Literal["ready", "executed"]
#: Trace events kept for the status (``trace_events``): the latest this many.
TRACE_EVENTS_KEPT = 256
#: Protocols whose ``read`` serves a linearizable read at every replica (SDPaxos:
#: through the sequencer's lease, section 3.5). A baseline's answers at most at
#: its leader (Multi-Paxos) or nowhere (Mencius): reads go through the log there.
_READS_AT_EVERY_REPLICA = frozenset({"sdpaxos"})
#: Protocols whose core keeps no session table (EPaxos remembers every executed
#: ``(client_id, seq)`` for good and has no expiring sessions). A registration
#: proposed there would reach the state machine as an empty command, and its
#: "session id" would be whatever the state machine answered; the node answers
#: it itself with a random id instead, as :meth:`Node.session` does whenever
#: sessions do not expire.
_NO_SESSION_TABLE = frozenset({"epaxos"})
#: A codec's ``encode_batch``: messages for one peer, and the send's packed messages.
EncodeBatch = Callable[[list[Any], PackedMessages], bytes]


class CoreReplica(Protocol):
    """What a node needs of any protocol's replica: the driving API of
    :class:`~sdpaxos.core.replica.Replica` (:mod:`sdpaxos.protocols`).

    A command proposed with ``Wait.EXECUTED`` is answered once, EXECUTED with
    its result, never READY first: the node hands each reply to whoever waits
    for that ``(client_id, seq)`` and forgets the wait (every protocol's core
    keeps that contract; each protocol's runtime test submits with
    ``wait="executed"`` and checks the results).

    Everything else is a capability the node looks up once, with a fallback,
    so that a protocol without it still runs (see :meth:`Node.status`):

    - ``proposals_waiting`` (int): proposals queued at this replica; the node
      stops taking proposals while it is above half of ``propose_queue_max``.
      Without it, the node takes them again at every loop turn and the core's
      :class:`~sdpaxos.core.errors.Overloaded` refuses what does not fit.
    - ``executed_upto``, ``view``, ``sequencer``, ``is_sequencer``,
      ``has_lease()``: status fields, None when missing.
    - ``request_snapshot()``: snapshots (by log size and by the ``snapshot``
      admin operation); without it there are none and the log grows.
    - ``transfer_sequencer(target)``: the ``transfer_sequencer`` admin operation.
    """

    def propose(self, command: Command, wait: Wait = Wait.READY) -> None: ...
    def step(self, message: Any, now_ms: float) -> None: ...
    def tick(self, now_ms: float) -> None: ...
    def ready(self) -> Ready: ...
    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None: ...
    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None: ...
    def status(self) -> Any: ...

    @property
    def stats(self) -> Any: ...


class NodeError(Exception):
    """The node cannot serve: not started, stopped, or its log failed."""


class SessionExpired(Exception):
    """The command's session expired before it executed; it was not applied."""


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """This node's view of one other replica."""

    id: int
    connected: bool
    #: Latest measured round trip (ping/pong over the same connection), or None.
    rtt_ms: float | None
    #: The peer's executed prefix as of its last pong, and how far it trails ours.
    executed_upto: int | None
    lag_slots: int | None
    #: Bytes queued to it (kernel send buffer not yet taken) and frames dropped.
    queue_bytes: int
    frames_dropped: int
    #: Frames to it that the delay emulator said were not due yet (sent behind
    #: a DUE mark for the peer to hold).
    frames_delayed: int


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """Where a node stands, for people (``python -m sdpaxos status``) and tests."""

    id: int
    address: str
    region: str
    #: Fields a protocol lacks are None (Mencius has no view, no sequencer, no
    #: lease; no baseline has snapshots): see :meth:`Node.status`.
    view: int | None
    sequencer: int | None
    is_sequencer: bool | None
    has_lease: bool | None
    executed_upto: int | None
    snapshot_slot: int | None
    log_records: int
    log_bytes: int
    snapshot_bytes: int
    fsyncs: int
    records_written: int
    frames_rejected: int
    peers: tuple[PeerStatus, ...]
    stats: dict[str, int] = field(default_factory=dict)
    #: The replication protocol (:data:`sdpaxos.protocols.PROTOCOL_NAMES`), and
    #: whether this node takes snapshots (only SDPaxos has them).
    protocol: str = "sdpaxos"
    snapshots: bool = True
    #: The latest core trace events of the kinds the node was asked to keep
    #: (``trace_events``), each ``(time.monotonic() in ms, name)``.
    events: tuple[tuple[float, str], ...] = ()
    #: What the driver did since the start (:data:`IO_COUNTERS`), for working
    #: out where a node's CPU goes (per command: divide by the commands
    #: answered): ``turns`` (flushes of ``ready()``), ``peer_frames_in``/``_out``
    #: and ``messages_in``/``_out`` (core batches and the messages in them, not
    #: pings), ``peer_writes`` (the flushes of a peer connection's buffer that
    #: had something in it: the emulator may still delay or drop the bytes, and
    #: one write is not exactly one TLS record or system call),
    #: ``client_frames_in``/``_out`` and ``client_writes``.
    io: dict[str, int] = field(default_factory=dict)
    #: Seconds spent since the start in each part of the loop (:data:`STAGES`),
    #: on ``time.perf_counter``: ``decode`` (peer frames into messages),
    #: ``step`` (the core's handlers), ``client`` (client frames, decoded and
    #: proposed; a status request is answered outside every stage), ``ready``
    #: (the core's ``ready()``), ``carry_out`` (its records and answers: the
    #: log append when it is inline, with fsync off),
    #: ``send`` (encoding peer frames and writing them, or handing them to the
    #: delay emulator), ``answer`` (encoding and writing client answers);
    #: ``log`` is the appends' own time, inside ``carry_out`` when inline and
    #: on the log thread otherwise. Wall time, not CPU time: a stage that
    #: wakes another process on this machine may lose the CPU to it (writing
    #: to a local client does). What a commit takes beyond their sum at one
    #: command in flight is the loop's own work (TLS, system calls, waking
    #: up) and the network's: ``bench.runtime_latency`` shows both.
    stages_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Peer:
    """Per-peer state: its connection, its measurements, the frames to it the emulator delayed."""

    __slots__ = (
        "conn",
        "dial_task",
        "executed",
        "frames_delayed",
        "id",
        "rtt_ms",
    )

    def __init__(self, peer_id: int) -> None:
        self.id = peer_id
        self.conn: Connection | None = None
        self.rtt_ms: float | None = None
        self.executed: int | None = None
        self.dial_task: asyncio.Task[None] | None = None
        self.frames_delayed = 0


class _Held:
    """A batch's outputs waiting for its records to be durable."""

    __slots__ = ("messages", "need", "reads", "replies")

    def __init__(
        self,
        need: int,
        messages: list[tuple[ReplicaId, Message]],
        replies: list[Reply],
        reads: list[ReadResult],
    ) -> None:
        self.need = need
        self.messages = messages
        self.replies = replies
        self.reads = reads


_OVERLOADED = "overloaded: the proposal queue is full"
# The client path runs once per command: enum members read through their class
# cost more than a module global, and a named tuple's own constructor is a
# Python function (tuple.__new__ builds the same value for half the price).
_READY, _EXECUTED = Wait.READY, Wait.EXECUTED
#: What a client is told, by the kind of the core's reply.
_CODE_OF_KIND = {
    ReplyKind.READY: rf.Code.READY,
    ReplyKind.EXECUTED: rf.Code.EXECUTED,
    ReplyKind.SESSION_EXPIRED: rf.Code.SESSION_EXPIRED,
}
#: A client request's start time when no metrics were kept as it came in.
_NOT_TIMED = -1.0
_new = tuple.__new__
#: Who waits for a command's reply: a local caller's callback (called with the
#: reply, or with None when the node stops first), or a client connection's
#: request ``(connection, request_id, started_ms)``.
Waiter = Callable[[Reply | None], None] | tuple[Connection, int, float]


class Session:
    """A client session of a node: numbers its commands for exactly-once execution.

    One command at a time (the core's session rule); :meth:`Node.submit` keeps a
    pool of them, so callers need one only to control numbering themselves.
    """

    def __init__(self, node: Node, client_id: int) -> None:
        self.node = node
        self.client_id = client_id
        self.seq = 0
        self.busy = False

    async def submit(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        wait: _WaitName = "ready",
        timeout_s: float | None = None,
    ) -> bytes | None:
        """Propose ``payload`` as this session's next command and wait for it."""
        if self.busy:
            raise LocalProtocolError("a session has one command outstanding at a time")
        self.busy = True
        try:
            self.seq += 1
            cmd = Command(self.client_id, self.seq, payload, key)
            reply = await self.node._propose(cmd, _wait_of(wait), timeout_s)
        finally:
            self.busy = False
        if reply.kind == ReplyKind.SESSION_EXPIRED:
            raise SessionExpired(f"session {self.client_id} expired; the command was not applied")
        return reply.result


def _wait_of(wait: str) -> Wait:
    if wait == "ready":
        return Wait.READY
    if wait == "executed":
        return Wait.EXECUTED
    raise ValueError(f'wait must be "ready" or "executed", got {wait!r}')


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
            timed, in :attr:`NodeStatus.events` (SDPaxos only: the baselines
            have no tracer). Meant for rare events, such as the straggler
            detection's ``StragglerSuspect`` and ``StragglerViewChange``: with
            any name given, the core calls the tracer for every event.
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
            emulator = LinkEmulator.from_profile(
                config.node_id,
                config.emulator.profile,
                [r.region for r in config.replicas],
                config.emulator.settings,
                random.Random(self._rng.getrandbits(64)) if rng is not None else None,
            )
        self.emulator = emulator
        self.metrics = metrics
        self.listen_host = listen_host
        self.snapshot_log_bytes = snapshot_log_bytes
        try:
            self.protocol: ProtocolSpec = protocol(config.protocol)
        except (ProtocolError, ImportError) as exc:
            raise NodeError(f"protocol {config.protocol!r} cannot run here: {exc}") from exc
        if self.protocol.name == "sdpaxos":  # the module functions: the fast path
            self._encode_batch: EncodeBatch = _encode_batch
            self._decode_batch: Callable[[bytes], list[Any]] = _decode_batch
        else:
            self._encode_batch = self.protocol.codec.encode_batch
            self._decode_batch = self.protocol.codec.decode_batch
        #: The message field naming the sender (``src``; Mencius says ``sender``).
        self._src_field = (
            "sender"
            if self.protocol.message_types
            and "sender" in getattr(self.protocol.message_types[0], "__dataclass_fields__", {})
            else "src"
        )
        #: Whether this node answers registrations itself (no session table).
        self._registers_locally = self.protocol.name in _NO_SESSION_TABLE
        #: Core trace events to keep for the status (rare ones, e.g. the
        #: straggler detection's): none by default, and then no tracer at all.
        self._trace_events = frozenset(trace_events)
        self.events: deque[tuple[float, str]] = deque(maxlen=TRACE_EVENTS_KEPT)
        #: Whether this node takes snapshots: see :class:`CoreReplica`.
        self.snapshots = False
        self.replica: CoreReplica | None = None
        self.log: DurableLog | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._io: concurrent.futures.ThreadPoolExecutor | None = None
        self._server: asyncio.Server | None = None
        self._peers: dict[int, _Peer] = {
            r.id: _Peer(r.id) for r in config.replicas if r.id != config.node_id
        }
        self._clients: set[Connection] = set()
        self._running = False
        self._failed: BaseException | None = None
        # Driver state.
        self._flush_scheduled = False
        self._tick_timer: asyncio.TimerHandle | None = None
        self._ping_timer: asyncio.TimerHandle | None = None
        self._records_seq = 0
        self._durable_seq = 0
        self._unsaved: list[Record] = []
        self._unsaved_snapshot: Snapshot | None = None
        self._writing = False
        #: Append inline (on the loop) when the log does not fsync; a test that
        #: holds the log thread back turns it off.
        self.inline_writes = True
        self._held: deque[_Held] = deque()
        self._out: dict[int, list[Message]] = {}
        self._dirty_conns: set[Connection] = set()
        self._waiting: dict[tuple[int, int], list[Waiter]] = {}
        self._reads: dict[int, Callable[[bool], None]] = {}
        self._read_ids = 0
        self._sessions: list[Session] = []
        self._room: asyncio.Event | None = None
        self._snapshot_asked = False
        # Counters.
        self.frames_rejected = 0
        self.fsyncs = 0
        #: See :attr:`NodeStatus.io`.
        self.io_counts: dict[str, int] = dict.fromkeys(IO_COUNTERS, 0)
        #: See :attr:`NodeStatus.stages_s`.
        self.stages_s: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self.records_written = 0
        self.bound_port: int | None = None
        self._ready_reported = 0
        #: Peers' frames held until the delay emulator says they are due (made
        #: by :meth:`start` when the emulator is configured; a node without it
        #: refuses a DUE mark).
        self._delayed: DelayedFrames | None = None
        #: The name of this process's monotonic clock, sent in DUE marks.
        self._clock_token = clock_token()

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
        self._room = asyncio.Event()
        self._io = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"sdpaxos-log-{self.id}"
        )
        cfg = self.config
        spec = self.protocol
        record_codec = RecordCodec(spec.record_types) if spec.record_types else None
        try:
            self.log = await loop.run_in_executor(
                self._io,
                lambda: open_data_dir(
                    cfg, fsync=self.fsync, records=record_codec, bootstrap=self.bootstrap
                ),
            )
        except BaseException:
            self._io.shutdown(wait=False)
            raise
        records = self.log.load()
        snapshot = self.log.load_snapshot()
        rng = random.Random(self._rng.getrandbits(64))
        if spec.name == "sdpaxos":  # the one protocol with snapshots to restore
            self.replica = Replica(
                cfg.cluster,
                self.id,
                self.state_machine,
                rng=rng,
                records=records,
                snapshot=snapshot,
                tracer=self._keep_event if self._trace_events else None,
            )
        else:
            if snapshot is not None:
                raise NodeError(f"{cfg.data_dir} holds a snapshot, which {spec.title} cannot use")
            self.replica = spec.make_replica(
                cfg.cluster, self.id, self.state_machine, rng, False, records or None
            )
        self.snapshots = callable(getattr(self.replica, "request_snapshot", None))
        if spec.name != "sdpaxos" or not self.snapshots:
            logger.info(
                "node %d: runs %s%s",
                self.id,
                spec.title,
                "" if self.snapshots else "; snapshots off (it has none): the log grows unbounded",
            )
        if records or snapshot is not None:
            logger.info(
                "node %d: restarted from %d records%s",
                self.id,
                len(records),
                f" and a snapshot at slot {snapshot.slot}" if snapshot is not None else "",
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
        if self.emulator is not None:
            self._delayed = DelayedFrames(
                self._deliver_held, lambda wake: make_alarm(loop, wake), HELD_BYTES_MAX
            )
        self._running = True
        for peer in self._peers.values():
            if peer.id > self.id:
                peer.dial_task = loop.create_task(self._dial(peer))
        self._tick_timer = loop.call_later(cfg.cluster.tick_ms / 1000, self._on_tick)
        self._ping_timer = loop.call_later(PING_INTERVAL_S, self._on_ping)
        logger.info("node %d: listening on %s:%d", self.id, host, self.bound_port)
        self._kick()

    async def stop(self) -> None:
        """Stop serving: close connections, finish the log write in flight, close the log."""
        if not self._running:
            return
        self._running = False
        for timer in (self._tick_timer, self._ping_timer):
            if timer is not None:
                timer.cancel()
        if self._server is not None:
            self._server.close()
        tasks = [p.dial_task for p in self._peers.values() if p.dial_task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._delayed is not None:
            self._delayed.close()
        for peer in self._peers.values():
            if peer.conn is not None:
                peer.conn.close()
        for conn in list(self._clients):
            conn.close()
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
        self._abandon_waiters()
        logger.info("node %d: stopped", self.id)

    def _fail(self, exc: BaseException) -> None:
        """The log failed: stop acknowledging anything (never lose an acked write)."""
        logger.error("node %d: durable log failed, stopping: %s", self.id, exc)
        self._failed = exc
        self._running = False
        if self._server is not None:
            self._server.close()
        for peer in self._peers.values():
            if peer.conn is not None:
                peer.conn.close()
        for conn in list(self._clients):
            conn.close()
        self._abandon_waiters()

    def _abandon_waiters(self) -> None:
        """Wake everyone still waiting: no answer will come from this node."""
        waiting, self._waiting = self._waiting, {}
        for waiters in waiting.values():
            for w in waiters:
                if not isinstance(w, tuple):
                    w(None)  # a client's connection is closed: it retries elsewhere
        reads, self._reads = self._reads, {}
        for done in reads.values():
            done(False)

    @property
    def running(self) -> bool:
        return self._running

    @property
    def reads_at_every_replica(self) -> bool:
        """Does :meth:`read` serve a linearizable read at every replica?

        Only SDPaxos's does (the sequencer's lease). Multi-Paxos answers at its
        leader only, Mencius nowhere: elsewhere :meth:`read` retries until its
        timeout. There, read through the log: submit a command that the state
        machine answers without changing anything (the kv-store does).
        """
        return self.protocol.name in _READS_AT_EVERY_REPLICA

    def _now_ms(self) -> float:
        assert self._loop is not None
        return self._loop.time() * 1000.0

    # -------------------------------------------------------------- the driver

    def _kick(self) -> None:
        """Carry out ``ready()`` once this loop turn (coalesces many events)."""
        if not self._flush_scheduled and self._running:
            self._flush_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        replica = self.replica
        if replica is None or not self._running:
            return
        self.io_counts["turns"] += 1
        stages = self.stages_s
        for _ in range(READY_CALLS_PER_FLUSH_MAX):
            t0 = _perf()
            rd = replica.ready()
            t1 = _perf()
            stages["ready"] += t1 - t0
            if not rd:
                break
            self._carry_out(rd)
            stages["carry_out"] += _perf() - t1
        else:
            self._kick()
        self._send_out()
        room = self._room
        if room is not None and not room.is_set():
            waiting: int | None = getattr(replica, "proposals_waiting", None)
            if waiting is None or waiting < self.config.cluster.propose_queue_max // 2:
                room.set()

    def _carry_out(self, rd: Ready) -> None:
        if rd.persist or rd.snapshot is not None:
            self._unsaved.extend(rd.persist)
            if rd.snapshot is not None:
                self._unsaved_snapshot = rd.snapshot
            self._records_seq += 1
            if not self._writing:
                self._start_write()
        if not rd.messages and not rd.replies and not rd.reads:
            return
        if not self._held and self._durable_seq >= self._records_seq:
            self._release(rd.messages, rd.replies, rd.reads)
        else:
            self._held.append(_Held(self._records_seq, rd.messages, rd.replies, rd.reads))

    def _start_write(self) -> None:
        records, snapshot = self._unsaved, self._unsaved_snapshot
        self._unsaved, self._unsaved_snapshot = [], None
        seq = self._records_seq
        self._writing = True
        assert self._loop is not None and self._io is not None and self.log is not None
        if self.inline_writes and not self.log.fsync and snapshot is None:
            # Without fsync an append is a buffered write of microseconds: the
            # hand-off to the log thread and back would cost more than it saves.
            future: asyncio.Future[tuple[float, int]] = self._loop.create_future()
            try:
                future.set_result(self._write(records, None))
            except Exception as exc:  # the log failed: _written stops the node
                future.set_exception(exc)
            self._written(future, seq, len(records), inline=True)
            return
        future = self._loop.run_in_executor(self._io, self._write, records, snapshot)
        future.add_done_callback(lambda f: self._written(f, seq, len(records)))

    def _write(self, records: list[Record], snapshot: Snapshot | None) -> tuple[float, int]:
        """On the log thread: append (one fsync), then the snapshot.

        Returns the seconds it took and the bytes appended."""
        log = self.log
        assert log is not None
        started = time.perf_counter()
        nbytes = log.append(records) if records else 0
        if snapshot is not None:
            log.save_snapshot(snapshot)
        return time.perf_counter() - started, nbytes

    def _written(
        self, future: asyncio.Future[tuple[float, int]], seq: int, count: int, inline: bool = False
    ) -> None:
        """The records up to ``seq`` are durable: release what waited for them.

        ``inline``: called from :meth:`_carry_out` itself (no fsync), whose
        caller sends what was released at the end of its loop turn, so that
        the frames of several ready batches still leave together."""
        self._writing = False
        exc = future.exception()
        if exc is not None:
            self._fail(exc)
            return
        t0 = _perf()
        stages = self.stages_s
        self.fsyncs += 1
        self.records_written += count
        seconds, nbytes = future.result()
        stages["log"] += seconds
        if self.metrics is not None:
            self.metrics.observe_fsync_s(seconds, count, nbytes)
        self._durable_seq = seq
        held = self._held
        while held and held[0].need <= seq:
            h = held.popleft()
            self._release(h.messages, h.replies, h.reads)
        if (self._unsaved or self._unsaved_snapshot is not None) and self._running:
            self._start_write()
        if not inline:
            # On its own loop turn (the log thread's write is done): timed
            # here; inline, the caller's turn counts it.
            stages["carry_out"] += _perf() - t0
            self._send_out()
        self._maybe_snapshot()

    def _release(
        self,
        messages: list[tuple[ReplicaId, Message]],
        replies: list[Reply],
        reads: list[ReadResult],
    ) -> None:
        out = self._out
        for dst, msg in messages:
            q = out.get(dst)
            if q is None:
                out[dst] = [msg]
            else:
                q.append(msg)
        if replies:
            waiting = self._waiting
            answer = self._answer
            timed = self.metrics is not None
            code_of = _CODE_OF_KIND.get
            for reply in replies:
                waiters = waiting.pop((reply.client_id, reply.seq), None)
                if waiters is not None:
                    for w in waiters:
                        if type(w) is tuple:  # a client connection's request
                            # (written out here: this runs once per command)
                            conn, request_id, started_ms = w
                            kind = reply.kind
                            if timed and started_ms != _NOT_TIMED:
                                self._observe_latency(kind, started_ms)
                            answer(
                                conn,
                                request_id,
                                code_of(kind, rf.Code.SESSION_EXPIRED),
                                reply.result,
                            )
                        else:
                            w(reply)  # type: ignore[operator]
        for rr in reads:
            done = self._reads.pop(rr.read_id, None)
            if done is not None:
                done(rr.ok)

    def _send_out(self) -> None:
        out = self._out
        io = self.io_counts
        stages = self.stages_s
        # Clients' answers first: they end a command's wait, and a write to a
        # peer on the same machine can wake that peer and lose this CPU to it.
        dirty = self._dirty_conns
        if dirty:
            t0 = _perf()
            self._dirty_conns = set()
            for conn in dirty:
                answers = conn.answers
                if answers:
                    conn.answers = []
                    if len(answers) == 1:
                        conn.send(rf.encode_runtime(answers[0]))
                        io["client_frames_out"] += 1
                    else:
                        for k in range(0, len(answers), rf.MANY_ITEMS_MAX):
                            chunk = tuple(answers[k : k + rf.MANY_ITEMS_MAX])
                            conn.send(rf.encode_runtime(rf.ReplyMany(chunk)))
                            io["client_frames_out"] += 1
                if conn.out:
                    io["client_writes"] += 1
                conn.flush()
            stages["answer"] += _perf() - t0
        if out:
            t0 = _perf()
            self._out = {}
            packed: PackedMessages = {}
            for dst, msgs in out.items():
                peer = self._peers.get(dst)
                if peer is None:
                    continue
                io["messages_out"] += len(msgs)
                for k in range(0, len(msgs), MESSAGES_PER_BATCH_MAX):
                    for payload in _encode(
                        self._encode_batch, msgs[k : k + MESSAGES_PER_BATCH_MAX], packed
                    ):
                        io["peer_frames_out"] += 1
                        self._send_peer(peer, payload)
                if peer.conn is not None and peer.conn.out:
                    io["peer_writes"] += 1
                self._flush_peer(peer)
            stages["send"] += _perf() - t0

    def _send_peer(self, peer: _Peer, payload: bytes) -> None:
        conn = peer.conn
        if conn is None:
            return
        conn.send(payload)

    def _flush_peer(self, peer: _Peer) -> None:
        """Write the frames queued for ``peer``, behind a DUE mark when the
        emulator delays them (the peer holds them until then), or drop them
        when it says a partition cuts the link."""
        conn = peer.conn
        if conn is None or not conn.out:
            return
        emulator = self.emulator
        if emulator is None or not emulator.active:
            conn.flush()
            return
        out = conn.out
        # The emulator's times are on time.monotonic(), not on the loop's clock,
        # which under uvloop counts whole milliseconds (see sdpaxos.runtime.delivery).
        now_s = _monotonic()
        at_ms = emulator.schedule(peer.id, sum(map(len, out)), now_s * 1000.0)
        at_s = now_s if at_ms is None else at_ms / 1000.0
        if at_ms is None or at_s - now_s > rf.DUE_AHEAD_S_MAX:
            # Cut by a partition, or queued behind a bandwidth cap for longer
            # than a mark may say (the peer would refuse it): lost on the link.
            conn.out = []
            conn.frames_dropped += len(out)
            return
        if at_s > now_s:
            peer.frames_delayed += len(out)
            out.insert(0, frame(rf.encode_runtime(rf.Due(now_s, at_s, self._clock_token))))
        conn.flush()

    def _deliver_held(self, peer_id: int, payload: bytes, frames: int) -> None:
        """A held frame from ``peer_id`` is due: handle it as if it arrived now.
        A frame refused now closes the peer's connection, as on arrival."""
        try:
            self._peer_frame(peer_id, payload)
        except (CodecError, rf.FrameError) as exc:
            self._refuse_peer(peer_id, str(exc))
        except Exception as exc:  # a bug of ours: never let a peer's frame crash the node
            logger.exception("node %d: error handling a held frame from node %d", self.id, peer_id)
            self._refuse_peer(peer_id, f"internal error: {type(exc).__name__}: {exc}")

    def _refuse_peer(self, peer_id: int, reason: str) -> None:
        conn = self._peers[peer_id].conn
        if conn is not None and conn.open:
            conn.refuse(reason)
        else:  # the connection it came on is gone: count and log it all the same
            self.frames_rejected += 1
            logger.warning("node %d: dropped a frame of node %d: %s", self.id, peer_id, reason)
            if self.metrics is not None:
                self.metrics.frame_rejected(_reject_reason(reason))

    def _on_tick(self) -> None:
        if not self._running or self.replica is None:
            return
        self.replica.tick(self._now_ms())
        self._kick()
        assert self._loop is not None
        self._tick_timer = self._loop.call_later(self.config.cluster.tick_ms / 1000, self._on_tick)

    def _on_ping(self) -> None:
        if not self._running:
            return
        ping = rf.encode_runtime(rf.Ping(_clock_ms()))
        for peer in self._peers.values():
            if peer.conn is not None and peer.conn.kind is not None:
                self._send_peer(peer, ping)
                self._flush_peer(peer)
        if self.metrics is not None:
            self._update_metrics()
        assert self._loop is not None
        self._ping_timer = self._loop.call_later(PING_INTERVAL_S, self._on_ping)

    def _maybe_snapshot(self) -> None:
        log, limit, replica = self.log, self.snapshot_log_bytes, self.replica
        if log is None or limit is None or replica is None or not self.snapshots:
            return
        if log.log_bytes >= limit and not self._snapshot_asked:
            self._snapshot_asked = True
            replica.request_snapshot()  # type: ignore[attr-defined]  # self.snapshots
            self._kick()
        elif log.log_bytes < limit // 2:
            self._snapshot_asked = False

    # ----------------------------------------------------------- connections

    async def _dial(self, peer: _Peer) -> None:
        """Keep one connection to ``peer`` open (we dial peers with higher ids)."""
        cfg = self.config
        address = cfg.replicas[peer.id]
        ssl_ctx = client_context(cfg.tls) if cfg.tls is not None else None
        loop = asyncio.get_running_loop()
        backoff = RECONNECT_BACKOFF_MIN_S
        # SDPaxos nodes say hello without a protocol name, as before there was a choice.
        name = self.protocol.name
        hello = rf.Hello(rf.Kind.NODE, self.id, None if name == "sdpaxos" else name)
        while self._running:
            conn = peer.conn
            if conn is not None and conn.open:
                backoff = RECONNECT_BACKOFF_MIN_S
                await asyncio.sleep(_DIAL_CHECK_S)
                continue
            try:
                await asyncio.wait_for(
                    loop.create_connection(
                        lambda: Connection(self, hello, peer.id),
                        address.host,
                        address.port,
                        ssl=ssl_ctx,
                        server_hostname=address.host if ssl_ctx is not None else None,
                    ),
                    DIAL_TIMEOUT_S,
                )
            except (TimeoutError, OSError) as exc:
                logger.debug("node %d: dial %d failed: %s", self.id, peer.id, exc)
            # Up or not, wait a jittered backoff before looking again: a peer
            # that accepts and drops at once must not be dialled in a tight loop.
            await asyncio.sleep(self._rng.uniform(0, backoff))
            backoff = min(backoff * 2, RECONNECT_BACKOFF_MAX_S)

    def dialed(self, conn: Connection) -> bool:
        peer = self._peers.get(conn.peer_id)
        if peer is None or not self._running:
            return False
        if self.config.tls is not None and conn.identity != ("node", peer.id):
            self.reject(conn, f"dialled node {peer.id}, certificate says {conn.identity}")
            return False
        conn.kind = rf.Kind.NODE
        self._peer_up(peer, conn)
        return True

    def _peer_up(self, peer: _Peer, conn: Connection) -> None:
        old = peer.conn
        peer.conn = conn
        if old is not None and old is not conn:
            old.kind = None  # its close must not unset the new one
            old.close()
        logger.info("node %d: connected to node %d", self.id, peer.id)
        if self.metrics is not None:
            self.metrics.set_peer_connected(peer.id, True)

    # ConnectionOwner ---------------------------------------------------------

    def hello(self, conn: Connection, hello: rf.Hello, identity: tuple[str, int] | None) -> bool:
        if not self._running:
            return False
        tls = self.config.tls is not None
        if hello.kind == rf.Kind.NODE:
            peer = self._peers.get(hello.id)
            if peer is None:
                self.reject(conn, f"hello from node {hello.id}, not a peer of node {self.id}")
                return False
            if tls and identity != ("node", hello.id):
                self.reject(conn, f"hello says node {hello.id}, certificate says {identity}")
                return False
            theirs = hello.protocol or "sdpaxos"
            if theirs != self.protocol.name:
                # Its messages would decode as ours, or not at all: never let it in.
                self.reject(
                    conn,
                    f"hello from node {hello.id} running protocol {theirs!r};"
                    f" this node runs {self.protocol.name!r}",
                )
                return False
            conn.kind = rf.Kind.NODE
            conn.peer_id = hello.id
            self._peer_up(peer, conn)
            return True
        if tls and (identity is None or identity[0] != "client"):
            self.reject(conn, f"a client hello needs a client certificate, got {identity}")
            return False
        conn.kind = rf.Kind.CLIENT
        conn.peer_id = hello.id
        self._clients.add(conn)
        return True

    def closed(self, conn: Connection) -> None:
        if conn.kind == rf.Kind.NODE:
            peer = self._peers.get(conn.peer_id)
            if peer is not None and peer.conn is conn:
                peer.conn = None
                logger.info("node %d: lost node %d", self.id, peer.id)
                if self.metrics is not None:
                    self.metrics.set_peer_connected(peer.id, False)
        else:
            self._clients.discard(conn)
            self._dirty_conns.discard(conn)

    def reject(self, conn: Connection, reason: str) -> None:
        self.frames_rejected += 1
        logger.warning("node %d: dropped %s: %s", self.id, conn.describe(), reason)
        if self.metrics is not None:
            self.metrics.frame_rejected(_reject_reason(reason))

    def frame(self, conn: Connection, payload: bytes) -> None:
        replica = self.replica
        if replica is None or not self._running:
            return
        if conn.kind == rf.Kind.NODE:
            src = conn.peer_id
            if payload and payload[0] == rf.RUNTIME_PREFIX:
                f = rf.decode_runtime(payload)
                if type(f) is rf.Due:
                    if self._delayed is None:
                        raise rf.FrameError("a DUE mark, but this node runs without the emulator")
                    now_s = _monotonic()
                    conn.due_s = due_here_s(f.sent_s, f.due_s, f.clock, now_s, self._clock_token)
                    return
            delayed = self._delayed
            if delayed is not None and (
                delayed.held(src) or (conn.due_s and conn.due_s > _monotonic())
            ):
                delayed.send(src, conn.due_s, payload, 1)
                return
            self._peer_frame(src, payload)
            return
        self.io_counts["client_frames_in"] += 1
        t0 = _perf()
        cf = rf.decode_runtime(payload)
        if type(cf) is rf.Status:
            self._answer_status(conn, cf.request_id)
            return
        try:
            self._client_frame(conn, cf)
        finally:
            self.stages_s["client"] += _perf() - t0

    def _peer_frame(self, src: int, payload: bytes) -> None:
        """One frame from peer ``src``, due now: a core batch, a ping or a pong."""
        replica = self.replica
        if replica is None or not self._running:
            return
        if payload and payload[0] == VERSION:  # an empty frame is refused below
            stages = self.stages_s
            t0 = _perf()
            msgs = self._decode_batch(payload)
            t1 = _perf()
            stages["decode"] += t1 - t0
            io = self.io_counts
            io["peer_frames_in"] += 1
            io["messages_in"] += len(msgs)
            field = self._src_field
            if field == "src":  # SDPaxos and Multi-Paxos: a plain attribute, the fast path
                for m in msgs:
                    if m.src != src:
                        _wrong_src(m.src, src)
            else:
                for m in msgs:
                    if getattr(m, field) != src:
                        _wrong_src(getattr(m, field), src)
            now = self._now_ms()
            step = replica.step
            for m in msgs:
                step(m, now)
            stages["step"] += _perf() - t1
            self._kick()
            return
        f = rf.decode_runtime(payload)
        if isinstance(f, rf.Ping):
            peer = self._peers[src]
            executed = getattr(replica, "executed_upto", 0)
            self._send_peer(peer, rf.encode_runtime(rf.Pong(f.sent_ms, executed)))
            self._flush_peer(peer)
        elif isinstance(f, rf.Pong):
            peer = self._peers[src]
            rtt = _clock_ms() - f.sent_ms
            if not 0.0 <= rtt <= _PONG_RTT_MS_MAX:
                raise rf.FrameError(f"pong of a ping never sent ({rtt:.0f} ms ago)")
            peer.rtt_ms = rtt
            peer.executed = f.executed_upto
            replica.observe_rtt(ReplicaId(peer.id), rtt)
            if self.metrics is not None:
                self.metrics.set_peer_rtt_s(peer.id, rtt / 1000)
        else:
            raise rf.FrameError(f"a replica may not send {type(f).__name__}")

    def _answer_status(self, conn: Connection, request_id: int) -> None:
        """A status request, answered at once and outside :attr:`stages_s`:
        it is an operator's reading, not a command's work, and reading the
        stages (``bench.runtime_latency`` does, around a region's commands)
        must not move them."""
        if conn.open:
            reply = _new(rf.Reply, (request_id, rf.Code.OK, self.status().to_dict()))
            conn.send(rf.encode_runtime(reply))
            self.io_counts["client_frames_out"] += 1
            self.io_counts["client_writes"] += 1
            conn.flush()

    # --------------------------------------------------------------- clients

    def _client_frame(self, conn: Connection, f: rf.RuntimeFrame) -> None:
        """A client's request (a status request is answered in :meth:`frame`)."""
        # Every request gets exactly one answer (_answer counts it down): a
        # client that pipelines more than the bound is not read until it drains.
        conn.pending += 1
        if conn.pending >= CLIENT_REQUESTS_PENDING_MAX:
            conn.pause_reading()
        if isinstance(f, rf.Submit):
            self._client_submit(conn, f)
        elif isinstance(f, rf.SubmitMany):
            conn.pending += len(f.items) - 1
            self._client_submits(conn, f.items)
            if conn.pending >= CLIENT_REQUESTS_PENDING_MAX:
                conn.pause_reading()
        elif isinstance(f, rf.Read):
            self._client_read(conn, f)
        elif isinstance(f, rf.Admin):
            self._client_admin(conn, f)
        else:
            raise rf.FrameError(f"a client may not send {type(f).__name__}")

    def _answer(self, conn: Connection, request_id: int, code: rf.Code, value: Any) -> None:
        conn.pending -= 1
        if conn.paused and conn.pending <= CLIENT_REQUESTS_PENDING_MAX // 2:
            conn.resume_reading()
        if not conn.open:
            return
        # Gathered per connection and sent at the end of the flush, as one
        # REPLY_MANY when there are several.
        conn.answers.append(_new(rf.Reply, (request_id, code, value)))
        self._dirty_conns.add(conn)
        if not self._flush_scheduled:
            self._kick()  # answers given outside a flush (admin, reads, refusals) go at the next

    def _client_submits(self, conn: Connection, items: tuple[rf.Submit, ...]) -> None:
        """:meth:`_client_submit` of each item, with its common case written out
        (a session's next command, not proposed yet): this runs once per command.
        Refusals, registrations and retries of a command in flight take the
        general path."""
        waiting = self._waiting
        timed = self.metrics is not None
        propose_new = self._propose_new
        proposed = False
        for item in items:
            request_id, client_id, seq, payload, key, wait_code = item
            if client_id == 0 or seq == 0 or (client_id, seq) in waiting:
                self._client_submit(conn, item)
                continue
            if propose_new(
                _new(Command, (client_id, seq, payload, key)),
                _EXECUTED if wait_code == 1 else _READY,
                (conn, request_id, _clock_ms() if timed else _NOT_TIMED),
            ):
                proposed = True
            else:
                self._answer(conn, request_id, rf.Code.RETRY, _OVERLOADED)
        if proposed:
            self._kick()

    def _client_submit(self, conn: Connection, f: rf.Submit) -> None:
        request_id, client_id, seq, payload, key, wait_code = f
        if client_id == 0:
            self._answer(conn, request_id, rf.Code.ERROR, "client_id 0: open a session first")
            return
        if seq == 0:
            if payload:
                self._answer(conn, request_id, rf.Code.ERROR, "seq 0 is a registration: no payload")
                return
            if self._registers_locally:  # no session table: see _NO_SESSION_TABLE
                session_id = encode_session_id(self._rng.getrandbits(63) | 1)
                self._answer(conn, request_id, rf.Code.EXECUTED, session_id)
                return
        wait = _EXECUTED if wait_code == 1 or seq == 0 else _READY
        # The clock is read only for the latency metrics.
        waiter = (conn, request_id, _clock_ms() if self.metrics is not None else _NOT_TIMED)
        cmd: Command = _new(Command, (client_id, seq, payload, key))
        if not self._enqueue(cmd, wait, waiter):
            self._answer(conn, request_id, rf.Code.RETRY, _OVERLOADED)

    def _enqueue(self, cmd: Command, wait: Wait, waiter: Waiter) -> bool:
        """Propose ``cmd`` (or join the proposal of the same ``(client_id, seq)``)."""
        waiters = self._waiting.get((cmd.client_id, cmd.seq))
        if waiters is not None:
            waiters.append(waiter)
            return True
        if not self._propose_new(cmd, wait, waiter):
            return False
        self._kick()
        return True

    def _propose_new(self, cmd: Command, wait: Wait, waiter: Waiter) -> bool:
        """Propose ``cmd``, not in flight yet, and wait for it with ``waiter``;
        False when the proposal queue is full (the caller answers RETRY, and the
        local submitters wait for room). The caller kicks the flush."""
        replica = self.replica
        assert replica is not None
        try:
            replica.propose(cmd, wait)
        except Overloaded:
            if self._room is not None:
                self._room.clear()
            return False
        self._waiting[(cmd.client_id, cmd.seq)] = [waiter]
        return True

    def _observe_latency(self, kind: ReplyKind, started_ms: float) -> None:
        metrics = self.metrics
        if metrics is None:
            return
        seconds = (_clock_ms() - started_ms) / 1000
        if kind == ReplyKind.EXECUTED:
            metrics.observe_execute_s(seconds)
        else:
            metrics.observe_commit_s(seconds)

    def _client_read(self, conn: Connection, f: rf.Read) -> None:
        rid = f.request_id

        def done(ok: bool, value: bytes | None) -> None:
            if ok:
                self._answer(conn, rid, rf.Code.READ_OK, value)
            else:
                self._answer(conn, rid, rf.Code.RETRY, "no linearizable read in time")

        if f.stale:
            done(True, self._query(f.key, f.request))
            return
        self._start_read(f.key, f.request, self._now_ms() + READ_TIMEOUT_S * 1000, done)

    def _query(self, key: bytes | None, request: bytes | None) -> bytes | None:
        """The state machine's answer to a read (None if it has no ``query``)."""
        query = getattr(self.state_machine, "query", None)
        if query is None:
            return None
        result: bytes | None = query(request if request is not None else (key or b""))
        return result

    def _start_read(
        self,
        key: bytes | None,
        request: bytes | None,
        deadline_ms: float,
        done: Callable[[bool, bytes | None], None],
    ) -> None:
        replica = self.replica
        if replica is None or not self._running:
            done(False, None)
            return
        self._read_ids += 1
        read_id = self._read_ids

        def result(ok: bool) -> None:
            if ok:
                done(True, self._query(key, request))
            elif self._running and self._now_ms() < deadline_ms:
                assert self._loop is not None
                self._loop.call_later(
                    READ_RETRY_S, self._start_read, key, request, deadline_ms, done
                )
            else:
                done(False, None)

        self._reads[read_id] = result
        replica.read(read_id, key, self._now_ms())
        self._kick()

    def _client_admin(self, conn: Connection, f: rf.Admin) -> None:
        try:
            value = self.admin(f.operation, f.argument)
        except (ValueError, LocalProtocolError) as exc:
            self._answer(conn, f.request_id, rf.Code.ERROR, str(exc))
            return
        self._answer(conn, f.request_id, rf.Code.OK, value)

    def admin(self, operation: str, argument: Any) -> dict[str, Any]:
        """Operations for operators and tests: ``snapshot``, ``transfer_sequencer``
        (argument: a replica id), ``partition`` (argument: a spec like ``"0,1|2"``,
        or nil to heal), ``emulator`` (its counters)."""
        replica = self.replica
        if replica is None:
            raise ValueError("node not started")
        if operation == "snapshot":
            request = getattr(replica, "request_snapshot", None)
            if request is None:
                raise ValueError(f"{self.protocol.title} has no snapshots")
            request()
            self._kick()
            return {"requested": True}
        if operation == "transfer_sequencer":
            transfer = getattr(replica, "transfer_sequencer", None)
            if transfer is None:
                raise ValueError(f"{self.protocol.title} has no sequencer to transfer")
            if type(argument) is not int:
                raise ValueError("transfer_sequencer needs a replica id")
            transfer(ReplicaId(argument))
            self._kick()
            return {"target": argument}
        if operation in ("partition", "emulator"):
            emulator = self.emulator
            if emulator is None:
                raise ValueError("this node runs without the delay emulator")
            if operation == "partition":
                if argument is None:
                    emulator.heal()
                else:
                    if type(argument) is not str:
                        raise ValueError("partition needs a spec string like '0,1|2'")
                    emulator.partition(parse_partition(argument, self.config.cluster.replicas))
            status = emulator.to_json()
            if self._delayed is not None:
                status["delivery"] = self._delayed.to_json()
            return status
        raise ValueError(f"unknown admin operation {operation!r}")

    # ------------------------------------------------------------ public API

    def _check_running(self) -> None:
        if self._failed is not None:
            raise NodeError(f"the node stopped after a log failure: {self._failed}")
        if not self._running:
            raise NodeError("the node is not running (use `async with Node(...)`)")

    async def _propose(self, cmd: Command, wait: Wait, timeout_s: float | None) -> Reply:
        self._check_running()
        loop = self._loop
        assert loop is not None
        future: asyncio.Future[Reply] = loop.create_future()
        started = _clock_ms()

        def waiter(reply: Reply | None) -> None:
            if future.done():
                return
            if reply is None:
                future.set_exception(NodeError("the node stopped before the command was answered"))
            else:
                future.set_result(reply)

        async def enqueue() -> Reply:
            while not self._enqueue(cmd, wait, waiter):
                assert self._room is not None
                await self._room.wait()
                self._check_running()
            return await future

        reply = await asyncio.wait_for(enqueue(), timeout_s)
        self._observe_latency(reply.kind, started)
        return reply

    async def session(self) -> Session:
        """A new session (registered through the log when sessions expire)."""
        self._check_running()
        if self.config.cluster.session_lifetime_slots is None:
            return Session(self, self._rng.getrandbits(63) | 1)
        nonce = self._rng.getrandbits(63) | 1
        reply = await self._propose(registration(nonce), Wait.EXECUTED, None)
        return Session(self, decode_session_id(reply.result))

    async def submit(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        wait: _WaitName = "ready",
        timeout_s: float | None = None,
    ) -> bytes | None:
        """Replicate ``payload``; return when it is ready (``None``) or executed
        here (the state machine's result). ``key`` names what it writes, so that
        reads of other keys need not wait for it."""
        if type(payload) is not bytes:
            raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
        if len(payload) > rf.COMMAND_BYTES_MAX:
            raise ValueError(f"payload of {len(payload)} bytes exceeds {rf.COMMAND_BYTES_MAX}")
        _wait_of(wait)
        session = self._sessions.pop() if self._sessions else await self.session()
        try:
            result = await session.submit(payload, key=key, wait=wait, timeout_s=timeout_s)
        except (TimeoutError, asyncio.CancelledError, SessionExpired):
            raise  # the session may have a command in flight: do not reuse it
        if len(self._sessions) < SESSIONS_IDLE_MAX:
            self._sessions.append(session)
        return result

    def submit_nowait(
        self, payload: bytes, *, key: bytes | None = None, wait: _WaitName = "ready"
    ) -> asyncio.Future[bytes | None]:
        """:meth:`submit` without a coroutine per command: the future of its result.

        For front ends that keep thousands of commands in flight (the kv-store's
        Redis port answers a pipeline of them): a task per command costs more
        than the protocol does. The command is proposed now when the proposal
        queue has room, else as soon as it has. Cancelling the future does not
        withdraw the command. No timeout: the caller decides how long to wait.
        """
        if type(payload) is not bytes:
            raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
        if len(payload) > rf.COMMAND_BYTES_MAX:
            raise ValueError(f"payload of {len(payload)} bytes exceeds {rf.COMMAND_BYTES_MAX}")
        mode = _wait_of(wait)
        self._check_running()
        loop = self._loop
        assert loop is not None
        if self._sessions:
            session = self._sessions.pop()
        elif self.config.cluster.session_lifetime_slots is None:
            session = Session(self, self._rng.getrandbits(63) | 1)
        else:  # a session must be registered through the log first
            return asyncio.ensure_future(self.submit(payload, key=key, wait=wait))
        session.seq += 1
        session.busy = True
        cmd = Command(session.client_id, session.seq, payload, key)
        future: asyncio.Future[bytes | None] = loop.create_future()
        started = _clock_ms()

        def waiter(reply: Reply | None) -> None:
            if reply is None:
                if not future.done():
                    future.set_exception(
                        NodeError("the node stopped before the command was answered")
                    )
                return
            self._observe_latency(reply.kind, started)
            session.busy = False
            if reply.kind == ReplyKind.SESSION_EXPIRED:
                if not future.done():
                    future.set_exception(
                        SessionExpired(
                            f"session {session.client_id} expired; the command was not applied"
                        )
                    )
                return
            if len(self._sessions) < SESSIONS_IDLE_MAX:
                self._sessions.append(session)
            if not future.done():
                future.set_result(reply.result)

        if not self._enqueue(cmd, mode, waiter):

            async def when_room() -> None:
                while not self._enqueue(cmd, mode, waiter):
                    assert self._room is not None
                    await self._room.wait()
                    self._check_running()

            def failed(task: asyncio.Task[None]) -> None:
                if not task.cancelled() and task.exception() is not None and not future.done():
                    future.set_exception(task.exception())  # type: ignore[arg-type]

            loop.create_task(when_room()).add_done_callback(failed)
        return future

    def read_nowait(
        self,
        key: bytes | None = None,
        request: bytes | None = None,
        *,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> asyncio.Future[bytes | None]:
        """:meth:`read` without a coroutine: the future of its answer (or of
        :class:`TimeoutError`). For the same front ends as :meth:`submit_nowait`."""
        self._check_running()
        loop = self._loop
        assert loop is not None
        future: asyncio.Future[bytes | None] = loop.create_future()

        def done(ok: bool, value: bytes | None) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            elif not self._running:
                future.set_exception(NodeError("the node stopped before the read was answered"))
            else:
                future.set_exception(
                    TimeoutError(f"no linearizable read of {key!r} within {timeout_s} s")
                )

        self._start_read(key, request, self._now_ms() + timeout_s * 1000, done)
        return future

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
            TimeoutError: no safe answer within ``timeout_s`` (no sequencer with a lease).
        """
        self._check_running()
        loop = self._loop
        assert loop is not None
        future: asyncio.Future[tuple[bool, bytes | None]] = loop.create_future()

        def done(ok: bool, value: bytes | None) -> None:
            if not future.done():
                future.set_result((ok, value))

        self._start_read(key, request, self._now_ms() + timeout_s * 1000, done)
        ok, value = await future
        if not ok:
            self._check_running()
            raise TimeoutError(f"no linearizable read of {key!r} within {timeout_s} s")
        return value

    def status(self) -> NodeStatus:
        """Where this node stands (view, sequencer, executed slot, peers, log)."""
        replica = self.replica
        if replica is None:
            raise NodeError("node not started")
        core = replica.status()
        executed: int | None = getattr(replica, "executed_upto", None)
        peers = []
        for peer in self._peers.values():
            conn = peer.conn
            peers.append(
                PeerStatus(
                    id=peer.id,
                    connected=conn is not None and conn.open,
                    rtt_ms=peer.rtt_ms,
                    executed_upto=peer.executed,
                    lag_slots=(
                        max(0, executed - peer.executed)
                        if peer.executed is not None and executed is not None
                        else None
                    ),
                    queue_bytes=conn.buffered_bytes() if conn is not None else 0,
                    frames_dropped=conn.frames_dropped if conn is not None else 0,
                    frames_delayed=peer.frames_delayed,
                )
            )
        log = self.log
        me = self.config.me
        return NodeStatus(
            id=self.id,
            address=f"{me.host}:{self.bound_port or me.port}",
            region=me.region,
            view=getattr(replica, "view", None),
            sequencer=getattr(replica, "sequencer", None),
            is_sequencer=getattr(replica, "is_sequencer", None),
            has_lease=_call(getattr(replica, "has_lease", None)),
            executed_upto=executed,
            snapshot_slot=getattr(core, "snapshot_slot", None),
            log_records=len(log) if log is not None else 0,
            log_bytes=log.log_bytes if log is not None else 0,
            snapshot_bytes=log.snapshot_bytes if log is not None else 0,
            fsyncs=self.fsyncs,
            records_written=self.records_written,
            frames_rejected=self.frames_rejected,
            peers=tuple(peers),
            stats=_counters(replica.stats),
            protocol=self.protocol.name,
            snapshots=self.snapshots,
            events=tuple(self.events),
            io=dict(self.io_counts),
            stages_s=dict(self.stages_s),
        )

    def _keep_event(self, event: str, me: ReplicaId, fields: dict[str, Any]) -> None:
        """The core's tracer, when ``trace_events`` names some: keep those, with the time."""
        if event in self._trace_events:
            self.events.append((_clock_ms(), event))

    def _update_metrics(self) -> None:
        metrics = self.metrics
        replica = self.replica
        if metrics is None or replica is None:
            return
        st = self.status()
        stats = replica.stats
        # A protocol without a field reports 0; its nearest counters stand in
        # for SDPaxos's (a leader election for a view change, a revocation for
        # a C-recovery, executed commands for ready ones).
        metrics.update_from_status(
            view=st.view or 0,
            executed_slot=st.executed_upto or 0,
            is_sequencer=bool(st.is_sequencer),
            log_bytes=st.log_bytes,
            snapshot_bytes=st.snapshot_bytes,
            view_changes=_counter(stats, "view_changes_started", "elections_started"),
            c_recoveries=_counter(stats, "c_recoveries_started", "revocations"),
            stages_s=st.stages_s,
        )
        for p in st.peers:
            metrics.set_peer_queue(p.id, 0, p.queue_bytes)
        ready = _counter(stats, "commands_ready", "commands_executed")
        metrics.commands_committed(ready - self._ready_reported)
        self._ready_reported = ready


def _clock_ms() -> float:
    """For what is measured (latencies, round trips): ``time.monotonic()`` in ms.

    Not the loop's clock, which under uvloop counts whole milliseconds and is
    read once per loop turn; the core's timers run on that one, which is fine
    for timeouts but not for a 0.3 ms loopback round trip."""
    return time.monotonic() * 1000.0


def _wrong_src(claimed: object, src: int) -> NoReturn:
    raise rf.FrameError(f"wrong src: a message from node {claimed} on node {src}'s connection")


def _call(method: Callable[[], bool] | None) -> bool | None:
    return method() if method is not None else None


def _counters(stats: object) -> dict[str, int]:
    """A core's counters by name (a dataclass of ints; nothing otherwise)."""
    if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        return {k: v for k, v in dataclasses.asdict(stats).items() if type(v) is int}
    return {}


def _counter(stats: object, name: str, fallback: str) -> int:
    """Counter ``name`` of a core's stats, or its ``fallback`` counter, or 0."""
    value = getattr(stats, name, None)
    if value is None:
        value = getattr(stats, fallback, 0)
    return value if type(value) is int else 0


def _reject_reason(reason: str) -> str:
    """A refusal's message as one of a few metric labels (bounded cardinality)."""
    text = reason.lower()
    if "wrong src" in text:
        return "wrong_src"
    if "exceed" in text or "too large" in text:
        return "oversized"
    if "unknown" in text or "may not send" in text:
        return "unknown"
    if "hello" in text or "certificate" in text:
        return "identity"
    return "malformed"


def _encode(encode_batch: EncodeBatch, msgs: list[Message], packed: PackedMessages) -> list[bytes]:
    """Encode ``msgs`` as few frames as fit (a batch too large is split in halves).

    ``packed`` is shared by every peer's batches of one send, so that a
    broadcast message is packed once (:func:`~sdpaxos.wire.codec.encode_batch`).
    """
    try:
        return [encode_batch(msgs, packed)]
    except CodecError:
        if len(msgs) == 1:
            logger.error("cannot encode %s: dropped", type(msgs[0]).__name__)
            return []
        half = len(msgs) // 2
        return _encode(encode_batch, msgs[:half], packed) + _encode(
            encode_batch, msgs[half:], packed
        )
