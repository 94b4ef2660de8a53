"""Micro-benchmark of the SDPaxos core alone: one process, no I/O, no clock in the core.

What runs
---------

An N-replica cluster of :class:`sdpaxos.core.Replica` objects (N = 3 by
default) in one process. Every replica hosts ``--sessions`` closed-loop client
sessions, each with exactly one command outstanding: the moment a command's
READY reply comes back from its command leader, the session proposes its next
command (until ``--commands`` have been proposed in total). The cluster runs in
the benchmarks' one round driver (:mod:`bench.rounds`, ``kv=False``,
``exact=True``): replicas are serviced in rounds, in an order shuffled by
``--seed`` each round; servicing a replica means stepping every message in its
inbox (a *step batch*), calling :meth:`Replica.ready` once and carrying out the
batch with the shared in-memory driver (:func:`sdpaxos.sim.driver.carry_out`):
counting the records to persist (kept nowhere: the benchmark measures the core,
not storage), appending each outgoing message to the destination's FIFO inbox,
and proposing the follow-up commands of the sessions whose commands became
ready. Nothing is lost, duplicated or reordered per link, and the clock stands
still while the cluster is busy, so :meth:`Replica.tick` is never needed; it is
called only as a fallback when the cluster goes quiet before finishing
(``ticks``: the most any replica took; a healthy run shows 0).

With ``--codec`` every ready batch is encoded per destination with
:func:`sdpaxos.wire.codec.encode_batch` (split at ``MESSAGES_PER_BATCH_MAX``;
a message sent to several peers is packed once, as the runtime does) and
decoded with :func:`~sdpaxos.wire.codec.decode_batch` at delivery.

What it reports (per run; the table shows the median of ``--repeat`` runs and
the best, after one untimed warm-up run of ``--warmup`` commands):

* messages stepped / s: calls to :meth:`Replica.step` per wall second;
* commands committed / s: READY replies at the command leaders, over the time
  until the last one;
* commands executed / s: per replica, commands applied to that replica's state
  machine over the time until it had applied all of them, and "everywhere":
  the total over the time until the slowest replica had applied all of them.

Correctness, checked after every run by the round driver (exit status 1 if
any check fails): every command got exactly one READY reply at its leader,
every replica applied exactly ``--commands`` commands, every replica's
state-machine digest (``bench.runtime_app.BenchLog``'s order chain over the
payloads in execution order) is the same, no replica rejected a peer message,
and the run was not stuck.

Run ``python -m bench.core_micro --help`` (from the repository root) for the knobs.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from bench.core_micro_report import RunResult, Settings, Summary, all_problems, format_table
from bench.round_outlet import Driver
from bench.rounds import drive
from bench.runtime_app import BenchLog
from sdpaxos.protocols import protocol

__all__ = [
    "RunResult",
    "Settings",
    "Summary",
    "all_problems",
    "codec_available",
    "format_table",
    "main",
    "run_benchmark",
    "run_once",
]

#: Modules whose classes' methods :func:`print_profile` names (with sdpaxos's).
_OWN_MODULES = ("bench.core_micro", "bench.rounds", "bench.round_outlet", "bench.runtime_app")


def _load_codec() -> Any:
    """``sdpaxos.wire.codec``: its module-level ``encode_batch`` and
    ``decode_batch`` are the round driver's codec (imported with --codec only)."""
    from sdpaxos.wire import codec

    return codec


def codec_unavailable_reason() -> str | None:
    """``None`` if ``sdpaxos.wire.codec`` imports, else why not (absent or broken)."""
    try:
        _load_codec()
    except Exception as exc:  # ImportError if absent; anything if mid-edit
        return f"{type(exc).__name__}: {exc}"
    return None


def codec_available() -> bool:
    return codec_unavailable_reason() is None


