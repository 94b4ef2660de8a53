"""Random fault schedules for a :class:`~sdpaxos.sim.cluster.SimCluster`.

Theory of operation. A :class:`FaultInjector` owns one cluster and a set of
enabled :class:`FaultKind` s. Each call to :meth:`FaultInjector.inject` draws one
applicable fault from the run's :class:`~sdpaxos.sim.chooser.Chooser` and
applies it; timed faults (a pause, a slow spell) schedule their own end on the
cluster's clock. :meth:`FaultInjector.heal_all` ends every fault at once, so a
run can check liveness afterwards. Every decision (which fault, which victim,
for how long) is a chooser draw, so a run is a function of its seed.

Faults:

* ``crash``: kill a live replica, the current sequencer half of the time; with
  N >= 5 half of the crashes also kill a second replica (a command leader) at
  the same instant. At most F = (N-1)/2 replicas are down at once.
* ``restart``: rebuild a crashed replica from its storage.
* ``pause``: stop a replica (sequencer half of the time) for 50 ms .. 3 s.
* ``slow``: throttle a replica's CPU by 3x, 30x or 300x for 0.5 .. 5 s.
* ``partition``: isolate one replica, split a minority from the majority, cut
  one pair of replicas both ways, or (``stagger``) cut the sequencer from one
  follower and 0.5 .. 1.2 s later from everyone; healed by a later ``heal``.
* ``oneway``: cut one directed link, or every link into / out of one replica.
* ``drop``, ``dup``, ``reorder``: network knobs for the whole run (packet loss,
  duplication, jitter with datagram order), see :func:`network_for`.

When ``partition`` or ``oneway`` is on, the injector also draws ``heal``
actions (restore every link).

Faults aimed at recovery (issue 6: thirteen recovery bugs that the faults
above never found):

* ``droptype``: for 0.3 .. 3 s, lose (or, one time in three, hold back for
  0.1 .. 1.5 s) every message of one type sent by, or to, one replica: O-accepts,
  heartbeats, NewView, V-requests, votes, O-acks, O-commits, C-prepares and
  C-promises, lease grants, C-commits, learn requests, read requests/replies.
* ``point``: crash a replica at a protocol point, triggered by its own trace
  events (the cluster is then traced). The crash cuts the batch of that event
  short: records durable, a drawn prefix of its messages sent, no reply.
  ``win``: the next replica to win an election, right after it won;
  ``range``: a new sequencer after its j-th O-ack for its rebuilt range, before
  it sends NewView (or on a timer before it would); ``oaccept``: a command
  leader that just accepted an O-accept carrying its own slot, before (or while)
  it broadcasts the O-commit, with N >= 5 half of the time together with the
  sequencer (the N = 5 inference); ``cleader``: a command leader right after it
  started a C-instance (its C-accepts partly sent), so that others block on it
  and recover it concurrently; ``crecovery``: a command leader is crashed (or,
  if no crash is left, paused), then the next recoverer is crashed when it
  starts, or between phase 1 and phase 2, or has its phase-2 C-accepts held
  back; ``candidate``: the next replica to start a view change, mid-election;
  ``voter``: the next replica to vote, after its promise is durable. ``win``,
  ``range``, ``candidate`` and ``voter`` provoke a view change (a hand-over, or
  a pause of the sequencer). Crashed victims restart 0.2 .. 4 s later.
* ``handover``: ``transfer_sequencer`` on the current sequencer, to any other
  replica (possibly a dead one).
* ``churn``: several view changes or restarts in a row: ``serial`` kills the
  sequencer 2 or 3 times, each time restarting it; ``rolling`` crashes and
  restarts every replica in turn; ``handovers`` hands the role on 2 or 3 times.
* ``anyorder``: for 0.5 .. 4 s every packet gets a random extra delay of up to
  0.3, 1 or 3 s, in datagram order (not a bounded reorder window).
* ``drift``: every replica's clock runs off by up to 100, 500 or 1000 ppm (never
  beyond the core's ``clock_drift_ppm`` bound), with a random offset.
* ``elsewhere``: clients retry half of their retries at another replica (same
  ``(client_id, seq)``).
* ``straggler``: the sequencer's CPU is 300x slower for 2.5 .. 3.5 s while every
  other replica gets an open-loop stream of one-command clients (24 a second):
  enough unordered C-instances per window for straggler detection to poll and
  replace the sequencer (closed-loop clients alone never fill a window).
* ``readstorm``: reads aimed at view changes. Whenever a replica starts a view
  change, wins one, or hands its role over, every key (and "everything") is
  read at the old and at the new sequencer 0 .. 500 ms later: the moments when a
  lease must lapse, a history table start afresh, a restarted replica honour
  the lease it granted. Reads at the sequencer cost no messages.
* ``limits``: the run's queue limits are drawn tight (each with probability
  1/2): history table of 2 keys (reads fall back to the floor), 2 out-of-order
  O-accepts buffered, 2 C-instances recovered per prepare, 4 C-instances and
  8 O-instances learned per request, 2 C-instances in flight per leader.

Every timed fault checks, when it fires, that at most F replicas would be down
and that the run has not been healed; after :meth:`FaultInjector.heal_all`
nothing new is injected (scheduled restarts still happen).
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar

from sdpaxos.core import messages as m
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.types import Command
from sdpaxos.sim.chooser import Chooser
from sdpaxos.sim.cluster import DROP, CrashPlan, SimCluster
from sdpaxos.sim.network import NetworkConfig

T = TypeVar("T")

#: Shortest and longest pause of a replica, in ms of virtual time.
PAUSE_MS_MIN = 50
PAUSE_MS_MAX = 3_000
#: Shortest and longest slow spell, in ms.
SLOW_MS_MIN = 500
SLOW_MS_MAX = 5_000
#: How much slower a throttled replica's CPU is (the paper's straggler runs at ~1/3).
SLOW_FACTORS = (3.0, 30.0, 300.0)
#: CPU time per message of a normal replica when ``slow`` faults are on.
PROCESSING_US_WITH_SLOW = 20
#: Network knobs drawn per run (index 0 is always the benign one).
DROP_PROBABILITIES = (0.01, 0.05, 0.2)
DUP_PROBABILITIES = (0.02, 0.1)
JITTER_MS = (5.0, 30.0, 100.0)
#: Message types ``droptype`` loses or holds, by name (a name may cover two types).
MESSAGE_GROUPS: dict[str, tuple[type, ...]] = {
    "OAccept": (m.OAccept,),
    "Heartbeat": (m.Heartbeat,),
    "NewView": (m.NewView,),
    "VRequest": (m.VRequest,),
    "Vote": (m.Vote,),
    "OAck": (m.OAck,),
    "OCommit": (m.OCommit,),
    "CPrepare/CPromise": (m.CPrepare, m.CPromise),
    "LeaseGrant": (m.LeaseGrant,),
    "CCommit": (m.CCommit,),
    "LearnRequest": (m.LearnRequest,),
    # The batches are what the core sends; the single forms only come from an
    # older peer, and are lost or held alike.
    "RRequest/RReply": (m.RRequest, m.RReply, m.RRequestBatch, m.RReplyBatch),
}
#: Types only the sequencer sends: dropped *from* it (the sequencer) half of the time.
SEQUENCER_GROUPS = frozenset({"OAccept", "Heartbeat", "NewView"})
DROPTYPE_MS_MIN = 300
DROPTYPE_MS_MAX = 3_000
HOLD_MS_MIN = 100
HOLD_MS_MAX = 1_500
#: Protocol points a ``point`` fault crashes at (see the module docstring).
POINTS = ("win", "range", "oaccept", "cleader", "crecovery", "candidate", "voter")
#: How long an armed point waits for its trigger before it is disarmed, in ms.
POINT_ARMED_MS = 6_000
#: A replica crashed at a point restarts this long after, in ms.
POINT_RESTART_MS_MIN = 200
POINT_RESTART_MS_MAX = 4_000
#: A pause that provokes a view change: longer than lease + margin + stagger.
PROVOKE_PAUSE_MS_MIN = 1_200
PROVOKE_PAUSE_MS_MAX = 3_000
#: Shapes of ``churn`` (see the module docstring).
CHURNS = ("serial", "rolling", "handovers")
#: ``churn``: rounds, and the spacing of its crashes, restarts and hand-overs.
CHURN_ROUNDS_MIN = 2
CHURN_ROUNDS_MAX = 3
CHURN_DOWN_MS_MIN = 300
CHURN_DOWN_MS_MAX = 2_000
CHURN_GAP_MS_MIN = 1_500
CHURN_GAP_MS_MAX = 3_500
#: A hand-over refused (the sequencer is still re-proposing its range) is retried.
HANDOVER_RETRY_MS = 100
HANDOVER_TRIES_MAX = 20
#: ``anyorder``: the window, and the largest extra delay of a packet in it.
ANYORDER_MS_MIN = 500
ANYORDER_MS_MAX = 4_000
ANYORDER_DELAY_MS = (300.0, 1_000.0, 3_000.0)
#: ``drift``: clock rate errors drawn per run, never beyond the core's bound.
DRIFT_PPM = (100, 500, 1_000)
assert max(DRIFT_PPM) <= ClusterConfig(replicas=1).clock_drift_ppm
#: Largest message count a crash plan keeps (then: all of them).
CRASH_KEEP_MAX = 8
#: ``straggler``: how much slower, for how long, and the open-loop stream's pace.
STRAGGLER_FACTOR = 300.0
STRAGGLER_MS_MIN = 2_500
STRAGGLER_MS_MAX = 3_500
STRAGGLER_STREAM_MS = 42
#: Client ids of the straggler stream start here (the workload's are small).
STREAM_CLIENT_BASE = 1_000_000
#: ``readstorm``: when the reads go out after a view-change event, in ms.
READSTORM_OFFSETS_MS = (0, 10, 40, 100, 250, 500)
#: ``limits``: each limit is set to this value with probability 1/2.
TIGHT_LIMITS: dict[str, int] = {
    "history_keys_max": 2,
    # The history table dropped and restarted often (no read for 50 ms).
    "history_idle_ms": 50,
    "o_pending_max": 2,
    "recovery_batch_max": 2,
    "learn_c_max": 4,
    "learn_o_max": 8,
    "c_inflight_max": 2,
}


class FaultKind(StrEnum):
    CRASH = "crash"
    RESTART = "restart"
    PAUSE = "pause"
    SLOW = "slow"
    PARTITION = "partition"
    ONEWAY = "oneway"
    DROP = "drop"
    DUP = "dup"
    REORDER = "reorder"
    DROPTYPE = "droptype"
    POINT = "point"
    HANDOVER = "handover"
    CHURN = "churn"
    ANYORDER = "anyorder"
    DRIFT = "drift"
    ELSEWHERE = "elsewhere"
    STRAGGLER = "straggler"
    LIMITS = "limits"
    READSTORM = "readstorm"


ALL_FAULTS: frozenset[FaultKind] = frozenset(FaultKind)
#: Faults that need the cluster's trace events (``SimCluster(traced=True)``).
TRACED_FAULTS: frozenset[FaultKind] = frozenset({FaultKind.POINT, FaultKind.READSTORM})


def parse_faults(text: str) -> frozenset[FaultKind]:
    """``"all"`` or a comma list of fault names (``crash,restart,...``); "" means none.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    if names == ["all"]:
        return ALL_FAULTS
    kinds: set[FaultKind] = set()
    for name in names:
        try:
            kinds.add(FaultKind(name))
        except ValueError:
            known = ", ".join(k.value for k in FaultKind)
            raise ValueError(f"unknown fault {name!r}; known: all, {known}") from None
    return frozenset(kinds)


