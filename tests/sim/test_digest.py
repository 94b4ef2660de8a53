"""The behaviour recorder: refactors of the core must leave every kept digest as it is.

``tests/sim/digests.json`` holds the digest of every run in
:data:`~sdpaxos.sim.digest.DIGEST_RUNS` (latency runs on paper3 and paper5, and
fault-sweep seeds with every fault at N = 3, 5 and 7). A change that alters
behaviour on purpose rewrites the file with ``python -m sdpaxos.sim.digest
--write tests/sim/digests.json`` and says in its commit which digests changed.
"""

import json
import random
from pathlib import Path

import pytest

from sdpaxos.profiles import PAPER3
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.cluster import DROP, SimCluster
from sdpaxos.sim.digest import DIGEST_RUNS, RunDigest, digest_of
from sdpaxos.sim.workload import ClosedLoopClients

KEPT = json.loads((Path(__file__).parent / "digests.json").read_text())


def test_every_run_has_a_kept_digest() -> None:
    assert sorted(KEPT) == sorted(run.name for run in DIGEST_RUNS)


@pytest.mark.parametrize("run", DIGEST_RUNS, ids=lambda r: r.name)
def test_digest_is_unchanged(run) -> None:
    digest, effects = digest_of(run)
    assert effects == KEPT[run.name]["effects"], f"{run.name}: a different number of effects"
    assert digest == KEPT[run.name]["sha256"], f"{run.name}: same count, different effects"


def _small_run(drop_nth: int | None) -> tuple[str, int]:
    cluster = SimCluster(PAPER3, SeededChooser(random.Random(7)))
    recorder = RunDigest(cluster)
    seen = [0]

    def rule(src: int, dst: int, message: object) -> int | None:
        seen[0] += 1
        return DROP if seen[0] == drop_nth else None

    cluster.message_rules.append(rule)
    clients = ClosedLoopClients(cluster, 5)
    clients.start()
    cluster.run_until(5_000_000)
    assert clients.done()
    return recorder.hexdigest(), recorder.effects


def test_the_digest_is_deterministic_and_sees_one_lost_message() -> None:
    first, effects = _small_run(None)
    assert effects > 100
    assert _small_run(None) == (first, effects)
    assert _small_run(20)[0] != first
