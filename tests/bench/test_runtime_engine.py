"""``--engine runtime``: real node processes, kept tiny (3 nodes on a LAN profile,
about a second of load each). What is asserted is behaviour: every operation
recorded with times that make sense, reads on the path the protocol has, a killed
leader seen as a stall and replaced, a slowed node slowed, no process left
behind, and clear refusals. No rate or duration is asserted; the one comparison
of speeds (a throttled process against a free one) is a ratio taken in one run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench import __main__ as cli
from bench.common import Context
from bench.engines import Clients, EngineUnsupported, RunOutput, RunSpec
from bench.runtime_app import HOT_MARK, BenchLog, parse_query
from bench.runtime_engine import RuntimeEngine, agree, believed_leaders, check, read_path
from bench.runtime_procs import DutyCycle, cpu_seconds, cpu_seconds_fine, stop_processes
from bench.workloads import HOT_KEY, Workload
from sdpaxos.profiles import uniform

LAN3 = uniform(3, 0.2, local_rtt_ms=0.1, name="lan3")
#: Fast failure detection on loopback, as the runtime's own tests use.
FAST = {"heartbeat_ms": 100.0, "lease_ms": 300.0}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _all_gone(out: RunOutput) -> None:
    pids = out.extra["node_pids"] + out.extra["loader_pids"]
    assert pids and all(_gone(p) for p in pids), pids


def _spec(**kw: Any) -> RunSpec:
    base: dict[str, Any] = {
        "protocol": "sdpaxos",
        "profile": LAN3,
        "workload": Workload(seed=3),
        "clients": Clients("closed", (3, 3, 3)),
        "duration_ms": 800.0,
        "warmup_ms": 200.0,
    }
    base.update(kw)
    return RunSpec(**base)


def test_every_operation_is_recorded_with_sane_times_and_reads_take_their_path() -> None:
    """Multi-Paxos serves reads at its leader only: node 0's reads are local, the
    others' go through the log; writes commit. Every operation issued is one record,
    complete after it was invoked; the nodes agree; CPU is measured; nothing is left."""
    spec = _spec(
        protocol="multipaxos",
        workload=Workload(read_pct=50.0, keys="uniform", key_count=100, seed=3),
    )
    with RuntimeEngine() as engine:
        out = engine.run(spec)
    assert out.ok, out.verdict
    loaders = out.extra["loaders"]
    assert len(out.records) == sum(ld["sent"] for ld in loaders.values()) > 50
    end_us = spec.window_us[1]
    for rec in out.records:
        assert 0 <= rec.invoke_us < end_us
        assert rec.complete_us is not None and rec.invoke_us < rec.complete_us
        assert rec.kind in ("write", "read")
    assert [r.op_id for r in out.records] == list(range(len(out.records)))
    paths = {(r.region, r.kind, r.path) for r in out.records}
    assert paths == {
        ("R0", "write", "commit"),
        ("R1", "write", "commit"),
        ("R2", "write", "commit"),
        ("R0", "read", "local"),
        ("R1", "read", "log"),
        ("R2", "read", "log"),
    }
    # ... directly: no read was refused by a read path and sent through the log after.
    assert all(ld["fallbacks"] == 0 for ld in loaders.values())
    clients = {(r.region, r.client) for r in out.records}
    assert len(clients) == 9  # closed loop: three clients per region, one at a time each
    verify = out.extra["verify"]
    assert verify["ok"] and verify["nodes"] == [0, 1, 2]
    commands = sum(1 for r in out.records if r.path != "local")
    assert verify["executed"] == commands  # every write and log read, nothing else
    cpu = out.extra["cpu"]
    assert len(cpu["node_cpu_s"]) == 3 and all(c >= 0 for c in cpu["node_cpu_s"])
    assert set(cpu["loader_cpu_s"]) == {"R0", "R1", "R2"}
    assert 0 < cpu["completed_in_window"] <= len(out.records)
    _all_gone(out)


def test_read_paths_follow_the_protocol() -> None:
    assert [read_path("sdpaxos", k, 0) for k in range(3)] == ["local"] * 3
    assert [read_path("multipaxos", k, 1) for k in range(3)] == ["log", "local", "log"]
    assert read_path("mencius", 0, 0) == read_path("epaxos", 0, 0) == "log"


def test_a_killed_leader_is_a_stall_and_is_replaced() -> None:
    """SDPaxos, clients at nodes 1 and 2, the sequencer (node 0) SIGKILLed: the
    survivors' operations stall, then go on under a new sequencer."""
    kill_ms = 500.0
    spec = _spec(
        clients=Clients("closed", (0, 3, 3)),
        duration_ms=2_000.0,
        warmup_ms=0.0,
        kill=(0, kill_ms),
        config_overrides=FAST,
        sample_ms=50.0,
    )
    with RuntimeEngine() as engine:
        out = engine.run(spec)
    assert out.ok, out.verdict
    assert out.extra["killed"] == [0]
    assert out.extra["verify"]["nodes"] == [1, 2] and out.extra["verify"]["ok"]
    kill_us = round(kill_ms * 1000)
    done = sorted(r.complete_us for r in out.records if r.complete_us is not None)
    assert any(t < kill_us for t in done) and any(t > kill_us for t in done)
    after = [t for t in done if t >= kill_us]
    gaps = [b - a for a, b in zip([kill_us, *after], after, strict=False)]
    assert max(gaps) >= 100_000  # nothing completed for at least 100 ms after the kill
    moved = [lead for t, lead in out.leader_samples if t > kill_us and lead not in (None, 0)]
    assert moved and moved[-1] in (1, 2)
    _all_gone(out)


