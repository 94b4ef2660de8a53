"""``python -m bench``: workloads, the CPU-time wrapper, the CLI and one tiny latency run.

Small on purpose (CI's budget): the latency run is one profile, one client per
region, one simulated second. Nothing here asserts a wall-clock duration or a
rate; the latency check is against virtual time, which is exact.
"""

from __future__ import annotations

import itertools
import json
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

from bench import __main__ as cli
from bench.cputime import CpuMeter, TimedCodec, TimedReplica
from bench.engines import protocol_status
from bench.experiments import latency
from bench.workloads import HOT_KEY, OpStream, Workload, arrivals_us, history_lines
from sdpaxos import protocols
from sdpaxos.check.formats import parse_jsonl
from sdpaxos.profiles import PAPER3, PAPER5, DelayProfile

OPS = 4000


def test_conflict_share_is_the_hot_key_share_and_other_keys_are_unique() -> None:
    ops = OpStream(Workload(conflict_pct=25.0, seed=3), stream=0).take(OPS)
    hot = sum(op.key == HOT_KEY for op in ops)
    assert 0.22 * OPS < hot < 0.28 * OPS
    others = [op.key for op in ops if op.key != HOT_KEY]
    assert len(set(others)) == len(others)
    assert not any(op.kind == "read" for op in ops)
    assert not any(op.key == HOT_KEY for op in OpStream(Workload(), 0).take(500))


def test_read_share_and_payload_size() -> None:
    ops = OpStream(Workload(read_pct=75.0, payload_bytes=1024, seed=5), stream=2).take(OPS)
    reads = sum(op.kind == "read" for op in ops)
    assert 0.72 * OPS < reads < 0.78 * OPS
    assert {len(op.payload) for op in ops if op.kind == "write"} == {1024}


def test_zipf_keys_are_skewed_and_uniform_keys_are_not() -> None:
    zipf = Counter(op.key for op in OpStream(Workload(keys="zipf", key_count=1000), 0).take(OPS))
    flat = Counter(op.key for op in OpStream(Workload(keys="uniform", key_count=1000), 0).take(OPS))
    # Zipf 0.99 over 1,000 keys: rank 0 has about 13 % of the draws, the top 10 about 39 %.
    assert 0.10 * OPS < zipf[b"k0"] < 0.16 * OPS
    assert sum(c for _, c in zipf.most_common(10)) > 0.3 * OPS
    assert flat.most_common(1)[0][1] < 0.01 * OPS


def test_streams_are_reproducible_from_their_seed() -> None:
    w = Workload(conflict_pct=5.0, read_pct=50.0, keys="zipf", key_count=100, seed=7)
    assert OpStream(w, 4).take(200) == OpStream(w, 4).take(200)
    assert OpStream(w, 4).take(200) != OpStream(w, 5).take(200)
    other = Workload(conflict_pct=5.0, read_pct=50.0, keys="zipf", key_count=100, seed=8)
    assert OpStream(w, 4).take(200) != OpStream(other, 4).take(200)
    a = list(arrivals_us(100.0, 0, 10_000_000, poisson=True, rng=random.Random(1)))
    assert a == list(arrivals_us(100.0, 0, 10_000_000, poisson=True, rng=random.Random(1)))
    assert 900 < len(a) < 1100 and a == sorted(a)
    fixed = list(arrivals_us(100.0, 0, 1_000_000, poisson=False, rng=random.Random(1)))
    gaps = {b - a for a, b in itertools.pairwise(fixed)}
    assert len(fixed) == 100 and gaps <= {9_999, 10_000, 10_001}


