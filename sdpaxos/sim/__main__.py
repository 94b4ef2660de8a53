"""``python -m sdpaxos.sim``: closed-loop clients at every replica of a simulated
geo-replicated cluster; prints per-region commit latency and the checkers' verdict.

Examples::

    python -m sdpaxos.sim --profile paper5 --sequencer CA --commands 500 --seed 1 --json
    python -m sdpaxos.sim --sweep 200 --faults all --replicas 3,5 --seed 1
    python -m sdpaxos.sim --sweep 200 --replicas 3,5,7 --snapshot-slots 3
    python -m sdpaxos.sim --failover [--plot failover.png] [--json]
    python -m sdpaxos.sim --failover-sweep 20

Modes:

* a plain run (no mode option): one run of closed-loop clients at every
  replica. ``--replicas`` is a comma list of the profile's region names, or a
  bare number N for its first N regions (``--replicas 3`` on paper5 is CA, OR,
  OH).
* ``--sweep N``: N seeded runs with random fault schedules (see
  :mod:`sdpaxos.sim.sweep`); ``--replicas`` is then a comma list of replica
  counts, used in turn; ``--faults`` is ``all``, ``none`` or a comma list of
  crash, restart, pause, slow, partition, oneway, drop, dup, reorder, and the
  faults aimed at recovery: droptype, point, handover, churn, anyorder, drift,
  elsewhere, straggler, limits (see :mod:`sdpaxos.sim.faults`); or ``reconfig``
  alone: membership changes under crashes and partitions
  (:mod:`sdpaxos.sim.reconfig_sweep`; the table counts changes made and
  interrupted). Every run also
  issues linearizable reads, checked for freshness. Progress goes to stderr; at
  the end, the violations (each with the command line that replays it) and a
  summary table (view changes, hand-overs, C-recoveries, reads checked and ok,
  faults by kind).
* ``--failover``: the paper's Fig. 14 scenario (see :mod:`sdpaxos.sim.failover`);
  ``--failover-sweep K`` repeats it at K crash phases over one heartbeat period.
  The table's columns are explained under it (:data:`FAILOVER_LEGEND`).

Options belong to modes (:data:`MODE_OPTIONS`); one given to another mode is
refused rather than ignored. Every bad value is refused with a one-line error
naming the option and what it allows.

Exit status: 0 if the checkers passed, 1 on a safety or liveness violation (in
any run of a sweep), 2 on bad arguments, 3 if ``--plot`` cannot plot.
"""

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from sdpaxos.profiles import (
    PAPER3,
    PAPER5,
    REGIONS_MAX,
    DelayProfile,
    ProfileError,
    builtin,
    load_json,
)
from sdpaxos.protocols import PROTOCOL_NAMES
from sdpaxos.sim.failover import KILL_MS, PlotUnavailable, failover_sweep, plot, run_failover
from sdpaxos.sim.faults import FaultKind, parse_faults
from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.reconfig import MEMBERS_MAX
from sdpaxos.sim.reconfig_sweep import run_cli
from sdpaxos.sim.run import RunResult, run_closed_loop
from sdpaxos.sim.sweep import COMMANDS_DEFAULT, sweep
from sdpaxos.sim.workload import CLIENTS_PER_REGION_MAX

