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

This module is the run: which cells, in which passes, each protocol in its
worker. What a cell is and the ratios between cells are
:mod:`bench.experiments.throughput_cells`; ``results.md`` and the figures are
:mod:`bench.experiments.throughput_report`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from bench.common import Context, write_results
from bench.experiments.throughput_cells import (
    BARS,
    TITLES,
    CellKey,
    Column,
    Settings,
    bar_rows,
    ratio_rows,
)
from bench.experiments.throughput_report import markdown, plot_fig10, plot_fig11
from bench.rounds import NIC_MBPS_DEFAULT, ProtocolWorkers, RoundResult, RoundSpec

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
    bars = bar_rows(cells)
    ratios = ratio_rows(cells, settings)
    plot_fig10(ctx, settings, fig10, cells)
    plot_fig11(ctx, settings, fig11, cells)
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
    md = markdown(ctx, settings, nic_mbps, fig10, fig11, cells, bars, ratios, load_start, load_end)
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


def _run_runtime(ctx: Context) -> int:
    """``--engine runtime``: real node processes (:mod:`bench.experiments.throughput_runtime`)."""
    from bench.experiments import throughput_runtime

    return throughput_runtime.run(ctx)
