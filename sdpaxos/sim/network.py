"""Simulated links between replicas: delay, jitter, FIFO or datagram order, loss,
duplication and partitions, with per-link counters.

Theory of operation. A packet is one ``(src, dst)`` group of one ``Ready``
batch, already encoded to bytes by the cluster. :meth:`Network.transmit`
decides, at send time, whether and when copies of it arrive, and returns their
delivery times; the cluster schedules them. At delivery time the cluster asks
:meth:`Network.admit` again, so a partition that starts while a packet is in
flight still stops it (a cut cable loses what is on it).

Rules:

* Every random decision comes from the run's :class:`~sdpaxos.sim.chooser.Chooser`,
  with ``0`` benign: no jitter, no drop, no duplicate.
* Stream mode (the default, like TCP): delivery time on a link is
  ``max(previous delivery on that link, now + delay + jitter)``, so jitter never
  reorders a link. Datagram mode drops the ``max`` and may reorder.
* Loss drops a whole packet in either mode; the core retransmits. (A real TCP
  connection would turn loss into delay; dropping is the harsher model.)
* Partitions are a set of blocked directed links. Symmetric, one-way,
  isolate-one and majority/minority splits are all built from
  :meth:`Network.block`, and :meth:`Network.heal` clears them.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from sdpaxos.profiles import DelayProfile
from sdpaxos.sim.chooser import Chooser, flip


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Fault and ordering knobs shared by every link.

    Attributes:
        jitter_ms_max: extra one-way delay drawn uniformly from ``[0, jitter_ms_max]``
            per packet (0 = none). Additive, so the profile's delay is a floor.
        fifo: stream semantics (per-link FIFO); ``False`` is datagram mode.
        drop_probability: chance that a packet is lost.
        duplicate_probability: chance that a packet is delivered twice (the copy
            gets its own jitter).
    """

    jitter_ms_max: float = 0.0
    fifo: bool = True
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0

    def __post_init__(self) -> None:
        if not self.jitter_ms_max >= 0.0:
            raise ValueError(f"jitter_ms_max must be >= 0, got {self.jitter_ms_max}")
        for name in ("drop_probability", "duplicate_probability"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")

    @property
    def faulty(self) -> bool:
        return self.drop_probability > 0.0 or self.duplicate_probability > 0.0


@dataclass(slots=True)
class LinkStats:
    """Counters of one directed link, to validate the emulator against its config.

    ``sent``, ``delivered``, ``dropped`` and ``duplicated`` count protocol
    messages; ``packets_sent`` counts the encoded batches that carried them.
    ``dropped`` is every message that never arrived; of those, ``lost`` were
    random loss (``drop_probability``) and ``cut`` were stopped by a partition
    (the rest were addressed to a crashed replica).
    """

    packets_sent: int = 0
    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0
    lost: int = 0
    cut: int = 0
    bytes_sent: int = 0
    bytes_delivered: int = 0
    delay_us_total: int = 0
    delay_us_max: int = 0


@dataclass(slots=True)
class _Link:
    delay_us: int
    last_delivery_us: int = 0
    stats: LinkStats = field(default_factory=LinkStats)


class Network:
    """The links of one cluster (``n`` replicas, ids ``0 .. n-1``)."""

    __slots__ = ("_blocked", "_chooser", "_links", "config", "n")

    def __init__(self, profile: DelayProfile, config: NetworkConfig, chooser: Chooser) -> None:
        self.n = profile.size
        self.config = config
        self._chooser = chooser
        self._links: dict[tuple[int, int], _Link] = {
            (s, d): _Link(profile.one_way_us(s, d))
            for s in range(self.n)
            for d in range(self.n)
            if s != d
        }
        self._blocked: set[tuple[int, int]] = set()

    # -- faults -------------------------------------------------------------

    def set_config(self, config: NetworkConfig) -> None:
        """Change the fault knobs mid-run (e.g. turn faults off to check liveness)."""
        self.config = config

    def blocked(self, src: int, dst: int) -> bool:
        """The partition hook: is ``src -> dst`` cut right now?"""
        return (src, dst) in self._blocked

    def block(self, src: int, dst: int, *, both_ways: bool = True) -> None:
        """Cut ``src -> dst`` (and ``dst -> src`` unless ``both_ways`` is false)."""
        assert (src, dst) in self._links, (src, dst)
        self._blocked.add((src, dst))
        if both_ways:
            self._blocked.add((dst, src))

    def isolate(self, node: int) -> None:
        """Cut every link to and from ``node``."""
        for other in range(self.n):
            if other != node:
                self.block(node, other)

    def split(self, group: Iterable[int]) -> None:
        """Cut every link between ``group`` and the rest (majority/minority split)."""
        inside = sorted(set(group))
        outside = [r for r in range(self.n) if r not in inside]
        for a in inside:
            for b in outside:
                self.block(a, b)

    def isolate_one_way(self, node: int, *, inbound: bool) -> None:
        """Cut only the links into ``node`` (``inbound``) or only those out of it.

        An inbound-isolated node still talks but hears nothing (a sequencer that
        sends heartbeats nobody can answer); an outbound-isolated one hears
        everything and is heard by nobody.
        """
        for other in range(self.n):
            if other != node:
                src, dst = (other, node) if inbound else (node, other)
                self.block(src, dst, both_ways=False)

    def unblock(self, src: int, dst: int, *, both_ways: bool = True) -> None:
        """Restore ``src -> dst`` (and ``dst -> src`` unless ``both_ways`` is false)."""
        assert (src, dst) in self._links, (src, dst)
        self._blocked.discard((src, dst))
        if both_ways:
            self._blocked.discard((dst, src))

    def heal(self) -> None:
        """Restore every link."""
        self._blocked.clear()

    def blocked_links(self) -> list[tuple[int, int]]:
        return sorted(self._blocked)

    # -- traffic ------------------------------------------------------------

    def transmit(
        self,
        now_us: int,
        src: int,
        dst: int,
        size_bytes: int,
        messages: int = 1,
        *,
        hold_us: int = 0,
    ) -> list[int]:
        """Send one packet of ``messages`` messages; the delivery time of each copy.

        ``hold_us`` > 0 holds the packet back that long on top of its delay, out of
        the link's order: it neither waits for nor delays any other packet (a
        message rule's hold, see :mod:`sdpaxos.sim.cluster`).
        """
        link = self._links[(src, dst)]
        stats = link.stats
        stats.packets_sent += 1
        stats.sent += messages
        stats.bytes_sent += size_bytes
        if self.blocked(src, dst):
            stats.dropped += messages
            stats.cut += messages
            return []
        if flip(self._chooser, self.config.drop_probability):
            stats.dropped += messages
            stats.lost += messages
            return []
        copies = 2 if flip(self._chooser, self.config.duplicate_probability) else 1
        stats.duplicated += (copies - 1) * messages
        times: list[int] = []
        for _ in range(copies):
            delay_us = link.delay_us + self._jitter_us() + hold_us
            at_us = now_us + delay_us
            if self.config.fifo and hold_us <= 0:
                at_us = max(at_us, link.last_delivery_us)
                link.last_delivery_us = at_us
            stats.delay_us_total += at_us - now_us
            stats.delay_us_max = max(stats.delay_us_max, at_us - now_us)
            times.append(at_us)
        return times

    def admit(
        self, src: int, dst: int, size_bytes: int, messages: int = 1, *, dst_alive: bool = True
    ) -> bool:
        """At delivery time: may the packet be handed to ``dst``? Counts the outcome."""
        stats = self._links[(src, dst)].stats
        if self.blocked(src, dst):
            stats.dropped += messages
            stats.cut += messages
            return False
        if not dst_alive:
            stats.dropped += messages
            return False
        stats.delivered += messages
        stats.bytes_delivered += size_bytes
        return True

    def _jitter_us(self) -> int:
        jitter_us_max = round(self.config.jitter_ms_max * 1000)
        if jitter_us_max <= 0:
            return 0
        return self._chooser.below(jitter_us_max + 1)

    # -- observability ------------------------------------------------------

    def stats(self, src: int, dst: int) -> LinkStats:
        return self._links[(src, dst)].stats

    def links(self) -> list[tuple[tuple[int, int], LinkStats]]:
        """Every link's counters, in ``(src, dst)`` order."""
        return [(key, self._links[key].stats) for key in sorted(self._links)]

    def totals(self) -> LinkStats:
        total = LinkStats()
        for _, s in self.links():
            total.packets_sent += s.packets_sent
            total.sent += s.sent
            total.delivered += s.delivered
            total.dropped += s.dropped
            total.duplicated += s.duplicated
            total.lost += s.lost
            total.cut += s.cut
            total.bytes_sent += s.bytes_sent
            total.bytes_delivered += s.bytes_delivered
            total.delay_us_total += s.delay_us_total
            total.delay_us_max = max(total.delay_us_max, s.delay_us_max)
        return total
