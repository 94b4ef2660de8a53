"""A node's Prometheus metrics: what the runtime measures, and ``/metrics`` over HTTP.

The runtime owns one :class:`NodeMetrics` per node and calls its plain methods
on the hot path (``observe_commit_s``, ``set_peer_rtt_s``, ...); when metrics
are disabled it holds a :class:`NullMetrics` instead, whose methods do nothing.
Both satisfy the :class:`Metrics` protocol, so the runtime is written once.

Why it is built this way:

- **One registry per node, never the global one.** Several nodes may run in
  one process (tests, ``python -m sdpaxos local``, an application embedding a
  node); with prometheus_client's default registry they would share (and
  clash on) every metric. Each :class:`NodeMetrics` has its own
  :class:`~prometheus_client.CollectorRegistry` (:attr:`NodeMetrics.registry`)
  and the module installs nothing global and configures no logging.
- **Every series also carries a ``node`` label** (the replica id), so the
  scrapes of several nodes can be stored and summed side by side without
  relabelling.
- **Base units, unit last**: durations in seconds (``..._seconds``), sizes in
  bytes (``..._bytes``), counters end in ``_total``. Rates (commands per
  second) come from ``rate()`` on the counters, not from the node.
- **Status values are read, not pushed one by one**: :meth:`NodeMetrics.update_from_status`
  stores plain ints (the module does not depend on the core's ``Status``) and
  a collector turns them into samples at scrape time. The core's view-change
  and C-recovery counts are monotone, so they are exposed as counters (they
  restart from 0 with the process, which ``rate()`` handles).
- **Cheap hot path**: labelled children are looked up once (per peer, per
  reject reason) and cached; an observation is a dict lookup and a locked add.
  prometheus_client is thread-safe, so the durable log's worker thread may
  call :meth:`NodeMetrics.observe_fsync_s` directly.
- **Served on the node's event loop** (:func:`serve_metrics`): a tiny asyncio
  HTTP/1.x handler instead of prometheus_client's threaded server, so it stops
  with the node and needs no thread. One request per connection, bounded in
  size and time; anything but ``GET /metrics`` gets an error status, garbage
  gets ``400`` and the connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = [
    "CONTENT_TYPE",
    "LATENCY_BUCKETS_S",
    "REJECT_REASONS",
    "Metrics",
    "MetricsServer",
    "NodeMetrics",
    "NullMetrics",
    "serve_metrics",
]

#: Buckets for every latency histogram, 0.1 ms .. 10 s. Loopback clusters
#: commit in well under a millisecond; geo-replicated ones in 20-300 ms, where
#: the buckets are densest so that quantiles there are meaningful.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
)

#: Buckets for records per fsync (group commit size): powers of two.
_BATCH_BUCKETS: tuple[float, ...] = tuple(float(2**i) for i in range(11))

#: Reject reasons whose counters exist (at 0) from the start, so ``rate()``
#: sees the first rejection. Other reasons are accepted too; they must be
#: fixed strings chosen by the code, never text taken from a frame (each
#: distinct reason is a time series).
REJECT_REASONS: tuple[str, ...] = ("malformed", "oversized", "unknown", "wrong_src")

#: The text exposition format :func:`prometheus_client.generate_latest` writes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@runtime_checkable
class Metrics(Protocol):
    """What the runtime calls; :class:`NodeMetrics` and :class:`NullMetrics` implement it."""

    def observe_commit_s(self, seconds: float) -> None:
        """A command of this node became ready (committed), ``seconds`` after its proposal."""

    def observe_execute_s(self, seconds: float) -> None:
        """A command of this node was executed, ``seconds`` after its proposal."""

    def commands_committed(self, n: int) -> None:
        """``n`` more commands committed (all owners; the rate is the throughput)."""

    def observe_fsync_s(self, seconds: float, records: int, nbytes: int) -> None:
        """One log append took ``seconds`` (write and fsync) for ``records`` records."""

    def set_peer_rtt_s(self, peer: int, seconds: float) -> None:
        """The latest round-trip time measured to ``peer``."""

    def set_peer_queue(self, peer: int, frames: int, nbytes: int) -> None:
        """What waits in the send queue to ``peer``."""

    def set_peer_connected(self, peer: int, up: bool) -> None:
        """Whether a connection to ``peer`` is up."""

    def frame_rejected(self, reason: str) -> None:
        """A received frame was dropped, for ``reason`` (a fixed string)."""

    def update_from_status(
        self,
        *,
        view: int,
        executed_slot: int,
        is_sequencer: bool,
        log_bytes: int,
        snapshot_bytes: int,
        view_changes: int,
        c_recoveries: int,
        stages_s: Mapping[str, float] | None = None,
    ) -> None:
        """The node's current state, from the core's status and stats."""

    def render(self) -> bytes:
        """The text exposition of every metric."""


class NullMetrics:
    """Metrics disabled: every method does nothing, so the runtime needs no ``if``."""

    __slots__ = ()

    def observe_commit_s(self, seconds: float) -> None:
        pass

    def observe_execute_s(self, seconds: float) -> None:
        pass

    def commands_committed(self, n: int) -> None:
        pass

    def observe_fsync_s(self, seconds: float, records: int, nbytes: int) -> None:
        pass

    def set_peer_rtt_s(self, peer: int, seconds: float) -> None:
        pass

    def set_peer_queue(self, peer: int, frames: int, nbytes: int) -> None:
        pass

    def set_peer_connected(self, peer: int, up: bool) -> None:
        pass

    def frame_rejected(self, reason: str) -> None:
        pass

    def update_from_status(
        self,
        *,
        view: int,
        executed_slot: int,
        is_sequencer: bool,
        log_bytes: int,
        snapshot_bytes: int,
        view_changes: int,
        c_recoveries: int,
        stages_s: Mapping[str, float] | None = None,
    ) -> None:
        pass

    def render(self) -> bytes:
        return b""


class _PeerSeries:
    """The cached labelled children of one peer (looked up once, not per call).

    The round trip's series appears at the first measurement: a 0 before it
    would read as an impossibly fast peer. Queue and connection start at 0,
    which is true until the runtime says otherwise.
    """

    __slots__ = ("connected", "peer", "queue_bytes", "queue_frames", "rtt")

    def __init__(self, m: NodeMetrics, node: str, peer: str) -> None:
        self.peer = peer
        self.rtt: Gauge | None = None
        self.queue_frames = m._peer_queue_frames.labels(node, peer)
        self.queue_bytes = m._peer_queue_bytes.labels(node, peer)
        self.connected = m._peer_connected.labels(node, peer)


class _StatusCollector:
    """Turns the ints of the last :meth:`NodeMetrics.update_from_status` into samples."""

    def __init__(self, owner: NodeMetrics) -> None:
        self._owner = owner

    def describe(self) -> Iterator[Metric]:
        """The families :meth:`collect` yields, so the registry checks their names."""
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        node = self._owner.node
        # One tuple, read once: a scrape never mixes two updates.
        view, executed, is_seq, log_b, snap_b, vcs, crs = self._owner._status
        gauges = (
            ("sdpaxos_view", "The view this node is in.", view),
            ("sdpaxos_executed_slot", "Slots below this one are executed.", executed),
            ("sdpaxos_is_sequencer", "1 if this node is the sequencer of its view.", is_seq),
            ("sdpaxos_log_bytes", "Bytes in the durable log's segments.", log_b),
            ("sdpaxos_snapshot_bytes", "Bytes of the newest snapshot.", snap_b),
        )
        for name, doc, value in gauges:
            g = GaugeMetricFamily(name, doc, labels=["node"])
            g.add_metric([node], value)
            yield g
        counters = (
            ("sdpaxos_view_changes", "View changes this node started.", vcs),
            ("sdpaxos_c_recoveries", "C-instance recoveries this node started.", crs),
        )
        for name, doc, value in counters:
            c = CounterMetricFamily(name, doc, labels=["node"])
            c.add_metric([node], value)
            yield c
        stages = CounterMetricFamily(
            "sdpaxos_loop_seconds",
            "Wall seconds the node's loop spent in each stage (NodeStatus.stages_s).",
            labels=["node", "stage"],
        )
        for stage, seconds in self._owner._stages:
            stages.add_metric([node, stage], seconds)
        yield stages


class NodeMetrics:
    """The Prometheus metrics of one node, in a registry of its own.

    Args:
        node: the replica id; every series carries it as the ``node`` label.
        peers: the other replicas; their series exist (at 0) from the start.
            Peers not named here get theirs at first use.
    """

    def __init__(self, node: int, peers: Iterable[int] = ()) -> None:
        self.node = str(node)
        #: This node's registry; an embedding application may register its own
        #: collectors here or scrape it with any prometheus_client exporter.
        self.registry = CollectorRegistry()
        r = self.registry
        n = ("node",)
        np = ("node", "peer")
        self._status: tuple[int, int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0, 0)
        #: ``(stage, seconds)`` of the last update that gave them.
        self._stages: tuple[tuple[str, float], ...] = ()

        self._commit = Histogram(
            "sdpaxos_commit_latency_seconds",
            "From a command's proposal to its commit (ready to execute), at its command leader.",
            n,
            registry=r,
            buckets=LATENCY_BUCKETS_S,
        ).labels(self.node)
        self._execute = Histogram(
            "sdpaxos_execute_latency_seconds",
            "From a command's proposal to its execution, at its command leader.",
            n,
            registry=r,
            buckets=LATENCY_BUCKETS_S,
        ).labels(self.node)
        self._committed = Counter(
            "sdpaxos_commands_committed",
            "Commands committed at this node (all owners).",
            n,
            registry=r,
        ).labels(self.node)
        self._fsync = Histogram(
            "sdpaxos_fsync_latency_seconds",
            "Duration of one durable log append (write and fsync).",
            n,
            registry=r,
            buckets=LATENCY_BUCKETS_S,
        ).labels(self.node)
        self._fsync_records = Histogram(
            "sdpaxos_fsync_records",
            "Records made durable by one fsync (the group commit size).",
            n,
            registry=r,
            buckets=_BATCH_BUCKETS,
        ).labels(self.node)
        self._log_written = Counter(
            "sdpaxos_log_written_bytes",
            "Bytes appended to the durable log.",
            n,
            registry=r,
        ).labels(self.node)
        self._rejected = Counter(
            "sdpaxos_frames_rejected",
            "Received frames dropped, by reason.",
            ("node", "reason"),
            registry=r,
        )
        self._peer_rtt = Gauge(
            "sdpaxos_peer_rtt_seconds", "Latest round-trip time to the peer.", np, registry=r
        )
        self._peer_queue_frames = Gauge(
            "sdpaxos_peer_send_queue_frames",
            "Frames waiting to be sent to the peer.",
            np,
            registry=r,
        )
        self._peer_queue_bytes = Gauge(
            "sdpaxos_peer_send_queue_bytes", "Bytes waiting to go to the peer.", np, registry=r
        )
        self._peer_connected = Gauge(
            "sdpaxos_peer_connected", "1 while a connection to the peer is up.", np, registry=r
        )
        r.register(_StatusCollector(self))

        self._reasons: dict[str, Counter] = {}
        for reason in REJECT_REASONS:
            self._reason(reason)
        self._peers: dict[int, _PeerSeries] = {}
        for peer in peers:
            self._peer(peer)

    def _reason(self, reason: str) -> Counter:
        child = self._reasons.get(reason)
        if child is None:
            child = self._reasons[reason] = self._rejected.labels(self.node, reason)
        return child

    def _peer(self, peer: int) -> _PeerSeries:
        series = self._peers.get(peer)
        if series is None:
            series = self._peers[peer] = _PeerSeries(self, self.node, str(peer))
        return series

    def observe_commit_s(self, seconds: float) -> None:
        """A command of this node became ready (committed), ``seconds`` after its proposal."""
        self._commit.observe(seconds)

    def observe_execute_s(self, seconds: float) -> None:
        """A command of this node was executed, ``seconds`` after its proposal."""
        self._execute.observe(seconds)

    def commands_committed(self, n: int) -> None:
        """``n`` more commands committed (all owners; the rate is the throughput)."""
        self._committed.inc(n)

    def observe_fsync_s(self, seconds: float, records: int, nbytes: int) -> None:
        """One log append took ``seconds`` (write and fsync) for ``records`` records
        of ``nbytes`` bytes. Safe to call from the log's worker thread."""
        self._fsync.observe(seconds)
        self._fsync_records.observe(records)
        self._log_written.inc(nbytes)

    def set_peer_rtt_s(self, peer: int, seconds: float) -> None:
        """The latest round-trip time measured to ``peer``."""
        series = self._peer(peer)
        rtt = series.rtt
        if rtt is None:
            rtt = series.rtt = self._peer_rtt.labels(self.node, series.peer)
        rtt.set(seconds)

    def set_peer_queue(self, peer: int, frames: int, nbytes: int) -> None:
        """What waits in the send queue to ``peer`` (frames and bytes)."""
        series = self._peer(peer)
        series.queue_frames.set(frames)
        series.queue_bytes.set(nbytes)

    def set_peer_connected(self, peer: int, up: bool) -> None:
        """Whether a connection to ``peer`` is up (1) or not (0)."""
        self._peer(peer).connected.set(1 if up else 0)

    def frame_rejected(self, reason: str) -> None:
        """A received frame was dropped, for ``reason``: a fixed string chosen by
        the code (see :data:`REJECT_REASONS`), never text from the frame."""
        self._reason(reason).inc()

    def update_from_status(
        self,
        *,
        view: int,
        executed_slot: int,
        is_sequencer: bool,
        log_bytes: int,
        snapshot_bytes: int,
        view_changes: int,
        c_recoveries: int,
        stages_s: Mapping[str, float] | None = None,
    ) -> None:
        """The node's current state: its view, how far it executed, whether it
        is the sequencer, the sizes of its log and snapshot, and the core's
        monotone counts of view changes and C-recoveries started; and the
        seconds its loop spent in each stage so far
        (:attr:`~sdpaxos.runtime.node.NodeStatus.stages_s`), if given.

        Keyword-only: seven ints in a row are too easy to swap.
        """
        self._status = (
            view,
            executed_slot,
            1 if is_sequencer else 0,
            log_bytes,
            snapshot_bytes,
            view_changes,
            c_recoveries,
        )
        if stages_s is not None:
            self._stages = tuple(stages_s.items())

    def render(self) -> bytes:
        """The text exposition (format 0.0.4) of this node's registry."""
        return generate_latest(self.registry)


