"""The runtime throughput benchmark in its smallest mode: it runs, the nodes agree, the
JSON has its keys. Never asserts a rate: that depends on the machine."""

import json
import os

import pytest

from bench import runtime_throughput as rt
from bench.runtime_throughput import CrcLog


def test_cpu_seconds_of_this_process_grows() -> None:
    before = rt.cpu_seconds(os.getpid())
    sum(range(2_000_000))
    assert rt.cpu_seconds(os.getpid()) >= before
    busy, total = rt.machine_cpu()
    assert 0 <= busy <= total


def test_split_spreads_evenly() -> None:
    assert rt._split(10, 3) == [4, 3, 3]
    assert sum(rt._split(3001, 2)) == 3001


def test_crc_app_snapshot_round_trips() -> None:
    app = CrcLog()
    for k in range(5):
        app.apply(bytes([k]) * 16)
    other = CrcLog()
    other.restore(app.snapshot())
    assert other.query(b"") == app.query(b"")
    assert len(app.query(b"")) == 40 and int.from_bytes(app.query(b"")[:8], "big") == 5


@pytest.mark.parametrize("load", ["raw", "client", "batch"])
def test_smallest_run_agrees_and_reports(load: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--insecure", "--no-fsync-only", "--json", "--load", load]
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