def format_faults(kinds: Iterable[FaultKind]) -> str:
    """The ``--faults`` spelling of ``kinds`` (``all`` when complete)."""
    kinds = frozenset(kinds)
    if kinds == ALL_FAULTS:
        return "all"
    return ",".join(k.value for k in FaultKind if k in kinds)


def pick(chooser: Chooser, items: Sequence[T]) -> T:
    """One of ``items``, the first being the chooser's benign choice."""
    assert items
    return items[chooser.below(len(items))]


def between(chooser: Chooser, low: int, high: int) -> int:
    """An integer in ``low .. high``; ``low`` is the benign choice."""
    assert low <= high
    return low + chooser.below(high - low + 1)


def drift_for(kinds: frozenset[FaultKind], chooser: Chooser) -> int:
    """The run's clock drift in ppm: drawn only if ``drift`` is enabled (else 0)."""
    return pick(chooser, DRIFT_PPM) if FaultKind.DRIFT in kinds else 0


def limits_for(kinds: frozenset[FaultKind], chooser: Chooser) -> dict[str, int]:
    """``ClusterConfig`` overrides: each tight limit drawn only if ``limits`` is enabled."""
    if FaultKind.LIMITS not in kinds:
        return {}
    return {name: value for name, value in TIGHT_LIMITS.items() if chooser.below(2) == 1}


