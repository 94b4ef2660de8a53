"""Linearizability checking for Python: histories, models, a fast checker, pictures.

Does a concurrent history of operations on an object look as if each
operation took effect at one instant between its invocation and its
completion, in some order a sequential model allows? ::

    from sdpaxos.check import KeyValue, Operation, check

    history = [
        Operation(client=1, input=("put", "x", "1"), output=None, invoke=0, complete=2),
        Operation(client=2, input=("get", "x"), output="1", invoke=1, complete=3),
    ]
    result = check(history, KeyValue())
    assert result.ok, result.describe()

The pieces:

* :class:`Operation`, :data:`UNKNOWN` (:mod:`~sdpaxos.check.history`): what happened;
* :class:`Model`, :data:`ILLEGAL` and the built-in models
  (:mod:`~sdpaxos.check.models`): what should have happened;
* :func:`check` (:mod:`~sdpaxos.check.checker`): the verdict, with a
  :class:`Witness` when it is "not linearizable";
* :mod:`~sdpaxos.check.formats`: Jepsen etcd logs, kv lines, Knossos EDN,
  JSON lines; ``python -m sdpaxos.check FILE --format F`` on the command line;
* :mod:`~sdpaxos.check.render`: the history as a picture (HTML or PNG);
* :mod:`~sdpaxos.check.testing`: record a concurrent history against your
  own object or service, and assert it is linearizable.

Nothing here imports the SDPaxos runtime: this package stands alone.
"""

from sdpaxos.check.checker import (
    Attempt,
    CheckResult,
    ModelError,
    PartitionResult,
    Verdict,
    Witness,
    check,
    partition_history,
)
from sdpaxos.check.history import UNKNOWN, History, HistoryError, Operation, validate
from sdpaxos.check.model import ILLEGAL, Model
from sdpaxos.check.models import MODELS, CasRegister, FifoQueue, KeyValue, Register, SetModel

__all__ = [
    "ILLEGAL",
    "MODELS",
    "UNKNOWN",
    "Attempt",
    "CasRegister",
    "CheckResult",
    "FifoQueue",
    "History",
    "HistoryError",
    "KeyValue",
    "Model",
    "ModelError",
    "Operation",
    "PartitionResult",
    "Register",
    "SetModel",
    "Verdict",
    "Witness",
    "check",
    "partition_history",
    "validate",
]
