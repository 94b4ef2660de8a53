"""Processes for the runtime benchmarks: start them, measure them, slow them, end them.

Why a module of its own: :mod:`bench.cluster` (every benchmark's node processes),
:mod:`bench.runtime_throughput` (SDPaxos throughput),
:mod:`bench.runtime_engine` (``python -m bench <experiment> --engine runtime``)
and their load generators (:mod:`bench.runtime_loader`) start node and loader
processes the same way, read their CPU the same way and must end them on every
exit path. Everything here is light to import (no simulator, no matplotlib): a
load-generator process imports it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

T = TypeVar("T")

#: The repository root: node and loader processes run from here, so that
#: ``--app bench.runtime_app:BenchLog`` and ``python -m bench.runtime_loader`` import.
REPO_ROOT = Path(__file__).resolve().parent.parent
_CLK_TCK = os.sysconf("SC_CLK_TCK")
#: How long a process is given to stop after SIGTERM before it is SIGKILLed.
STOP_TIMEOUT_S = 10.0
#: ``prctl(PR_SET_PDEATHSIG, ...)``: the option number (Linux).
_PR_SET_PDEATHSIG = 1


def cpu_seconds(pid: int) -> float:
    """``utime + stime`` of a process (all its threads) from ``/proc/<pid>/stat``."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2 :].split()
    # After the command name: state is field 3 (index 0 here); utime 14, stime 15.
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def cpu_seconds_fine(pid: int) -> float:
    """A process's CPU seconds to the nanosecond: the sum over its threads of
    ``/proc/<pid>/task/<tid>/schedstat``'s time on a CPU (user and system).

    Why: :func:`cpu_seconds` counts clock ticks (10 ms here), too coarse for a
    window of a second (a node uses tens of milliseconds in it). A thread that
    exited takes its time with it, unlike in :func:`cpu_seconds`; the nodes' and
    loaders' threads live as long as they do. Falls back to :func:`cpu_seconds`
    where the kernel keeps no schedstat.
    """
    total_ns = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        raise ProcessLookupError(pid) from None
    try:
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total_ns += int(f.read().split()[0])
            except FileNotFoundError:
                continue  # a thread that ended between the listing and the read
    except (OSError, ValueError, IndexError):
        return cpu_seconds(pid)
    return total_ns / 1e9


def cpu_seconds_or_nan(pid: int) -> float:
    """:func:`cpu_seconds_fine`, or NaN for a process that is gone (killed by a fault)."""
    try:
        return cpu_seconds_fine(pid)
    except (OSError, ValueError, IndexError):
        return float("nan")


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from ``/proc/stat``."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def load_average() -> tuple[float, float, float] | None:
    """``uptime``'s three load averages (None where the platform has none)."""
    try:
        return os.getloadavg()
    except OSError:
        return None


def split(total: int, parts: int) -> list[int]:
    """``total`` spread over ``parts`` as evenly as integers allow (first ones larger)."""
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def run_loop(coro: Coroutine[Any, Any, T], fast: bool = False) -> T:
    """Run ``coro``; on uvloop when ``fast`` and it is installed (raw-frame loaders
    only: the runtime's ``Client`` asserts an ``asyncio.Transport``, which
    uvloop's is not)."""
    if not fast:
        return asyncio.run(coro)
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return asyncio.run(coro)
    result: T = uvloop.run(coro)
    return result


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL me when the parent dies (Linux's
    ``PR_SET_PDEATHSIG``), so that a parent killed by SIGKILL leaves no node behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def spawn(
    cmd: Sequence[str],
    *,
    stdout: int | IO[Any] | None = subprocess.DEVNULL,
    stderr: int | IO[Any] | None = None,
    stdin: int | None = None,
    text: bool = False,
) -> subprocess.Popen[Any]:
    """Start ``cmd`` from the repository root, in this process group (Ctrl-C
    reaches it too), killed if this process dies (see :func:`_die_with_parent`).

    Call it from the main thread: the parent-death signal fires when the
    *thread* that forked exits.
    """
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        list(cmd),
        cwd=REPO_ROOT,
        env=env,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        text=text,
        bufsize=1 if text else -1,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )


