"""A node's data directory: which protocol's records it holds, and its durable log.

Why a file beside the log: another protocol would read those records as its own
(Multi-Paxos and SDPaxos both write ``CAccepted``, meaning different things),
so a directory names its protocol in :data:`PROTOCOL_FILE`, written before the
first record, and a node of another protocol refuses it.
"""

from __future__ import annotations

import os
from pathlib import Path

from sdpaxos.protocols import DEFAULT_PROTOCOL
from sdpaxos.runtime.errors import NodeError
from sdpaxos.runtime.log import DurableLog
from sdpaxos.wire.records import RecordCodec

__all__ = ["PROTOCOL_FILE", "open_data_dir"]

#: The file in a data directory that names the protocol whose records it holds.
PROTOCOL_FILE = "protocol"


def open_data_dir(
    data_dir: Path, name: str, replicas: int, fsync: bool, records: RecordCodec | None
) -> DurableLog:
    """The durable log of ``data_dir``, once it is sure to hold protocol ``name``'s records.

    A directory with a log and no protocol file is :data:`DEFAULT_PROTOCOL`'s,
    from before there was a choice.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    marker = data_dir / PROTOCOL_FILE
    try:
        found: str | None = marker.read_text().strip()
    except FileNotFoundError:
        found = None
    if found is not None and found != name:
        raise NodeError(f"{data_dir} holds the log of protocol {found!r}; this node runs {name!r}")
    log = DurableLog(data_dir, replicas, fsync=fsync, records=records)
    if (
        found is None
        and name != DEFAULT_PROTOCOL
        and (log.load() or log.load_snapshot() is not None)
    ):
        log.close()
        raise NodeError(
            f"{data_dir} holds the log of protocol {DEFAULT_PROTOCOL!r}; this node runs {name!r}"
        )
    if not marker.exists():
        tmp = data_dir / (PROTOCOL_FILE + ".tmp")
        with open(tmp, "w") as f:
            f.write(name + "\n")
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, marker)
        if fsync:
            fd = os.open(data_dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return log
