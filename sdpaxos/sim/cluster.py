"""``SimCluster``: N replicas, their storage and the network, in virtual time.

Theory of operation. One :class:`~sdpaxos.sim.scheduler.Scheduler` holds every
pending event: packet deliveries, replica ticks, client proposals, proximity
probes and scripted actions. :meth:`SimCluster.step` pops one, feeds it to the
replica it concerns, then drains that replica's ``Ready`` batches the way every
driver must, with :func:`sdpaxos.sim.driver.carry_out`: persist first (into the
replica's ``MemoryStorage``), then send (each ``(src, dst)`` group of one batch
is encoded with ``encode_batch`` and becomes one packet), then reply. The
checker sees every batch as it happens, so a safety violation stops the run at
the event that caused it.

Crash drops the ``Replica`` object (and its state machine) and keeps its
``MemoryStorage``; restart rebuilds it with ``records=storage.load()``, exactly
what a real process would find on disk.

Slow nodes, two ways:

* **Pause** (a stopped process: SIGSTOP, a long GC pause, a VM migration). A
  paused replica neither ticks nor steps. Packets that reach it (and client
  requests) wait in its inbox, at most :data:`PAUSED_INBOX_MAX` of them; beyond
  that they are lost, like a full socket buffer. On resume the driver ticks once,
  with the current time of the replica's clock (no missed ticks are replayed:
  a real process wakes up late, and the core must judge its lease on elapsed
  time), then handles the backlog in arrival order. A crash empties the inbox.
* **Slow** (the paper's CPU-throttled straggler, section 5.1). Each replica has a
  CPU that spends ``processing_us`` per message it handles, times its slow
  factor (1 by default). Work queues behind a busy CPU, and a message's effects
  (sends, replies) happen when its handling finishes. With the default
  ``processing_us = 0`` replicas are infinitely fast, so exact latency tests see
  exactly the profile's delays.

Clocks. Every replica has its own clock, passed to ``tick`` and ``step``: an
offset and a rate within ``clock_drift_ppm`` of real (virtual) time, drawn once
per replica. The core assumes a bound on rate error (its config's
``clock_drift_ppm``); a simulation whose clocks stay within it tests that the
lease holds under drift and pauses.

Hooks for aimed faults (all additive; a cluster that uses none behaves as before):

* ``traced=True`` builds the real core with a tracer, and every trace event
  (``BecomeSequencer``, ``HandleOAccept``, ...) goes to ``trace_listeners``;
  ``step_listeners`` see each message just before a replica steps it.
* :meth:`SimCluster.crash_in_drain` crashes a replica in the middle of carrying
  out its next ``Ready`` batch: after its records are durable, after a prefix of
  its messages left, before any reply. That is where a real process can die,
  and a trace listener can aim it at a protocol point.
* ``message_rules`` decide, per message at send time, to deliver it, drop it
  (``DROP``) or hold it back for a while (any-order, past the link's FIFO).
* :meth:`SimCluster.read_at` asks a replica for a linearizable read; results
  go to the checker and to ``read_listeners``. :meth:`SimCluster.transfer_sequencer`
  hands the sequencer role over.

Rules: single-threaded, no wall clock, no global ``random``; every decision
comes from the one :class:`~sdpaxos.sim.chooser.Chooser`, and iteration is over
lists or sorted keys only, so a run is a pure function of its seed.
"""

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, Protocol

from sdpaxos.core.app import StateMachine
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import LocalProtocolError, Overloaded
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply
from sdpaxos.core.replica import Replica
from sdpaxos.core.storage import MemoryStorage, Record, Snapshot
from sdpaxos.core.types import Command, ReplicaId, Wait
from sdpaxos.profiles import DelayProfile
from sdpaxos.sim.checkers import Checker
from sdpaxos.sim.chooser import Chooser, derive_rng
from sdpaxos.sim.driver import Outlet, carry_out
from sdpaxos.sim.network import Network, NetworkConfig
from sdpaxos.sim.scheduler import EVENTS_PENDING_MAX, Scheduler
from sdpaxos.sim.statemachine import DigestRegister, KeyedDigestRegister

