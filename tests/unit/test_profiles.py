import json
from pathlib import Path

import pytest

from sdpaxos.core import ClusterConfig
from sdpaxos.profiles import (
    PAPER3,
    PAPER5,
    DelayProfile,
    ProfileError,
    builtin,
    load_json,
    uniform,
)


def test_paper5_is_table_1() -> None:
    assert PAPER5.regions == ("CA", "OR", "OH", "IRE", "SEL")
    i = PAPER5.index
    assert PAPER5.rtt_ms[i("CA")][i("OR")] == 20
    assert PAPER5.rtt_ms[i("OH")][i("SEL")] == 197
    assert PAPER5.rtt_ms[i("IRE")][i("SEL")] == 229
    assert PAPER5.rtt_ms[i("OR")][i("OR")] == 0.02
    # one-way = RTT / 2, in integer microseconds
    assert PAPER5.one_way_us(i("CA"), i("IRE")) == 69_500
    assert PAPER5.one_way_us(i("IRE"), i("CA")) == 69_500
    assert PAPER5.client_rtt_us(i("CA")) == 1_160


def test_paper3_is_the_first_three_regions() -> None:
    assert PAPER3.regions == ("CA", "OR", "OH")
    assert PAPER3.rtt_ms == tuple(r[:3] for r in PAPER5.rtt_ms[:3])
    assert builtin("paper3") is PAPER3 and builtin("paper5") is PAPER5


def test_configured_proximity_matrix_fits_cluster_config() -> None:
    rtt = PAPER5.replica_rtt_ms()
    assert all(rtt[i][i] == 0.0 for i in range(5))
    assert rtt[0][1] == 20
    ClusterConfig(replicas=5, rtt_ms=rtt)  # validates shape and signs


def test_subset_and_index() -> None:
    sub = PAPER5.subset(["OH", "CA", "SEL"])
    assert sub.regions == ("OH", "CA", "SEL")
    assert sub.rtt_ms[0][1] == 52 and sub.rtt_ms[1][2] == 146
    assert PAPER5.index("2") == 2
    with pytest.raises(ProfileError, match="unknown region 'XX'"):
        PAPER5.index("XX")
    with pytest.raises(ProfileError, match="twice"):
        PAPER5.subset(["CA", "CA"])


def test_uniform() -> None:
    u = builtin("uniform7")
    assert u.size == 7 and u.rtt_ms[0][6] == 100.0
    assert uniform(3, 40.0).one_way_us(0, 1) == 20_000
    with pytest.raises(ProfileError, match="unknown profile"):
        builtin("paper4")


@pytest.mark.parametrize(
    ("regions", "rtt", "message"),
    [
        (["A", "B"], [[0, 1]], "must have 2 rows"),
        (["A", "B"], [[0, 1], [1]], r"row 1 \(B\) must have 2 entries"),
        (["A", "B"], [[0, -1], [-1, 0]], r"rtt_ms\[A\]\[B\] must be finite and >= 0"),
        (["A", "B"], [[0, "x"], ["x", 0]], "must be a number"),
        (["A", "B"], [[0, 1], [2, 0]], "must be symmetric: A->B is 1.0 but B->A is 2.0"),
        (["A", "A"], [[0, 1], [1, 0]], "duplicate region names: A"),
        ([], [], "needs 1..256 regions"),
        ("AB", [[0]], "regions must be a list"),
    ],
)
def test_bad_matrices_are_rejected_clearly(regions: object, rtt: object, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        DelayProfile.from_lists("t", regions, rtt)  # type: ignore[arg-type]


def test_asymmetric_paths_via_one_way_override() -> None:
    p = DelayProfile.from_lists("t", ["A", "B"], [[0, 10], [10, 0]], [[0, 2], [8, 0]])
    assert p.one_way_us(0, 1) == 2_000 and p.one_way_us(1, 0) == 8_000


def test_load_json(tmp_path: Path) -> None:
    f = tmp_path / "m.json"
    f.write_text(
        json.dumps({"regions": ["X", "Y", "Z"], "rtt_ms": [[1, 2, 3], [2, 1, 4], [3, 4, 1]]})
    )
    p = load_json(f)
    assert p.name == "m" and p.regions == ("X", "Y", "Z") and p.one_way_us(1, 2) == 2_000
    f.write_text("{not json")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_json(f)
    f.write_text(json.dumps({"regions": ["X"], "rtt_ms": [[1]], "rtt": 3}))
    with pytest.raises(ProfileError, match="unknown keys rtt"):
        load_json(f)
    f.write_text(json.dumps({"regions": ["X"]}))
    with pytest.raises(ProfileError, match="lacks 'rtt_ms'"):
        load_json(f)
    with pytest.raises(ProfileError, match="cannot read"):
        load_json(tmp_path / "missing.json")
