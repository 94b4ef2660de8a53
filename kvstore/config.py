"""A kv-store node's configuration: the runtime's cluster file plus a ``[kvstore]`` section.

One file serves every node of a cluster, as for ``python -m sdpaxos node``; the
kv-store adds where each node answers Redis clients, and how::

    [kvstore]
    redis = ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]   # by replica id
    tls = true                  # the Redis port speaks TLS, with the node's certificate
    users = { app = "s3cret" }  # AUTH required (ACL style: AUTH app s3cret)
    reads = "linearizable"      # or "stale": a new connection's default read mode
    clients_max = 10000         # Redis connections at once
    spares = [{ id = 3, address = "10.0.0.4:7000", redis = "10.0.0.4:6379", region = "eu" }]

``spares``: nodes that are not members when the cluster starts (``kvstore
local --spares K`` writes them): ``kvstore serve --id 3`` finds its peer
address, Redis address and region here, and waits to be added;
``kvstore admin add-replica 3`` takes the address and region from here.

Every other section is the runtime's (:mod:`sdpaxos.runtime.config`); a
mistake names the key, like the runtime's checks do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sdpaxos.core.errors import ConfigError
from sdpaxos.core.membership import NODE_ID_MAX
from sdpaxos.runtime.config import NodeConfig, parse_config, read_toml

__all__ = ["KVConfig", "Spare", "load_kv_config", "parse_kv_config"]

_KV_KEYS = frozenset({"redis", "tls", "users", "reads", "clients_max", "spares"})
_SPARE_KEYS = frozenset({"id", "address", "redis", "region"})
#: Redis connections a node serves at once, unless the file says otherwise.
CLIENTS_MAX_DEFAULT = 10_000


@dataclass(frozen=True, slots=True)
class Spare:
    """A node the file names that is no member at the start: where it listens."""

    id: int
    #: Its peer address (host, port), as ``add-replica --address`` takes it.
    address: tuple[str, int]
    #: Where it answers Redis clients.
    redis: tuple[str, int]
    region: str

    @property
    def peer_text(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"


@dataclass(frozen=True, slots=True)
class KVConfig:
    """The runtime's :class:`NodeConfig` and the kv-store's own settings."""

    node: NodeConfig
    #: Each replica's Redis address (host, port), by replica id.
    redis: tuple[tuple[str, int], ...]
    #: The Redis port requires TLS (with the node's certificate and cluster CA).
    tls: bool
    #: user -> password; when set, every connection must AUTH first.
    users: dict[str, str] | None
    #: The read mode of a new connection (READONLY / READWRITE switch it).
    reads: Literal["linearizable", "stale"]
    clients_max: int
    #: The nodes that are no members at the start, by id order.
    spares: tuple[Spare, ...] = ()

    @property
    def redis_address(self) -> tuple[str, int]:
        """This node's Redis address."""
        address = self.redis_of(self.node.node_id)
        if address is None:  # parse_kv_config refuses such a node
            raise ValueError(f"node {self.node.node_id} has no Redis address in the file")
        return address

    def spare(self, node_id: int) -> Spare | None:
        """The spare entry of ``node_id``, or None."""
        return next((s for s in self.spares if s.id == node_id), None)

    def redis_of(self, node_id: int) -> tuple[str, int] | None:
        """The Redis address of any node the file names (a replica or a spare)."""
        if 0 <= node_id < len(self.redis):
            return self.redis[node_id]
        spare = self.spare(node_id)
        return None if spare is None else spare.redis


def load_kv_config(path: Path | str, node_id: int | None = None) -> KVConfig:
    """Read and check the TOML file at ``path``; ``node_id`` overrides ``[node] id``."""
    path = Path(path)
    raw = read_toml(path)
    return parse_kv_config(raw, base_dir=path.parent, node_id=node_id, source=str(path))


def _address(text: object) -> tuple[str, int] | None:
    if not isinstance(text, str):
        return None
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return host.strip("[]"), int(port_text)