class _Inner:
    """A replica of no protocol: counts what reached it."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.view = 3

    def propose(self, command: object, wait: object = None) -> None:
        self.seen.append("propose")

    def step(self, message: object, now_ms: float) -> None:
        self.seen.append("step")

    def tick(self, now_ms: float) -> None:
        self.seen.append("tick")

    def ready(self) -> str:
        self.seen.append("ready")
        return "batch"

    def observe_rtt(self, peer: object, rtt_ms: float) -> None:
        pass


class _Codec:
    def encode_batch(self, messages: list[object]) -> bytes:
        return b"x" * len(messages)

    def decode_batch(self, data: bytes) -> list[object]:
        return list(data)


def test_cpu_wrapper_counts_and_charges_every_call() -> None:
    ticks = iter(range(1000))
    meter = CpuMeter(2, clock=lambda: float(next(ticks)))  # every call "takes" 1 s
    inner = [_Inner(), _Inner()]
    reps = [TimedReplica(inner[i], i, meter) for i in range(2)]
    codec = TimedCodec(_Codec(), meter)
    reps[0].propose("c")
    assert reps[0].ready() == "batch"
    codec.encode_batch(["m1", "m2"])  # charged to replica 0: its ready() ran last
    decoded = codec.decode_batch(b"ab")  # held until a replica steps it
    for message in decoded:
        reps[1].step(message, 0.0)
    reps[1].tick(0.0)
    assert inner[0].seen == ["propose", "ready"]
    assert inner[1].seen == ["step", "step", "tick"]
    assert meter.calls[0] == {**meter.calls[0], "propose": 1, "ready": 1, "encode": 1}
    assert meter.calls[1]["step"] == 2 and meter.calls[1]["decode"] == 1
    assert meter.calls[1]["tick"] == 1 and meter.calls[0]["decode"] == 0
    assert meter.total_s(0) == 3.0 and meter.total_s(1) == 4.0
    assert reps[0].view == 3  # other attributes are the inner replica's
    assert getattr(reps[0], "read", None) is None  # no read path: none appears
    meter.reset()
    assert meter.total_s(0) == 0.0 and meter.calls[1]["step"] == 0


def test_help_lists_every_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for name in ("latency", "throughput", "straggler", "failover", "report", "--quick", "--engine"):
        assert name in text


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["throughput", "--fsync", "--quiet"]) == 2  # the simulator has no disk
    assert "--fsync is for --engine runtime" in capsys.readouterr().err
    assert cli.main(["latency", "--protocols", "raft"]) == 2


def _hide_multipaxos(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the Multi-Paxos module were not merged: importing it fails."""
    monkeypatch.setitem(sys.modules, "sdpaxos.baselines.multipaxos", None)
    monkeypatch.delitem(protocols._CACHE, "multipaxos", raising=False)


def test_a_protocol_whose_module_is_missing_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_multipaxos(monkeypatch)
    why = protocol_status("multipaxos")
    assert why is not None and why.startswith("not built")
    assert protocol_status("sdpaxos") is None


