"""bench.runtime_latency's judgement, without node processes: every built-in
profile of up to five regions is judged against SDPaxos's formula for it
(paper3 was once judged against nothing and printed that every region was
within 5 %), and a profile without one says it was not judged."""

from bench import paper
from bench.runtime_latency import region_rows, verdict


def _result(profile: str, node_means: dict[str, float]) -> dict[str, object]:
    regions = list(node_means)
    samples = [([m + 1.0, m + 1.5], m) for m in node_means.values()]
    return {"profile": profile, "fsync": False, "rows": region_rows(profile, regions, samples)}


def test_paper3_is_judged_against_its_formula() -> None:
    assert paper.FORMULA_MS["paper3"] == {"CA": 20.0, "OR": 20.0, "OH": 52.0}
    over = _result("paper3", {"CA": 21.6, "OR": 21.6, "OH": 53.7})
    assert [r["within_5pct"] for r in over["rows"]] == [False, False, True]
    message, code = verdict(over)
    assert code == 1 and "OFF BY MORE THAN 5 %" in message and "fsync off" in message
    within = _result("paper3", {"CA": 20.9, "OR": 20.5, "OH": 53.0})
    assert verdict(within) == ("every region within 5 % of the formula (fsync off)", 0)


def test_paper5_rows_carry_the_formula_and_the_ratio() -> None:
    result = _result("paper5", {"CA": 53.7, "OR": 69.1, "OH": 69.2, "IRE": 140.2, "SEL": 147.3})
    rows = {r["region"]: r for r in result["rows"]}
    assert rows["CA"]["formula_ms"] == 52.0 and rows["CA"]["ratio"] == 1.033
    assert rows["SEL"]["client_mean_ms"] == 148.55
    assert verdict(result)[1] == 0


def test_any_built_in_profile_of_up_to_five_regions_is_judged() -> None:
    """uniformN: every round trip 100 ms, so every region's formula is 100 ms."""
    result = _result("uniform3", {"R0": 100.9, "R1": 101.2, "R2": 106.0})
    assert [r["formula_ms"] for r in result["rows"]] == [100.0, 100.0, 100.0]
    assert [r["within_5pct"] for r in result["rows"]] == [True, True, False]
    assert verdict(result)[1] == 1


def test_a_profile_without_a_formula_is_not_judged_and_says_so() -> None:
    result = _result("uniform7", {f"R{i}": 150.0 for i in range(7)})
    assert all(r["within_5pct"] is None and r["formula_ms"] is None for r in result["rows"])
    message, code = verdict(result)
    assert code == 0 and message.startswith("no formula for profile 'uniform7'")
