"""``python -m sdpaxos.sim``: closed-loop clients at every replica of a simulated
geo-replicated cluster; prints per-region commit latency and the checkers' verdict.

Example::

    python -m sdpaxos.sim --profile paper5 --sequencer CA --commands 500 --seed 1 --json

Exit status: 0 if the checkers passed, 1 on a safety or liveness violation,
2 on bad arguments.
"""

import argparse
import json
import math
import sys
from collections.abc import Sequence

from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.profiles import DelayProfile, ProfileError, builtin, load_json
from sdpaxos.sim.run import RunResult, run_closed_loop


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
    p.add_argument("--replicas", help="comma-separated subset of the profile's regions")
    p.add_argument("--sequencer", default=None, help="region of the sequencer (default: first)")
    p.add_argument("--commands", type=int, default=100, help="commands issued per region")
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
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

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

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
        progress=None if args.quiet else progress,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(_table(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
