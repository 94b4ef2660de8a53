"""Branch coverage of the core's recovery code reached by the CI fault sweep.

Runs the CI sweep's seeds (``test_fault_sweep.py``: seeds 100000..100149 at
N = 3 and at N = 5, every fault) under coverage.py in branch mode, restricted to the core
(``sdpaxos/core/*.py``), and reports statements and branches per module (one
module per role since the core was split); ``--missing`` lists every branch
never taken in the modules that matter for recovery.

Usage (from the repository root; needs ``pip install coverage``)::

    python -m tests.sim.coverage_sweep                   # the CI seeds, 2 processes
    python -m tests.sim.coverage_sweep --missing         # and the branches never taken
    python -m tests.sim.coverage_sweep --seeds 20 --faults crash,restart --jobs 1

Trace hooks (``if out.tracer is not None:`` and the ``trace(...)`` call under
it) are left out of the counts: the sweep traces only runs with protocol-point
faults, and observability is not recovery.

Not a test (pytest does not collect it): a measurement, documented in
``tests/sim/README.md``. Each worker process writes its own data file in a
temporary directory; they are combined at the end.
"""

import argparse
import json
import multiprocessing
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import coverage

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "sdpaxos" / "core"
#: Modules whose unreached branches ``--missing`` lists (recovery and reads).
RECOVERY_SECTIONS = (
    "acceptor.py",
    "learner.py",
    "sequencer.py",
    "election.py",
    "view_change.py",
    "recovery.py",
    "reads.py",
    "straggler.py",
    "restore.py",
    "replica.py",
)
_TRACE_GUARD = re.compile(r"^if (?:self\.s\.|s\.)?out\.tracer is not None:$")
_TRACE_CALL = re.compile(r"^(?:self\.s\.|s\.)?out\.trace\(")


@dataclass(slots=True)
class Section:
    name: str
    first_line: int
    statements: set[int] = field(default_factory=set)
    executed: set[int] = field(default_factory=set)
    branches: set[tuple[int, int]] = field(default_factory=set)
    taken: set[tuple[int, int]] = field(default_factory=set)


def _work(args: tuple[int, int, str, str]) -> int:
    seed, replicas, faults, data_file = args
    cov = coverage.Coverage(
        data_file=data_file,
        data_suffix=True,
        branch=True,
        include=[str(CORE / "*.py")],
    )
    cov.start()
    try:
        from sdpaxos.sim.faults import parse_faults
        from sdpaxos.sim.sweep import run_faulty

        run = run_faulty(seed, replicas, parse_faults(faults))
    finally:
        cov.stop()
        cov.save()
    return 0 if run.ok else 1


def _sections(report: dict[str, object]) -> list[Section]:
    """One section per core module, trace hooks left out."""
    files = report["files"]
    assert isinstance(files, dict)
    sections = []
    for path, data in sorted(files.items()):
        module = Path(path).resolve()
        text = module.read_text().splitlines()
        tracing = {
            n
            for n, line in enumerate(text, start=1)
            if _TRACE_GUARD.match(line.strip()) or _TRACE_CALL.match(line.strip())
        }
        s = Section(module.name, 1)
        s.executed = set(data["executed_lines"]) - tracing
        s.statements = s.executed | (set(data["missing_lines"]) - tracing)
        s.taken = {(b[0], b[1]) for b in data.get("executed_branches", []) if b[0] not in tracing}
        s.branches = s.taken | {
            (b[0], b[1]) for b in data.get("missing_branches", []) if b[0] not in tracing
        }
        sections.append(s)
    return sections


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:5.1f}%" if whole else "    -"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.sim.coverage_sweep")
    p.add_argument("--seeds", type=int, default=150, help="seeds per replica count")
    p.add_argument("--seed-base", type=int, default=100_000)
    p.add_argument("--replicas", default="3,5")
    p.add_argument("--faults", default="all")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--missing", action="store_true", help="list branches never taken")
    p.add_argument("--json", metavar="OUT", help="also write the per-section numbers here")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.replicas.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        data_file = str(Path(tmp) / ".coverage")
        jobs = [
            (args.seed_base + k, n, args.faults, data_file)
            for n in counts
            for k in range(args.seeds)
        ]
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(max(1, args.jobs)) as pool:
            failed = sum(pool.map(_work, jobs, chunksize=4))
        cov = coverage.Coverage(data_file=data_file, branch=True)
        cov.combine([tmp])
        out = Path(tmp) / "coverage.json"
        cov.json_report(outfile=str(out), include=[str(CORE / "*.py")])
        report = json.loads(out.read_text())
    sections = _sections(report)
    print(
        f"{len(jobs)} runs (seeds {args.seed_base}..{args.seed_base + args.seeds - 1},"
        f" N = {args.replicas}, faults {args.faults}); {failed} failed"
    )
    print(f"{'section':<34}{'stmts':>7}{'cov':>8}{'branches':>10}{'taken':>8}{'cov':>8}")
    rows = [
        (s.name, len(s.statements), len(s.executed), len(s.branches), len(s.taken))
        for s in sections
        if s.statements
    ]
    rows.append(("total", *(sum(r[i] for r in rows) for i in range(1, 5))))
    for name, stmts, executed, branches, taken in rows:
        print(
            f"{name:<34}{stmts:>7}{_pct(executed, stmts):>8}"
            f"{branches:>10}{taken:>8}{_pct(taken, branches):>8}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    s.name: {
                        "statements": len(s.statements),
                        "executed": len(s.executed),
                        "branches": len(s.branches),
                        "taken": len(s.taken),
                        "missing": sorted(s.branches - s.taken),
                    }
                    for s in sections
                    if s.statements
                },
                indent=1,
            )
        )
    if args.missing:
        for s in sections:
            if s.name not in RECOVERY_SECTIONS:
                continue
            lines = (CORE / s.name).read_text().splitlines()
            missing = sorted(s.branches - s.taken)
            print(f"\n== {s.name}: {len(missing)} branches never taken")
            for src, dst in missing:
                where = "exit" if dst < 0 else f"{dst}"
                print(f"  {src:>5} -> {where:<5} {lines[src - 1].strip()[:90]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
