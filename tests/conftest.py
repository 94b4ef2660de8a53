"""Shared test settings: Hypothesis profiles and the seed fixture.

Profiles (select with ``HYPOTHESIS_PROFILE``; ``ci`` is the default):

* ``ci``: derandomized, so every run (local or CI) explores the same examples.
* ``dev``: derandomized too, more examples.
* ``nightly``: random and long, for bug hunting; pin anything it finds.
"""

import os
import shutil

import pytest
from hypothesis import HealthCheck, settings

from tests.tlc_background import BACKGROUND, tlc_configs

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
    """Tests marked ``slow`` (long sweeps) run only when selected with ``-m slow``.

    They are deselected, not skipped: a skip would read as "something could not
    run", while these are documented long runs outside the CI budget.
    """
    if "slow" in (config.getoption("-m") or ""):
        return
    slow = [item for item in items if "slow" in item.keywords]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if "slow" not in item.keywords]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the selected TLC configurations' runs in the background
    (``tests/tlc_background.py``: they overlap the Python tests), unless the
    session only collects or java is absent."""
    if session.config.option.collectonly or shutil.which("java") is None:
        return
    BACKGROUND.start(tlc_configs(session.items))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Nothing of the background TLC runs outlives the session."""
    BACKGROUND.close()
