"""Straggler detection end to end in the simulator: closed-loop clients, the
paper's straggler (a CPU three times slower, ``SimCluster.slow``), 3 replicas
on a LAN, every replica spending 300 us of CPU per message it handles (the
same dynamics as the bench's 100 us, a third of the events to simulate).

Closed-loop clients are the case the paper's count alone never catches (a
replica starts C-instances only as fast as they are ordered); the judgement is
unit-tested in ``tests/core/test_straggler.py``, the numbers are in
``python -m bench straggler`` (part 2).
"""

import random

from sdpaxos.core.messages import Heartbeat
from sdpaxos.profiles import uniform
from sdpaxos.sim import SeededChooser, SimCluster
from sdpaxos.sim.cluster import DROP
from sdpaxos.sim.workload import ClosedLoopClients

LAN3 = uniform(3, 0.2, local_rtt_ms=0.1, name="lan3")
PROCESSING_US = 300
SLOW_AT_US = 1_000_000


def run(
    slowed: int, until_us: int, clients: int = 3, **config: object
) -> tuple[SimCluster, list[tuple[int, int, str]]]:
    """Slow ``slowed`` three times at 1 s; run to ``until_us``; the straggler and
    view events as ``(time_us, replica, event)``."""
    cluster = SimCluster(
        LAN3,
        SeededChooser(random.Random(1)),
        traced=True,
        processing_us=PROCESSING_US,
        # Three heartbeats per lease, as the bench and the runtime.
        config_overrides={"heartbeat_ms": 500 / 3, **config},
    )
    events: list[tuple[int, int, str]] = []
    kept = {"StragglerSuspect", "StragglerViewChange", "StartViewChange", "BecomeSequencer"}

    def on_trace(replica: int, event: str, _fields: object) -> None:
        if event in kept:
            events.append((cluster.now_us, replica, event))

    cluster.trace_listeners.append(on_trace)
    ClosedLoopClients(cluster, 1_000_000, clients_per_region=clients).start()
    cluster.call_at(SLOW_AT_US, lambda: cluster.slow(slowed, 3.0), "slow")
    cluster.run_until(until_us)
    return cluster, events


def test_a_sequencer_slowed_to_a_third_is_detected_and_replaced() -> None:
    """Suspected within 2 s of the slowdown, a majority agrees, the poller starts
    the view change and wins it; nothing happened before the slowdown."""
    cluster, events = run(0, 3_500_000)
    assert all(t > SLOW_AT_US for t, _, _ in events), events
    names = [e for _, _, e in events]
    assert names[:2] == ["StragglerSuspect", "StragglerViewChange"], events
    suspect_us, poller, _ = events[0]
    assert suspect_us - SLOW_AT_US <= 2_000_000
    assert events[1][1] == poller
    won = [(t, r) for t, r, e in events if e == "BecomeSequencer"]
    assert won and won[0][1] != 0
    assert cluster.believed_sequencer() not in (0, None)


def test_a_slow_command_leader_moves_no_sequencer() -> None:
    """Replica 1 three times slower suspects the sequencer (its own backlog waits
    in its own queue), but replica 2 sees the sequencer serve it as before and
    says no, so the sequencer stays. Failure detection's early suspicion is off
    here (the slow replica's own queue makes the sequencer look silent to it,
    and each candidacy would restart its judgement): only straggler detection
    could move the sequencer."""
    cluster, events = run(1, 3_500_000, clients=10, suspect_min_ms=60_000.0)
    straggler = [(r, e) for _, r, e in events if e.startswith("Straggler")]
    assert straggler and set(straggler) == {(1, "StragglerSuspect")}, events
    assert cluster.core_counters()["view_changes_started"] == 0
    assert cluster.believed_sequencer() == 0


def test_the_slow_sequencer_does_not_win_back_the_view_change_that_deposes_it() -> None:
    """The runtime bench's straggler (sequencer R2 frozen 8.1 ms in every 9 ms,
    a tenth of the wall clock, as ``bench.runtime_procs.DutyCycle`` does) and the
    race it lost there: R2's heartbeats to R0 are lost from 2.2 s on, so R0's
    lease runs out ~350 ms before the poller R1's. R1 polls, R0 agrees and, its
    lease gone, promises R1's view 1 at once; R0's C-accepts of view 1 reach R2,
    which runs for view 2 (``from_future_view``) while R1 still waits for its own
    grant. Before the fix R0 (frozen: "no sequencer") and R1 (R2 asking for its
    own next view) both voted for R2, which won view 2 and stayed the slow
    sequencer. Now they refuse the sequencer they distrust
    (``Election.refuses``) and R1 wins."""
    cluster = SimCluster(
        LAN3,
        SeededChooser(random.Random(2)),
        traced=True,
        processing_us=100,
        sequencer=2,
        config_overrides={"heartbeat_ms": 500 / 3},
    )
    #: (time, replica, event, view, candidate)
    events: list[tuple[int, int, str, object, object]] = []
    kept = {"StragglerViewChange", "StartViewChange", "HandleVRequest", "BecomeSequencer"}

    def on_trace(replica: int, event: str, fields: dict[str, object]) -> None:
        if event in kept:
            view, candidate = fields.get("view"), fields.get("candidate")
            events.append((cluster.now_us, replica, event, view, candidate))

    def lose_heartbeats_to_r0(src: int, dst: int, message: object) -> int | None:
        late = 2_200_000 <= cluster.now_us < 3_200_000
        return DROP if late and (src, dst) == (2, 0) and isinstance(message, Heartbeat) else None

    period_us, run_us = 9_000, 900

    def duty_cycle(at_us: int) -> None:
        cluster.resume(2)
        cluster.call_at(at_us + run_us, lambda: cluster.pause(2), "pause")
        cluster.call_at(at_us + period_us, lambda: duty_cycle(at_us + period_us), "cycle")

    cluster.trace_listeners.append(on_trace)
    cluster.message_rules.append(lose_heartbeats_to_r0)
    ClosedLoopClients(cluster, 1_000_000, clients_per_region=3).start()
    cluster.call_at(SLOW_AT_US, lambda: duty_cycle(SLOW_AT_US), "cycle")
    cluster.run_until(3_500_000)
    # The race happened: R1 deposes R2 by straggler detection, R0 promises view
    # 1, and R2 runs for view 2 before anyone won.
    first_win = next(t for t, _, e, _, _ in events if e == "BecomeSequencer")
    assert (1, "StragglerViewChange") in [(r, e) for _, r, e, _, _ in events]
    votes = [(r, v, c) for _, r, e, v, c in events if e == "HandleVRequest"]
    assert votes[0] == (0, 1, 1), events
    assert any(t < first_win and r == 2 and e == "StartViewChange" for t, r, e, _, _ in events)
    # Nobody voted for R2, and R1 won.
    assert [(r, v) for r, v, c in votes if c == 2] == [], events
    assert [(r, v) for _, r, e, v, _ in events if e == "BecomeSequencer"] == [(1, 1)], events
    assert cluster.believed_sequencer() == 1
