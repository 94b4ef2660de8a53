"""``--engine runtime``: a :class:`~bench.engines.RunSpec` on real node processes.

What runs, for one spec:

* **Nodes.** One ``python -m sdpaxos node`` process per region of the spec's
  profile, on loopback, TLS on (certificates made fresh), the protocol by name
  (``[cluster.protocol] name``), the sequencer / leader at ``spec.leader``, the
  profile's round trips as the thrifty quorums' starting point (``rtt_ms``), and
  ``spec.config_overrides`` (heartbeat, lease, ...). Wide-area profiles are
  emulated by the node's delay emulator (``[emulator]``: a built-in profile by
  name, any other as a JSON matrix); a LAN profile (every round trip between
  replicas under :data:`LAN_RTT_MS`) runs without the emulator. fsync is **off**
  by default, as in the paper's prototype (its log was never made durable, so
  neither its figures nor the formula contain a disk flush); ``fsync=True`` turns
  it on. The state machine is :class:`bench.runtime_app.BenchLog`.
* **Load.** One load-generator process per region with clients
  (:mod:`bench.runtime_loader`): its clients, closed or open loop, the spec's
  workload, one connection to the region's node. Latency is therefore the
  **client's**: from sending the request to reading its answer, the loopback
  hop, TLS and the client's own work included (the simulator measures at the
  replica). Every operation becomes an :class:`~bench.workloads.OpRecord`, in
  microseconds from the run's origin.
* **Faults.** ``spec.kill = (replica, at_ms)``: SIGKILL of that node's process.
  ``spec.slow = (replica, factor, at_ms)``: a SIGSTOP/SIGCONT duty cycle that
  leaves the node ``1 / factor`` of the wall clock
  (:class:`bench.runtime_procs.DutyCycle` says why this and not CPU hogs).
* **Measured beside the records** (``RunOutput.extra``): each node's and each
  loader's CPU seconds over the window (``/proc/<pid>/stat``, all threads), the
  machine's busy share and load average; each node's mean commit latency from
  its own histogram when ``metrics`` is on (the replica's view, as in the
  paper's formula); status samples every ``spec.sample_ms`` (who each node
  believes leads; view changes started); and the **verification**: after the
  load drains, every live node answers its ``BenchLog`` digests, which must be
  equal (same commands; same order where the protocol orders everything; the
  hot key's commands in one order for EPaxos).

A cluster is kept for the next spec when that one needs the same cluster (same
protocol, profile, leader, settings) and the last run had no fault: starting
five TLS node processes on two cores takes seconds. :meth:`RuntimeRunner.close`
(or leaving the ``with`` block, or the interpreter's exit) ends every process.

Where it lives: this module is the engine's facade (:class:`RuntimeEngine`,
:func:`run_spec`, :func:`describe_latency`) and still names the pieces other
modules import from it; the cluster side (what the runtime can run, the
:class:`~bench.runtime_cluster.LocalCluster`) is :mod:`bench.runtime_cluster`,
a run's orchestration, collection and verification (:class:`RuntimeRunner`) is
:mod:`bench.runtime_runner`.
"""

from __future__ import annotations

from typing import Any

from bench.engines import RunOutput, RunSpec
from bench.runtime_cluster import check, read_path
from bench.runtime_runner import Progress, RuntimeRunner, agree, believed_leaders

__all__ = [
    "Progress",
    "RuntimeEngine",
    "RuntimeRunner",
    "agree",
    "believed_leaders",
    "check",
    "describe_latency",
    "read_path",
    "run_spec",
]


def describe_latency() -> str:
    """The sentence every runtime table carries about what its latency is."""
    return (
        "Latency is the client's: from the load generator sending the request to"
        " reading its answer, so the loopback hop, TLS and the client's own work are"
        " included (the simulator and the paper's formula measure at the replica)."
    )


class RuntimeEngine:
    """The ``runtime`` engine: real ``python -m sdpaxos node`` processes on loopback,
    delayed by the emulator (:class:`bench.engines.Engine`'s other half beside the
    simulator's :class:`~bench.engines.SimEngine`).

    Any protocol, any spec the runtime can run (:func:`check` says what it
    cannot, as :class:`EngineUnsupported`): one node process per region, one
    load-generator process per region with clients, faults as signals (SIGKILL;
    a SIGSTOP/SIGCONT duty cycle for a slow node). ``fsync`` is off by default,
    as in the paper's prototype; ``metrics`` serves each node's ``/metrics`` so
    that runs report the node-side commit latency too. A cluster is reused by
    the next spec that fits it: :meth:`close` (or ``with``) ends every process.
    It lives here, not in :mod:`bench.engines`, so that the engines' shared
    types are imported one way only (this module imports them).
    """

    name = "runtime"
    #: fsync when the constructor is not told (``python -m bench --fsync`` sets it).
    fsync_default = False

    def __init__(self, fsync: bool | None = None, metrics: bool = False) -> None:
        fsync = self.fsync_default if fsync is None else fsync
        self._runner = RuntimeRunner(fsync=fsync, metrics=metrics)

    @property
    def fsync(self) -> bool:
        return self._runner.fsync

    @property
    def metrics(self) -> bool:
        return self._runner.metrics

    @metrics.setter
    def metrics(self, on: bool) -> None:
        if on != self._runner.metrics:
            self._runner.close()
            self._runner.metrics = on

    def check(self, spec: RunSpec) -> None:
        """Raise :class:`EngineUnsupported` unless this engine can run ``spec``."""
        check(spec)

    def run(self, spec: RunSpec, progress: Progress | None = None) -> RunOutput:
        return self._runner.run(spec, progress)

    def close(self) -> None:
        """End every node process this engine started."""
        self._runner.close()

    def __enter__(self) -> RuntimeEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_spec(spec: RunSpec, progress: Progress | None = None, **kw: Any) -> RunOutput:
    """One spec on a fresh cluster, ended afterwards (tests, one-off runs)."""
    runner = RuntimeRunner(**kw)
    try:
        return runner.run(spec, progress)
    finally:
        runner.close()
