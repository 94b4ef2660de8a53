"""``python -m bench.reconfig``: three changes under load in the simulator.

Virtual time, one seed: the numbers are the protocol's, not the machine's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import reconfig


def test_three_changes_finish_and_each_stall_is_measured_per_region() -> None:
    result = reconfig.run(1, quick=True)
    assert [c.name for c in result.changes] == [
        "add a replica (3 -> 4)",
        "replace the sequencer's node",
        "remove a member (4 -> 3)",
    ]
    for change in result.changes:
        assert change.proposed_ms < change.done_ms
        assert set(change.stall_ms) == set(change.baseline_ms) == {0, 1, 2}
        assert all(v > 0 for v in change.stall_ms.values())
    replace = result.changes[1]
    # The next epoch names its sequencer: no election, so well within its bound.
    assert replace.worst_extra_ms <= replace.bound_ms
    assert replace.bound_ms == result.rtt_ms + result.election_ms


@pytest.mark.parametrize("rtt_ms", [60.0, 100.0])
def test_every_change_meets_the_issues_goal_in_virtual_time(rtt_ms: float) -> None:
    """Adding a fourth member or removing one stalls a region by at most one
    round trip more than before the change; replacing the sequencer's node by
    at most an election and a round trip. Three rules make the seam this short
    (``docs/membership.md`` section 6): phase-2 quorums of two at N = 4, an
    acceptor learning a C-instance chosen as it accepts it, and the sequencer's
    own C-accepts sent to every member with the stop. Deterministic (virtual
    time, one seed): these are the protocol's round trips, not the machine's."""
    result = reconfig.run(1, rtt_ms=rtt_ms, quick=True)
    extra = {c.name: c.worst_extra_ms for c in result.changes}
    assert result.goals_met, extra
    assert extra["add a replica (3 -> 4)"] <= rtt_ms
    assert extra["remove a member (4 -> 3)"] <= rtt_ms


def test_the_command_writes_its_table_json_and_plot(tmp_path: Path) -> None:
    assert reconfig.main(["--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["changes"]) == 3 and isinstance(data["goals_met"], bool)
    assert "| replace the sequencer's node |" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "reconfig.png").stat().st_size > 0


def test_a_bad_round_trip_is_a_clear_error(capsys: object) -> None:
    with pytest.raises(SystemExit) as exc:
        reconfig.main(["--rtt-ms", "0"])
    assert exc.value.code == 2
