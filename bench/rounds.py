"""A round-based in-memory driver for any protocol: batched throughput, its CPU and its bytes.

Why not the simulator: :class:`~sdpaxos.sim.cluster.SimCluster` hands a replica
one event at a time and drains its effects right away, so no protocol ever
batches there, and CPU per command measured in it is the unbatched cost. A
real node under load handles everything that arrived since its last turn and
then sends one batch; this driver does that, for every protocol by name
(:func:`sdpaxos.protocols.protocol`), the way ``bench/core_micro.py`` does for
the SDPaxos core alone.

One run (:func:`run_rounds`):

* ``replicas`` replicas of the protocol, each with the paper's state machine:
  an in-memory key-value store (:class:`KVMachine`; a put is one dict store).
* Closed-loop sessions, ``sessions`` per replica (or, with ``clients_at =
  "leader"``, all of them at the leader: the paper's Multi-Paxos throughput
  setup); each has one operation outstanding and issues its next one as soon
  as the answer comes back. Operations come from :class:`bench.workloads.OpStream`
  (read share, payload, conflict rate: the share of writes to one hot key). A
  write is ``propose(Wait.READY)`` of a put of its key (``Command.key`` names
  it, so EPaxos's interference and SDPaxos's read history see it) and completes
  at READY. A read uses the protocol's ``read()``: ``ok`` completes it, not
  ``ok`` sends a get through the log as a command (``Wait.EXECUTED``).
* Rounds: replicas in a seeded shuffled order; each decodes and steps every
  frame in its FIFO inbox, calls ``ready()`` once and carries the batch out with
  :func:`sdpaxos.sim.driver.carry_out`; its messages are grouped per destination
  and encoded with the protocol's codec (split at ``MESSAGES_PER_BATCH_MAX``),
  one frame per group, appended to the destination's inbox; a message sent to
  several peers is packed once (``encode_batch``'s ``packed``, as the runtime
  does). The next
  operations of the sessions that completed are proposed (or read) right
  after. A logical clock moves ``round_ms`` per round; a replica ticks whenever
  it crosses a ``tick_ms`` boundary, so heartbeats and leases work.
* ``slow = (replica, every)``: that replica takes its turn only every
  ``every``-th round (a straggler with a fraction of a CPU; its backlog waits
  in its inbox), and its CPU counts ``every`` times in the capacity.

CPU: the thread's CPU clock (``time.thread_time``) around each replica's
decoding of one round's frames, its stepping of their messages, its
``ready()`` (execution, hence the state machine, runs in it), the encoding of
its frames, its proposals of one turn (one interval), its reads of one turn
(another), and its ticks. A read of that clock costs 0.5 to 0.8 us of CPU
here, as much as a proposal, so nothing is timed per command or per frame.
The driver's own bookkeeping (building commands' payloads, matching the
executed payloads to their operations, counting bytes) is not charged; the
state machine's record of the order, one list append per command (13 ns,
``python -m timeit -s "o = []; p = b'x' * 24" "o.append(p)"``), is, inside
``ready()``, at every replica of every protocol alike. The garbage collector is off
during the run (a collection would be charged to whichever call triggers it).
After ``warmup`` completed operations the counters restart; the window
closes when ``commands`` more completed.

Bytes: every frame a replica sends counts, with its length prefix
(:data:`sdpaxos.wire.framing.LENGTH_PREFIX_BYTES`), as egress of the sender and
ingress of the receiver; every client request counts as ingress of the replica
it is sent to and every answer as its egress, each sized as the runtime's
client frames carry it (:mod:`sdpaxos.runtime.frames`: a ``SUBMIT`` item, a
``READ``, a ``REPLY`` item). TCP/IP headers are not counted. From them,
:meth:`RoundResult.nic_capacity_per_s` is the capacity with ``nic_mbps`` each
way per replica (full duplex): the busiest link direction of any replica sets
it, as the busiest CPU sets the CPU capacity.

Verification (``problems``; a run with any is not a number): every payload is
unique (it holds its key and its operation's id), and the driver records, after
each turn and outside the timed code, which operation every replica executed,
in order. Then: every replica executed every command proposed, each exactly
once; the executed sequences are identical (:data:`PER_KEY_ORDER` protocols,
i.e. EPaxos: the subsequence of every key is identical, the order EPaxos
guarantees for interfering commands); the final key-value states are equal;
every operation completed exactly once; no replica rejected a peer message.

Experiments run their cells through :class:`ProtocolWorkers`: each protocol's
runs in one process of its own, kept for the whole experiment, as a replica
is a long-running process of one protocol.
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import os
import random
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import msgpack

from bench.core_micro import CountingStorage
from bench.cputime import TIMED_CALLS
from bench.workloads import HOT_KEY, OpStream, Workload
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.ready import ReadResult, Reply, ReplyKind
from sdpaxos.core.storage import Record
from sdpaxos.core.types import Command, ReplicaId, Wait
from sdpaxos.profiles import uniform
from sdpaxos.protocols import MakeReplica, protocol
from sdpaxos.sim.driver import Outlet, carry_out
from sdpaxos.wire.codec import MESSAGES_PER_BATCH_MAX, PackedMessages
from sdpaxos.wire.framing import LENGTH_PREFIX_BYTES

#: The runtime's rule (``sdpaxos.runtime.config.HEARTBEATS_PER_LEASE``): three
#: heartbeats per lease, so a lease is renewed well before it lapses.
HEARTBEATS_PER_LEASE = 3
#: Rounds without a completed operation before a run is declared stuck.
STUCK_ROUNDS = 5_000
#: Round trip between replicas given to thrifty quorums (a LAN), ms.
LAN_RTT_MS = 0.2
#: Protocols whose replicas agree on the order of interfering commands only
#: (commands on different keys may execute in different orders).
PER_KEY_ORDER = frozenset({"epaxos"})

#: Network bandwidth per replica, each way, Mbit/s: the paper's machines were
#: EC2 m4.large ("Moderate" network performance, which AWS does not quantify);
#: iperf measurements collected at https://stackoverflow.com/questions/18507405
#: give "m4.large is ~445 Mbit/s" (cloudonaut.io's m3/m4 benchmark is of the
#: same order). ``python -m bench throughput --nic-mbps`` changes it.
NIC_MBPS_DEFAULT = 445.0

#: First byte of a payload: a put (write) or a get (a read through the log).
PUT = 0x50  # "P"
GET = 0x47  # "G"
#: Payload layout: op (1 byte), key length (1 byte), key, value.
KV_HEADER_BYTES = 2
KEY_BYTES_MAX = 255

Progress = Callable[[str], None]

_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def lease_overrides(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """``overrides`` with ``heartbeat_ms = lease_ms / 3`` unless it sets a heartbeat.

    The core's defaults have ``heartbeat_ms == lease_ms``, so a lease lapses for
    about a round trip before each renewal (reads refused in bursts); the
    runtime's config already uses three heartbeats per lease.
    """
    out = dict(overrides or {})
    if "heartbeat_ms" not in out:
        lease = float(out.get("lease_ms", ClusterConfig(replicas=1).lease_ms))
        out["heartbeat_ms"] = lease / HEARTBEATS_PER_LEASE
    return out


# -- the state machine ----------------------------------------------------------


def kv_put(key: bytes, value: bytes) -> bytes:
    """The payload of a put of ``value`` to ``key``."""
    if len(key) > KEY_BYTES_MAX:
        raise ValueError(f"key of {len(key)} bytes; at most {KEY_BYTES_MAX}")
    return bytes((PUT, len(key))) + key + value


def kv_get(key: bytes, tag: bytes) -> bytes:
    """The payload of a get of ``key``; ``tag`` only makes it unique (an operation id)."""
    if len(key) > KEY_BYTES_MAX:
        raise ValueError(f"key of {len(key)} bytes; at most {KEY_BYTES_MAX}")
    return bytes((GET, len(key))) + key + tag


class KVMachine:
    """The paper's state machine: an in-memory key-value store (key -> value).

    A put stores the payload under its key (the value is the payload after the
    key: keeping the payload whole saves copying the value); a get answers the
    value. ``order`` is every payload applied since the driver last took it
    (:meth:`take_order`): one list append per command, the only cost beyond
    the store itself. Why not a digest chain over the payloads: hashing every
    byte of every command at every replica is a per-byte cost the paper's
    store does not have, and it dilutes every ratio at 1 KB.
    """

    __slots__ = ("data", "order", "taken")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.order: list[bytes] = []
        self.taken = 0

    def apply(self, payload: bytes) -> bytes:
        self.order.append(payload)
        try:
            end = KV_HEADER_BYTES + payload[1]
            op = payload[0]
        except IndexError:
            return b""  # not a command of ours: applied as a no-op (verify flags it)
        key = payload[KV_HEADER_BYTES:end]
        if op == PUT:
            self.data[key] = payload
            return b"ok"
        value = self.data.get(key)
        return b"" if value is None else value[end:]

    @property
    def count(self) -> int:
        """Commands applied so far."""
        return self.taken + len(self.order)

    def take_order(self) -> list[bytes]:
        """The payloads applied since the last call, in order."""
        out = self.order
        self.order = []
        self.taken += len(out)
        return out

    def value(self, key: bytes) -> bytes | None:
        payload = self.data.get(key)
        return None if payload is None else payload[KV_HEADER_BYTES + len(key) :]

    def snapshot(self) -> bytes:
        return bytes(_pack(sorted(self.data.items())))

    def restore(self, data: bytes) -> None:
        items = msgpack.unpackb(data, use_list=True)
        self.data = {bytes(k): bytes(v) for k, v in items}


# -- one run ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RoundSpec:
    """One round-based run; see the module docstring."""

    protocol: str
    replicas: int = 3
    sessions: int = 500
    commands: int = 20_000
    warmup: int = 5_000
    read_pct: float = 0.0
    payload_bytes: int = 16
    conflict_pct: float = 0.0
    #: Reads go to the last key their session wrote (a value of the payload's
    #: size comes back), not to a fresh key (an empty answer).
    read_written: bool = False
    #: "all": ``sessions`` at every replica; "leader": all of them at ``leader``.
    clients_at: str = "all"
    leader: int = 0
    seed: int = 1
    round_ms: float = 1.0
    #: ``(replica, every)``: that replica takes a turn only every ``every``-th round.
    slow: tuple[int, int] | None = None
    #: The NIC model's bandwidth per replica, each way (it does not change the run).
    nic_mbps: float = NIC_MBPS_DEFAULT
    config_overrides: dict[str, Any] = field(default_factory=dict)

    def workload(self) -> Workload:
        return Workload(
            conflict_pct=self.conflict_pct,
            read_pct=self.read_pct,
            payload_bytes=self.payload_bytes,
            seed=self.seed,
            read_written=self.read_written,
        )


#: Byte counters per replica, in the order :attr:`RoundResult.bytes` holds them.
BYTE_COUNTERS = ("peer_out", "peer_in", "client_in", "client_out")


@dataclass(slots=True)
class RoundResult:
    spec: RoundSpec
    #: Per replica, per timed call: CPU seconds in the measured window.
    seconds: list[dict[str, float]]
    #: Per replica, per :data:`BYTE_COUNTERS` name: bytes in the measured window.
    bytes: list[dict[str, int]] = field(default_factory=list)
    measured: int = 0
    rounds: int = 0
    measured_rounds: int = 0
    wall_s: float = 0.0
    proposed: int = 0
    executed: list[int] = field(default_factory=list)
    reads_ok: int = 0
    reads_via_log: int = 0
    #: Reads whose answer was checked against the session's last write.
    reads_checked: int = 0
    instances: int = 0
    instance_commands: int = 0
    frames: int = 0
    wire_bytes: int = 0
    #: Mean size of the writes' payloads (the nominal size unless a payload
    #: needed more room to stay unique).
    write_payload_bytes: float = 0.0
    leaders: list[Any] = field(default_factory=list)
    #: Rounds in which each replica took its turn.
    turns: list[int] = field(default_factory=list)
    #: The process that ran it (:class:`ProtocolWorkers`).
    pid: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def cpu_s(self, replica: int) -> float:
        return sum(self.seconds[replica].values())

    @property
    def factors(self) -> list[int]:
        f = [1] * self.spec.replicas
        if self.spec.slow is not None:
            f[self.spec.slow[0]] = self.spec.slow[1]
        return f

    def cpu_s_per_1000(self) -> list[float]:
        m = self.measured or 1
        return [self.cpu_s(r) / m * 1000 for r in range(self.spec.replicas)]

    @property
    def busiest(self) -> int:
        per = self.cpu_s_per_1000()
        f = self.factors
        return max(range(len(per)), key=lambda r: per[r] * f[r])

    @property
    def capacity_per_s(self) -> float:
        """Operations/s with one core per replica (a straggler's core a fraction)."""
        b = self.busiest
        cost = self.cpu_s_per_1000()[b] * self.factors[b]
        return 1000 / cost if cost > 0 else float("nan")

    def bytes_per_op(self, clients: bool = True) -> list[tuple[float, float]]:
        """Per replica, (egress, ingress) bytes per completed operation."""
        m = self.measured or 1
        out = []
        for b in self.bytes:
            egress = b["peer_out"] + (b["client_out"] if clients else 0)
            ingress = b["peer_in"] + (b["client_in"] if clients else 0)
            out.append((egress / m, ingress / m))
        return out

    def nic_bound(self, clients: bool = True) -> tuple[float, int, str]:
        """(capacity ops/s, replica, "egress"/"ingress") with ``spec.nic_mbps`` each way."""
        return nic_capacity(self.bytes_per_op(clients), self.spec.nic_mbps)

    @property
    def nic_capacity_per_s(self) -> float:
        return self.nic_bound()[0]

    @property
    def bound(self) -> str:
        """What sets :attr:`capacity_both_per_s`: ``"cpu r0"``, ``"egress r0"``, ..."""
        cap, r, direction = self.nic_bound()
        if self.capacity_per_s <= cap:
            return f"cpu r{self.busiest}"
        return f"{direction} r{r}"

    @property
    def capacity_both_per_s(self) -> float:
        """Capacity with one core and a ``nic_mbps`` NIC per replica: the lower bound."""
        return min(self.capacity_per_s, self.nic_capacity_per_s)

    @property
    def commands_per_instance(self) -> float:
        return self.instance_commands / self.instances if self.instances else 0.0

    @property
    def ops_per_round(self) -> float:
        return self.measured / self.measured_rounds if self.measured_rounds else 0.0

    def to_json(self) -> dict[str, Any]:
        per = self.cpu_s_per_1000()
        nic, nic_r, nic_dir = self.nic_bound()
        peers, peers_r, peers_dir = self.nic_bound(clients=False)
        return {
            "completed": self.measured,
            "cpu_s_per_1000": [round(v, 6) for v in per],
            "busiest": self.busiest,
            "capacity_per_s": round(self.capacity_per_s, 1),
            "busiest_breakdown_s": {
                k: round(v, 6) for k, v in self.seconds[self.busiest].items() if v
            },
            "bytes_per_op": [[round(e, 1), round(i, 1)] for e, i in self.bytes_per_op()],
            "peer_bytes_per_op": [
                [round(e, 1), round(i, 1)] for e, i in self.bytes_per_op(clients=False)
            ],
            "nic_mbps": self.spec.nic_mbps,
            "nic_capacity_per_s": round(nic, 1),
            "nic_bound": f"{nic_dir} r{nic_r}",
            "nic_peers_only_capacity_per_s": round(peers, 1),
            "nic_peers_only_bound": f"{peers_dir} r{peers_r}",
            "capacity_both_per_s": round(self.capacity_both_per_s, 1),
            "bound": self.bound,
            "commands_per_instance": round(self.commands_per_instance, 2),
            "ops_per_round": round(self.ops_per_round, 2),
            "rounds": self.rounds,
            "reads_ok": self.reads_ok,
            "reads_via_log": self.reads_via_log,
            "reads_checked": self.reads_checked,
            "frames": self.frames,
            "wire_bytes": self.wire_bytes,
            "write_payload_bytes": round(self.write_payload_bytes, 1),
            "wall_s": round(self.wall_s, 3),
            "leaders_at_end": self.leaders,
            "pid": self.pid,
            "problems": self.problems,
        }


def nic_capacity(per_op: list[tuple[float, float]], nic_mbps: float) -> tuple[float, int, str]:
    """Operations/s that a ``nic_mbps`` link each way per replica carries.

    ``per_op``: per replica, (egress, ingress) bytes per operation. Each
    direction of each replica is a bound ``bandwidth / bytes per op``; the
    lowest one sets the capacity. Returns (capacity, replica, direction);
    ``inf`` if nothing was sent.
    """
    if not nic_mbps > 0:
        raise ValueError(f"nic_mbps must be > 0, got {nic_mbps}")
    bytes_per_s = nic_mbps * 1e6 / 8
    best = (math.inf, 0, "egress")
    for r, (egress, ingress) in enumerate(per_op):
        for direction, load in (("egress", egress), ("ingress", ingress)):
            if load > 0 and bytes_per_s / load < best[0]:
                best = (bytes_per_s / load, r, direction)
    return best


def submit_bytes(client_id: int, seq: int, payload: bytes, key: bytes | None) -> int:
    """A command as a client sends it to a node: one ``SUBMIT_MANY`` item
    (:mod:`sdpaxos.runtime.frames`), request id as large as its sequence number."""
    return len(_pack((client_id * 1_000_003 + seq, client_id, seq, payload, key, 0)))


def read_bytes(client_id: int, seq: int, key: bytes) -> int:
    """A ``READ`` frame for ``key`` with its length prefix."""
    return len(_pack((11, client_id * 1_000_003 + seq, key, None, False))) + LENGTH_PREFIX_BYTES


def reply_bytes(client_id: int, seq: int, value: bytes | None) -> int:
    """An answer as a node sends it: one ``REPLY_MANY`` item."""
    return len(_pack((client_id * 1_000_003 + seq, 0, value)))


class _Session:
    __slots__ = ("cid", "key", "replica", "seq", "stream", "waiting", "written", "written_key")

    def __init__(self, cid: int, replica: int, stream: OpStream) -> None:
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


class _Driver(Outlet):
    """The outlet of every replica: frames to inboxes, answers to the sessions."""

    def __init__(self, spec: RoundSpec, make: MakeReplica, codec: Any) -> None:
        self.spec = spec
        n = spec.replicas
        self.n = n
        cfg = ClusterConfig(
            replicas=n,
            sequencer=ReplicaId(spec.leader),
            rtt_ms=uniform(n, LAN_RTT_MS).replica_rtt_ms(),
            propose_queue_max=max(100_000, spec.sessions * n * 2),
            **lease_overrides(spec.config_overrides),
        )
        self.config = cfg
        self.machines = [KVMachine() for _ in range(n)]
        self.storages = [CountingStorage() for _ in range(n)]
        self.replicas = [
            make(cfg, r, self.machines[r], random.Random(spec.seed * 1_000_003 + r), False, None)
            for r in range(n)
        ]
        self.encode = codec.encode_batch
        self.decode = codec.decode_batch
        self.inboxes: list[list[bytes]] = [[] for _ in range(n)]
        self.seconds = [dict.fromkeys(TIMED_CALLS, 0.0) for _ in range(n)]
        self.bytes = [dict.fromkeys(BYTE_COUNTERS, 0) for _ in range(n)]
        self.clock = time.thread_time
        self.now_ms = 0.0
        workload = spec.workload()
        hosts = [spec.leader] * (n * spec.sessions) if spec.clients_at == "leader" else None
        self.sessions: list[_Session] = []
        self.by_cid: dict[int, _Session] = {}
        for i in range(n * spec.sessions):
            r = hosts[i] if hosts is not None else i % n
            s = _Session(i + 1, r, OpStream(workload, i + 1))
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
        #: Operations issued stop here: unbounded until the measured window
        #: closes (a steady state: as many in flight at its end as at its
        #: start), then the number issued, so the run drains.
        self.limit = math.inf
        self.instances: dict[tuple[str, int, int], int] = {}
        self.frames = 0
        self.wire_bytes = 0
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

    # -- the outlet ---------------------------------------------------------

    def persisted(self, replica: int, records: list[Record]) -> None:
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
        encode = self.encode
        packed: PackedMessages = {}  # a broadcast is packed once
        for dst, bucket in per_dst.items():
            for lo in range(0, len(bucket), MESSAGES_PER_BATCH_MAX):
                frames.append((dst, encode(bucket[lo : lo + MESSAGES_PER_BATCH_MAX], packed)))
        self.seconds[replica]["encode"] += clock() - t0
        inboxes = self.inboxes
        counters = self.bytes
        out = counters[replica]
        for dst, frame in frames:
            size = len(frame) + LENGTH_PREFIX_BYTES
            self.frames += 1
            self.wire_bytes += size
            out["peer_out"] += size
            counters[dst]["peer_in"] += size
            inboxes[dst].append(frame)
        return False

    def replies(self, replica: int, replies: list[Reply]) -> None:
        by_cid = self.by_cid
        nxt = self.next_ops[replica]
        counter = self.bytes[replica]
        for reply in replies:
            s = by_cid.get(reply.client_id)
            if s is None or s.seq != reply.seq or s.replica != replica:
                self.problems.append(f"unexpected reply {reply!r} at replica {replica}")
                continue
            if reply.kind is not s.waiting:
                continue  # READY of a read through the log: it waits for EXECUTED
            if reply.kind is ReplyKind.EXECUTED:  # a read through the log
                self._check_read(s, reply.result or b"", replica)
            s.waiting = None
            self.completed += 1
            counter["client_out"] += reply_bytes(s.cid, s.seq, reply.result)
            nxt.append(s)

    def reads(self, replica: int, results: list[ReadResult]) -> None:
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
        counter = self.bytes[replica]
        now = self.now_ms
        proposals: list[tuple[Command, Wait]] = []
        add = proposals.append
        reads: list[tuple[int, bytes]] = []
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
            t0 = clock()
            for rid, key in reads:
                read(rid, key, now)
            seconds["read"] += clock() - t0

    def restart_counters(self) -> None:
        for r in range(self.n):
            self.seconds[r] = dict.fromkeys(TIMED_CALLS, 0.0)
            self.bytes[r] = dict.fromkeys(BYTE_COUNTERS, 0)


class ProtocolWorkers:
    """Runs each protocol's rounds in a worker process of its own.

    Why: a process that has run other protocols' cells runs a protocol slower
    than one that has run only its own, and not every protocol alike. Measured
    at commit f8f9346 (stop 27), SDPaxos at 5 replicas, 16 B, 5 % conflict:
    0.93 to 1.08 ms of busiest-replica CPU per 1,000 commands in eight runs in
    a process of its own, 1.15 to 1.30 over the eleven runs of a full
    throughput run, where it followed a hundred cells of every protocol;
    EPaxos's cell took 1.74 to 2.10 alone and 1.81 to 2.04 there, so the ratio
    between them fell from about 1.9 to 1.55 (bench/README.md, throughput).

    One worker per protocol (a one-process pool of a spawned interpreter), kept until
    :meth:`close`: a protocol's cells run one after another in it, and the
    experiment still runs one cell at a time, in the order it chooses.
    ``isolated=False`` runs everything in this process instead (to profile
    a run, say).
    """

    def __init__(self, isolated: bool = True) -> None:
        self.isolated = isolated
        self._pools: dict[str, ProcessPoolExecutor] = {}

    def run(self, spec: RoundSpec, progress: Progress | None = None) -> RoundResult:
        """``run_rounds(spec, progress)`` in ``spec.protocol``'s worker:
        ``progress`` goes to it by pickling (a :class:`bench.common.Context`'s
        ``progress`` does: the worker prints on the same stderr and clock)."""
        return self._run(spec, progress)

    def warm_up(self, spec: RoundSpec) -> RoundResult:
        """Run ``spec`` in its protocol's worker, so that its heap has grown to
        that size before any measured run (no page faults of first touching
        memory in a measurement). Its figures are not a measurement."""
        return self._run(spec, None)

    def _run(self, spec: RoundSpec, progress: Progress | None) -> RoundResult:
        if not self.isolated:
            return run_rounds(spec, progress=progress)
        pool = self._pools.get(spec.protocol)
        if pool is None:
            pool = self._pools[spec.protocol] = ProcessPoolExecutor(1, mp_context=_mp_context())
        try:
            return pool.submit(run_rounds, spec, progress).result()
        except BrokenProcessPool as exc:
            self._pools.pop(spec.protocol, None)
            raise RuntimeError(
                f"the {spec.protocol} worker process died ({exc}). Called from a script?"
                " A spawned worker imports the script again: guard its top level with"
                ' `if __name__ == "__main__":`.'
            ) from exc

    def close(self) -> None:
        """Stop every worker (idempotent)."""
        for pool in self._pools.values():
            pool.shutdown(cancel_futures=True)
        self._pools.clear()

    def __enter__(self) -> ProtocolWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _mp_context() -> Any:
    """Spawn: a fresh interpreter per worker. Not fork: forking a process that
    runs other threads (pytest's background TLC runs, an experiment's thread
    pool) can leave a lock held forever in the child; and a spawned worker's
    heap starts clean, not as a copy of the experiment's. It costs the
    worker's imports once: a tiny run took 0.24 s as a new worker's first and
    0.02 s after, here."""
    return multiprocessing.get_context("spawn")


def run_rounds(spec: RoundSpec, progress: Progress | None = None) -> RoundResult:
    """Run ``spec`` to completion and verify it (see the module docstring)."""
    proto = protocol(spec.protocol)
    return run_with(spec, proto.make_replica, proto.codec, progress)


def run_with(
    spec: RoundSpec, make: MakeReplica, codec: Any, progress: Progress | None = None
) -> RoundResult:
    """:func:`run_rounds` with the replicas and codec given (tests use doubles)."""
    if spec.clients_at not in ("all", "leader"):
        raise ValueError(f"clients_at must be 'all' or 'leader', got {spec.clients_at!r}")
    if spec.commands < 1 or spec.sessions < 1 or spec.warmup < 0:
        raise ValueError("commands and sessions must be >= 1, warmup >= 0")
    if not spec.nic_mbps > 0:
        raise ValueError(f"nic_mbps must be > 0, got {spec.nic_mbps}")
    d = _Driver(spec, make, codec)
    n = d.n
    order = list(range(n))
    order_rng = random.Random(spec.seed)
    cfg = d.config
    tick_ms = cfg.tick_ms
    slow_r, slow_every = spec.slow if spec.slow is not None else (-1, 1)
    last_tick = [-tick_ms] * n
    turns = [0] * n  # every replica ticks in the first round it runs
    # Initial load: the first operation of every session.
    for s in d.sessions:
        d.next_ops[s.replica].append(s)
    for r in range(n):
        d.issue(r)
    d.restart_counters()  # warm-up (re)starts below
    measuring = spec.warmup == 0
    start_round = 0
    start_completed = 0
    measured = 0
    measured_at: tuple[list[dict[str, float]], list[dict[str, int]]] | None = None
    measured_rounds = 0
    rounds = 0
    idle_rounds = 0
    clock = d.clock
    wall0 = time.perf_counter()
    last_report = wall0
    gc_was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        while True:
            rounds += 1
            d.now_ms = rounds * spec.round_ms
            order_rng.shuffle(order)
            before = d.completed
            for r in order:
                if r == slow_r and rounds % slow_every:
                    continue
                turns[r] += 1
                rep = d.replicas[r]
                sec = d.seconds[r]
                if d.now_ms - last_tick[r] >= tick_ms:
                    last_tick[r] = d.now_ms
                    t0 = clock()
                    rep.tick(d.now_ms)
                    sec["tick"] += clock() - t0
                inbox = d.inboxes[r]
                if inbox:
                    d.inboxes[r] = []
                    now = d.now_ms
                    step = rep.step
                    decode = d.decode
                    # Every frame decoded, then every message stepped: two
                    # clock reads in all, not two per frame (decoding is pure).
                    t0 = clock()
                    batches = [decode(frame) for frame in inbox]
                    t1 = clock()
                    for batch in batches:
                        for m in batch:
                            step(m, now)
                    sec["step"] += clock() - t1
                    sec["decode"] += t1 - t0
                t0 = clock()
                rd = rep.ready()
                sec["ready"] += clock() - t0
                carry_out(r, rd, d.storages[r], d)  # encode is timed in send()
                d.take_orders(r)
                d.issue(r)
            if not measuring and d.completed >= spec.warmup:
                measuring = True
                start_round = rounds
                start_completed = d.completed
                d.restart_counters()
            if measuring and measured_at is None and d.completed - start_completed >= spec.commands:
                measured_at = ([dict(x) for x in d.seconds], [dict(x) for x in d.bytes])
                measured_rounds = rounds - start_round
                measured = d.completed - start_completed
                d.limit = d.issued  # no new operations: the run drains
            if measured_at is not None and _settled(d):
                break
            idle_rounds = 0 if d.completed > before else idle_rounds + 1
            if idle_rounds > STUCK_ROUNDS:
                # Nothing completes any more: stuck, or (settled) nothing is
                # issued and the measured window can no longer close.
                d.problems.append(
                    f"stuck: no operation completed in {STUCK_ROUNDS} rounds;"
                    f" {d.completed}/{d.issued} completed, executed"
                    f" {[m.count for m in d.machines]} of {d.proposed} proposed,"
                    f" {'the window closed' if measured_at else 'the window never closed'}"
                )
                break
            if progress is not None:
                now_wall = time.perf_counter()
                if now_wall - last_report >= 2.0:
                    last_report = now_wall
                    target = spec.warmup + spec.commands
                    progress(f"  {spec.protocol}: {d.completed:,}/{target:,} ops, round {rounds}")
    finally:
        if gc_was:
            gc.enable()
    seconds, counted = measured_at if measured_at is not None else (d.seconds, d.bytes)
    res = RoundResult(spec, seconds, counted)
    res.measured = measured
    res.measured_rounds = measured_rounds
    res.rounds = rounds
    res.wall_s = time.perf_counter() - wall0
    res.proposed = d.proposed
    res.executed = [m.count for m in d.machines]
    res.reads_ok = d.reads_ok
    res.reads_via_log = d.reads_via_log
    res.reads_checked = d.reads_checked
    res.instances = len(d.instances)
    res.instance_commands = sum(d.instances.values())
    res.frames = d.frames
    res.wire_bytes = d.wire_bytes
    res.write_payload_bytes = d.write_payload_sum / d.writes if d.writes else 0.0
    res.leaders = [getattr(rep, "sequencer", None) for rep in d.replicas]
    res.turns = turns
    res.pid = os.getpid()
    res.problems = d.problems
    res.problems.extend(verify(d))
    return res


def _settled(d: _Driver) -> bool:
    """Every operation answered, and every replica executed every command proposed."""
    if d.completed < d.issued:
        return False
    return all(m.count >= d.proposed for m in d.machines)


def verify(d: _Driver) -> list[str]:
    """Everything the module docstring promises about a run; what failed, in words."""
    problems: list[str] = []
    if d.completed != d.issued:
        problems.append(f"{d.completed} operations completed of {d.issued} issued")
    if d.stale_reads:
        problems.append(
            f"{d.stale_reads} of {d.reads_checked} reads missed a completed write;"
            f" {d.stale_example}"
        )
    for r in range(d.n):
        d.take_orders(r)
    per_key = d.spec.protocol in PER_KEY_ORDER
    problems += check_orders(d.orders, d.id_keys, d.proposed, per_key)
    data0 = d.machines[0].data
    for r, m in enumerate(d.machines[1:], start=1):
        if m.data != data0:
            diff = sum(1 for k in data0.keys() | m.data.keys() if data0.get(k) != m.data.get(k))
            problems.append(f"replica {r}'s key-value state differs from replica 0's: {diff} keys")
    rejected = sum(int(getattr(getattr(rep, "stats", None), "rejected", 0)) for rep in d.replicas)
    if rejected:
        problems.append(f"{rejected} peer messages rejected in a fault-free run")
    return problems


def check_orders(
    orders: list[list[int | None]], id_keys: list[bytes], proposed: int, per_key: bool
) -> list[str]:
    """The executed orders (operation ids per replica) against each other.

    Every replica executed each of the ``proposed`` commands exactly once and
    nothing else (``None`` is a payload the driver never proposed); the
    sequences are identical, or with ``per_key`` the subsequence of every key
    (``id_keys[i]`` is command ``i``'s key) is.
    """
    problems: list[str] = []
    for r, seq in enumerate(orders):
        unknown = sum(1 for i in seq if i is None)
        if unknown:
            problems.append(f"replica {r} executed {unknown} commands that were never proposed")
        distinct = len(set(seq))
        if distinct != len(seq):
            problems.append(f"replica {r} executed {len(seq) - distinct} commands twice")
        if len(seq) != proposed:
            problems.append(f"replica {r} executed {len(seq)} commands, {proposed} were proposed")
    if problems or not orders:
        return problems
    if not per_key:
        first = orders[0]
        for r, seq in enumerate(orders[1:], start=1):
            if seq != first:
                at = next(i for i, (a, b) in enumerate(zip(first, seq, strict=True)) if a != b)
                problems.append(
                    f"executed sequences diverge: replica {r} differs from replica 0 at"
                    f" position {at} (commands {seq[at]} and {first[at]})"
                )
        return problems
    by_key = [_by_key(seq, id_keys) for seq in orders]
    first_keys = by_key[0]
    for r, keyed in enumerate(by_key[1:], start=1):
        if keyed != first_keys:
            bad = [k for k in first_keys if keyed.get(k) != first_keys[k]]
            problems.append(
                f"executed sequences diverge per key: replica {r} differs from replica 0"
                f" on {len(bad)} keys (first {bad[0]!r})"
                if bad
                else f"executed sequences diverge per key: replica {r} has other keys"
            )
    return problems


def _by_key(seq: list[int | None], id_keys: list[bytes]) -> dict[bytes, list[int]]:
    out: dict[bytes, list[int]] = {}
    for i in seq:
        if i is None:
            continue
        k = id_keys[i]
        lst = out.get(k)
        if lst is None:
            out[k] = [i]
        else:
            lst.append(i)
    return out
