"""Where a node stands: its status types and the counters its parts keep.

Why a module of its own: the driver, the peers and the clients each count what
they do (:class:`Tally`), and :class:`~sdpaxos.runtime.node.Node` puts their
counts together into one :class:`NodeStatus` for people (``python -m sdpaxos
status``), tests and the benchmarks. None of those parts should import another
to read a counter.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.core.ready import ReplyKind
from sdpaxos.protocols import DEFAULT_PROTOCOL, CounterNames
from sdpaxos.runtime.metrics import Metrics

#: Refused frames and connections are logged under the node's name (one line
#: each, with the reason), which operators and ``python -m sdpaxos fuzz`` filter on.
refusals = logging.getLogger("sdpaxos.runtime.node")

__all__ = [
    "IO_COUNTERS",
    "STAGES",
    "NodeStatus",
    "PeerStatus",
    "Tally",
    "clock_ms",
    "count_rejected",
    "counters_of",
    "observe_latency",
    "reject_reason",
]

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
    #: lease; no baseline has snapshots): see :class:`sdpaxos.protocols.CoreReplica`.
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
    protocol: str = DEFAULT_PROTOCOL
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
    #: A changing membership (None and empty for a protocol whose replicas are
    #: fixed): the epoch this node runs; what it is, in words ("member",
    #: "learner, lag N slots", "waiting to be added as a learner", "removed",
    #: "lost its data: replace it with replace-replica"); the members ``{id,
    #: address, region}`` in position order; the learners, each with
    #: ``lag_slots`` as this node sees it (a member measures it: None
    #: elsewhere, or before the learner asked for state); the member list of
    #: the change waiting for its stop (None: no change in progress).
    epoch: int | None = None
    role: str | None = None
    members: tuple[dict[str, Any], ...] = ()
    learners: tuple[dict[str, Any], ...] = ()
    pending: tuple[int, ...] | None = None
    #: Nodes whose connection this node refused, and why (a certificate that
    #: names another node, another protocol, another cluster or initial
    #: membership), as ``(node id, reason)``, the newest reason per node: the
    #: place an operator looks when a node never joins.
    refused: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Tally:
    """The counters a node's parts share: one object, handed to each part.

    ``io`` and ``stages_s`` are plain dicts because the hot path adds to them
    once or twice per frame (a dict item costs less than an attribute of a
    slotted object here, and :class:`NodeStatus` copies them as they are).
    """

    __slots__ = ("frames_rejected", "fsyncs", "io", "records_written", "stages_s")

    def __init__(self) -> None:
        #: See :attr:`NodeStatus.io`.
        self.io: dict[str, int] = dict.fromkeys(IO_COUNTERS, 0)
        #: See :attr:`NodeStatus.stages_s`.
        self.stages_s: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self.frames_rejected = 0
        self.fsyncs = 0
        self.records_written = 0


def clock_ms() -> float:
    """For what is measured (latencies, round trips): ``time.monotonic()`` in ms.

    Not the loop's clock, which under uvloop counts whole milliseconds and is
    read once per loop turn; the core's timers run on that one, which is fine
    for timeouts but not for a 0.3 ms loopback round trip."""
    return time.monotonic() * 1000.0


def observe_latency(metrics: Metrics | None, kind: ReplyKind, started_ms: float) -> None:
    """A command answered: its latency since ``started_ms`` (:func:`clock_ms`),
    as a commit (READY) or an execution (EXECUTED)."""
    if metrics is None:
        return
    seconds = (clock_ms() - started_ms) / 1000
    if kind == ReplyKind.EXECUTED:
        metrics.observe_execute_s(seconds)
    else:
        metrics.observe_commit_s(seconds)


def counters_of(stats: object) -> dict[str, int]:
    """A core's counters by name (a dataclass of ints, or a dict of them as a
    member's replicas summed over the epochs; nothing otherwise)."""
    if isinstance(stats, dict):
        return {k: v for k, v in stats.items() if type(v) is int}
    if dataclasses.is_dataclass(stats) and not isinstance(stats, type):
        return {k: v for k, v in dataclasses.asdict(stats).items() if type(v) is int}
    return {}


def count_rejected(
    tally: Tally, metrics: Metrics | None, node_id: int, what: str, reason: str
) -> None:
    """A refused frame or connection: counted, logged, and labelled in the metrics."""
    tally.frames_rejected += 1
    refusals.warning("node %d: dropped %s: %s", node_id, what, reason)
    if metrics is not None:
        metrics.frame_rejected(reject_reason(reason))


def reject_reason(reason: str) -> str:
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


def report_metrics(
    metrics: Metrics, st: NodeStatus, names: CounterNames, ready_reported: int
) -> int:
    """Refresh ``metrics`` from a node's status; returns the ready count
    reported now (the next call counts from it). A protocol without a counter
    reports 0; its nearest counters stand in for SDPaxos's (:class:`CounterNames`)."""
    counts = st.stats
    metrics.update_from_status(
        view=st.view or 0,
        executed_slot=st.executed_upto or 0,
        is_sequencer=bool(st.is_sequencer),
        log_bytes=st.log_bytes,
        snapshot_bytes=st.snapshot_bytes,
        view_changes=counts.get(names.view_changes, 0) if names.view_changes else 0,
        c_recoveries=counts.get(names.recoveries, 0) if names.recoveries else 0,
        stages_s=st.stages_s,
    )
    for p in st.peers:
        metrics.set_peer_queue(p.id, 0, p.queue_bytes)
    ready = counts.get(names.ready, 0)
    metrics.commands_committed(max(0, ready - ready_reported))
    return ready
