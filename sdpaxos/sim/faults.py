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
* ``partition``: isolate one replica, split a minority from the majority, or cut
  one pair of replicas both ways; healed by a later ``heal``.
* ``oneway``: cut one directed link, or every link into / out of one replica.
* ``drop``, ``dup``, ``reorder``: network knobs for the whole run (packet loss,
  duplication, jitter with datagram order), see :func:`network_for`.

When ``partition`` or ``oneway`` is on, the injector also draws ``heal``
actions (restore every link).
"""

from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import TypeVar

from sdpaxos.sim.chooser import Chooser
from sdpaxos.sim.cluster import SimCluster
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


ALL_FAULTS: frozenset[FaultKind] = frozenset(FaultKind)


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


def network_for(kinds: frozenset[FaultKind], chooser: Chooser) -> NetworkConfig:
    """The run's network knobs: drop / dup / reorder drawn only if enabled."""
    drop = pick(chooser, DROP_PROBABILITIES) if FaultKind.DROP in kinds else 0.0
    dup = pick(chooser, DUP_PROBABILITIES) if FaultKind.DUP in kinds else 0.0
    jitter = pick(chooser, JITTER_MS) if FaultKind.REORDER in kinds else 0.0
    fifo = FaultKind.REORDER not in kinds or chooser.below(2) == 0
    return NetworkConfig(
        jitter_ms_max=jitter, fifo=fifo, drop_probability=drop, duplicate_probability=dup
    )


class FaultInjector:
    """Draws and applies faults to one cluster; counts what it injected.

    ``counts`` maps a fault name to how many times it was injected: ``crash``
    counts replicas killed (``crash-pair`` counts the double kills among them),
    ``partition`` and ``oneway`` count the cuts by shape (``partition-isolate``,
    ``partition-split``, ``partition-pair``, ``oneway-link``, ``oneway-in``,
    ``oneway-out``), ``heal`` the restorations.
    """

    def __init__(self, cluster: SimCluster, kinds: frozenset[FaultKind]) -> None:
        self.cluster = cluster
        self.kinds = kinds
        self.chooser = cluster.chooser
        self.n = cluster.n
        self.f = (cluster.n - 1) // 2
        self.counts: dict[str, int] = {}
        #: ``(time_us, what)`` of every fault injected or ended, for replaying by eye.
        self.timeline: list[tuple[int, str]] = []
        self._pause_ends: dict[int, int] = {}
        self._slow_ends: dict[int, int] = {}

    # -- queries --------------------------------------------------------------

    def down(self) -> list[int]:
        return [r for r in range(self.n) if not self.cluster.alive(r)]

    def sequencer(self) -> int | None:
        """The sequencer as the live replicas see it (the most common answer)."""
        votes: dict[int, int] = {}
        for r in self.cluster.live_replicas():
            seq = getattr(self.cluster.replicas[r], "sequencer", None)
            if isinstance(seq, int):
                votes[seq] = votes.get(seq, 0) + 1
        if not votes:
            return None
        return max(sorted(votes), key=lambda s: votes[s])

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
            options += ["partition"] * 2
        if FaultKind.ONEWAY in self.kinds:
            options += ["oneway"] * 2
        if self.cluster.network.blocked_links():
            options += ["heal"] * 2
        if not options:
            return "none"
        action = pick(self.chooser, options)
        getattr(self, f"_{action}")()
        return action

    def heal_all(self) -> None:
        """End every fault: network healed and benign, everyone resumed, unthrottled, up."""
        net = self.cluster.network
        net.set_config(NetworkConfig(fifo=net.config.fifo))
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
        self.cluster.pause(victim)
        self._count("pause")
        end_us = self.cluster.now_us + between(self.chooser, PAUSE_MS_MIN, PAUSE_MS_MAX) * 1000
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
