"""Trace validation across a membership change: scripted changes in a traced
:class:`~sdpaxos.sim.member_cluster.MemberCluster`, replayed step by step against
the TLA+ spec by TLC (``sdpaxos.sim.member_trace``, ``sdpaxos.modelcheck``).

The change steps (``AllocateStop``, the sequencer's ``CommitO`` of the STOP,
the others' ``LearnStop``, ``StartEpoch``, ``InstallEpoch``) are in the traces,
with node ids, global slots and the run's epochs (``EpochMembers``) mapped to
the spec's. The teeth: a recorded StartEpoch moved by one slot, and a core whose
epoch starts one slot late, must each be refused at the StartEpoch step.
"""

import shutil
from collections import Counter

import pytest

from sdpaxos.core import epochs
from sdpaxos.core.replica import Replica
from sdpaxos.core.types import Slot
from sdpaxos.modelcheck import epoch_sizes, validate
from sdpaxos.sim.member_trace import CHANGES, run_change

pytestmark = [
    pytest.mark.tla,
    pytest.mark.skipif(
        shutil.which("java") is None, reason="java is not installed: TLC needs a JVM"
    ),
]

#: Each takes TLC 3 to 55 s on a loaded 2-core machine (one worker).
TIMEOUT_S = 300


#: The changes CI validates (for time, not ``replace3`` and ``replace3-switchcrash``,
#: whose kinds of step these take too, nor ``replace5``, whose 5-member epoch
#: ``grow3to5`` has: ``python -m sdpaxos.modelcheck --changes`` validates each).
VALIDATED = ["replace3-crash", "replace3-stopcrash"]


@pytest.mark.parametrize("name", VALIDATED)
def test_the_spec_takes_every_step_of_a_change(name: str) -> None:
    run = run_change(name)
    rec = run.recorder
    assert run.switched
    actions = Counter(s.action for s in rec.steps)
    # The change is in the trace: the stop, every member's switch, the joiner's install.
    assert actions["AllocateStop"] == 1
    assert actions["StartEpoch"] + actions["InstallEpoch"] >= len(rec.epochs()[1]) + 1
    assert actions["InstallEpoch"] >= 1
    if CHANGES[name].crash >= 0:
        assert actions["Crash"] == actions["Restart"] == 1
    if CHANGES[name].crash_at == "stop":
        # The sequencer crashed with the STOP allocated and its O-accepts sent:
        # the others learned it chosen from the acknowledgements (LearnStop) and
        # switched without a view change in epoch 0 (docs/membership.md 3.1).
        assert actions["LearnStop"] >= 2
        assert actions["BecomeSequencer"] == 0
    verdict = validate(rec, timeout_s=TIMEOUT_S)
    assert verdict.ok, verdict.message
    assert verdict.matched == verdict.steps > 100


@pytest.mark.slow  # about a minute of TLC; CI validates the replaces (python -m pytest -m slow)
def test_a_grow_from_3_to_5_members() -> None:
    """The code grows 3 -> 5 one PROMOTE per stop, through a 4-member epoch: the
    spec takes every step where it has even epochs, and refuses the run at its
    ASSUME (epochs of 3 or 5) where it has not, so this test says which."""
    run = run_change("grow3to5")
    rec = run.recorder
    assert rec.epochs() == [(0, 1, 2), (0, 1, 2, 3), (0, 1, 2, 3, 4)]
    assert Counter(s.action for s in rec.steps)["AllocateStop"] == 2
    verdict = validate(rec, timeout_s=TIMEOUT_S)
    if 4 in epoch_sizes():
        assert verdict.ok, verdict.message
        assert verdict.matched == verdict.steps > 200
    else:
        assert not verdict.ok
        assert "Assumption" in verdict.message, verdict.message


def test_the_epochs_are_the_spec_s() -> None:
    """Positions and epochs mapped: node 3 took the sequencer's place, and the
    steps of epoch 1 name node ids, not positions (node 3 is at position 0)."""
    run = run_change("replace3-crash")
    rec = run.recorder
    assert rec.epochs() == [(0, 1, 2), (1, 2, 3)]
    k = next(i for i, s in enumerate(rec.steps) if s.action == "StartEpoch")
    later = rec.steps[k:]
    assert any(s.replica == 3 and s.action == "InstallEpoch" for s in later)
    # Node 3, at position 0 of epoch 1, proposes there: its C-accepts name it.
    sent = [s.msg for s in later if s.action == "Sent" and s.msg["type"] == "CAccept"]
    assert [m for m in sent if m["src"] == m["n"] == 3 and m["ep"] == 1]
    # (unmapped, they would name 0, the removed sequencer)
    assert not [m for m in sent if m["ep"] == 1 and 0 in (m["src"], m["n"])]
    assert all(m.get("ep") == 1 for s in later if s.replica == 3 for m in [s.msg] if m)


def test_a_start_at_the_wrong_slot_is_refused() -> None:
    """The recorder's StartEpoch moved one slot up: refused at that step."""
    run = run_change("replace3-crash")
    rec = run.recorder
    k = next(i for i, s in enumerate(rec.steps) if s.action == "StartEpoch")
    rec.steps[k].params["slot"] += 1
    del rec.steps[k + 20 :]  # (what follows cannot matter: shorter for TLC)
    verdict = validate(rec, timeout_s=TIMEOUT_S)
    assert not verdict.ok
    assert verdict.matched == k, verdict.message
    assert f"step {k + 1} of {len(rec.steps)}: StartEpoch" in verdict.message


def test_a_core_that_starts_the_epoch_late_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """One line of the core changed: the epoch starts one slot after the slot
    after the STOP (``epochs.stopped_at`` one slot high, as if the executor
    recorded the slot after the STOP as the stop)."""
    real = epochs.stopped_at

    def late(replica: Replica) -> Slot | None:
        stop = real(replica)
        return None if stop is None else Slot(stop + 1)

    monkeypatch.setattr(epochs, "stopped_at", late)
    run = run_change("replace3-crash")
    rec = run.recorder
    k = next(i for i, s in enumerate(rec.steps) if s.action == "StartEpoch")
    del rec.steps[k + 20 :]  # (what follows cannot matter: shorter for TLC)
    verdict = validate(rec, timeout_s=TIMEOUT_S)
    assert not verdict.ok
    assert verdict.message.startswith("the spec cannot take step"), verdict.message
    assert "StartEpoch" in verdict.message.splitlines()[0]
