"""``python -m sdpaxos.sim``: closed-loop clients at every replica of a simulated
geo-replicated cluster; prints per-region commit latency and the checkers' verdict.

Examples::

    python -m sdpaxos.sim --profile paper5 --sequencer CA --commands 500 --seed 1 --json
    python -m sdpaxos.sim --sweep 200 --faults all --replicas 3,5 --seed 1
    python -m sdpaxos.sim --failover [--plot failover.png] [--json]
    python -m sdpaxos.sim --failover-sweep 20

Modes:

* default: one run of closed-loop clients at every replica.
* ``--sweep N``: N seeded runs with random fault schedules (see
  :mod:`sdpaxos.sim.sweep`); ``--replicas`` is then a comma list of replica
  counts, used in turn; ``--faults`` is ``all`` or a comma list of
  crash, restart, pause, slow, partition, oneway, drop, dup, reorder, and the
  faults aimed at recovery: droptype, point, handover, churn, anyorder, drift,
  elsewhere, straggler, limits (see :mod:`sdpaxos.sim.faults`). Every run also
  issues linearizable reads, checked for freshness. Progress goes to stderr; at
  the end, the violations (each with the command line that replays it) and a
  summary table (view changes, hand-overs, C-recoveries, reads checked and ok,
  faults by kind).
* ``--failover``: the paper's Fig. 14 scenario (see :mod:`sdpaxos.sim.failover`);
  ``--failover-sweep K`` repeats it at K crash phases over one heartbeat period.

Exit status: 0 if the checkers passed, 1 on a safety or liveness violation (in
any run of a sweep), 2 on bad arguments, 3 if ``--plot`` cannot plot.
"""

import argparse
import json
import math
import sys
from collections.abc import Sequence