def peak_rss_kb() -> int:
    """The process's peak resident set size so far (``VmHWM``, kB; Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class _Milestones:
    """The wall-clock side of a run (a :class:`bench.rounds.Watch`): when every
    command was READY, when each replica had executed them all, the peak RSS
    at the ``rss_at`` milestones, progress once a second."""

    def __init__(self, settings: Settings, progress: Callable[[str], None] | None) -> None:
        self.total = settings.commands
        self.milestones = sorted(m for m in settings.rss_at if m <= self.total)
        self.rss_peak_kb: dict[int, int] = {}
        self.progress = progress
        self.t0 = self.end = self.last_progress = 0.0
        self.cpu0 = self.cpu_end = 0.0
        self.commit_done: float | None = None
        self.exec_done: list[float | None] = [None] * settings.replicas

    def started(self, d: Driver) -> None:
        self.cpu0 = self.cpu_end = time.process_time()
        self.t0 = self.end = self.last_progress = time.perf_counter()

    def round_done(self, d: Driver, rounds: int) -> None:
        now = self.end = time.perf_counter()
        self.cpu_end = time.process_time()
        committed = d.completed
        if self.commit_done is None and committed >= self.total:
            self.commit_done = now
        machines = d.machines
        for r, done in enumerate(self.exec_done):
            if done is None and machines[r].applied >= self.total:
                self.exec_done[r] = now
        milestones = self.milestones
        while milestones and committed >= milestones[0]:
            self.rss_peak_kb[milestones.pop(0)] = peak_rss_kb()
        if self.progress is not None and now - self.last_progress >= 1.0:
            self.last_progress = now
            t = now - self.t0
            self.progress(
                f"  {committed:>10,}/{self.total:,} READY, "
                f"executed min {min(m.applied for m in machines):,}, "
                f"{committed / t:,.0f} cmd/s, {d.steps / t:,.0f} steps/s"
            )


def run_once(settings: Settings, progress: Callable[[str], None] | None = None) -> RunResult:
    """Build a fresh cluster, run ``settings.commands`` commands to completion, verify."""
    s = settings
    if s.commands < 1 or s.sessions < 1:
        raise ValueError("commands and sessions must be >= 1")
    if s.storage not in ("counting", "memory"):
        raise ValueError(f"storage must be 'counting' or 'memory', got {s.storage!r}")
    codec = _load_codec() if s.codec else None
    watch = _Milestones(s, progress)
    rounds_res, d = drive(
        s.round_spec(),
        protocol("sdpaxos").make_replica,
        codec,
        config=s.cluster_config(),
        machine=BenchLog,
        watch=watch,
    )
    res = RunResult(settings=s)
    t0 = watch.t0
    res.elapsed_s = watch.end - t0
    res.cpu_s = watch.cpu_end - watch.cpu0
    res.cpu_share = res.cpu_s / res.elapsed_s if res.elapsed_s > 0 else 0.0
    commit_done = watch.commit_done
    res.commit_elapsed_s = (commit_done if commit_done is not None else watch.end) - t0
    res.exec_elapsed_s = [(t if t is not None else watch.end) - t0 for t in watch.exec_done]
    res.steps = rounds_res.steps
    res.rounds = rounds_res.rounds
    res.ready_calls = sum(rounds_res.turns)
    res.messages_sent = rounds_res.messages_sent
    res.frames = rounds_res.frames
    res.wire_bytes = rounds_res.codec_bytes
    res.persist_records = rounds_res.persist_records
    res.ticks = max(rounds_res.ticks, default=0)
    res.committed = d.completed
    res.executed = rounds_res.executed
    res.digests = rounds_res.digests
    res.rss_peak_kb = watch.rss_peak_kb
    for rep in d.replicas:
        st = rep.stats
        res.c_instances += st.c_instances_started
        res.o_instances += st.o_instances_allocated
        res.rejected += st.rejected
        res.stale += st.stale
        res.retransmissions += st.retransmissions
        res.learn_requests += st.learn_requests
        res.snapshots += st.snapshots_taken
    res.problems = rounds_res.problems
    return res


def run_benchmark(
    settings: Settings,
    *,
    repeat: int = 5,
    warmup: int = 20_000,
    gc_enabled: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Summary:
    """One untimed warm-up run of ``warmup`` commands, then ``repeat`` timed runs."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    if warmup > 0:
        if progress is not None:
            progress(f"warm-up: {warmup:,} commands")
        warmup_problems = run_once(replace(settings, commands=warmup)).problems
    else:
        warmup_problems = []
    runs: list[RunResult] = []
    for i in range(repeat):
        if progress is not None:
            progress(f"run {i + 1}/{repeat}: {settings.commands:,} commands")
        gc.collect()
        was_enabled = gc.isenabled()
        if not gc_enabled:
            gc.disable()
        try:
            result = run_once(settings, progress)
        finally:
            if was_enabled:
                gc.enable()
        runs.append(result)
        if progress is not None:
            progress(
                f"  done in {result.elapsed_s:.3f} s: {result.committed_per_s:,.0f} committed/s, "
                f"{result.executed_everywhere_per_s:,.0f} executed/s, "
                f"{result.steps_per_s:,.0f} steps/s" + ("" if result.ok else "  FAILED")
            )
    return Summary(settings, repeat, warmup, gc_enabled, runs, warmup_problems)


def _code_names() -> dict[int, str]:
    """Qualified names of the methods of every class in sdpaxos and this module.

    Dataclass-generated ``__init__`` methods all live in ``<string>`` line 2, so
    :mod:`pstats` merges them into one row (and keeps only one of them); keying
    the raw profiler entries by code object and naming them here keeps
    ``Command.__init__`` apart from ``Reply.__init__``. Keys are ``id(code)``:
    code objects compare by value, and ``CAccept`` and ``CCommit`` (same fields)
    have equal ``__init__`` code.
    """
    names: dict[int, str] = {}
    for mod_name, module in list(sys.modules.items()):
        if module is None or not (mod_name.startswith("sdpaxos") or mod_name in _OWN_MODULES):
            continue
        for obj in list(vars(module).values()):
            if not isinstance(obj, type):
                continue
            for attr, value in vars(obj).items():
                code = getattr(value, "__code__", None)
                if code is not None:
                    names.setdefault(id(code), f"{obj.__qualname__}.{attr}")
    return names