def network_for(kinds: frozenset[FaultKind], chooser: Chooser) -> NetworkConfig:
    """The run's network knobs: drop / dup / reorder drawn only if enabled."""
    drop = pick(chooser, DROP_PROBABILITIES) if FaultKind.DROP in kinds else 0.0
    dup = pick(chooser, DUP_PROBABILITIES) if FaultKind.DUP in kinds else 0.0
    jitter = pick(chooser, JITTER_MS) if FaultKind.REORDER in kinds else 0.0
    fifo = FaultKind.REORDER not in kinds or chooser.below(2) == 0
    return NetworkConfig(
        jitter_ms_max=jitter, fifo=fifo, drop_probability=drop, duplicate_probability=dup
    )


@dataclass(slots=True)
class _Window:
    """Messages of ``types`` (from ``src`` / to ``dst``, if set) are dropped or held."""

    types: tuple[type, ...]
    src: int | None
    dst: int | None
    until_us: int
    hold_us: int  # DROP: lose them
    match: Callable[[Any], bool] | None = None


@dataclass(slots=True)
class _Point:
    """An armed trigger: ``fire(replica, fields)`` on trace ``event`` (True: done)."""

    name: str
    event: str
    replica: int | None
    until_us: int
    fire: Callable[[int, dict[str, Any]], bool]
    done: bool = field(default=False)


