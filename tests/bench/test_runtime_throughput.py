"""The runtime throughput benchmark in its smallest mode: it runs, the nodes agree, the
JSON has its keys. Never asserts a rate: that depends on the machine."""

import asyncio
import json
import os
import random
from typing import Any

import msgpack
import pytest

from bench import runtime_throughput as rt
from bench.raw_load import Load, op_source
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


class _Wire:
    """A transport that keeps what the loader writes, as decoded frames."""

    def __init__(self) -> None:
        self.frames: list[Any] = []

    def write(self, data: bytes) -> None:
        at = 0
        while at < len(data):
            size = int.from_bytes(data[at : at + 4], "big")
            self.frames.append(msgpack.unpackb(data[at + 5 : at + 4 + size]))
            at += 4 + size

    def is_closing(self) -> bool:
        return False


@pytest.mark.parametrize("batch", [True, False])
def test_the_raw_loader_sends_submit_many_or_one_submit_each_and_no_empty_batch(
    batch: bool,
) -> None:
    """--load batch: the submits of one flush in one SUBMIT_MANY (14); --load raw:
    one SUBMIT (10) each; a flush of reads alone sends no empty SUBMIT_MANY (a node
    closes the connection that sends one)."""

    async def run() -> list[Any]:
        load = Load(random.Random(1), batch)
        wire = _Wire()
        load.transport = wire  # type: ignore[assignment]
        spec = {"clients": [0, 1, 2], "mode": "closed", "read_path": "local", "end_us": None}
        load.begin({**spec, "workload": Workload(seed=1).to_json(), "keys": False})
        for client in load.clients:
            load.issue(client, 0)
        load._flush()
        load.begin({**spec, "workload": Workload(read_pct=100.0, seed=1).to_json()})
        load.issue(load.clients[0], 0)
        load._flush()
        return wire.frames

    frames = asyncio.run(run())
    kinds = [f[0] for f in frames]
    assert kinds == ([14, 11] if batch else [10, 10, 10, 11])
    if batch:
        assert len(frames[0][1]) == 3 and all(item[4] is None for item in frames[0][1])