#: Most ``ready()`` calls in one drain; a replica that never runs dry is a bug.
READY_ROUNDS_MAX = 1000
#: Default proximity probe period (measured proximity only).
PROBE_MS_DEFAULT = 1000.0
#: Most packets and client requests a paused replica's inbox holds; beyond it they are lost.
PAUSED_INBOX_MAX = 10_000
#: Largest clock offset a replica may start with, in microseconds.
CLOCK_OFFSET_US_MAX = 1_000_000_000
#: Largest slow factor: a straggler at most this many times slower than a normal replica.
SLOW_FACTOR_MAX = 1_000_000.0
#: A message rule's verdict: lose the message (any other int: hold it that many us).
DROP = -1
#: Longest a message rule may hold a message back, in microseconds.
HOLD_US_MAX = 60_000_000
#: Protocols that order only interfering commands (same key, or no key): their
#: clusters check order per key (``Checker(per_key=True)``) and, by default, run
#: a per-key state machine (:class:`KeyedDigestRegister`); clients then put the
#: key in the payload (:func:`~sdpaxos.sim.statemachine.keyed_payload`).
PER_KEY_ORDER_PROTOCOLS = frozenset({"epaxos"})


class SimReplica(Protocol):
    """What the simulator needs of a replica: the core's public driving API."""

    def propose(self, command: Command, wait: Wait = ...) -> None: ...

    def step(self, message: Any, now_ms: float) -> None: ...

    def tick(self, now_ms: float) -> None: ...

    def ready(self) -> Ready: ...

    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None: ...


class ReadingReplica(Protocol):
    """A replica that serves linearizable reads and hands its role over (the core does)."""

    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None: ...

    def transfer_sequencer(self, target: ReplicaId) -> None: ...


class Codec(Protocol):
    """Batch encoding of messages; :mod:`sdpaxos.wire.codec` in real runs."""

    def encode_batch(self, messages: list[Any]) -> bytes: ...

    def decode_batch(self, data: bytes) -> list[Any]: ...


ReplicaFactory = Callable[
    [ClusterConfig, int, StateMachine, random.Random, bool, list[Record] | None],
    SimReplica,
]


def core_replica(
    config: ClusterConfig,
    replica_id: int,
    state_machine: StateMachine,
    rng: random.Random,
    observe: bool,
    records: list[Record] | None,
) -> SimReplica:
    """The default :data:`ReplicaFactory`: the real protocol core."""
    return Replica(
        config, ReplicaId(replica_id), state_machine, rng=rng, observe=observe, records=records
    )


class WireCodec:
    """Adapter to :mod:`sdpaxos.wire.codec` (imported on first use).

    Imported lazily so simulator unit tests with a fake codec do not depend on
    the wire package.
    """

    __slots__ = ("_decode", "_encode")

    def __init__(self) -> None:
        from sdpaxos.wire import codec

        self._encode = codec.encode_batch
        self._decode = codec.decode_batch

    def encode_batch(self, messages: list[Any]) -> bytes:
        return self._encode(messages)

    def decode_batch(self, data: bytes) -> list[Any]:
        return list(self._decode(data))


# -- events -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Deliver:
    src: int
    dst: int
    payload: bytes
    count: int


@dataclass(frozen=True, slots=True)
class Tick:
    replica: int


@dataclass(frozen=True, slots=True)
class Propose:
    replica: int
    command: Command
    wait: Wait


@dataclass(frozen=True, slots=True)
class Read:
    """A client asks ``replica`` for a linearizable read of ``key``."""

    replica: int
    read_id: int
    key: bytes | None


@dataclass(frozen=True, slots=True)
class Probe:
    """A proximity probe ``src -> dst`` sent at ``sent_us``, or its echo."""

    src: int
    dst: int
    sent_us: int
    echo: bool


@dataclass(frozen=True, slots=True)
class ProbeRound:
    replica: int


@dataclass(frozen=True, slots=True)
class Action:
    """A scripted callback (fault schedules, workload steps)."""

    callback: Callable[[], None]
    name: str = ""


@dataclass(frozen=True, slots=True)
class Handled:
    """A slow replica's CPU finished handling ``event`` (only if still ``incarnation``)."""

    replica: int
    incarnation: int
    event: "Deliver | Propose | Read"


@dataclass(frozen=True, slots=True)
class CrashPlan:
    """How :meth:`SimCluster.crash_in_drain` cuts the next batch short.

    ``keep``: how many of the batch's messages leave before the crash (``None``:
    all of them); ``stop_before``: none from the first message of one of these
    types on, whatever ``keep`` says. Records are always persisted (a crash
    before that is a crash before the event) and replies never given.
    """

    keep: int | None = None
    stop_before: tuple[type, ...] = ()


Event = Deliver | Tick | Propose | Read | Probe | ProbeRound | Action | Handled
Inbound = Deliver | Propose | Read

