"""The ``reconfig`` fault: membership changes on Member nodes under load, hit on purpose.

A short sweep (CI) asserts that every checker passes *and* that changes were
really made and interrupted; one aimed run per scenario asserts that the
scenario happened (the sequencer's node left, a crash or a partition hit a
change in flight, a removed node kept talking and was not heard) and that the
run still ended with every checker passing. The long sweep is marked ``slow``.
"""

from __future__ import annotations

import pytest

from sdpaxos.core.member import Role
from sdpaxos.sim.__main__ import main
from sdpaxos.sim.member_cluster import MemberCluster
from sdpaxos.sim.reconfig import Hit, ReconfigInjector, Shape
from sdpaxos.sim.reconfig_sweep import ReconfigRun, run_reconfig, sweep_reconfig

#: Seeds of the CI sweep (fixed: a run is a function of its seed).
CI_SEED = 4000
CI_RUNS = 8


def aimed(
    seed: int, replicas: int, shapes: tuple[Shape, ...], hits: tuple[Hit, ...], changes: int
) -> tuple[ReconfigRun, MemberCluster, ReconfigInjector]:
    box: dict[str, object] = {}

    def hook(cluster: MemberCluster, injector: ReconfigInjector) -> None:
        box["cluster"], box["injector"] = cluster, injector

    run = run_reconfig(
        seed,
        replicas,
        injector_args={"changes": changes, "shapes": shapes, "hits": hits},
        cluster_hook=hook,
    )
    cluster, injector = box["cluster"], box["injector"]
    assert isinstance(cluster, MemberCluster) and isinstance(injector, ReconfigInjector)
    assert run.ok, f"{run.verdict}\nreplay: {run.replay}"
    return run, cluster, injector


def test_a_short_reconfig_sweep_passes_every_checker_and_makes_changes() -> None:
    report = sweep_reconfig(CI_RUNS, seed=CI_SEED, replicas=[3, 5])
    assert report.ok, report.table()
    total = report.summary()["all"]
    assert total["changes_made"] >= CI_RUNS  # at least one per run on average
    assert total["changes_interrupted"] > 0
    assert all(run.epoch >= 1 and run.changes_made == run.epoch for run in report.runs)
    assert total["not_member"] > 0  # clients were sent away by removed nodes, and retried
    assert total["reads_ok"] > 0  # reads served (and judged fresh) across the changes
    assert total["from_outsiders"] > 0 and total["dropped"] > 0
    counts = total["counts"]
    names = ("hit-crash", "hit-partition", "hit-zombie")
    for name in (*names, "hit-crash-on-switch", "shape-remove-seq", "shape-replace-seq"):
        assert counts.get(name, 0) > 0, name
    assert "made" in report.table() and "interr" in report.table()


def test_the_sequencers_node_is_removed_and_another_orders() -> None:
    run, cluster, injector = aimed(1, 5, (Shape.REMOVE_SEQ,), (Hit.NONE,), changes=1)
    (change,) = injector.changes
    assert change.made and run.epoch == 1
    assert change.target not in run.members
    node = cluster.nodes[change.target]
    assert node is not None and node.role is Role.REMOVED
    sequencer = cluster.sequencer()
    assert sequencer is not None and sequencer != change.target
    assert cluster.nodes[sequencer] is not None


def test_a_crash_between_a_changes_execution_and_its_stop() -> None:
    run, cluster, injector = aimed(2, 3, tuple(Shape), (Hit.CRASH,), changes=2)
    assert run.counts.get("hit-crash", 0) == 2
    assert cluster.crashes >= 2 and cluster.restarts >= 2  # really down, and back
    for change in injector.changes:
        assert change.made and change.interrupted
        assert any("after it executed the change" in hit for hit in change.hits)
    assert run.epoch == 2 and run.changes_interrupted == 2


def test_the_sequencer_partitioned_right_after_it_allocated_the_stop() -> None:
    run, cluster, injector = aimed(1, 3, tuple(Shape), (Hit.PARTITION,), changes=2)
    assert run.counts.get("hit-partition", 0) == 2
    assert all(change.made and change.interrupted for change in injector.changes)
    assert cluster.stops_allocated  # the trigger: a sequencer's durable stop
    assert cluster.network.totals().cut > 0  # messages were really lost on the cut links
    assert run.epoch == 2


def test_a_node_crashed_as_it_starts_the_new_epoch() -> None:
    run, _, injector = aimed(1, 5, tuple(Shape), (Hit.SWITCH,), changes=2)
    assert run.counts.get("hit-crash-on-switch", 0) == 2
    assert all(change.made for change in injector.changes)


