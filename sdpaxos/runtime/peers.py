"""The other replicas: connections to them, and every frame to or from them.

This is where a frame from a peer goes (:meth:`Peers.frame`). A core batch is
decoded, each message's sender checked against the connection's, and the
messages handed to the driver (:meth:`~sdpaxos.runtime.driver.DriverPort.step`);
a ping is answered with a pong; a pong gives the round trip and the peer's
executed slot; a DUE mark (the delay emulator, :mod:`sdpaxos.runtime.delivery`)
says when the frames after it are due here, and they are held until then.
Anything else from a peer closes its connection (the transport's rule 3).

Outgoing: the messages of one turn for one peer go as one frame (a core
batch), packed once for every peer (a broadcast is encoded once), written once
per turn (:meth:`Peers.send`); with the delay emulator the frames are written
at once behind a DUE mark that tells the peer when to take them.

Connections: a node dials the peers with higher ids and keeps those
connections up (reconnecting with jittered exponential backoff); the peers
with lower ids dial it. A dialled or accepted connection is a peer's only once
its hello (and, with TLS, its certificate) names that peer and this protocol.

A changing membership (``Capabilities.membership``): peers are node ids, and
the set follows the membership (:meth:`Peers.update`: its members and learners,
at the addresses it lists, besides the config file's replicas, the seeds). A
hello from any node id is taken (with TLS, only if its certificate names that
id): a node waiting to be added dials the members, which do not know it yet.
A node that is no member dials every node it knows, not only higher ids (the
members do not dial a node they do not know).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any, NoReturn

from sdpaxos.core.messages import Message
from sdpaxos.core.types import ReplicaId
from sdpaxos.protocols import DEFAULT_PROTOCOL, ProtocolSpec
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.config import NodeConfig
from sdpaxos.runtime.delivery import DelayedFrames, clock_token, due_here_s, make_alarm
from sdpaxos.runtime.driver import DriverPort
from sdpaxos.runtime.emulator import LinkEmulator
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.status import PeerStatus, Tally, clock_ms, count_rejected
from sdpaxos.runtime.tls import client_context
from sdpaxos.runtime.transport import SEND_BUFFER_BYTES_MAX, Connection
from sdpaxos.wire.codec import MESSAGES_PER_BATCH_MAX, VERSION, CodecError, PackedMessages
from sdpaxos.wire.framing import frame
from sdpaxos.wire.members import MemberCodec

__all__ = [
    "DIAL_TIMEOUT_S",
    "HELD_BYTES_MAX",
    "PING_INTERVAL_S",
    "RECONNECT_BACKOFF_MAX_S",
    "RECONNECT_BACKOFF_MIN_S",
    "EncodeBatch",
    "Peers",
]

logger = logging.getLogger(__name__)

_perf = time.perf_counter
#: The delay emulator's clock (its due times, the DUE marks); tests replace it.
_monotonic = time.monotonic

#: How often each connected peer is pinged (round trip and its executed slot).
PING_INTERVAL_S = 1.0
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
#: A pong answering a ping older than this (or from the future) is a lie.
_PONG_RTT_MS_MAX = 3_600_000.0
#: Most peers a node keeps (a changing membership adds any node whose hello
#: names it; seven members, four learners and the seeds fit many times over).
PEERS_MAX = 256
#: A codec's ``encode_batch``: messages for one peer, and the send's packed messages.
EncodeBatch = Callable[[list[Any], PackedMessages], bytes]


class _Peer:
    """Per-peer state: its connection, its measurements, the frames to it the emulator delayed."""

    __slots__ = ("address", "conn", "dial_task", "executed", "frames_delayed", "id", "rtt_ms")

    def __init__(self, peer_id: int, address: tuple[str, int] | None = None) -> None:
        self.id = peer_id
        #: Where it listens (None: not known, it dials us).
        self.address = address
        self.conn: Connection | None = None
        self.rtt_ms: float | None = None
        self.executed: int | None = None
        self.dial_task: asyncio.Task[None] | None = None
        self.frames_delayed = 0


class Peers:
    """Every other replica of the cluster (the owner of their connections)."""

    def __init__(
        self,
        config: NodeConfig,
        spec: ProtocolSpec,
        driver: DriverPort,
        *,
        tally: Tally,
        metrics: Metrics | None,
        emulator: LinkEmulator | None,
        rng: random.Random,
        on_ping: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.id = config.node_id
        self.spec = spec
        self.driver = driver
        self.tally = tally
        self.metrics = metrics
        self.emulator = emulator
        self.rng = rng
        self.encode_batch: EncodeBatch = spec.batch_encoder()
        self.decode_batch: Callable[[bytes], list[Any]] = spec.batch_decoder()
        if spec.capabilities.membership:
            # Member messages: each epoch's core messages in their envelopes.
            member_codec = MemberCodec(spec.codec)
            self.encode_batch = member_codec.encode_batch
            self.decode_batch = member_codec.decode_batch
        self.sender_field = spec.capabilities.sender_field
        self.peers: dict[int, _Peer] = {
            r.id: _Peer(r.id, (r.host, r.port)) for r in config.replicas if r.id != config.node_id
        }
        #: Peers may join and leave (a changing membership): see :meth:`update`.
        self.changing = spec.capabilities.membership
        #: Is this node a member of the running epoch (else it dials every peer)?
        self.member = config.initial_member
        #: Why the last connection that claimed to be each node was refused
        #: (an operator adding that node reads it).
        self.refusals: dict[int, str] = {}
        #: What this node's hello says, and a peer's must (NodeConfig.cluster_identity).
        self.cluster_identity = config.cluster_identity
        #: Peers' frames held until the delay emulator says they are due (made
        #: by :meth:`start` when the emulator is configured; a node without it
        #: refuses a DUE mark).
        self.delayed: DelayedFrames | None = None
        #: The name of this process's monotonic clock, sent in DUE marks.
        self.clock_token = clock_token()
        #: Called once per ping round (the node refreshes its metrics then).
        self.on_ping = on_ping
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ping_timer: asyncio.TimerHandle | None = None

    # -------------------------------------------------------------- lifecycle

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hold frames for the emulator if it runs; dial the peers with higher ids; ping."""
        self._loop = loop
        if self.emulator is not None:
            self.delayed = DelayedFrames(
                self.deliver_held, lambda wake: make_alarm(loop, wake), HELD_BYTES_MAX
            )
        for peer in self.peers.values():
            self._maybe_dial(peer)
        self._ping_timer = loop.call_later(PING_INTERVAL_S, self._on_ping)

    async def stop(self) -> None:
        """Stop dialling and pinging, drop held frames, close every peer connection."""
        if self._ping_timer is not None:
            self._ping_timer.cancel()
        tasks = [p.dial_task for p in self.peers.values() if p.dial_task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.delayed is not None:
            self.delayed.close()
        self.close_all()

    def close_all(self) -> None:
        for peer in self.peers.values():
            if peer.conn is not None:
                peer.conn.close()

    # ------------------------------------------------------------ connections

    def _maybe_dial(self, peer: _Peer) -> None:
        """Start dialling ``peer`` if this node is the one to (see the module docstring)."""
        loop = self._loop
        if loop is None or peer.dial_task is not None or peer.address is None:
            return
        if peer.id > self.id or (self.changing and not self.member):
            peer.dial_task = loop.create_task(self._dial(peer))

    def update(
        self,
        nodes: dict[int, tuple[str, int]],
        member: bool,
        regions: dict[int, str] | None = None,
    ) -> None:
        """The membership changed: ``nodes`` (its members and learners, by id,
        with where they listen, in ``regions``) are peers, and ``member`` says
        whether this node is a member now. Peers are never forgotten (a removed
        node still hears that it was removed); new ones are dialled by the
        usual rule, and the delay emulator gives their links their regions'
        delays."""
        self.member = member
        for node_id, address in nodes.items():
            if node_id == self.id:
                continue
            if self.emulator is not None and regions is not None and node_id in regions:
                self.emulator.add_node(node_id, regions[node_id])
            peer = self.peers.get(node_id)
            if peer is None:
                peer = self.peers[node_id] = _Peer(node_id, address)
            elif peer.address is None:
                peer.address = address
            self._maybe_dial(peer)
        if not member:
            for peer in self.peers.values():
                self._maybe_dial(peer)

    async def _dial(self, peer: _Peer) -> None:
        """Keep one connection to ``peer`` open (we dial peers with higher ids)."""
        cfg = self.config
        assert peer.address is not None
        host, port = peer.address
        ssl_ctx = client_context(cfg.tls) if cfg.tls is not None else None
        loop = asyncio.get_running_loop()
        backoff = RECONNECT_BACKOFF_MIN_S
        hello = rf.Hello(rf.Kind.NODE, self.id, self.spec.hello_name, self.cluster_identity)
        while self.driver.running:
            conn = peer.conn
            if conn is not None and conn.open:
                backoff = RECONNECT_BACKOFF_MIN_S
                await asyncio.sleep(_DIAL_CHECK_S)
                continue
            try:
                await asyncio.wait_for(
                    loop.create_connection(
                        lambda: Connection(self, hello, peer.id),
                        host,
                        port,
                        ssl=ssl_ctx,
                        server_hostname=host if ssl_ctx is not None else None,
                    ),
                    DIAL_TIMEOUT_S,
                )
            except (TimeoutError, OSError) as exc:
                logger.debug("node %d: dial %d failed: %s", self.id, peer.id, exc)
            # Up or not, wait a jittered backoff before looking again: a peer
            # that accepts and drops at once must not be dialled in a tight loop.
            await asyncio.sleep(self.rng.uniform(0, backoff))
            backoff = min(backoff * 2, RECONNECT_BACKOFF_MAX_S)

    def connected_ids(self) -> set[int]:
        """The peers connected now (the failure detector's live set)."""
        return {p.id for p in self.peers.values() if p.conn is not None and p.conn.open}

    def is_connected(self, node_id: int) -> bool:
        peer = self.peers.get(node_id)
        return peer is not None and peer.conn is not None and peer.conn.open

    def _refused(self, node_id: int, conn: Connection, reason: str) -> None:
        if len(self.refusals) < PEERS_MAX or node_id in self.refusals:
            self.refusals[node_id] = reason
        self.reject(conn, reason)

    def dialed(self, conn: Connection) -> bool:
        peer = self.peers.get(conn.peer_id)
        if peer is None or not self.driver.running:
            return False
        if self.config.tls is not None and conn.identity != ("node", peer.id):
            self._refused(
                peer.id, conn, f"dialled node {peer.id}, certificate says {conn.identity}"
            )
            return False
        conn.kind = rf.Kind.NODE
        self._peer_up(peer, conn)
        return True

    def hello(self, conn: Connection, hello: rf.Hello, identity: tuple[str, int] | None) -> bool:
        """A node's hello on an accepted connection: take it if it is a peer,
        its certificate says so, and it runs this node's protocol in this
        node's cluster."""
        theirs = hello.protocol or DEFAULT_PROTOCOL
        if theirs != self.spec.name:
            # Its messages would decode as ours, or not at all: never let it in.
            self._refused(
                hello.id,
                conn,
                f"hello from node {hello.id} running protocol {theirs!r};"
                f" this node runs {self.spec.name!r}",
            )
            return False
        ours = self.cluster_identity
        if hello.cluster is not None and hello.cluster != ours:
            # Another cluster's node, or one whose file lists another initial
            # membership: its votes must never count here. Said once per node
            # in the status (refusals) and counted, never taken.
            self._refused(
                hello.id,
                conn,
                f"hello from node {hello.id} of cluster {hello.cluster!r}; this node is of"
                f" {ours!r} (the cluster's name, protocol and initial replica list, ids and"
                " regions, must be the same in every node's file)",
            )
            return False
        peer = self.peers.get(hello.id)
        if peer is None and self.changing and hello.id != self.id and len(self.peers) < PEERS_MAX:
            # A node this one does not know yet (one waiting to be added, a
            # learner not heard of): taken once its certificate says who it is.
            if self.config.tls is not None and identity != ("node", hello.id):
                reason = f"hello says node {hello.id}, certificate says {identity}"
                self._refused(hello.id, conn, reason)
                return False
            peer = self.peers[hello.id] = _Peer(hello.id)
        if peer is None:
            self.reject(conn, f"hello from node {hello.id}, not a peer of node {self.id}")
            return False
        if self.config.tls is not None and identity != ("node", hello.id):
            self._refused(
                hello.id, conn, f"hello says node {hello.id}, certificate says {identity}"
            )
            return False
        conn.kind = rf.Kind.NODE
        conn.peer_id = hello.id
        conn.owner = self
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

    def closed(self, conn: Connection) -> None:
        peer = self.peers.get(conn.peer_id)
        if peer is not None and peer.conn is conn:
            peer.conn = None
            logger.info("node %d: lost node %d", self.id, peer.id)
            if self.metrics is not None:
                self.metrics.set_peer_connected(peer.id, False)

    def reject(self, conn: Connection, reason: str) -> None:
        count_rejected(self.tally, self.metrics, self.id, conn.describe(), reason)

    # --------------------------------------------------------------- incoming

    def frame(self, conn: Connection, payload: bytes) -> None:
        """A frame from a peer's connection: due now, or held for the emulator."""
        if not self.driver.running:
            return
        src = conn.peer_id
        if payload and payload[0] == rf.RUNTIME_PREFIX:
            f = rf.decode_runtime(payload)
            if type(f) is rf.Due:
                if self.delayed is None:
                    raise rf.FrameError("a DUE mark, but this node runs without the emulator")
                now_s = _monotonic()
                conn.due_s = due_here_s(f.sent_s, f.due_s, f.clock, now_s, self.clock_token)
                return
        delayed = self.delayed
        if delayed is not None and (
            delayed.held(src) or (conn.due_s and conn.due_s > _monotonic())
        ):
            delayed.send(src, conn.due_s, payload, 1)
            return
        self.peer_frame(src, payload)

    def peer_frame(self, src: int, payload: bytes) -> None:
        """One frame from peer ``src``, due now: a core batch, a ping or a pong."""
        driver = self.driver
        if not driver.running:
            return
        if payload and payload[0] == VERSION:  # an empty frame is refused below
            stages = self.tally.stages_s
            t0 = _perf()
            msgs = self.decode_batch(payload)
            t1 = _perf()
            stages["decode"] += t1 - t0
            io = self.tally.io
            io["peer_frames_in"] += 1
            io["messages_in"] += len(msgs)
            field = self.sender_field
            if field == "src":  # SDPaxos and Multi-Paxos: a plain attribute, the fast path
                for m in msgs:
                    if m.src != src:
                        _wrong_src(m.src, src)
            else:
                for m in msgs:
                    if getattr(m, field) != src:
                        _wrong_src(getattr(m, field), src)
            driver.step(msgs)
            stages["step"] += _perf() - t1
            return
        f = rf.decode_runtime(payload)
        if isinstance(f, rf.Ping):
            peer = self.peers[src]
            executed = driver.executed_upto
            self._send_peer(peer, rf.encode_runtime(rf.Pong(f.sent_ms, executed or 0)))
            self.flush_peer(peer)
        elif isinstance(f, rf.Pong):
            peer = self.peers[src]
            rtt = clock_ms() - f.sent_ms
            if not 0.0 <= rtt <= _PONG_RTT_MS_MAX:
                raise rf.FrameError(f"pong of a ping never sent ({rtt:.0f} ms ago)")
            peer.rtt_ms = rtt
            peer.executed = f.executed_upto
            driver.observe_rtt(ReplicaId(peer.id), rtt)
            if self.metrics is not None:
                self.metrics.set_peer_rtt_s(peer.id, rtt / 1000)
        else:
            raise rf.FrameError(f"a replica may not send {type(f).__name__}")

    def deliver_held(self, peer_id: int, payload: bytes, frames: int) -> None:
        """A held frame from ``peer_id`` is due: handle it as if it arrived now.
        A frame refused now closes the peer's connection, as on arrival."""
        try:
            self.peer_frame(peer_id, payload)
        except (CodecError, rf.FrameError) as exc:
            self._refuse_peer(peer_id, str(exc))
        except Exception as exc:  # a bug of ours: never let a peer's frame crash the node
            logger.exception("node %d: error handling a held frame from node %d", self.id, peer_id)
            self._refuse_peer(peer_id, f"internal error: {type(exc).__name__}: {exc}")

    def _refuse_peer(self, peer_id: int, reason: str) -> None:
        conn = self.peers[peer_id].conn
        if conn is not None and conn.open:
            conn.refuse(reason)
        else:  # the connection it came on is gone: count and log it all the same
            count_rejected(self.tally, self.metrics, self.id, f"a frame of node {peer_id}", reason)

    # --------------------------------------------------------------- outgoing

    def send(self, out: dict[int, list[Message]]) -> None:
        """This turn's messages: one frame per peer (split if too large), one write each."""
        t0 = _perf()
        io = self.tally.io
        packed: PackedMessages = {}
        encode_batch = self.encode_batch
        for dst, msgs in out.items():
            peer = self.peers.get(dst)
            if peer is None:
                continue
            io["messages_out"] += len(msgs)
            for k in range(0, len(msgs), MESSAGES_PER_BATCH_MAX):
                for payload in _encode(encode_batch, msgs[k : k + MESSAGES_PER_BATCH_MAX], packed):
                    io["peer_frames_out"] += 1
                    self._send_peer(peer, payload)
            if peer.conn is not None and peer.conn.out:
                io["peer_writes"] += 1
            self.flush_peer(peer)
        self.tally.stages_s["send"] += _perf() - t0

    def _send_peer(self, peer: _Peer, payload: bytes) -> None:
        conn = peer.conn
        if conn is None:
            return
        conn.send(payload)

    def flush_peer(self, peer: _Peer) -> None:
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
        try:
            at_ms = emulator.schedule(peer.id, sum(map(len, out)), now_s * 1000.0)
        except ValueError:  # a node added since: its links are not emulated
            conn.flush()
            return
        at_s = now_s if at_ms is None else at_ms / 1000.0
        if at_ms is None or at_s - now_s > rf.DUE_AHEAD_S_MAX:
            # Cut by a partition, or queued behind a bandwidth cap for longer
            # than a mark may say (the peer would refuse it): lost on the link.
            conn.out = []
            conn.frames_dropped += len(out)
            return
        if at_s > now_s:
            peer.frames_delayed += len(out)
            out.insert(0, frame(rf.encode_runtime(rf.Due(now_s, at_s, self.clock_token))))
        conn.flush()

    def _on_ping(self) -> None:
        if not self.driver.running:
            return
        ping = rf.encode_runtime(rf.Ping(clock_ms()))
        for peer in self.peers.values():
            if peer.conn is not None and peer.conn.kind is not None:
                self._send_peer(peer, ping)
                self.flush_peer(peer)
        if self.on_ping is not None:
            self.on_ping()
        assert self._loop is not None
        self._ping_timer = self._loop.call_later(PING_INTERVAL_S, self._on_ping)

    # ------------------------------------------------------------------ status

    def statuses(self, executed: int | None) -> tuple[PeerStatus, ...]:
        """Each peer as this node sees it; ``executed``: this node's executed prefix."""
        peers = []
        for peer in self.peers.values():
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
        return tuple(peers)

    def emulator_json(self) -> dict[str, Any]:
        """The emulator's counters and, with it, the held frames' (admin ``emulator``)."""
        assert self.emulator is not None
        status = self.emulator.to_json()
        if self.delayed is not None:
            status["delivery"] = self.delayed.to_json()
        return status


def _wrong_src(claimed: object, src: int) -> NoReturn:
    raise rf.FrameError(f"wrong src: a message from node {claimed} on node {src}'s connection")


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
