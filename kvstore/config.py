"""A kv-store node's configuration: the runtime's cluster file plus a ``[kvstore]`` section.

One file serves every node of a cluster, as for ``python -m sdpaxos node``; the
kv-store adds where each node answers Redis clients, and how::

    [kvstore]
    redis = ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]   # by replica id
    tls = true                  # the Redis port speaks TLS, with the node's certificate
    users = { app = "s3cret" }  # AUTH required (ACL style: AUTH app s3cret)
    reads = "linearizable"      # or "stale": a new connection's default read mode
    clients_max = 10000         # Redis connections at once

Every other section is the runtime's (:mod:`sdpaxos.runtime.config`); a
mistake names the key, like the runtime's checks do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sdpaxos.core.errors import ConfigError
from sdpaxos.runtime.config import NodeConfig, parse_config, read_toml

__all__ = ["KVConfig", "load_kv_config", "parse_kv_config"]

_KV_KEYS = frozenset({"redis", "tls", "users", "reads", "clients_max"})
#: Redis connections a node serves at once, unless the file says otherwise.
CLIENTS_MAX_DEFAULT = 10_000


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

    @property
    def redis_address(self) -> tuple[str, int]:
        """This node's Redis address."""
        return self.redis[self.node.node_id]


def load_kv_config(path: Path | str, node_id: int | None = None) -> KVConfig:
    """Read and check the TOML file at ``path``; ``node_id`` overrides ``[node] id``."""
    path = Path(path)
    raw = read_toml(path)
    return parse_kv_config(raw, base_dir=path.parent, node_id=node_id, source=str(path))


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
    node = parse_config(raw, base_dir=base_dir, node_id=node_id, source=source)

    def fail(key: str, why: str) -> ConfigError:
        return ConfigError(f"{source}: kvstore.{key}: {why}")

    if section is None:
        raise ConfigError(f"{source}: kvstore: missing (where do the nodes answer Redis clients?)")
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: kvstore: expected a table")
    unknown = sorted(set(section) - _KV_KEYS)
    if unknown:
        raise fail(unknown[0], "unknown key")
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
    return KVConfig(node, tuple(redis), tls, dict(users) if users else None, reads, clients_max)
