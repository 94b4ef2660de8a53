"""Per-region commit latency of real node processes under the delay emulator.

The paper's wide-area claim, measured on the runtime rather than the
simulator: ``--replicas`` node processes (``python -m sdpaxos node``) on
loopback, each in one region of the profile (``paper5`` by default: CA, OR,
OH, IRE, SEL, the paper's Table 1), the sequencer in CA, every link delayed by
the emulator in the sending node's transport. One client per region talks to
its region's node and submits one command at a time (light load).

Two latencies per region: the **node's**, from the proposal to READY at the
command leader (its ``sdpaxos_commit_latency_seconds`` histogram, read over
HTTP before and after the region's commands: what the paper's Figure 12 and the
simulator measure, ``docs/protocol.md`` section 5.6), and the **client's**, from
sending the command to reading its READY reply (adds the loopback hop, TLS and
the client's own processing).

The paper's formula (``docs/protocol.md`` section 5.6): a command
commits when its C-instance is accepted by a majority and its O-instance is
too, in parallel; at light load with the sequencer in CA and thrifty quorums
that gives CA 52, OR 68, OH 68, IRE 139, SEL 146 ms on ``paper5``. The bar is
each region within 5 % of it.

**Where a commit's time goes.** Around each region's commands every node's
status is read (:attr:`sdpaxos.runtime.node.NodeStatus.stages_s`: the seconds
its loop spent decoding, stepping, on client frames, in ``ready()``, carrying
out, in the log, sending and answering), and the table under the latencies
gives each node's microseconds per command in each part (:func:`stage_rows`;
with ``--plot``, as stacked bars too), over every turn a command costs each
node, with its turns and messages received per command. At one command in
flight, the turns on a commit's path (the proposal's, the acceptor's, the
acceptance's) are a part of those rows; what the commit takes beyond the
round trip and them is the loop's own work (TLS, system calls, waking up)
and the emulator's lateness.

Two configurations, one after the other: fsync off and fsync on. The bar is
judged on fsync off, because that is how the paper measured: the authors'
prototype never made its log durable (its ``-durable`` flag writes a file that
is never read back), so
its Figure 12 contains no disk flush, and the formula none either. With fsync
on, a flush at the command leader and one at the acceptor it waits for sit on
the critical path; the table shows what they cost on this machine's disk.

    python -m bench.runtime_latency                   # paper5, 60 commands per region, both
    python -m bench.runtime_latency --fsync on        # one configuration only
    python -m bench.runtime_latency --quick --json out.json --plot latency.png
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import paper
from bench.cluster import SdpaxosNodes
from sdpaxos.profiles import builtin
from sdpaxos.runtime.client import Client

#: The bar, shared with ``python -m bench latency``: each region within 5 % of
#: SDPaxos's formula for the profile (:func:`formula_ms`).
TOLERANCE = paper.FORMULA_TOLERANCE


async def emulator_delivery(nodes: SdpaxosNodes) -> list[dict[str, Any]]:
    """Each node's emulator delivery counters (admin ``emulator``, key ``delivery``):
    how late the frames it held were handled, its alarm's lead and what waiting
    it out cost."""

    async def delivery(c: Client) -> Any:
        return (await c.admin("emulator"))["delivery"]

    return await nodes.each(delivery)


def delivery_summary(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any]:
    """The delivery counters between two readings, summed over the nodes."""
    frames = sum(
        a["frames_delivered"] - b["frames_delivered"] for a, b in zip(after, before, strict=True)
    )
    late_us = sum(a["late_us_sum"] - b["late_us_sum"] for a, b in zip(after, before, strict=True))
    spin_us = sum(a["spin_us_sum"] - b["spin_us_sum"] for a, b in zip(after, before, strict=True))
    buckets = {
        k: sum(
            a["late_us_buckets"][k] - b["late_us_buckets"][k]
            for a, b in zip(after, before, strict=True)
        )
        for k in after[0]["late_us_buckets"]
    }
    return {
        "alarm": after[0]["alarm"],
        "frames": frames,
        "late_us_mean": round(late_us / frames, 1) if frames else None,
        "late_us_buckets": buckets,
        "lead_us": [a["lead_us"] for a in after],
        "spin_us": round(spin_us, 1),
    }


#: The driver counters (``NodeStatus.io``) shown per command beside the stages.
IO_SHOWN = ("turns", "messages_in")


async def node_readings(nodes: SdpaxosNodes) -> list[dict[str, dict[str, float]]]:
    """Each node's ``{"stages": NodeStatus.stages_s, "io": the IO_SHOWN of
    NodeStatus.io}``, in node order (one status request per node)."""

    async def reading(c: Client) -> dict[str, dict[str, float]]:
        st = await c.status(2.0)
        io = st["io"]
        return {"stages": dict(st["stages_s"]), "io": {k: float(io[k]) for k in IO_SHOWN}}

    return await nodes.each(reading)


def per_command(
    before: list[dict[str, float]],
    after: list[dict[str, float]],
    commands: int,
    scale: float = 1.0,
) -> list[dict[str, float]]:
    """Each node's counters per command: what each grew by from ``before`` to
    ``after``, over ``commands``, times ``scale``, to one decimal. The
    readings are status requests, which move none of them: a node answers
    one at once, outside its stages and turns."""
    return [
        {key: round((a[key] - b[key]) * scale / commands, 1) for key in a}
        for b, a in zip(before, after, strict=True)
    ]


async def _region(
    nodes: SdpaxosNodes, k: int, warmup: int, commands: int
) -> tuple[list[float], float, list[dict[str, float]], list[dict[str, float]]]:
    """The client's latencies (ms), the node's mean commit latency (ms),
    every node's microseconds per command in each stage of its loop, and
    every node's :data:`IO_SHOWN` counters per command."""
    r = nodes.configs[0].replicas[k]
    client = Client([(r.host, r.port)], tls=nodes.tls)
    try:
        for j in range(warmup):
            await client.submit(b"w%d-%d" % (k, j), timeout_s=30)
        before_readings = await node_readings(nodes)
        before = await asyncio.to_thread(nodes.commit_histogram, k)
        samples = []
        for j in range(commands):
            started = time.perf_counter()
            await client.submit(b"m%d-%d" % (k, j), timeout_s=30)
            samples.append((time.perf_counter() - started) * 1000)
            print(f"\r  region {r.region}: {j + 1}/{commands}", end="", file=sys.stderr)
        after = await asyncio.to_thread(nodes.commit_histogram, k)
        last = await node_readings(nodes)

        def part(readings: list[dict[str, dict[str, float]]], name: str) -> list[dict[str, float]]:
            return [reading[name] for reading in readings]

        stages = per_command(part(before_readings, "stages"), part(last, "stages"), commands, 1e6)
        io = per_command(part(before_readings, "io"), part(last, "io"), commands)
        count = after[1] - before[1]
        node_mean_ms = (after[0] - before[0]) / count * 1000 if count else float("nan")
        return samples, node_mean_ms, stages, io
    finally:
        await client.close()


