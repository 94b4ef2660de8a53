"""What every embedding entry point shares: its errors and the ``wait`` choice.

:class:`~sdpaxos.runtime.node.Node`, :class:`~sdpaxos.runtime.client.Client`
and their synchronous facades raise these and only these for what the cluster
did (a ``TypeError`` or ``ValueError`` still says an argument was wrong, and
``TimeoutError`` that no answer came in time), so that a caller catches one
class whichever way it reaches the cluster.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["ClientError", "NodeError", "NotMember", "SessionBusy", "SessionExpired", "WaitName"]

#: When a submit returns: once the command is ordered and committed
#: (``"ready"``: its place in the log is fixed, nothing is returned), or once
#: it has executed at the node that took it (``"executed"``: the state
#: machine's result).
WaitName = Literal["ready", "executed"]


class NodeError(Exception):
    """The node cannot serve: not started, stopped, or its log failed."""


class NotMember(NodeError):
    """This node is no member of the epoch that runs (it waits to be added, is
    a learner, or was removed): it takes no commands and serves no reads. The
    message says what it is and who the members are; send the request to one.
    The command was not applied through this node."""


class SessionBusy(NodeError):
    """A session was given a second command while its first was outstanding
    (a session numbers its commands one at a time)."""


class ClientError(Exception):
    """The cluster refused a request for good (the message says why), or none answered."""


class SessionExpired(ClientError):
    """The command's session expired before it executed: this copy was not applied.

    Raised by :class:`~sdpaxos.runtime.node.Node` and
    :class:`~sdpaxos.runtime.client.Client` alike. Sessions expire only with
    ``ClusterConfig(session_lifetime_slots=...)``. An earlier copy of the same
    command (a retry's first attempt) may have executed before the session
    expired, so the caller cannot tell from this error whether the command took
    effect: read the state, or make the command safe to apply again, before
    submitting it under a new session.
    """
