import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sdpaxos.sim import __main__ as cli
from sdpaxos.sim.__main__ import main
from sdpaxos.sim.failover import FailoverResult, FailoverSweep
from sdpaxos.sim.faults import FaultKind
from sdpaxos.sim.sweep import FaultRun


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--profile",
                "paper3",
                "--sequencer",
                "CA",
                "--commands",
                "10",
                "--seed",
                "3",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["seed"] == 3 and out["profile"] == "paper3"
    assert out["replicas"] == ["CA", "OR", "OH"] and out["sequencer"] == "CA"
    assert out["checkers"] == {"ok": True, "verdict": "ok"}
    assert set(out["regions"]) == {"CA", "OR", "OH"}
    for stats in out["regions"].values():
        assert stats["count"] == 10
        assert set(stats) == {"count", "mean_ms", "p50_ms", "p99_ms"}
    assert out["messages"]["delivered"] > 0 and out["messages"]["dropped"] == 0


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", "paper5", "--replicas", "CA,OR,IRE", "--commands", "5"]) == 0
    out = capsys.readouterr().out
    assert "region" in out and "mean ms" in out and "checkers: ok" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert {"CA", "OR", "IRE"} <= set(lines) and "SEL" not in lines


def test_matrix_file_and_faults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "lab.json"
    f.write_text(
        json.dumps(
            {"regions": ["a", "b", "c"], "rtt_ms": [[0.1, 10, 30], [10, 0.1, 20], [30, 20, 0.1]]}
        )
    )
    argv = ["--matrix", str(f), "--sequencer", "b", "--commands", "8", "--json"]
    argv += ["--jitter-ms", "5", "--drop", "0.05", "--dup", "0.05", "--datagram", "--tick-ms", "5"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["profile"] == "lab" and out["sequencer"] == "b"
    assert out["options"]["tick_ms"] == 5.0 and out["options"]["fifo"] is False
    assert all(s["count"] == 8 for s in out["regions"].values())


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI on ``argv``, expect a refusal; return its one line of stderr.

    A traceback would escape ``main`` as an exception other than SystemExit
    and fail the test; the stderr checks cover one printed by hand.
    """
    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    assert info.value.code == 2, captured.err
    assert captured.out == ""
    assert "Traceback" not in captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("python -m sdpaxos.sim: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--profile", "paper9"], "unknown profile"),
        (["--sequencer", "XX"], "unknown region 'XX'"),
        (["--replicas", "CA,OR"], "odd number of replicas"),
        (["--matrix", "/nonexistent.json"], "cannot read matrix file"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in _refused(argv, capsys)


#: What the errors say is allowed (``_whole``/``_number`` in ``__main__``).
TICK = "a number of ms from 0.001 to 1e9"  # the clock counts whole microseconds
AFTER_0 = "a number of ms > 0 and <= 1e9"
MS = "a number of ms from 0 to 1e9"
PROBABILITY = "a probability from 0 to 1"

#: One bad value per case: the option, its value, and what the one-line error
#: must say is allowed. Each is checked while parsing; the comments say what
#: the value did before.
BAD_VALUES = [
    ("--tick-ms", "0", TICK),  # a ValueError traceback from SimCluster
    ("--tick-ms", "-5", TICK),  # the same
    ("--tick-ms", "nan", TICK),  # refused, but blamed on --commands
    ("--tick-ms", "inf", TICK),  # the same
    ("--tick-ms", "0.0001", TICK),  # rounds to 0 us: an AssertionError traceback
    ("--tick-ms", "fast", TICK),
    ("--client-retry-ms", "0", TICK),  # a ValueError traceback from the workload
    ("--client-retry-ms", "-1", TICK),  # the same
    ("--client-retry-ms", "nan", TICK),  # the same
    ("--client-retry-ms", "inf", TICK),  # an OverflowError traceback
    ("--client-retry-ms", "0.0001", TICK),  # 0 us: retried forever at one instant (a hang)
    ("--drain-ms", "-1", AFTER_0),  # ran, then reported a liveness violation
    ("--drain-ms", "0", AFTER_0),  # no time to finish: a false liveness violation
    ("--drain-ms", "nan", AFTER_0),  # a ValueError traceback
    ("--drain-ms", "inf", AFTER_0),  # an OverflowError traceback
    ("--jitter-ms", "-1", MS),
    ("--jitter-ms", "nan", MS),
    ("--jitter-ms", "inf", MS),  # an OverflowError traceback
    ("--jitter-ms", "1e308", MS),  # the same: inf once in microseconds
    ("--drop", "2", PROBABILITY),
    ("--drop", "-0.1", PROBABILITY),
    ("--drop", "nan", PROBABILITY),
    ("--dup", "1.5", PROBABILITY),
    ("--dup", "nan", PROBABILITY),
    ("--commands", "-1", "a whole number >= 0"),
    ("--commands", "ten", "a whole number >= 0"),
    ("--commands", "1.5", "a whole number >= 0"),
    ("--clients-per-region", "0", "a whole number from 1 to 1024"),
    ("--clients-per-region", "2000", "a whole number from 1 to 1024"),  # a traceback
    ("--seed", "x", "a whole number"),
    ("--sweep", "0", "a whole number >= 1"),
    ("--sweep", "-3", "a whole number >= 1"),
    ("--failover-sweep", "0", "a whole number >= 1"),
    ("--kill-ms", "-1", AFTER_0),
    ("--kill-ms", "0", AFTER_0),
    ("--kill-ms", "nan", AFTER_0),
    ("--kill-ms", "inf", AFTER_0),  # an OverflowError traceback
]


@pytest.mark.parametrize(("option", "value", "allowed"), BAD_VALUES)
def test_a_bad_value_is_one_line_naming_the_option_and_exit_2(
    option: str, value: str, allowed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mode = {"--kill-ms": ["--failover"]}.get(option, [])
    line = _refused([*mode, option, value], capsys)
    assert f"argument {option}: expected {allowed}, got {value!r}" in line


def test_sweep_needs_at_least_one_command(capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(["--sweep", "1", "--commands", "0"], capsys)
    assert "argument --commands: with --sweep, expected a whole number >= 1, got 0" in line


def test_a_refusal_from_the_real_command_line_is_one_line_without_traceback() -> None:
    """The same as the in-process tests, through ``python -m``: what a user sees."""
    argv = [sys.executable, "-m", "sdpaxos.sim", "--tick-ms", "0"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "python -m sdpaxos.sim: error: argument --tick-ms: expected a number of ms"
        " from 0.001 to 1e9, got '0' (see --help)"
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--tick-ms", "0.001", "--commands", "1"],
        ["--client-retry-ms", "0.5", "--commands", "3"],
        ["--drain-ms", "0.5", "--commands", "3"],
        ["--jitter-ms", "0", "--drop", "0", "--dup", "1", "--commands", "3"],
        ["--commands", "0"],
        ["--clients-per-region", "1024", "--commands", "3"],
        ["--seed", "-4", "--commands", "3"],
    ],
)
def test_values_at_the_bounds_still_run(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--profile", "paper3", "--quiet", "--json", *argv]) == 0
    assert json.loads(capsys.readouterr().out)["checkers"]["ok"] is True


@pytest.mark.parametrize(
    ("argv", "replicas", "profile"),
    [
        (["--replicas", "3"], ["CA", "OR", "OH"], "paper5[CA,OR,OH]"),  # was IRE alone
        (["--replicas", "5"], ["CA", "OR", "OH", "IRE", "SEL"], "paper5"),
        (["--replicas", "1"], ["CA"], "paper5[CA]"),  # one replica, asked for as such
        (["--profile", "uniform7", "--replicas", "3"], ["R0", "R1", "R2"], "uniform7[R0,R1,R2]"),
        (["--replicas", "SEL,CA,IRE"], ["SEL", "CA", "IRE"], "paper5[SEL,CA,IRE]"),
    ],
)
def test_replicas_is_a_count_or_region_names(
    argv: list[str], replicas: list[str], profile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bare number N is the profile's first N regions (paper5's first 3 are paper3)."""
    assert main([*argv, "--commands", "2", "--quiet", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["replicas"] == replicas and out["profile"] == profile
    assert out["checkers"]["ok"] is True


#: ``--replicas`` values refused outside a sweep, and what the error says.
BAD_REPLICAS = [
    (["--replicas", "7"], "a bare number is a replica count, from 1 to 5 for profile paper5"),
    (["--replicas", "0"], "a bare number is a replica count, from 1 to 5"),
    (["--replicas", "4"], "SDPaxos needs an odd number of replicas, got 4"),
    (["--replicas", "3,5"], "'3' is not a region of profile paper5"),  # counts need --sweep
    (["--replicas", "0,2,4"], "'0' is not a region of profile paper5"),  # was IRE, SEL
    (["--replicas", ""], "expected a replica count or region names"),  # was ignored
    (["--replicas", "CA,OR,CA"], "lists CA more than once"),
    (["--failover", "--replicas", "5"], "from 1 to 3 for profile paper3"),
    (["--failover", "--replicas", "1"], "the failover needs at least 3 replicas, got 1"),
    (["--failover", "--replicas", "CA,OR"], "odd number of replicas, got 2"),  # was ignored
]


@pytest.mark.parametrize(("argv", "message"), BAD_REPLICAS)
def test_bad_replicas_are_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _refused(argv, capsys)
    assert "argument --replicas: " in line and message in line


@pytest.mark.parametrize(
    ("argv", "option", "message"),
    [
        (["--profile", "uniform2"], "--profile", "odd number of replicas, got 2"),
        (["--profile", "uniform0"], "--profile", "a profile needs 1..256 regions, got 0"),
        # It built the 10^10-entry matrix before counting the regions: a hang.
        (["--profile", "uniform100000"], "--profile", "1..256 regions, got 100000"),
        (["--failover", "--profile", "uniform1"], "--profile", "at least 3 replicas, got 1"),
        (["--matrix", ""], "--matrix", "expected a file name, got ''"),  # was ignored
        (["--failover", "--plot", ""], "--plot", "expected a file name, got ''"),  # the same
        (["--sequencer", "XX"], "--sequencer", "unknown region 'XX'"),
        (["--replicas", "3", "--sequencer", "IRE"], "--sequencer", "unknown region 'IRE'"),
        (["--sweep", "1", "--replicas", "1"], "--replicas", "from 3 to 255"),  # the faults
        # need a peer: every N=1 run was an AssertionError from the fault injector
        (["--sweep", "1", "--replicas", "257"], "--replicas", "from 3 to 255"),  # a traceback
        (["--sweep", "1", "--replicas", ""], "--replicas", "replica counts like 3,5"),
        # str.isdigit() takes a superscript that int() refuses: three tracebacks.
        (["--replicas", "²"], "--replicas", "'²' is not a region of profile paper5"),
        (["--sequencer", "²"], "--sequencer", "unknown region '²'"),
        (["--profile", "uniform²"], "--profile", "unknown profile 'uniform²'"),
    ],
)
def test_bad_cluster_options_are_refused_naming_the_option(
    argv: list[str], option: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _refused(argv, capsys)
    assert f"argument {option}: " in line and message in line


@pytest.fixture
def failover_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``run_failover`` as the CLI calls it, without running it (a run takes seconds)."""
    calls: list[dict[str, Any]] = []

    def fake(**kwargs: Any) -> FailoverResult:
        calls.append(kwargs)
        profile = kwargs["profile"]
        return FailoverResult(
            profile=profile,
            killed=profile.regions[kwargs["sequencer"]],
            kill_ms=kwargs["kill_ms"],
            end_ms=kwargs["kill_ms"] + 1.0,
            seed=kwargs["seed"],
            tick_ms=kwargs["tick_ms"],
            new_sequencer=None,
            new_view=None,
            checkers="ok",
            regions=[],
        )

    monkeypatch.setattr(cli, "run_failover", fake)
    return calls


@pytest.mark.parametrize(
    ("argv", "regions", "sequencer"),
    [
        ([], ("CA", "OR", "OH"), 0),  # the paper's setting
        (["--profile", "paper5"], ("CA", "OR", "OH", "IRE", "SEL"), 0),  # was paper3
        (
            ["--profile", "paper5", "--replicas", "SEL,OR,CA", "--sequencer", "OR"],
            ("SEL", "OR", "CA"),
            1,
        ),
        (["--replicas", "CA,OH,OR"], ("CA", "OH", "OR"), 0),  # was ignored
    ],
)
def test_failover_runs_on_the_cluster_asked_for(
    argv: list[str],
    regions: tuple[str, ...],
    sequencer: int,
    failover_calls: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--failover", "--quiet", *argv]) == 0
    [call] = failover_calls
    assert call["profile"].regions == regions and call["sequencer"] == sequencer


def test_failover_options_reach_the_run(
    failover_calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--failover", "--kill-ms", "1500", "--tick-ms", "5", "--seed", "9", "--json"]
    assert main(argv) == 0
    [call] = failover_calls
    assert (call["kill_ms"], call["tick_ms"], call["seed"]) == (1500.0, 5.0, 9)
    assert json.loads(capsys.readouterr().out)["kill_ms"] == 1500.0


def test_the_failover_table_is_followed_by_its_legend(
    failover_calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--failover", "--quiet"]) == 0
    out = capsys.readouterr().out
    table, legend = out.split("\n\n")
    assert "first READY ms" in table.splitlines()[2]  # the column header
    assert legend == cli.FAILOVER_LEGEND
    # What the column is and why it is not the failover time.
    first = next(line for line in legend.splitlines() if "first READY ms" in line)
    assert "first READY after the kill, of any command" in first
    assert "already ordered still finish" in legend and "stall ms (exact)" in legend


def test_the_failover_sweep_table_is_followed_by_its_legend(
    failover_calls: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(
        cli, "failover_sweep", lambda k, **kw: FailoverSweep([cli.run_failover(**kw)])
    )
    assert main(["--failover-sweep", "1", "--quiet"]) == 0
    assert capsys.readouterr().out.endswith("\n\n" + cli.FAILOVER_SWEEP_LEGEND)


def test_json_failover_output_has_no_legend(
    failover_calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--failover", "--json"]) == 0
    out = capsys.readouterr().out
    assert "first READY" not in out
    assert json.loads(out)["killed"] == "CA"


def test_help_explains_the_first_ready_column(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "the --failover table's " + cli.FAILOVER_LEGEND in out
    assert "(--replicas 3 on paper5 is CA,OR,OH," in out


def test_the_readme_explains_the_failover_table() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("Sequencer failover with the paper's settings") :]
    section = section[: section.index("![failover]")]
    header = "region    first READY ms  stall ms (exact)  stall ms (100 ms bins)  READY after"
    assert header in section
    for column in ("first READY ms", "stall ms (exact)", "stall ms (100 ms bins)", "READY after"):
        assert f"- **{column}**: " in section
    assert "It is not\n  the failover time" in section


#: How to select each mode, and a valid value for each option that belongs to
#: some modes only (flags take none).
MODE_ARGV = {
    cli.RUN: [],
    cli.SWEEP: ["--sweep", "1"],
    cli.FAILOVER: ["--failover"],
    cli.FAILOVER_SWEEP: ["--failover-sweep", "1"],
}
OPTION_VALUE = {
    "--profile": ["paper3"],
    "--matrix": ["lab.json"],
    "--sequencer": ["CA"],
    "--protocol": ["multipaxos"],
    "--tick-ms": ["5"],
    "--commands": ["3"],
    "--clients-per-region": ["2"],
    "--client-retry-ms": ["500"],
    "--jitter-ms": ["5"],
    "--drop": ["0.1"],
    "--dup": ["0.1"],
    "--datagram": [],
    "--measure-rtt": [],
    "--no-rtt-config": [],
    "--drain-ms": ["1000"],
    "--faults": ["crash"],
    "--snapshot-slots": ["3"],
    "--kill-ms": ["2000"],
    "--plot": ["out.png"],
}
#: Every (option, mode) pair the option does not belong to: one case each.
MISPLACED = [
    (flag, mode)
    for flag, modes in cli.MODE_OPTIONS.values()
    for mode in cli.MODES
    if mode not in modes
]


def test_every_mode_option_has_a_case() -> None:
    assert {flag for flag, _ in cli.MODE_OPTIONS.values()} == set(OPTION_VALUE)


@pytest.mark.parametrize(("flag", "mode"), MISPLACED)
def test_an_option_outside_its_mode_is_refused_not_ignored(
    flag: str, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """E.g. ``--plot`` without ``--failover``, ``--drop`` with ``--sweep``: all were ignored."""
    line = _refused([*MODE_ARGV[mode], flag, *OPTION_VALUE[flag]], capsys)
    assert f"argument {flag}: only applies to " in line and line.endswith(
        f", not to {mode} (see --help)"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--plot", "out.png"], "argument --plot: only applies to --failover, not to a plain run"),
        (
            ["--failover-sweep", "2", "--plot", "out.png"],
            "argument --plot: only applies to --failover, not to --failover-sweep",
        ),
        (
            ["--kill-ms", "100"],
            "argument --kill-ms: only applies to --failover and --failover-sweep,"
            " not to a plain run",
        ),
        (["--faults", "crash"], "argument --faults: only applies to --sweep, not to a plain run"),
        (
            ["--sweep", "1", "--tick-ms", "5"],
            "argument --tick-ms: only applies to a plain run, --failover and --failover-sweep,"
            " not to --sweep",
        ),
    ],
)
def test_the_mode_error_names_the_modes_an_option_belongs_to(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in _refused(argv, capsys)


def test_progress_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--profile", "paper3", "--commands", "400", "--json"]) == 0
    captured = capsys.readouterr()
    assert "commands ready at" in captured.err
    json.loads(captured.out)


def test_output_does_not_depend_on_python_hash_seed() -> None:
    """str hashing is randomised per process; a run must not notice."""
    argv = [sys.executable, "-m", "sdpaxos.sim", "--profile", "paper5", "--commands", "15"]
    argv += ["--seed", "7", "--jitter-ms", "30", "--drop", "0.05", "--dup", "0.05"]
    argv += ["--datagram", "--json", "--quiet"]
    outs = set()
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        outs.add(done.stdout)
    assert len(outs) == 1
    assert json.loads(outs.pop())["checkers"]["ok"] is True


def test_sweep_json_and_replay(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--sweep", "4", "--faults", "all", "--replicas", "3,5", "--seed", "40", "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["ok"] is True and out["violations"] == []
    assert [(r["seed"], r["replicas"]) for r in out["runs"]] == [(40, 3), (41, 5), (42, 3), (43, 5)]
    assert out["summary"]["all"]["runs"] == 4
    assert "[4/4] seed 43 N=5: ok" in captured.err
    # Each run's replay command reproduces it exactly.
    second = out["runs"][1]
    assert second["replay"] == "python -m sdpaxos.sim --sweep 1 --faults all --replicas 5 --seed 41"
    assert main([*second["replay"].split()[3:], "--json", "--quiet"]) == 0
    again = json.loads(capsys.readouterr().out)["runs"][0]
    assert again == second


def test_sweep_with_compaction_reports_snapshots_and_replays(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--sweep", "2", "--replicas", "3", "--seed", "150004", "--snapshot-slots", "3"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["all"]["snapshots_taken"] > 0
    first = out["runs"][0]
    assert first["snapshots"]["taken"] > 0
    assert first["replay"].endswith("--replicas 3 --seed 150004 --snapshot-slots 3")
    assert main([*first["replay"].split()[3:], "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0] == first


def test_sweep_table_reports_violations_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sdpaxos.sim import sweep as sweep_module

    real = sweep_module.run_faulty

    def broken(seed: int, replicas: int, faults: frozenset[FaultKind], **kw: int) -> FaultRun:
        run = real(seed, replicas, faults, **kw)
        if seed == 8:
            run.ok, run.kind, run.verdict = False, "safety", "safety violation: made up"
        return run

    monkeypatch.setattr(sweep_module, "run_faulty", broken)
    assert main(["--sweep", "3", "--faults", "crash,restart", "--seed", "7", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "1 violation(s):" in out and "seed 8 N=5 safety: safety violation: made up" in out
    assert "replay: python -m sdpaxos.sim --sweep 1 --faults crash,restart --replicas 5" in out
    assert "runs" in out and "view chg" in out and "faults injected:" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sweep", "1", "--faults", "crash,meteor"], "unknown fault 'meteor'"),
        (["--sweep", "1", "--faults", ""], "argument --faults: expected all, none or"),  # ran
        # with no faults at all
        (["--sweep", "1", "--faults", " , "], "argument --faults: expected all, none or"),
        (["--sweep", "1", "--replicas", "4"], "odd replica counts"),
        (["--sweep", "1", "--replicas", "CA,OR"], "replica counts like 3,5"),
    ],
)
def test_bad_sweep_arguments_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in _refused(argv, capsys)


def test_a_fault_free_sweep_replays_as_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """The replay line spells no faults ``--faults none``, which the CLI refused."""
    assert main(["--sweep", "1", "--faults", "none", "--commands", "3", "--json", "--quiet"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["ok"] is True and run["faults"] == {}
    assert run["replay"] == (
        "python -m sdpaxos.sim --sweep 1 --faults none --replicas 3 --seed 1 --commands 3"
    )
    assert main([*run["replay"].split()[3:], "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0] == run