def latency_cluster(profile_name: str, fsync: bool) -> SdpaxosNodes:
    """One node process per region of the profile (sequencer in its first
    region, CA on the paper's), the emulator delaying their links, metrics on,
    not started yet; :meth:`~bench.cluster.SdpaxosNodes.close` deletes the
    directory. (``python -m bench latency --engine runtime`` runs every
    protocol under load on :mod:`bench.runtime_engine` instead.)"""
    profile = builtin(profile_name)
    return SdpaxosNodes.create(
        tempfile.mkdtemp(prefix="sdpaxos-lat-"),
        profile.size,
        cluster={
            "regions": list(profile.regions),
            "sequencer": 0,
            "emulator": {"profile": profile_name},
            "protocol": {"rtt_ms": [list(row) for row in profile.replica_rtt_ms()]},
        },
        fsync=fsync,
        metrics=True,
        own_dir=True,
    )


def formula_ms(profile_name: str) -> dict[str, float] | None:
    """SDPaxos's formula on a built-in profile with the sequencer in its first
    region, as :func:`latency_cluster` places it (``sdpaxos_commit_ms``), or None
    where there is none (more than five regions)."""
    return paper.formula_ms(builtin(profile_name), 0)


def region_rows(
    profile_name: str, regions: list[str], samples: list[tuple[list[float], float]]
) -> list[dict[str, Any]]:
    """One row per region from its client latencies and its node's mean (ms),
    judged against the profile's formula (``bench.paper``) when it has one."""
    formula = formula_ms(profile_name) or {}
    rows = []
    for region, (s, node_mean) in zip(regions, samples, strict=True):
        mean = node_mean
        target = formula.get(region)
        rows.append(
            {
                "region": region,
                "mean_ms": round(mean, 2),
                "client_mean_ms": round(statistics.fmean(s), 2),
                "p50_ms": round(statistics.median(s), 2),
                "p99_ms": round(sorted(s)[max(0, int(len(s) * 0.99) - 1)], 2),
                "formula_ms": target,
                "ratio": round(mean / target, 3) if target else None,
                "within_5pct": abs(mean / target - 1) <= TOLERANCE if target else None,
            }
        )
    return rows


