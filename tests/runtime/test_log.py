"""The durable log: records survive reopening, a torn tail is cut, corruption
stops the node, and snapshots truncate crash-safely."""

from pathlib import Path

import pytest

from sdpaxos.core.storage import (
    CAccepted,
    CPromised,
    OAccepted,
    Record,
    Snapshot,
    ViewEstablished,
    ViewPromised,
    covered_records,
)
from sdpaxos.core.types import Ballot, CIndex, Command, ReplicaId, Slot, View
from sdpaxos.runtime.log import SNAPSHOT_FILE, DurableLog, LogCorrupted
from sdpaxos.sim.explicit import Net

R0, R1 = ReplicaId(0), ReplicaId(1)


def _records(k: int) -> list[Record]:
    cmd = (Command(1, k + 1, b"payload-%d" % k),)
    return [
        ViewPromised(View(1)),
        CAccepted(R0, CIndex(k), Ballot(0), cmd),
        OAccepted(View(1), Slot(k), ((R0, 1),)),
        CPromised(R1, CIndex(k), Ballot(257)),
    ]


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("seg-*.log"))


def test_records_survive_reopening_across_segments(tmp_path: Path) -> None:
    log = DurableLog(tmp_path, 3, segment_bytes_max=300)
    written: list[Record] = []
    for k in range(20):
        batch = _records(k)
        log.append(batch)
        written += batch
    log.close()
    assert len(_segments(tmp_path)) > 3  # rotated
    again = DurableLog(tmp_path, 3, segment_bytes_max=300)
    assert again.load() == written
    assert again.torn_bytes == 0
    again.append(_records(99))
    again.close()
    assert DurableLog(tmp_path, 3).load() == written + _records(99)


def test_a_torn_tail_is_cut_and_the_log_goes_on(tmp_path: Path) -> None:
    log = DurableLog(tmp_path, 3, segment_bytes_max=4096)
    log.append(_records(0))
    log.append(_records(1))
    pos = log._segment[2]  # type: ignore[index]
    log.close()
    segment = _segments(tmp_path)[-1]
    with open(segment, "r+b") as f:  # a crash mid-append: half a frame
        f.seek(pos)
        f.write(b"\x00\x00\x00\x40\x12\x34\x56\x78partial")
    again = DurableLog(tmp_path, 3, segment_bytes_max=4096)
    assert again.load() == _records(0) + _records(1)
    assert again.torn_bytes == 15
    again.append(_records(2))
    again.close()
    assert DurableLog(tmp_path, 3).load() == _records(0) + _records(1) + _records(2)


def test_corruption_before_the_tail_stops_the_node(tmp_path: Path) -> None:
    log = DurableLog(tmp_path, 3, segment_bytes_max=4096)
    for k in range(3):
        log.append(_records(k))
    log.close()
    segment = _segments(tmp_path)[-1]
    data = bytearray(segment.read_bytes())
    # A flipped bit inside a command's bytes still decodes: only the checksum sees it.
    data[data.index(b"payload-0") + 3] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(LogCorrupted, match="valid data follows"):
        DurableLog(tmp_path, 3)


def test_a_snapshot_truncates_what_it_covers_and_survives_reopening(tmp_path: Path) -> None:
    log = DurableLog(tmp_path, 3, segment_bytes_max=400)
    written: list[Record] = [ViewEstablished(View(1), R0, Slot(0), ((R0, 1),) * 6)]
    log.append(written)
    for k in range(6):
        log.append(_records(k))
        written += _records(k)
    before = _segments(tmp_path)
    snap = Snapshot(Slot(4), (4, 0, 0), (5, -1, -1), CIndex(6), (), b"state")
    log.save_snapshot(snap)
    assert log.load() == covered_records(written, snap)
    assert not set(before) & set(_segments(tmp_path))  # the old segments are gone
    assert not (tmp_path / "snapshot.tmp").exists()
    log.close()
    again = DurableLog(tmp_path, 3)
    assert again.load_snapshot() == snap
    assert again.load() == covered_records(written, snap)


def test_a_damaged_snapshot_stops_the_node_and_a_leftover_temporary_is_ignored(
    tmp_path: Path,
) -> None:
    log = DurableLog(tmp_path, 3)
    log.save_snapshot(Snapshot(Slot(2), (1, 0, 0), (0, -1, -1), CIndex(1), (), b"s"))
    log.close()
    (tmp_path / "snapshot.tmp").write_bytes(b"half a snapshot")
    assert DurableLog(tmp_path, 3).load_snapshot() is not None
    assert not (tmp_path / "snapshot.tmp").exists()
    path = tmp_path / SNAPSHOT_FILE
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(LogCorrupted, match="checksum"):
        DurableLog(tmp_path, 3)


def test_a_replica_restarts_from_the_durable_log_with_compaction(tmp_path: Path) -> None:
    """The explicit harness with replica 2's storage on disk: it compacts, crashes,
    restarts from a freshly opened log (snapshot + records) and catches up."""
    net = Net.build(3, sequencer=0, snapshot_slots_min=2, snapshot_chunk_bytes=64)
    net.storages[2] = DurableLog(tmp_path, 3, segment_bytes_max=2048)  # type: ignore[call-overload]
    for k in range(20):
        net.propose(1, client=k + 1, seq=1, payload=b"p%d" % k)
        net.run(3)
    net.run(120)
    assert net.storages[2].load_snapshot() is not None
    net.crash(2)
    net.storages[2].close()  # type: ignore[attr-defined]
    net.storages[2] = DurableLog(tmp_path, 3, segment_bytes_max=2048)  # type: ignore[call-overload]
    net.restart(2)
    net.propose(0, client=99, seq=1, payload=b"after")
    net.run(100)
    assert net.machines[2].log == net.machines[0].log
    assert net.machines[0].log[-1] == b"after" and len(net.machines[0].log) == 21
