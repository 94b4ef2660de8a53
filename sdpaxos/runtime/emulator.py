"""Network-delay emulator for the runtime: when may a frame to a peer be written?

Why: a laboratory cluster on one machine or one data centre has sub-millisecond
links, but SDPaxos is about wide-area latency (the paper's Table 1). The
runtime's node asks this module, on the SENDING side, for every batch of frames
it is about to write to peer ``dst``, at what time it is due at the peer, or
whether a partition drops it. The node writes the batch at once behind a DUE
mark with that time, and the receiving node's
:class:`sdpaxos.runtime.delivery.DelayedFrames` holds the frames until then
(never early, per-link order, no busy waiting). On one machine the real
network's own (small) delay falls inside the emulated one; between machines
it adds to it.

The module is pure scheduling: no I/O, no asyncio, no clock (the caller passes
``now_ms``, any monotonic clock in milliseconds; the node passes
``time.monotonic() * 1000``, not the loop's clock, which under uvloop counts
whole milliseconds; the answer is on the same clock), and randomness only from
the :class:`random.Random` it is given (seed it for a reproducible run). It
shares :mod:`sdpaxos.profiles` with the simulator and never imports the
simulator.

API::

    settings = EmulatorSettings(jitter_ms=5, bandwidth_bytes_per_s=1e6, loss_pct=1)
    emu = LinkEmulator.from_profile(me, builtin("paper5"), regions, settings, rng)
    at_ms = emu.schedule(dst, nbytes, now_ms)     # None: dropped by a partition
    emu.block(dst); emu.unblock(dst); emu.partition(parse_partition("0,1|2", 3)); emu.heal()
    emu.set_delay_ms(dst, 40.0); emu.set_profile(profile, regions); emu.set_settings(s)
    emu.active; emu.is_blocked(dst); emu.counters(); emu.to_json()

The rules, applied in this order to a frame of ``n`` bytes sent at ``now``:

1. Partition: a blocked link drops the frame (``None``) and counts it. The
   core retransmits what matters, as it does after a real connection loss.
2. Bandwidth (``bandwidth_bytes_per_s``, per link): the frame occupies the
   link for ``n / bw`` seconds, starting when the link is free:
   ``start = max(now, busy_until)``, ``busy_until = start + n / bw``. Frames
   queue behind one another; propagation then overlaps, as on a real pipe.
3. Delay: the link's one-way delay, from a profile (replica ``i``'s link to
   ``j`` gets ``one_way(region(i), region(j))``) or an explicit matrix.
4. Jitter (``jitter_ms``): nonnegative and additive, so the delay is a floor;
   ``uniform`` draws from ``[0, jitter_ms]``, ``normal`` is half-normal with
   scale ``jitter_ms`` cut at ``JITTER_NORMAL_CUT_SIGMAS`` of it.
5. Loss (``loss_pct``) as delay, since TCP turns a lost segment into a
   retransmission: with probability ``loss_pct`` the frame is lost and resent
   after ``rto_ms``; a resend may be lost again (same probability), and each
   further timeout doubles (exponential backoff, capped at ``RTO_MS_MAX``),
   at most ``LOSS_RETRIES_MAX`` times. Loss is per frame, not per segment.
6. Order: a stream never reorders, so
   ``at = max(previous at on this link, busy_until + delay + jitter + loss)``.
   This one rule keeps jitter from reordering and gives head-of-line blocking
   behind a "lost" frame: later frames wait for it.

Partition semantics: :meth:`LinkEmulator.partition` takes groups of replica
ids and blocks this replica's links to every replica outside its own group. A
replica listed in no group is ISOLATED (alone in a group of its own): the
groups say who may talk, and an omitted replica was not given anyone. The call
replaces the blocked set (earlier :meth:`~LinkEmulator.block` calls included);
:meth:`~LinkEmulator.heal` clears it. Only outgoing links are this emulator's:
a symmetric partition is the same call on every node, a one-way cut a
:meth:`~LinkEmulator.block` on one side. A frame already scheduled when a
partition starts is not recalled; a transport that wants "a cut cable loses
what is on it" asks :meth:`~LinkEmulator.is_blocked` again at write time.

The identity configuration (no delay, jitter, bandwidth cap, loss or
partition) is cheap: :attr:`LinkEmulator.active` is ``False`` and
:meth:`~LinkEmulator.schedule` returns ``now_ms`` after two counter updates
(the transport may also skip the emulator entirely when it is inactive).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from sdpaxos.core.membership import NODE_ID_MAX
from sdpaxos.profiles import DelayProfile
from sdpaxos.runtime.partition import check_groups, check_replicas

#: Longest one-way delay of a link: a minute is beyond any planet-bound path,
#: and a larger number is a typo (seconds for milliseconds).
DELAY_MS_MAX = 60_000.0
#: Most links one emulator keeps: the file's replicas and the nodes added
#: since (a changing membership has at most 7 members and 4 learners at a
#: time, and removed nodes keep their links).
LINKS_MAX = 256
#: Largest jitter parameter: ten seconds of jitter is a broken link, not a slow one.
JITTER_MS_MAX = 10_000.0
#: A ``normal`` jitter draw is cut at this many ``jitter_ms``: the tail of a
#: Gaussian is unbounded, and a link's worst case should be known.
JITTER_NORMAL_CUT_SIGMAS = 4.0
#: Slowest bandwidth cap (1 kB/s): slower, one heartbeat frame takes seconds.
BANDWIDTH_BYTES_PER_S_MIN = 1_000.0
#: Fastest bandwidth cap (100 GB/s): faster than any NIC, i.e. no cap at all.
BANDWIDTH_BYTES_PER_S_MAX = 100e9
#: Highest loss: past half of all frames a TCP connection spends its life in
#: backoff; a dead link is a partition, not a loss rate.
LOSS_PCT_MAX = 50.0
#: Smallest retransmission timeout (1 ms; Linux's minimum is 200 ms).
RTO_MS_MIN = 1.0
#: Largest retransmission timeout, also the cap of the backoff (Linux: 120 s).
RTO_MS_MAX = 120_000.0
#: Most consecutive losses of one frame (Linux ``tcp_retries2`` is 15; after
#: that the connection would be dropped, which this model does not do).
LOSS_RETRIES_MAX = 15

JitterDistribution = Literal["uniform", "normal"]
_JITTER_DISTRIBUTIONS: tuple[str, ...] = ("uniform", "normal")


def _check_number(name: str, value: object, lo: float, hi: float) -> float:
    """``value`` as a float in ``[lo, hi]``, or a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not lo <= value <= hi:  # also rejects NaN
        raise ValueError(f"{name} must be in [{lo:g}, {hi:g}], got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class EmulatorSettings:
    """The knobs shared by all of one replica's outgoing links (delays are per link).

    Attributes:
        jitter_ms: extra delay per frame, ``0 <= jitter_ms <= JITTER_MS_MAX``;
            the bound of a ``uniform`` draw, the scale of a ``normal`` one.
        jitter_distribution: ``"uniform"`` or ``"normal"`` (half-normal).
        bandwidth_bytes_per_s: per-link cap, ``None`` for none.
        loss_pct: chance in percent that a frame (or its resend) is lost,
            ``0 <= loss_pct <= LOSS_PCT_MAX``.
        rto_ms: the first retransmission timeout a lost frame waits; 200 ms
            by default, Linux's minimum RTO, which is what a low-RTT link gets.
    """

    jitter_ms: float = 0.0
    jitter_distribution: JitterDistribution = "uniform"
    bandwidth_bytes_per_s: float | None = None
    loss_pct: float = 0.0
    rto_ms: float = 200.0

    def __post_init__(self) -> None:
        _check_number("jitter_ms", self.jitter_ms, 0.0, JITTER_MS_MAX)
        if self.jitter_distribution not in _JITTER_DISTRIBUTIONS:
            raise ValueError(
                f"jitter_distribution must be one of {', '.join(_JITTER_DISTRIBUTIONS)},"
                f" got {self.jitter_distribution!r}"
            )
        if self.bandwidth_bytes_per_s is not None:
            _check_number(
                "bandwidth_bytes_per_s",
                self.bandwidth_bytes_per_s,
                BANDWIDTH_BYTES_PER_S_MIN,
                BANDWIDTH_BYTES_PER_S_MAX,
            )
        _check_number("loss_pct", self.loss_pct, 0.0, LOSS_PCT_MAX)
        _check_number("rto_ms", self.rto_ms, RTO_MS_MIN, RTO_MS_MAX)

    @property
    def identity(self) -> bool:
        """True when the settings add nothing (no jitter, cap or loss)."""
        return self.jitter_ms == 0.0 and self.bandwidth_bytes_per_s is None and self.loss_pct == 0.0


@dataclass(slots=True)
class LinkCounters:
    """What one outgoing link did, for a status page and to check the emulator.

    Attributes:
        frames: frames scheduled (not dropped); ``frames + dropped`` were offered.
        bytes: their bytes.
        dropped: frames dropped because the link was blocked (partition).
        lost: frames delayed by simulated loss (each counted once, however
            many times it was resent).
        added_delay_ms: sum over scheduled frames of ``at - now``.
        max_queue_ms: the longest a frame waited behind earlier frames on the
            link (bandwidth queue and stream order), beyond its own delay,
            jitter, loss and transmission time.
    """

    frames: int = 0
    bytes: int = 0
    dropped: int = 0
    lost: int = 0
    added_delay_ms: float = 0.0
    max_queue_ms: float = 0.0


def profile_row_ms(
    me: int, profile: DelayProfile, regions: Sequence[str] | None = None
) -> list[float]:
    """One-way delays (ms) of replica ``me``'s links to every replica.

    ``regions[i]`` is the region of replica ``i`` (a name of the profile or a
    decimal index); several replicas may share a region, and then their link
    gets the profile's in-region delay (the diagonal). Default: replica ``i``
    is in ``profile.regions[i]``.
    """
    names = list(profile.regions) if regions is None else list(regions)
    check_replicas(len(names))
    _check_me(me, len(names))
    idx = [profile.index(r) for r in names]  # ProfileError (a ValueError) names a bad region
    src = idx[me]
    return [profile.one_way_us(src, d) / 1000 for d in idx]


def _check_me(me: int, replicas: int) -> None:
    if isinstance(me, bool) or not isinstance(me, int) or not 0 <= me < replicas:
        raise ValueError(f"me must be a replica id in 0..{replicas - 1}, got {me!r}")


class LinkEmulator:
    """The outgoing links of one replica (``me``) to each of ``len(one_way_ms)`` replicas.

    State per link: its delay, whether it is blocked, ``busy_until`` (when
    the bandwidth cap frees it), ``last_at`` (the latest time handed out, for
    stream order) and its :class:`LinkCounters`. The link to ``me`` exists
    only to keep lists indexed by replica id; sending on it is an error.
    """

    __slots__ = (
        "_active",
        "_blocked",
        "_busy_until_ms",
        "_counters",
        "_delay_ms",
        "_last_at_ms",
        "_n",
        "_profile",
        "_region",
        "_rng",
        "_settings",
        "me",
    )

    def __init__(
        self,
        me: int,
        one_way_ms: Sequence[float] | Mapping[int, float],
        settings: EmulatorSettings | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``one_way_ms[j]``: the delay of link ``me -> j`` (entry ``me`` is ignored).

        ``rng`` defaults to an OS-seeded :class:`random.Random`; pass a seeded
        one for a reproducible run.
        """
        if isinstance(one_way_ms, Mapping):
            # A node outside the file's list (for_new_node): links by node id.
            links = dict(one_way_ms)
            n = sum(1 for j in links if j != me)
            if me not in links or not 0 < len(links) <= LINKS_MAX:
                raise ValueError(f"one_way_ms must name {me} and at most {LINKS_MAX} nodes")
        else:
            n = len(one_way_ms)
            check_replicas(n)
            _check_me(me, n)
            links = dict(enumerate(one_way_ms))
        self.me = me
        self._n = n
        # By node id: a node added to a changing membership gets a link later
        # (:meth:`add_node`), under an id that may be far above ``n``.
        self._delay_ms: dict[int, float] = {
            j: _check_number(f"delay_ms[{me}->{j}]", d, 0.0, DELAY_MS_MAX) for j, d in links.items()
        }
        self._delay_ms[me] = 0.0
        self._settings = EmulatorSettings() if settings is None else settings
        self._rng = random.Random() if rng is None else rng
        self._blocked: set[int] = set()
        self._busy_until_ms: dict[int, float] = dict.fromkeys(self._delay_ms, -math.inf)
        self._last_at_ms: dict[int, float] = dict.fromkeys(self._delay_ms, -math.inf)
        self._counters: dict[int, LinkCounters] = {j: LinkCounters() for j in self._delay_ms}
        #: The profile and this node's region index, when built from a profile
        #: (what :meth:`add_node` needs).
        self._profile: DelayProfile | None = None
        self._region = -1
        self._active = False
        self._update_active()

    @classmethod
    def from_profile(
        cls,
        me: int,
        profile: DelayProfile,
        regions: Sequence[str] | None = None,
        settings: EmulatorSettings | None = None,
        rng: random.Random | None = None,
    ) -> LinkEmulator:
        """Delays from a profile; ``regions[i]`` is replica ``i``'s region.

        See :func:`profile_row_ms`; a bad region is a ``ProfileError`` (a ``ValueError``).
        """
        emu = cls(me, profile_row_ms(me, profile, regions), settings, rng)
        names = list(profile.regions) if regions is None else list(regions)
        emu._profile, emu._region = profile, profile.index(names[me])
        return emu

    @classmethod
    def for_new_node(
        cls,
        me: int,
        region: str,
        profile: DelayProfile,
        regions: Sequence[str],
        settings: EmulatorSettings | None = None,
        rng: random.Random | None = None,
    ) -> LinkEmulator:
        """The links of a node that is not one of the file's replicas (one
        waiting to be added to a changing membership, ``me`` any node id not
        below ``len(regions)``), in ``region``, to the file's replicas
        (``regions[i]``: replica ``i``'s); more come with :meth:`add_node`.

        Why it needs its own: its links must be as slow as the members' to
        each other, or a cluster that grows is measured on loopback wherever
        a new node takes part.
        """
        if isinstance(me, bool) or not isinstance(me, int) or not len(regions) <= me <= NODE_ID_MAX:
            raise ValueError(f"me must be a node id in {len(regions)}..{NODE_ID_MAX}, got {me!r}")
        src = profile.index(region)
        row = {j: profile.one_way_us(src, profile.index(r)) / 1000 for j, r in enumerate(regions)}
        emu = cls(me, {**row, me: 0.0}, settings, rng)
        emu._profile, emu._region = profile, src
        return emu

    def add_node(self, dst: int, region: str) -> bool:
        """A node joined the membership: its link gets the profile's delay from
        this node's region to ``region``. False (nothing changed) when the
        emulator was not built from a profile, the region is not in it, the
        link exists already, or :data:`LINKS_MAX` links exist."""
        profile = self._profile
        if (
            profile is None
            or dst in self._delay_ms
            or isinstance(dst, bool)
            or not isinstance(dst, int)
            or not 0 <= dst <= NODE_ID_MAX
            or len(self._delay_ms) >= LINKS_MAX
        ):
            return False
        try:
            delay_ms = profile.one_way_us(self._region, profile.index(region)) / 1000
        except ValueError:
            return False
        self._delay_ms[dst] = _check_number(
            f"delay_ms[{self.me}->{dst}]", delay_ms, 0.0, DELAY_MS_MAX
        )
        self._busy_until_ms[dst] = self._last_at_ms[dst] = -math.inf
        self._counters[dst] = LinkCounters()
        self._update_active()
        return True

    @classmethod
    def from_matrix(
        cls,
        me: int,
        one_way_ms: Sequence[Sequence[float]],
        settings: EmulatorSettings | None = None,
        rng: random.Random | None = None,
    ) -> LinkEmulator:
        """Delays from a full ``n x n`` one-way matrix in ms, ``[src][dst]``; row ``me`` is used."""
        n = len(one_way_ms)
        for i, row in enumerate(one_way_ms):
            if len(row) != n:
                raise ValueError(f"one_way_ms row {i} must have {n} entries, got {len(row)}")
        _check_me(me, n)
        return cls(me, one_way_ms[me], settings, rng)

    # -- the hot path -----------------------------------------------------

    def schedule(self, dst: int, nbytes: int, now_ms: float) -> float | None:
        """When a frame of ``nbytes`` to ``dst``, offered at ``now_ms``, may be written.

        Returns an absolute time on the caller's clock (``>= now_ms``), or
        ``None`` when a partition drops the frame. Never earlier than the
        previous answer for the same link (module docstring, rule 6).
        """
        if dst not in self._delay_ms or dst == self.me:
            raise ValueError(
                f"dst must be a peer of replica {self.me} ({self._peers_text()}), got {dst}"
            )
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        c = self._counters[dst]
        if not self._active and now_ms >= self._last_at_ms[dst]:
            # Identity: nothing to add, and no earlier frame is still waiting.
            c.frames += 1
            c.bytes += nbytes
            return now_ms
        if dst in self._blocked:
            c.dropped += 1
            return None
        s = self._settings
        rng = self._rng
        # Rule 2: the bandwidth queue.
        start = now_ms
        tx_ms = 0.0
        if s.bandwidth_bytes_per_s is not None:
            start = max(now_ms, self._busy_until_ms[dst])
            tx_ms = nbytes * 1000.0 / s.bandwidth_bytes_per_s
            self._busy_until_ms[dst] = start + tx_ms
        # Rules 3-5: delay, jitter, loss; this frame's own share.
        own = self._delay_ms[dst] + tx_ms
        if s.jitter_ms > 0.0:
            if s.jitter_distribution == "uniform":
                own += rng.uniform(0.0, s.jitter_ms)
            else:
                cut = JITTER_NORMAL_CUT_SIGMAS * s.jitter_ms
                own += min(abs(rng.gauss(0.0, s.jitter_ms)), cut)
        if s.loss_pct > 0.0:
            p = s.loss_pct / 100.0
            rto = s.rto_ms
            retries = 0
            while retries < LOSS_RETRIES_MAX and rng.random() < p:
                own += rto
                rto = min(2.0 * rto, RTO_MS_MAX)
                retries += 1
            if retries:
                c.lost += 1
        # Rule 6: stream order.
        unqueued = now_ms + own
        at = max(self._last_at_ms[dst], start + own)
        self._last_at_ms[dst] = at
        c.frames += 1
        c.bytes += nbytes
        c.added_delay_ms += at - now_ms
        queue_ms = at - unqueued
        if queue_ms > c.max_queue_ms:
            c.max_queue_ms = queue_ms
        return at

    # -- changes at run time ------------------------------------------------

    @property
    def active(self) -> bool:
        """False when the emulator adds nothing (the transport may skip it)."""
        return self._active

    @property
    def settings(self) -> EmulatorSettings:
        return self._settings

    @property
    def replicas(self) -> int:
        return self._n

    def delay_ms(self, dst: int) -> float:
        """The configured one-way delay of link ``me -> dst``."""
        self._check_peer(dst)
        return self._delay_ms[dst]

    def is_blocked(self, dst: int) -> bool:
        """Whether link ``me -> dst`` is cut (a transport may ask again at write time)."""
        return dst in self._blocked

    def block(self, dst: int) -> None:
        """Cut link ``me -> dst``: its frames are dropped until :meth:`unblock` or :meth:`heal`."""
        self._check_peer(dst)
        self._blocked.add(dst)
        self._update_active()

    def unblock(self, dst: int) -> None:
        """Restore link ``me -> dst`` (a no-op if it was not cut)."""
        self._check_peer(dst)
        self._blocked.discard(dst)
        self._update_active()

    def partition(self, groups: Iterable[Iterable[int]]) -> None:
        """Cut the links to every replica outside ``me``'s group; replaces the blocked set.

        A replica in no group is isolated (module docstring); so ``me``
        absent from every group cuts all of its links.
        """
        checked = check_groups(groups, max(self._delay_ms) + 1)
        mine = next((g for g in checked if self.me in g), frozenset({self.me}))
        self._blocked = {j for j in self._delay_ms if j != self.me and j not in mine}
        self._update_active()

    def heal(self) -> None:
        """Restore every link."""
        self._blocked.clear()
        self._update_active()

    def set_delay_ms(self, dst: int, delay_ms: float) -> None:
        """Change link ``me -> dst``'s one-way delay (frames already scheduled keep theirs;
        a shorter delay never lets a frame overtake them, rule 6)."""
        self._check_peer(dst)
        self._delay_ms[dst] = _check_number(
            f"delay_ms[{self.me}->{dst}]", delay_ms, 0.0, DELAY_MS_MAX
        )
        self._update_active()

    def set_delays_ms(self, one_way_ms: Sequence[float]) -> None:
        """Replace every link's delay (``one_way_ms[j]`` for ``me -> j``; entry ``me`` ignored)."""
        if len(one_way_ms) != self._n:
            raise ValueError(
                f"one_way_ms must have {self._n} entries (one per replica), got {len(one_way_ms)}"
            )
        for j, d in enumerate(one_way_ms):
            _check_number(f"delay_ms[{self.me}->{j}]", d, 0.0, DELAY_MS_MAX)
        for j, d in enumerate(one_way_ms):
            self._delay_ms[j] = 0.0 if j == self.me else float(d)
        self._update_active()

    def set_profile(self, profile: DelayProfile, regions: Sequence[str] | None = None) -> None:
        """Swap in another profile's delays (same number of replicas)."""
        self.set_delays_ms(profile_row_ms(self.me, profile, regions))

    def set_settings(self, settings: EmulatorSettings) -> None:
        """Swap jitter, bandwidth and loss settings; queues and order carry over."""
        self._settings = settings
        self._update_active()

    # -- counters -----------------------------------------------------------

    def counters(self) -> dict[int, LinkCounters]:
        """A copy of each peer link's counters, by destination replica."""
        return {j: LinkCounters(**asdict(c)) for j, c in self._counters.items() if j != self.me}

    def to_json(self) -> dict[str, Any]:
        """Settings, link state and counters as plain JSON-able data (string keys)."""
        s = self._settings
        return {
            "me": self.me,
            "active": self._active,
            "settings": {
                "jitter_ms": s.jitter_ms,
                "jitter_distribution": s.jitter_distribution,
                "bandwidth_bytes_per_s": s.bandwidth_bytes_per_s,
                "loss_pct": s.loss_pct,
                "rto_ms": s.rto_ms,
            },
            "links": {
                str(j): {
                    "delay_ms": self._delay_ms[j],
                    "blocked": j in self._blocked,
                    **asdict(c),
                }
                for j, c in self.counters().items()
            },
        }

    # -- internals ----------------------------------------------------------

    def _check_peer(self, dst: int) -> None:
        if isinstance(dst, bool) or not isinstance(dst, int) or dst not in self._delay_ms:
            raise ValueError(f"dst must be a replica id ({self._peers_text()}), got {dst!r}")
        if dst == self.me:
            raise ValueError(f"dst {dst} is this replica; it has no link to itself")

    def _update_active(self) -> None:
        self._active = (
            not self._settings.identity
            or bool(self._blocked)
            or any(d > 0.0 for j, d in self._delay_ms.items() if j != self.me)
        )

    def _peers_text(self) -> str:
        ids = sorted(self._delay_ms)
        if ids == list(range(len(ids))):
            return f"0..{len(ids) - 1}"
        return ", ".join(map(str, ids))
