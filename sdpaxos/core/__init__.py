"""The pure SDPaxos protocol core.

Rules for everything under this package:

1. No I/O, no clock, no global randomness, no ``await``. Time is what the driver
   passes as ``now_ms`` (its monotonic clock, in milliseconds) to
   :meth:`Replica.tick`, :meth:`Replica.step` and :meth:`Replica.read`;
   randomness comes only from the ``random.Random`` a :class:`Replica` is given.
2. Bad input from a peer raises :class:`PeerMessageError` inside the handler
   *before* any state changes; :meth:`Replica.step` turns it into a dropped
   message and a counter, never a crash.
3. Names follow the paper (C-instance, O-instance, C-accept, O-accept, ...). The
   TLA+ action, handler and trace event of each protocol step are listed in one
   table, ``tla/README.md`` ("Spec action = handler = trace event"), which
   ``tests/test_tla_names.py`` checks against the spec and this code.
"""

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import (
    ConfigError,
    InvariantViolation,
    LocalProtocolError,
    Overloaded,
    PeerMessageError,
)
from sdpaxos.core.member import Member, NotMemberError, Role
from sdpaxos.core.membership import (
    MemberMachine,
    Membership,
    MembershipOp,
    NodeInfo,
    OpKind,
    decode_result,
)
from sdpaxos.core.messages import (
    CAccept,
    CAck,
    CCommit,
    CRequest,
    LearnRequest,
    Message,
    OAccept,
    OAck,
    OCommit,
    RReply,
    RReplyBatch,
    RRequest,
    RRequestBatch,
    SequencerHandover,
    StragglerPoll,
    StragglerVote,
)
from sdpaxos.core.ready import Executed, ReadResult, Ready, Reply, ReplyKind
from sdpaxos.core.replica import Replica, StateMachine
from sdpaxos.core.sessions import Sessions, decode_session_id, registration
from sdpaxos.core.storage import CAccepted, MemoryStorage, OAccepted, Record, Storage
from sdpaxos.core.types import NO_CL, STOP, STOP_VALUE, Command, OValue, Wait

__all__ = [
    "NO_CL",
    "STOP",
    "STOP_VALUE",
    "CAccept",
    "CAccepted",
    "CAck",
    "CCommit",
    "CRequest",
    "ClusterConfig",
    "Command",
    "ConfigError",
    "Executed",
    "InvariantViolation",
    "LearnRequest",
    "LocalProtocolError",
    "Member",
    "MemberMachine",
    "Membership",
    "MembershipOp",
    "MemoryStorage",
    "Message",
    "NodeInfo",
    "NotMemberError",
    "OAccept",
    "OAccepted",
    "OAck",
    "OCommit",
    "OValue",
    "OpKind",
    "Overloaded",
    "PeerMessageError",
    "RReply",
    "RReplyBatch",
    "RRequest",
    "RRequestBatch",
    "ReadResult",
    "Ready",
    "Record",
    "Replica",
    "Reply",
    "ReplyKind",
    "Role",
    "SequencerHandover",
    "Sessions",
    "StateMachine",
    "Storage",
    "StragglerPoll",
    "StragglerVote",
    "Wait",
    "decode_result",
    "decode_session_id",
    "registration",
]
