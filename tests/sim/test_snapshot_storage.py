"""Truncated storage restarts like the untruncated one (``docs/recovery.md`` 16.5).

After a fault run with compaction on, each replica's storage holds its newest
snapshot and the records it did not cover. A replica rebuilt from those must
hold, above the snapshot, exactly what a replica rebuilt from *every* record it
ever wrote holds: the same O-values at the same ballots, the same C-instance
promises and values, the same highest accepted index per owner, the same views;
and its next own C-instance index must be at least as high (never reused).
"""

import random

import pytest

from sdpaxos.core.replica import Replica
from sdpaxos.core.storage import Record
from sdpaxos.core.types import ReplicaId
from sdpaxos.sim.faults import ALL_FAULTS
from sdpaxos.sim.statemachine import DigestRegister
from sdpaxos.sim.sweep import SimCluster, run_faulty


def _durable(rep: Replica, above: int, floor: tuple[int, ...]) -> dict[str, object]:
    """What the durable records put above slot ``above`` and C-instances ``floor``."""
    s = rep.ctx
    olog = s.olog
    o_values = {
        slot: (olog.ballot[slot - olog.base], olog.value(slot))
        for slot in range(max(above, olog.base), len(olog))
        if olog.ballot[slot - olog.base] >= 0
    }
    c_values = {
        (owner, index): (inst.promised, inst.ballot, inst.commands)
        for owner, log in enumerate(s.clog.logs)
        for index, inst in log.items()
        if index >= floor[owner] and (inst.promised >= 0 or inst.ballot >= 0)
    }
    v = s.views
    return {
        "o": o_values,
        "c": c_values,
        "c_max": list(s.clog.c_max),
        "views": (v.view, v.est_view, v.est_seq, v.est_base),
    }


@pytest.mark.parametrize(("seed", "replicas"), [(11, 3), (12, 3), (13, 5), (14, 5), (15, 7)])
def test_a_restart_from_snapshot_and_kept_records_equals_one_from_every_record(
    seed: int, replicas: int
) -> None:
    written: list[list[Record]] = [[] for _ in range(replicas)]
    clusters: list[SimCluster] = []

    def hook(cluster: SimCluster) -> None:
        clusters.append(cluster)
        cluster.persist_listeners.append(lambda r, records: written[r].extend(records))

    run = run_faulty(seed, replicas, ALL_FAULTS, snapshot_slots=3, cluster_hook=hook)
    assert run.ok, run.verdict
    cluster = clusters[0]
    compared = 0
    for r in range(replicas):
        storage = cluster.storages[r]
        snapshot = storage.load_snapshot()
        if snapshot is None:
            continue
        assert len(storage.load()) < len(written[r])  # truncation forgot something
        config = cluster.config
        kept = Replica(
            config,
            ReplicaId(r),
            DigestRegister(),
            rng=random.Random(0),
            records=storage.load(),
            snapshot=snapshot,
        )
        full = Replica(
            config, ReplicaId(r), DigestRegister(), rng=random.Random(0), records=written[r]
        )
        assert kept.executed_upto == snapshot.slot
        above = (snapshot.slot, snapshot.executed)
        assert _durable(kept, *above) == _durable(full, *above)
        assert kept.command_leader.next_index >= full.command_leader.next_index
        compared += 1
    assert compared >= 2
