"""``python -m bench <experiment>``: the paper's evaluation, protocol against protocol.

Why a single entry point: every experiment takes the same options (``--quick``,
``--out``, ``--engine``, ``--protocols``, ``--seed``) and writes the same files
(``results.json``, ``results.md``, PNG plots), so a user measures their own
deployment the same way the README's numbers were measured.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from bench.common import RESULTS_ROOT, Context
from bench.experiments.parts import part
from bench.runtime_engine import RuntimeEngine
from sdpaxos.profiles import DelayProfile, ProfileError, builtin, load_json
from sdpaxos.protocols import PROTOCOL_NAMES

#: Each experiment: one line of help (``--help`` lists them).
EXPERIMENTS: dict[str, str] = {
    "latency": "per-region commit and read latency on paper3/paper5 or --profile (Figs. 12, 13)",
    "throughput": "capacity per protocol vs conflict and read share, CPU and NIC (Figs. 10, 11)",
    "straggler": "throughput with one slow replica; SDPaxos moving a slow sequencer (Fig. 9)",
    "failover": "throughput over time per replica when the sequencer/leader is killed (Fig. 14)",
    "reconfig": "throughput and latency per region while a replica is added, the sequencer's"
    " node replaced and a member removed, with each change's stall (issue 31)",
    "report": "runs the quick set and writes one self-contained HTML page",
}
#: Experiments the runtime engine can run: all of them.
RUNTIME_EXPERIMENTS = tuple(EXPERIMENTS)


def _runner(name: str) -> Callable[[Context], int]:
    """The experiment's ``run``, its module imported only now."""
    if name == "report":
        from bench.experiments import report

        return report.run
    return part(name)


def parser() -> argparse.ArgumentParser:
    experiments = "\n".join(f"  {name:<11} {text}" for name, text in EXPERIMENTS.items())
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="The paper's evaluation (SDPaxos, Multi-Paxos, Mencius, EPaxos) on this code.",
        epilog=f"experiments:\n{experiments}\n\nEach writes results.json, results.md and PNG"
        " plots into --out (default bench/results/<experiment>/).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "experiment",
        choices=list(EXPERIMENTS),
        metavar="experiment",
        help=f"one of: {', '.join(EXPERIMENTS)}",
    )
    p.add_argument("--quick", action="store_true", help="small runs (about a minute each)")
    p.add_argument("--out", type=Path, default=None, help="output directory")
    p.add_argument(
        "--engine",
        choices=("sim", "runtime"),
        default="sim",
        help="sim: the simulator in virtual time (default); runtime: one real node process"
        " per region (the delay emulator for wide-area profiles) and one load-generator"
        " process per region",
    )
    p.add_argument(
        "--fsync",
        action="store_true",
        help="runtime engine: nodes fsync their log (default off, as the paper's prototype,"
        " whose log was never made durable)",
    )
    p.add_argument(
        "--protocols",
        default=",".join(PROTOCOL_NAMES),
        help=f"comma-separated (default: {','.join(PROTOCOL_NAMES)}); those not built"
        " yet are reported as 'not built'",
    )
    p.add_argument("--seed", type=int, default=1, help="seed of every workload and run (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument(
        "--profile",
        action="append",
        default=None,
        metavar="NAME_OR_JSON",
        help="latency: a delay profile to measure instead of the paper's two, by name"
        " (paper3, paper5, uniformN) or as a JSON matrix file (format: sdpaxos.profiles);"
        " repeat for several",
    )
    p.add_argument(
        "--sequencer",
        default=None,
        metavar="REGION",
        help="latency: the region of the SDPaxos sequencer and the Multi-Paxos leader"
        " (default: CA where the profile has it, else its first region)",
    )
    p.add_argument(
        "--nic-mbps",
        type=float,
        default=None,
        help="throughput: the NIC of each replica, Mbit/s each way, for the capacity with"
        " one core and one NIC per replica (default 445: the paper's EC2 m4.large)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    protocols = tuple(p.strip() for p in args.protocols.split(",") if p.strip())
    unknown = [p for p in protocols if p not in PROTOCOL_NAMES]
    if unknown or not protocols:
        print(
            f"unknown protocol(s) {', '.join(unknown) or '(none given)'}; choose from"
            f" {', '.join(PROTOCOL_NAMES)}",
            file=sys.stderr,
        )
        return 2
    if args.engine == "runtime" and args.experiment not in RUNTIME_EXPERIMENTS:
        print(
            f"runtime engine supports: {', '.join(RUNTIME_EXPERIMENTS)};"
            f" run {args.experiment} with --engine sim",
            file=sys.stderr,
        )
        return 2
    if args.fsync and args.engine != "runtime":
        print("--fsync is for --engine runtime (the simulator has no disk)", file=sys.stderr)
        return 2
    RuntimeEngine.fsync_default = args.fsync
    if args.nic_mbps is not None and not args.nic_mbps > 0:
        print(f"--nic-mbps must be > 0, got {args.nic_mbps}", file=sys.stderr)
        return 2
    try:
        profiles = _profiles(args)
    except ProfileError as exc:
        print(exc, file=sys.stderr)
        return 2
    out = args.out if args.out is not None else RESULTS_ROOT / args.experiment
    ctx = Context(
        args.experiment,
        out,
        quick=args.quick,
        engine_name=args.engine,
        protocols=protocols,
        seed=args.seed,
        quiet=args.quiet,
        nic_mbps=args.nic_mbps,
        profiles=profiles,
        sequencer=args.sequencer,
    )
    for name, why in ctx.skipped.items():
        ctx.progress(f"skipping {name}: {why}")
    # SIGTERM unwinds like Ctrl-C, so that every experiment's cleanup (the
    # runtime engine's node and loader processes) runs on that exit path too.
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _runner(args.experiment)(ctx)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _profiles(args: argparse.Namespace) -> tuple[DelayProfile, ...]:
    """``--profile``'s profiles (each checked to hold ``--sequencer``'s region).

    Raises:
        ProfileError: an unknown name, a bad file, or a sequencer not in a profile.
    """
    if (args.profile or args.sequencer is not None) and args.experiment != "latency":
        raise ProfileError("--profile and --sequencer are for the latency experiment")
    out: list[DelayProfile] = []
    for given in args.profile or ():
        is_file = given.endswith(".json") or Path(given).exists()
        profile = load_json(given) if is_file else builtin(given)
        if profile.name in {p.name for p in out}:
            raise ProfileError(f"profile {profile.name!r} given twice")
        out.append(profile)
    if args.sequencer is not None:
        from bench.experiments.latency import PROFILES

        for profile in out or PROFILES:
            profile.index(args.sequencer)  # raises, naming the profile's regions
    return tuple(out)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    raise SystemExit(main())
