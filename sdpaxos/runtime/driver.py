"""The driver: one replica and its durable log, carried forward on the event loop.

This is where a batch is made durable. The core never awaits: something has to
call :meth:`~sdpaxos.protocols.CoreReplica.ready` and carry out what it says,
in the durability order of :mod:`sdpaxos.core.ready`. Once per loop turn
(:meth:`Driver.kick` coalesces every event of the turn into one ``call_soon``)
the driver takes ``ready()`` and:

1. appends its records (and snapshot) to the durable log, on one worker
   thread so that the event loop never waits on the disk. While a write is in
   flight, the records of later batches gather and go in the next write:
   **group commit**, one ``fsync`` for many batches (without ``fsync`` an
   append is a buffered write of microseconds, made inline);
2. holds the batch's messages, replies and read results until every record of
   that batch *and of every batch before it* is durable, then releases them in
   batch order (:meth:`Driver._release`): replies go to their waiters, read
   results to their reads, messages to the outlet at the end of the turn. A
   batch with no records whose predecessors are durable leaves at once.

It also ticks the core every ``tick_ms`` and asks for a snapshot when the log
grows past its bound. It knows nothing of sockets, TLS, frames, the delay
emulator, peers or clients: those reach it through :class:`DriverPort` (the
peers step the messages they decode, the clients propose and read), and it
reaches them through its :class:`Outlet`.

**One kind of waiter**: whoever waits for a command's reply is a
:data:`Waiter`, answered once with the reply, or with None when the node stops
first (a local caller and a client connection's request alike).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from sdpaxos.core.errors import Overloaded
from sdpaxos.core.messages import Message
from sdpaxos.core.ready import ReadResult, Ready, Reply
from sdpaxos.core.storage import Record, Snapshot
from sdpaxos.core.types import Command, ReplicaId, Wait
from sdpaxos.protocols import CoreReplica, ProtocolSpec
from sdpaxos.runtime.log import DurableLog
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.status import Tally

__all__ = [
    "READY_CALLS_PER_FLUSH_MAX",
    "READ_RETRY_S",
    "READ_TIMEOUT_S",
    "Driver",
    "DriverPort",
    "Outlet",
    "ReadDone",
    "ReplySink",
    "Waiter",
]

logger = logging.getLogger(__name__)

_perf = time.perf_counter

#: ``ready()`` calls in one flush before yielding to the loop (a batch may
#: leave more deferred work, e.g. an execution that unblocks another).
READY_CALLS_PER_FLUSH_MAX = 64
#: A read the sequencer could not serve is asked again after this long, until
#: its deadline; then its caller is told no.
READ_RETRY_S = 0.02
#: How long a linearizable read waits for a safe answer by default (a remote
#: client's read not served by then is answered RETRY, and it retries).
READ_TIMEOUT_S = 5.0


class ReplySink(Protocol):
    """Where the replies to some waiters go (the clients, the node's own callers)."""

    def answered(self, token: Any, request_id: int, reply: Reply | None, started_ms: float) -> None:
        """The reply for the waiter ``(self, token, request_id, started_ms)``,
        or None when the node stopped before answering."""
        ...


#: Who waits for a command's reply: ``(sink, token, request_id, started_ms)``.
#: The driver calls ``sink.answered(token, request_id, reply, started_ms)``
#: once, with the reply or with None. A plain tuple because one is made per
#: command on the clients' path (a tuple literal costs a fraction of an object).
Waiter = tuple[ReplySink, Any, int, float]
#: Who waits for a read: ``(ok, the state machine's answer)``; ok False when no
#: safe answer came by the deadline (or the node stopped).
ReadDone = Callable[[bool, bytes | None], None]


class Outlet(Protocol):
    """Where the driver's released outputs go (the node: its clients and peers)."""

    def send_out(self, out: dict[int, list[Message]]) -> None:
        """The end of a turn: write the clients' answers, then the peers' messages."""
        ...

    def failed(self, exc: BaseException) -> None:
        """The log failed and the driver stopped: close every connection."""
        ...


class DriverPort(Protocol):
    """What the peers and the clients may ask of the driver (and nothing else)."""

    #: Whether the driver runs (it stops for good when the node stops or its log fails).
    running: bool
    #: Whether a turn is scheduled already (an answer given outside one kicks one).
    flush_scheduled: bool
    #: The commands proposed here and not answered yet, by ``(client_id, seq)``:
    #: a retry of one joins its waiters (:meth:`enqueue`) instead of proposing.
    waiting: dict[tuple[int, int], list[Waiter]]

    @property
    def executed_upto(self) -> int | None: ...
    def now_ms(self) -> float: ...
    def kick(self) -> None: ...
    def step(self, messages: list[Any]) -> None: ...
    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None: ...
    def propose_new(self, cmd: Command, wait: Wait, waiter: Waiter) -> bool: ...
    def enqueue(self, cmd: Command, wait: Wait, waiter: Waiter) -> bool: ...
    def start_read(
        self, key: bytes | None, request: bytes | None, deadline_ms: float, done: ReadDone
    ) -> None: ...
    def query(self, key: bytes | None, request: bytes | None) -> bytes | None: ...
    def refusal(self) -> str | None: ...


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


class Driver:
    """Carries one replica's ``ready()`` batches out (see the module docstring)."""

    def __init__(
        self,
        replica: CoreReplica,
        log: DurableLog,
        spec: ProtocolSpec,
        *,
        loop: asyncio.AbstractEventLoop,
        io: concurrent.futures.ThreadPoolExecutor,
        outlet: Outlet,
        tally: Tally,
        metrics: Metrics | None,
        query: Callable[[bytes], bytes] | None,
        tick_ms: float,
        propose_queue_max: int,
        snapshot_log_bytes: int | None,
        refusal: Callable[[], str | None] | None = None,
    ) -> None:
        self.replica = replica
        self._refusal = refusal
        self.log = log
        self.spec = spec
        self.loop = loop
        self.io = io
        self.outlet = outlet
        self.tally = tally
        self.metrics = metrics
        self._query_sm = query
        self.tick_ms = tick_ms
        self.propose_queue_max = propose_queue_max
        self.snapshot_log_bytes = snapshot_log_bytes
        self.running = False
        #: The log's failure, once it failed (the driver stopped for good).
        self.failed: BaseException | None = None
        #: Append inline (on the loop) when the log does not fsync; a test that
        #: holds the log thread back turns it off.
        self.inline_writes = True
        #: Set while the proposal queue has room (local submitters wait on it).
        self.room = asyncio.Event()
        self.flush_scheduled = False
        self._tick_timer: asyncio.TimerHandle | None = None
        self._records_seq = 0
        self._durable_seq = 0
        self._unsaved: list[Record] = []
        self._unsaved_snapshot: Snapshot | None = None
        #: An epoch's base to start after the unsaved records (membership
        #: change), and what later batches persist in the new epoch meanwhile.
        self._unsaved_epoch: Snapshot | None = None
        self._after_epoch: list[Record] = []
        self._after_epoch_snapshot: Snapshot | None = None
        self._writing = False
        self._held: deque[_Held] = deque()
        #: Messages released this turn, by destination (sent at its end).
        self.out: dict[int, list[Message]] = {}
        self.waiting: dict[tuple[int, int], list[Waiter]] = {}
        self._reads: dict[int, Callable[[bool], None]] = {}
        self._read_ids = 0
        self._snapshot_asked = False

    # -------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self.running = True
        self._tick_timer = self.loop.call_later(self.tick_ms / 1000, self._on_tick)
        self.kick()

    def stop(self) -> None:
        self.running = False
        if self._tick_timer is not None:
            self._tick_timer.cancel()

    def fail(self, exc: BaseException) -> None:
        """The log failed: stop acknowledging anything (never lose an acked write)."""
        self.failed = exc
        self.running = False
        self.outlet.failed(exc)
        self.abandon_waiters()

    def abandon_waiters(self) -> None:
        """Wake everyone still waiting: no answer will come from this node."""
        waiting, self.waiting = self.waiting, {}
        for waiters in waiting.values():
            for sink, token, request_id, started_ms in waiters:
                sink.answered(token, request_id, None, started_ms)
        reads, self._reads = self._reads, {}
        for done in reads.values():
            done(False)

    # ------------------------------------------------------------------ turns

    def now_ms(self) -> float:
        return self.loop.time() * 1000.0

    @property
    def executed_upto(self) -> int | None:
        return self.replica.executed_upto

    def kick(self) -> None:
        """Carry out ``ready()`` once this loop turn (coalesces many events)."""
        if not self.flush_scheduled and self.running:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        replica = self.replica
        if not self.running:
            return
        self.tally.io["turns"] += 1
        stages = self.tally.stages_s
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
            self.kick()
        self.send_out()
        room = self.room
        if not room.is_set():
            waiting = replica.proposals_waiting
            if waiting is None or waiting < self.propose_queue_max // 2:
                room.set()

    def send_out(self) -> None:
        """Hand this turn's answers and messages to the outlet."""
        out = self.out
        if out:
            self.out = {}
        self.outlet.send_out(out)

    def _carry_out(self, rd: Ready) -> None:
        if rd.persist or rd.snapshot is not None or rd.epoch_base is not None:
            if self._unsaved_epoch is not None:
                # After an epoch's base, in the same write: the new epoch's own.
                self._after_epoch.extend(rd.persist)
                if rd.snapshot is not None:
                    self._after_epoch_snapshot = rd.snapshot
            else:
                self._unsaved.extend(rd.persist)
                if rd.snapshot is not None:
                    self._unsaved_snapshot = rd.snapshot
            if rd.epoch_base is not None:
                # A newer epoch: the base replaces whatever came between (it
                # would forget those records anyway), in the write's order.
                self._unsaved_epoch = rd.epoch_base
                self._after_epoch, self._after_epoch_snapshot = [], None
            self._records_seq += 1
            if not self._writing:
                self._start_write()
        if not rd.messages and not rd.replies and not rd.reads:
            return
        if not self._held and self._durable_seq >= self._records_seq:
            self._release(rd.messages, rd.replies, rd.reads)
        else:
            self._held.append(_Held(self._records_seq, rd.messages, rd.replies, rd.reads))

    # ------------------------------------------------------------ group commit

    def _start_write(self) -> None:
        records, snapshot = self._unsaved, self._unsaved_snapshot
        self._unsaved, self._unsaved_snapshot = [], None
        epoch = self._unsaved_epoch
        if epoch is not None:
            after = (epoch, self._after_epoch, self._after_epoch_snapshot)
            self._unsaved_epoch, self._after_epoch, self._after_epoch_snapshot = None, [], None
        else:
            after = None
        seq = self._records_seq
        self._writing = True
        if self.inline_writes and not self.log.fsync and snapshot is None and after is None:
            # Without fsync an append is a buffered write of microseconds: the
            # hand-off to the log thread and back would cost more than it saves.
            future: asyncio.Future[tuple[float, int]] = self.loop.create_future()
            try:
                future.set_result(self._write(records, None))
            except Exception as exc:  # the log failed: _written stops the node
                future.set_exception(exc)
            self._written(future, seq, len(records), inline=True)
            return
        count = len(records) + (len(after[1]) if after is not None else 0)
        if after is None:
            future = self.loop.run_in_executor(self.io, self._write, records, snapshot)
        else:
            future = self.loop.run_in_executor(self.io, self._write, records, snapshot, after)
        future.add_done_callback(lambda f: self._written(f, seq, count))

    def _write(
        self,
        records: list[Record],
        snapshot: Snapshot | None,
        after: tuple[Snapshot, list[Record], Snapshot | None] | None = None,
    ) -> tuple[float, int]:
        """On the log thread: append (one fsync), then the snapshot; then, when
        an epoch ended, start the next one from its base (``docs/membership.md``
        section 4.3: after the old epoch's records, before anything of the new
        one leaves) and append the new epoch's records after it.

        Returns the seconds it took and the bytes appended."""
        log = self.log
        started = time.perf_counter()
        nbytes = log.append(records) if records else 0
        if snapshot is not None:
            log.save_snapshot(snapshot)
        if after is not None:
            base, more, more_snapshot = after
            log.start_epoch(base)
            nbytes += log.append(more) if more else 0
            if more_snapshot is not None:
                log.save_snapshot(more_snapshot)
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
            logger.error("durable log failed, stopping: %s", exc)
            self.fail(exc)
            return
        t0 = _perf()
        tally = self.tally
        stages = tally.stages_s
        tally.fsyncs += 1
        tally.records_written += count
        seconds, nbytes = future.result()
        stages["log"] += seconds
        if self.metrics is not None:
            self.metrics.observe_fsync_s(seconds, count, nbytes)
        self._durable_seq = seq
        held = self._held
        while held and held[0].need <= seq:
            h = held.popleft()
            self._release(h.messages, h.replies, h.reads)
        unsaved = self._unsaved or self._unsaved_snapshot is not None
        if (unsaved or self._unsaved_epoch is not None) and self.running:
            self._start_write()
        if not inline:
            # On its own loop turn (the log thread's write is done): timed
            # here; inline, the caller's turn counts it.
            stages["carry_out"] += _perf() - t0
            self.send_out()
        self._maybe_snapshot()

    def _release(
        self,
        messages: list[tuple[ReplicaId, Message]],
        replies: list[Reply],
        reads: list[ReadResult],
    ) -> None:
        out = self.out
        for dst, msg in messages:
            q = out.get(dst)
            if q is None:
                out[dst] = [msg]
            else:
                q.append(msg)
        if replies:
            pop = self.waiting.pop
            for reply in replies:
                waiters = pop((reply.client_id, reply.seq), None)
                if waiters is not None:
                    for sink, token, request_id, started_ms in waiters:
                        sink.answered(token, request_id, reply, started_ms)
        for rr in reads:
            done = self._reads.pop(rr.read_id, None)
            if done is not None:
                done(rr.ok)

    # ------------------------------------------------------------ the core's timers

    def _on_tick(self) -> None:
        if not self.running:
            return
        self.replica.tick(self.now_ms())
        self.kick()
        self._tick_timer = self.loop.call_later(self.tick_ms / 1000, self._on_tick)

    def request_snapshot(self) -> None:
        """Ask the core for a snapshot now (the ``snapshot`` admin operation)."""
        self.spec.request_snapshot(self.replica)
        self.kick()

    def _maybe_snapshot(self) -> None:
        limit = self.snapshot_log_bytes
        if limit is None or not self.spec.capabilities.snapshots:
            return
        log_bytes = self.log.log_bytes
        if log_bytes >= limit and not self._snapshot_asked:
            self._snapshot_asked = True
            self.request_snapshot()
        elif log_bytes < limit // 2:
            self._snapshot_asked = False

    # ---------------------------------------------------- the port: peers and clients

    def step(self, messages: list[Any]) -> None:
        """Step each message of a peer's frame (checked by the peers), then kick."""
        now = self.now_ms()
        step = self.replica.step
        for m in messages:
            step(m, now)
        self.kick()

    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None:
        self.replica.observe_rtt(peer, rtt_ms)

    def enqueue(self, cmd: Command, wait: Wait, waiter: Waiter) -> bool:
        """Propose ``cmd`` (or join the proposal of the same ``(client_id, seq)``)."""
        waiters = self.waiting.get((cmd.client_id, cmd.seq))
        if waiters is not None:
            waiters.append(waiter)
            return True
        if not self.propose_new(cmd, wait, waiter):
            return False
        self.kick()
        return True

    def propose_new(self, cmd: Command, wait: Wait, waiter: Waiter) -> bool:
        """Propose ``cmd``, not in flight yet, and wait for it with ``waiter``;
        False when the proposal queue is full (the caller answers RETRY, and the
        local submitters wait for :attr:`room`). The caller kicks the flush."""
        try:
            self.replica.propose(cmd, wait)
        except Overloaded:
            self.room.clear()
            return False
        self.waiting[(cmd.client_id, cmd.seq)] = [waiter]
        return True

    def refusal(self) -> str | None:
        """Why this node serves no commands or reads now (None: it does): a
        node of a changing membership that is no member of the running epoch."""
        return self._refusal() if self._refusal is not None else None

    def query(self, key: bytes | None, request: bytes | None) -> bytes | None:
        """The state machine's answer to a read (None if it has no ``query``)."""
        query = self._query_sm
        if query is None:
            return None
        return query(request if request is not None else (key or b""))

    def start_read(
        self, key: bytes | None, request: bytes | None, deadline_ms: float, done: ReadDone
    ) -> None:
        """A linearizable read: ask the core, and on its yes answer with
        :meth:`query`; on no, ask again every :data:`READ_RETRY_S` until
        ``deadline_ms``, then ``done(False, None)``."""
        if not self.running:
            done(False, None)
            return
        self._read_ids += 1
        read_id = self._read_ids

        def result(ok: bool) -> None:
            if ok:
                done(True, self.query(key, request))
            elif self.running and self.now_ms() < deadline_ms:
                self.loop.call_later(READ_RETRY_S, self.start_read, key, request, deadline_ms, done)
            else:
                done(False, None)

        self._reads[read_id] = result
        self.replica.read(read_id, key, self.now_ms())
        self.kick()
