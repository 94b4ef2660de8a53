"""``throughput``: capacity per protocol against conflict rate and read share (Figs. 10, 11).

How it measures (:mod:`bench.rounds`): every protocol runs in the round-based
in-memory driver, not the simulator. Each replica steps everything in its
inbox, calls ``ready()`` once per round and sends one encoded frame per
destination, with many closed-loop sessions per replica, so protocols batch
the way a loaded node does. The state machine is the paper's in-memory
key-value store. Per run the driver gives each replica's CPU seconds (thread
CPU of its calls and its codec work) and bytes out and in (frames between
replicas, and the clients' requests and answers) per operation. From them, per
cell, two capacities:

* **CPU**: one core per replica, ``1000 / busiest replica's CPU s per 1,000
  operations`` (the replicas share this machine's cores, so wall-clock rates
  would say nothing);
* **CPU + NIC**: also one NIC of ``--nic-mbps`` each way per replica (default
  445 Mbit/s, the paper's EC2 m4.large: :data:`bench.rounds.NIC_MBPS_DEFAULT`),
  the lowest of the CPU bound and every replica's egress and ingress bound.
  Which one binds is named per cell.

Fig. 10: writes only, conflict rate (share of writes to one hot key) 0-100 %,
SDPaxos and EPaxos. Fig. 11: no conflict, read share 0-100 %, every protocol;
a read goes to the key its session wrote last (so it returns a value of the
payload's size, as the paper's 1 KB reads did) through the protocol's
``read()`` (not ``ok``: through the log). Multi-Paxos's clients are at the
leader (the paper's setup); ``Multi-Paxos-fwd`` (full run) puts them at every
replica, which forward. 3 and 5 replicas, 16 B and 1 KB. Every run is verified
(:func:`bench.rounds.verify`); a cell that fails is flagged and the experiment
exits 1.

Repeats: each pass runs every cell once, the cells a ratio compares next to
each other (every protocol at one conflict rate or read share, then the next).
A cell's figure is its median run; a bar also gives the ratio of each pass
and their median ("paired"), since this machine's slow spells last seconds
and fall on both cells of a pass. The full run then makes eight more passes
over the bars' cells alone (``bar_passes``), so that a bar's median is of
eleven pass ratios, not three.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
from dataclasses import dataclass
from typing import Any, TypeGuard

from bench import paper
from bench.common import Context, md_table, save_plot, write_results
from bench.rounds import NIC_MBPS_DEFAULT, ProtocolWorkers, RoundResult, RoundSpec

TITLES = paper.TITLES
COLORS = {
    "SDPaxos": "tab:blue",
    "Multi-Paxos": "tab:red",
    "Multi-Paxos-fwd": "tab:pink",
    "Mencius": "tab:green",
    "EPaxos": "tab:orange",
}

#: The issue's bars: SDPaxos over the other, (column, replicas, payload, conflict %).
BARS: list[tuple[str, int, int, float, float]] = [
    ("Multi-Paxos", 5, 16, 0.0, 2.0),
    ("Multi-Paxos", 5, 1024, 0.0, 6.0),
    ("EPaxos", 5, 16, 5.0, 1.7),
    ("EPaxos", 3, 16, 5.0, 1.7),
]


@dataclass(frozen=True, slots=True)
class Settings:
    replicas: tuple[int, ...]
    payloads_bytes: tuple[int, ...]
    #: Fig. 10's conflict rates (SDPaxos and EPaxos, writes only).
    conflicts_pct: tuple[float, ...]
    #: Fig. 11's read shares (every protocol, no conflict).
    read_pcts: tuple[float, ...]
    #: Closed-loop sessions per replica (each one operation outstanding).
    sessions: int
    warmup: int
    commands: int
    #: Runs per cell, one per pass over every cell; the cell is the run with
    #: the median CPU capacity (the bytes are the same in every run: the
    #: driver is deterministic).
    repeats: int
    #: Also Multi-Paxos with clients at every replica (forwarding).
    forwarding: bool
    #: Passes over the bars' cells only, after the passes over every cell, each
    #: bar's two cells back to back. Why: a bar is judged on the median of its
    #: pass ratios, and one pass's ratio moves by 0.2 or more on this machine
    #: (its slow spells last about a second, as long as a cell's run); three
    #: ratios give a median that moves almost as much.
    bar_passes: int = 0
    #: Each protocol's cells in a worker process of its own
    #: (:class:`bench.rounds.ProtocolWorkers`: why); False runs every cell in
    #: this process.
    isolated: bool = True


QUICK = Settings(
    (3, 5), (16, 1024), (0.0, 5.0, 50.0, 100.0), (0.0, 50.0, 100.0), 1000, 3_000, 12_000, 1, False
)
#: The full run's operations (warm-up, measured and the last sessions' in flight)
#: stay below the SDPaxos sequencer's history table (``history_keys_max``,
#: 65,536 keys; every write here has a key of its own), so that no cell with
#: reads (where the table is kept) measures its evictions, a cost the paper's
#: runs, whose table had no limit, did not have.
FULL = Settings(
    (3, 5),
    (16, 1024),
    (0.0, 5.0, 25.0, 50.0, 75.0, 100.0),
    (0.0, 25.0, 50.0, 75.0, 100.0),
    2000,
    10_000,
    40_000,
    3,
    True,
    bar_passes=8,
)


@dataclass(frozen=True, slots=True)
class Column:
    """One line of a figure: a protocol and where its clients are."""

    title: str
    protocol: str
    clients_at: str = "all"


def _fig11_columns(ctx: Context, settings: Settings) -> list[Column]:
    out = []
    for proto in ctx.protocols:
        if proto == "multipaxos":
            out.append(Column("Multi-Paxos", proto, "leader"))
            if settings.forwarding:
                out.append(Column("Multi-Paxos-fwd", proto))
        else:
            out.append(Column(TITLES.get(proto, proto), proto))
    return out


def _fig10_columns(ctx: Context) -> list[Column]:
    return [Column(TITLES[p], p) for p in ("sdpaxos", "epaxos") if p in ctx.protocols]


CellKey = tuple[str, str, int, int, float, float]  # title, protocol, n, payload, reads, conflict


def run(ctx: Context) -> int:
    if ctx.engine_name == "runtime":
        return _run_runtime(ctx)
    settings = QUICK if ctx.quick else FULL
    nic_mbps = ctx.nic_mbps if ctx.nic_mbps is not None else NIC_MBPS_DEFAULT
    load_start = _load()
    fig10 = _fig10_columns(ctx)
    fig11 = _fig11_columns(ctx, settings)
    # Cells that are compared run next to each other: a pass runs every
    # protocol at one conflict rate (or read share) before the next one, so
    # that a slow spell of this machine falls on both sides of a ratio.
    keys: list[CellKey] = []
    for n in settings.replicas:
        for payload in settings.payloads_bytes:
            for c in settings.conflicts_pct:
                for col in fig10:
                    keys.append((col.title, col.protocol, n, payload, 0.0, c))
            for r in settings.read_pcts:
                for col in fig11:
                    keys.append((col.title, col.protocol, n, payload, r, 0.0))
    keys = list(dict.fromkeys(keys))  # Fig. 10's 0 % and Fig. 11's 0 % reads: one cell
    clients = {col.title: col.clients_at for col in fig10 + fig11}
    cells: dict[CellKey, dict[str, Any]] = {}
    failures: list[str] = []
    specs: dict[CellKey, RoundSpec] = {}
    for key in keys:
        title, proto, n, payload, reads, conflict = key
        cells[key] = {
            "column": title,
            "protocol": proto,
            "clients_at": clients[title],
            "replicas": n,
            "payload_bytes": payload,
            "read_pct": reads,
            "conflict_pct": conflict,
        }
        why = ctx.status(proto)
        if why:
            cells[key]["status"] = why
            continue
        specs[key] = RoundSpec(
            proto,
            replicas=n,
            sessions=settings.sessions,
            commands=settings.commands,
            warmup=settings.warmup,
            read_pct=reads,
            payload_bytes=payload,
            conflict_pct=conflict,
            read_written=True,
            clients_at=clients[title],
            seed=ctx.seed,
            nic_mbps=nic_mbps,
        )
    # Each pass runs every cell once, so that a cell's repeats are spread over
    # the whole experiment: a change of this machine's load (another process
    # starting or ending) then falls on every protocol alike instead of on the
    # cells that happened to run during it, and the ratios between protocols
    # stay comparable.
    runs: dict[CellKey, list[RoundResult]] = {key: [] for key in specs}
    bar_keys = _bar_keys(specs)
    with ProtocolWorkers(settings.isolated) as workers:
        _warm_up(ctx, specs, workers)
        for rep in range(1, settings.repeats + 1):
            for i, (key, spec) in enumerate(specs.items(), start=1):
                res = workers.run(spec, progress=ctx.progress)
                runs[key].append(res)
                ctx.progress(
                    f"[pass {rep}/{settings.repeats}] [{i}/{len(specs)}] {_done(key, res)}"
                )
        for rep in range(1, settings.bar_passes + 1):
            for i, key in enumerate(bar_keys, start=1):
                res = workers.run(specs[key], progress=ctx.progress)
                runs[key].append(res)
                ctx.progress(
                    f"[bar pass {rep}/{settings.bar_passes}] [{i}/{len(bar_keys)}]"
                    f" {_done(key, res)}"
                )
    for key, cell_runs in runs.items():
        cell = cells[key]
        res = _median(cell_runs)
        cell.update(res.to_json())
        cell["capacity_runs_per_s"] = [round(r.capacity_per_s, 1) for r in cell_runs]
        problems = [p for r in cell_runs for p in r.problems]
        if any(r.bytes != cell_runs[0].bytes for r in cell_runs):
            problems.append("the repeats sent different bytes (the driver is not deterministic)")
        cell["status"] = "ok" if not problems else "FAILED: " + "; ".join(problems[:3])
        if problems:
            failures.append(f"{_label(key)}: {cell['status']}")
    rows = list(cells.values())
    bars = _bars(cells)
    ratios = _ratios(cells, settings)
    _plot_fig10(ctx, settings, fig10, cells)
    _plot_fig11(ctx, settings, fig11, cells)
    load_end = _load()
    result = {
        "settings": dataclasses.asdict(settings),
        "nic_mbps": nic_mbps,
        "driver": "bench.rounds (round-based, batched, codec in the loop, key-value store)",
        "load_average": {"start": load_start, "end": load_end},
        "cells": rows,
        "bars": bars,
        "ratios": ratios,
        "failures": failures,
    }
    md = _markdown(ctx, settings, nic_mbps, fig10, fig11, cells, bars, ratios, load_start, load_end)
    write_results(ctx, result, md)
    return 1 if failures else 0


def _done(key: CellKey, res: RoundResult) -> str:
    """A progress line's account of one run of a cell."""
    return (
        f"{_label(key)}: CPU {res.capacity_per_s / 1000:,.0f}K ops/s (busiest r{res.busiest}"
        f" {res.cpu_s_per_1000()[res.busiest] * 1000:.2f} ms per 1,000), CPU+NIC"
        f" {res.capacity_both_per_s / 1000:,.0f}K ({res.bound}),"
        f" {res.commands_per_instance:.0f} per instance, {res.wall_s:.1f} s"
        + ("" if res.ok else " FAILED: " + "; ".join(res.problems[:3]))
    )


