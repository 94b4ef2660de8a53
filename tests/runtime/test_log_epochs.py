"""The durable log's epochs (``docs/membership.md`` section 4.3): ``start_epoch``
makes the base snapshot the newest and forgets every record, atomically. A
crash at any step leaves either the old epoch whole or the new one with no old
record; a restart loads the newest epoch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sdpaxos.core.membership import MembershipOp, NodeInfo, OpKind
from sdpaxos.core.storage import (
    CAccepted,
    OAccepted,
    Record,
    Snapshot,
    ViewPromised,
    covered_records,
)
from sdpaxos.core.types import Ballot, CIndex, Command, ReplicaId, Slot, View
from sdpaxos.runtime import log as log_module
from sdpaxos.runtime.log import DurableLog
from sdpaxos.sim.members import MemberNet

R0 = ReplicaId(0)


def _records(k: int) -> list[Record]:
    cmd = (Command(1, k + 1, b"payload-%d" % k),)
    return [
        ViewPromised(View(1)),
        CAccepted(R0, CIndex(k), Ballot(0), cmd),
        OAccepted(View(1), Slot(k), ((R0, 1),)),
    ]


#: A base snapshot of a 4-member epoch (the old one had 3).
BASE = Snapshot(Slot(0), (0, 0, 0, 0), (-1, -1, -1, -1), CIndex(0), (), b"base state")
OLD_SNAPSHOT = Snapshot(Slot(2), (1, 0, 0), (0, -1, -1), CIndex(1), (), b"old state")


def _old_epoch(directory: Path) -> DurableLog:
    log = DurableLog(directory, None, segment_bytes_max=100, fsync=False)
    log.append(_records(0))
    log.save_snapshot(OLD_SNAPSHOT)
    for k in range(1, 6):  # several segments
        log.append(_records(k))
    return log


def test_start_epoch_forgets_every_record_and_a_restart_loads_the_new_epoch(
    tmp_path: Path,
) -> None:
    log = _old_epoch(tmp_path)
    assert len(log.load()) > 0
    log.start_epoch(BASE)
    assert log.load() == []
    assert log.load_snapshot() == BASE
    log.append(_records(7))
    log.close()
    again = DurableLog(tmp_path, None, segment_bytes_max=100, fsync=False)
    assert again.load_snapshot() == BASE
    assert again.load() == _records(7)
    # A later snapshot of the new epoch, then another restart: still the new epoch.
    later = Snapshot(Slot(3), (1, 0, 0, 0), (0, -1, -1, -1), CIndex(1), (), b"later")
    again.save_snapshot(later)
    again.append(_records(8))
    again.close()
    third = DurableLog(tmp_path, None, segment_bytes_max=100, fsync=False)
    assert third.load_snapshot() == later
    assert third.load() == covered_records(_records(7), later) + _records(8)


def test_a_crash_before_the_commit_point_leaves_the_old_epoch_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _old_epoch(tmp_path)
    records_before = log.load()

    def crash(*args: object) -> None:
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(log_module.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        log.start_epoch(BASE)
    monkeypatch.undo()
    log.close()
    again = DurableLog(tmp_path, None, segment_bytes_max=100, fsync=False)
    assert again.load_snapshot() == OLD_SNAPSHOT
    assert again.load() == records_before


@pytest.mark.parametrize("unlinked_before_crash", [0, 1, 2])
def test_a_crash_after_the_commit_point_leaves_the_new_epoch_with_no_old_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unlinked_before_crash: int
) -> None:
    log = _old_epoch(tmp_path)
    assert len(list(tmp_path.glob("seg-*.log"))) >= 3
    real_unlink = Path.unlink
    count = [0]

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.name.startswith("seg-"):
            if count[0] >= unlinked_before_crash:
                raise OSError("simulated crash while removing old segments")
            count[0] += 1
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    with pytest.raises(OSError, match="simulated crash"):
        log.start_epoch(BASE)
    monkeypatch.undo()
    assert len(list(tmp_path.glob("seg-*.log"))) >= 2  # old segments are still there
    again = DurableLog(tmp_path, None, segment_bytes_max=100, fsync=False)
    assert again.load_snapshot() == BASE
    assert again.load() == []
    again.append(_records(9))
    again.close()
    assert DurableLog(tmp_path, None, fsync=False).load() == _records(9)


def test_a_sized_log_refuses_a_snapshot_of_another_size(tmp_path: Path) -> None:
    """With ``replicas`` given, a snapshot must match it (the fixed-size runtime's check)."""
    log = DurableLog(tmp_path, 4, fsync=False)
    log.start_epoch(BASE)
    log.close()
    assert DurableLog(tmp_path, 4, fsync=False).load_snapshot() == BASE
    with pytest.raises(log_module.LogCorrupted):
        DurableLog(tmp_path, 3, fsync=False)


def test_members_on_durable_logs_restart_in_the_new_epoch(tmp_path: Path) -> None:
    """The explicit harness of members with node 1's storage on disk: a replace
    ends epoch 0, node 1 starts epoch 1 on its log, crashes, and restarts from
    the log in epoch 1 with the state at the stop."""
    built = MemberNet.build(3)
    net = MemberNet(built.initial, built.protocol)
    net.storages[1] = DurableLog(tmp_path, None, fsync=False)  # type: ignore[assignment]
    for i in range(3):
        net._start(i, bootstrap=True)
    net.propose(0, 5, b"x=1")
    net.settle(300)
    net.add_node(3)
    assert net.change(0, MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(3), op_id=1))[0]
    assert net.change(0, MembershipOp(OpKind.REPLACE, target=2, node=NodeInfo(3), op_id=2))[0]
    net.settle()
    assert net.nodes[1].epoch == 1
    assert (tmp_path / "snapshot").exists()
    net.crash(1)
    net.storages[1].close()  # type: ignore[attr-defined]
    net.storages[1] = DurableLog(tmp_path, None, fsync=False)  # type: ignore[assignment]
    net.restart(1)
    assert net.nodes[1].epoch == 1
    assert net.nodes[1].membership.ids == (0, 1, 3)
    net.propose(0, 6, b"x=2")
    net.settle(500)
    assert net.machines[1].log == net.machines[0].log


def test_file_handles_are_not_leaked(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    log = _old_epoch(tmp_path)
    for _ in range(3):
        log.start_epoch(BASE)
        log.append(_records(1))
    log.close()
    assert len(os.listdir("/proc/self/fd")) == before