def test_a_removed_node_that_keeps_talking_is_dropped_and_learns_it_was_removed() -> None:
    run, cluster, injector = aimed(2, 5, (Shape.REMOVE, Shape.REPLACE), (Hit.ZOMBIE,), changes=1)
    (change,) = injector.changes
    zombie = change.target
    assert run.counts.get("hit-zombie") == 1 and change.made
    assert zombie not in run.members
    # It woke up a member of the old epoch and sent to the members, who dropped it.
    heard = cluster.from_outsider_by_src.get(zombie, 0)
    assert heard > 0
    assert cluster.dropped_total() >= heard
    node = cluster.nodes[zombie]
    assert node is not None and node.role is Role.REMOVED and node.epoch == run.epoch


def test_the_cli_runs_a_reconfig_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--sweep", "2", "--faults", "reconfig", "--replicas", "3", "--seed", "1", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "violations: none" in out and "made" in out and "interr" in out


def test_the_cli_refuses_a_reconfig_sweep_beyond_seven_members() -> None:
    with pytest.raises(SystemExit):
        main(["--sweep", "1", "--faults", "reconfig", "--replicas", "9", "--quiet"])


@pytest.mark.slow
def test_long_reconfig_sweep() -> None:
    """500 seeds at N = 3 and 5 (``python -m sdpaxos.sim --sweep 500 --faults
    reconfig --seed 20000``)."""
    report = sweep_reconfig(500, seed=20_000, replicas=[3, 5])
    assert report.ok, report.table()
    assert report.summary()["all"]["changes_made"] > 500


#: Seeds of the long sweep (500 from 20000) that break real-time order (a
#: linearizability violation): a node that installs the new epoch's base from a
#: peer proposes its unfinished commands again in the same batch, and crashes
#: right after; ``start_epoch`` had forgotten that batch's records, so the
#: restarted node gives the same C-instance (same ballot) to a new command,
#: which executes at the slot the sequencer had already given that C-instance,
#: ahead of a command that was READY before it was proposed. Replayed on the
#: explicit harness by ``test_records_of_the_batch_that_installs_an_epoch_base_stay_durable``;
#: each passes with that test's trial fix.
PINNED_SEEDS = [
    *((20059, 5), (20087, 5), (20133, 5), (20285, 5), (20438, 3), (20462, 3)),
    # The CLI's default seeds (--sweep 200 --faults reconfig --seed 1): its six failures.
    *((5, 3), (10, 5), (77, 3), (126, 5), (168, 5), (181, 3)),
]


@pytest.mark.parametrize(("seed", "replicas"), PINNED_SEEDS)
def test_pinned_seeds(seed: int, replicas: int) -> None:
    run = run_reconfig(seed, replicas)
    assert run.ok, f"BUG ({run.kind}): {run.verdict.splitlines()[0]}\nreplay: {run.replay}"


@pytest.mark.parametrize(
    ("seed", "snapshot_slots"),
    # (11, 3): the same deadlock with compaction on (``--snapshot-slots 3``).
    [(20000, None), (11, 3)],
)
def test_pinned_seed_stop_executed_only_by_the_leaving_node(
    seed: int, snapshot_slots: int | None
) -> None:
    """Long-sweep seed 20000 (N = 3), a liveness failure. Epoch 2 is [4, 1, 3],
    sequencer 4; ``REPLACE 1 by 5`` executes; 4 is cut off right after it
    executed the change. 1 and 3 elect 1 (view 1), 1 allocates and commits the
    stop with 3, executes it and leaves (it is replaced): for epoch 2 it is a
    crashed replica for good. 3 has not executed the stop (it lacks 1's last
    C-instances and recovers them forever); once healed, 4 still leads view 0
    and ignores every higher V-request ("never vote ourselves out",
    ``Election.handle_v_request``) while 3 defers its vote for the sequencer it
    distrusted: 3 and 4, a majority, never elect again. The way out would be
    the new epoch's base, which only 1 holds, but a node without a replica
    answers no ``StatePull`` (``Member._answer_pull``) and 3 and 4 are told of
    epoch 3 only by 1. Passes with a trial fix in which a node without a
    replica serves its newest snapshot to a node of an older epoch."""
    run = run_reconfig(seed, 3, snapshot_slots=snapshot_slots)
    assert run.ok, f"BUG ({run.kind}): {run.verdict.splitlines()[0]}\nreplay: {run.replay}"
