"""TLC runs started when collection ends, so model checking overlaps the Python tests.

Why: the TLC configurations are about a third of the suite's time, and they
ran one after another at the end of it while the Python tests had finished
with the machine. CI has two cores and a 15-minute budget. Here the runs the
session selected start in a background thread as soon as collection ends, one
at a time (:data:`BACKGROUND_RUNS_MAX`), each TLC with
:data:`BACKGROUND_TLC_WORKERS` worker, so that they take one core while the
Python tests take the other; each test then waits for its own run's result and
asserts on it exactly as before. A test whose run was not started (selected
some other way, or the background was closed) runs it itself.

What the runs check is unchanged: a breadth-first configuration explores the
same states with one worker as with two; a simulation (``simulate=S``) runs
for the same wall time, so with one worker instead of two it checks fewer
states. Its seconds are set in ``tla/gen_configs.py`` with that in mind.

Nothing here outlives the session: :meth:`Background.close` (at session end,
and on interrupt) cancels the runs not started and kills the process group of
the one running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

TLA = Path(__file__).resolve().parent.parent / "tla"
#: TLC runs at a time in the background: one core for them, one for the tests.
BACKGROUND_RUNS_MAX = 1
#: TLC's ``-workers`` for a background run (``TLC_WORKERS`` of check.sh).
BACKGROUND_TLC_WORKERS = 1
#: Longest a single check.sh run may take, seconds (a hung JVM fails its test).
CHECK_TIMEOUT_S = 900


def run_check(
    *args: str,
    cwd: Path = TLA,
    tmpdir: Path | None = None,
    workers: int | None = None,
    environ: dict[str, str] | None = None,
    on_start: Callable[[subprocess.Popen[str]], bool] | None = None,
    on_end: Callable[[subprocess.Popen[str]], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``bash check.sh *args`` in ``cwd``; its exit status and output.

    ``workers`` sets check.sh's ``TLC_WORKERS`` (its default otherwise).
    ``environ``: the environment to start from (``os.environ`` now otherwise).
    ``on_start(proc)`` is called once the process exists; if it returns False
    the run is killed at once (the background was closed). ``on_end(proc)``
    follows when it is over.
    """
    env = {**(os.environ if environ is None else environ), "PYTHON": sys.executable}
    if tmpdir is not None:  # check.sh keeps a failed run's TLC output there
        env["TMPDIR"] = str(tmpdir)
    if workers is not None:
        env["TLC_WORKERS"] = str(workers)
    argv = ["bash", str(cwd / "check.sh"), *args]
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: check.sh, timeout and java
    )
    if on_start is not None and not on_start(proc):
        _kill_group(proc)
    try:
        out, err = proc.communicate(timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        err += f"\ncheck.sh {' '.join(args)}: killed after {CHECK_TIMEOUT_S} s"
    finally:
        if on_end is not None:
            on_end(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


#: The test that checks one TLC configuration (``tests/test_tla.py``).
TLC_TEST = "test_config_meets_its_directive"


def tlc_configs(items: Iterable[Any]) -> list[str]:
    """The configurations of the TLC tests among ``items`` (collected tests), in order."""
    return [
        item.callspec.params["cfg"]
        for item in items
        if getattr(item, "originalname", None) == TLC_TEST and hasattr(item, "callspec")
    ]


class Background:
    """The session's background TLC runs, one future per configuration."""

    def __init__(self, cwd: Path = TLA) -> None:
        #: Where check.sh and the configurations are.
        self.cwd = cwd
        self._pool: ThreadPoolExecutor | None = None
        self._futures: dict[str, Future[subprocess.CompletedProcess[str]]] = {}
        self._procs: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self._closed = False

    def _on_start(self, proc: subprocess.Popen[str]) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._procs.add(proc)
            return True

    def _on_end(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._procs.discard(proc)

    def start(self, cfgs: list[str]) -> None:
        """Queue a run of each of ``cfgs`` (names in ``tla/``), in this order."""
        if not cfgs or self._closed:
            return
        # The environment as it is now: a test that changes os.environ while
        # a run starts (monkeypatch.setenv) must not leak into that run.
        environ = dict(os.environ)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=BACKGROUND_RUNS_MAX, thread_name_prefix="tlc"
            )
        for cfg in cfgs:
            if cfg not in self._futures:
                self._futures[cfg] = self._pool.submit(
                    run_check,
                    cfg,
                    cwd=self.cwd,
                    workers=BACKGROUND_TLC_WORKERS,
                    environ=environ,
                    on_start=self._on_start,
                    on_end=self._on_end,
                )

    def pending(self) -> list[str]:
        """The configurations queued whose result no test has taken, in order."""
        return list(self._futures)

    def result(self, cfg: str) -> subprocess.CompletedProcess[str]:
        """``cfg``'s run: the background one if it was queued, else one run now."""
        future = self._futures.pop(cfg, None)
        if future is None or future.cancelled():
            return run_check(cfg, cwd=self.cwd)
        return future.result()

    def close(self) -> None:
        """Cancel the runs not started and kill the one running."""
        with self._lock:
            self._closed = True
            running = list(self._procs)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for proc in running:
            _kill_group(proc)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._futures.clear()


#: The one the test session uses (``tests/conftest.py`` starts and closes it).
BACKGROUND = Background()
