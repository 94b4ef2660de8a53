"""What every ``python -m bench`` experiment shares: options, progress, output files.

Why one place: each experiment writes the same three kinds of file
(``results.json``, ``results.md``, PNG plots) into its ``--out`` directory and
reports progress the same way, so the report can gather them without knowing
each experiment's internals.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.engines import Engine, RunOutput, RunSpec, SimEngine, protocol_status
from bench.runtime_engine import RuntimeEngine
from bench.workloads import write_history
from sdpaxos.profiles import DelayProfile

#: The engines by ``--engine`` name. Here, not in :mod:`bench.engines`: the
#: runtime engine's module imports the engines' shared types, so the registry
#: that names both must sit above the two, or they would import each other.
ENGINES: dict[str, Callable[[], Engine]] = {"sim": SimEngine, "runtime": RuntimeEngine}
#: Where results go when ``--out`` is not given: ``bench/results/<experiment>/``.
RESULTS_ROOT = Path(__file__).resolve().parent / "results"


class PlotsUnavailable(RuntimeError):
    """matplotlib is not installed (it is the ``bench`` extra)."""


@dataclass(slots=True)
class Context:
    """The options of one ``python -m bench <name>`` invocation."""

    name: str
    out: Path
    quick: bool = False
    engine_name: str = "sim"
    protocols: tuple[str, ...] = ()
    seed: int = 1
    quiet: bool = False
    #: The throughput experiment's NIC model, Mbit/s each way per replica
    #: (``None``: its default, the paper's instance class).
    nic_mbps: float | None = None
    #: The latency experiment's delay profiles (``--profile``; empty: the paper's).
    profiles: tuple[DelayProfile, ...] = ()
    #: Its sequencer's (and Multi-Paxos leader's) region (``--sequencer``; None:
    #: CA where the profile has it, else its first region).
    sequencer: str | None = None
    #: Why each protocol that cannot run is skipped (``"not built: ..."``).
    skipped: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    plots: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in self.protocols:
            why = protocol_status(name)
            if why is not None:
                self.skipped[name] = why

    @property
    def runnable(self) -> list[str]:
        return [p for p in self.protocols if p not in self.skipped]

    def engine(self) -> Engine:
        return ENGINES[self.engine_name]()

    def progress(self, message: str) -> None:
        """One line on stderr, prefixed with the experiment and the elapsed wall time."""
        if not self.quiet:
            elapsed = time.perf_counter() - self.started
            print(f"[{self.name} {elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)

    def run(self, engine: Engine, spec: RunSpec, label: str) -> RunOutput:
        self.progress(f"{label} ...")
        out = engine.run(spec, progress=self.progress)
        tail = "" if out.ok else f" CHECKER: {out.verdict}"
        virtual = f" {out.virtual_ms / 1000:.2f} s virtual," if out.virtual_ms else ""
        self.progress(f"{label}: {len(out.records)} ops,{virtual} {out.wall_s:.1f} s wall{tail}")
        return out

    def status(self, name: str) -> str:
        """``"not built"`` (and why) for a skipped protocol, else ``""``."""
        return self.skipped.get(name, "")


def write_results(ctx: Context, result: dict[str, Any], markdown: str) -> None:
    """``results.json`` and ``results.md`` into ``ctx.out``."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    result = {
        "experiment": ctx.name,
        "quick": ctx.quick,
        "engine": ctx.engine_name,
        "seed": ctx.seed,
        "protocols": list(ctx.protocols),
        "skipped": ctx.skipped,
        "plots": ctx.plots,
        "wall_s": round(time.perf_counter() - ctx.started, 1),
        **result,
    }
    (ctx.out / "results.json").write_text(json.dumps(_clean(result), indent=2) + "\n")
    (ctx.out / "results.md").write_text(markdown.rstrip() + "\n")
    ctx.progress(f"wrote {ctx.out / 'results.json'} and {ctx.out / 'results.md'}")


def write_history_file(
    ctx: Context, outputs: Sequence[RunOutput], name: str = "history.jsonl"
) -> Path:
    """Every operation of ``outputs`` as JSON lines (``python -m sdpaxos.check`` reads them).

    Client ids are made unique across runs (run index times a large stride) so
    that one file can hold several runs without two runs' clients merging.
    """
    ctx.out.mkdir(parents=True, exist_ok=True)
    path = ctx.out / name
    records = []
    for i, out in enumerate(outputs):
        for rec in out.records:
            prefix = f"{out.spec.protocol}/{out.spec.profile.name}/".encode()
            client = (i + 1) * 10_000_000 + rec.client
            records.append(dataclasses.replace(rec, client=client, key=prefix + rec.key))
    write_history(records, path)
    return path


def _clean(value: Any) -> Any:
    """JSON without NaN (``null`` instead), which strict readers reject."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def plots_and_skipped(ctx: Context) -> list[str]:
    """The last lines of an experiment's ``results.md``: its plots, then what it
    did not run and why (nothing for an empty list)."""
    lines: list[str] = []
    for plot in ctx.plots:
        lines += [f"![{plot}]({plot})", ""]
    if ctx.skipped:
        lines += ["## Not run", ""] + [f"- {p}: {why}" for p, why in ctx.skipped.items()] + [""]
    return lines


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """A Markdown pipe table; ``align`` is one letter per column (``l`` or ``r``, default r
    except the first)."""
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


def pyplot() -> Any:
    """matplotlib's pyplot with the file-only backend.

    Raises:
        PlotsUnavailable: matplotlib is not installed.
    """
    try:
        matplotlib = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        return importlib.import_module("matplotlib.pyplot")
    except ImportError as exc:
        raise PlotsUnavailable(
            "plots need matplotlib: pip install 'sdpaxos[bench]' (or pip install matplotlib)"
        ) from exc


def save_plot(ctx: Context, name: str, draw: Callable[[Any], None]) -> str | None:
    """Draw with ``draw(pyplot)`` into ``ctx.out/name``; the file name, or None
    (and a message) when matplotlib is missing."""
    try:
        plt = pyplot()
    except PlotsUnavailable as exc:
        ctx.progress(f"no plot {name}: {exc}")
        return None
    ctx.out.mkdir(parents=True, exist_ok=True)
    draw(plt)
    plt.gcf().tight_layout()
    plt.savefig(ctx.out / name, dpi=100)
    plt.close("all")
    ctx.plots.append(name)
    return name
