"""SDPaxos: semi-decentralized geo-replicated state machine replication.

The protocol core (:mod:`sdpaxos.core`) is pure: it is driven by ``step``,
``tick`` and ``propose`` and hands back a :class:`~sdpaxos.core.ready.Ready`
batch of effects. The embedding API (``from sdpaxos import Node``) comes from
:mod:`sdpaxos.runtime`, imported only when first named here: importing
``sdpaxos.core`` must not drag in the runtime.
"""

from typing import Any

__version__ = "0.1.0"

#: Names this package lends from the runtime, and the module each lives in.
_RUNTIME_NAMES = {
    "Node": "sdpaxos.runtime.node",
    "NodeError": "sdpaxos.runtime.node",
    "NodeStatus": "sdpaxos.runtime.node",
    "SessionExpired": "sdpaxos.runtime.node",
    "Client": "sdpaxos.runtime.client",
    "ClientError": "sdpaxos.runtime.client",
    "SyncNode": "sdpaxos.runtime.sync",
    "SyncClient": "sdpaxos.runtime.sync",
    "NodeConfig": "sdpaxos.runtime.config",
    "load_config": "sdpaxos.runtime.config",
    "make_local_cluster": "sdpaxos.runtime.local",
    "node_configs": "sdpaxos.runtime.local",
    "client_tls": "sdpaxos.runtime.local",
}

__all__ = ["__version__", *_RUNTIME_NAMES]


def __getattr__(name: str) -> Any:
    module = _RUNTIME_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'sdpaxos' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
