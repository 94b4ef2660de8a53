"""Shared test settings: Hypothesis profiles and the seed fixture.

Profiles (select with ``HYPOTHESIS_PROFILE``; ``ci`` is the default):

* ``ci``: derandomized, so every run (local or CI) explores the same examples.
* ``dev``: derandomized too, more examples.
* ``nightly``: random and long, for bug hunting; pin anything it finds.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=20,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    derandomize=True,
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly",
    max_examples=1000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def seed() -> int:
    """A fixed seed (override with ``SDPAXOS_SEED``) so failures replay exactly."""
    return int(os.environ.get("SDPAXOS_SEED", "1"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run only when selected (``-m slow``), never in CI by default."""
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: select with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