def test_tiny_latency_run_writes_its_files_and_meets_the_formula(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hide_multipaxos(monkeypatch)
    monkeypatch.setattr(latency, "PROFILES", (PAPER3,))
    monkeypatch.setattr(latency, "QUICK", latency.Settings(1, 20.0, 100.0, 1_000.0))
    args = ["latency", "--quick", "--quiet", "--out", str(tmp_path)]
    assert cli.main([*args, "--protocols", "sdpaxos,multipaxos"]) == 0
    result = json.loads((tmp_path / "results.json").read_text())
    prof = result["profiles"]["paper3"]
    for region, want in {"CA": 20.0, "OR": 20.0, "OH": 52.0}.items():
        got = prof["commit"]["SDPaxos"]["regions"][region]
        assert got["count"] > 5
        assert got["mean_ms"] == pytest.approx(want, rel=0.05)
    assert not prof["formula_check"]["flagged"]
    assert prof["commit"]["Multi-Paxos"]["status"].startswith("not built")
    assert prof["reads"]["SDPaxos 1:1 uniform"]["regions"]["CA"]["count"] > 5
    markdown = (tmp_path / "results.md").read_text()
    assert "| CA | 20.0 / 20.0 / 20.0 | not built |" in markdown
    assert (tmp_path / "latency_paper3.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    history = (tmp_path / "history.jsonl").read_text()
    loaded = parse_jsonl(history)
    assert len(loaded.history) == len(history.splitlines()) > 20


def test_latency_on_your_own_matrix_and_sequencer(tmp_path: Path) -> None:
    """``--profile FILE.json --sequencer REGION``: a deployment of one's own,
    judged against the formula for that matrix (``sdpaxos_commit_ms``)."""
    matrix = {
        "name": "mine",
        "regions": ["east", "west", "south"],
        "rtt_ms": [[0.5, 60, 30], [60, 0.5, 80], [30, 80, 0.5]],
    }
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(matrix))
    out = tmp_path / "out"
    args = ["latency", "--quick", "--quiet", "--out", str(out), "--protocols", "sdpaxos"]
    assert cli.main([*args, "--profile", str(path), "--sequencer", "west"]) == 0
    result = json.loads((out / "results.json").read_text())
    assert list(result["profiles"]) == ["mine"]
    prof = result["profiles"]["mine"]
    assert prof["sequencer"] == "west" and not prof["paper_figures"]
    # west is the sequencer: its nearest peer is east (60); east: max(30, 60);
    # south: max(30 to east, 80 to the sequencer).
    want = {"east": 60.0, "west": 60.0, "south": 80.0}
    rows = prof["formula_check"]["rows"]
    assert {r: rows[r]["formula_ms"] for r in want} == want
    for region, ms in want.items():
        assert prof["commit"]["SDPaxos"]["regions"][region]["mean_ms"] == pytest.approx(
            ms, rel=0.05
        )
    assert not prof["formula_check"]["flagged"]
    markdown = (out / "results.md").read_text()
    assert "Sequencer / leader: mine west." in markdown and "Fig. 13" not in markdown


def test_the_imbalanced_region_is_the_papers_or_the_last_but_the_sequencers() -> None:
    assert latency.imbalanced_region(PAPER5, 0) == PAPER5.index("IRE")
    assert latency.imbalanced_region(PAPER3, 0) == PAPER3.index("OH")
    mine = DelayProfile.from_lists("mine", ["a", "b", "c"], [[1, 9, 9], [9, 1, 9], [9, 9, 1]])
    assert latency.imbalanced_region(mine, 0) == 2
    assert latency.imbalanced_region(mine, 2) == 1
    # The paper's regions under another name are not the paper's profile.
    renamed = DelayProfile.from_lists("paper3", ["x", "y", "z"], [[1, 9, 9], [9, 1, 9], [9, 9, 1]])
    assert latency.imbalanced_region(renamed, 0) == 2


def test_latency_refuses_a_bad_profile_or_sequencer(tmp_path: Path) -> None:
    args = ["latency", "--quick", "--quiet", "--out", str(tmp_path)]
    assert cli.main([*args, "--profile", "paper9"]) == 2
    assert cli.main([*args, "--profile", str(tmp_path / "missing.json")]) == 2
    assert cli.main([*args, "--sequencer", "MARS"]) == 2
    assert cli.main([*args, "--profile", "paper3", "--profile", "paper3"]) == 2
    assert cli.main(["throughput", "--quick", "--profile", "paper3"]) == 2
    assert not any(tmp_path.iterdir())  # nothing was run or written


def test_history_lines_mark_open_operations_info() -> None:
    from bench.workloads import OpRecord

    done = OpRecord(0, 1, "CA", "write", b"k", 10, 30, value="v")
    open_read = OpRecord(1, 2, "OR", "read", b"k", 20, None, path="local")
    lines = [json.loads(line) for line in history_lines([open_read, done])]
    assert lines[0]["input"] == ["put", "k", "v"] and lines[0]["status"] == "ok"
    assert lines[1]["input"] == ["get", "k"] and lines[1]["status"] == "info"
    assert "output" not in lines[1]


def test_formula_check_flags_a_region_more_than_5_percent_off() -> None:
    def cell(ca_ms: float) -> dict[str, object]:
        return {
            "regions": {"CA": {"mean_ms": ca_ms}, "OR": {"mean_ms": 20.0}, "OH": {"mean_ms": 52.0}}
        }

    assert not latency._formula_check(PAPER3, cell(20.9))["flagged"]  # +4.5 %
    check = latency._formula_check(PAPER3, cell(21.1))  # +5.5 %
    assert check["flagged"] and not check["rows"]["CA"]["within_5pct"]
    assert not latency._formula_check(PAPER3, None)["flagged"]  # SDPaxos not run: nothing to flag


def test_epaxos_runs_in_the_sim_engine_without_a_checker_violation() -> None:
    """EPaxos leaves commands on different keys unordered, so the simulator runs
    a per-key state machine; the engine must name each command's key in its
    payload, or results differ between replicas and the checker flags a
    (false) divergence on every run."""
    from bench.engines import Clients, RunSpec, SimEngine

    spec = RunSpec(
        protocol="epaxos",
        profile=PAPER3,
        workload=Workload(conflict_pct=50.0, read_pct=50.0, seed=3),
        clients=Clients("open", (2, 2, 2), rate_per_s=50.0),
        duration_ms=1_000.0,
        warmup_ms=100.0,
    )
    out = SimEngine().run(spec)
    assert out.ok, out.verdict
    done = [r for r in out.records if r.complete_us is not None]
    assert len(done) > 100
    assert {r.kind for r in done} == {"read", "write"}