def test_a_slowed_node_is_slowed() -> None:
    """A duty cycle leaving node 1 a third of the wall clock: its region
    completes far fewer operations than node 2's (same role, same clients).

    Thrifty quorums are off: with them, equal LAN round trips are broken in
    ring order, so the sequencer (node 0) sends its O-accepts to node 1 alone
    and node 2's commands waited on the slowed node too until the measured
    round trips moved the quorum (R2 completed 567 to 3,099 operations in six
    runs, and once only 1.13x R1's). Sent to every peer, an accept needs
    whichever answers first, and only node 1's own clients wait for it."""
    spec = _spec(slow=(1, 3.0, 0.0), duration_ms=1_000.0, config_overrides={"thrifty": False})
    with RuntimeEngine() as engine:
        out = engine.run(spec)
    assert out.ok, out.verdict
    assert out.extra["slow"]["replica"] == 1 and out.extra["slow"]["stops"] > 10
    start_us, end_us = spec.window_us
    per_region = {
        region: sum(
            1
            for r in out.records
            if r.region == region
            and r.complete_us is not None
            and start_us <= r.complete_us < end_us
        )
        for region in ("R1", "R2")
    }
    assert 0 < per_region["R1"] < 0.6 * per_region["R2"], per_region
    _all_gone(out)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return text[text.rindex(")") + 2]


def test_a_duty_cycle_stops_a_process_two_thirds_of_the_time_and_then_lets_it_go() -> None:
    """The straggler's mechanism alone, seen from /proc: sampled through the
    cycle, a process slowed to a third is stopped (state T) about two thirds of
    the samples; after stop() it runs again."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        duty = DutyCycle(proc.pid, 3.0)
        duty.start()
        states = []
        for _ in range(400):
            states.append(_state(proc.pid))
            time.sleep(0.0023)  # not a divisor of the 9 ms period: samples drift through it
        duty.stop()
        stopped = states.count("T") / len(states)
        assert duty.stops > 20
        assert 0.4 < stopped < 0.9, stopped
        assert _state(proc.pid) != "T"
    finally:
        stop_processes([proc], timeout_s=2.0)
    assert proc.poll() is not None


def test_fine_cpu_time_agrees_with_the_ticks_and_grows() -> None:
    """A busy child's CPU by schedstat (ns) and by stat's ticks (10 ms) agree."""
    code = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        first = cpu_seconds_fine(proc.pid)
        time.sleep(0.3)
        fine, ticks = cpu_seconds_fine(proc.pid), cpu_seconds(proc.pid)
        assert fine > first
        assert abs(fine - ticks) < 0.05, (fine, ticks)
    finally:
        stop_processes([proc], timeout_s=2.0)
    with pytest.raises(ProcessLookupError):
        cpu_seconds_fine(proc.pid)


def test_ctrl_c_during_a_run_leaves_no_process() -> None:
    pids: list[int] = []

    def progress(message: str) -> None:
        if "ops completed" in message:
            raise KeyboardInterrupt

    engine = RuntimeEngine()
    runner = engine._runner
    original = runner._wait_loaders

    def spy(spec: RunSpec, loaders: list[Any], *rest: Any) -> None:
        assert runner.cluster is not None
        pids.extend(p for p in runner.cluster.pids if p is not None)
        pids.extend(ld.lines.proc.pid for ld in loaders)
        original(spec, loaders, *rest)

    runner._wait_loaders = spy  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        engine.run(_spec(duration_ms=30_000.0), progress=progress)
    assert len(pids) == 6 and all(_gone(p) for p in pids), pids
    assert runner.cluster is None


def test_what_the_runtime_cannot_run_is_refused_clearly() -> None:
    with pytest.raises(EngineUnsupported, match="processing_us is the simulator's CPU model"):
        check(_spec(processing_us=100))
    with pytest.raises(EngineUnsupported, match="kill: no replica 3 in a cluster of 3"):
        check(_spec(kill=(3, 100.0)))
    with pytest.raises(EngineUnsupported, match="slow: factor must be >= 1"):
        check(_spec(slow=(1, 0.5, 0.0)))
    with pytest.raises(EngineUnsupported, match="sample_ms below"):
        check(_spec(sample_ms=1.0))
    with pytest.raises(EngineUnsupported, match=r"clients\.per_region needs 3 entries"):
        check(_spec(clients=Clients("closed", (1, 1))))
    with pytest.raises(EngineUnsupported, match=r"the runtime engine runs 1\.\.16 nodes"):
        check(_spec(profile=uniform(17, 1.0), clients=Clients("closed", (1,) * 17)))
    check(_spec())  # and a spec it can run passes


def test_the_cli_runs_every_experiment_on_the_runtime_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing is refused any more; the experiment's own runner is reached."""
    reached: list[tuple[str, str]] = []
    monkeypatch.setattr(
        cli, "_runner", lambda name: lambda ctx: reached.append((name, ctx.engine_name)) or 0
    )
    for name in cli.EXPERIMENTS:
        assert cli.main([name, "--engine", "runtime", "--quiet", "--out", "/nonexistent"]) == 0
    assert reached == [(name, "runtime") for name in cli.EXPERIMENTS]
    assert cli.main(["latency", "--engine", "runtime", "--fsync", "--quiet"]) == 0
    assert RuntimeEngine().fsync is True
    assert cli.main(["latency", "--engine", "runtime", "--quiet"]) == 0
    assert RuntimeEngine().fsync is False


