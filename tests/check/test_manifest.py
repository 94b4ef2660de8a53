"""Every reference history gets its expected verdict (MANIFEST.tsv), with a witness
that replays for each failure. Speed is measured in bench/check_bench.py, not here."""

from __future__ import annotations

import pytest

from sdpaxos.check import ILLEGAL, Verdict, check
from sdpaxos.check.formats import load
from tests.check.helpers import histories_dir, manifest

ROWS = manifest()
EXPECTED = {"linearizable": Verdict.LINEARIZABLE, "not-linearizable": Verdict.NOT_LINEARIZABLE}
C50_BAD_TIMEOUT_S = 60.0


def test_the_manifest_lists_every_reference_history() -> None:
    names = {row[0] for row in ROWS}
    on_disk = {
        str(p.relative_to(histories_dir()))
        for sub in ("etcd", "kv")
        for p in (histories_dir() / sub).iterdir()
    }
    assert names == on_disk
    assert len([n for n in names if n.startswith("etcd/")]) == 67


@pytest.mark.parametrize(("name", "expected", "fmt"), ROWS, ids=[r[0] for r in ROWS])
def test_expected_verdict(name: str, expected: str, fmt: str) -> None:
    loaded = load(histories_dir() / name, fmt)
    result = check(loaded.history, loaded.model, timeout_s=C50_BAD_TIMEOUT_S, processes=1)
    assert result.verdict is EXPECTED[expected], result.describe()
    if result.verdict is Verdict.LINEARIZABLE:
        return
    w = result.witness
    assert w is not None
    # The witness stands on its own: its prefix replays in the model to its
    # state, and the operation that had to go next is illegal there or leads
    # nowhere.
    state = w.model.init()
    for op, after in w.prefix:
        state = w.model.step(state, op.input, op.output)
        assert state is not ILLEGAL and state == after
    assert state == w.state
    assert w.blocking is not None and w.blocking not in {op for op, _ in w.prefix}
    assert any(a.op is w.blocking for a in w.attempts) or w.blocking.invoke > min(
        a.op.invoke for a in w.attempts
    )


def test_the_etcd_witness_names_the_stale_read() -> None:
    loaded = load(histories_dir() / "etcd/etcd_001.log", "etcd")
    result = check(loaded.history, loaded.model, processes=1)
    w = result.witness
    assert w is not None and w.blocking is not None
    assert w.blocking.input == ("read", None) and w.blocking.output == 4
    assert (w.blocking.invoke, w.blocking.complete) == (73, 74)  # line numbers
    assert w.state == 1 and len(w.prefix) == 33
    [attempt] = [a for a in w.attempts if a.op is w.blocking]
    assert attempt.next_state is ILLEGAL and attempt.state == 1
