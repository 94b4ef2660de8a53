"""The round driver (bench/rounds.py), --protocol in the simulator CLI, and a
Multi-Paxos failover: small runs, a few seconds of CPU in all."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from typing import Any

import pytest

from bench.rounds import (
    ProtocolWorkers,
    RoundSpec,
    drive,
    lease_overrides,
    run_rounds,
    run_with,
)
from bench.runtime_app import BenchLog
from sdpaxos.protocols import protocol
from sdpaxos.sim import __main__ as sim_main
from sdpaxos.sim.failover import run_failover
from sdpaxos.wire import codec
from sdpaxos.wire.codec import PACKED_COMMANDS, PACKED_COMMANDS_MIN

SMALL: dict[str, Any] = {"sessions": 100, "commands": 2_000, "warmup": 400}


def test_sdpaxos_batches_and_reports_cpu_per_replica() -> None:
    res = run_rounds(RoundSpec("sdpaxos", replicas=3, read_pct=25.0, **SMALL))
    assert res.ok, res.problems
    assert res.commands_per_instance > 1.5  # batching happened
    per = res.cpu_s_per_1000()
    assert len(per) == 3 and all(v > 0 for v in per)
    assert res.capacity_per_s == pytest.approx(1000 / max(per))
    # The window closes in the round the 2,000th operation completes: at most
    # every session's operation more (all 300 in that round).
    assert 2_000 <= res.measured < 2_000 + 3 * 100
    assert res.reads_ok > 0  # the sequencer's lease serves reads


def test_multipaxos_at_the_leader_serves_reads_under_its_lease() -> None:
    res = run_rounds(
        RoundSpec("multipaxos", replicas=3, read_pct=50.0, clients_at="leader", **SMALL)
    )
    assert res.ok, res.problems
    assert res.reads_ok > 0
    assert res.commands_per_instance > 1.5
    assert res.busiest == 0  # the leader


class _Swapper:
    """Applies the ``at``-th command it is given after the next one: one replica
    executes two commands in the other order (a ``predicate`` picks which)."""

    def __init__(self, inner: BenchLog, at: int, predicate: Any = None) -> None:
        self.inner = inner
        self.at = at
        self.seen = 0
        self.predicate = predicate or (lambda payload: True)
        self.held: bytes | None = None

    def apply(self, payload: bytes) -> bytes:
        if self.held is None and self.predicate(payload):
            self.seen += 1
            if self.seen == self.at:
                self.held = payload
                return b"ok"
        out = self.inner.apply(payload)
        if self.held is not None and self.predicate(payload):
            held, self.held = self.held, None
            self.inner.apply(held)
        return out

    def snapshot(self) -> bytes:
        return self.inner.snapshot()

    def restore(self, data: bytes) -> None:
        self.inner.restore(data)


def _swapping(name: str, at: int, predicate: Any = None) -> Any:
    spec = protocol(name)

    def make(config: Any, r: int, sm: Any, rng: Any, observe: bool, records: Any) -> Any:
        machine = _Swapper(sm, at, predicate) if r == 1 else sm
        return spec.make_replica(config, r, machine, rng, False, None)

    return make, spec.codec


def test_a_replica_that_executes_two_commands_in_another_order_is_caught() -> None:
    make, codec = _swapping("sdpaxos", 5)
    res = run_with(RoundSpec("sdpaxos", replicas=3, **SMALL), make, codec)
    assert not res.ok
    assert any("executed sequences diverge: replica 1" in p for p in res.problems), res.problems


def test_without_the_swap_the_same_run_verifies() -> None:
    make, codec = _swapping("sdpaxos", 10**9)  # never swaps
    res = run_with(RoundSpec("sdpaxos", replicas=3, **SMALL), make, codec)
    assert res.ok, res.problems


def test_a_straggler_runs_one_round_in_three_and_costs_three_times() -> None:
    res = run_rounds(RoundSpec("mencius", replicas=3, slow=(1, 3), **SMALL))
    assert res.ok, res.problems
    assert res.factors == [1, 3, 1]
    assert res.turns[1] == res.rounds // 3 and res.turns[0] == res.turns[2] == res.rounds
    per = res.cpu_s_per_1000()
    assert res.capacity_per_s == pytest.approx(
        1000 / max(p * f for p, f in zip(per, [1, 3, 1], strict=True))
    )


def test_lease_overrides_three_heartbeats_per_lease() -> None:
    assert lease_overrides({})["heartbeat_ms"] == pytest.approx(500 / 3)
    assert lease_overrides({"lease_ms": 300.0})["heartbeat_ms"] == pytest.approx(100.0)
    assert lease_overrides({"heartbeat_ms": 500.0})["heartbeat_ms"] == 500.0


def test_sim_cli_runs_a_baseline_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--profile", "paper3", "--commands", "5", "--quiet", "--json"]
    assert sim_main.main([*argv, "--protocol", "multipaxos"]) == 0
    mp = capsys.readouterr().out
    assert sim_main.main(argv) == 0
    sd = capsys.readouterr().out
    assert json.loads(mp)["options"]["protocol"] == "multipaxos"
    # Multi-Paxos at OR goes through the leader in CA: slower than SDPaxos there.
    assert _mean(mp, "OR") > _mean(sd, "OR")
    with pytest.raises(SystemExit):
        sim_main.main([*argv, "--protocol", "nope"])


def _mean(text: str, region: str) -> float:
    return float(json.loads(text)["regions"][region]["mean_ms"])


def test_multipaxos_failover_elects_a_new_leader() -> None:
    res = run_failover(protocol="multipaxos", kill_ms=800.0, after_ms=1_500.0, clients_per_region=3)
    assert res.checkers == "ok"
    assert res.new_sequencer in ("OR", "OH")
    assert res.new_view is not None and res.new_view >= 256  # a Multi-Paxos ballot: round*256+id
    assert all(r.stall_ms is not None for r in res.regions)


def _sequencers(kept: list[Any]) -> Any:
    """A ``make`` that keeps the SDPaxos replicas it builds (to look at them after)."""
    spec = protocol("sdpaxos")

    def make(config: Any, r: int, sm: Any, rng: Any, observe: bool, records: Any) -> Any:
        replica = spec.make_replica(config, r, sm, rng, observe, records)
        kept.append(replica)
        return replica

    return make, spec.codec


@pytest.mark.parametrize("read_pct", [0.0, 25.0])
def test_a_write_only_run_measures_the_sequencer_without_its_history_table(
    read_pct: float,
) -> None:
    """With no reads the sequencer never keeps its history table (a long
    write-only run's state, measured from the start); with reads it keeps it."""
    kept: list[Any] = []
    make, codec = _sequencers(kept)
    res = run_with(RoundSpec("sdpaxos", replicas=3, read_pct=read_pct, **SMALL), make, codec)
    assert res.ok, res.problems
    sequencer = kept[0].sequencer_role
    if read_pct:
        assert sequencer.recording and sequencer.history
    else:
        assert not sequencer.recording and sequencer.history == {}


@pytest.mark.parametrize("read_pct", [0.0, 50.0])
def test_the_cpu_clock_is_read_per_turn_not_per_operation(
    read_pct: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of the thread's CPU clock costs about what a proposal does, so a
    clock read per command would charge every protocol that much per command."""
    reads = [0]
    real = time.thread_time

    def counting() -> float:
        reads[0] += 1
        return real()

    monkeypatch.setattr(time, "thread_time", counting)
    spec = RoundSpec(
        "sdpaxos", replicas=3, sessions=300, commands=3000, warmup=300, read_pct=read_pct
    )
    res = run_rounds(spec)
    assert res.ok, res.problems
    operations = res.proposed + (res.reads_ok if read_pct else 0)
    assert operations > 3000
    assert reads[0] < operations / 4
    assert res.cpu_s(0) > 0 and res.seconds[0]["propose"] > 0
    if read_pct:
        assert res.seconds[0]["read"] > 0


def test_a_broadcast_is_packed_once_per_send_as_in_the_runtime() -> None:
    """Each send hands one ``packed`` dict to every destination's batch, so a
    C-accept sent to two peers is checked and packed once."""
    proto = protocol("sdpaxos")
    real = proto.codec
    shared: list[tuple[int, int]] = []  # (id of packed, entries before the call)

    class Codec:
        def encode_batch(self, msgs: Any, packed: Any = None) -> bytes:
            assert packed is not None
            shared.append((id(packed), len(packed)))
            return real.encode_batch(msgs, packed)

        def decode_batch(self, data: bytes) -> Any:
            return real.decode_batch(data)

    res = run_with(RoundSpec("sdpaxos", replicas=5, **SMALL), proto.make_replica, Codec())
    assert res.ok, res.problems
    # A later destination of one send found the messages packed for an earlier one.
    assert any(before > 0 for _, before in shared)


@pytest.mark.parametrize("name", ["sdpaxos", "epaxos", "multipaxos"])
@pytest.mark.parametrize("replicas", [3, 5])
def test_an_instances_commands_are_packed_once_across_its_sends(
    name: str, replicas: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The C-commit (EPaxos's Commit, Multi-Paxos's Commit) goes out in a later
    send than its C-accept, with the same commands tuple: it is spliced from
    the bytes packed for the C-accept (``codec.PACKED_COMMANDS``)."""
    PACKED_COMMANDS.clear()
    PACKED_COMMANDS.hits = PACKED_COMMANDS.misses = 0
    converted: list[tuple[Any, ...]] = []  # keeps each tuple alive: ids stay unique
    real = codec._commands_to_wire

    def commands_to_wire(value: Any) -> object:
        converted.append(value)
        return real(value)

    monkeypatch.setattr(codec, "_commands_to_wire", commands_to_wire)
    res = run_rounds(RoundSpec(name, replicas=replicas, **SMALL))
    assert res.ok, res.problems
    big = [v for v in converted if len(v) >= PACKED_COMMANDS_MIN]
    assert len(big) > 10
    assert len({id(v) for v in big}) == len(big)  # none converted twice
    assert PACKED_COMMANDS.misses == len(big)
    # SDPaxos and EPaxos send every instance's commands again (the full commit
    # to the peers outside the thrifty quorum); the Multi-Paxos leader only to
    # peers that had not accepted when it committed.
    assert PACKED_COMMANDS.hits >= (len(big) if name != "multipaxos" else 1)
    PACKED_COMMANDS.clear()


def test_each_protocols_runs_go_to_one_worker_process_of_its_own() -> None:
    spec = RoundSpec("sdpaxos", replicas=3, sessions=5, commands=100, warmup=20)
    other = dataclasses.replace(spec, protocol="epaxos")
    with ProtocolWorkers() as workers:
        first, again, theirs = workers.run(spec), workers.run(spec), workers.run(other)
        warm = workers.warm_up(spec)
    assert first.pid == again.pid == warm.pid != theirs.pid and warm.ok
    assert os.getpid() not in (first.pid, theirs.pid)
    # The worker ran the spec itself: the driver is deterministic, so the bytes
    # are this process's to the byte.
    here = run_rounds(spec)
    assert here.pid == os.getpid()
    assert first.ok and theirs.ok and first.bytes == here.bytes and first.frames == here.frames
    # close() stopped and reaped both workers.
    for pid in (first.pid, theirs.pid):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_protocol_workers_not_isolated_run_here() -> None:
    spec = RoundSpec("sdpaxos", replicas=3, sessions=5, commands=100, warmup=20)
    with ProtocolWorkers(isolated=False) as workers:
        assert workers.run(spec).pid == os.getpid()


def test_a_dead_worker_is_named_and_replaced_by_a_new_one() -> None:
    spec = RoundSpec("sdpaxos", replicas=3, sessions=5, commands=100, warmup=20)
    with ProtocolWorkers() as workers:
        first = workers.run(spec)
        os.kill(first.pid, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="the sdpaxos worker process died"):
            workers.run(spec)
        again = workers.run(spec)
    assert again.ok and again.pid not in (first.pid, os.getpid())


def test_the_cores_own_load_issues_exactly_its_commands_and_reads_nothing() -> None:
    """``kv=False, exact=True`` (``python -m bench.core_micro``'s run): exactly
    ``commands`` writes, the first ones dealt round-robin over the replicas,
    on machines that keep digests only."""
    spec = RoundSpec("sdpaxos", sessions=100, commands=250, warmup=0, kv=False, exact=True)
    proto = protocol("sdpaxos")
    res, driver = drive(spec, proto.make_replica, proto.codec)
    assert res.ok, res.problems
    assert res.proposed == res.measured == 250 and res.executed == [250] * 3
    assert len(set(res.digests)) == 1 and res.bytes[0]["client_in"] == 0
    # Fewer commands than sessions: one each for the first 250, 84/83/83 per replica.
    per_replica = [sum(s.seq for s in driver.sessions if s.replica == r) for r in range(3)]
    assert per_replica == [84, 83, 83]
    with pytest.raises(ValueError, match="reads need the key-value workload"):
        run_with(dataclasses.replace(spec, read_pct=10.0), proto.make_replica, proto.codec)
