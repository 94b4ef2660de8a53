"""The simulator reproduces the latency formulas of ``docs/protocol.md`` section 5.6.

Latency is measured at the command leader, from ``propose`` to READY, with no
jitter or faults, so every region's mean must sit within 2% of the analytic
value derived from the paper's Table 1 (paper section 3.2 gives the rules).
"""

import pytest

from sdpaxos.profiles import DelayProfile, uniform
from sdpaxos.sim import PAPER3, PAPER5, run_closed_loop

COMMANDS = 40


def mean_by_region(profile: DelayProfile, sequencer: str, **kwargs: object) -> dict[str, float]:
    result = run_closed_loop(
        profile,
        seed=1,
        sequencer=profile.index(sequencer),
        commands_per_region=COMMANDS,
        catch=False,
        **kwargs,  # type: ignore[arg-type]
    )
    assert result.ok, result.verdict
    assert all(s.count == COMMANDS for s in result.stats.values())
    return {profile.regions[r]: s.mean_ms for r, s in result.stats.items()}


def within_2_percent(measured: dict[str, float], expected: dict[str, float]) -> None:
    assert set(measured) == set(expected)
    for region, want in expected.items():
        assert measured[region] == pytest.approx(want, rel=0.02), (region, measured)


def test_paper5_sequencer_ca() -> None:
    within_2_percent(
        mean_by_region(PAPER5, "CA"),
        {"CA": 52, "OR": 68, "OH": 68, "IRE": 139, "SEL": 146},
    )


def test_paper3_sequencer_ca() -> None:
    within_2_percent(mean_by_region(PAPER3, "CA"), {"CA": 20, "OR": 20, "OH": 20 + 32})


def test_paper5_with_several_clients_per_region_and_a_short_tick() -> None:
    within_2_percent(
        mean_by_region(PAPER5, "CA", clients_per_region=3, tick_ms=1.0),
        {"CA": 52, "OR": 68, "OH": 68, "IRE": 139, "SEL": 146},
    )


def test_seven_replicas_pay_half_a_round_trip_more_off_the_sequencer() -> None:
    """N >= 7: O-instances need a real majority, so a non-sequencer takes 1.5 RTT."""
    profile = uniform(7, 100.0)
    measured = mean_by_region(profile, "R0")
    expected = {"R0": 100.0} | {f"R{i}": 150.0 for i in range(1, 7)}
    within_2_percent(measured, expected)


def test_measured_proximity_finds_the_same_quorums() -> None:
    result = run_closed_loop(
        PAPER5,
        seed=1,
        commands_per_region=COMMANDS,
        configured_proximity=False,
        measured_proximity=True,
        catch=False,
    )
    p50 = {PAPER5.regions[r]: s.p50_ms for r, s in result.stats.items()}
    assert p50 == {"CA": 52, "OR": 68, "OH": 68, "IRE": 139, "SEL": 146}
