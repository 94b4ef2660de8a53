"""Seed sweeps: many small faulty runs, each reproducible from its printed seed.

The fast sweep runs in CI; the long one (``-m slow``) adds 7 replicas, more
commands and harsher faults. A failing seed is replayed with
``python -m sdpaxos.sim --seed N ...`` (the options are in the failure message)
and pinned here as a regression test.
"""

import random

import pytest

from sdpaxos.sim import PAPER3, PAPER5, NetworkConfig, run_closed_loop
from sdpaxos.sim.profiles import DelayProfile, uniform


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


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 160))
def test_long_sweep(seed: int) -> None:
    sweep_case(seed, [PAPER3, PAPER5, uniform(7, 50.0)], commands=30)