#: Largest virtual time any ``--*-ms`` option takes (about 11.6 days). The
#: simulator turns ms into whole microseconds with ``round(ms * 1000)``: exact
#: up to this bound and far beyond, but ``inf`` or ``1e308`` end in an OverflowError.
MS_MAX = 1e9
#: Smallest tick or retry interval: the simulator's clock counts whole
#: microseconds, and an interval that rounds to 0 us repeats forever at one instant.
MS_STEP_MIN = 0.001
#: Fewest replicas of a sweep run or a failover: the sweep's faults pick a peer
#: of the replica they hit (partition, one-way, the aimed faults), and the
#: failover kills the sequencer and needs a majority of survivors.
REPLICAS_MIN_WITH_PEERS = 3
#: Most replicas of a sweep run: the largest odd profile size.
SWEEP_REPLICAS_MAX = REGIONS_MAX - 1 if REGIONS_MAX % 2 == 0 else REGIONS_MAX


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr, exit status 2.

    argparse's default repeats the whole usage (a dozen lines here) above the
    message; the message is what the user needs, and ``--help`` has the rest.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _whole(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number in ``low .. high`` (each bound optional).

    Checked while parsing so that argparse names the option in the error.
    """
    if low is None:
        allowed = "a whole number"
    elif high is None:
        allowed = f"a whole number >= {low}"
    else:
        allowed = f"a whole number from {low} to {high}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")
        return value

    return parse


def _number(
    low: float, high: float, *, above: bool = False, what: str = "a number of ms"
) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number in ``[low, high]`` (``(low, high]`` if ``above``).

    ``float()`` takes ``nan`` and ``inf``; neither is a duration or a
    probability, and both end in a traceback deep in the simulator.
    """
    top = f"{high:.0e}".replace("e+0", "e") if high >= 1e6 else f"{high:g}"
    allowed = f"{what} > {low:g} and <= {top}" if above else f"{what} from {low:g} to {top}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (above and value == low) or value > high:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")
        return value

    return parse


#: The modes, as the errors name them.
RUN = "a plain run"
SWEEP = "--sweep"
FAILOVER = "--failover"
FAILOVER_SWEEP = "--failover-sweep"
MODES = (RUN, SWEEP, FAILOVER, FAILOVER_SWEEP)
_CLUSTER = (RUN, FAILOVER, FAILOVER_SWEEP)

#: Options that belong to some modes only: dest -> (flag, modes). Given to any
#: other mode they are refused: silently ignoring them let a user believe that,
#: say, ``--sweep 10 --drop 0.2`` dropped packets.
MODE_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "profile": ("--profile", _CLUSTER),
    "matrix": ("--matrix", _CLUSTER),
    "sequencer": ("--sequencer", _CLUSTER),
    "tick_ms": ("--tick-ms", _CLUSTER),
    "protocol": ("--protocol", _CLUSTER),
    "commands": ("--commands", (RUN, SWEEP)),
    "clients_per_region": ("--clients-per-region", (RUN,)),
    "client_retry_ms": ("--client-retry-ms", (RUN,)),
    "jitter_ms": ("--jitter-ms", (RUN,)),
    "drop": ("--drop", (RUN,)),
    "dup": ("--dup", (RUN,)),
    "datagram": ("--datagram", (RUN,)),
    "measure_rtt": ("--measure-rtt", (RUN,)),
    "no_rtt_config": ("--no-rtt-config", (RUN,)),
    "drain_ms": ("--drain-ms", (RUN,)),
    "faults": ("--faults", (SWEEP,)),
    "snapshot_slots": ("--snapshot-slots", (SWEEP,)),
    "kill_ms": ("--kill-ms", (FAILOVER, FAILOVER_SWEEP)),
    "plot": ("--plot", (FAILOVER,)),
}

#: Defaults of the options above, filled in once the mode check has seen which
#: options were given (argparse's own defaults would hide that).
TICK_MS_DEFAULT = 10.0
DRAIN_MS_DEFAULT = 60_000.0
COMMANDS_RUN_DEFAULT = 100

#: What the ``--failover`` table's columns mean: printed under the table and in
#: ``--help``. "first READY ms" is the one that misleads: it is often a few ms,
#: from commands the dead sequencer had already ordered, not a fast failover.
FAILOVER_LEGEND = """\
columns, per surviving region, in virtual ms from the kill:
  first READY ms          first READY after the kill, of any command. Commands the dead
                          sequencer had already ordered still finish a few ms after it, so
                          a small value does not mean the failover was fast
  stall ms (exact)        until the first READY under the new sequencer (a newer view):
                          how long the region's service stopped
  stall ms (100 ms bins)  the paper's Fig. 14 measure: READY replies counted in 100 ms
                          bins; empty bins from the kill's bin to the end, times 100 ms
  READY after             READY replies after the kill
  never                   no such READY before the run ended
"""
#: The same for the ``--failover-sweep`` table.
FAILOVER_SWEEP_LEGEND = """\
mean, median and max over the kill times, in virtual ms from the kill:
  exact ms     until the region's first READY under the new sequencer
  100 ms bins  the paper's measure: empty 100 ms bins of READY replies, times 100 ms
"""