from sdpaxos.sim.failover import KILL_MS, PlotUnavailable, failover_sweep, plot, run_failover
from sdpaxos.sim.faults import FaultKind, parse_faults
from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.profiles import PAPER3, DelayProfile, ProfileError, builtin, load_json
from sdpaxos.sim.run import RunResult, run_closed_loop
from sdpaxos.sim.sweep import COMMANDS_DEFAULT, sweep


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sdpaxos.sim",
        description="Deterministic simulation of an SDPaxos cluster with closed-loop clients.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--profile",
        default="paper5",
        help="built-in delay profile: paper3, paper5 or uniformN (default paper5)",
    )
    src.add_argument(
        "--matrix",
        metavar="FILE.json",
        help='user RTT matrix: {"regions": [...], "rtt_ms": [[...], ...]}',
    )
    p.add_argument(
        "--replicas",
        help="comma-separated subset of the profile's regions; with --sweep: replica counts",
    )
    p.add_argument("--sequencer", default=None, help="region of the sequencer (default: first)")
    p.add_argument(
        "--commands",
        type=int,
        default=None,
        help=f"commands issued per region (default 100; {COMMANDS_DEFAULT} with --sweep)",
    )
    p.add_argument("--clients-per-region", type=int, default=1)
    p.add_argument(
        "--client-retry-ms",
        type=float,
        default=None,
        help="re-propose a command not READY after this long (default: never)",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tick-ms", type=float, default=10.0, help="virtual time per core tick")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="max extra one-way delay")
    p.add_argument("--drop", type=float, default=0.0, help="packet drop probability")
    p.add_argument("--dup", type=float, default=0.0, help="packet duplicate probability")
    p.add_argument("--datagram", action="store_true", help="links may reorder (no FIFO)")
    p.add_argument("--measure-rtt", action="store_true", help="feed probed RTTs to observe_rtt")
    p.add_argument(
        "--no-rtt-config",
        action="store_true",
        help="do not give replicas the RTT matrix (use with --measure-rtt)",
    )
    p.add_argument("--drain-ms", type=float, default=60_000.0, help="virtual time to heal")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--sweep", type=int, metavar="N", help="N seeded runs with random faults")
    mode.add_argument("--failover", action="store_true", help="the Fig. 14 sequencer failover")
    mode.add_argument(
        "--failover-sweep",
        type=int,
        metavar="K",
        help="the failover at K crash phases spread over one heartbeat period",
    )
    p.add_argument(
        "--faults",
        default="all",
        help="with --sweep: all, or a comma list of: " + ", ".join(k.value for k in FaultKind),
    )
    p.add_argument(
        "--kill-ms", type=float, default=KILL_MS, help="with --failover: when the sequencer dies"
    )
    p.add_argument("--plot", metavar="OUT.png", help="with --failover: plot throughput over time")
    return p


def _profile(args: argparse.Namespace) -> DelayProfile:
    profile = load_json(args.matrix) if args.matrix else builtin(args.profile)
    if args.replicas:
        profile = profile.subset([r.strip() for r in args.replicas.split(",") if r.strip()])
    return profile


def _table(result: RunResult) -> str:
    lines = [
        f"profile {result.profile.name}  seed {result.seed}  sequencer"
        f" {result.profile.regions[result.sequencer]}  virtual {result.virtual_ms / 1000:.1f} s",
        f"{'region':<8} {'count':>6} {'mean ms':>9} {'p50 ms':>9} {'p99 ms':>9}",
    ]
    for r, s in sorted(result.stats.items()):
        lines.append(
            f"{result.profile.regions[r]:<8} {s.count:>6} {s.mean_ms:>9.2f}"
            f" {s.p50_ms:>9.2f} {s.p99_ms:>9.2f}"
        )
    lines.append(
        f"messages sent {result.messages_sent}  delivered {result.messages_delivered}"
        f"  dropped {result.messages_dropped}  events {result.events}"
    )
    lines.append(f"checkers: {result.verdict}")
    return "\n".join(lines)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _replica_counts(text: str | None) -> list[int]:
    if not text:
        return [3, 5]
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(
            f"--replicas with --sweep takes replica counts like 3,5, got {text!r}"
        ) from None
    if not counts or any(n < 1 or n % 2 == 0 for n in counts):
        raise ValueError(f"--replicas: SDPaxos needs odd replica counts, got {text!r}")
    return counts


def _main_sweep(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        faults = parse_faults(args.faults)
        counts = _replica_counts(args.replicas)
        commands = COMMANDS_DEFAULT if args.commands is None else args.commands
        if args.sweep < 1 or commands < 1:
            raise ValueError("--sweep and --commands must be >= 1")
    except ValueError as exc:
        parser.error(str(exc))
    report = sweep(
        args.sweep,
        seed=args.seed,
        replicas=counts,
        faults=faults,
        commands=commands,
        progress=None if args.quiet else _progress,
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.table())
    return 0 if report.ok else 1


def _main_failover(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        profile = _profile(args) if args.matrix or args.profile != "paper5" else PAPER3
        sequencer = 0 if args.sequencer is None else profile.index(args.sequencer)
        if not args.kill_ms > 0 or not args.tick_ms > 0:
            raise ValueError("--kill-ms and --tick-ms must be > 0")
        if args.failover_sweep is not None and args.failover_sweep < 1:
            raise ValueError("--failover-sweep must be >= 1")
    except (ProfileError, ValueError) as exc:
        parser.error(str(exc))
    if args.failover_sweep is not None:
        result = failover_sweep(
            args.failover_sweep,
            kill_ms=args.kill_ms,
            progress=None if args.quiet else _progress,
            profile=profile,
            sequencer=sequencer,
            seed=args.seed,
            tick_ms=args.tick_ms,
        )
        print(json.dumps(result.to_json(), indent=2) if args.json else result.table())
        return 0 if all(r.checkers == "ok" for r in result.results) else 1
    one = run_failover(
        profile=profile,
        sequencer=sequencer,
        kill_ms=args.kill_ms,
        seed=args.seed,
        tick_ms=args.tick_ms,
    )
    print(json.dumps(one.to_json(), indent=2) if args.json else one.table())
    if args.plot:
        try:
            plot(one, args.plot)
        except PlotUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3
        if not args.quiet:
            _progress(f"plot written to {args.plot}")
    return 0 if one.checkers == "ok" else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.sweep is not None:
        return _main_sweep(args, parser)
    if args.failover or args.failover_sweep is not None:
        return _main_failover(args, parser)
    if args.commands is None:
        args.commands = 100
    try:
        profile = _profile(args)
        sequencer = 0 if args.sequencer is None else profile.index(args.sequencer)
        network = NetworkConfig(
            jitter_ms_max=args.jitter_ms,
            fifo=not args.datagram,
            drop_probability=args.drop,
            duplicate_probability=args.dup,
        )
        if profile.size % 2 == 0:
            raise ProfileError(f"SDPaxos needs an odd number of replicas, got {profile.size}")
        if args.commands < 0 or args.clients_per_region < 1 or not math.isfinite(args.tick_ms):
            raise ValueError("--commands must be >= 0 and --clients-per-region >= 1")
    except (ProfileError, ValueError) as exc:
        parser.error(str(exc))

    result = run_closed_loop(
        profile,
        seed=args.seed,
        sequencer=sequencer,
        commands_per_region=args.commands,
        clients_per_region=args.clients_per_region,
        client_retry_ms=args.client_retry_ms,
        network=network,
        tick_ms=args.tick_ms,
        configured_proximity=not args.no_rtt_config,
        measured_proximity=args.measure_rtt,
        drain_ms=args.drain_ms,
        progress=None if args.quiet else _progress,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(_table(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
