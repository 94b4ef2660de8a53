"""What a membership change costs the clients: throughput and latency over time.

The simulator half of the issue's ``bench reconfig`` (``docs/membership.md``
section 6): three members of a uniform cluster (one region per node, round trip
``--rtt-ms``), closed-loop clients at every member, and three changes while they
run: a replica is added (a learner, then promoted: 3 -> 4), the sequencer's node
is replaced by a fresh one, and the added member is removed again (4 -> 3: a
member that is not the sequencer, as the goal says and as the runtime half
does; before, member 1 was removed, which by then held the sequencer's role).
Each change's
*stall* is, per region, the longest time without a completed command from the
change's proposal until one second after its epoch started everywhere; the
baseline is the same measure in the second before the change. The issue's goal:
no region stalls longer than one election plus one commit round trip when the
sequencer's node is replaced, and than one commit round trip more than its
baseline when another member is added or removed.

    python -m bench.reconfig --quick      # a few seconds of virtual time
    python -m bench.reconfig --out bench/results/reconfig

Writes ``results.json``, ``results.md`` and ``reconfig.png`` (completions per
250 ms per region, the changes marked) into ``--out``. This module measures
the protocol alone; ``python -m bench reconfig`` is the experiment (this run as
``--engine sim``, the same timeline on real node processes as ``--engine
runtime``, latency per region plotted too), and both measure a stall with
:func:`stall_and_baseline`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sdpaxos.core.member import LEARNER_LAG_SLOTS_MAX
from sdpaxos.core.membership import MembershipOp, NodeInfo, OpKind
from sdpaxos.core.ready import Reply, ReplyKind
from sdpaxos.core.types import Command, Wait
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.member_cluster import MemberCluster
from sdpaxos.sim.member_workload import ChangeClient

#: Closed-loop clients per member region.
CLIENTS_PER_REGION = 4
#: Bin width of the throughput plot and of nothing else.
BIN_MS = 250.0
#: The window after a change's epoch started in which its stall is looked for.
AFTER_MS = 1_000.0
#: Virtual time between two changes.
GAP_MS = 3_000.0


@dataclass
class Change:
    """One change as it ran: when it was proposed, when its epoch ran everywhere."""

    name: str
    proposed_ms: float = 0.0
    done_ms: float = 0.0
    stall_ms: dict[int, float] = field(default_factory=dict)
    baseline_ms: dict[int, float] = field(default_factory=dict)
    bound_ms: float = 0.0

    @property
    def worst_extra_ms(self) -> float:
        return max(self.stall_ms[r] - self.baseline_ms.get(r, 0.0) for r in self.stall_ms)


@dataclass
class Result:
    rtt_ms: float
    election_ms: float
    changes: list[Change]
    completions: list[tuple[float, int, float]]

    @property
    def goals_met(self) -> bool:
        return all(c.worst_extra_ms <= c.bound_ms for c in self.changes)


class _Load:
    """Closed-loop clients, each sending to its home region's node while that
    node is a member (to the lowest member otherwise)."""

    def __init__(self, cluster: MemberCluster, homes: list[int]) -> None:
        self.cluster = cluster
        self.sent: dict[int, tuple[float, int]] = {}
        self.seq: dict[int, int] = {}
        self.home: dict[int, int] = {}
        self.completions: list[tuple[float, int, float]] = []
        client = 1
        for home in homes:
            for _ in range(CLIENTS_PER_REGION):
                self.home[client] = home
                client += 1
        cluster.reply_listeners.append(self._on_reply)
        cluster.refused_listeners.append(lambda node, cmd: self._resend(cmd.client_id))

    def start(self) -> None:
        for client in self.home:
            self._send(client)

    def _target(self, client: int) -> int:
        members = self.cluster.live_members()
        home = self.home[client]
        return home if home in members else min(members)

    def _send(self, client: int) -> None:
        seq = self.seq.get(client, 0) + 1
        self.seq[client] = seq
        self.sent[client] = (self.cluster.now_ms, seq)
        self._submit(client)

    def _submit(self, client: int) -> None:
        seq = self.seq[client]
        command = Command(client, seq, b"w%d.%d" % (client, seq))
        self.cluster.submit(self._target(client), command, Wait.READY)
        self.cluster.call_after(1_500_000, lambda: self._timeout(client, seq))

    def _timeout(self, client: int, seq: int) -> None:
        if self.seq.get(client) == seq and client in self.sent:
            self._submit(client)

    def _resend(self, client: int) -> None:
        if client in self.sent:
            self.cluster.call_after(20_000, lambda: self._submit(client))

    def _on_reply(self, node: int, reply: Reply, now_us: int) -> None:
        client = reply.client_id
        pending = self.sent.get(client)
        if pending is None or pending[1] != reply.seq:
            return
        if reply.kind is ReplyKind.NOT_MEMBER:
            self._resend(client)
            return
        if reply.kind is not ReplyKind.READY:
            return
        del self.sent[client]
        now = now_us / 1000
        self.completions.append((now, self.home[client], now - pending[0]))
        self._send(client)


def longest_gap_ms(times: list[float], start: float, end: float) -> float:
    """The longest time in ``[start, end]`` without one of ``times`` (the window's
    ends count as points: an empty window is one gap as long as the window)."""
    points = [start, *sorted(t for t in times if start <= t <= end), end]
    return max(b - a for a, b in itertools.pairwise(points))


def stall_and_baseline(
    times: list[float],
    proposed_ms: float,
    done_ms: float,
    after_ms: float = AFTER_MS,
    end_ms: float | None = None,
) -> tuple[float, float]:
    """One region's stall for a change (the longest gap from its proposal to
    ``after_ms`` after its epoch ran everywhere, cut at ``end_ms``, the load's
    end, when given) and its baseline (the longest gap in the ``after_ms``
    before the proposal). Shared by this module and ``python -m bench
    reconfig`` (both engines), so they measure alike."""
    stop = done_ms + after_ms if end_ms is None else min(done_ms + after_ms, end_ms)
    stall = longest_gap_ms(times, proposed_ms, max(stop, proposed_ms))
    baseline = longest_gap_ms(times, proposed_ms - after_ms, proposed_ms)
    return stall, baseline


def run(seed: int = 1, *, rtt_ms: float = 60.0, quick: bool = False) -> Result:
    """Three changes under load in the simulator; see the module docstring."""
    chooser = SeededChooser(random.Random(seed))
    cluster = MemberCluster(3, chooser, rtt_ms=rtt_ms)
    election_ms = cluster.protocol.lease_ms + cluster.protocol.election_margin_ms
    load = _Load(cluster, [0, 1, 2])
    operator = ChangeClient(cluster)
    changes: list[Change] = []
    plan: list[tuple[str, Callable[[], None]]] = []
    gap_ms = GAP_MS

    def at_ms(ms: float, action: Callable[[], None]) -> None:
        cluster.call_at(round(ms * 1000), action)

    def epoch_everywhere(epoch: int) -> bool:
        return all(
            (n := cluster.nodes.get(i)) is not None and n.epoch >= epoch
            for i in cluster.live_members()
        )

    def change(
        name: str,
        op_after_learner: Callable[[int], MembershipOp] | None,
        op: MembershipOp | None,
        learner: int | None,
    ) -> Callable[[], None]:
        def begin() -> None:
            record = Change(name, bound_ms=rtt_ms + (election_ms if "sequencer" in name else 0.0))
            changes.append(record)
            epoch = cluster.newest().epoch + 1

            def propose(final: MembershipOp) -> None:
                record.proposed_ms = cluster.now_ms
                operator.propose(final, min(cluster.live_members()), lambda *_: wait_epoch())

            def wait_epoch() -> None:
                if epoch_everywhere(epoch):
                    record.done_ms = cluster.now_ms
                    return
                cluster.call_after(1_000, wait_epoch)

            if learner is None:
                assert op is not None
                propose(op)
                return
            cluster.start_node(learner)
            add = MembershipOp(OpKind.ADD_LEARNER, node=NodeInfo(learner), op_id=100 + learner)

            def caught_up() -> None:
                lags = [
                    lag
                    for i in cluster.live_members()
                    if (n := cluster.nodes.get(i)) is not None
                    and (lag := n.learner_lag(learner)) is not None
                ]
                if lags and min(lags) <= LEARNER_LAG_SLOTS_MAX:
                    assert op_after_learner is not None
                    propose(op_after_learner(learner))
                else:
                    cluster.call_after(10_000, caught_up)

            operator.propose(add, min(cluster.live_members()), lambda *_: caught_up())

        return begin

    seq_node = cluster.sequencer()
    assert seq_node is not None
    plan = [
        (
            "add a replica (3 -> 4)",
            change(
                "add a replica (3 -> 4)",
                lambda n: MembershipOp(OpKind.PROMOTE, target=n, op_id=200 + n),
                None,
                3,
            ),
        ),
        (
            "replace the sequencer's node",
            change(
                "replace the sequencer's node",
                lambda n: MembershipOp(
                    OpKind.REPLACE, target=seq_node, node=NodeInfo(n), op_id=200 + n
                ),
                None,
                4,
            ),
        ),
        (
            "remove a member (4 -> 3)",
            change(
                "remove a member (4 -> 3)",
                None,
                MembershipOp(OpKind.REMOVE, target=3, op_id=300),
                None,
            ),
        ),
    ]
    load.start()
    for k, (_, begin) in enumerate(plan):
        at_ms(gap_ms * (k + 1), begin)
    end_ms = gap_ms * (len(plan) + 1) + AFTER_MS
    cluster.run_until(round(end_ms * 1000))
    for record in changes:
        if not record.done_ms:
            raise RuntimeError(f"change {record.name!r} did not finish in {end_ms} ms")
        for region in (0, 1, 2):
            times = [t for t, home, _ in load.completions if home == region]
            record.stall_ms[region], record.baseline_ms[region] = stall_and_baseline(
                times, record.proposed_ms, record.done_ms
            )
    return Result(rtt_ms, election_ms, changes, load.completions)


def _table(result: Result) -> str:
    lines = [
        f"Round trip {result.rtt_ms:g} ms, election {result.election_ms:g} ms"
        " (lease + margin); stall = longest time without a completed command in a region,"
        " from the proposal to 1 s after the epoch ran everywhere; baseline = the same in"
        " the second before.",
        "",
        "| change | took ms | stall ms per region (baseline) | worst extra ms | bound ms | met |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for c in result.changes:
        stalls = ", ".join(
            f"{r}: {c.stall_ms[r]:.0f} ({c.baseline_ms[r]:.0f})" for r in sorted(c.stall_ms)
        )
        met = "yes" if c.worst_extra_ms <= c.bound_ms else "no"
        lines.append(
            f"| {c.name} | {c.done_ms - c.proposed_ms:.0f} | {stalls} |"
            f" {c.worst_extra_ms:.0f} | {c.bound_ms:.0f} | {met} |"
        )
    return "\n".join(lines)


def _plot(result: Result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max(t for t, _, _ in result.completions)
    bins = int(end // BIN_MS) + 1
    fig, ax = plt.subplots(figsize=(9, 3.5))
    for region in (0, 1, 2):
        counts = [0] * bins
        for t, home, _ in result.completions:
            if home == region:
                counts[int(t // BIN_MS)] += 1
        xs = [i * BIN_MS / 1000 for i in range(bins)]
        style = ("-", "--", ":")[region]
        rates = [c * 1000 / BIN_MS for c in counts]
        ax.step(xs, rates, where="post", linestyle=style, label=f"region {region}")
    for c in result.changes:
        ax.axvspan(c.proposed_ms / 1000, c.done_ms / 1000, alpha=0.2, color="grey")
        ax.text(c.proposed_ms / 1000, ax.get_ylim()[1] * 0.95, c.name, fontsize=7)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("commands/s")
    ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.reconfig", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="shorter gaps between the changes")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rtt-ms", type=float, default=60.0, help="round trip between regions")
    p.add_argument("--out", type=Path, default=Path("bench/results/reconfig"))
    args = p.parse_args(argv)
    if not args.rtt_ms > 0:
        p.error(f"--rtt-ms must be > 0, got {args.rtt_ms}")
    print("running three changes under load in the simulator...", file=sys.stderr)
    result = run(args.seed, rtt_ms=args.rtt_ms, quick=args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    table = _table(result)
    (args.out / "results.md").write_text(table + "\n")
    data = {
        "rtt_ms": result.rtt_ms,
        "election_ms": result.election_ms,
        "goals_met": result.goals_met,
        "changes": [asdict(c) for c in result.changes],
    }
    (args.out / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    _plot(result, args.out / "reconfig.png")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