_EPILOG = f"""\
modes:
  a plain run         (no mode option) closed-loop clients at every replica; prints
                      each region's commit latency and the checkers' verdict
  --sweep N           N seeded runs with random faults (--replicas: replica counts)
  --failover          the paper's Fig. 14: the sequencer dies under load; prints how
                      long each surviving region stalls
  --failover-sweep K  the failover with the kill at K points of one heartbeat period
The options under each heading above belong to the modes it names; given to
another mode, an option is refused (exit 2), not ignored.

--replicas outside --sweep: region names (--replicas CA,OR,IRE), or a bare
number N for the profile's first N regions (--replicas 3 on paper5 is CA,OR,OH,
the paper3 matrix). With --sweep: replica counts (--replicas 3,5), each run on
paper3 for 3, paper5 for 5, a uniform profile otherwise.

the --failover table's {FAILOVER_LEGEND}
exit status: 0 if the checkers passed, 1 on a safety or liveness violation (in
any run of a sweep), 2 on bad arguments, 3 if --plot cannot plot.
"""


def _file_name(text: str) -> str:
    """An argparse ``type`` for a file name: an empty one was taken as "not given"."""
    if not text:
        raise argparse.ArgumentTypeError("expected a file name, got ''")
    return text


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m sdpaxos.sim",
        description="Deterministic simulation of an SDPaxos cluster with closed-loop clients.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    modes = p.add_argument_group("mode (at most one; none is a plain run)")
    mode = modes.add_mutually_exclusive_group()
    mode.add_argument(
        "--sweep", type=_whole(1), metavar="N", help="N >= 1 seeded runs with random faults"
    )
    mode.add_argument(
        "--failover",
        action="store_true",
        help="the Fig. 14 sequencer failover (its table's columns are explained below)",
    )
    mode.add_argument(
        "--failover-sweep",
        type=_whole(1),
        metavar="K",
        help="the failover at K >= 1 crash phases spread over one heartbeat period",
    )

    every = p.add_argument_group("every mode")
    every.add_argument("--seed", type=_whole(), default=1, help="any whole number (default 1)")
    every.add_argument("--json", action="store_true", help="print JSON instead of a table")
    every.add_argument("--quiet", action="store_true", help="no progress on stderr")

    cluster = p.add_argument_group(
        "the cluster: a plain run, --failover, --failover-sweep (--replicas: --sweep too)"
    )
    src = cluster.add_mutually_exclusive_group()
    src.add_argument(
        "--profile",
        help="built-in delay profile: paper3, paper5 or uniformN (N regions 100 ms apart);"
        " default paper5, paper3 with --failover",
    )
    src.add_argument(
        "--matrix",
        type=_file_name,
        metavar="FILE.json",
        help='user RTT matrix: {"regions": [...], "rtt_ms": [[...], ...]}',
    )
    cluster.add_argument(
        "--replicas",
        help="which regions get a replica: region names (CA,OR,IRE) or a bare number N for"
        " the profile's first N; with --sweep: a comma list of odd replica counts, 3 to"
        f" {SWEEP_REPLICAS_MAX} (default 3,5); see below",
    )
    cluster.add_argument(
        "--sequencer",
        help="region of the sequencer: a name or an index (default: the first region)",
    )
    cluster.add_argument(
        "--tick-ms",
        type=_number(MS_STEP_MIN, MS_MAX),
        help=f"virtual time per core tick, >= 0.001 (default {TICK_MS_DEFAULT:g})",
    )

    cluster.add_argument(
        "--protocol",
        choices=PROTOCOL_NAMES,
        help="the protocol the replicas run (default sdpaxos); a baseline's --sequencer is"
        " its leader (Multi-Paxos) or view-0 coordinator",
    )
    run = p.add_argument_group("a plain run (--commands: --sweep too)")
    run.add_argument(
        "--commands",
        type=_whole(0),
        help=f"commands issued per region (default {COMMANDS_RUN_DEFAULT};"
        f" {COMMANDS_DEFAULT}, and >= 1, with --sweep)",
    )
    run.add_argument(
        "--clients-per-region",
        type=_whole(1, CLIENTS_PER_REGION_MAX),
        help=f"closed-loop clients at each region, 1 to {CLIENTS_PER_REGION_MAX} (default 1)",
    )
    run.add_argument(
        "--client-retry-ms",
        type=_number(MS_STEP_MIN, MS_MAX),
        help="re-propose a command not READY after this long, >= 0.001 (default: never)",
    )
    run.add_argument(
        "--jitter-ms",
        type=_number(0.0, MS_MAX),
        help="max extra one-way delay, >= 0 (default 0)",
    )
    run.add_argument(
        "--drop",
        type=_number(0.0, 1.0, what="a probability"),
        help="packet drop probability, 0 to 1 (default 0)",
    )
    run.add_argument(
        "--dup",
        type=_number(0.0, 1.0, what="a probability"),
        help="packet duplicate probability, 0 to 1 (default 0)",
    )
    run.add_argument("--datagram", action="store_true", help="links may reorder (no FIFO)")
    run.add_argument("--measure-rtt", action="store_true", help="feed probed RTTs to observe_rtt")
    run.add_argument(
        "--no-rtt-config",
        action="store_true",
        help="do not give replicas the RTT matrix (use with --measure-rtt)",
    )
    run.add_argument(
        "--drain-ms",
        type=_number(0.0, MS_MAX, above=True),
        help="virtual time, after the clients finish and faults heal, for every command to"
        f" execute everywhere before the liveness check, > 0 (default {DRAIN_MS_DEFAULT:g})",
    )

    sweeps = p.add_argument_group("--sweep")
    sweeps.add_argument(
        "--faults",
        help="all (the default), none, or a comma list of: "
        + ", ".join(k.value for k in FaultKind)
        + "; or reconfig alone: membership changes (add, remove, replace, the sequencer's"
        " node) hit by crashes and partitions, on Member nodes",
    )
    sweeps.add_argument(
        "--snapshot-slots",
        type=_whole(1),
        metavar="S",
        help="compaction on: a snapshot every S executed slots (small S: snapshots, state"
        " transfers and installs happen during the faults); off by default",
    )

    failovers = p.add_argument_group("--failover and --failover-sweep")
    failovers.add_argument(
        "--kill-ms",
        type=_number(0.0, MS_MAX, above=True),
        help=f"when the sequencer dies (the first kill of a sweep), > 0 (default {KILL_MS:g})",
    )
    failovers.add_argument(
        "--plot",
        type=_file_name,
        metavar="OUT.png",
        help="--failover only: plot throughput over time (needs matplotlib)",
    )
    return p


