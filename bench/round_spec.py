"""What one run of the round driver (:mod:`bench.rounds`) is: its spec and its constants.

A module of its own so that the driver's parts (the loop in :mod:`bench.rounds`,
the clients and links in :mod:`bench.round_outlet`, the result in
:mod:`bench.round_result`) share it without importing one another in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.workloads import Workload
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.types import ReplicaId
from sdpaxos.profiles import uniform

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


@dataclass(frozen=True, slots=True)
class RoundSpec:
    """One round-based run; see :mod:`bench.rounds`."""

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
    #: Logical time per round. 0: time stands still while the cluster is busy
    #: (no heartbeat, no timeout: the core micro-benchmark's clock).
    round_ms: float = 1.0
    #: A quiet round (nothing stepped, sent or answered) moves the clock one
    #: ``tick_ms``, so that a run whose clock stands still cannot wait forever
    #: for a timeout.
    quiet_ticks: bool = False
    #: ``(replica, every)``: that replica takes a turn only every ``every``-th round.
    slow: tuple[int, int] | None = None
    #: The NIC model's bandwidth per replica, each way (it does not change the run).
    nic_mbps: float = NIC_MBPS_DEFAULT
    config_overrides: dict[str, Any] = field(default_factory=dict)
    #: True: the key-value workload (:class:`~bench.workloads.OpStream`, reads
    #: included) on ``BenchLog(store=True)``, every client byte counted and every
    #: executed order kept for the check. False: the core micro-benchmark's
    #: load: writes of a 12-byte ``(client, seq)`` payload with no key, on
    #: ``BenchLog()`` (digests only: memory stays flat over millions of
    #: commands), nothing the driver need not do per command.
    kv: bool = True
    #: Issue exactly ``warmup + commands`` operations (a fixed amount of work),
    #: not a steady load whose window closes while more are in flight.
    exact: bool = False
    #: Where records go: "counting" (counted, kept nowhere) or "memory"
    #: (``MemoryStorage``: kept, and truncated behind each snapshot).
    storage: str = "counting"

    def workload(self) -> Workload:
        return Workload(
            conflict_pct=self.conflict_pct,
            read_pct=self.read_pct,
            payload_bytes=self.payload_bytes,
            seed=self.seed,
            read_written=self.read_written,
        )

    def cluster_config(self) -> ClusterConfig:
        """The cluster the experiments run: the leader sequences, a LAN's round
        trips for thrifty quorums, three heartbeats per lease."""
        n = self.replicas
        return ClusterConfig(
            replicas=n,
            sequencer=ReplicaId(self.leader),
            rtt_ms=uniform(n, LAN_RTT_MS).replica_rtt_ms(),
            propose_queue_max=max(100_000, self.sessions * n * 2),
            **lease_overrides(self.config_overrides),
        )
