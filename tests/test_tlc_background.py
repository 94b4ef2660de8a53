"""The background TLC runs (tests/tlc_background.py) and check.sh's worker scaling.

A fake ``check.sh`` stands in for the real one, so these run no JVM: it writes
what it was asked, and can wait in a child process, so that a test can see a
run killed, a run never started, and the workers and environment a run was given.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import tlc_background
from tests.tlc_background import (
    BACKGROUND_TLC_WORKERS,
    TLA,
    TLC_TEST,
    Background,
    run_check,
    tlc_configs,
)

FAKE_CHECK = """#!/usr/bin/env bash
# args: the cfg names; writes <cfg>.started; for slow.cfg, waits (in a child
# process, which writes slow.child_done when its wait ends) until the file "go"
# exists, 20 s at most; writes <cfg>.finished when done.
for cfg in "$@"; do
    echo "$$" > "$cfg.started"
    if [[ "$cfg" == slow.cfg ]]; then
        (for _ in $(seq 400); do [[ -e go ]] && break; sleep 0.05; done; echo x > slow.child_done) &
        echo "$!" > slow.child
        wait
    fi
    echo "ok   $cfg: workers=${TLC_WORKERS:-unset} marker=${SDPAXOS_TLC_MARKER:-unset}"
    echo done > "$cfg.finished"
done
"""


def fake_tla(tmp_path: Path) -> Path:
    (tmp_path / "check.sh").write_text(FAKE_CHECK)
    return tmp_path


def wait_for(path: Path, tries: int = 2000) -> str:
    """``path``'s text once it exists and is written (polling; no time asserted)."""
    for _ in range(tries):
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.01)
    raise AssertionError(f"{path} never appeared")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by its parent) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[1].startswith("Z"))


def gone(pid: int, tries: int = 500) -> bool:
    """Did ``pid`` die (or turn zombie) within ``tries`` polls of 10 ms?

    Why poll: a killed process closes its files (so the run's pipes end and
    ``run_check`` returns) a moment before the kernel marks it a zombie, and
    under load that moment is long enough for one look to find it still
    running. 5 s is far below the fake child's own 20 s wait, so a child that
    outlived the kill still fails (and leaves ``slow.child_done`` behind)."""
    for _ in range(tries):
        if not alive(pid):
            return True
        time.sleep(0.01)
    return False


def test_a_queued_run_gives_its_result_with_the_background_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bg = Background(fake_tla(tmp_path))
    try:
        monkeypatch.setenv("SDPAXOS_TLC_MARKER", "at-start")
        bg.start(["slow.cfg", "a.cfg", "b.cfg", "a.cfg"])
        assert bg.pending() == ["slow.cfg", "a.cfg", "b.cfg"]  # queued once, in order
        # Changed while the queued runs wait: they keep the environment of start().
        monkeypatch.setenv("SDPAXOS_TLC_MARKER", "changed")
        (tmp_path / "go").touch()  # slow.cfg, which holds the queue, ends
        b = bg.result("b.cfg")
        assert b.returncode == 0
        assert b.stdout == f"ok   b.cfg: workers={BACKGROUND_TLC_WORKERS} marker=at-start\n"
        assert bg.pending() == ["slow.cfg", "a.cfg"]
        # Not queued (or already taken): run now, with check.sh's own default.
        c = bg.result("c.cfg")
        assert c.stdout == "ok   c.cfg: workers=unset marker=changed\n"
        again = bg.result("b.cfg")
        assert again.stdout == "ok   b.cfg: workers=unset marker=changed\n"
    finally:
        bg.close()


def test_close_kills_the_running_run_and_starts_no_other(tmp_path: Path) -> None:
    tla = fake_tla(tmp_path)
    bg = Background(tla)
    bg.start(["slow.cfg", "next.cfg"])
    shell = int(wait_for(tla / "slow.cfg.started"))
    child = int(wait_for(tla / "slow.child"))
    assert alive(shell) and alive(child)
    bg.close()
    assert gone(child), "the run's child process outlived close()"
    assert gone(shell)
    assert not (tla / "slow.cfg.finished").exists(), "close() waited for the run to end"
    assert not (tla / "slow.child_done").exists(), "the child lived to the end of its wait"
    assert not (tla / "next.cfg.started").exists(), "a queued run started after close()"
    assert bg.pending() == []
    bg.start(["late.cfg"])  # closed: nothing more is queued
    assert bg.pending() == []


def test_a_run_that_starts_after_close_is_killed_at_once(tmp_path: Path) -> None:
    tla = fake_tla(tmp_path)
    bg = Background(tla)
    bg.close()
    result = run_check("slow.cfg", cwd=tla, on_start=bg._on_start, on_end=bg._on_end)
    assert result.returncode == -9
    assert "ok   " not in result.stdout


def test_a_run_past_its_timeout_is_killed_with_its_children_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tla = fake_tla(tmp_path)
    monkeypatch.setattr(tlc_background, "CHECK_TIMEOUT_S", 0.5)
    result = run_check("slow.cfg", cwd=tla)  # waits for a "go" that never comes
    assert result.returncode == -9
    assert "check.sh slow.cfg: killed after 0.5 s" in result.stderr
    assert gone(int(wait_for(tla / "slow.child")))
    assert not (tla / "slow.cfg.finished").exists()
    assert not (tla / "slow.child_done").exists(), "the child lived to the end of its wait"