def _mode(args: argparse.Namespace) -> str:
    if args.sweep is not None:
        return SWEEP
    if args.failover:
        return FAILOVER
    return RUN if args.failover_sweep is None else FAILOVER_SWEEP


def _check_mode(args: argparse.Namespace, parser: argparse.ArgumentParser, mode: str) -> None:
    """Refuse an option given to a mode it does not belong to (see :data:`MODE_OPTIONS`)."""
    for dest, (flag, modes) in MODE_OPTIONS.items():
        value = getattr(args, dest)
        if value is not None and value is not False and mode not in modes:
            belongs = modes[0] if len(modes) == 1 else f"{', '.join(modes[:-1])} and {modes[-1]}"
            _refuse(parser, flag, f"only applies to {belongs}, not to {mode}")


def _refuse(parser: argparse.ArgumentParser, option: str, message: str) -> NoReturn:
    """A bad value found after parsing: worded like argparse's own, naming the option."""
    parser.error(f"argument {option}: {message}")


def _cluster_option(args: argparse.Namespace) -> str:
    """The option that chose the cluster's size, to name when the size is wrong."""
    if args.replicas is not None:
        return "--replicas"
    return "--matrix" if args.matrix is not None else "--profile"


def _profile(
    args: argparse.Namespace, parser: argparse.ArgumentParser, default: DelayProfile
) -> DelayProfile:
    """The cluster of a plain run or a failover: ``--profile`` or ``--matrix``, cut by
    ``--replicas``, checked to have an odd number of replicas."""
    try:
        if args.matrix is not None:
            profile = load_json(args.matrix)
        else:
            profile = default if args.profile is None else builtin(args.profile)
    except ProfileError as exc:
        _refuse(parser, "--matrix" if args.matrix is not None else "--profile", str(exc))
    if args.replicas is not None:
        profile = _cut(profile, args.replicas, parser)
    if profile.size % 2 == 0:
        _refuse(
            parser,
            _cluster_option(args),
            f"SDPaxos needs an odd number of replicas, got {profile.size}",
        )
    return profile


