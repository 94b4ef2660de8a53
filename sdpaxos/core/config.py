"""Cluster configuration: who the replicas are, and a named limit on every window.

Durations are in milliseconds (``*_ms``), measured on the time the driver passes
as ``now_ms`` to :meth:`Replica.tick`, :meth:`Replica.step` and
:meth:`Replica.read` (each of them requires it): the core never reads a clock
itself. Validation happens once, at construction, so a bad configuration is a
clear :class:`ConfigError` and never a protocol surprise.

The clock assumption, stated once: every replica's clock runs at a rate within
``clock_drift_ppm`` parts per million of real time (no synchronisation between
replicas is assumed, only bounded rate error). Leases are the only thing that
rests on it (``lease_hold_ms``).
"""

import math
from dataclasses import dataclass, field

from sdpaxos.core.errors import ConfigError
from sdpaxos.core.quorum import accept_quorum, majority
from sdpaxos.core.sessions import SESSIONS_MAX_DEFAULT
from sdpaxos.core.types import REPLICA_0, REPLICAS_MAX, ReplicaId

_DURATIONS_MS = (
    "retransmit_ms",
    "learn_ms",
    "heartbeat_ms",
    "lease_ms",
    "lease_drift_ms",
    "election_margin_ms",
    "election_jitter_ms",
    "successor_stagger_ms",
    "suspect_min_ms",
    "candidate_timeout_ms",
    "recover_ms",
    "straggler_window_ms",
    "straggler_min_interval_ms",
)
#: Largest ``snapshot_chunk_bytes``: half the wire codec's 16 MiB frame limit, so
#: a chunk with its message header always fits one frame.
SNAPSHOT_CHUNK_BYTES_MAX = 8 << 20
#: Most healthy windows the straggler reference keeps (``straggler_reference_windows``).
STRAGGLER_REFERENCE_WINDOWS_MAX = 64
_MAY_BE_ZERO = frozenset({"lease_drift_ms", "election_jitter_ms", "election_margin_ms"})


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Static configuration shared by every replica of one cluster.

    Attributes:
        replicas: number of replicas N; ids are ``0 .. N-1``. A cluster tolerates
            ``(N - 1) // 2`` crashed replicas; an even N (4, 6) tolerates no more
            than N - 1 would, and commits in 1.5 round trips
            (``docs/membership.md`` section 5): the sizes a cluster passes
            through while it changes membership one replica at a time.
        sequencer: the sequencer of view 0.
        thrifty: send accepts only to the nearest majority (paper section 4);
            otherwise to every peer.
        rtt_ms: optional configured proximity: ``rtt_ms[a][b]`` is the round trip
            between replicas ``a`` and ``b``. Measured round trips fed to
            :meth:`Replica.observe_rtt` take over once they arrive.
        c_batch_max: most client commands in one C-instance.
        o_batch_max: most C-instances of one replica ordered by one O-instance.
            With N = 5 a non-sequencer's O-instances always cover exactly one
            C-instance: the view change infers the untraceable replica's
            O-instances one C-instance per hole (paper Fig. 7), which only works
            if that is what they were.
        c_inflight_max: most C-instances a command leader has started but that are
            not yet ready. Beyond it proposals wait in the proposal queue.
        propose_queue_max: most proposals waiting for a C-instance; beyond it
            :meth:`Replica.propose` raises :class:`Overloaded`.
        o_accept_values_max: most O-instance values in one O-accept (a view's
            rebuilt range travels whole, bounded by ``c_index_window_max``).
        o_pending_max: most out-of-order O-accepts an acceptor keeps until the
            gap before them fills (the sequencer resends from the acknowledged
            prefix anyway).
        c_index_window_max: a C-accept more than this far beyond what a replica has
            executed of that owner is rejected as impossible.
        tick_ms: how often a driver should call ``tick(now_ms)`` (a hint for
            drivers; timers fire on the time passed in, whenever ``tick`` comes).
        retransmit_ms: how long a command leader waits for acknowledgements
            before resending C-accepts and C-requests.
        learn_ms: how long execution may stay blocked before the replica asks
            peers for the commits it is missing.
        learn_o_max: most committed O-instances sent in answer to one request.
        learn_c_max: most C-instances one LearnRequest asks for.
        heartbeat_ms: how often the sequencer sends a heartbeat (lease renewal).
            The paper's evaluation uses 500 ms.
        lease_ms: how long a replica that answered a heartbeat promises not to
            vote, for another replica or for itself (the sequencer lease, section
            3.5; 500 ms in the paper), measured on its own clock. At least
            ``heartbeat_ms``, so that a live sequencer's lease never lapses
            between heartbeats.
        lease_drift_ms: a fixed safety margin by which the sequencer shortens its
            view of the lease, on top of the clock-rate bound.
        clock_drift_ppm: the largest rate error of any replica's clock, in parts
            per million of real time. A replica that granted a lease waits
            ``lease_ms`` of its own time before it votes; the sequencer uses the
            lease for ``lease_hold_ms`` of its own time, counted from when it sent
            the heartbeat the grant answers, which is shorter by the worst case
            of both clocks' errors.
        election_margin_ms: after its lease lapsed without a heartbeat, how long
            a replica waits before suspecting the sequencer.
        election_jitter_ms: random extra wait (drawn from the injected rng), so
            that candidates rarely collide (paper appendix A).
        successor_stagger_ms: extra wait per rank after the old sequencer: the
            paper lets R_{n+1} take over for R_n by default; the others wait
            longer and take over only if it does not.
        suspect_rtts: a command leader waiting for the sequencer, and hearing
            nothing from it for this many round trips to it, runs for election
            early. Voters still wait for their leases, and a heartbeat cancels
            the candidacy, so a false alarm costs nothing.
        suspect_min_ms: lower bound of that early wait.
        candidate_timeout_ms: a candidate without a majority retries in a
            higher view after this long.
        recover_ms: execution blocked this long on a C-instance starts the
            recovery of that C-instance (Paxos phase 1, no-op if nothing found).
        recovery_batch_max: most C-instances recovered by one prepare.
        history_keys_max: most keys in the sequencer's history table; the
            oldest are forgotten (reads of them then wait a little longer).
        history_idle_ms: the sequencer keeps its history table only while reads
            come: a read starts it (answered with the whole log, i_G), and after
            this long without answering a read it drops it and stops recording
            the keys of writes (a dict update per written key, its largest cost
            beyond the other replicas'; the paper lets it deactivate the
            optimisation under load, section 3.5). ``None``: keep it always
            (a TOML file has no None: write a very large number).
        reads_pending_max: most reads a replica keeps waiting at once.
        reads_per_message_max: most reads one R-request batch (or its reply)
            carries; a replica that starts more in one turn sends several, and
            a batch from a peer with more is refused.
        straggler_window_ms: the window in which a non-sequencer judges how fast
            the sequencer orders its C-instances (paper section 4: 500 ms).
        straggler_ratio_pct: a window is a strike when the sequencer ordered
            fewer than this share of the requirement: what a sequencer as fast
            as the reference would have ordered (paper: 50%;
            :mod:`sdpaxos.core.straggler` says why this requirement).
        straggler_strikes: consecutive strikes before polling the others (paper: 3).
        straggler_need_min: windows with fewer own C-instances waiting at the
            start or started in them are not judged.
        straggler_reference_windows: the reference is the median pace and the
            median wait of this many healthy windows, the last ones.
        straggler_min_interval_ms: least time between two view changes started
            by straggler detection ("we also limit the frequency"): a replica
            that started or agreed to one neither polls nor agrees for this long.
        snapshot_slots_min: take a snapshot (and compact what it covers) once this
            many slots were executed since the last one; ``None``: only when the
            driver asks (:meth:`Replica.request_snapshot`). ``docs/recovery.md``
            section 16.
        snapshot_chunk_bytes: most snapshot bytes in one transfer message (keep it
            well below the wire codec's frame limit, 16 MiB).
        snapshot_bytes_max: largest snapshot a replica accepts from a peer; a
            transfer that claims more is refused.
        session_lifetime_slots: ``None`` (the default): client sessions never
            expire and a client may choose its own ``client_id`` (a command from
            an unknown one opens its session). A positive integer L: a client
            first registers (``Command(nonce, 0, b"")``, whose result is its
            session id, :mod:`sdpaxos.core.sessions`); after executing slot
            ``j`` every session whose last command is in a slot below ``j - L``
            expires, and a later command of it is answered "session expired"
            (``ReplyKind.SESSION_EXPIRED``) without being applied. Every replica
            must have the same value (the rule reads only the log).
        sessions_max: most live sessions when sessions expire
            (``session_lifetime_slots`` set): opening one more first expires the
            session with the oldest last slot (ties: the lowest id). Unused when
            sessions never expire.
    """

    replicas: int
    sequencer: ReplicaId = REPLICA_0
    thrifty: bool = True
    rtt_ms: tuple[tuple[float, ...], ...] | None = None
    c_batch_max: int = 256
    o_batch_max: int = 16
    c_inflight_max: int = 128
    propose_queue_max: int = 100_000
    o_accept_values_max: int = 4096
    o_pending_max: int = 64
    c_index_window_max: int = 1 << 20
    tick_ms: float = 10.0
    retransmit_ms: float = 300.0
    learn_ms: float = 300.0
    learn_o_max: int = 4096
    learn_c_max: int = 256
    heartbeat_ms: float = 500.0
    lease_ms: float = 500.0
    lease_drift_ms: float = 20.0
    clock_drift_ppm: int = 1000
    election_margin_ms: float = 10.0
    election_jitter_ms: float = 40.0
    successor_stagger_ms: float = 150.0
    suspect_rtts: int = 3
    suspect_min_ms: float = 30.0
    candidate_timeout_ms: float = 400.0
    recover_ms: float = 600.0
    recovery_batch_max: int = 64
    history_keys_max: int = 1 << 16
    history_idle_ms: float | None = 10_000.0
    reads_pending_max: int = 1 << 16
    reads_per_message_max: int = 4096
    straggler_window_ms: float = 500.0
    straggler_ratio_pct: int = 50
    straggler_strikes: int = 3
    straggler_need_min: int = 8
    straggler_reference_windows: int = 5
    straggler_min_interval_ms: float = 10_000.0
    snapshot_slots_min: int | None = None
    snapshot_chunk_bytes: int = 1 << 20
    snapshot_bytes_max: int = 1 << 30
    session_lifetime_slots: int | None = None
    sessions_max: int = SESSIONS_MAX_DEFAULT
    lease_hold_ms: float = field(init=False, repr=False, compare=False)
    _majority: int = field(init=False, repr=False, compare=False)
    _accept_quorum: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = self.replicas
        if type(n) is not int or n < 1:
            raise ConfigError(f"replicas must be a whole number >= 1, got {n!r}")
        if n > REPLICAS_MAX:
            raise ConfigError(f"at most {REPLICAS_MAX} replicas, got {n}")
        if type(self.sequencer) is not int or not 0 <= self.sequencer < n:
            raise ConfigError(f"sequencer {self.sequencer!r} is not a replica id in 0..{n - 1}")
        for name in (
            "c_batch_max",
            "o_batch_max",
            "c_inflight_max",
            "propose_queue_max",
            "o_accept_values_max",
            "o_pending_max",
            "c_index_window_max",
            "learn_o_max",
            "learn_c_max",
            "suspect_rtts",
            "recovery_batch_max",
            "history_keys_max",
            "reads_pending_max",
            "reads_per_message_max",
            "straggler_ratio_pct",
            "straggler_strikes",
            "straggler_need_min",
            "straggler_reference_windows",
            "clock_drift_ppm",
            "snapshot_chunk_bytes",
            "snapshot_bytes_max",
            "sessions_max",
        ):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.snapshot_slots_min is not None and (
            type(self.snapshot_slots_min) is not int or self.snapshot_slots_min < 1
        ):
            raise ConfigError(
                "snapshot_slots_min must be a positive integer or None,"
                f" got {self.snapshot_slots_min!r}"
            )
        if self.snapshot_chunk_bytes > SNAPSHOT_CHUNK_BYTES_MAX:
            raise ConfigError(
                f"snapshot_chunk_bytes must be at most {SNAPSHOT_CHUNK_BYTES_MAX} (below the frame"
                f" limit), got {self.snapshot_chunk_bytes}"
            )
        idle_ms = self.history_idle_ms
        if idle_ms is not None and (
            type(idle_ms) not in (int, float) or not math.isfinite(idle_ms) or not idle_ms > 0
        ):
            raise ConfigError(
                "history_idle_ms must be None (keep the history table always) or a number of"
                f" milliseconds > 0, got {idle_ms!r}"
            )
        lifetime = self.session_lifetime_slots
        if lifetime is not None and (type(lifetime) is not int or lifetime < 1):
            raise ConfigError(
                "session_lifetime_slots must be None (sessions never expire) or a positive"
                f" integer, got {lifetime!r}"
            )
        if not isinstance(self.tick_ms, (int, float)) or not self.tick_ms > 0:
            raise ConfigError(f"tick_ms must be > 0, got {self.tick_ms!r}")
        for name in _DURATIONS_MS:
            value = getattr(self, name)
            if type(value) not in (int, float) or not math.isfinite(value) or not value >= 0:
                raise ConfigError(f"{name} must be a number of milliseconds >= 0, got {value!r}")
            if value == 0 and name not in _MAY_BE_ZERO:
                raise ConfigError(f"{name} must be > 0")
        if self.lease_ms < self.heartbeat_ms:
            raise ConfigError(
                f"lease_ms ({self.lease_ms}) must be >= heartbeat_ms ({self.heartbeat_ms}),"
                " or a live sequencer's lease lapses between heartbeats"
            )
        if self.straggler_reference_windows > STRAGGLER_REFERENCE_WINDOWS_MAX:
            raise ConfigError(
                f"straggler_reference_windows must be at most {STRAGGLER_REFERENCE_WINDOWS_MAX},"
                f" got {self.straggler_reference_windows}"
            )
        if self.clock_drift_ppm >= 100_000:
            raise ConfigError(f"clock_drift_ppm must be below 100000, got {self.clock_drift_ppm}")
        rho = self.clock_drift_ppm / 1e6
        # Grantor: lease_ms of its time >= lease_ms / (1 + rho) real. Holder: must
        # stop before that, measured on a clock that may run slow by (1 - rho).
        hold_ms = self.lease_ms * (1 - rho) / (1 + rho) - self.lease_drift_ms
        if not hold_ms > 0:
            raise ConfigError(
                "lease_drift_ms and clock_drift_ppm leave no usable lease: shorten them or"
                " lengthen lease_ms"
            )
        object.__setattr__(self, "lease_hold_ms", hold_ms)
        if self.rtt_ms is not None:
            if len(self.rtt_ms) != n or any(len(row) != n for row in self.rtt_ms):
                raise ConfigError(f"rtt_ms must be an {n}x{n} matrix")
            if any(v < 0 for row in self.rtt_ms for v in row):
                raise ConfigError("rtt_ms entries must be >= 0")
        object.__setattr__(self, "_majority", majority(n))
        object.__setattr__(self, "_accept_quorum", accept_quorum(n))

    @property
    def majority(self) -> int:
        """Size of a majority quorum, F+1: a phase-1 quorum (votes, promises, leases)."""
        return self._majority

    @property
    def accept_quorum(self) -> int:
        """Size of a phase-2 quorum (acceptances that choose): ``quorum.accept_quorum``."""
        return self._accept_quorum
