"""A node's configuration: the cluster, this node, TLS, loaded from TOML and checked.

Every mistake is a :class:`~sdpaxos.core.errors.ConfigError` that names the key
(``cluster.replicas[2].address: ...``): an operator fixes a file, not a stack
trace. Unknown keys are errors too, because a misspelt option silently ignored
is a setting the operator believes in and does not have. A file looks like::

    [cluster]
    name = "prod-eu"            # optional (default "sdpaxos"): recorded in each data directory
    sequencer = 0
    replicas = [
        { id = 0, address = "10.0.0.1:7000", region = "CA" },
        { id = 1, address = "10.0.0.2:7000", region = "OR" },
        { id = 2, address = "10.0.0.3:7000", region = "OH" },
    ]

    [cluster.protocol]          # any ClusterConfig field, e.g.
    name = "sdpaxos"            # which protocol: sdpaxos (default), multipaxos, ...
    heartbeat_ms = 500
    snapshot_slots_min = 10000

    [node]
    id = 1                      # or given on the command line
    data_dir = "/var/lib/sdpaxos/node1"
    # address = "10.0.0.4:7000" # a node that is not in the replica list (one to
    # region = "CA"             # be added: membership change) says where it listens

The replica list is the *initial* membership (epoch 0). With a protocol that
can change its membership (``Capabilities.membership``), a node may have an
id that is not in it: it then needs ``[node] address`` (or ``--address`` on
the command line), starts on an empty data directory as a node waiting to be
added, and joins through ``admin add-replica`` or ``replace-replica``.

    [tls]
    ca = "certs/ca.pem"
    cert = "certs/node1.pem"
    key = "certs/node1.key"
    # insecure = true           # plaintext: only for a laboratory

    [emulator]                  # optional: emulate wide-area links
    profile = "paper5"          # or a JSON matrix file; replicas' regions pick rows
    jitter_ms = 2
    # bandwidth_bytes_per_s, loss_pct, rto_ms, jitter_distribution

Relative paths are relative to the file's directory, and ``{id}`` in a path
(``data_dir = "data/node{id}"``, ``cert = "certs/node{id}.pem"``) becomes the
node's id, so that one file serves every node of a cluster.

The protocol the nodes run is ``[cluster.protocol] name`` (one of
:data:`sdpaxos.protocols.PROTOCOL_NAMES`, default ``"sdpaxos"``); with no
other protocol setting, ``[cluster] protocol = "multipaxos"`` says the same.
Every node of a cluster must run the same one: a node refuses a peer's hello
that names another.

``[cluster] name`` (default :data:`CLUSTER_NAME_DEFAULT`) names the cluster, as
etcd's ``initial-cluster-token``: a data directory records the name, the
protocol and the membership it was bootstrapped with, and a node refuses to
start under a file that disagrees (:mod:`sdpaxos.runtime.datadir`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import random
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import ConfigError
from sdpaxos.core.membership import NODE_ID_MAX
from sdpaxos.core.types import ReplicaId
from sdpaxos.profiles import DelayProfile, ProfileError, builtin, load_json
from sdpaxos.protocols import DEFAULT_PROTOCOL, PROTOCOL_NAMES
from sdpaxos.protocols import protocol as protocol_of
from sdpaxos.runtime.emulator import EmulatorSettings, LinkEmulator, profile_row_ms

logger = logging.getLogger(__name__)

__all__ = [
    "CLUSTER_NAME_DEFAULT",
    "EmulatorConfig",
    "NodeConfig",
    "ReplicaAddress",
    "TlsFiles",
    "load_config",
    "parse_config",
    "read_toml",
]

_PROTOCOL_FIELDS = frozenset(
    f.name for f in dataclasses.fields(ClusterConfig) if f.init and f.name not in ("replicas",)
) - {"sequencer"}
_TOP_KEYS = frozenset({"cluster", "node", "tls", "emulator"})
_CORE_DEFAULTS = ClusterConfig(replicas=3)
#: Unless the file sets ``heartbeat_ms``, a node's sequencer renews its lease
#: three times per lease (the core's default, as in the paper's evaluation, is
#: once: 500 ms each). In a real process a heartbeat can be late by a garbage
#: collection or a busy CPU; with one heartbeat per lease, any late one lets the
#: leases lapse, and a loaded cluster changed views over and over for nothing.
HEARTBEATS_PER_LEASE = 3
_EMULATOR_KEYS = frozenset(
    {"profile", "jitter_ms", "jitter_distribution", "bandwidth_bytes_per_s", "loss_pct", "rto_ms"}
)
_CLUSTER_KEYS = frozenset({"name", "replicas", "sequencer", "protocol"})
#: A cluster's name unless ``[cluster] name`` says otherwise.
CLUSTER_NAME_DEFAULT = "sdpaxos-cluster"
#: Longest ``[cluster] name``.
CLUSTER_NAME_CHARS_MAX = 64
_CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_REPLICA_KEYS = frozenset({"id", "address", "region"})
_NODE_KEYS = frozenset({"id", "data_dir", "address", "region"})
_TLS_KEYS = frozenset({"ca", "cert", "key", "insecure"})


@dataclass(frozen=True, slots=True)
class ReplicaAddress:
    """Where replica ``id`` listens (``host:port``), and its region's name."""

    id: ReplicaId
    host: str
    port: int
    region: str


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The cluster CA and this node's certificate and key (mutual TLS)."""

    ca: Path
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """The delay emulator's settings (``[emulator]``): a profile whose regions the
    replicas' ``region`` names pick, and the link settings."""

    profile: DelayProfile
    settings: EmulatorSettings


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Everything one node needs: the cluster, who it is, where it keeps its log.

    ``tls`` is None only when the file says ``insecure = true``.
    """

    cluster: ClusterConfig
    replicas: tuple[ReplicaAddress, ...]
    node_id: ReplicaId
    data_dir: Path
    tls: TlsFiles | None
    emulator: EmulatorConfig | None = None
    #: The replication protocol's name (:func:`sdpaxos.protocols.protocol`).
    protocol: str = DEFAULT_PROTOCOL
    #: The cluster's name (``[cluster] name``), recorded in its data directories.
    cluster_name: str = CLUSTER_NAME_DEFAULT
    #: Where this node listens when it is not one of :attr:`replicas` (a node
    #: to be added to a changing membership: ``[node] address``).
    node_address: ReplicaAddress | None = None

    @property
    def me(self) -> ReplicaAddress:
        if self.node_address is not None:
            return self.node_address
        return self.replicas[self.node_id]

    @property
    def cluster_identity(self) -> str:
        """What a node's hello says of the cluster it belongs to: the cluster's
        name and a digest of what every node of it shares (the protocol and the
        initial membership, each replica's id and region), as
        ``"NAME/DIGEST"``.

        Why peers compare it: a node whose file names another cluster, or
        another initial membership (replicas added by editing the file, a
        file of another cluster), must never count in this cluster's quorums,
        and must say why instead of running elections nobody answers. The data
        directory's identity catches a file that disagrees with the node's own
        records; this catches one that disagrees with its peers'. Addresses
        are left out: a replica may move.
        """
        shared = [self.protocol, [[int(r.id), r.region] for r in self.replicas]]
        digest = hashlib.blake2b(
            json.dumps(shared, separators=(",", ":")).encode(), digest_size=6
        ).hexdigest()
        return f"{self.cluster_name}/{digest}"

    @property
    def initial_member(self) -> bool:
        """Is this node one of the config file's replicas (epoch 0's members)?"""
        return 0 <= self.node_id < len(self.replicas)


def read_toml(path: Path | str) -> dict[str, Any]:
    """The TOML document at ``path``, or a :class:`ConfigError` naming the file."""
    path = Path(path)
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


def load_config(
    path: Path | str,
    node_id: int | None = None,
    *,
    address: str | None = None,
    region: str | None = None,
) -> NodeConfig:
    """Read and check the TOML file at ``path``; ``node_id`` overrides ``[node]
    id``, ``address`` and ``region`` override ``[node] address`` and ``region``."""
    path = Path(path)
    return parse_config(
        read_toml(path),
        base_dir=path.parent,
        node_id=node_id,
        source=str(path),
        listen_at=address,
        region_of_node=region,
    )


def parse_config(
    raw: dict[str, Any],
    *,
    base_dir: Path | str = ".",
    node_id: int | None = None,
    source: str = "config",
    listen_at: str | None = None,
    region_of_node: str | None = None,
) -> NodeConfig:
    """Check a parsed TOML document (see the module docstring for its shape)."""
    base = Path(base_dir)

    def fail(key: str, why: str) -> ConfigError:
        return ConfigError(f"{source}: {key}: {why}")

    def table(value: object, key: str, allowed: frozenset[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise fail(key, f"expected a table, got {type(value).__name__}")
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise fail(f"{key}.{unknown[0]}" if key else unknown[0], "unknown key")
        return value

    top = table(raw, "", _TOP_KEYS)
    if "cluster" not in top:
        raise fail("cluster", "missing")
    cluster = table(top["cluster"], "cluster", _CLUSTER_KEYS)
    entries = cluster.get("replicas")
    if not isinstance(entries, list) or not entries:
        raise fail("cluster.replicas", "expected a non-empty array of tables")
    replicas: list[ReplicaAddress] = []
    for k, entry in enumerate(entries):
        key = f"cluster.replicas[{k}]"
        item = table(entry, key, _REPLICA_KEYS)
        rid = item.get("id", k)
        if type(rid) is not int or rid != k:
            raise fail(f"{key}.id", f"expected {k} (ids are 0 .. N-1, in order), got {rid!r}")
        address = item.get("address")
        if not isinstance(address, str):
            raise fail(f"{key}.address", "missing, or not a string")
        host, sep, port_text = address.rpartition(":")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise fail(f"{key}.address", f"expected host:port, got {address!r}")
        region = item.get("region", f"R{k}")
        if not isinstance(region, str):
            raise fail(f"{key}.region", "expected a string")
        replicas.append(ReplicaAddress(ReplicaId(k), host.strip("[]"), int(port_text), region))
    seen: dict[tuple[str, int], int] = {}
    for r in replicas:
        other = seen.setdefault((r.host, r.port), r.id)
        if other != r.id:
            raise fail(f"cluster.replicas[{r.id}].address", f"same as replica {other}'s")
    raw_protocol = cluster.get("protocol", {})
    if isinstance(raw_protocol, str):  # `protocol = "name"`: the name alone
        name_key, raw_protocol = "cluster.protocol", {"name": raw_protocol}
    else:
        name_key = "cluster.protocol.name"
    protocol = dict(table(raw_protocol, "cluster.protocol", _PROTOCOL_FIELDS | {"name"}))
    protocol_name = protocol.pop("name", DEFAULT_PROTOCOL)
    if protocol_name not in PROTOCOL_NAMES:
        raise fail(
            name_key,
            f"unknown protocol {protocol_name!r}; choose one of {', '.join(PROTOCOL_NAMES)}",
        )
    lease_ms = protocol.get("lease_ms", _CORE_DEFAULTS.lease_ms)
    usable = type(lease_ms) in (int, float) and math.isfinite(lease_ms) and lease_ms > 0
    if "heartbeat_ms" not in protocol and usable:
        # Derived only from a usable lease: of a bad one, the core's check names
        # lease_ms itself, not the heartbeat_ms the file never set.
        protocol = {**protocol, "heartbeat_ms": float(lease_ms) / HEARTBEATS_PER_LEASE}
    sequencer = cluster.get("sequencer", 0)
    if type(sequencer) is not int or not 0 <= sequencer < len(replicas):
        raise fail(
            "cluster.sequencer",
            f"expected a replica id in 0..{len(replicas) - 1}, got {sequencer!r}",
        )
    cluster_name = cluster.get("name", CLUSTER_NAME_DEFAULT)
    if (
        not isinstance(cluster_name, str)
        or len(cluster_name) > CLUSTER_NAME_CHARS_MAX
        or not _CLUSTER_NAME.fullmatch(cluster_name)
    ):
        raise fail(
            "cluster.name",
            f"expected up to {CLUSTER_NAME_CHARS_MAX} letters, digits, '.', '_' or '-' "
            f"(starting with a letter or digit), got {cluster_name!r}",
        )
    if len(replicas) % 2 == 0:
        # An even size tolerates no more crashes than one replica fewer, and
        # commits in 1.5 round trips: a cluster only passes through one while it
        # changes membership one replica at a time (docs/membership.md section 5).
        raise fail(
            "cluster",
            f"replicas must be an odd number to start a cluster (N = 2F+1), got {len(replicas)}",
        )
    try:
        cluster_config = ClusterConfig(
            replicas=len(replicas), sequencer=ReplicaId(sequencer), **protocol
        )
    except ConfigError as exc:
        raise fail("cluster", str(exc)) from None
    except TypeError as exc:  # a value of the wrong kind that the dataclass refused
        raise fail("cluster.protocol", str(exc)) from None

    node = table(top.get("node", {}), "node", _NODE_KEYS)
    me = node_id if node_id is not None else node.get("id")
    own_address = listen_at if listen_at is not None else node.get("address")
    node_address: ReplicaAddress | None = None
    changes = protocol_of(protocol_name).capabilities.membership
    if type(me) is int and changes and own_address is not None:
        # A node outside the initial list (or one that says where it listens).
        if not 0 <= me <= NODE_ID_MAX:
            raise fail("node.id", f"expected a node id in 0..{NODE_ID_MAX}, got {me!r}")
        if not isinstance(own_address, str):
            raise fail("node.address", "expected host:port")
        host, sep, port_text = own_address.rpartition(":")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise fail("node.address", f"expected host:port, got {own_address!r}")
        own_region = region_of_node if region_of_node is not None else node.get("region", f"R{me}")
        if not isinstance(own_region, str):
            raise fail("node.region", "expected a string")
        node_address = ReplicaAddress(ReplicaId(me), host.strip("[]"), int(port_text), own_region)
        if me < len(replicas):
            listed = replicas[me]
            if (listed.host, listed.port) != (node_address.host, node_address.port):
                raise fail(
                    "node.address",
                    f"node {me} is in the replica list at {listed.host}:{listed.port}",
                )
            node_address = None
        else:
            for r in replicas:
                if (r.host, r.port) == (node_address.host, node_address.port):
                    raise fail("node.address", f"same as replica {r.id}'s")
    elif type(me) is not int or not 0 <= me < len(replicas):
        hint = " (a node to be added needs [node] address or --address)" if changes else ""
        raise fail("node.id", f"expected a replica id in 0..{len(replicas) - 1}, got {me!r}{hint}")
    data_dir = node.get("data_dir", f"data/node{me}")
    if not isinstance(data_dir, str) or not data_dir:
        raise fail("node.data_dir", "expected a directory path")
    data_dir = data_dir.replace("{id}", str(me))

    tls_table = table(top.get("tls", {}), "tls", _TLS_KEYS)
    insecure = tls_table.get("insecure", False)
    if type(insecure) is not bool:
        raise fail("tls.insecure", f"expected true or false, got {insecure!r}")
    tls: TlsFiles | None = None
    if not insecure:
        files: dict[str, Path] = {}
        for name in ("ca", "cert", "key"):
            value = tls_table.get(name)
            if not isinstance(value, str):
                raise fail(
                    f"tls.{name}",
                    "missing: TLS is on by default (or set tls.insecure = true)",
                )
            file = base / value.replace("{id}", str(me))
            if not file.is_file():
                raise fail(f"tls.{name}", f"no such file: {file}")
            files[name] = file
        tls = TlsFiles(files["ca"], files["cert"], files["key"])
    emulator = None
    if "emulator" in top:
        emulator = _emulator(
            table(top["emulator"], "emulator", _EMULATOR_KEYS), replicas, base, fail
        )
    return NodeConfig(
        cluster_config,
        tuple(replicas),
        ReplicaId(me),
        base / data_dir,
        tls,
        emulator,
        protocol_name,
        cluster_name,
        node_address,
    )


def node_emulator(config: NodeConfig, rng: random.Random | None = None) -> LinkEmulator | None:
    """The delay emulator of ``config``'s node (None without ``[emulator]``).

    A node of the file's list gets the profile's delays to the others; a node
    outside it (one waiting to be added) gets them from its own region
    (``[node] region``), and both learn the links of nodes added later
    (:meth:`LinkEmulator.add_node`). A new node whose region the profile does
    not know gets links without delays (it still takes its peers' delayed
    frames), and says so.
    """
    emu = config.emulator
    if emu is None:
        return None
    regions = [r.region for r in config.replicas]
    if config.initial_member:
        return LinkEmulator.from_profile(config.node_id, emu.profile, regions, emu.settings, rng)
    region = config.me.region
    try:
        return LinkEmulator.for_new_node(
            config.node_id, region, emu.profile, regions, emu.settings, rng
        )
    except ValueError as exc:
        logger.warning("node %d: its links are not delayed (%s)", config.node_id, exc)
        row = dict.fromkeys(range(len(regions)), 0.0)
        return LinkEmulator(config.node_id, {**row, config.node_id: 0.0}, emu.settings, rng)


def _emulator(
    section: dict[str, Any],
    replicas: list[ReplicaAddress],
    base: Path,
    fail: Any,
) -> EmulatorConfig:
    name = section.get("profile")
    if not isinstance(name, str) or not name:
        raise fail("emulator.profile", "expected a built-in profile name or a JSON file")
    try:
        profile = load_json(base / name) if name.endswith(".json") else builtin(name)
    except ProfileError as exc:
        raise fail("emulator.profile", str(exc)) from None
    regions = [r.region for r in replicas]
    try:
        profile_row_ms(0, profile, regions)
    except (ProfileError, ValueError) as exc:
        raise fail("cluster.replicas", f"a region is not in profile {name!r}: {exc}") from None
    kwargs = {k: v for k, v in section.items() if k != "profile"}
    try:
        settings = EmulatorSettings(**kwargs)
    except (ValueError, TypeError) as exc:
        key = str(exc).split(" ", 1)[0].strip(":")
        raise fail(f"emulator.{key}" if key in _EMULATOR_KEYS else "emulator", str(exc)) from None
    return EmulatorConfig(profile, settings)