def _cut(profile: DelayProfile, text: str, parser: argparse.ArgumentParser) -> DelayProfile:
    """``--replicas`` outside a sweep: a bare number N is the profile's first N regions,
    anything else a comma list of region names.

    Index lists (``0,2,4``) are refused, though :meth:`DelayProfile.index` reads
    them: ``--replicas 3,5`` is a sweep's list of replica counts, and read as
    indices it silently meant IRE and SEL.
    """
    regions = ", ".join(profile.regions)
    if text.strip().isdecimal():  # what int() reads; isdigit() also takes "²"
        n = int(text)
        if not 1 <= n <= profile.size:
            name = "paper5" if n <= PAPER5.size else f"uniform{n}"
            bigger = "" if n < 1 else f"; for {n}, pick a bigger profile (--profile {name})"
            _refuse(
                parser,
                "--replicas",
                f"a bare number is a replica count, from 1 to {profile.size} for profile"
                f" {profile.name} ({regions}), got {text!r}{bigger}",
            )
        return profile if n == profile.size else profile.subset(profile.regions[:n])
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        _refuse(
            parser,
            "--replicas",
            f"expected a replica count or region names of profile {profile.name}"
            f" ({regions}), got {text!r}",
        )
    for name in names:
        if name not in profile.regions:
            _refuse(
                parser,
                "--replicas",
                f"{name!r} is not a region of profile {profile.name} ({regions}); a bare"
                " number alone is a replica count, and counts like 3,5 need --sweep",
            )
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        _refuse(parser, "--replicas", f"lists {', '.join(twice)} more than once, got {text!r}")
    return profile.subset(names)


def _sequencer(
    args: argparse.Namespace, parser: argparse.ArgumentParser, profile: DelayProfile
) -> int:
    """The replica id ``--sequencer`` names (default the first)."""
    if args.sequencer is None:
        return 0
    try:
        return profile.index(args.sequencer)
    except ProfileError as exc:
        _refuse(parser, "--sequencer", str(exc))


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


def _replica_counts(text: str | None, parser: argparse.ArgumentParser) -> list[int]:
    """``--replicas`` with ``--sweep``: the replica counts the runs take in turn."""
    if text is None:
        return [3, 5]
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        counts = []
    if not counts:
        _refuse(
            parser, "--replicas", f"with --sweep, expected replica counts like 3,5, got {text!r}"
        )
    low, high = REPLICAS_MIN_WITH_PEERS, SWEEP_REPLICAS_MAX
    if any(n < low or n > high or n % 2 == 0 for n in counts):
        _refuse(
            parser,
            "--replicas",
            f"with --sweep, SDPaxos needs odd replica counts from {low} to {high}, got {text!r}",
        )
    return counts


def _faults(text: str | None, parser: argparse.ArgumentParser) -> frozenset[FaultKind]:
    """``--faults``: ``all`` (the default), ``none``, or a comma list of fault kinds.

    ``none`` is how a sweep's replay line spells an empty set (``parse_faults``
    takes ``""`` for it, which on a command line reads as a forgotten value).
    """
    if text is None or text.strip().lower() == "all":
        return parse_faults("all")
    if text.strip().lower() == "none":
        return frozenset()
    if not text.strip(" ,"):
        _refuse(parser, "--faults", f"expected all, none or a comma list of faults, got {text!r}")
    try:
        return parse_faults(text)
    except ValueError as exc:
        _refuse(parser, "--faults", str(exc))


