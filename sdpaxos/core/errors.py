"""The three kinds of failure, kept apart on purpose (h11 style).

* :class:`LocalProtocolError`: the embedder misused the API. Raised to the caller.
* :class:`PeerMessageError`: a peer sent something malformed, stale or
  impossible. Raised inside a handler before any state changes, caught by
  :meth:`Replica.step`, counted and dropped. A node never crashes on it.
* :class:`InvariantViolation`: the core itself is wrong. It must crash the node,
  because continuing could lose an acknowledged write.
"""


class LocalProtocolError(Exception):
    """The embedder called the core in a way the API does not allow."""


class ConfigError(LocalProtocolError, ValueError):
    """A :class:`~sdpaxos.core.config.ClusterConfig` is inconsistent."""


class Overloaded(LocalProtocolError):
    """A bounded queue is full; the caller should back off and retry."""


class PeerMessageError(Exception):
    """A message from a peer is malformed, stale or refers to impossible state.

    ``alarm``: the message would revoke an executed slot, which a correct peer
    never asks; :meth:`Replica.step` counts it in ``Stats.invariant_alarms``.
    """

    def __init__(self, reason: str, *, alarm: bool = False) -> None:
        super().__init__(reason)
        self.alarm = alarm


class InvariantViolation(AssertionError):
    """An internal invariant failed: a bug in the core, never a peer's fault."""