def test_the_tlc_tests_configurations_are_picked_from_the_collected_items() -> None:
    def item(name: str, cfg: str | None = None) -> SimpleNamespace:
        if cfg is None:
            return SimpleNamespace(originalname=name)
        return SimpleNamespace(originalname=name, callspec=SimpleNamespace(params={"cfg": cfg}))

    items = [
        item("test_other"),
        item(TLC_TEST, "MC5.cfg"),
        item("test_other_parametrized", "X.cfg"),
        item(TLC_TEST, "MC3.cfg"),
    ]
    assert tlc_configs(items) == ["MC5.cfg", "MC3.cfg"]


# -- check.sh: the simulation's seconds follow the workers ----------------------


def fake_java_tla(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of tla/ with one simulate cfg, and an environment whose ``java``
    exits at once (so the run line is printed and the simulation 'fails')."""
    tla = tmp_path / "tla"
    shutil.copytree(TLA, tla, ignore=shutil.ignore_patterns("states", "*.out", "*.cfg"))
    shutil.copy(TLA / "SIM3.cfg", tla / "SIM3.cfg")
    text = (tla / "SIM3.cfg").read_text()
    (tla / "SIM3.cfg").write_text(re.sub(r"simulate=\d+", "simulate=7", text, count=1))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # Records its arguments, one run per line, then exits at once.
    (bin_dir / "java").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "java.args"}\nexit 0\n')
    (bin_dir / "java").chmod(0o755)
    jar = tmp_path / "tla2tools.jar"
    jar.write_bytes(b"")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "TLA2TOOLS_JAR": str(jar),
        "PYTHON": sys.executable,
        "TMPDIR": str(tmp_path),
    }
    return tla, env


def check_sh(
    tla: Path, env: dict[str, str], workers: str | None
) -> subprocess.CompletedProcess[str]:
    if workers is not None:
        env = {**env, "TLC_WORKERS": workers}
    return subprocess.run(
        ["bash", str(tla / "check.sh"), "SIM3.cfg"],
        cwd=tla,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_check_sh_runs_a_simulation_for_the_same_worker_seconds(tmp_path: Path) -> None:
    tla, env = fake_java_tla(tmp_path)
    assert "simulate=7\n" in (tla / "SIM3.cfg").read_text()
    for workers, seconds in ((None, 7), ("2", 7), ("1", 14), ("4", 3), ("20", 1)):
        out = check_sh(tla, env, workers).stdout
        assert f"SIM3.cfg: module=MCSDPaxos expect=ok simulate={seconds}s ..." in out, (
            workers,
            out,
        )


def test_check_sh_refuses_a_bad_worker_count(tmp_path: Path) -> None:
    tla, env = fake_java_tla(tmp_path)
    for workers in ("0", "two", "-1", "1.5"):
        result = check_sh(tla, env, workers)
        assert result.returncode == 2, (workers, result.stdout, result.stderr)
        assert "TLC_WORKERS must be a positive integer" in result.stderr
        assert "run  " not in result.stdout


# -- concurrent TLC runs: each its own java.io.tmpdir ----------------------------


def tmpdir_arg(line: str) -> str:
    found = [a for a in line.split() if a.startswith("-Djava.io.tmpdir=")]
    assert len(found) == 1, line
    return found[0].split("=", 1)[1]


def test_each_check_sh_run_gives_tlc_a_tmpdir_of_its_own(tmp_path: Path) -> None:
    """TLC writes TLC.tla, Integers.tla, ... into java.io.tmpdir and parses them
    from there: with the default /tmp, a TLC starting beside another (the
    background runs and trace validation) read one half written, and failed
    with a lexical error in module TLC. Each run now has its own."""
    tla, env = fake_java_tla(tmp_path)
    for _ in range(2):
        check_sh(tla, env, "1")
    runs = (tmp_path / "java.args").read_text().splitlines()
    assert len(runs) == 2
    dirs = [tmpdir_arg(line) for line in runs]
    assert dirs[0] != dirs[1]
    for d in dirs:
        assert Path(d).parent == tmp_path and Path(d).name.startswith("sdpaxos-tlc-SIM3."), d


def test_trace_validation_gives_tlc_a_tmpdir_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sdpaxos.modelcheck import validate
    from sdpaxos.sim.sweep import run_faulty
    from sdpaxos.sim.trace import TRACE_FAULTS

    _, env = fake_java_tla(tmp_path)
    monkeypatch.setenv("PATH", env["PATH"])
    monkeypatch.setenv("TLA2TOOLS_JAR", env["TLA2TOOLS_JAR"])
    run = run_faulty(100001, 3, TRACE_FAULTS, commands=1, trace=True)
    assert run.recorder is not None
    keep = tmp_path / "kept"
    verdict = validate(run.recorder, keep=str(keep))
    assert not verdict.ok  # the fake java checked nothing
    (line,) = (tmp_path / "java.args").read_text().splitlines()
    assert tmpdir_arg(line) == str(keep / "tmp")
    assert (keep / "tmp").is_dir()