def _main_sweep(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    reconfig = (args.faults or "").strip().lower() == "reconfig"
    faults = frozenset() if reconfig else _faults(args.faults, parser)
    commands = COMMANDS_DEFAULT if args.commands is None else args.commands
    if commands < 1:
        _refuse(parser, "--commands", f"with --sweep, expected a whole number >= 1, got {commands}")
    counts = _replica_counts(args.replicas, parser)
    if reconfig:  # membership changes: Member nodes (sdpaxos.sim.reconfig_sweep)
        if max(counts) > MEMBERS_MAX:
            _refuse(parser, "--replicas", f"with --faults reconfig, at most {MEMBERS_MAX}")
        return run_cli(args, counts, commands, None if args.quiet else _progress)
    report = sweep(
        args.sweep,
        seed=args.seed,
        replicas=counts,
        faults=faults,
        commands=commands,
        progress=None if args.quiet else _progress,
        snapshot_slots=args.snapshot_slots,
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.table())
    return 0 if report.ok else 1


def _main_failover(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    profile = _profile(args, parser, PAPER3)
    if profile.size < REPLICAS_MIN_WITH_PEERS:
        _refuse(
            parser,
            _cluster_option(args),
            f"the failover needs at least {REPLICAS_MIN_WITH_PEERS} replicas, got {profile.size}"
            " (a majority must survive the sequencer)",
        )
    sequencer = _sequencer(args, parser, profile)
    if args.failover_sweep is not None:
        result = failover_sweep(
            args.failover_sweep,
            kill_ms=args.kill_ms,
            progress=None if args.quiet else _progress,
            profile=profile,
            sequencer=sequencer,
            seed=args.seed,
            tick_ms=args.tick_ms,
            protocol=args.protocol,
        )
        if args.json:
            print(json.dumps(result.to_json(), indent=2))
        else:
            print(result.table())
            print(f"\n{FAILOVER_SWEEP_LEGEND}", end="")
        return 0 if all(r.checkers == "ok" for r in result.results) else 1
    one = run_failover(
        profile=profile,
        sequencer=sequencer,
        kill_ms=args.kill_ms,
        seed=args.seed,
        tick_ms=args.tick_ms,
        protocol=args.protocol,
    )
    if args.json:
        print(json.dumps(one.to_json(), indent=2))
    else:
        print(one.table())
        print(f"\n{FAILOVER_LEGEND}", end="")
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
    mode = _mode(args)
    _check_mode(args, parser, mode)
    if args.tick_ms is None:
        args.tick_ms = TICK_MS_DEFAULT
    if args.protocol is None:
        args.protocol = "sdpaxos"
    if mode == SWEEP:
        return _main_sweep(args, parser)
    if mode in (FAILOVER, FAILOVER_SWEEP):
        if args.kill_ms is None:
            args.kill_ms = KILL_MS
        return _main_failover(args, parser)
    if args.commands is None:
        args.commands = COMMANDS_RUN_DEFAULT
    profile = _profile(args, parser, PAPER5)
    sequencer = _sequencer(args, parser, profile)
    # The values were checked while parsing, so NetworkConfig cannot refuse them.
    network = NetworkConfig(
        jitter_ms_max=args.jitter_ms or 0.0,
        fifo=not args.datagram,
        drop_probability=args.drop or 0.0,
        duplicate_probability=args.dup or 0.0,
    )

    result = run_closed_loop(
        profile,
        seed=args.seed,
        sequencer=sequencer,
        commands_per_region=args.commands,
        clients_per_region=args.clients_per_region or 1,
        client_retry_ms=args.client_retry_ms,
        network=network,
        tick_ms=args.tick_ms,
        configured_proximity=not args.no_rtt_config,
        measured_proximity=args.measure_rtt,
        drain_ms=DRAIN_MS_DEFAULT if args.drain_ms is None else args.drain_ms,
        progress=None if args.quiet else _progress,
        protocol=args.protocol,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(_table(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
