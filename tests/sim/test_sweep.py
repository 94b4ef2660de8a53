"""Seed sweeps: many small faulty runs, each reproducible from its printed seed.

The fast sweep runs in CI; the long one (``-m slow``) adds 7 replicas, more
commands and harsher faults. A failing seed is replayed with
``python -m sdpaxos.sim --seed N ...`` (the options are in the failure message)
and pinned here as a regression test.
"""

import random

import pytest

from sdpaxos.profiles import DelayProfile, uniform
from sdpaxos.sim import PAPER3, PAPER5, NetworkConfig, run_closed_loop


def sweep_case(seed: int, profiles: list[DelayProfile], commands: int) -> None:
    rng = random.Random(seed)  # the case's shape; the run itself uses the seed too
    profile = rng.choice(profiles)
    network = NetworkConfig(
        jitter_ms_max=rng.choice([0.0, 10.0, 100.0]),
        fifo=rng.random() < 0.5,
        drop_probability=rng.choice([0.0, 0.05, 0.2]),
        duplicate_probability=rng.choice([0.0, 0.1]),
    )
    sequencer = rng.randrange(profile.size)
    clients = rng.choice([1, 3])
    tick_ms = rng.choice([1.0, 10.0])
    result = run_closed_loop(
        profile,
        seed=seed,
        sequencer=sequencer,
        commands_per_region=commands,
        clients_per_region=clients,
        network=network,
        tick_ms=tick_ms,
    )
    assert result.ok, (
        f"seed {seed}: {profile.name} sequencer {profile.regions[sequencer]}"
        f" clients {clients} tick_ms {tick_ms} {network}: {result.verdict}"
    )


@pytest.mark.parametrize("seed", range(12))
def test_fast_sweep(seed: int) -> None:
    sweep_case(seed, [PAPER3, PAPER5], commands=8)


@pytest.mark.parametrize(
    ("profile", "seed", "commands", "what"),
    [
        (uniform(5, 100.0), 3, 6, "O-instance 19 chosen twice: (2, 1) in view 1, no-cl in view 3"),
        (uniform(5, 100.0), 1, 6, "liveness: replica 0 never executes (5, 5), (5, 6)"),
        (uniform(7, 50.0), 0, 3, "IndexError in Replica._advance_safe_prefix (N=7)"),
    ],
)
def test_pinned_regressions(profile: DelayProfile, seed: int, commands: int, what: str) -> None:
    """Seeds that once failed on the core (safety, liveness, a crash), pinned.

    Replay: ``python -m sdpaxos.sim --profile uniform5 --drop 0.2 --commands 6 --seed 3``.
    """
    result = run_closed_loop(
        profile,
        seed=seed,
        commands_per_region=commands,
        network=NetworkConfig(drop_probability=0.2),
        drain_ms=20_000.0,
    )
    assert result.ok, f"{what}: {result.verdict}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 160))
def test_long_sweep(seed: int) -> None:
    sweep_case(seed, [PAPER3, PAPER5, uniform(7, 50.0)], commands=30)