def run(profile_name: str, commands: int, warmup: int, fsync: bool) -> dict[str, Any]:
    regions = list(builtin(profile_name).regions)
    n = len(regions)
    with latency_cluster(profile_name, fsync) as nodes:
        nodes.start_up()

        async def main() -> tuple[
            list[tuple[list[float], float, list[dict[str, float]], list[dict[str, float]]]],
            dict[str, Any],
            float,
        ]:
            before = await emulator_delivery(nodes)
            started = time.monotonic()
            # One region at a time: "light load" means nothing else in flight.
            out = []
            for k in range(n):
                out.append(await _region(nodes, k, warmup, commands))
            print(file=sys.stderr)
            seconds = time.monotonic() - started
            return out, delivery_summary(before, await emulator_delivery(nodes)), seconds

        samples, delivery, seconds = asyncio.run(main())
        delivery["spin_ms_per_s_per_node"] = round(delivery.pop("spin_us") / 1000 / seconds / n, 2)
    rows = region_rows(profile_name, regions, [(s, mean) for s, mean, _, _ in samples])
    return {
        "stages": stage_rows(
            regions, [stages for _, _, stages, _ in samples], [io for _, _, _, io in samples]
        ),
        "profile": profile_name,
        "commands_per_region": commands,
        "fsync": fsync,
        "rows": rows,
        "emulator_delivery": delivery,
        "load_average": open("/proc/loadavg").read().split()[:3]
        if Path("/proc/loadavg").exists()
        else None,
    }


def stage_rows(
    regions: list[str],
    per_region: list[list[dict[str, float]]],
    io_per_region: list[list[dict[str, float]]] | None = None,
) -> list[dict[str, Any]]:
    """One row per (region whose commands were measured, node): the node's
    microseconds per command in each stage, their sum (``log`` left out of
    it: inline, it is inside ``carry_out``; on the log thread, it is not the
    loop's), and its :data:`IO_SHOWN` counters per command if given."""
    rows = []
    for k, (region, nodes) in enumerate(zip(regions, per_region, strict=True)):
        for j, (node_region, stages) in enumerate(zip(regions, nodes, strict=True)):
            loop = sum(v for stage, v in stages.items() if stage != "log")
            row: dict[str, Any] = {
                "commands_from": region,
                "node": node_region,
                "us": stages,
                "loop_us": round(loop, 1),
            }
            if io_per_region is not None:
                row["per_command"] = io_per_region[k][j]
            rows.append(row)
    return rows


def _table(result: dict[str, Any]) -> str:
    lines = [
        f"profile {result['profile']}, {result['commands_per_region']} commands per region, "
        f"fsync {'on' if result['fsync'] else 'off'}",
        "| region | node mean ms | client mean ms | client p50 ms | client p99 ms |"
        " formula ms | node mean / formula |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['region']} | {r['mean_ms']:.1f} | {r['client_mean_ms']:.1f} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
            f"{r['formula_ms'] if r['formula_ms'] is not None else '-'} | "
            f"{r['ratio'] if r['ratio'] is not None else '-'} |"
        )
    d = result.get("emulator_delivery")
    if d and d["frames"]:
        lines.append(
            f"emulator ({d['alarm']}): {d['frames']} held frames were handled a mean of"
            f" {d['late_us_mean']} us after they were due ({d['late_us_buckets']});"
            f" lead {min(d['lead_us'])}-{max(d['lead_us'])} us, its wait"
            f" {d['spin_ms_per_s_per_node']} ms of CPU per second per node"
        )
    stages = result.get("stages")
    if stages:
        names = list(stages[0]["us"])
        counted = list(stages[0].get("per_command", {}))
        head = [*names, "loop", *(f"{c} per command" for c in counted)]
        lines += [
            "",
            "each node's loop, microseconds per command (NodeStatus.stages_s; 'loop' is"
            " the sum without 'log'), and its turns and messages received per command",
            f"| commands from | node | {' | '.join(head)} |",
            "|---|---|" + "---:|" * len(head),
        ]
        for row in stages:
            cells = [f"{row['us'][name]:.0f}" for name in names]
            cells.append(f"{row['loop_us']:.0f}")
            cells += [f"{row['per_command'][c]:.1f}" for c in counted]
            lines.append(f"| {row['commands_from']} | {row['node']} | {' | '.join(cells)} |")
    if result.get("load_average"):
        lines.append(f"load average after the run: {' '.join(result['load_average'])}")
    return "\n".join(lines)


