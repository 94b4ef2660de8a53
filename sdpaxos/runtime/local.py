"""A cluster on this machine, for development, tests and examples.

:func:`make_local_cluster` writes what a real deployment has, in one
directory: certificates of a fresh cluster CA (``certs/``), one
``cluster.toml`` that serves every node (``{id}`` in its paths), and a data
directory per node. The same file starts real node processes
(``python -m sdpaxos node --config DIR/cluster.toml --id N``) or in-process
nodes (:func:`load_config`).
"""

from __future__ import annotations

import random
import socket
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sdpaxos.protocols import DEFAULT_PROTOCOL, PROTOCOL_NAMES
from sdpaxos.runtime.certs import make_cluster_certs
from sdpaxos.runtime.config import NodeConfig, TlsFiles, load_config, parse_config

__all__ = ["client_tls", "free_ports", "make_local_cluster", "node_configs"]

#: Most replicas a local cluster may have (the core allows more; a laptop does not).
LOCAL_REPLICAS_MAX = 16
#: Client certificates made for a local cluster (client0 .. client{N-1}).
LOCAL_CLIENT_CERTS = 4


#: Where :func:`free_ports` looks when the kernel's ephemeral range is unknown.
_EPHEMERAL_LOW_DEFAULT = 32768
_PORT_LOW = 10000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _EPHEMERAL_LOW_DEFAULT


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` TCP ports free right now, below the kernel's ephemeral range.

    Not ports the OS picks for ``bind(0)``: those come from the ephemeral range,
    which is also where outgoing connections take their source port, so a
    node dialling a peer could take a port another node of the cluster is
    about to listen on (seen: a Redis port taken by a peer connection).
    """
    rng = random.SystemRandom()
    high = max(_PORT_LOW + count, _ephemeral_low())
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            port = rng.randrange(_PORT_LOW, high)
            if port in ports:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, port))
            except OSError:
                s.close()
                continue
            sockets.append(s)
            ports.append(port)
        return ports
    finally:
        for s in sockets:
            s.close()


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ValueError(f"cannot write {value!r} to TOML")


def make_local_cluster(
    directory: Path | str,
    replicas: int = 3,
    *,
    insecure: bool = False,
    regions: Sequence[str] | None = None,
    sequencer: int = 0,
    protocol: Mapping[str, Any] | None = None,
    host: str = "127.0.0.1",
    ports: Sequence[int] | None = None,
    emulator: Mapping[str, Any] | None = None,
) -> Path:
    """Write certificates, ``cluster.toml`` and data directories; return the file's path.

    ``regions``: each replica's region (names of a delay profile, for the
    emulator); ``protocol``: any :class:`~sdpaxos.core.config.ClusterConfig`
    field, and ``name``, the replication protocol (``"multipaxos"``, ...);
    ``emulator``: the ``[emulator]`` section (``{"profile": "paper3", ...}``).

    A fresh cluster: certificates already in ``directory`` are replaced, and
    its nodes start with ``--bootstrap`` (``bootstrap=True``) the first time.
    A file its nodes would refuse is a :class:`ValueError`, and nothing is
    written then.
    """
    name = (protocol or {}).get("name", DEFAULT_PROTOCOL)
    if name not in PROTOCOL_NAMES:
        raise ValueError(f"unknown protocol {name!r}; choose one of {', '.join(PROTOCOL_NAMES)}")
    if not 1 <= replicas <= LOCAL_REPLICAS_MAX:
        raise ValueError(f"replicas must be in 1..{LOCAL_REPLICAS_MAX}, got {replicas}")
    if regions is not None and len(regions) != replicas:
        raise ValueError(f"{len(regions)} regions for {replicas} replicas")
    root = Path(directory)
    ports = list(ports) if ports is not None else free_ports(replicas, host)
    lines = ["[cluster]", f"sequencer = {sequencer}", "replicas = ["]
    for k in range(replicas):
        region = regions[k] if regions is not None else f"R{k}"
        lines.append(
            f'    {{ id = {k}, address = "{host}:{ports[k]}", region = {_toml_value(region)} }},'
        )
    lines.append("]")
    if protocol:
        lines.append("")
        lines.append("[cluster.protocol]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in protocol.items()]
    lines += ["", "[node]", 'data_dir = "node{id}"', "", "[tls]"]
    if insecure:
        lines.append("insecure = true")
    else:
        lines += [
            'ca = "certs/ca.pem"',
            'cert = "certs/node{id}.pem"',
            'key = "certs/node{id}.key"',
        ]
    if emulator:
        lines += ["", "[emulator]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in emulator.items()]
    text = "\n".join(lines) + "\n"
    # Checked as every node will read it, before anything is written (the
    # certificates are not made yet: TLS aside): a file every node would
    # refuse (an even N, a bad setting) is a ValueError here instead.
    parse_config(
        {**tomllib.loads(text), "tls": {"insecure": True}},
        base_dir=root,
        node_id=0,
        source="the local cluster's file",
    )
    root.mkdir(parents=True, exist_ok=True)
    if not insecure:
        make_cluster_certs(
            root / "certs", replicas, clients=LOCAL_CLIENT_CERTS, hosts=[host], force=True
        )
    path = root / "cluster.toml"
    path.write_text(text)
    for k in range(replicas):
        (root / f"node{k}").mkdir(exist_ok=True)
    return path


def node_configs(path: Path | str) -> list[NodeConfig]:
    """Every node's configuration from one cluster file."""
    first = load_config(path, 0)
    return [first] + [load_config(path, k) for k in range(1, len(first.replicas))]


def client_tls(path: Path | str, client: int = 0) -> TlsFiles | None:
    """The client certificate ``client<N>`` of a local cluster (None when insecure)."""
    cfg = load_config(path, 0)
    if cfg.tls is None:
        return None
    certs = cfg.tls.ca.parent
    return TlsFiles(cfg.tls.ca, certs / f"client{client}.pem", certs / f"client{client}.key")
