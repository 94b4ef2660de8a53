"""Deterministic simulation of whole SDPaxos clusters in virtual time.

Single-threaded, no wall clock, no asyncio: one seeded
:class:`~sdpaxos.sim.chooser.Chooser` makes every decision, so a run is
reproduced exactly from its seed. Imports only :mod:`sdpaxos.core`,
:mod:`sdpaxos.wire` and the standard library.

Two smaller drivers live here too: :mod:`sdpaxos.sim.driver`, the in-memory
driver step every in-process cluster shares (a ``Ready`` batch carried out
records first, then messages, then answers), and :mod:`sdpaxos.sim.explicit`,
explicit delivery for protocol transcripts written message by message.

Membership changes run on :class:`~sdpaxos.core.member.Member` nodes instead
of bare replicas: :mod:`sdpaxos.sim.member_cluster` (the seeded cluster, node
ids, a node set that grows), :mod:`sdpaxos.sim.member_workload` (clients that
retry at members), :mod:`sdpaxos.sim.reconfig` (the ``reconfig`` fault) and
:mod:`sdpaxos.sim.reconfig_sweep` (``--sweep N --faults reconfig``);
:mod:`sdpaxos.sim.members` is their explicit-delivery harness.
"""

from sdpaxos.profiles import PAPER3, PAPER5, DelayProfile, ProfileError
from sdpaxos.sim.checkers import Checker, LivenessViolation, SafetyViolation
from sdpaxos.sim.chooser import BenignChooser, Chooser, SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.network import LinkStats, Network, NetworkConfig
from sdpaxos.sim.run import RunResult, run_closed_loop
from sdpaxos.sim.scheduler import Scheduler
from sdpaxos.sim.statemachine import DigestRegister
from sdpaxos.sim.workload import ClosedLoopClients, LatencyStats

__all__ = [
    "PAPER3",
    "PAPER5",
    "BenignChooser",
    "Checker",
    "Chooser",
    "ClosedLoopClients",
    "DelayProfile",
    "DigestRegister",
    "LatencyStats",
    "LinkStats",
    "LivenessViolation",
    "Network",
    "NetworkConfig",
    "ProfileError",
    "RunResult",
    "SafetyViolation",
    "Scheduler",
    "SeededChooser",
    "SimCluster",
    "run_closed_loop",
]