# --- HTTP -------------------------------------------------------------------

#: The largest request head read; a scraper's is a few hundred bytes.
_MAX_REQUEST_BYTES = 8192
#: How long a client may take to send its request head.
_REQUEST_TIMEOUT_S = 5.0


class MetricsServer:
    """A running ``/metrics`` endpoint; :meth:`close` stops it.

    Also an async context manager (``async with await serve_metrics(...)``).
    """

    def __init__(self, server: asyncio.Server) -> None:
        self._server = server
        # Read now: a closed server has no sockets left to ask.
        self._port: int = server.sockets[0].getsockname()[1]

    @property
    def port(self) -> int:
        """The bound port (the real one when asked for port 0).

        With port 0 and a host name that resolves to several addresses
        (``localhost``: IPv4 and IPv6), each address gets its own free port and
        this is the first one's; bind a literal address to have just one.
        """
        return self._port

    async def close(self) -> None:
        """Stop listening and wait until the server is closed."""
        self._server.close()
        await self._server.wait_closed()

    async def __aenter__(self) -> MetricsServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _answer(metrics: Metrics, head: bytes) -> bytes:
    """The response to one request head (everything up to the blank line)."""
    line = head.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return _response("400 Bad Request", b"bad request\n")
    method, target = parts[0], parts[1]
    path = target.split(b"?", 1)[0]
    if path != b"/metrics":
        return _response("404 Not Found", b"not found\n")
    if method != b"GET":
        return _response("405 Method Not Allowed", b"method not allowed\n")
    return _response("200 OK", metrics.render(), CONTENT_TYPE)


async def serve_metrics(metrics: Metrics, host: str, port: int) -> MetricsServer:
    """Serve ``GET /metrics`` with ``metrics.render()`` on the running event loop.

    ``port=0`` binds a free port; :attr:`MetricsServer.port` says which. Each
    connection carries one request and is closed after the answer; a request
    head over 8 KiB, slower than 5 s, or not HTTP/1.x is refused and closed,
    never allowed to stop the server.
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(
                    reader.readuntil(b"\r\n\r\n"), timeout=_REQUEST_TIMEOUT_S
                )
            except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
                writer.write(_response("400 Bad Request", b"bad request\n"))
            else:
                writer.write(_answer(metrics, head))
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the scraper went away; nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, host, port, limit=_MAX_REQUEST_BYTES)
    return MetricsServer(server)
