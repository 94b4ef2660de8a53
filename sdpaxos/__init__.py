"""SDPaxos: semi-decentralized geo-replicated state machine replication.

The protocol core (:mod:`sdpaxos.core`) is pure: it is driven by ``step``,
``tick`` and ``propose`` and hands back a :class:`~sdpaxos.core.ready.Ready`
batch of effects. The embedding API (``from sdpaxos import Node``) comes from
:mod:`sdpaxos.runtime`, imported only when first named here: importing
``sdpaxos.core`` must not drag in the runtime. Type checkers and editors see
the real names (the imports under ``TYPE_CHECKING``), and the package ships
``py.typed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sdpaxos.runtime.client import Client
    from sdpaxos.runtime.config import NodeConfig, load_config
    from sdpaxos.runtime.errors import (
        ClientError,
        NodeError,
        SessionBusy,
        SessionExpired,
        WaitName,
    )
    from sdpaxos.runtime.local import client_tls, make_local_cluster, node_configs
    from sdpaxos.runtime.node import Node, Session
    from sdpaxos.runtime.status import NodeStatus, PeerStatus
    from sdpaxos.runtime.sync import SyncClient, SyncNode

__version__ = "0.1.0"

#: Names this package lends from the runtime, and the module each lives in
#: (a test holds these to the ``TYPE_CHECKING`` imports above).
_RUNTIME_NAMES = {
    "Node": "sdpaxos.runtime.node",
    "Session": "sdpaxos.runtime.node",
    "NodeStatus": "sdpaxos.runtime.status",
    "PeerStatus": "sdpaxos.runtime.status",
    "NodeError": "sdpaxos.runtime.errors",
    "SessionBusy": "sdpaxos.runtime.errors",
    "SessionExpired": "sdpaxos.runtime.errors",
    "ClientError": "sdpaxos.runtime.errors",
    "WaitName": "sdpaxos.runtime.errors",
    "Client": "sdpaxos.runtime.client",
    "SyncNode": "sdpaxos.runtime.sync",
    "SyncClient": "sdpaxos.runtime.sync",
    "NodeConfig": "sdpaxos.runtime.config",
    "load_config": "sdpaxos.runtime.config",
    "make_local_cluster": "sdpaxos.runtime.local",
    "node_configs": "sdpaxos.runtime.local",
    "client_tls": "sdpaxos.runtime.local",
}

__all__ = [
    "Client",
    "ClientError",
    "Node",
    "NodeConfig",
    "NodeError",
    "NodeStatus",
    "PeerStatus",
    "Session",
    "SessionBusy",
    "SessionExpired",
    "SyncClient",
    "SyncNode",
    "WaitName",
    "__version__",
    "client_tls",
    "load_config",
    "make_local_cluster",
    "node_configs",
]


def __getattr__(name: str) -> Any:
    module = _RUNTIME_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'sdpaxos' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