def _bar_keys(specs: dict[CellKey, RoundSpec]) -> list[CellKey]:
    """The cells of every bar whose two cells both run, SDPaxos's first and the
    other's right after it (once each, should two bars share a cell)."""
    keys: list[CellKey] = []
    for title, n, payload, conflict, _bar in BARS:
        sd = [k for k in specs if k[0] == "SDPaxos" and k[2:] == (n, payload, 0.0, conflict)]
        other = [k for k in specs if k[0] == title and k[2:] == (n, payload, 0.0, conflict)]
        if sd and other:
            keys += sd + other
    return list(dict.fromkeys(keys))


def _label(key: CellKey) -> str:
    """A cell as progress lines and failures name it."""
    title, _proto, n, payload, reads, conflict = key
    return f"{title}, {n} replicas, {payload} B, {reads:g}% reads, {conflict:g}% conflict"


def _warm_up(ctx: Context, specs: dict[CellKey, RoundSpec], workers: ProtocolWorkers) -> None:
    """One untimed run of each protocol's largest cell in its worker: the
    worker's heap grows to its size here, so that no measured run pays the
    page faults of first touching it."""
    largest: dict[str, RoundSpec] = {}
    for spec in specs.values():
        now = largest.get(spec.protocol)
        if now is None or (spec.replicas, spec.payload_bytes) > (now.replicas, now.payload_bytes):
            largest[spec.protocol] = spec
    for name, spec in largest.items():
        ctx.progress(f"warm-up: an untimed {TITLES.get(name, name)} run of its largest cell")
        workers.warm_up(spec)


