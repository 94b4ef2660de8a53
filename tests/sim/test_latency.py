"""The simulator reproduces the latency formulas of ``docs/protocol.md`` section 5.6.

Latency is measured at the command leader, from ``propose`` to READY, with no
jitter or faults, so every region's mean must sit within 2% of the analytic
value derived from the paper's Table 1 (paper section 3.2 gives the rules).
"""

import random

import pytest

from sdpaxos.profiles import DelayProfile, ProfileError, sdpaxos_commit_ms, uniform
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


# -- the formula as a function of any matrix (sdpaxos.profiles.sdpaxos_commit_ms) --


def test_the_formula_function_gives_the_papers_numbers() -> None:
    assert sdpaxos_commit_ms(PAPER3, 0) == {"CA": 20, "OR": 20, "OH": 52}
    assert sdpaxos_commit_ms(PAPER5, 0) == {"CA": 52, "OR": 68, "OH": 68, "IRE": 139, "SEL": 146}


def _random_profile(n: int, seed: int, asymmetric: bool = False) -> DelayProfile:
    rng = random.Random(seed)
    rtt = [[0.0] * n for _ in range(n)]
    for i in range(n):
        rtt[i][i] = round(rng.uniform(0.1, 2.0), 2)
        for j in range(i + 1, n):
            rtt[i][j] = rtt[j][i] = float(rng.randrange(10, 250))
    one_way = None
    if asymmetric:  # each direction its own share of the round trip
        one_way = [[0.0] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                share = rng.uniform(0.2, 0.8)
                one_way[i][j] = round(rtt[i][j] * share, 3)
                one_way[j][i] = round(rtt[i][j] - one_way[i][j], 3)
    regions = [f"R{i}" for i in range(n)]
    return DelayProfile.from_lists(f"random{n}-{seed}", regions, rtt, one_way)


@pytest.mark.parametrize(
    ("n", "seed", "asymmetric"),
    [
        (3, 1, False),
        (3, 2, True),
        (4, 6, False),  # N = 4: phase-2 quorums of two, one round trip like N = 3
        (4, 7, True),
        (5, 3, False),
        (5, 4, True),
        (5, 5, False),
    ],
)
def test_the_simulator_matches_the_formula_on_random_matrices(
    n: int, seed: int, asymmetric: bool
) -> None:
    """Any deployment's matrix, the sequencer anywhere: what ``python -m bench
    latency --profile`` prints as the expectation is what the protocol does."""
    profile = _random_profile(n, seed, asymmetric)
    sequencer = seed % n
    measured = mean_by_region(profile, profile.regions[sequencer])
    within_2_percent(measured, sdpaxos_commit_ms(profile, sequencer))


def test_the_formula_function_refuses_what_it_cannot_answer() -> None:
    with pytest.raises(ProfileError, match="no latency formula for 7 replicas"):
        sdpaxos_commit_ms(uniform(7, 100.0), 0)
    with pytest.raises(ProfileError, match="sequencer 3 is not a replica"):
        sdpaxos_commit_ms(PAPER3, 3)