def test_bench_log_digests_sets_orders_and_the_hot_key() -> None:
    a, b, c = b"s1", b"s2", HOT_MARK + b"3"
    logs = [BenchLog() for _ in range(3)]
    for log, order in zip(logs, ([a, b, c], [b, a, c], [a, c, b]), strict=True):
        for p in order:
            log.apply(p)
    q = [parse_query(log.query(b"")) for log in logs]
    assert q[0][0] == q[1][0] == q[2][0] == 3
    assert q[0][1] == q[1][1] == q[2][1]  # the same set, whatever the order
    assert q[0][2] != q[1][2]  # the order chain sees the order
    assert q[0][3] == q[1][3] == q[2][3]  # one hot command: one hot order
    restored = BenchLog()
    restored.restore(logs[0].snapshot())
    assert restored.query(b"") == logs[0].query(b"")
    restored.apply(b"s4")
    logs[0].apply(b"s4")
    assert restored.query(b"") == logs[0].query(b"")  # it goes on where it stopped
    assert HOT_KEY != HOT_MARK  # the mark is on the payload, the key stays the workload's
    with pytest.raises(ValueError, match="a BenchLog answer is 56 bytes"):
        parse_query(b"short")
    before = logs[1].query(b"")
    with pytest.raises(ValueError, match="chain"):
        logs[1].restore(bytes(8) + bytes(16) + bytes(16) + b"\xff" * 16)
    assert logs[1].query(b"") == before  # a bad snapshot changes nothing


def test_bench_log_sees_a_lost_a_duplicated_or_a_changed_command() -> None:
    """What a protocol bug would do to what a node executed: each changes the
    digests that the benchmark's verification compares (``agree``)."""
    commands = [b"p%d" % i for i in range(50)] + [HOT_MARK + b"%d" % i for i in range(5)]

    def answer(payloads: list[bytes]) -> tuple[int, int, bytes, bytes]:
        log = BenchLog()
        for p in payloads:
            log.apply(p)
        return parse_query(log.query(b""))

    base = answer(commands)
    lost = answer(commands[:10] + commands[11:])
    duplicated = answer(commands[:11] + commands[10:])
    changed = answer([*commands[:10], b"p10!", *commands[11:]])
    swapped = answer([*commands[:10], commands[11], commands[10], *commands[12:]])
    hot_swapped = answer([*commands[:-2], commands[-1], commands[-2]])
    for other in (lost, duplicated, changed):
        assert other[1] != base[1] and other[2] != base[2]
    assert lost[0] == duplicated[0] - 2 == base[0] - 1
    assert swapped[:2] == base[:2] and swapped[2] != base[2] and swapped[3] == base[3]
    assert hot_swapped[1] == base[1] and hot_swapped[3] != base[3]


def test_believed_leader_needs_a_majority() -> None:
    samples = {
        "R0": [[10_000, 0, 0, True, True, 0], [110_000, 0, 0, True, True, 0]],
        "R1": [[20_000, 0, 0, False, False, 0], [120_000, 1, 1, True, True, 1]],
        "R2": [[30_000, 0, 0, False, False, 0], [130_000, None, 1, None, None, 1]],
    }
    assert believed_leaders(samples, ("R0", "R1", "R2"), 100.0) == [(0, 0), (100_000, None)]
    samples["R2"][1][1] = 1
    assert believed_leaders(samples, ("R0", "R1", "R2"), 100.0) == [(0, 0), (100_000, 1)]