def _load() -> list[float] | None:
    return [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _median(runs: list[RoundResult]) -> RoundResult:
    """The run whose CPU capacity is the median (the lower middle of an even count)."""
    ordered = sorted(runs, key=lambda r: r.capacity_per_s)
    return ordered[(len(ordered) - 1) // 2]


def _ok(cell: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether ``cell`` ran and passed its checks (then it is a cell, not None)."""
    return cell is not None and cell.get("status") == "ok"


def _cell(
    cells: dict[CellKey, dict[str, Any]],
    title: str,
    n: int,
    payload: int,
    reads: float = 0.0,
    conflict: float = 0.0,
) -> dict[str, Any] | None:
    for (t, _p, nn, pp, rr, cc), cell in cells.items():
        if (t, nn, pp, rr, cc) == (title, n, payload, reads, conflict):
            return cell
    return None


def _ratio(sd: dict[str, Any] | None, other: dict[str, Any] | None, field: str) -> float | None:
    if not (_ok(sd) and _ok(other)) or sd is None or other is None or not other[field] > 0:
        return None
    return round(float(sd[field]) / float(other[field]), 2)


def _pass_ratios(sd: dict[str, Any] | None, other: dict[str, Any] | None) -> list[float]:
    """SDPaxos's CPU capacity over the other's, pass by pass (the two cells ran
    next to each other in each pass; see :func:`run`)."""
    if not (_ok(sd) and _ok(other)) or sd is None or other is None:
        return []
    a, b = sd.get("capacity_runs_per_s") or [], other.get("capacity_runs_per_s") or []
    if len(a) != len(b):
        return []
    return [round(x / y, 2) for x, y in zip(a, b, strict=True) if y > 0]


def _bars(cells: dict[CellKey, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for title, n, payload, conflict, bar in BARS:
        sd = _cell(cells, "SDPaxos", n, payload, 0.0, conflict)
        other = _cell(cells, title, n, payload, 0.0, conflict)
        # The ratio of each pass, and their median: this machine's slow spells
        # last seconds, and both cells of a pass ran within them.
        pass_ratios = _pass_ratios(sd, other)
        out.append(
            {
                "over": title,
                "replicas": n,
                "payload_bytes": payload,
                "conflict_pct": conflict,
                "bar": bar,
                "paper": paper.sdpaxos_over(title, n, payload, conflict),
                "cpu": _ratio(sd, other, "capacity_per_s"),
                "cpu_pass_ratios": pass_ratios,
                "cpu_paired": _median_or_none(pass_ratios),
                "cpu_nic": _ratio(sd, other, "capacity_both_per_s"),
                "nic": _ratio(sd, other, "nic_capacity_per_s"),
                "nic_peers_only": _ratio(sd, other, "nic_peers_only_capacity_per_s"),
                "closed_loop": _ratio(sd, other, "ops_per_round"),
                "bound_sdpaxos": sd.get("bound") if _ok(sd) and sd else None,
                "bound_other": other.get("bound") if _ok(other) and other else None,
                # The NIC model for a leader that sends every payload to N-1
                # peers against replicas that each send (N-1)/N of them: N
                # counting replica links only, N-1 with the clients' requests
                # arriving at the replicas (an SDPaxos replica then takes in one
                # payload per command: a 1/N share from clients, (N-1)/N from peers).
                "nic_theory_peers_only": n if title.startswith("Multi-Paxos") else None,
                "nic_theory_with_clients": n - 1 if title.startswith("Multi-Paxos") else None,
            }
        )
    return out


def _median_or_none(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def _ratios(cells: dict[CellKey, dict[str, Any]], settings: Settings) -> list[dict[str, Any]]:
    """SDPaxos's write-only capacity over every other column's, each cell of Fig. 10/11."""
    out = []
    for (title, _proto, n, payload, reads, conflict), cell in cells.items():
        if title == "SDPaxos" or reads != 0.0:
            continue
        sd = _cell(cells, "SDPaxos", n, payload, 0.0, conflict)
        out.append(
            {
                "over": title,
                "replicas": n,
                "payload_bytes": payload,
                "conflict_pct": conflict,
                "cpu": _ratio(sd, cell, "capacity_per_s"),
                "cpu_nic": _ratio(sd, cell, "capacity_both_per_s"),
                "paper": paper.sdpaxos_over(title, n, payload, conflict),
            }
        )
    return out


def _k(value: float) -> str:
    return f"{value / 1000:,.0f}K"


def _fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _markdown(
    ctx: Context,
    settings: Settings,
    nic_mbps: float,
    fig10: list[Column],
    fig11: list[Column],
    cells: dict[CellKey, dict[str, Any]],
    bars: list[dict[str, Any]],
    ratios: list[dict[str, Any]],
    load_start: list[float] | None,
    load_end: list[float] | None,
) -> str:
    lines = [
        "# throughput: capacity vs conflict rate (Fig. 10) and read share (Fig. 11)",
        "",
        f"Round-based driver (`bench/rounds.py`), seed {ctx.seed}"
        f"{', quick' if ctx.quick else ''}: {settings.sessions} closed-loop sessions per"
        f" replica (Multi-Paxos: all at the leader), {settings.warmup:,} operations of warm-up,"
        f" {settings.commands:,} measured, {settings.repeats} run(s) per cell, one per pass over"
        " every cell (the median CPU capacity)"
        + (
            f", then {settings.bar_passes} more of the bars' cells, one per pass over them"
            if settings.bar_passes
            else ""
        )
        + (
            ", each protocol's cells in a worker process of its own (after an untimed run"
            " of its largest cell)"
            if settings.isolated
            else ", every cell in one process"
        )
        + ". State machine: an in-memory key-value store."
        f" Load average (1, 5, 15 min) at the start {load_start}, at the end {load_end}.",
        "",
        "**CPU** = ops/s with one core per replica (1000 / the busiest replica's CPU s per"
        f" 1,000 ops). **CPU+NIC** = also one {nic_mbps:g} Mbit/s NIC each way per replica"
        " (the lowest of the CPU bound and every replica's egress and ingress bound; client"
        " requests and answers count on the replica's NIC). What binds is named"
        " (`cpu r0`, `egress r0`, `ingress r2`: the bound and its replica).",
        "",
        "## The bars: SDPaxos over the other",
        "",
        md_table(
            [
                "over",
                "replicas",
                "payload",
                "conflict",
                "CPU",
                "CPU, paired (passes)",
                "CPU+NIC",
                "NIC, replica links only",
                "NIC theory",
                "closed loop",
                "bar",
                "paper",
                "binds (SDPaxos / other)",
            ],
            [
                [
                    b["over"],
                    b["replicas"],
                    f"{b['payload_bytes']} B",
                    f"{b['conflict_pct']:g}%",
                    _fmt_ratio(b["cpu"]),
                    _fmt_ratio(b["cpu_paired"])
                    + (
                        " (" + ", ".join(f"{r:.2f}" for r in b["cpu_pass_ratios"]) + ")"
                        if b["cpu_pass_ratios"]
                        else ""
                    ),
                    _fmt_ratio(b["cpu_nic"]),
                    _fmt_ratio(b["nic_peers_only"]),
                    "-"
                    if b["nic_theory_peers_only"] is None
                    else f"{b['nic_theory_with_clients']}x / {b['nic_theory_peers_only']}x",
                    _fmt_ratio(b["closed_loop"]),
                    f"{b['bar']:g}x",
                    _fmt_ratio(b["paper"]),
                    f"{b['bound_sdpaxos']} / {b['bound_other']}",
                ]
                for b in bars
            ],
        ),
        "",
        "NIC theory (Multi-Paxos): the leader sends every payload to N-1 peers, an SDPaxos"
        " replica (N-1)/N of them, so replica links alone give N; with the clients'"
        " requests on the replicas' NICs an SDPaxos replica also takes in a payload per"
        " command, which gives N-1 (shown as N-1 / N). Closed loop: operations completed per"
        " round with the same sessions (latency-bound throughput: what a fixed number of"
        " clients gets when the CPU does not limit it; no CPU noise in it).",
        "",
    ]
    # Fig. 10
    if fig10:
        lines += ["## Fig. 10: writes, capacity vs conflict rate", ""]
        for n in settings.replicas:
            for payload in settings.payloads_bytes:
                header = ["conflict"]
                for col in fig10:
                    header += [f"{col.title} CPU", f"{col.title} CPU+NIC", f"paper {col.title}"]
                if len(fig10) == 2:
                    header += ["ratio CPU", "ratio CPU+NIC", "ratio closed loop", "paper ratio"]
                table = []
                for c in settings.conflicts_pct:
                    row: list[Any] = [f"{c:g}%"]
                    got = []
                    for col in fig10:
                        cell = _cell(cells, col.title, n, payload, 0.0, c)
                        got.append(cell)
                        row += _cpu_nic(cell)
                        row.append(_paper10(col.protocol, n, payload, c))
                    if len(got) == 2:
                        row += [
                            _fmt_ratio(_ratio(got[0], got[1], "capacity_per_s")),
                            _fmt_ratio(_ratio(got[0], got[1], "capacity_both_per_s")),
                            _fmt_ratio(_ratio(got[0], got[1], "ops_per_round")),
                            _fmt_ratio(paper.sdpaxos_over(fig10[1].title, n, payload, c)),
                        ]
                    table.append(row)
                lines += [f"### {n} replicas, {payload} B", "", md_table(header, table), ""]
        if "throughput_fig10.png" in ctx.plots:
            lines += ["![Fig. 10](throughput_fig10.png)", ""]
    # Fig. 11
    if fig11:
        lines += ["## Fig. 11: no conflict, capacity vs read share (CPU / CPU+NIC)", ""]
        for n in settings.replicas:
            for payload in settings.payloads_bytes:
                table = []
                for r in settings.read_pcts:
                    row = [f"{r:g}%"]
                    for col in fig11:
                        cpu, both = _cpu_nic(_cell(cells, col.title, n, payload, r, 0.0))
                        row.append(f"{cpu} / {both}")
                    row.append(_paper11(n, payload, r))
                    table.append(row)
                flat = ", ".join(
                    f"{TITLES[p]} {vals[(n, payload)]:g}K"
                    for p, vals in paper.FIG11_FLAT_K.items()
                    if (n, payload) in vals
                )
                lines += [
                    f"### {n} replicas, {payload} B",
                    "",
                    md_table(["reads", *[c.title for c in fig11], "paper SDPaxos"], table),
                    "",
                    f"Paper, the others (flat): {flat}.",
                    "",
                ]
        if "throughput_fig11.png" in ctx.plots:
            lines += ["![Fig. 11](throughput_fig11.png)", ""]
    # Per-replica detail
    lines += [
        "## Per replica: CPU ms per 1,000 ops; bytes out / in per op (with clients)",
        "",
    ]
    detail = []
    for cell in cells.values():
        if not _ok(cell):
            continue
        detail.append(
            [
                cell["column"],
                cell["replicas"],
                f"{cell['payload_bytes']} B",
                f"{cell['read_pct']:g}%",
                f"{cell['conflict_pct']:g}%",
                " ".join(f"{v * 1000:.2f}" for v in cell["cpu_s_per_1000"]),
                " ".join(f"{e:.0f}/{i:.0f}" for e, i in cell["bytes_per_op"]),
                f"{cell['commands_per_instance']:.0f}",
                f"{cell['reads_ok']} / {cell['reads_via_log']}",
                cell["bound"],
            ]
        )
    lines += [
        md_table(
            [
                "column",
                "N",
                "payload",
                "reads",
                "conflict",
                "CPU ms / 1,000 ops (r0 r1 ...)",
                "bytes out/in per op (r0 r1 ...)",
                "cmds/instance",
                "reads ok / log",
                "binds",
            ],
            detail,
        ),
        "",
        "SDPaxos over the others, every write-only cell (CPU / CPU+NIC; paper):",
        "",
        md_table(
            ["over", "replicas", "payload", "conflict", "CPU", "CPU+NIC", "paper"],
            [
                [
                    r["over"],
                    r["replicas"],
                    f"{r['payload_bytes']} B",
                    f"{r['conflict_pct']:g}%",
                    _fmt_ratio(r["cpu"]),
                    _fmt_ratio(r["cpu_nic"]),
                    _fmt_ratio(r["paper"]),
                ]
                for r in ratios
            ],
        ),
        "",
    ]
    failed = [c for c in cells.values() if c.get("status") not in (None, "ok")]
    if failed:
        lines += ["## Not measured or failed", ""]
        lines += [
            f"- {c['column']} {c['replicas']}R {c['payload_bytes']} B {c['read_pct']:g}% reads"
            f" {c['conflict_pct']:g}% conflict: {c['status']}"
            for c in failed
        ]
        lines.append("")
    return "\n".join(lines)


def _cpu_nic(cell: dict[str, Any] | None) -> list[str]:
    if not _ok(cell) or cell is None:
        status = "-" if cell is None else str(cell.get("status", "-")).split(":")[0][:30]
        return [status, status]
    return [_k(cell["capacity_per_s"]), _k(cell["capacity_both_per_s"])]


def _paper10(proto: str, n: int, payload: int, conflict: float) -> str:
    vals = paper.FIG10_K.get((proto, n, payload))
    if vals is None or int(conflict) not in paper.FIG10_CONFLICT_PCTS:
        return "-"
    return f"{vals[paper.FIG10_CONFLICT_PCTS.index(int(conflict))]:g}K"


def _paper11(n: int, payload: int, reads: float) -> str:
    vals = paper.FIG11_SDPAXOS_K.get((n, payload))
    if vals is None or int(reads) not in paper.FIG11_READ_PCTS:
        return "-"
    return f"{vals[paper.FIG11_READ_PCTS.index(int(reads))]:g}K"


# -- plots ---------------------------------------------------------------------------------


def _panels(settings: Settings) -> list[tuple[int, int]]:
    return [(n, p) for n in settings.replicas for p in settings.payloads_bytes]


def _plot_fig10(
    ctx: Context, settings: Settings, columns: list[Column], cells: dict[CellKey, dict[str, Any]]
) -> None:
    if not columns or not any(_ok(c) and c["read_pct"] == 0.0 for c in cells.values()):
        return
    panels = _panels(settings)

    rows = (
        ("capacity_per_s", "one core per replica", 1000.0, "thousand ops/s"),
        ("capacity_both_per_s", "core + NIC", 1000.0, "thousand ops/s"),
        ("ops_per_round", "closed loop", 1.0, "ops per round"),
    )

    def draw(plt: Any) -> None:
        fig, axes = plt.subplots(
            len(rows), len(panels), figsize=(4 * len(panels), 10), squeeze=False, sharex=True
        )
        for row, (field, what, scale, unit) in enumerate(rows):
            for ax, (n, payload) in zip(axes[row], panels, strict=True):
                for col in columns:
                    pts = [
                        (c, cell[field] / scale)
                        for c in settings.conflicts_pct
                        if _ok(cell := _cell(cells, col.title, n, payload, 0.0, c))
                    ]
                    color = COLORS.get(col.title)
                    if pts:
                        ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=col.title)
                    vals = paper.FIG10_K.get((col.protocol, n, payload))
                    if vals and field != "ops_per_round":
                        ax.plot(
                            paper.FIG10_CONFLICT_PCTS,
                            vals,
                            linestyle="--",
                            marker="x",
                            color=color,
                            alpha=0.6,
                            label=f"{col.title} (paper)",
                        )
                ax.set_title(f"{n} replicas, {payload} B: {what}", fontsize=9)
                ax.set_xlabel("conflict rate (%)")
                ax.set_ylabel(unit)
                ax.set_ylim(bottom=0)
                ax.legend(fontsize=7)
        fig.suptitle(
            "Fig. 10: writes vs conflict rate (solid: measured; dashed: the paper). Closed loop:"
            f" {settings.sessions} sessions per replica, operations completed per round"
        )

    save_plot(ctx, "throughput_fig10.png", draw)


def _plot_fig11(
    ctx: Context, settings: Settings, columns: list[Column], cells: dict[CellKey, dict[str, Any]]
) -> None:
    if not columns or not any(_ok(c) and c["conflict_pct"] == 0.0 for c in cells.values()):
        return
    panels = _panels(settings)

    def draw(plt: Any) -> None:
        fig, axes = plt.subplots(
            2, len(panels), figsize=(4 * len(panels), 7), squeeze=False, sharex=True
        )
        for row, (field, what) in enumerate(
            (("capacity_per_s", "one core per replica"), ("capacity_both_per_s", "core + NIC"))
        ):
            for ax, (n, payload) in zip(axes[row], panels, strict=True):
                for col in columns:
                    pts = [
                        (r, cell[field] / 1000)
                        for r in settings.read_pcts
                        if _ok(cell := _cell(cells, col.title, n, payload, r, 0.0))
                    ]
                    color = COLORS.get(col.title)
                    if pts:
                        ax.plot(*zip(*pts, strict=True), marker="o", color=color, label=col.title)
                    if col.protocol == "sdpaxos":
                        sd = paper.FIG11_SDPAXOS_K.get((n, payload))
                        if sd:
                            ax.plot(
                                paper.FIG11_READ_PCTS,
                                sd,
                                linestyle="--",
                                marker="x",
                                color=color,
                                alpha=0.6,
                                label="SDPaxos (paper)",
                            )
                    elif col.clients_at != "all" or col.protocol != "multipaxos":
                        flat = paper.FIG11_FLAT_K.get(col.protocol, {}).get((n, payload))
                        if flat is not None:
                            ax.axhline(flat, linestyle="--", color=color, alpha=0.5)
                ax.set_title(f"{n} replicas, {payload} B: {what}", fontsize=9)
                ax.set_xlabel("reads (%)")
                ax.set_ylabel("thousand ops/s")
                ax.set_ylim(bottom=0)
                ax.legend(fontsize=7)
        fig.suptitle(
            "Fig. 11: no conflict vs read share (solid: measured capacity; dashed: the paper,"
            " writes-only flat lines for the others)"
        )

    save_plot(ctx, "throughput_fig11.png", draw)


def _run_runtime(ctx: Context) -> int:
    """``--engine runtime``: real node processes (:mod:`bench.experiments.throughput_runtime`)."""
    from bench.experiments import throughput_runtime

    return throughput_runtime.run(ctx)
