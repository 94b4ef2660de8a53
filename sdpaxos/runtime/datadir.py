"""A node's data directory: its durable log, and whose log it is.

**Why a directory remembers whose it is.** A replica's log holds its promises
and acceptances (ballots, accepted C- and O-instances). A node restarted on
an *empty* directory has forgotten them: it would vote again in a view it
already voted in, and accept a value in an instance where it already accepted
another, so a majority could be formed twice and two values chosen for one
instance. Its safe way back is a new id (``admin replace-replica OLD NEW``,
``docs/membership.md``), so a node of the file's list
refuses to start on an empty directory unless it is told it is
**bootstrapping** a new cluster (``python -m sdpaxos node --bootstrap``,
``kvstore serve --bootstrap``, ``Node(..., bootstrap=True)``), as etcd's
``--initial-cluster-state new``. Once the directory holds anything, the flag
is ignored, as etcd ignores it once its data directory exists.

**The identity file.** At bootstrap, before any record, the directory gets
:data:`IDENTITY_FILE`, written atomically (a temporary file, fsync, rename,
directory fsync)::

    {"format": 1, "cluster": "sdpaxos-cluster", "protocol": "sdpaxos", "node": 2,
     "replicas": [{"id": 0, "region": "CA"}, {"id": 1, "region": "OR"}, ...]}

``cluster`` is the cluster's name (``[cluster] name`` in the file, default
:data:`~sdpaxos.runtime.config.CLUSTER_NAME_DEFAULT`; etcd's
``initial-cluster-token``); ``replicas`` is the membership: N, and each
member's id and region. Addresses are not in it: a replica may move. A node
started under a file that disagrees with its directory (another protocol,
another cluster's name, another N or member, another node's directory)
refuses, naming both values: its records mean something only in the cluster
that wrote them. Peers compare the same identity at their hello
(:attr:`~sdpaxos.runtime.config.NodeConfig.cluster_identity`), so a file
that disagrees with the peers' is refused too, by them.

**Empty** means: no identity file, no log record and no snapshot. A
directory with records or a snapshot and no identity file was written by an
earlier version (which kept only the protocol's name, in :data:`PROTOCOL_FILE`):
it holds a replica's promises, so it is adopted, and its identity is written
from the configuration. An identity file replaces the protocol file.

**A changing membership** (``docs/membership.md`` section 7; a protocol with
``Capabilities.membership``): a node whose id is not in the config file's
list, started on an empty directory, is a **new node**. It starts, but as one
that votes and accepts nothing: its identity file says ``"new": true``, and it
waits to be added as a learner (``admin add-replica`` or ``replace-replica``).
An id of the file's list on an empty directory is still refused without
``--bootstrap``: that node took part from the start and lost its data, and ids
are never reused; it comes back under a new id through ``replace-replica``.
(An added node that lost its data starts as a new node, and the core says it
lost its data: it never votes.) The config file's replica list stays the
*initial* membership, which the identity records; the running membership is
in the log's snapshots.

Blocking I/O: the node calls :func:`open_data_dir` from its log thread.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, NoReturn

from sdpaxos.protocols import DEFAULT_PROTOCOL
from sdpaxos.runtime.config import NodeConfig
from sdpaxos.runtime.errors import NodeError
from sdpaxos.runtime.log import DurableLog
from sdpaxos.wire.records import RecordCodec

__all__ = [
    "IDENTITY_FILE",
    "IDENTITY_FORMAT",
    "PROTOCOL_FILE",
    "identity_of",
    "is_new_node",
    "open_data_dir",
    "read_identity",
]

logger = logging.getLogger(__name__)

#: The file in a data directory that says whose records it holds (JSON).
IDENTITY_FILE = "identity.json"
#: The identity file's format; a directory of a later format is refused.
IDENTITY_FORMAT = 1
#: Largest identity file read (a bigger one is not an identity file): an entry
#: per replica, and at most :data:`~sdpaxos.core.types.REPLICAS_MAX` of them.
IDENTITY_BYTES_MAX = 64 << 10
#: Before the identity file: the file naming the protocol whose records the
#: directory holds (read in directories of earlier versions, never written).
PROTOCOL_FILE = "protocol"
_WHY = (
    "a node that took part before and lost its data would have forgotten its promises "
    "and acceptances (two values could be chosen for one instance)"
)
_BOOTSTRAP_HINT = (
    "if this is a brand-new cluster, start its nodes with --bootstrap "
    "(Node(..., bootstrap=True)); a node that lost its data cannot rejoin safely yet"
)


def _refuse(message: str) -> NoReturn:
    """Raise :class:`~sdpaxos.runtime.errors.NodeError`: the node does not start."""
    raise NodeError(message)


def is_new_node(data_dir: Path) -> bool:
    """Was ``data_dir`` first opened by a node that was not bootstrapping (a
    node of a changing membership waiting to be added)? Such a node never joins
    epoch 0 as a member, whatever its storage holds (nothing, until added)."""
    found = read_identity(data_dir)
    return found is not None and found.get("new") is True


def identity_of(config: NodeConfig, *, new: bool = False) -> dict[str, Any]:
    """The identity a data directory of ``config``'s node records (``new``: a
    node that did not bootstrap, waiting to be added to a changing membership)."""
    extra = {"new": True} if new else {}
    return {
        **extra,
        "format": IDENTITY_FORMAT,
        "cluster": config.cluster_name,
        "protocol": config.protocol,
        "node": int(config.node_id),
        "replicas": [{"id": int(r.id), "region": r.region} for r in config.replicas],
    }


def read_identity(data_dir: Path) -> dict[str, Any] | None:
    """The identity recorded in ``data_dir`` (None without one); a file that is
    not one this version can read is refused (never guessed at)."""
    path = data_dir / IDENTITY_FILE
    try:
        with open(path, "rb") as f:
            data = f.read(IDENTITY_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    try:
        if len(data) > IDENTITY_BYTES_MAX:
            raise ValueError(f"larger than {IDENTITY_BYTES_MAX} bytes")
        raw = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        found = raw.get("format")
        if type(found) is not int or found < 1:
            raise ValueError(f"no format number (got {found!r})")
        if found > IDENTITY_FORMAT:
            _refuse(
                f"{path} is of format {found}, written by a later version; this version "
                f"reads format {IDENTITY_FORMAT}: run the later version"
            )
        replicas = raw.get("replicas")
        if not (
            isinstance(raw.get("cluster"), str)
            and isinstance(raw.get("protocol"), str)
            and type(raw.get("node")) is int
            and isinstance(replicas, list)
            and all(
                isinstance(r, dict)
                and type(r.get("id")) is int
                and isinstance(r.get("region"), str)
                for r in replicas
            )
        ):
            raise ValueError("a field is missing or of the wrong kind")
    except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        _refuse(f"{path} is damaged ({exc}); the directory's owner cannot be told: restore it")
    return raw


def _same_protocol(data_dir: Path, found: str, runs: str) -> None:
    """Another protocol would read the records as its own (Multi-Paxos and
    SDPaxos both write ``CAccepted``, meaning different things)."""
    if found != runs:
        _refuse(f"{data_dir} holds the log of protocol {found!r}; this node runs {runs!r}")


def _check(data_dir: Path, found: dict[str, Any], config: NodeConfig) -> None:
    """Refuse a directory whose identity disagrees with ``config``, naming both."""
    where = f"data directory {data_dir}"
    fix = "start it under its own cluster's file, or give this node its own data_dir"
    _same_protocol(data_dir, found["protocol"], config.protocol)
    if found["cluster"] != config.cluster_name:
        _refuse(
            f"{where} belongs to cluster {found['cluster']!r}, the file names cluster "
            f"{config.cluster_name!r} ([cluster] name): {fix}"
        )
    theirs = [(r["id"], r["region"]) for r in found["replicas"]]
    ours = [(int(r.id), r.region) for r in config.replicas]
    if len(theirs) != len(ours):
        _refuse(
            f"{where} is of a cluster of {len(theirs)} replicas, the file has {len(ours)}: "
            f"a replica's records mean nothing in another membership "
            f"(the file's list is the initial membership and never changes: change it with "
            f"admin add-replica, remove-replica, replace-replica); {fix}"
        )
    for (tid, tregion), (oid, oregion) in zip(theirs, ours, strict=True):
        if tid != oid or tregion != oregion:
            _refuse(
                f"{where} knows replica {tid} in region {tregion!r}, the file has replica "
                f"{oid} in region {oregion!r}: another membership; {fix}"
            )
    if found["node"] != config.node_id:
        _refuse(
            f"{where} is node {found['node']}'s, not node {config.node_id}'s: "
            f"each node must keep its own records; {fix}"
        )


def _write_identity(data_dir: Path, config: NodeConfig, fsync: bool, new: bool = False) -> None:
    """Write the identity file atomically: a temporary file made durable, then
    renamed over (a crash leaves the old state or the new, never half a file)."""
    tmp = data_dir / (IDENTITY_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump(identity_of(config, new=new), f, indent=1)
        f.write("\n")
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, data_dir / IDENTITY_FILE)
    # The protocol it named is in the identity now (a record-less directory's
    # file named whatever it was first started with: it is replaced, not kept).
    (data_dir / PROTOCOL_FILE).unlink(missing_ok=True)
    if fsync:
        fd = os.open(data_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def open_data_dir(
    config: NodeConfig,
    *,
    fsync: bool = True,
    records: RecordCodec | None = None,
    bootstrap: bool = False,
    joins: bool = False,
) -> DurableLog:
    """The durable log of ``config.data_dir``, once it is sure to be this node's.

    Refuses (:class:`~sdpaxos.runtime.errors.NodeError`, changing nothing) an
    empty directory unless ``bootstrap`` or ``joins`` (a changing membership:
    the node starts as a new node, :func:`is_new_node`), and a directory whose
    identity disagrees with ``config``; see the module docstring.
    """
    data_dir = config.data_dir
    replicas: int | None = None if joins else len(config.replicas)
    joins = joins and not config.initial_member
    if joins and not bootstrap and not data_dir.exists():
        data_dir.mkdir(parents=True)
    who = f"node {config.node_id}"
    if data_dir.exists() and not data_dir.is_dir():
        _refuse(f"its data directory {data_dir} is not a directory")
    found = read_identity(data_dir) if data_dir.is_dir() else None
    if found is not None:
        _check(data_dir, found, config)
        if bootstrap:
            logger.info("%s: --bootstrap ignored: %s already holds its data", who, data_dir)
        return DurableLog(data_dir, replicas, fsync=fsync, records=records)
    if not data_dir.is_dir() and not bootstrap:
        _refuse(
            f"refusing to start: its data directory {data_dir} does not exist, and "
            f"{_WHY}; {_BOOTSTRAP_HINT}"
        )
    try:
        legacy: str | None = (data_dir / PROTOCOL_FILE).read_text().strip()
    except FileNotFoundError:
        legacy = None
    log = DurableLog(data_dir, replicas, fsync=fsync, records=records)
    try:
        if log.load() or log.load_snapshot() is not None:
            # An earlier version's directory: its protocol is the file's, or SDPaxos's
            # (the only protocol before there was a choice).
            was = legacy if legacy is not None else DEFAULT_PROTOCOL
            _same_protocol(data_dir, was, config.protocol)
            _write_identity(data_dir, config, fsync)
            logger.warning(
                "%s: %s was written by an earlier version: adopted, identity written "
                "from the configuration (cluster %r, %d replicas)",
                who,
                data_dir,
                config.cluster_name,
                len(config.replicas),
            )
            return log
        if not bootstrap and joins:
            _write_identity(data_dir, config, fsync, new=True)
            logger.warning(
                "%s: %s is empty and this node is not bootstrapping: it starts as a new "
                "node, votes and accepts nothing, and waits to be added as a learner "
                "(admin add-replica %d, or replace-replica OLD %d)",
                who,
                data_dir,
                config.node_id,
                config.node_id,
            )
            return log
        if not bootstrap:
            _refuse(
                f"refusing to start on an empty data directory {data_dir}: {_WHY}; "
                f"{_BOOTSTRAP_HINT}"
            )
        _write_identity(data_dir, config, fsync)
    except BaseException:
        log.close()
        raise
    logger.info(
        "%s: bootstrapped %s (cluster %r, %d replicas, %s)",
        who,
        data_dir,
        config.cluster_name,
        len(config.replicas),
        config.protocol,
    )
    return log
