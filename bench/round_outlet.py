"""The round driver's clients and links: where every replica's ``Ready`` batch goes.

:class:`Driver` is the :class:`~sdpaxos.sim.driver.Outlet` of every replica of
a run of :mod:`bench.rounds`: it turns a batch's messages into frames (one per
destination, encoded with the protocol's codec, or the messages themselves
without one) appended to the destinations' FIFO inboxes, answers the closed-loop
sessions, and issues their next operations. Its counters (CPU seconds per
replica and call, bytes per replica and direction) are what the loop measures.
"""

from __future__ import annotations

import math
import random
import struct
import time
from collections.abc import Callable
from typing import Any

from bench.cputime import TIMED_CALLS
from bench.round_result import BYTE_COUNTERS, read_bytes, reply_bytes, submit_bytes
from bench.round_spec import RoundSpec
from bench.runtime_app import KV_HEADER_BYTES, PUT, BenchLog, kv_get
from bench.workloads import HOT_KEY, OpStream
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.ready import ReadResult, Reply, ReplyKind
from sdpaxos.core.storage import MemoryStorage, Record, Snapshot
from sdpaxos.core.types import Command, Wait
from sdpaxos.protocols import MakeReplica
from sdpaxos.sim.driver import Outlet
from sdpaxos.wire.codec import MESSAGES_PER_BATCH_MAX, PackedMessages
from sdpaxos.wire.framing import LENGTH_PREFIX_BYTES

#: The payload of a command of the core micro-benchmark's load (``kv=False``):
#: ``(client_id, seq)``, fixed width, unique.
CORE_PAYLOAD = struct.Struct(">IQ")


class CountingStorage:
    """Counts the records a batch asks to persist and keeps none of them.

    The benchmarks measure the protocol, not storage; the durability order is
    still the shared driver's (:func:`sdpaxos.sim.driver.carry_out`).
    """

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records = 0

    def append(self, records: list[Record]) -> None:
        self.records += len(records)

    def load(self) -> list[Record]:
        return []

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Nothing is kept, so nothing is truncated."""

    def load_snapshot(self) -> Snapshot | None:
        return None

    def start_epoch(self, snapshot: Snapshot) -> None:
        """Nothing is kept: a new epoch forgets nothing."""


class KeepingStorage(MemoryStorage):
    """``MemoryStorage`` (records kept, truncated behind each snapshot), counting appends."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        super().__init__()
        self.records = 0

    def append(self, records: list[Record]) -> None:
        self.records += len(records)
        super().append(records)


class _Session:
    __slots__ = ("cid", "key", "replica", "seq", "stream", "waiting", "written", "written_key")

    def __init__(self, cid: int, replica: int, stream: OpStream | None) -> None:
        self.cid = cid
        self.replica = replica
        self.stream = stream
        self.seq = 0
        #: The key of the outstanding read (it may go through the log).
        self.key = b""
        #: What completes the outstanding op: ReplyKind, "read", or None (idle).
        self.waiting: Any = None
        #: The key and value of this session's last write (completed before
        #: any later read of it was issued: a linearizable read must see it).
        self.written_key = b""
        self.written = b""

    def expected(self) -> bytes | None:
        """What a read of :attr:`key` must return; ``None``: not known (the hot
        key, which other sessions write too)."""
        if self.key == HOT_KEY:
            return None
        # Any other key is this session's alone: its last write, or never written.
        return self.written if self.key == self.written_key else b""