def test_nodes_agree_only_on_what_their_protocol_promises() -> None:
    h = [bytes([k]) * 16 for k in range(4)]
    same = [(5, 77, h[0], h[1]), (5, 77, h[0], h[1])]
    reordered = [(5, 77, h[0], h[1]), (5, 77, h[2], h[1])]  # other order, same hot order
    hot_reordered = [(5, 77, h[0], h[1]), (5, 77, h[2], h[3])]
    other_set = [(5, 77, h[0], h[1]), (5, 78, h[0], h[1])]
    for proto in ("sdpaxos", "multipaxos", "mencius"):
        assert agree(same, proto, 5)
        assert not agree(reordered, proto, 5)
    assert agree(reordered, "epaxos", 5)
    assert not agree(hot_reordered, "epaxos", 5)
    assert not agree(other_set, "epaxos", 5) and not agree(other_set, "sdpaxos", 5)
    assert not agree(same, "sdpaxos", 6)  # fewer executed than the clients were answered


def test_runtime_throughput_ratios_pair_each_column_with_sdpaxos_and_the_paper() -> None:
    """The runtime throughput table's ratios: SDPaxos's write-only capacity over each
    other column at the same size, the paper's ratio beside (EPaxos by conflict rate;
    none for forwarding, which the paper did not run)."""
    from bench.experiments.throughput_runtime import _ratios

    def row(protocol: str, column: str, n: int, payload: int, cap: float, **kw: float) -> dict:
        return {
            "protocol": protocol,
            "column": column,
            "replicas": n,
            "payload_bytes": payload,
            "read_pct": kw.get("read_pct", 0.0),
            "conflict_pct": kw.get("conflict_pct", 0.0),
            "status": "ok",
            "capacity_per_s": cap,
        }

    rows = [
        row("sdpaxos", "SDPaxos", 5, 16, 300.0),
        row("sdpaxos", "SDPaxos", 5, 16, 900.0, read_pct=100.0),
        row("epaxos", "EPaxos-5%", 5, 16, 100.0, conflict_pct=5.0),
        row("multipaxos", "Multi-Paxos-fwd", 5, 16, 150.0),
        row("multipaxos", "Multi-Paxos", 5, 1024, 50.0),
        row("mencius", "Mencius", 5, 16, 200.0, read_pct=100.0),
    ]
    got = {(r["over"], r["payload_bytes"]): (r["measured"], r["paper"]) for r in _ratios(rows)}
    assert got[("EPaxos-5%", 16)] == (3.0, pytest.approx(1.69, abs=0.01))
    assert got[("Multi-Paxos-fwd", 16)] == (2.0, None)
    assert got[("Multi-Paxos", 1024)][0] is None  # no SDPaxos cell at 1 KB to compare with
    assert ("Mencius", 16) not in got  # reads are not a write-only cell


def test_the_runtime_throughput_starts_every_column_and_payload_on_a_fresh_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine keeps a cluster for the next spec that fits it, and nodes get
    dearer per command as they age: without a fresh cluster per column, EPaxos
    at 5 % conflict ran on nodes that had executed the 0 % column's commands,
    and without one per payload, every 1 KB cell on nodes that had run the
    column's 16 B cells."""
    from types import SimpleNamespace

    from bench.experiments import throughput_runtime as tr

    events: list[str] = []

    class FakeEngine:
        fsync = False

        def run(self, spec: RunSpec, progress: Any = None) -> Any:
            w = spec.workload
            events.append(f"run {spec.protocol} {w.conflict_pct:g} {w.payload_bytes}")
            return SimpleNamespace(
                extra={}, records=[], ok=True, verdict="", virtual_ms=0, wall_s=0.0
            )

        def close(self) -> None:
            events.append("close")

    monkeypatch.setattr(tr, "_plot", lambda *a, **k: None)
    monkeypatch.setattr(tr, "write_results", lambda *a, **k: None)
    settings = tr.Settings((3,), ((16, (0.0, 50.0)), (1024, (0.0,))), 10, 1.0, 1.0, (0.0, 5.0))
    ctx = Context("throughput", tmp_path, quick=True, protocols=("sdpaxos", "epaxos"), quiet=True)
    tr._run(ctx, settings, FakeEngine())  # type: ignore[arg-type]
    assert events == [
        "close", "run sdpaxos 0 16", "run sdpaxos 0 16", "close", "run sdpaxos 0 1024",
        "close", "run epaxos 0 16", "run epaxos 0 16", "close", "run epaxos 0 1024",
        "close", "run epaxos 5 16", "run epaxos 5 16", "close", "run epaxos 5 1024",
    ]  # fmt: skip
