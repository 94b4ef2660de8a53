"""A kv-store cluster on this machine: the runtime's local cluster plus Redis ports.

:func:`make_kv_cluster` writes what :func:`sdpaxos.runtime.local.make_local_cluster`
writes (certificates, ``cluster.toml``, data directories) and adds the
``[kvstore]`` section: a free Redis port per node on loopback, and the spare
nodes (``spares``: ids after the replicas', each with a peer port, a Redis port,
a region and a certificate of the cluster CA), which start as no members and
wait to be added (``kvstore admin add-replica``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sdpaxos.profiles import builtin
from sdpaxos.runtime.certs import issue_node_cert
from sdpaxos.runtime.config import TlsFiles
from sdpaxos.runtime.local import free_ports, make_local_cluster

__all__ = ["SPARES_MAX", "kv_client_tls", "make_kv_cluster"]

#: Spare nodes ``kvstore local`` starts at most (each is a process).
SPARES_MAX = 8


def make_kv_cluster(
    directory: Path | str,
    replicas: int = 3,
    *,
    profile: str | None = "paper3",
    insecure: bool = False,
    redis_tls: bool = False,
    users: Mapping[str, str] | None = None,
    redis_ports: Sequence[int] | None = None,
    protocol: Mapping[str, Any] | None = None,
    sequencer: int = 0,
    host: str = "127.0.0.1",
    spares: int = 0,
) -> Path:
    """Write a kv-store cluster's files; return the path of ``cluster.toml``.

    ``profile``: a delay profile whose first ``replicas`` regions the nodes take
    (the emulator delays their links), or None for none. ``redis_tls`` and
    ``users`` make the Redis ports require TLS and AUTH.
    """
    regions = None
    emulator = None
    protocol = dict(protocol or {})
    if profile is not None:
        delays = builtin(profile)
        if delays.size < replicas:
            raise ValueError(f"profile {profile} has {delays.size} regions, not {replicas}")
        regions = list(delays.regions[:replicas])
        emulator = {"profile": profile}
        protocol.setdefault("rtt_ms", [list(r) for r in delays.subset(regions).replica_rtt_ms()])
    # The peer ports and the Redis ports are drawn in one call, so that no
    # Redis port is also a peer's: two calls each find ports free *now*, and
    # the second could hand out a port the first did (a cluster file the
    # config then refuses: "same as the replica's own (peer) address").
    if redis_ports is not None:
        ports = list(redis_ports)
        peer_ports = [p for p in free_ports(replicas + len(ports), host) if p not in ports]
    else:
        drawn = free_ports(2 * replicas, host)
        ports, peer_ports = drawn[replicas:], drawn[:replicas]
    if len(ports) != replicas:
        raise ValueError(f"{len(ports)} Redis ports for {replicas} replicas")
    # The spares' ports in one more call, none of them one already drawn.
    taken = set(ports) | set(peer_ports[:replicas])
    spare_ports = [p for p in free_ports(2 * spares + len(taken), host) if p not in taken]
    spare_ports = spare_ports[: 2 * spares]
    path = make_local_cluster(
        directory,
        replicas,
        ports=peer_ports[:replicas],
        insecure=insecure,
        regions=regions,
        sequencer=sequencer,
        protocol=protocol or None,
        host=host,
        emulator=emulator,
    )
    lines = ["", "[kvstore]"]
    lines.append("redis = [" + ", ".join(f'"{host}:{p}"' for p in ports) + "]")
    if redis_tls:
        lines.append("tls = true")
    if users:
        pairs = ", ".join(f'{u} = "{p}"' for u, p in users.items())
        lines.append(f"users = {{ {pairs} }}")
    if spares:
        lines.append("spares = [")
        for k in range(spares):
            node_id = replicas + k
            region = regions[k % replicas] if regions is not None else f"R{node_id}"
            peer, redis = spare_ports[2 * k], spare_ports[2 * k + 1]
            lines.append(
                f'    {{ id = {node_id}, address = "{host}:{peer}", redis = "{host}:{redis}",'
                f' region = "{region}" }},'
            )
        lines.append("]")
    with path.open("a") as f:
        f.write("\n".join(lines) + "\n")
    root = Path(directory)
    for node_id in range(replicas, replicas + spares):
        (root / f"node{node_id}").mkdir(exist_ok=True)
        if not insecure:
            issue_node_cert(root / "certs", node_id, hosts=[host], force=True)
    return path


def kv_client_tls(path: Path | str, client: int = 0) -> TlsFiles | None:
    """Client certificate ``client<N>`` of a local kv-store cluster (None when insecure)."""
    from kvstore.config import load_kv_config
    from sdpaxos.runtime.cli import cluster_client_tls

    return cluster_client_tls(load_kv_config(path, 0).node, client)
