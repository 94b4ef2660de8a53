"""The membership any-order fuzzer (``tests/core/member_fuzz.py``): a CI-sized
run, determinism, and the seeds it found failing, which pass since the fix of
the epoch-base batch (the batch that carries ``Ready.epoch_base`` goes alone,
the new epoch's replica's effects in the next ``ready()``); see
``tests/sim/test_member_regressions.py``,
``test_records_of_the_batch_that_installs_an_epoch_base_stay_durable``.
"""

from __future__ import annotations

import pytest

from tests.core.member_fuzz import MemberFuzz

CI_STEPS = 5000
#: Seeds that pass on the core as it is (N = 3 and N = 5).
CI_SEEDS = {3: (1, 2, 4, 5, 6, 7, 9, 10), 5: (1, 2, 3, 4, 5, 6, 7, 8)}
#: (n, seed): safety or liveness violations, all of them gone with the trial fix.
FAILING_SEEDS = [
    *((3, s) for s in (3, 8, 16, 20, 22, 28, 31, 33, 36, 40, 41, 45, 53)),
    *((5, s) for s in (9, 11, 32)),
]


@pytest.mark.parametrize(
    ("n", "seed"), [(n, s) for n, seeds in sorted(CI_SEEDS.items()) for s in seeds]
)
def test_ci_seed(n: int, seed: int) -> None:
    fuzz = MemberFuzz(n, seed, CI_STEPS)
    fuzz.run()
    assert fuzz.counts.get("commands-ready", 0) > 0


def test_the_ci_seeds_change_the_membership() -> None:
    """The run is not vacuous: changes are applied, epochs pass, nodes crash."""
    epochs, applied, crashes = [], 0, 0
    for seed in CI_SEEDS[3]:
        fuzz = MemberFuzz(3, seed, CI_STEPS)
        fuzz.run()
        epochs.append(fuzz.epochs())
        applied += fuzz.counts.get("changes-applied", 0)
        crashes += fuzz.counts.get("crashes", 0)
    assert max(epochs) >= 2 and sum(1 for e in epochs if e > 0) >= len(epochs) // 2
    assert applied >= len(epochs) and crashes > 0


def test_a_run_is_a_function_of_its_seed() -> None:
    a, b = MemberFuzz(3, 5, 2000), MemberFuzz(3, 5, 2000)
    a.run()
    b.run()
    assert a.trace == b.trace and a.counts == b.counts


@pytest.mark.parametrize(("n", "seed"), FAILING_SEEDS)
def test_failing_seed(n: int, seed: int) -> None:
    MemberFuzz(n, seed, CI_STEPS).run()