def _spares(section: dict[str, Any], fail: Any) -> list[Spare]:
    """``[kvstore] spares``, checked (not yet against the replicas)."""
    raw = section.get("spares", [])
    if not isinstance(raw, list):
        raise fail("spares", "expected an array of { id, address, redis, region } tables")
    spares: list[Spare] = []
    for k, entry in enumerate(raw):
        where = f"spares[{k}]"
        if not isinstance(entry, dict):
            raise fail(where, "expected a table { id, address, redis, region }")
        unknown = sorted(set(entry) - _SPARE_KEYS)
        if unknown:
            raise fail(f"{where}.{unknown[0]}", "unknown key")
        node_id = entry.get("id")
        if type(node_id) is not int or not 0 <= node_id <= NODE_ID_MAX:
            raise fail(f"{where}.id", f"expected a node id in 0..{NODE_ID_MAX}, got {node_id!r}")
        if any(s.id == node_id for s in spares):
            raise fail(f"{where}.id", f"node {node_id} is named twice")
        peer, redis = _address(entry.get("address")), _address(entry.get("redis"))
        if peer is None:
            raise fail(f"{where}.address", f"expected host:port, got {entry.get('address')!r}")
        if redis is None:
            raise fail(f"{where}.redis", f"expected host:port, got {entry.get('redis')!r}")
        region = entry.get("region", f"R{node_id}")
        if not isinstance(region, str) or not region:
            raise fail(f"{where}.region", "expected a region name")
        spares.append(Spare(node_id, peer, redis, region))
    return spares


def parse_kv_config(
    raw: dict[str, Any],
    *,
    base_dir: Path | str = ".",
    node_id: int | None = None,
    source: str = "config",
) -> KVConfig:
    """Check a parsed TOML document: the runtime's sections, then ``[kvstore]``."""
    raw = dict(raw)
    section = raw.pop("kvstore", None)

    def fail(key: str, why: str) -> ConfigError:
        return ConfigError(f"{source}: kvstore.{key}: {why}")

    if section is None:
        raise ConfigError(f"{source}: kvstore: missing (where do the nodes answer Redis clients?)")
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: kvstore: expected a table")
    unknown = sorted(set(section) - _KV_KEYS)
    if unknown:
        raise fail(unknown[0], "unknown key")
    spares = _spares(section, fail)
    # A spare node learns where it listens from its entry (as --address and
    # --region tell ``python -m sdpaxos node``).
    mine = next((s for s in spares if s.id == node_id), None)
    node = parse_config(
        raw,
        base_dir=base_dir,
        node_id=node_id,
        source=source,
        listen_at=None if mine is None else mine.peer_text,
        region_of_node=None if mine is None else mine.region,
    )
    addresses = section.get("redis")
    count = len(node.replicas)
    if not isinstance(addresses, list) or len(addresses) != count:
        raise fail("redis", f"expected an array of {count} host:port strings, one per replica")
    redis: list[tuple[str, int]] = []
    for k, address in enumerate(addresses):
        if not isinstance(address, str):
            raise fail(f"redis[{k}]", f"expected host:port, got {address!r}")
        host, sep, port_text = address.rpartition(":")
        if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise fail(f"redis[{k}]", f"expected host:port, got {address!r}")
        here = (host.strip("[]"), int(port_text))
        if here in redis:
            raise fail(f"redis[{k}]", f"same as replica {redis.index(here)}'s")
        peer = node.replicas[k]
        if (peer.host, peer.port) == here:
            raise fail(f"redis[{k}]", "same as the replica's own (peer) address")
        redis.append(here)
    taken = {(r.host, r.port): f"replica {r.id}'s" for r in node.replicas}
    taken.update({a: f"replica {k}'s Redis address" for k, a in enumerate(redis)})
    for k, spare in enumerate(spares):
        if spare.id < count:
            raise fail(f"spares[{k}].id", f"node {spare.id} is a replica of the file's list")
        for what, address in (("address", spare.address), ("redis", spare.redis)):
            if address in taken:
                raise fail(f"spares[{k}].{what}", f"same as {taken[address]}")
            taken[address] = f"spare {spare.id}'s {what}"
    tls = section.get("tls", False)
    if type(tls) is not bool:
        raise fail("tls", f"expected true or false, got {tls!r}")
    if tls and node.tls is None:
        raise fail("tls", "needs the [tls] files (the cluster is insecure)")
    users = section.get("users")
    if users is not None:
        if not isinstance(users, dict) or not users:
            raise fail("users", "expected a table of user = password")
        for user, password in users.items():
            if not isinstance(password, str) or not password:
                raise fail(f"users.{user}", "expected a non-empty password string")
    reads = section.get("reads", "linearizable")
    if reads not in ("linearizable", "stale"):
        raise fail("reads", f'expected "linearizable" or "stale", got {reads!r}')
    clients_max = section.get("clients_max", CLIENTS_MAX_DEFAULT)
    if type(clients_max) is not int or clients_max < 1:
        raise fail("clients_max", f"expected a positive integer, got {clients_max!r}")
    return KVConfig(
        node, tuple(redis), tls, dict(users) if users else None, reads, clients_max, tuple(spares)
    )
