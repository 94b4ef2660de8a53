"""Cluster configuration: who the replicas are, and a named limit on every window.

All durations are in ticks (``*_ticks``): the core has no clock, and the driver
decides how long a tick is. Validation happens once, at construction, so a bad
configuration is a clear :class:`ConfigError` and never a protocol surprise.
"""

from dataclasses import dataclass, field

from sdpaxos.core.errors import ConfigError
from sdpaxos.core.types import REPLICAS_MAX, ReplicaId


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Static configuration shared by every replica of one cluster.

    Attributes:
        replicas: number of replicas N; ids are ``0 .. N-1``. N must be odd (N = 2F+1).
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
        o_accept_values_max: most O-instance values in one O-accept.
        c_index_window_max: a C-accept more than this far beyond what a replica has
            executed of that owner is rejected as impossible.
        retransmit_ticks: how long a command leader waits for acknowledgements
            before resending C-accepts and C-requests.
        learn_ticks: how long execution may stay blocked before the replica asks
            peers for the commits it is missing.
        learn_o_max: most committed O-instances sent in answer to one request.
    """

    replicas: int
    sequencer: ReplicaId = 0
    thrifty: bool = True
    rtt_ms: tuple[tuple[float, ...], ...] | None = None
    c_batch_max: int = 256
    o_batch_max: int = 16
    c_inflight_max: int = 128
    propose_queue_max: int = 100_000
    o_accept_values_max: int = 4096
    c_index_window_max: int = 1 << 20
    retransmit_ticks: int = 30
    learn_ticks: int = 30
    learn_o_max: int = 4096
    _majority: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = self.replicas
        if not isinstance(n, int) or n < 1 or n % 2 == 0:
            raise ConfigError(f"replicas must be an odd number >= 1 (N = 2F+1), got {n!r}")
        if n > REPLICAS_MAX:
            raise ConfigError(f"at most {REPLICAS_MAX} replicas, got {n}")
        if not 0 <= self.sequencer < n:
            raise ConfigError(f"sequencer {self.sequencer} is not a replica id in 0..{n - 1}")
        for name in (
            "c_batch_max",
            "o_batch_max",
            "c_inflight_max",
            "propose_queue_max",
            "o_accept_values_max",
            "c_index_window_max",
            "retransmit_ticks",
            "learn_ticks",
            "learn_o_max",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.rtt_ms is not None:
            if len(self.rtt_ms) != n or any(len(row) != n for row in self.rtt_ms):
                raise ConfigError(f"rtt_ms must be an {n}x{n} matrix")
            if any(v < 0 for row in self.rtt_ms for v in row):
                raise ConfigError("rtt_ms entries must be >= 0")
        object.__setattr__(self, "_majority", n // 2 + 1)

    @property
    def majority(self) -> int:
        """Size of a majority quorum, F+1."""
        return self._majority
