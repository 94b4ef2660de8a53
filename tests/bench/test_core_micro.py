"""The core micro-benchmark's correctness part: everything commits, executes, agrees.

Never asserts a wall-clock number or a rate: those depend on the machine.
"""

import json
from dataclasses import replace
from typing import Any

import pytest

from bench import core_micro
from bench.core_micro import Settings, codec_available, run_once
from bench.round_result import agree
from bench.round_spec import STUCK_ROUNDS
from bench.runtime_app import BenchLog
from sdpaxos.core.ready import Ready
from sdpaxos.protocols import protocol

CODEC_MODES = [False, pytest.param(True, id="codec")]


def _assert_complete(res: core_micro.RunResult, settings: Settings) -> None:
    assert res.problems == []
    assert res.ok
    assert res.committed == settings.commands
    assert res.executed == [settings.commands] * settings.replicas
    assert len(set(res.digests)) == 1
    assert res.rejected == 0
    assert res.steps > 0


@pytest.mark.parametrize("codec", CODEC_MODES)
@pytest.mark.parametrize("replicas", [3, 5])
def test_small_batches_commit_and_execute_everything_everywhere(replicas: int, codec: bool) -> None:
    settings = Settings(
        replicas=replicas,
        sessions=25,
        commands=2_000,
        c_batch_max=8,
        o_batch_max=4,
        c_inflight_max=4,
        seed=7,
        codec=codec,
    )
    res = run_once(settings)
    _assert_complete(res, settings)
    # Small batches really did split the load into many instances.
    assert res.c_instances >= settings.commands // settings.c_batch_max


@pytest.mark.parametrize("codec", CODEC_MODES)
def test_default_batching_with_fewer_commands_than_sessions(codec: bool) -> None:
    settings = Settings(sessions=2_000, commands=3_001, codec=codec)
    res = run_once(settings)
    _assert_complete(res, settings)


def test_codec_does_not_change_the_execution_order() -> None:
    assert codec_available(), "sdpaxos.wire.codec is part of the package"
    settings = Settings(sessions=10, commands=1_000, c_batch_max=4, seed=3)
    plain = run_once(settings)
    coded = run_once(replace(settings, codec=True))
    _assert_complete(plain, settings)
    assert coded.digests == plain.digests


def test_agree_flags_divergence_and_missing_work() -> None:
    assert agree(10, [10, 10, 10], ["a", "a", "a"]) == []
    assert any("diverge: replica 1" in p for p in agree(10, [10, 10, 10], ["a", "b", "a"]))
    assert any("replica 2 executed 9" in p for p in agree(10, [10, 10, 9], ["a"] * 3))


class _Faulty:
    """The core replica, but one READY reply is lost or sent twice, or it says
    it rejected a peer message (``fault``)."""

    def __init__(self, inner: Any, fault: str | None) -> None:
        self.inner, self.fault = inner, fault
        if fault == "reject":
            inner.stats.rejected += 1

    def ready(self) -> Ready:
        rd = self.inner.ready()
        if self.fault in ("lose", "twice") and rd.replies:
            if self.fault == "lose":
                rd.replies.pop()
            else:
                rd.replies.append(rd.replies[-1])
            self.fault = None
        return rd

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("fault", ["lose", "twice", "reject"])
def test_a_lost_or_repeated_reply_or_a_rejected_message_fails_the_run(
    fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    make = protocol("sdpaxos").make_replica

    def faulty(config: Any, r: int, *args: Any) -> Any:
        return _Faulty(make(config, r, *args), fault if r == 1 else None)

    monkeypatch.setattr(
        core_micro, "protocol", lambda name: type("P", (), {"make_replica": faulty})
    )
    res = run_once(Settings(sessions=5, commands=200))
    assert not res.ok
    if fault == "lose":  # the session waits for ever: stuck, one operation short
        stuck = f"stuck: no operation completed in {STUCK_ROUNDS} rounds"
        assert any(p.startswith(stuck) for p in res.problems)
        assert "199 operations completed of 200 issued" in res.problems
    elif fault == "twice":
        assert len(res.problems) == 1 and res.problems[0].startswith("unexpected reply Reply(")
    else:
        assert res.problems == ["1 peer messages rejected in a fault-free run"]


class _SkewedMachine(BenchLog):
    """The second machine built applies a different payload: a diverging replica."""

    built = 0

    def __init__(self, store: bool = False) -> None:
        super().__init__(store)
        _SkewedMachine.built += 1
        self.skew = _SkewedMachine.built == 2

    def apply(self, payload: bytes) -> bytes:
        return super().apply(payload + b"!" if self.skew else payload)


def test_a_diverging_replica_fails_the_run_and_the_exit_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(core_micro, "BenchLog", _SkewedMachine)
    _SkewedMachine.built = 0
    res = run_once(Settings(sessions=5, commands=200))
    assert not res.ok
    assert any("diverge: replica 1" in p for p in res.problems)

    _SkewedMachine.built = 0
    argv = ["--commands", "200", "--sessions", "5", "--repeat", "1", "--warmup", "0", "--quiet"]
    assert core_micro.main(argv) == 1
    assert "diverge: replica 1" in capsys.readouterr().err


def test_main_prints_json_with_every_run(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--commands", "600", "--sessions", "10", "--repeat", "2", "--warmup", "100"]
    assert core_micro.main([*argv, "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True
    assert out["statistic"] == "median"
    assert len(out["runs"]) == 2
    for run in out["runs"]:
        assert run["committed"] == 600
        assert run["executed"] == [600, 600, 600]
        assert len(set(run["digests"])) == 1


def test_main_prints_a_table_and_progress(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--commands", "300", "--sessions", "10", "--repeat", "1", "--warmup", "0"]
    assert core_micro.main([*argv, "--replicas", "5", "--profile", "5"]) == 0
    captured = capsys.readouterr()
    assert "commands committed (READY) / s" in captured.out
    assert "verified" in captured.out
    assert "run 1/1" in captured.err
    assert "cProfile" in captured.err


@pytest.mark.parametrize("replicas", [3, 5])
def test_with_compaction_everything_still_executes_and_the_logs_stay_short(replicas: int) -> None:
    """Compaction on (``bench/compaction.py``'s settings, small): the same
    commands commit and execute everywhere with the same digests, snapshots
    are taken, and MemoryStorage keeps only what the snapshots do not cover."""
    settings = Settings(
        replicas=replicas,
        sessions=50,
        commands=20_000,
        c_batch_max=8,
        seed=3,
        snapshot_slots=16,
        tick_rounds=1,
        heartbeat_ms=100.0,
        storage="memory",
        rss_at=(10_000, 20_000),
    )
    res = run_once(settings)
    _assert_complete(res, settings)
    assert res.snapshots >= replicas
    assert set(res.rss_peak_kb) == {10_000, 20_000}
    plain = run_once(replace(settings, snapshot_slots=None))
    _assert_complete(plain, plain.settings)
    assert plain.snapshots == 0
    assert plain.digests == res.digests  # the same commands in the same order