class Driver(Outlet):
    """The outlet of every replica: frames to inboxes, answers to the sessions.

    ``codec`` is the protocol's (``encode_batch(messages, packed)``,
    ``decode_batch(frame)``), or None: the messages travel as objects.
    """

    def __init__(
        self,
        spec: RoundSpec,
        make: MakeReplica,
        codec: Any,
        config: ClusterConfig | None = None,
        machine: Callable[[bool], Any] = BenchLog,
    ) -> None:
        self.spec = spec
        n = spec.replicas
        self.n = n
        self.kv = spec.kv
        cfg = config if config is not None else spec.cluster_config()
        self.config = cfg
        self.machines = [machine(spec.kv) for _ in range(n)]
        self.storages: list[CountingStorage | KeepingStorage] = [
            KeepingStorage() if spec.storage == "memory" else CountingStorage() for _ in range(n)
        ]
        self.replicas = [
            make(cfg, r, self.machines[r], random.Random(spec.seed * 1_000_003 + r), False, None)
            for r in range(n)
        ]
        self.encode = None if codec is None else codec.encode_batch
        self.decode = None if codec is None else codec.decode_batch
        self.inboxes: list[list[Any]] = [[] for _ in range(n)]
        self.seconds = [dict.fromkeys(TIMED_CALLS, 0.0) for _ in range(n)]
        self.bytes = [dict.fromkeys(BYTE_COUNTERS, 0) for _ in range(n)]
        self.clock = time.thread_time
        self.now_ms = 0.0
        workload = spec.workload() if spec.kv else None
        hosts = [spec.leader] * (n * spec.sessions) if spec.clients_at == "leader" else None
        self.sessions: list[_Session] = []
        self.by_cid: dict[int, _Session] = {}
        for i in range(n * spec.sessions):
            r = hosts[i] if hosts is not None else i % n
            stream = OpStream(workload, i + 1) if workload is not None else None
            s = _Session(i + 1, r, stream)
            self.sessions.append(s)
            self.by_cid[s.cid] = s
        self.reads_pending: dict[int, _Session] = {}
        self.read_ids = 0
        #: Sessions whose next operation is issued after the current turn.
        self.next_ops: list[list[_Session]] = [[] for _ in range(n)]
        self.completed = 0
        self.issued = 0
        self.proposed = 0
        self.reads_ok = 0
        self.reads_via_log = 0
        #: Operations issued stop here: the fixed amount of an ``exact`` run;
        #: else unbounded until the measured window closes (a steady state: as
        #: many in flight at its end as at its start), then the number issued,
        #: so the run drains.
        self.limit: float = spec.warmup + spec.commands if spec.exact else math.inf
        self.instances: dict[tuple[str, int, int], int] = {}
        self.frames = 0
        self.wire_bytes = 0
        self.codec_bytes = 0
        #: Messages stepped and sent; batches that stepped, sent or answered
        #: something (the loop's quiet-round detection resets it every round).
        self.steps = 0
        self.sent = 0
        self.activity = 0
        self.problems: list[str] = []
        self.has_read = [getattr(rep, "read", None) is not None for rep in self.replicas]
        # The order check: every command proposed gets an id; the order each
        # replica executed them in, as ids (taken from the machines after each turn).
        self.ids: dict[bytes, int] = {}
        self.id_keys: list[bytes] = []
        self.orders: list[list[int | None]] = [[] for _ in range(n)]
        self.write_payload_sum = 0
        self.writes = 0
        #: Reads whose answer is known (not of the hot key), and those that did
        #: not return what the session last wrote to the key (one described).
        self.reads_checked = 0
        self.stale_reads = 0
        self.stale_example = ""

    def load(self) -> None:
        """The first operation of every session (of the first ``limit`` of them,
        in client order: dealt round-robin over the replicas), issued."""
        first = self.sessions if self.limit == math.inf else self.sessions[: int(self.limit)]
        for s in first:
            self.next_ops[s.replica].append(s)
        for r in range(self.n):
            self.issue(r)

    # -- the outlet ---------------------------------------------------------

    def persisted(self, replica: int, records: list[Record]) -> None:
        """Counts the commands of every instance (``kv=False``: not; the core's
        own counters say, and a record costs this loop a microsecond)."""
        if not self.kv:
            return
        instances = self.instances
        for rec in records:
            commands = getattr(rec, "commands", None)
            if commands:
                owner = getattr(rec, "owner", None)
                index = getattr(rec, "index", None)
                if type(owner) is int and type(index) is int:
                    instances[(type(rec).__name__, owner, index)] = len(commands)

    def send(self, replica: int, messages: Any) -> bool:
        if not messages:
            return False
        self.sent += len(messages)
        self.activity += 1
        inboxes = self.inboxes
        encode = self.encode
        if encode is None:
            for dst, m in messages:
                inboxes[dst].append(m)
            return False
        per_dst: dict[int, list[Any]] = {}
        for dst, m in messages:
            bucket = per_dst.get(dst)
            if bucket is None:
                per_dst[dst] = [m]
            else:
                bucket.append(m)
        clock = self.clock
        t0 = clock()
        frames = []
        packed: PackedMessages = {}  # a broadcast is packed once
        for dst, bucket in per_dst.items():
            for lo in range(0, len(bucket), MESSAGES_PER_BATCH_MAX):
                frames.append((dst, encode(bucket[lo : lo + MESSAGES_PER_BATCH_MAX], packed)))
        self.seconds[replica]["encode"] += clock() - t0
        counters = self.bytes
        out = counters[replica]
        for dst, frame in frames:
            size = len(frame) + LENGTH_PREFIX_BYTES
            self.frames += 1
            self.wire_bytes += size
            self.codec_bytes += len(frame)
            out["peer_out"] += size
            counters[dst]["peer_in"] += size
            inboxes[dst].append(frame)
        return False

    def replies(self, replica: int, replies: list[Reply]) -> None:
        self.activity += 1
        by_cid = self.by_cid
        nxt = self.next_ops[replica]
        counter = self.bytes[replica]
        kv = self.kv
        for reply in replies:
            s = by_cid.get(reply.client_id)
            if s is None or s.seq != reply.seq or s.replica != replica:
                self.problems.append(f"unexpected reply {reply!r} at replica {replica}")
                continue
            if reply.kind is not s.waiting:
                if s.waiting is None and not kv:
                    # The core's load is all writes: a second READY for one.
                    self.problems.append(f"unexpected reply {reply!r} at replica {replica}")
                continue  # READY of a read through the log: it waits for EXECUTED
            if reply.kind is ReplyKind.EXECUTED:  # a read through the log
                self._check_read(s, reply.result or b"", replica)
            s.waiting = None
            self.completed += 1
            if kv:
                counter["client_out"] += reply_bytes(s.cid, s.seq, reply.result)
            nxt.append(s)

    def reads(self, replica: int, results: list[ReadResult]) -> None:
        self.activity += 1
        nxt = self.next_ops[replica]
        counter = self.bytes[replica]
        for result in results:
            s = self.reads_pending.pop(result.read_id, None)
            if s is None or s.replica != replica:
                self.problems.append(f"unexpected read result {result!r} at replica {replica}")
                continue
            if result.ok:
                self.reads_ok += 1
                s.waiting = None
                self.completed += 1
                # The node answers from its own store: the value it holds now.
                value = self.machines[replica].value(s.key) or b""
                self._check_read(s, value, replica)
                counter["client_out"] += reply_bytes(s.cid, s.seq, value)
            else:
                self.reads_via_log += 1
                s.waiting = "log"  # proposed through the log after this turn
            nxt.append(s)

    def _check_read(self, s: _Session, value: bytes, replica: int) -> None:
        want = s.expected()
        if want is None:
            return
        self.reads_checked += 1
        if value != want:
            self.stale_reads += 1
            if not self.stale_example:
                self.stale_example = (
                    f"a read of {s.key!r} at replica {replica} returned {value[:24]!r},"
                    f" not the session's last write {want[:24]!r}"
                )

    # -- the executed order (driver bookkeeping, not timed) --------------------

    def _register(self, payload: bytes, key: bytes) -> bool:
        if payload in self.ids:
            return False
        self.ids[payload] = len(self.id_keys)
        self.id_keys.append(key)
        return True

    def take_orders(self, replica: int) -> None:
        taken = self.machines[replica].take_order()
        if taken:
            self.orders[replica].extend(map(self.ids.get, taken))

    def _write_payload(self, key: bytes, tag: bytes) -> bytes:
        """A put of ``key`` of ``payload_bytes`` in all, unique: the value is the
        operation's tag (``s<stream>n<op>``, padded), cut to fit; if the cut one is
        not unique (a long key), the whole tag (the payload is then larger)."""
        head = bytes((PUT, len(key))) + key
        room = self.spec.payload_bytes - len(head)
        payload = head + tag[: max(room, 0)]
        if not self._register(payload, key):
            payload = head + tag
            if not self._register(payload, key):
                raise AssertionError(f"payload {payload[:40]!r} is not unique")
        self.writes += 1
        self.write_payload_sum += len(payload)
        return payload

    # -- sessions -----------------------------------------------------------

    def _log_read(self, s: _Session) -> Command:
        s.seq += 1
        payload = kv_get(s.key, b"#%d:%d" % (s.cid, s.seq))
        if not self._register(payload, s.key):
            raise AssertionError(f"payload {payload[:40]!r} is not unique")
        return Command(s.cid, s.seq, payload, s.key)

    def issue(self, replica: int) -> None:
        """The next operations of ``replica``'s sessions that completed (timed).

        The operations are built first, then handed to the replica: all the
        proposals, timed as one interval, then all the reads, as another (the
        sessions are independent, and each has one operation in a turn). A
        read of the thread's CPU clock costs about as much as a proposal (0.5
        to 0.8 us on this project's VM), so timing each call alone charged
        every protocol that much per command, for the clock's work.
        """
        todo = self.next_ops[replica]
        if not todo:
            return
        self.next_ops[replica] = []
        proposals: list[tuple[Command, Wait]] = []
        reads: list[tuple[int, bytes]] = []
        if self.kv:
            self._kv_ops(replica, todo, proposals, reads)
        else:
            # The core micro-benchmark's load: nothing per command but the command.
            pack = CORE_PAYLOAD.pack
            ready = Wait.READY
            issued, limit = self.issued, self.limit
            for s in todo:
                if issued >= limit:
                    break
                issued += 1
                s.seq += 1
                s.waiting = ReplyKind.READY
                proposals.append((Command(s.cid, s.seq, pack(s.cid, s.seq)), ready))
            self.proposed += issued - self.issued
            self.issued = issued
        rep = self.replicas[replica]
        clock = self.clock
        seconds = self.seconds[replica]
        if proposals:
            propose = rep.propose
            t0 = clock()
            for cmd, wait in proposals:
                propose(cmd, wait)
            seconds["propose"] += clock() - t0
        if reads:
            read = rep.read
            now = self.now_ms
            t0 = clock()
            for rid, key in reads:
                read(rid, key, now)
            seconds["read"] += clock() - t0

    def _kv_ops(
        self,
        replica: int,
        todo: list[_Session],
        proposals: list[tuple[Command, Wait]],
        reads: list[tuple[int, bytes]],
    ) -> None:
        counter = self.bytes[replica]
        add = proposals.append
        for s in todo:
            if s.waiting == "log":
                # The node sends the read through the log itself: no client bytes.
                cmd = self._log_read(s)
                s.waiting = ReplyKind.EXECUTED
                self.proposed += 1
                add((cmd, Wait.EXECUTED))
                continue
            if self.issued >= self.limit:
                continue
            self.issued += 1
            assert s.stream is not None
            op = s.stream.next()
            if op.kind == "read":
                s.key = op.key
                if self.has_read[replica]:
                    self.read_ids += 1
                    rid = self.read_ids
                    s.waiting = "read"
                    self.reads_pending[rid] = s
                    counter["client_in"] += read_bytes(s.cid, s.seq, op.key)
                    reads.append((rid, op.key))
                    continue
                cmd = self._log_read(s)
                s.waiting = ReplyKind.EXECUTED
                wait = Wait.EXECUTED
            else:
                s.seq += 1
                payload = self._write_payload(op.key, op.payload)
                cmd = Command(s.cid, s.seq, payload, op.key)
                s.written_key = op.key
                s.written = payload[KV_HEADER_BYTES + len(op.key) :]
                s.waiting = ReplyKind.READY
                wait = Wait.READY
            counter["client_in"] += submit_bytes(s.cid, s.seq, cmd.payload, cmd.key)
            self.proposed += 1
            add((cmd, wait))

    def restart_counters(self) -> None:
        for r in range(self.n):
            self.seconds[r] = dict.fromkeys(TIMED_CALLS, 0.0)
            self.bytes[r] = dict.fromkeys(BYTE_COUNTERS, 0)
