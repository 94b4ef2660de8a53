"""Hot paths build these named tuples with ``tuple.__new__`` (their Python-level
constructors cost twice as much, once per command), which checks no arity: a
field added to one of them would leave those sites building short tuples with
no error. This pins the fields those sites write out; change them together
(``sdpaxos/core/command_leader.py``, ``sdpaxos/wire/codec.py``,
``sdpaxos/runtime/frames.py``, ``sdpaxos/runtime/node.py``)."""

from sdpaxos.core.ready import Reply
from sdpaxos.core.types import Command
from sdpaxos.runtime import frames as rf


def test_the_fields_the_fast_constructors_write_out() -> None:
    assert Command._fields == ("client_id", "seq", "payload", "key")
    assert Reply._fields == ("client_id", "seq", "kind", "result")
    assert rf.Submit._fields == ("request_id", "client_id", "seq", "payload", "key", "wait")
    assert rf.Reply._fields == ("request_id", "code", "value")


def test_a_fast_built_value_equals_the_constructed_one() -> None:
    new = tuple.__new__
    assert new(Command, (1, 2, b"p", None)) == Command(1, 2, b"p")
    assert new(Command, (1, 2, b"p", None)).key is None
