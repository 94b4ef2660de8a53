"""The durable log: the core's :class:`~sdpaxos.core.storage.Storage` on disk.

A directory holds numbered segment files (``seg-000000000001.log``, ...) and at
most one snapshot file (``snapshot``). A segment is a sequence of frames::

    length (4 bytes, big-endian, > 0) | CRC32C of the payload (4 bytes) | payload

where the payload is one record (:func:`sdpaxos.wire.records.encode_record`).
Segments are preallocated (zeros), so the first frame whose length is 0 ends
the log. Why each piece:

- **CRC32C per record**: a torn write or a flipped bit is detected, never replayed.
- **Torn tail**: a crash mid-append leaves a partial or corrupt frame at the end
  of the newest segment. :meth:`DurableLog.open` cuts it (and logs it). The
  records before it were acknowledged only after their ``fsync``; the cut ones
  never were.
- **Corruption before the tail** (a bad frame followed by a good one, or in an
  older segment) is not a crash artefact: :class:`LogCorrupted` stops the node
  rather than silently dropping acknowledged records.
- **One fsync per** :meth:`DurableLog.append` **call**: a driver that gathers the
  records of many ``Ready`` batches into one call gets group commit.
- **Snapshots** are written crash-safely: a temporary file, fsync, rename,
  directory fsync. Then the records the snapshot does not cover
  (:func:`~sdpaxos.core.storage.covered_records`) go to a fresh segment and the
  older segments are removed. A crash in between leaves old records next to the
  snapshot; a restart replays them harmlessly (below the snapshot they are
  skipped, above it they repeat what the kept copies say).
- **Epochs** (membership change, ``docs/membership.md`` section 4.3):
  :meth:`DurableLog.start_epoch` makes a base snapshot the newest and forgets
  every record. Its commit point is one rename: the snapshot file is written
  with a marker naming the first segment that belongs to it (:data:`_EPOCH_MAGIC`),
  and an open ignores (and removes) every segment below that mark. A crash
  before the rename leaves the old epoch whole; after it, the new one, with no
  old record, however far the removal of the old segments got.

Blocking I/O by design: the asyncio runtime calls it from a worker thread so
that the event loop never waits on the disk.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import crc32c

from sdpaxos.core.storage import (
    Record,
    Snapshot,
    covered_records,
    decode_snapshot,
    encode_snapshot,
    unpack_value,
)
from sdpaxos.wire.codec import CodecError
from sdpaxos.wire.records import RecordCodec, decode_record, encode_record

__all__ = ["SEGMENT_BYTES_MAX", "SNAPSHOT_FILE", "DurableLog", "LogCorrupted"]

logger = logging.getLogger(__name__)

#: A segment is rotated once it holds this many bytes.
SEGMENT_BYTES_MAX = 64 << 20
#: Largest single record frame accepted when reading (a length above it is corruption).
RECORD_BYTES_MAX = 16 << 20
SNAPSHOT_FILE = "snapshot"
_SNAPSHOT_TMP = "snapshot.tmp"
_HEADER = struct.Struct(">II")
_SEGMENT_PREFIX, _SEGMENT_SUFFIX = "seg-", ".log"
#: A snapshot file that starts with this is followed by the number of the first
#: segment that belongs to it (8 bytes, big-endian), then the framed snapshot.
_EPOCH_MAGIC = b"SDPEPOCH"
_FIRST = struct.Struct(">Q")


class LogCorrupted(Exception):
    """The log holds a damaged record that is not a torn tail: the node must stop."""


def _segment_name(number: int) -> str:
    return f"{_SEGMENT_PREFIX}{number:012d}{_SEGMENT_SUFFIX}"


def _frame(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


def _fdatasync(fd: int) -> None:
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DurableLog:
    """Segmented, checksummed, preallocated append-only log with snapshots."""

    def __init__(
        self,
        directory: Path | str,
        replicas: int | None,
        *,
        segment_bytes_max: int = SEGMENT_BYTES_MAX,
        fsync: bool = True,
        records: RecordCodec | None = None,
    ) -> None:
        """``records``: the codec of a protocol with records of its own
        (default: SDPaxos's, :func:`~sdpaxos.wire.records.encode_record`).
        ``replicas``: the cluster's size, which a snapshot must match; None when
        it changes between epochs (each snapshot then says its own)."""
        if segment_bytes_max < 1:
            raise ValueError(f"segment_bytes_max must be >= 1, got {segment_bytes_max}")
        self.directory = Path(directory)
        self.replicas = replicas
        self.segment_bytes_max = segment_bytes_max
        self.fsync = fsync
        self._encode_record = records.encode if records is not None else encode_record
        self._decode_record = records.decode if records is not None else decode_record
        self.directory.mkdir(parents=True, exist_ok=True)
        self._records: list[Record] = []
        self._snapshot: Snapshot | None = None
        #: (number, open file, write position) of the segment appended to.
        self._segment: tuple[int, int, int] | None = None
        #: Bytes cut from a torn tail at open (0 if none).
        self.torn_bytes = 0
        #: Bytes of records in the segments (what a snapshot would let go).
        self.log_bytes = 0
        #: Size of the snapshot file (0 without one).
        self.snapshot_bytes = 0
        #: The first segment of the newest epoch (0: no epoch started here).
        self._first_segment = 0
        self._open()

    # ---------------------------------------------------------------- reading

    def _segments(self) -> list[int]:
        numbers = []
        for path in self.directory.iterdir():
            name = path.name
            if name.startswith(_SEGMENT_PREFIX) and name.endswith(_SEGMENT_SUFFIX):
                middle = name[len(_SEGMENT_PREFIX) : -len(_SEGMENT_SUFFIX)]
                if middle.isdigit():
                    numbers.append(int(middle))
        return sorted(numbers)

    def _open(self) -> None:
        (self.directory / _SNAPSHOT_TMP).unlink(missing_ok=True)
        snap_path = self.directory / SNAPSHOT_FILE
        if snap_path.exists():
            self._snapshot = self._read_snapshot(snap_path)
            self.snapshot_bytes = snap_path.stat().st_size
        numbers = self._segments()
        first = self._first_segment
        if first:
            # Segments of an older epoch that a crash left behind its start.
            for number in [n for n in numbers if n < first]:
                (self.directory / _segment_name(number)).unlink()
            numbers = [n for n in numbers if n >= first]
        for k, number in enumerate(numbers):
            path = self.directory / _segment_name(number)
            records, end, torn = self._read_segment(path, last=k == len(numbers) - 1)
            self._records.extend(records)
            self.log_bytes += end
            if torn:
                self.torn_bytes = torn
                logger.warning("cut a torn tail of %d bytes at %s:%d", torn, path.name, end)
            if k == len(numbers) - 1:
                fd = os.open(path, os.O_RDWR)
                self._segment = (number, fd, end)

    def _read_snapshot(self, path: Path) -> Snapshot:
        data = path.read_bytes()
        if data.startswith(_EPOCH_MAGIC):
            if len(data) < len(_EPOCH_MAGIC) + _FIRST.size:
                raise LogCorrupted(f"{path} is too short to be a snapshot")
            (self._first_segment,) = _FIRST.unpack_from(data, len(_EPOCH_MAGIC))
            data = data[len(_EPOCH_MAGIC) + _FIRST.size :]
        if len(data) < _HEADER.size:
            raise LogCorrupted(f"{path} is too short to be a snapshot")
        size, crc = _HEADER.unpack_from(data)
        payload = data[_HEADER.size : _HEADER.size + size]
        if len(payload) != size or crc32c.crc32c(payload) != crc:
            raise LogCorrupted(f"{path} fails its checksum")
        try:
            replicas = self.replicas
            if replicas is None:
                value = unpack_value(payload)
                if not isinstance(value, tuple) or len(value) < 3:
                    raise ValueError("not a snapshot")
                executed = value[2]
                replicas = len(executed) if isinstance(executed, tuple) else -1
            return decode_snapshot(payload, replicas)
        except Exception as exc:
            raise LogCorrupted(f"{path} does not decode: {exc}") from exc

    def _read_segment(self, path: Path, *, last: bool) -> tuple[list[Record], int, int]:
        """The records of one segment, where its valid data ends, and how many
        bytes of torn tail were cut (only the newest segment may have one)."""
        data = path.read_bytes()
        #: Where the non-zero bytes end (the rest is preallocated, never written).
        used = len(data.rstrip(b"\0"))
        records: list[Record] = []
        pos = 0
        while pos + _HEADER.size <= len(data):
            size, crc = _HEADER.unpack_from(data, pos)
            if size == 0:
                break  # preallocated zeros: the end
            start = pos + _HEADER.size
            payload = data[start : start + size]
            bad: str | None = None
            if size > RECORD_BYTES_MAX or len(payload) != size:
                bad = "a record runs past the end"
            elif crc32c.crc32c(payload) != crc:
                bad = "a record fails its checksum"
            else:
                try:
                    records.append(self._decode_record(payload))
                except CodecError as exc:
                    bad = f"a record does not decode ({exc})"
            if bad is not None:
                if last and not self._valid_frame_after(data, pos + 1, used):
                    self._cut(path, pos, used)
                    return records, pos, used - pos
                raise LogCorrupted(f"{path}:{pos}: {bad}, and valid data follows")
            pos = start + size
        if pos < used:  # bytes after the last frame that are not preallocated zeros
            if not last:
                raise LogCorrupted(f"{path}:{pos}: bytes after the end of an older segment")
            self._cut(path, pos, used)
            return records, pos, used - pos
        return records, pos, 0

    @staticmethod
    def _valid_frame_after(data: bytes, start: int, used: int) -> bool:
        """Is there a checksummed frame anywhere in ``start .. used``? (Then a bad
        one before it is corruption, not a torn tail.)"""
        for pos in range(start, used - _HEADER.size):
            size, crc = _HEADER.unpack_from(data, pos)
            if 0 < size <= RECORD_BYTES_MAX and pos + _HEADER.size + size <= used:
                payload = data[pos + _HEADER.size : pos + _HEADER.size + size]
                if crc32c.crc32c(payload) == crc:
                    return True
        return False

    def _cut(self, path: Path, pos: int, end: int) -> None:
        """Zero the torn tail ``pos .. end`` so the next append starts at ``pos``."""
        with open(path, "r+b") as f:
            f.seek(pos)
            f.write(bytes(end - pos))
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    # ---------------------------------------------------------------- Storage

    def load(self) -> list[Record]:
        """Every record appended and not forgotten since, in order."""
        return list(self._records)

    def load_snapshot(self) -> Snapshot | None:
        return self._snapshot

    def append(self, records: list[Record]) -> int:
        """Make ``records`` durable (one fsync for all of them) before returning;
        returns the bytes written."""
        if not records:
            return 0
        data = b"".join(_frame(self._encode_record(r)) for r in records)
        if self._segment is None or self._segment[2] + len(data) > self.segment_bytes_max:
            self._rotate(len(data))
        assert self._segment is not None
        number, fd, pos = self._segment
        os.pwrite(fd, data, pos)
        if self.fsync:
            # The segment was preallocated: its size is already durable, so
            # the data alone needs flushing.
            _fdatasync(fd)
        self._segment = (number, fd, pos + len(data))
        self.log_bytes += len(data)
        self._records.extend(records)
        return len(data)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Write ``snapshot`` crash-safely, then keep only the records it does not cover."""
        if self._snapshot is not None and snapshot.slot <= self._snapshot.slot:
            return
        self._write_snapshot(snapshot, self._first_segment)
        kept = covered_records(self._records, snapshot)
        old = self._segments()
        self._rotate(0)
        self._records = []
        self.log_bytes = 0
        self.append(kept)
        for number in old:
            (self.directory / _segment_name(number)).unlink()
        if self.fsync:
            _fsync_dir(self.directory)

    def _write_snapshot(self, snapshot: Snapshot, first_segment: int) -> None:
        """Write the snapshot file crash-safely (a temporary file made durable,
        then renamed over), with the epoch's first segment when there is one."""
        data = _frame(encode_snapshot(snapshot))
        if first_segment:
            data = _EPOCH_MAGIC + _FIRST.pack(first_segment) + data
        tmp = self.directory / _SNAPSHOT_TMP
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, self.directory / SNAPSHOT_FILE)
        if self.fsync:
            _fsync_dir(self.directory)
        self._snapshot = snapshot
        self._first_segment = first_segment
        self.snapshot_bytes = len(data)

    def start_epoch(self, snapshot: Snapshot) -> None:
        """A new epoch: ``snapshot`` (its base) becomes the newest snapshot and
        every record is forgotten, atomically (the rename of the snapshot file,
        which names the epoch's first segment, is the commit point)."""
        old = self._segments()
        first = max([*old, self._segment[0] if self._segment is not None else 0]) + 1
        self._write_snapshot(snapshot, first)
        # Committed: from here a crash restarts in the new epoch, whatever of
        # the old segments is still on disk (an open removes them).
        if self._segment is not None and self._segment[1] >= 0:
            os.close(self._segment[1])
        self._segment = (first - 1, -1, 0)
        self._records = []
        self.log_bytes = 0
        self._rotate(0)
        for number in old:
            (self.directory / _segment_name(number)).unlink(missing_ok=True)
        if self.fsync:
            _fsync_dir(self.directory)

    def _rotate(self, first_bytes: int) -> None:
        """Start a new segment, preallocated, and make its name durable."""
        number = (self._segment[0] + 1) if self._segment is not None else 1
        if self._segment is not None and self._segment[1] >= 0:
            os.close(self._segment[1])
        path = self.directory / _segment_name(number)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        size = max(self.segment_bytes_max, first_bytes)
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        if self.fsync:
            _fsync_dir(self.directory)
        self._segment = (number, fd, 0)

    def close(self) -> None:
        if self._segment is not None and self._segment[1] >= 0:
            os.close(self._segment[1])
            self._segment = (self._segment[0], -1, self._segment[2])

    def __len__(self) -> int:
        return len(self._records)
