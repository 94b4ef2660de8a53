"""The runtime throughput benchmark in its smallest mode: it runs, the nodes agree, the
JSON has its keys. Never asserts a rate: that depends on the machine."""

import json
import os

import pytest

from bench import runtime_throughput as rt
from bench.raw_load import op_source
from bench.runtime_app import BenchLog
from bench.runtime_throughput import CrcLog
from bench.workloads import OpStream, Workload


def test_cpu_seconds_of_this_process_grows() -> None:
    before = rt.cpu_seconds(os.getpid())
    sum(range(2_000_000))
    assert rt.cpu_seconds(os.getpid()) >= before
    busy, total = rt.machine_cpu()
    assert 0 <= busy <= total


def test_split_spreads_evenly() -> None:
    assert rt._split(10, 3) == [4, 3, 3]
    assert sum(rt._split(3001, 2)) == 3001


def test_crc_log_names_the_bench_log_and_either_app_s_answer_is_read() -> None:
    """``--app bench.runtime_throughput:CrcLog`` (bench/README.md) runs the one
    bench state machine; the digest check reads its answer (count, sum, chains)
    as it reads the digest app's (count, BLAKE2b chain)."""
    assert CrcLog is BenchLog
    app = CrcLog()
    for k in range(5):
        app.apply(bytes([k]) * 16)
    other = CrcLog()
    other.restore(app.snapshot())
    assert rt.digest_of(other.query(b"")) == rt.digest_of(app.query(b""))
    assert rt.digest_of(app.query(b""))[0] == 5
    digest_app = (7).to_bytes(8, "big") + b"\xab" * 32
    assert rt.digest_of(digest_app) == (7, "ab" * 32)
    with pytest.raises(ValueError, match="not an answer"):
        rt.digest_of(b"short")


@pytest.mark.parametrize(
    ("load", "app"),
    [
        ("raw", "digest"),
        ("client", "digest"),
        ("batch", "digest"),
        ("batch", "bench.runtime_throughput:CrcLog"),
    ],
)
def test_smallest_run_agrees_and_reports(
    load: str, app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--insecure", "--no-fsync-only", "--json", "--load", load, "--app", app]
    argv += ["--commands", "2000", "--seconds", "60", "--warmup", "0.3", "--outstanding", "60"]
    assert rt.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["settings"]["replicas"] == 3
    assert out["settings"]["payload_bytes"] == 16
    [res] = out["results"]
    for key in (
        "fsync",
        "committed_per_s",
        "node_cpu_s_per_1000",
        "loader_cpu_s_per_1000",
        "commands_per_cpu_s",
        "machine_busy",
        "fsyncs_per_s",
        "executed",
        "digests",
        "agree",
    ):
        assert key in res
    assert res["fsync"] is False
    assert res["agree"] and res["problems"] == []
    assert res["committed"] >= 2000
    assert len(res["node_cpu_s_per_1000"]) == 3
    assert len(set(res["digests"])) == 1
    assert res["executed"] == [res["answered_total"]] * 3


def test_the_loader_s_plain_writes_are_op_stream_s_ops() -> None:
    """The load generator spells a write-only, conflict-free workload's operations
    without OpStream's draws (cheaper per command): they must be OpStream's."""
    for workload in (Workload(payload_bytes=16, seed=1), Workload(payload_bytes=1024, seed=7)):
        for stream in (0, 17, 2999):
            ops = OpStream(workload, stream)
            source = op_source(workload, stream)
            for _ in range(1000):
                op = ops.next()
                assert source() == (op.kind, op.key, op.payload)
    drawn = Workload(conflict_pct=5.0, read_pct=10.0, seed=3)  # drawn: OpStream's own
    ops, source = OpStream(drawn, 4), op_source(drawn, 4)
    assert [source() for _ in range(200)] == [(o.kind, o.key, o.payload) for o in ops.take(200)]