def print_profile(
    settings: Settings, top: int, *, gc_enabled: bool = True, file: Any = None
) -> None:
    """Run once under :mod:`cProfile`; print the ``top`` functions by own time.

    Cyclic-GC pauses are charged to whatever function allocated when a
    collection started; compare with ``--no-gc`` to see how much that is.
    """
    import cProfile

    out = file if file is not None else sys.stderr
    gc.collect()
    was_enabled = gc.isenabled()
    if not gc_enabled:
        gc.disable()
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        result = run_once(settings)
    finally:
        profiler.disable()
        if was_enabled:
            gc.enable()
    names = _code_names()
    rows: dict[int, list[Any]] = {}
    for entry in profiler.getstats():
        code = entry.code
        row = rows.get(id(code))
        if row is None:
            if isinstance(code, str):
                label = code
            else:
                where = code.co_filename.split("/sdpaxos/")[-1].split("/bench/")[-1]
                name = names.get(id(code), code.co_qualname)
                label = f"{name} ({where}:{code.co_firstlineno})"
            row = rows[id(code)] = [label, 0, 0.0, 0.0]
        row[1] += entry.callcount
        row[2] += entry.inlinetime
        row[3] += entry.totaltime
    total = sum(row[2] for row in rows.values())
    print(
        f"cProfile of one run ({result.committed:,} commands, {total:.3f} s profiled, "
        f"gc {'on' if gc_enabled else 'off'}; profiling inflates call-heavy code: "
        "read shares, not rates):",
        file=out,
    )
    print(f"  {'own %':>6} {'cum %':>6} {'calls':>10}  function", file=out)
    for label, calls, own, cum in sorted(rows.values(), key=lambda r: r[2], reverse=True)[:top]:
        print(
            f"  {100 * own / total:6.1f} {100 * cum / total:6.1f} {calls:>10,}  {label}",
            file=out,
        )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    d = Settings()
    p = argparse.ArgumentParser(
        prog="python -m bench.core_micro",
        description="Micro-benchmark of the SDPaxos core: in-memory cluster, closed-loop load.",
    )
    p.add_argument("--replicas", type=_positive, default=d.replicas, help="N (odd; default 3)")
    p.add_argument(
        "--sessions", type=_positive, default=d.sessions, help="closed-loop sessions per replica"
    )
    p.add_argument(
        "--commands", type=_positive, default=d.commands, help="commands to commit in total"
    )
    p.add_argument("--c-batch-max", type=_positive, default=d.c_batch_max)
    p.add_argument("--o-batch-max", type=_positive, default=d.o_batch_max)
    p.add_argument("--c-inflight-max", type=_positive, default=d.c_inflight_max)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--codec", action="store_true", help="encode/decode every batch with sdpaxos.wire.codec"
    )
    p.add_argument("--repeat", type=_positive, default=5, help="timed runs (median reported)")
    p.add_argument(
        "--warmup", type=_non_negative, default=20_000, help="commands of the untimed warm-up run"
    )
    p.add_argument("--no-gc", action="store_true", help="disable the cyclic GC in timed runs")
    p.add_argument(
        "--profile",
        type=_non_negative,
        default=0,
        metavar="TOP",
        help="after the timed runs, run once more under cProfile and print the TOP "
        "functions by own time to stderr",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = codec_unavailable_reason() if args.codec else None
    if reason is not None:
        print(
            f"--codec: sdpaxos.wire.codec is not usable ({reason}); codec mode skipped",
            file=sys.stderr,
        )
        return 2
    settings = Settings(
        replicas=args.replicas,
        sessions=args.sessions,
        commands=args.commands,
        c_batch_max=args.c_batch_max,
        o_batch_max=args.o_batch_max,
        c_inflight_max=args.c_inflight_max,
        seed=args.seed,
        codec=args.codec,
    )
    try:
        settings.cluster_config()
    except ValueError as exc:
        print(f"bad settings: {exc}", file=sys.stderr)
        return 2

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    summary = run_benchmark(
        settings,
        repeat=args.repeat,
        warmup=args.warmup,
        gc_enabled=not args.no_gc,
        progress=None if args.quiet else progress,
    )
    if args.profile:
        print_profile(settings, args.profile, gc_enabled=not args.no_gc)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print(format_table(summary))
    if not summary.ok:
        for problem in all_problems(summary):
            print(f"FAILED {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