ReplyListener = Callable[[int, Reply, int], None]
ProposeListener = Callable[[int, Command, int], None]
#: ``(replica, result, now_us)`` for every read result a replica hands out.
ReadListener = Callable[[int, ReadResult, int], None]
#: ``(replica, event, fields)`` for every trace event of a traced cluster.
TraceListener = Callable[[int, str, dict[str, Any]], None]
#: ``(replica, message)`` just before ``replica.step(message)``.
StepListener = Callable[[int, Any], None]
#: ``(src, dst, message)`` at send time: ``None`` to send normally, :data:`DROP`
#: to lose it, or a number of microseconds to hold it back (it may overtake
#: nothing and be overtaken by anything).
MessageRule = Callable[[int, int, Any], int | None]


class SimCluster:
    """A whole simulated cluster: replicas (one per profile region), network, clock.

    Args:
        profile: regions and delays; replica ``i`` lives in ``profile.regions[i]``.
        chooser: the run's single source of nondeterminism.
        sequencer: replica id of the view-0 sequencer.
        network: fault and ordering knobs.
        tick_ms: virtual time between two ``tick()`` calls of a replica.
        configured_proximity: pass the profile's RTT matrix to ``ClusterConfig``.
        measured_proximity: probe peers every ``probe_ms`` and feed the measured
            round trips to ``observe_rtt``.
        config_overrides: extra ``ClusterConfig`` fields (limits, timeouts, thrifty).
        replica_factory, codec, state_machine_factory: swap in fakes for tests.
        checker: defaults to a fresh :class:`Checker`.
        processing_us: CPU time a replica spends per message it handles, before
            its slow factor (see :meth:`slow`); 0 = instantaneous.
        clock_drift_ppm: each replica's clock runs at a rate drawn within this
            many parts per million of virtual time, from an offset drawn too
            (0: every clock reads virtual time).
        traced: build every replica with a tracer that feeds ``trace_listeners``
            (the real core only: ``replica_factory`` must be the default).
        protocol: a name from :data:`sdpaxos.protocols.PROTOCOL_NAMES`; a
            baseline brings its replica factory and its messages' codec (unless
            ``replica_factory`` or ``codec`` is given). One of
            :data:`PER_KEY_ORDER_PROTOCOLS` also gets the per-key checker and,
            unless ``state_machine_factory`` is given, the per-key state machine.
    """

    def __init__(
        self,
        profile: DelayProfile,
        chooser: Chooser,
        *,
        sequencer: int = 0,
        network: NetworkConfig | None = None,
        tick_ms: float = 10.0,
        configured_proximity: bool = True,
        measured_proximity: bool = False,
        probe_ms: float = PROBE_MS_DEFAULT,
        config_overrides: dict[str, Any] | None = None,
        replica_factory: ReplicaFactory = core_replica,
        codec: Codec | None = None,
        state_machine_factory: Callable[[], StateMachine] = DigestRegister,
        checker: Checker | None = None,
        observe: bool = True,
        events_pending_max: int = EVENTS_PENDING_MAX,
        processing_us: int = 0,
        clock_drift_ppm: int = 0,
        traced: bool = False,
        protocol: str = "sdpaxos",
    ) -> None:
        if protocol != "sdpaxos":
            # A baseline (sdpaxos.protocols): its replicas and its messages' codec.
            from sdpaxos.protocols import protocol as get_protocol

            spec = get_protocol(protocol)
            if replica_factory is core_replica:
                replica_factory = spec.make_replica
            if codec is None:
                codec = spec.codec
        self.protocol = protocol
        #: Commands are ordered only against the ones they interfere with.
        self.per_key_order = protocol in PER_KEY_ORDER_PROTOCOLS
        if self.per_key_order and state_machine_factory is DigestRegister:
            state_machine_factory = KeyedDigestRegister
        if not tick_ms > 0:
            raise ValueError(f"tick_ms must be > 0, got {tick_ms}")
        if processing_us < 0:
            raise ValueError(f"processing_us must be >= 0, got {processing_us}")
        if not 0 <= clock_drift_ppm < 100_000:
            raise ValueError(f"clock_drift_ppm must be in 0 .. 99999, got {clock_drift_ppm}")
        if traced and replica_factory is not core_replica:
            raise ValueError("traced=True needs the real core (the default replica_factory)")
        n = profile.size
        self.profile = profile
        self.chooser = chooser
        self.config = ClusterConfig(
            replicas=n,
            sequencer=ReplicaId(sequencer),
            rtt_ms=profile.replica_rtt_ms() if configured_proximity else None,
            # The core's timeouts are milliseconds turned into ticks of this length.
            **{"tick_ms": tick_ms, **(config_overrides or {})},
        )
        self.tick_us = round(tick_ms * 1000)
        self.probe_us = round(probe_ms * 1000)
        assert self.tick_us >= 1 and self.probe_us >= 1
        self.network = Network(profile, network or NetworkConfig(), chooser)
        self.scheduler: Scheduler[Event] = Scheduler(events_pending_max=events_pending_max)
        self.checker = checker if checker is not None else Checker(n, per_key=self.per_key_order)
        self.codec: Codec = codec if codec is not None else WireCodec()
        self.observe = observe
        self._replica_factory = replica_factory
        self._sm_factory = state_machine_factory
        self.storages = [MemoryStorage() for _ in range(n)]
        self.state_machines: list[StateMachine | None] = [None] * n
        self.replicas: list[SimReplica | None] = [None] * n
        self.reply_listeners: list[ReplyListener] = []
        self.propose_listeners: list[ProposeListener] = []
        self.read_listeners: list[ReadListener] = []
        self.trace_listeners: list[TraceListener] = []
        self.step_listeners: list[StepListener] = []
        #: ``(src, dst, message)`` for every message a replica's batch sends (after
        #: message rules and crash cuts), and the id of every crashed replica.
        self.send_listeners: list[Callable[[int, int, Any], None]] = []
        self.crash_listeners: list[Callable[[int], None]] = []
        #: ``(replica, records)`` for every batch of records a replica persists.
        self.persist_listeners: list[Callable[[int, list[Record]], None]] = []
        self.message_rules: list[MessageRule] = []
        self.traced = traced
        #: Messages lost to a message rule, and messages a rule held back.
        self.rule_dropped = 0
        self.rule_held = 0
        #: Replicas that must crash while carrying out their next batch.
        self._crash_plans: dict[int, CrashPlan] = {}
        #: Crashes carried out by :meth:`crash_in_drain`.
        self.drain_crashes = 0
        #: Reads handed to a replica, and hand-overs started.
        self.reads_issued = 0
        self.handovers = 0
        self._read_ids = 0
        self.events_processed = 0
        self.crashes = 0
        self.restarts = 0
        self.local_deliveries = 0
        self.processing_us = processing_us
        self.paused = [False] * n
        self.slow_factor = [1.0] * n
        #: Messages lost to a full inbox of a paused replica.
        self.inbox_overflow = 0
        self._inbox: list[list[Inbound]] = [[] for _ in range(n)]
        #: Per replica: its clock's offset (us) and rate (1 = virtual time).
        self.clock_offset_us = [0] * n
        self.clock_rate = [1.0] * n
        if clock_drift_ppm:
            for r in range(n):
                draw = chooser.below(2 * clock_drift_ppm + 1)
                signed = (draw + 1) // 2 * (1 if draw % 2 else -1)  # 0 draws no drift
                self.clock_rate[r] = 1.0 + signed / 1e6
                self.clock_offset_us[r] = chooser.below(CLOCK_OFFSET_US_MAX)
        self._busy_until_us = [0] * n
        #: Bumped by every crash: work a dead process had started dies with it.
        self._incarnation = [0] * n
        #: Counters (``replica.stats``) of crashed incarnations, summed per name.
        self._retired_counters: dict[str, int] = {}
        self._outlet = _ClusterOutlet(self)
        for r in range(n):
            self._build(r, records=None)
        for r in range(n):
            # Tick phases differ per replica (choice 0 = all in phase).
            self.scheduler.at(self.chooser.below(self.tick_us), Tick(r))
        if measured_proximity:
            for r in range(n):
                self.scheduler.at(0, ProbeRound(r))

    # -- public API -----------------------------------------------------------

    @property
    def n(self) -> int:
        return self.config.replicas

    @property
    def now_us(self) -> int:
        return self.scheduler.now_us

    def clock_ms(self, replica: int) -> float:
        """What ``replica``'s own clock reads now, in milliseconds."""
        return (self.clock_offset_us[replica] + self.clock_rate[replica] * self.now_us) / 1000

    def alive(self, replica: int) -> bool:
        return self.replicas[replica] is not None

    def live_replicas(self) -> list[int]:
        return [r for r in range(self.n) if self.replicas[r] is not None]

    def propose_at(
        self, time_us: int, replica: int, command: Command, wait: Wait = Wait.READY
    ) -> None:
        """Hand ``command`` to ``replica.propose`` at ``time_us``."""
        self.scheduler.at(time_us, Propose(replica, command, wait))

    def call_at(self, time_us: int, callback: Callable[[], None], name: str = "") -> None:
        """Run ``callback`` at ``time_us`` (between events, like any event)."""
        self.scheduler.at(time_us, Action(callback, name))

    def read_at(self, time_us: int, replica: int, read_id: int, key: bytes | None) -> None:
        """Call ``replica.read(read_id, key, now)`` at ``time_us`` (through a paused inbox).

        ``read_id`` must be unique in the run: the checker matches results by it.
        """
        self.scheduler.at(time_us, Read(replica, read_id, key))

    def new_read_id(self) -> int:
        """A read id no other read of this run has."""
        self._read_ids += 1
        return self._read_ids

    def transfer_sequencer(self, replica: int, target: int) -> bool:
        """Ask ``replica`` to hand the sequencer role to ``target`` now.

        False (and nothing happens) when ``replica`` is down or paused, or refuses:
        it is not an established sequencer, or ``target`` is not another replica.
        """
        core = self.replicas[replica]
        if core is None or self.paused[replica]:
            return False
        transfer = getattr(core, "transfer_sequencer", None)
        if transfer is None:
            return False
        try:
            transfer(target)
        except LocalProtocolError:
            return False
        self.handovers += 1
        self._drain(replica)
        return True

    def crash_in_drain(self, replica: int, plan: CrashPlan | None = None) -> None:
        """Crash ``replica`` while it carries out its next ``Ready`` batch (see
        :class:`CrashPlan`). Meant to be called from a trace or step listener,
        i.e. inside the event whose effects are being cut short."""
        if self.replicas[replica] is not None:
            self._crash_plans[replica] = plan or CrashPlan()

    def believed_sequencer(self) -> int | None:
        """The sequencer as most live replicas see it (ties: the lowest id)."""
        votes: dict[int, int] = {}
        for r in self.live_replicas():
            seq = getattr(self.replicas[r], "sequencer", None)
            if isinstance(seq, int):
                votes[seq] = votes.get(seq, 0) + 1
        if not votes:
            return None
        return max(sorted(votes), key=lambda s: votes[s])

    def crash(self, replica: int) -> None:
        """Drop the replica and its volatile state; its storage survives.

        A paused replica can crash too; its inbox is lost with it (and it comes
        back unpaused: a restart is a new process).
        """
        old = self.replicas[replica]
        if old is None:
            return
        for name, value in _counters(old).items():
            self._retired_counters[name] = self._retired_counters.get(name, 0) + value
        self.replicas[replica] = None
        self.state_machines[replica] = None
        self.paused[replica] = False
        self._crash_plans.pop(replica, None)
        self._inbox[replica] = []
        self._incarnation[replica] += 1
        self.crashes += 1
        self.checker.crashed(replica)
        for crash_listener in self.crash_listeners:
            crash_listener(replica)

    def restart(self, replica: int) -> None:
        """Rebuild a crashed replica from exactly what its storage kept."""
        if self.replicas[replica] is not None:
            return
        storage = self.storages[replica]
        snapshot = storage.load_snapshot()
        self._build(replica, records=storage.load(), snapshot=snapshot)
        self.restarts += 1
        self.checker.restarted(replica)
        if snapshot is not None:
            self.checker.snapshot(replica, snapshot.slot)
        self._drain(replica)

    def pause(self, replica: int) -> None:
        """Stop ``replica`` (it neither ticks nor steps) until :meth:`resume`."""
        if self.replicas[replica] is None or self.paused[replica]:
            return
        self.paused[replica] = True

    def resume(self, replica: int) -> None:
        """Let a paused replica run again: one tick at the current time, then its backlog."""
        if not self.paused[replica]:
            return
        self.paused[replica] = False
        core = self.replicas[replica]
        assert core is not None  # a crash unpauses
        core.tick(self.clock_ms(replica))
        self._drain(replica)
        backlog, self._inbox[replica] = self._inbox[replica], []
        for event in backlog:
            self._gate(replica, event)

    def slow(self, replica: int, factor: float) -> None:
        """Make ``replica``'s CPU ``factor`` times slower (1.0 = normal).

        Needs ``processing_us > 0``: a replica that spends no time per message is
        no slower when throttled.
        """
        if not 1.0 <= factor <= SLOW_FACTOR_MAX:
            raise ValueError(f"slow factor must be in [1, {SLOW_FACTOR_MAX:g}], got {factor}")
        if factor > 1.0 and self.processing_us <= 0:
            raise ValueError("slow() needs processing_us > 0 (the cost a factor multiplies)")
        self.slow_factor[replica] = factor

    def inbox_size(self, replica: int) -> int:
        """Messages and client requests waiting for a paused replica."""
        return len(self._inbox[replica])

    def in_flight(self) -> list[tuple[int, int, Deliver]]:
        """Packets between replicas not yet delivered: ``(due_us, seq, packet)``, in order."""
        return [
            (at_us, seq, ev)
            for at_us, seq, ev in self.scheduler.pending()
            if isinstance(ev, Deliver) and ev.src != ev.dst
        ]

    def drop_in_flight(self, seq: int) -> None:
        """Lose the in-flight packet ``seq`` (counted as lost on its link)."""
        ev = self.scheduler.remove(seq)
        assert isinstance(ev, Deliver), ev
        stats = self.network.stats(ev.src, ev.dst)
        stats.dropped += ev.count
        stats.lost += ev.count

    def duplicate_in_flight(self, seq: int) -> None:
        """Deliver the in-flight packet ``seq`` a second time, right after the first."""
        for at_us, s, ev in self.in_flight():
            if s == seq:
                self.scheduler.at(at_us, ev)
                self.network.stats(ev.src, ev.dst).duplicated += ev.count
                return
        raise KeyError(seq)

    def core_counters(self) -> dict[str, int]:
        """``replica.stats`` counters summed over every incarnation, live or crashed."""
        total = dict(self._retired_counters)
        for replica in self.replicas:
            if replica is not None:
                for name, value in _counters(replica).items():
                    total[name] = total.get(name, 0) + value
        return total

    def step(self) -> bool:
        """Process the next event; False when nothing is pending."""
        if not self.scheduler:
            return False
        _, event = self.scheduler.pop()
        self.events_processed += 1
        self._dispatch(event)
        return True

    def run_until(self, time_us: int, *, events_max: int | None = None) -> None:
        """Process every event due by ``time_us``, then set the clock to ``time_us``."""
        count = 0
        while True:
            next_us = self.scheduler.peek_time_us()
            if next_us is None or next_us > time_us:
                break
            if events_max is not None and count >= events_max:
                raise RuntimeError(f"more than {events_max} events before {time_us} us")
            self.step()
            count += 1
        if time_us > self.scheduler.now_us:
            self.scheduler.advance_to(time_us)

    def run_for(self, duration_us: int) -> None:
        self.run_until(self.now_us + duration_us)

    # -- internals ------------------------------------------------------------

    def _build(
        self, r: int, records: list[Record] | None, snapshot: Snapshot | None = None
    ) -> None:
        sm = self._sm_factory()
        self.state_machines[r] = sm
        rng = derive_rng(self.chooser)
        if self.traced or snapshot is not None:
            # (Only the real core takes snapshots, so only it restarts from one.)
            self.replicas[r] = Replica(
                self.config,
                ReplicaId(r),
                sm,
                rng=rng,
                observe=self.observe,
                records=records,
                snapshot=snapshot,
                tracer=self._on_trace if self.traced else None,
            )
            return
        self.replicas[r] = self._replica_factory(self.config, r, sm, rng, self.observe, records)

    def _on_trace(self, event: str, replica: int, fields: dict[str, Any]) -> None:
        for listener in self.trace_listeners:
            listener(replica, event, fields)

    def _dispatch(self, event: Event) -> None:
        if isinstance(event, Deliver):
            self._on_deliver(event)
        elif isinstance(event, Tick):
            self.scheduler.after(self.tick_us, event)
            replica = self.replicas[event.replica]
            if replica is not None and not self.paused[event.replica]:
                replica.tick(self.clock_ms(event.replica))
                self._drain(event.replica)
        elif isinstance(event, Propose | Read):
            if self.replicas[event.replica] is not None:
                self._gate(event.replica, event)
            # else: the client's replica is down; its request is never submitted
        elif isinstance(event, Handled):
            if event.incarnation == self._incarnation[event.replica]:
                self._handle(event.event)
            # else: the process that was handling it crashed meanwhile
        elif isinstance(event, Probe):
            self._on_probe(event)
        elif isinstance(event, ProbeRound):
            self._on_probe_round(event)
        else:
            event.callback()

    def _on_deliver(self, ev: Deliver) -> None:
        alive = self.replicas[ev.dst] is not None
        if ev.src != ev.dst and not self.network.admit(
            ev.src, ev.dst, len(ev.payload), ev.count, dst_alive=alive
        ):
            return
        if alive:
            self._gate(ev.dst, ev)

    def _gate(self, r: int, ev: Inbound) -> None:
        """An arrival at live replica ``r``: queue it (paused), delay it (slow) or handle it."""
        if self.paused[r]:
            if len(self._inbox[r]) >= PAUSED_INBOX_MAX:
                self.inbox_overflow += 1
                return
            self._inbox[r].append(ev)
            return
        cost_us = round(self.processing_us * self.slow_factor[r] * _message_count(ev))
        if cost_us <= 0:
            self._handle(ev)
            return
        done_us = max(self.now_us, self._busy_until_us[r]) + cost_us
        self._busy_until_us[r] = done_us
        self.scheduler.at(done_us, Handled(r, self._incarnation[r], ev))

    def _handle(self, ev: Inbound) -> None:
        """Step the replica with ``ev`` now (it may have been paused meanwhile)."""
        r = ev.dst if isinstance(ev, Deliver) else ev.replica
        if self.replicas[r] is None:
            return
        if self.paused[r]:
            self._gate(r, ev)
            return
        if isinstance(ev, Deliver):
            self._on_arrival(ev)
        elif isinstance(ev, Read):
            self._on_read(ev)
        else:
            self._on_propose(ev)

    def _on_arrival(self, ev: Deliver) -> None:
        replica = self.replicas[ev.dst]
        assert replica is not None
        now_ms = self.clock_ms(ev.dst)
        for message in self.codec.decode_batch(ev.payload):
            for listener in self.step_listeners:
                listener(ev.dst, message)
            replica.step(message, now_ms)
        self._drain(ev.dst)

    def _on_read(self, ev: Read) -> None:
        replica = self.replicas[ev.replica]
        assert replica is not None
        read = getattr(replica, "read", None)
        if read is None:
            return  # a fake replica without reads
        self.reads_issued += 1
        self.checker.read_issued(ev.replica, ev.read_id, ev.key)
        read(ev.read_id, ev.key, self.clock_ms(ev.replica))
        self._drain(ev.replica)

    def _on_propose(self, ev: Propose) -> None:
        replica = self.replicas[ev.replica]
        assert replica is not None
        try:
            replica.propose(ev.command, ev.wait)
        except Overloaded:
            self.scheduler.after(self.tick_us, ev)  # back off one tick, then retry
            return
        self.checker.proposed(ev.replica, ev.command)
        for listener in self.propose_listeners:
            listener(ev.replica, ev.command, self.now_us)
        self._drain(ev.replica)

    def _on_probe_round(self, ev: ProbeRound) -> None:
        self.scheduler.after(self.probe_us, ev)
        if self.replicas[ev.replica] is None or self.paused[ev.replica]:
            return
        for peer in range(self.n):
            if peer != ev.replica:
                self._send_probe(Probe(ev.replica, peer, self.now_us, echo=False))

    def _send_probe(self, probe: Probe) -> None:
        src, dst = (probe.dst, probe.src) if probe.echo else (probe.src, probe.dst)
        for at_us in self.network.transmit(self.now_us, src, dst, 0, messages=0):
            self.scheduler.at(at_us, probe)

    def _on_probe(self, probe: Probe) -> None:
        src, dst = (probe.dst, probe.src) if probe.echo else (probe.src, probe.dst)
        # A paused replica answers no probe (it answers nothing).
        alive = self.replicas[dst] is not None and not self.paused[dst]
        if not self.network.admit(src, dst, 0, 0, dst_alive=alive):
            return
        if not probe.echo:
            self._send_probe(Probe(probe.src, probe.dst, probe.sent_us, echo=True))
            return
        replica = self.replicas[probe.src]
        assert replica is not None
        replica.observe_rtt(ReplicaId(probe.dst), (self.now_us - probe.sent_us) / 1000)
        self._drain(probe.src)

    def _drain(self, r: int) -> None:
        """Carry out a replica's effects: persist, then send, then reply."""
        # The loop stays here, not in sdpaxos.sim.driver: the replica may crash
        # between two batches, a crash plan aimed at a quiet event fires on the
        # empty batch, and the trace recorder wraps this method.
        for _ in range(READY_ROUNDS_MAX):
            replica = self.replicas[r]
            if replica is None:
                return
            rd = replica.ready()
            if not rd:
                if self._crash_plans.pop(r, None) is not None:
                    # The event the crash was aimed at had no effects: crash after it.
                    self.drain_crashes += 1
                    self.crash(r)
                return
            self._carry_out(r, rd)
        raise RuntimeError(f"replica {r} produced effects {READY_ROUNDS_MAX} times in a row")

    def _carry_out(self, r: int, rd: Ready) -> None:
        if not carry_out(r, rd, self.storages[r], self._outlet):
            # Dead before it answered anyone: no reply, no read result.
            self.drain_crashes += 1
            self.crash(r)

    def _send(self, r: int, batch: Sequence[tuple[int, Any]]) -> bool:
        """The batch's messages leave: crash cut, message rules, one packet per
        destination. True when a crash plan cut the batch (the replica dies)."""
        messages = list(batch)
        plan = self._crash_plans.pop(r, None)
        if plan is not None:
            messages = _cut(messages, plan)
        if self.message_rules:
            messages = self._apply_rules(r, messages)
        groups: dict[int, list[Any]] = {}
        for dst, message in messages:
            if not 0 <= dst < self.n:
                raise RuntimeError(f"replica {r} sent {message!r} to unknown replica {dst}")
            for send_listener in self.send_listeners:
                send_listener(r, dst, message)
            groups.setdefault(dst, []).append(message)
        for dst, batch in groups.items():
            payload = self.codec.encode_batch(batch)
            if dst == r:
                self.local_deliveries += 1
                self.scheduler.at(self.now_us, Deliver(r, r, payload, len(batch)))
                continue
            for at_us in self.network.transmit(self.now_us, r, dst, len(payload), len(batch)):
                self.scheduler.at(at_us, Deliver(r, dst, payload, len(batch)))
        return plan is not None

    def _apply_rules(self, r: int, messages: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        """Filter a batch through ``message_rules``: drop, hold (sent now) or keep."""
        kept: list[tuple[int, Any]] = []
        for dst, message in messages:
            fate: int | None = None
            if dst != r:
                for rule in self.message_rules:
                    fate = rule(r, dst, message)
                    if fate is not None:
                        break
            if fate is None:
                kept.append((dst, message))
            elif fate == DROP:
                self.rule_dropped += 1
            else:
                if not 0 <= fate <= HOLD_US_MAX:
                    raise ValueError(f"a message rule held a message for {fate} us")
                self.rule_held += 1
                payload = self.codec.encode_batch([message])
                for at_us in self.network.transmit(
                    self.now_us, r, dst, len(payload), 1, hold_us=fate
                ):
                    self.scheduler.at(at_us, Deliver(r, dst, payload, 1))
        return kept


def _cut(messages: list[tuple[int, Any]], plan: CrashPlan) -> list[tuple[int, Any]]:
    """The prefix of a batch's messages that left before the crash."""
    keep = len(messages) if plan.keep is None else min(plan.keep, len(messages))
    if plan.stop_before:
        for i, (_, message) in enumerate(messages[:keep]):
            if isinstance(message, plan.stop_before):
                return messages[:i]
    return messages[:keep]


def _message_count(ev: Inbound) -> int:
    return ev.count if isinstance(ev, Deliver) else 1


def _counters(replica: SimReplica) -> dict[str, int]:
    """The integer fields of ``replica.stats`` (the core's ``Stats``), if it has any."""
    stats = getattr(replica, "stats", None)
    if stats is None or not is_dataclass(stats) or isinstance(stats, type):
        return {}
    return {
        f.name: value
        for f in fields(stats)
        if isinstance(value := getattr(stats, f.name), int) and not isinstance(value, bool)
    }


class _ClusterOutlet(Outlet):
    """Where a :class:`SimCluster` replica's effects go: the checker, the
    listeners, and (for messages) :meth:`SimCluster._send`."""

    __slots__ = ("_cluster",)

    def __init__(self, cluster: SimCluster) -> None:
        self._cluster = cluster

    def persisted(self, replica: int, records: list[Record]) -> None:
        c = self._cluster
        c.checker.persisted(replica, records)
        for persist_listener in c.persist_listeners:
            persist_listener(replica, records)

    def send(self, replica: int, messages: Sequence[tuple[int, Any]]) -> bool:
        return self._cluster._send(replica, messages)

    def executed(self, replica: int, entries: list[Executed]) -> None:
        self._cluster.checker.executed(replica, entries)

    def snapshotted(self, replica: int, snapshot: Snapshot) -> None:
        self._cluster.checker.snapshot(replica, snapshot.slot)

    def replies(self, replica: int, replies: list[Reply]) -> None:
        c = self._cluster
        for reply in replies:
            c.checker.replied(replica, reply)
            for listener in c.reply_listeners:
                listener(replica, reply, c.now_us)

    def reads(self, replica: int, results: list[ReadResult]) -> None:
        c = self._cluster
        for result in results:
            c.checker.read_served(replica, result)
            for read_listener in c.read_listeners:
                read_listener(replica, result, c.now_us)
