"""The recorder and assert_linearizable: what a user's own tests rely on."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from sdpaxos.check import UNKNOWN, KeyValue, Register, Verdict
from sdpaxos.check.__main__ import main
from sdpaxos.check.testing import (
    NotLinearizable,
    Recorder,
    assert_linearizable,
    record_tasks,
    record_threads,
)


class Lost(Exception):
    pass


class Refused(Exception):
    pass


def test_the_recorder_times_each_call_and_keeps_outcomes_apart() -> None:
    rec = Recorder()
    assert rec.call("a", ("write", 1), lambda: None) is None
    with pytest.raises(Lost):
        rec.call("a", ("write", 2), lambda: (_ for _ in ()).throw(Lost()))
    with pytest.raises(Refused):
        rec.call("b", ("write", 3), lambda: (_ for _ in ()).throw(Refused()), failures=(Refused,))
    assert rec.call("b", ("read",), lambda: 2) == 2
    ops = rec.history()
    assert [(o.input, o.output, o.is_open) for o in ops] == [
        (("write", 1), None, False),
        (("write", 2), UNKNOWN, True),  # lost: may have happened
        (("read",), 2, False),  # the refused write is not there: it did not happen
    ]
    assert ops[0].invoke < ops[0].complete < ops[1].invoke < ops[2].invoke  # type: ignore[operator]
    assert_linearizable(ops, Register())  # the lost write explains the read of 2


def test_a_recorder_has_a_size_limit() -> None:
    rec = Recorder(ops_max=2)
    for _ in range(2):
        rec.call(1, ("read",), lambda: None)
    with pytest.raises(RuntimeError, match="more than 2 operations"):
        rec.call(1, ("read",), lambda: None)


class Store:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.lock = threading.Lock()

    def apply(self, client: int, op: tuple[str, ...]) -> Any:
        with self.lock:
            if op[0] == "get":
                return self.data.get(op[1])
            self.data[op[1]] = op[2]
            return None


SCRIPTS = [
    [op for i in range(3) for op in (("put", "k", f"{c}{i}"), ("get", "k"))] for c in range(4)
]


def test_threads_against_a_correct_store_are_linearizable() -> None:
    history = record_threads(SCRIPTS, Store().apply)
    assert len(history) == 24
    times = [t for op in history for t in (op.invoke, op.complete)]
    assert len(set(times)) == len(times)  # one counter: no ties
    assert assert_linearizable(history, KeyValue()).verdict is Verdict.LINEARIZABLE


def test_asyncio_tasks_are_recorded_too() -> None:
    data: dict[str, str] = {}

    async def apply(client: int, op: tuple[str, ...]) -> Any:
        await asyncio.sleep(0)
        if op[0] == "get":
            return data.get(op[1])
        data[op[1]] = op[2]
        return None

    history = asyncio.run(record_tasks(SCRIPTS, apply))
    assert len(history) == 24
    assert_linearizable(history, KeyValue())


def test_a_failure_gives_the_witness_a_picture_and_a_replay_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale: dict[str, str] = {}

    def apply(client: int, op: tuple[str, ...]) -> Any:  # reads never see writes
        return stale.get(op[1]) if op[0] == "get" else None

    history = record_threads([[("put", "k", "v"), ("get", "k")]], apply)
    with pytest.raises(NotLinearizable) as e:
        assert_linearizable(history, KeyValue(), picture=tmp_path)
    message = str(e.value)
    assert message.startswith("history is not linearizable")
    assert e.value.picture == tmp_path / "history.html" and e.value.picture.exists()
    assert "could not be placed next" in message and "get -> nil" in message
    [replay] = [line for line in message.splitlines() if line.startswith("replay: ")]
    args = replay.split()[4:]  # after "replay: python -m sdpaxos.check"
    assert args[0] == str(tmp_path / "history.jsonl")
    assert main(args) == 1
    assert capsys.readouterr().out.startswith("not linearizable")