class FaultInjector:
    """Draws and applies faults to one cluster; counts what it injected.

    ``counts`` maps a fault name to how many times it was injected: ``crash``
    counts replicas killed (``crash-pair`` counts the double kills among them),
    ``partition`` and ``oneway`` count the cuts by shape (``partition-isolate``,
    ``partition-split``, ``partition-pair``, ``oneway-link``, ``oneway-in``,
    ``oneway-out``), ``heal`` the restorations. Aimed faults count their
    shape (``droptype-OAck``, ``churn-serial``, ...); a protocol point counts
    ``point-<name>`` when armed and ``fired-<name>`` when its crash (or hold)
    happened: an armed point whose trigger never came fires nothing.
    """

    def __init__(
        self,
        cluster: SimCluster,
        kinds: frozenset[FaultKind],
        *,
        read_keys: Sequence[bytes | None] = (None,),
    ) -> None:
        self.cluster = cluster
        #: What a read storm reads (``None``: everything).
        self.read_keys = tuple(read_keys)
        self.kinds = kinds
        self.chooser = cluster.chooser
        self.n = cluster.n
        self.f = (cluster.n - 1) // 2
        self.counts: dict[str, int] = {}
        #: ``(time_us, what)`` of every fault injected or ended, for replaying by eye.
        self.timeline: list[tuple[int, str]] = []
        self._pause_ends: dict[int, int] = {}
        self._slow_ends: dict[int, int] = {}
        self._healed = False
        #: Scheduled fault steps (chains, windows) run until about this time.
        self.busy_until_us = 0
        self._base_network = cluster.network.config
        self._anyorder_end_us = -1
        self._windows: list[_Window] = []
        self._points: dict[str, list[_Point]] = {}
        #: Replicas that were just sent an O-accept carrying their own slot.
        self._own_oaccept: set[int] = set()
        #: Commands of the straggler stream so far.
        self._streamed = 0
        cluster.message_rules.append(self._rule)
        if kinds & TRACED_FAULTS and not cluster.traced:
            raise ValueError("point and readstorm need a traced cluster (SimCluster(traced=True))")
        if cluster.traced:
            cluster.trace_listeners.append(self._on_trace)
            cluster.step_listeners.append(self._on_step)
        if FaultKind.READSTORM in kinds:
            for event in ("StartViewChange", "BecomeSequencer", "SequencerHandover"):
                self._points.setdefault(event, []).append(
                    _Point("readstorm", event, None, 1 << 62, self._read_storm)
                )

    # -- queries --------------------------------------------------------------

    def down(self) -> list[int]:
        return [r for r in range(self.n) if not self.cluster.alive(r)]

    def sequencer(self) -> int | None:
        """The sequencer as the live replicas see it (the most common answer)."""
        return self.cluster.believed_sequencer()

    def may_crash(self, count: int = 1) -> bool:
        """Can ``count`` more replicas go down, F at most, in a run not yet healed?"""
        return not self._healed and len(self.down()) + count <= self.f

    # -- injection ------------------------------------------------------------

    def inject(self) -> str:
        """Apply one random applicable fault now; its name ("none" if none applies)."""
        options: list[str] = []
        down = self.down()
        if FaultKind.CRASH in self.kinds and len(down) < self.f:
            options += ["crash"] * 3
        if FaultKind.RESTART in self.kinds and down:
            options += ["restart"] * 2
        if FaultKind.PAUSE in self.kinds:
            options += ["pause"] * 2
        if FaultKind.SLOW in self.kinds and self.cluster.processing_us > 0:
            options += ["slow"]
        if FaultKind.PARTITION in self.kinds:
            options += ["partition"] * 2 + ["stagger"] * 2
        if FaultKind.ONEWAY in self.kinds:
            options += ["oneway"] * 2
        if self.cluster.network.blocked_links():
            options += ["heal"] * 2
        if FaultKind.DROPTYPE in self.kinds:
            options += ["droptype"] * 2
        if FaultKind.POINT in self.kinds:
            options += ["point"] * 3
        if FaultKind.HANDOVER in self.kinds:
            options += ["handover"]
        if FaultKind.CHURN in self.kinds:
            options += ["churn"]
        if FaultKind.ANYORDER in self.kinds:
            options += ["anyorder"]
        if FaultKind.STRAGGLER in self.kinds and self.cluster.processing_us > 0:
            options += ["straggler"]
        if not options:
            return "none"
        action = pick(self.chooser, options)
        getattr(self, f"_{action}")()
        return action

    def inject_named(self, action: str, shape: str | None = None) -> None:
        """Apply the fault ``action`` now (``"point"``, ``"churn"``, ``"droptype"``, ...),
        of the given ``shape`` where it has shapes (a point's name, a churn's kind);
        for scripted scenarios and tests. The kind need not be enabled, but
        ``point`` needs a traced cluster."""
        if action == "point":
            self._point(shape)
        elif action == "churn":
            self._churn(shape)
        else:
            if shape is not None:
                raise ValueError(f"{action} has no shapes")
            getattr(self, f"_{action}")()

    def heal_all(self) -> None:
        """End every fault: network healed and benign, everyone resumed, unthrottled, up.

        Armed points, message windows and scheduled fault chains end too (a
        scheduled restart still happens; it is no fault).
        """
        self._healed = True
        self._points.clear()
        self._windows.clear()
        net = self.cluster.network
        net.set_config(NetworkConfig(fifo=self._base_network.fifo))
        net.heal()
        for r in range(self.n):
            self.cluster.resume(r)
            self.cluster.slow(r, 1.0)
        for r in self.down():
            self.cluster.restart(r)
        self._log("end of faults: healed, resumed, restarted")

    # -- the faults -----------------------------------------------------------

    def _count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def _log(self, what: str) -> None:
        self.timeline.append((self.cluster.now_us, what))

    def _at(self, delay_ms: int, callback: Callable[[], None], name: str) -> None:
        """Run ``callback`` ``delay_ms`` from now unless the run was healed by then."""

        def guarded() -> None:
            if not self._healed:
                callback()

        at_us = self.cluster.now_us + delay_ms * 1000
        self.busy_until_us = max(self.busy_until_us, at_us)
        self.cluster.call_at(at_us, guarded, name)

    def _victim(self, candidates: list[int]) -> int:
        """A replica among ``candidates``, the sequencer half of the time."""
        assert candidates
        seq = self.sequencer()
        if seq in candidates and self.chooser.below(2) == 1:
            return seq
        return pick(self.chooser, candidates)

    def _crash(self) -> None:
        victim = self._victim(self.cluster.live_replicas())
        self.cluster.crash(victim)
        self._count("crash")
        self._log(f"crash {victim}")
        if self.n >= 5 and len(self.down()) < self.f and self.chooser.below(2) == 1:
            # The sequencer (or whoever) and a command leader at the same instant.
            other = pick(self.chooser, self.cluster.live_replicas())
            self.cluster.crash(other)
            self._count("crash")
            self._count("crash-pair")
            self._log(f"crash {other} (same instant)")

    def _restart(self) -> None:
        victim = pick(self.chooser, self.down())
        self.cluster.restart(victim)
        self._count("restart")
        self._log(f"restart {victim}")

    def _pause(self) -> None:
        live = [r for r in self.cluster.live_replicas() if not self.cluster.paused[r]]
        if not live:
            return
        victim = self._victim(live)
        self._pause_for(victim, between(self.chooser, PAUSE_MS_MIN, PAUSE_MS_MAX))
        self._count("pause")

    def _pause_for(self, victim: int, duration_ms: int) -> None:
        self.cluster.pause(victim)
        end_us = self.cluster.now_us + duration_ms * 1000
        self._pause_ends[victim] = end_us
        self._log(f"pause {victim} until {end_us} us")

        def resume() -> None:
            if self._pause_ends.get(victim) == end_us:
                self.cluster.resume(victim)
                self._log(f"resume {victim}")

        self.cluster.call_at(end_us, resume, f"resume {victim}")

    def _slow(self) -> None:
        victim = self._victim(list(range(self.n)))
        factor = pick(self.chooser, SLOW_FACTORS)
        self.cluster.slow(victim, factor)
        self._count("slow")
        end_us = self.cluster.now_us + between(self.chooser, SLOW_MS_MIN, SLOW_MS_MAX) * 1000
        self._slow_ends[victim] = end_us
        self._log(f"slow {victim} x{factor:g} until {end_us} us")

        def restore() -> None:
            if self._slow_ends.get(victim) == end_us:
                self.cluster.slow(victim, 1.0)

        self.cluster.call_at(end_us, restore, f"unslow {victim}")

    def _partition(self) -> None:
        net = self.cluster.network
        shape = pick(self.chooser, ("isolate", "split", "pair"))
        if shape == "isolate":
            net.isolate(self._victim(list(range(self.n))))
        elif shape == "split":
            size = between(self.chooser, 1, max(1, self.f))
            pool = list(range(self.n))
            group = [pool.pop(self.chooser.below(len(pool))) for _ in range(size)]
            net.split(group)
        else:
            a = self.chooser.below(self.n)
            b = (a + 1 + self.chooser.below(self.n - 1)) % self.n
            net.block(a, b)
        self._count("partition")
        self._count(f"partition-{shape}")
        self._log(f"partition-{shape}: cut {net.blocked_links()}")

    def _stagger(self) -> None:
        """The sequencer stops reaching one follower, then, 0.5 .. 1.2 s later, anyone.

        The starved follower's lease lapses first, so it votes at once when a
        second follower, which granted the sequencer a lease just before the
        cut, starts an election early: the window in which a candidate must
        wait out its own grant while the isolated sequencer still serves reads.
        """
        seq = self.sequencer()
        if seq is None:
            return
        net = self.cluster.network
        follower = (seq + 1 + self.chooser.below(self.n - 1)) % self.n
        net.block(seq, follower, both_ways=False)
        delay_ms = between(self.chooser, 500, 1_200)
        self._count("partition")
        self._count("partition-stagger")
        self._log(f"partition-stagger: cut {seq} -> {follower}, all of {seq} in {delay_ms} ms")

        def isolate() -> None:
            net.isolate(seq)
            self._log(f"partition-stagger: cut {net.blocked_links()}")

        self._at(delay_ms, isolate, "partition-stagger")

    def _oneway(self) -> None:
        net = self.cluster.network
        shape = pick(self.chooser, ("link", "in", "out"))
        if shape == "link":
            a = self.chooser.below(self.n)
            b = (a + 1 + self.chooser.below(self.n - 1)) % self.n
            net.block(a, b, both_ways=False)
        else:
            net.isolate_one_way(self._victim(list(range(self.n))), inbound=shape == "in")
        self._count("oneway")
        self._count(f"oneway-{shape}")
        self._log(f"oneway-{shape}: cut {net.blocked_links()}")

    def _heal(self) -> None:
        self.cluster.network.heal()
        self._count("heal")
        self._log("heal")

    # -- droptype: one message type, from or to one replica, for a while --------

    def _droptype(self) -> None:
        names = list(MESSAGE_GROUPS)
        group = pick(self.chooser, names)
        seq = self.sequencer()
        if group in SEQUENCER_GROUPS and seq is not None and self.chooser.below(2) == 0:
            victim, outbound = seq, True
        else:
            victim, outbound = self.chooser.below(self.n), self.chooser.below(2) == 0
        hold_us = DROP
        if self.chooser.below(3) == 2:
            hold_us = between(self.chooser, HOLD_MS_MIN, HOLD_MS_MAX) * 1000
        duration_ms = between(self.chooser, DROPTYPE_MS_MIN, DROPTYPE_MS_MAX)
        until_us = self.cluster.now_us + duration_ms * 1000
        self.busy_until_us = max(self.busy_until_us, until_us)
        self._windows.append(
            _Window(
                MESSAGE_GROUPS[group],
                victim if outbound else None,
                None if outbound else victim,
                until_us,
                hold_us,
            )
        )
        self._count("droptype")
        self._count(f"droptype-{group}")
        how = "drop" if hold_us == DROP else f"hold {hold_us // 1000} ms"
        way = "from" if outbound else "to"
        self._log(f"droptype: {how} {group} {way} {victim} for {duration_ms} ms")

    def _rule(self, src: int, dst: int, message: Any) -> int | None:
        """The cluster's message rule: the first live window that matches decides."""
        if not self._windows:
            return None
        now_us = self.cluster.now_us
        if any(w.until_us <= now_us for w in self._windows):
            self._windows = [w for w in self._windows if w.until_us > now_us]
        for w in self._windows:
            if (
                isinstance(message, w.types)
                and (w.src is None or w.src == src)
                and (w.dst is None or w.dst == dst)
                and (w.match is None or w.match(message))
            ):
                return w.hold_us
        return None

    # -- straggler: a slow sequencer under a load it cannot order ------------------

    def _straggler(self) -> None:
        seq = self.sequencer()
        if seq is None or self.cluster.processing_us <= 0:
            return
        duration_ms = between(self.chooser, STRAGGLER_MS_MIN, STRAGGLER_MS_MAX)
        self.cluster.slow(seq, STRAGGLER_FACTOR)
        end_us = self.cluster.now_us + duration_ms * 1000
        self._slow_ends[seq] = end_us
        self.busy_until_us = max(self.busy_until_us, end_us)
        self._count("straggler")
        self._log(f"straggler: {seq} x{STRAGGLER_FACTOR:g} until {end_us} us, with a stream")

        def restore() -> None:
            if self._slow_ends.get(seq) == end_us:
                self.cluster.slow(seq, 1.0)

        self.cluster.call_at(end_us, restore, f"unslow {seq}")
        now_us = self.cluster.now_us
        for k in range(duration_ms // STRAGGLER_STREAM_MS):
            at_us = now_us + k * STRAGGLER_STREAM_MS * 1000
            for r in range(self.n):
                if r != seq:
                    self._streamed += 1
                    cid = STREAM_CLIENT_BASE + self._streamed
                    self.cluster.propose_at(at_us, r, Command(cid, 1, b"stream"))

    # -- anyorder: every packet late by a large random delay --------------------

    def _anyorder(self) -> None:
        delay_ms = pick(self.chooser, ANYORDER_DELAY_MS)
        duration_ms = between(self.chooser, ANYORDER_MS_MIN, ANYORDER_MS_MAX)
        net = self.cluster.network
        net.set_config(replace(self._base_network, jitter_ms_max=delay_ms, fifo=False))
        end_us = self.cluster.now_us + duration_ms * 1000
        self._anyorder_end_us = max(self._anyorder_end_us, end_us)
        self._count("anyorder")
        self._log(f"anyorder: packets late by up to {delay_ms:g} ms until {end_us} us")

        def restore() -> None:
            if self._anyorder_end_us == end_us:
                net.set_config(self._base_network)
                self._log("anyorder ends")

        self._at(duration_ms, restore, "anyorder ends")

    # -- hand-overs -------------------------------------------------------------

    def _handover(self) -> None:
        self._count("handover")
        self._hand_over(tries=HANDOVER_TRIES_MAX)

    def _hand_over(self, tries: int, then: Callable[[], None] | None = None) -> None:
        """``transfer_sequencer`` on the current sequencer to a random other replica;
        retried every :data:`HANDOVER_RETRY_MS` while the sequencer refuses."""
        seq = self.sequencer()
        target = -1
        if seq is not None:
            target = (seq + 1 + self.chooser.below(self.n - 1)) % self.n
            if self.cluster.transfer_sequencer(seq, target):
                self._count("handover-done")
                self._log(f"handover {seq} -> {target}")
                if then is not None:
                    then()
                return
        if tries > 1:
            self._at(HANDOVER_RETRY_MS, lambda: self._hand_over(tries - 1, then), "handover")
        else:
            self._count("handover-refused")
            self._log(f"handover refused (sequencer {seq}, target {target})")

    # -- churn: several view changes or restarts in a row -------------------------

    def _churn(self, shape: str | None = None) -> None:
        shape = shape or pick(self.chooser, CHURNS)
        self._count("churn")
        self._count(f"churn-{shape}")
        rounds = between(self.chooser, CHURN_ROUNDS_MIN, CHURN_ROUNDS_MAX)
        self._log(f"churn-{shape}: {rounds} rounds")
        if shape == "serial":
            self._serial_kill(rounds)
        elif shape == "rolling":
            order = list(range(self.n))
            order = [order.pop(self.chooser.below(len(order))) for _ in range(self.n)]
            self._rolling(order)
        else:
            self._handovers(rounds)

    def _serial_kill(self, rounds: int) -> None:
        """Kill the sequencer, restart it a little later, and again with the next one.

        A replica still down from an earlier fault is restarted first if the kill
        would need its place among the F.
        """
        seq = self.sequencer()
        down = self.down()
        if seq is not None and self.cluster.alive(seq) and not self.may_crash() and down:
            self.cluster.restart(down[0])
            self._count("restart")
            self._log(f"churn: restart {down[0]} to make room")
        if seq is not None and self.cluster.alive(seq) and self.may_crash():
            self.cluster.crash(seq)
            self._count("crash")
            self._log(f"churn: crash sequencer {seq}")
            down_ms = between(self.chooser, CHURN_DOWN_MS_MIN, CHURN_DOWN_MS_MAX)
            self._restart_later(seq, down_ms)
        if rounds > 1:
            gap_ms = between(self.chooser, CHURN_GAP_MS_MIN, CHURN_GAP_MS_MAX)
            self._at(gap_ms, lambda: self._serial_kill(rounds - 1), "churn-serial")

    def _rolling(self, order: list[int]) -> None:
        """Crash and restart ``order[0]``, then the next one, until all had their turn."""
        if not order:
            return
        victim, rest = order[0], order[1:]
        down_ms = between(self.chooser, CHURN_DOWN_MS_MIN // 3, CHURN_DOWN_MS_MAX // 2)
        down = [r for r in self.down() if r != victim]
        if self.cluster.alive(victim) and not self.may_crash() and down:
            self.cluster.restart(down[0])
            self._count("restart")
            self._log(f"churn: restart {down[0]} to make room")
        if self.cluster.alive(victim) and self.may_crash():
            self.cluster.crash(victim)
            self._count("crash")
            self._log(f"churn: rolling crash {victim}")
            self._restart_later(victim, down_ms)
        gap_ms = down_ms + between(self.chooser, 100, 500)
        self._at(gap_ms, lambda: self._rolling(rest), "churn-rolling")

    def _handovers(self, rounds: int) -> None:
        def next_round() -> None:
            if rounds > 1:
                gap_ms = between(self.chooser, CHURN_GAP_MS_MIN // 2, CHURN_GAP_MS_MAX // 2)
                self._at(gap_ms, lambda: self._handovers(rounds - 1), "churn-handovers")

        self._hand_over(tries=HANDOVER_TRIES_MAX, then=next_round)

    def _restart_later(self, victim: int, delay_ms: int) -> None:
        """Restart ``victim`` after ``delay_ms`` (also after the run was healed)."""

        def restart() -> None:
            if not self.cluster.alive(victim):
                self.cluster.restart(victim)
                self._count("restart")
                self._log(f"restart {victim}")

        self.cluster.call_at(self.cluster.now_us + delay_ms * 1000, restart, f"restart {victim}")

    # -- protocol points ----------------------------------------------------------

    def _on_trace(self, replica: int, event: str, fields: dict[str, Any]) -> None:
        points = self._points.get(event)
        if not points:
            return
        now_us = self.cluster.now_us
        for p in list(points):
            expired = p.done or now_us > p.until_us
            if expired or ((p.replica is None or p.replica == replica) and p.fire(replica, fields)):
                p.done = True
        self._points[event] = [p for p in self._points[event] if not p.done]

    def _read_storm(self, replica: int, fields: dict[str, Any]) -> bool:
        """Reads at the old and the new sequencer around a view-change event:
        the winner and the sequencer it replaces, the sequencer a candidate is
        about to depose, the sequencer that hands its role over."""
        targets: set[int] = set()
        old = fields.get("old_sequencer")
        if isinstance(old, int):  # BecomeSequencer
            targets |= {replica, old}
        elif "target" in fields:  # SequencerHandover
            targets.add(replica)
        else:  # StartViewChange: the sequencer as the others see it
            seq = self.sequencer()
            if seq is not None and seq != replica:
                targets.add(seq)
        now_us = self.cluster.now_us
        for offset_ms in READSTORM_OFFSETS_MS:
            for r in sorted(targets):
                for key in self.read_keys:
                    read_id = self.cluster.new_read_id()
                    self.cluster.read_at(now_us + offset_ms * 1000, r, read_id, key)
        self._count("readstorm")
        return False  # stays armed for the whole run

    def _on_step(self, replica: int, message: Any) -> None:
        if isinstance(message, m.OAccept) and any(o == replica for o, _ in message.values):
            self._own_oaccept.add(replica)

    def _arm(
        self,
        name: str,
        event: str,
        replica: int | None,
        fire: Callable[[int, dict[str, Any]], bool],
    ) -> None:
        until_us = self.cluster.now_us + POINT_ARMED_MS * 1000
        self._points.setdefault(event, []).append(_Point(name, event, replica, until_us, fire))

    def _plan(self, stop_before: tuple[type, ...] = ()) -> CrashPlan:
        """How much of the cut batch leaves: nothing, a few messages, or all."""
        shape = self.chooser.below(3)
        keep = 0 if shape == 0 else (None if shape == 2 else 1 + self.chooser.below(CRASH_KEEP_MAX))
        return CrashPlan(keep=keep, stop_before=stop_before)

    def _crash_point(self, name: str, victim: int, plan: CrashPlan, restart: bool = True) -> bool:
        """Crash ``victim`` in its current batch (if a crash is allowed); True if so."""
        if not self.cluster.alive(victim) or not self.may_crash():
            return False
        self.cluster.crash_in_drain(victim, plan)
        self._count(f"fired-{name}")
        self._count("crash")
        keep = "all" if plan.keep is None else plan.keep
        stop = ",".join(t.__name__ for t in plan.stop_before)
        self._log(f"point-{name}: crash {victim} (keep {keep}{', stop ' + stop if stop else ''})")
        if restart:
            delay_ms = between(self.chooser, POINT_RESTART_MS_MIN, POINT_RESTART_MS_MAX)
            self._restart_later(victim, delay_ms)
        return True

    def _point(self, name: str | None = None) -> None:
        if not self.cluster.traced:
            raise ValueError("point faults need a traced cluster (SimCluster(traced=True))")
        name = name or pick(self.chooser, POINTS)
        if name not in POINTS:
            raise ValueError(f"unknown protocol point {name!r}; known: {', '.join(POINTS)}")
        self._count(f"point-{name}")
        self._log(f"point-{name} armed")
        getattr(self, f"_point_{name}")()

    def _provoke_view_change(self) -> None:
        """Make the sequencer go away without a crash: hand-over or a long pause."""
        seq = self.sequencer()
        if seq is None or not self.cluster.alive(seq):
            return  # an election is under way, or will be
        if self.chooser.below(2) == 0 and self.cluster.transfer_sequencer(
            seq, (seq + 1 + self.chooser.below(self.n - 1)) % self.n
        ):
            self._count("handover-done")
            self._log(f"provoke: handover from {seq}")
            return
        if not self.cluster.paused[seq]:
            self._pause_for(seq, between(self.chooser, PROVOKE_PAUSE_MS_MIN, PROVOKE_PAUSE_MS_MAX))
            self._log(f"provoke: pause sequencer {seq}")

    def _point_win(self) -> None:
        plan = self._plan()
        self._arm("win", "BecomeSequencer", None, lambda r, _: self._crash_point("win", r, plan))
        self._provoke_view_change()

    def _point_range(self) -> None:
        by_acks = self.chooser.below(2) == 0
        # The ack that completes a majority sends NewView in the same batch (cut).
        acks_needed = 1 + self.chooser.below(self.n // 2)
        plan = self._plan(stop_before=(m.NewView,))
        fraction_pct = self.chooser.below(101)

        def won(r: int, fields: dict[str, Any]) -> bool:
            view = fields.get("view")
            sent_new_view: list[bool] = [False]

            def new_view(_: int, f: dict[str, Any]) -> bool:
                if f.get("view") == view:
                    sent_new_view[0] = True
                    return True
                return False

            self._arm("range", "SendNewView", r, new_view)
            if by_acks:
                acks: set[int] = set()

                def ack(_: int, f: dict[str, Any]) -> bool:
                    if sent_new_view[0]:
                        return True
                    if int(f.get("upto", -1)) < 0:
                        return False  # "send me the range": no acceptance
                    acks.add(int(f.get("src", -1)))
                    return len(acks) >= acks_needed and self._crash_point("range", r, plan)

                self._arm("range", "HandleOAck", r, ack)
                return True
            # Or on a timer, before the nearest acceptor's ack can be back.
            profile = self.cluster.profile
            rtt_us = min(2 * profile.one_way_us(r, p) for p in range(self.n) if p != r)
            delay_us = rtt_us * fraction_pct // 100

            def late() -> None:
                if not sent_new_view[0] and self.cluster.alive(r) and self.may_crash():
                    self.cluster.crash(r)
                    self._count("fired-range")
                    self._count("crash")
                    self._log(f"point-range: crash {r} {delay_us} us after it won")
                    self._restart_later(
                        r, between(self.chooser, POINT_RESTART_MS_MIN, POINT_RESTART_MS_MAX)
                    )

            self.cluster.call_at(self.cluster.now_us + delay_us, late, "point-range")
            return True

        self._arm("range", "BecomeSequencer", None, won)
        self._provoke_view_change()

    def _point_oaccept(self) -> None:
        seq = self.sequencer()
        candidates = [
            r for r in self.cluster.live_replicas() if r != seq and not self.cluster.paused[r]
        ]
        if not candidates:
            return
        victim = pick(self.chooser, candidates)
        # Between the O-accept and its O-commit, or in the middle of the broadcast.
        plan = self._plan(stop_before=(m.OCommit,) if self.chooser.below(2) == 0 else ())
        with_sequencer = self.n >= 5 and self.chooser.below(2) == 0
        self._own_oaccept.discard(victim)

        def fire(r: int, _: dict[str, Any]) -> bool:
            if r not in self._own_oaccept:
                return False
            self._own_oaccept.discard(r)
            seq_now = self.sequencer()
            pair = with_sequencer and seq_now is not None and seq_now != r
            if pair and self.may_crash(2):
                assert seq_now is not None
                self._crash_point("oaccept", r, plan)
                self._crash_sequencer_now(seq_now)
                return True
            return self._crash_point("oaccept", r, plan)

        self._arm("oaccept", "HandleOAccept", victim, fire)

    def _crash_sequencer_now(self, seq: int) -> None:
        """Crash ``seq`` right after the current event (the same instant)."""

        def crash() -> None:
            if self.cluster.alive(seq) and self.may_crash():
                self.cluster.crash(seq)
                self._count("crash")
                self._count("fired-oaccept+sequencer")
                self._log(f"point-oaccept: crash sequencer {seq} (same instant)")
                self._restart_later(
                    seq, between(self.chooser, POINT_RESTART_MS_MIN, POINT_RESTART_MS_MAX)
                )

        self.cluster.call_at(self.cluster.now_us, crash, "crash sequencer")

    def _point_cleader(self) -> None:
        seq = self.sequencer()
        candidates = [r for r in self.cluster.live_replicas() if r != seq]
        if not candidates:
            return
        victim = pick(self.chooser, candidates)
        plan = self._plan()
        self._arm("cleader", "Propose", victim, lambda r, _: self._crash_point("cleader", r, plan))

    def _point_crecovery(self) -> None:
        seq = self.sequencer()
        candidates = [
            r for r in self.cluster.live_replicas() if r != seq and not self.cluster.paused[r]
        ]
        if not candidates:
            return
        leader = pick(self.chooser, candidates)
        # Make recoveries happen: the command leader dies (or stops) right after it
        # started a C-instance; whoever then blocks on it recovers it.
        if self.may_crash(2):
            plan = self._plan()
            self._arm(
                "crecovery", "Propose", leader, lambda r, _: self._crash_point("cleader", r, plan)
            )
        else:

            def stop(r: int, _: dict[str, Any]) -> bool:
                def pause() -> None:
                    if self.cluster.alive(r) and not self.cluster.paused[r]:
                        self._pause_for(r, between(self.chooser, 1_500, 4_000))
                        self._count("fired-pause-cleader")

                self.cluster.call_at(self.cluster.now_us, pause, "pause leader")
                return True

            self._arm("crecovery", "Propose", leader, stop)
        shape = pick(self.chooser, ("start", "phase2", "hold"))
        self._count(f"point-crecovery-{shape}")
        if shape == "start":
            plan = self._plan()
            self._arm(
                "crecovery",
                "StartCRecovery",
                None,
                lambda r, _: self._crash_point("crecovery-start", r, plan),
            )
        elif shape == "phase2":
            plan = self._plan()
            # HandleCPromise is traced at the promise that completes a majority:
            # the phase-2 step of whichever recovery gets there first (this
            # leader's, or another's), whose C-accepts the crash cuts. Until a
            # crash is allowed (too many down), the point stays armed.
            self._arm(
                "crecovery",
                "HandleCPromise",
                None,
                lambda r, _: self._crash_point("crecovery-phase2", r, plan),
            )
        else:
            hold_us = between(self.chooser, 300, 3_000) * 1000

            def hold(r: int, _: dict[str, Any]) -> bool:
                until_us = self.cluster.now_us + between(self.chooser, 1_000, 4_000) * 1000
                self._windows.append(
                    _Window(
                        (m.CAccept,),
                        r,
                        None,
                        until_us,
                        hold_us,
                        match=lambda msg: bool(msg.owner != msg.src),
                    )
                )
                self._count("fired-crecovery-hold")
                self._log(f"point-crecovery: hold {r}'s phase-2 C-accepts {hold_us // 1000} ms")
                return True

            self._arm("crecovery", "StartCRecovery", None, hold)

    def _point_candidate(self) -> None:
        plan = self._plan()
        seq = self.sequencer()

        def fire(r: int, _: dict[str, Any]) -> bool:
            return r != seq and self._crash_point("candidate", r, plan)

        self._arm("candidate", "StartViewChange", None, fire)
        self._provoke_view_change()

    def _point_voter(self) -> None:
        plan = self._plan()
        self._arm("voter", "HandleVRequest", None, lambda r, _: self._crash_point("voter", r, plan))
        self._provoke_view_change()
