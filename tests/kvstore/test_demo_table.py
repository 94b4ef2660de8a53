"""The demo's table puts the protocol's promise beside what the clients saw."""

from __future__ import annotations

from kvstore.demo import _table, commit_formula_ms


def test_the_formula_is_the_papers_for_paper3_and_absent_without_a_profile() -> None:
    assert commit_formula_ms("paper3", 3) == {"CA": 20.0, "OR": 20.0, "OH": 52.0}
    assert commit_formula_ms("paper5", 5)["IRE"] == 139.0
    assert commit_formula_ms("none", 3) == {}
    assert commit_formula_ms("paper5", 3) == {}  # only some regions: no claim


def test_the_table_shows_formula_write_read_and_errors_per_region() -> None:
    row = {
        "region": "OR",
        "commit_formula_ms": 20.0,
        "write_p50_ms": 23.5,
        "write_mean_ms": 25.0,
        "write_p99_ms": 61.0,
        "read_mean_ms": 22.0,
        "read_p99_ms": 40.0,
        "operations": 900,
        "ops_per_s": 30.0,
        "errors": 7,
    }
    lines = _table([row]).splitlines()
    head, values = lines[0].split(), lines[1].split()
    assert " ".join(head[:3]) == "region commit formula"
    assert values[:3] == ["OR", "20.0", "23.5"] and values[-1] == "7"
    assert "commit formula" in lines[-1] and "errors" in lines[-1]