def _plot(results: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regions = [r["region"] for r in results[0]["rows"]]
    bars = [("SDPaxos formula", [r["formula_ms"] or 0 for r in results[0]["rows"]])]
    for result in results:
        label = f"measured, fsync {'on' if result['fsync'] else 'off'} (node mean)"
        bars.append((label, [r["mean_ms"] for r in result["rows"]]))
    width = 0.8 / len(bars)
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (label, values) in enumerate(bars):
        offset = (i - (len(bars) - 1) / 2) * width
        ax.bar([x + offset for x in range(len(regions))], values, width, label=label)
    ax.set_xticks(list(range(len(regions))), regions)
    ax.set_ylabel("commit latency (ms)")
    ax.set_title(f"SDPaxos runtime, {results[0]['profile']}, sequencer in CA, light load")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def stages_plot_path(out: Path) -> Path:
    """Where :func:`_plot_stages` writes, next to the latency plot ``out``."""
    return out.with_name(f"{out.stem}_stages{out.suffix}")


def _plot_stages(result: dict[str, Any], out: Path) -> None:
    """Each node's microseconds per command, stacked by stage of its loop, one
    bar per (region whose commands were measured, node); ``log`` is left out
    of the stack because with the log inline it is part of ``carry_out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["stages"]
    names = [name for name in rows[0]["us"] if name != "log"]
    labels = [f"{r['commands_from']} cmds @ {r['node']}" for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
    left = [0.0] * len(rows)
    for name in names:
        widths = [r["us"][name] for r in rows]
        ax.barh(labels, widths, left=left, label=name)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel("microseconds per command (wall time in each stage)")
    ax.set_title(
        f"where each node's loop spends a command, {result['profile']},"
        f" fsync {'on' if result['fsync'] else 'off'}"
    )
    ax.legend(ncols=len(names), fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.runtime_latency", description=__doc__)
    p.add_argument(
        "--profile",
        default="paper5",
        help="a built-in profile (paper5, paper3, uniformN); the sequencer is in its first"
        " region, and up to five regions are judged against SDPaxos's formula for it",
    )
    p.add_argument("--commands", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="20 commands per region")
    p.add_argument(
        "--fsync",
        choices=("off", "on", "both"),
        default="both",
        help="the log's fsync: off (the paper's configuration, judged), on, or both (default)",
    )
    p.add_argument("--no-fsync", action="store_true", help="the same as --fsync off")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument(
        "--plot",
        default=None,
        help="write a bar chart here (PNG), and each node's stages next to it (<name>_stages.png)",
    )
    args = p.parse_args(argv)
    commands = 20 if args.quick else args.commands
    choice = "off" if args.no_fsync else args.fsync
    settings = {"off": [False], "on": [True], "both": [False, True]}[choice]
    results = [run(args.profile, commands, args.warmup, fsync) for fsync in settings]
    for result in results:
        print(_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if args.plot:
        _plot(results, Path(args.plot))
        if results[0].get("stages"):
            _plot_stages(results[0], stages_plot_path(Path(args.plot)))
    message, code = verdict(results[0])
    print(message)
    return code


def verdict(judged: dict[str, Any]) -> tuple[str, int]:
    """The bar on one configuration's result (the first run: fsync off unless
    only fsync on was asked): the line to print and the exit status. A profile
    without a formula is not judged, and says so rather than passing."""
    where = f"fsync {'on' if judged['fsync'] else 'off'}"
    if formula_ms(judged["profile"]) is None:
        return f"no formula for profile {judged['profile']!r}: nothing judged ({where})", 0
    ok = all(r["within_5pct"] is not False for r in judged["rows"])
    if ok:
        return f"every region within 5 % of the formula ({where})", 0
    return f"SOME REGION IS OFF BY MORE THAN 5 % ({where})", 1


if __name__ == "__main__":
    raise SystemExit(main())
