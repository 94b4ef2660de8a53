"""SDPaxos: semi-decentralized geo-replicated state machine replication.

The protocol core (:mod:`sdpaxos.core`) is pure: it is driven by ``step``,
``tick`` and ``propose`` and hands back a :class:`~sdpaxos.core.ready.Ready`
batch of effects. This module stays tiny on purpose: importing
``sdpaxos.core`` must not drag in the runtime.
"""

__version__ = "0.1.0"