def stop_processes(
    procs: Sequence[subprocess.Popen[Any]], timeout_s: float = STOP_TIMEOUT_S
) -> None:
    """End every process still running: SIGCONT (a stopped one cannot die of
    SIGTERM), SIGTERM, then SIGKILL after ``timeout_s``; reap them all."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for p in procs:
        try:
            p.wait(max(0.05, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait()


class DutyCycle:
    """Slow a process down to ``1 / factor`` of the wall clock: SIGCONT, run for
    ``period_s / factor``, SIGSTOP for the rest of the period, again and again.

    Why this way to make a straggler: the paper ran CPU-hog loops beside the
    straggler to leave it about a third of a CPU. On this 2-core machine, shared
    by every node, the load generators and other people's jobs, a hog cannot be
    pinned to the straggler alone: it slows whatever else the scheduler puts on
    its core, by an amount that depends on the machine's load. A duty cycle
    bounds the straggler's share of the wall clock exactly, whatever the load,
    and costs no CPU. Its pauses (``period_s - period_s / factor``, 20 ms by
    default) are short beside the protocols' timers (heartbeats every 100 ms or
    more), so the straggler looks slow, not dead. What it does not model: a
    process descheduled by a hog still gets slices every few milliseconds;
    this one is frozen for whole pauses, timers and sockets included.
    """

    def __init__(self, pid: int, factor: float, period_s: float = 0.009) -> None:
        if not factor >= 1:
            raise ValueError(f"a slowdown factor must be >= 1, got {factor}")
        self.pid = pid
        self.factor = factor
        self.period_s = period_s
        self.run_s = period_s / factor
        self.stops = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.factor == 1 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._cycle, name="duty-cycle", daemon=True)
        self._thread.start()

    def _cycle(self) -> None:
        try:
            while not self._stop.is_set():
                os.kill(self.pid, signal.SIGCONT)
                if self._stop.wait(self.run_s):
                    break
                os.kill(self.pid, signal.SIGSTOP)
                self.stops += 1
                if self._stop.wait(self.period_s - self.run_s):
                    break
        except ProcessLookupError:
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        """End the cycle and leave the process running."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)


# ------------------------------------------------------------ loader <-> parent


def say(text: str) -> None:
    """One line to the parent (a loader's stdout)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class StdinWords:
    """Lines from the parent (``go``, ``stop``) as an asyncio queue; end of
    input counts as ``stop`` (the parent is gone)."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[str] = asyncio.Queue()

        def read() -> None:
            for line in sys.stdin:
                loop.call_soon_threadsafe(self.queue.put_nowait, line.strip())
            loop.call_soon_threadsafe(self.queue.put_nowait, "stop")

        threading.Thread(target=read, daemon=True).start()

    async def expect(self, word: str) -> str:
        """The next line starting with ``word`` (its rest); ``stop`` while waiting
        for ``go`` exits the process."""
        while True:
            line = await self.queue.get()
            head, _, rest = line.partition(" ")
            if head == word:
                return rest
            if head == "stop" and word == "go":
                raise SystemExit(0)


class ChildLines:
    """A child process's stdout lines, read by a thread: ``count N`` updates
    :attr:`count`, ``ready`` sets :attr:`ready`, ``connected`` sets
    :attr:`connected`, ``done JSON`` sets :attr:`done` and :attr:`done_event`;
    :attr:`finished` is set when the child's output ends."""

    def __init__(self, proc: subprocess.Popen[str], on_line: Callable[[str], None] | None = None):
        self.proc = proc
        self.count = 0
        self.ready = threading.Event()
        self.connected = threading.Event()
        self.done: Any = None
        self.done_event = threading.Event()
        self.finished = threading.Event()
        self._on_line = on_line
        threading.Thread(target=self._read, daemon=True).start()

    def reset(self) -> None:
        """Before the child's next run: no count, not ready, not done."""
        self.count = 0
        self.done = None
        self.ready.clear()
        self.done_event.clear()

    def _read(self) -> None:
        import json

        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                word, _, rest = line.strip().partition(" ")
                if word == "count":
                    self.count = int(rest)
                elif word == "ready":
                    self.ready.set()
                elif word == "connected":
                    self.connected.set()
                elif word == "done":
                    self.done = json.loads(rest)
                    self.done_event.set()
                elif self._on_line is not None:
                    self._on_line(line.rstrip("\n"))
        except (ValueError, OSError):
            pass
        self.finished.set()
        self.done_event.set()  # no more lines: whoever waits for "done" waits no more

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
