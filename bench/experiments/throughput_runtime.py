"""``throughput --engine runtime``: real node processes on loopback under closed-loop load.

What it measures, per cell (replicas, payload, read share, protocol):

* 3 or 5 ``python -m sdpaxos node`` processes on loopback, no emulated delay
  (a LAN profile), fsync off unless ``--fsync``, TLS on;
* one load-generator process per region with clients
  (:mod:`bench.runtime_loader`: raw client frames, ``SUBMIT_MANY`` batches),
  ``sessions`` closed-loop clients per region, each with one operation
  outstanding (Multi-Paxos: all of them at the leader, as in the paper;
  ``Multi-Paxos-fwd``: at every replica, which forward to the leader);
* operations on keys of their own (EPaxos: the conflict rate on one hot
  key), writes of the payload size, reads through the protocol's read path
  where it has one at that replica, else through the log;
* after a warm-up, over the window: operations completed per second (wall
  clock; every process shares this machine's cores), each node's CPU seconds
  per 1,000 operations (``/proc/<pid>/stat``, all threads), the loaders' CPU
  likewise, the machine's busy share and load average;
* the **capacity with one core per node**: 1,000 / the busiest node's CPU
  seconds per 1,000 operations (what a node would do alone on its own core; the
  loaders are not counted);
* the verification: every node executed the same commands (``BenchLog``
  digests: count, set, order, or the hot key's order for EPaxos).

A cluster is started for each column, replica count and payload, and serves
that payload's cells (read shares) one after another.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, md_table, plots_and_skipped, save_plot, write_results
from bench.engines import Clients, RunSpec, close_engine
from bench.runtime_engine import RuntimeEngine
from bench.workloads import Workload
from sdpaxos.profiles import uniform

TITLES = {
    "sdpaxos": "SDPaxos",
    "multipaxos": "Multi-Paxos",
    "mencius": "Mencius",
    "epaxos": "EPaxos",
}


@dataclass(frozen=True, slots=True)
class Settings:
    replicas: tuple[int, ...]
    #: (payload bytes, read shares measured at that payload).
    cells: tuple[tuple[int, tuple[float, ...]], ...]
    #: Closed-loop clients per region (Multi-Paxos: this many times the replicas, at the leader).
    sessions: int
    warmup_ms: float
    duration_ms: float
    epaxos_conflicts_pct: tuple[float, ...]


#: Quick: reads only at 16 B (a read carries no payload; at 1 KB only the
#: writes change), short windows. About three minutes with every protocol.
QUICK = Settings((3, 5), ((16, (0.0, 50.0, 100.0)), (1024, (0.0,))), 1000, 500.0, 1_000.0, (5.0,))
FULL = Settings(
    (3, 5),
    ((16, (0.0, 50.0, 100.0)), (1024, (0.0, 50.0, 100.0))),
    1000,
    1_000.0,
    3_000.0,
    (0.0, 5.0, 50.0),
)


@dataclass(frozen=True, slots=True)
class Variant:
    column: str
    protocol: str
    conflict_pct: float = 0.0
    clients_at: str = "all"


def variants(ctx: Context, settings: Settings) -> list[Variant]:
    out = []
    for proto in ctx.protocols:
        if proto == "epaxos":
            out += [Variant(f"EPaxos-{c:g}%", proto, c) for c in settings.epaxos_conflicts_pct]
        elif proto == "multipaxos":
            out.append(Variant("Multi-Paxos", proto, clients_at="leader"))
            out.append(Variant("Multi-Paxos-fwd", proto))
        else:
            out.append(Variant(TITLES.get(proto, proto), proto))
    return out


def leader_of(n: int) -> int:
    """The sequencer / leader: the highest id. The others dial it as they start (a
    node dials the peers above it), so a Multi-Paxos follower hears from it at
    once instead of electing itself on a busy machine."""
    return n - 1


def sessions_for(settings: Settings, payload: int) -> int:
    """Closed-loop clients per region: a fifth for 1 KB commands (1,000 per node
    meant 5 MB per round at 5 nodes, longer than a quick window here)."""
    return settings.sessions if payload < 1024 else max(1, settings.sessions // 5)


def run(ctx: Context) -> int:
    settings = QUICK if ctx.quick else FULL
    engine = ctx.engine()
    assert isinstance(engine, RuntimeEngine)
    try:
        return _run(ctx, settings, engine)
    finally:
        close_engine(engine)


def _run(ctx: Context, settings: Settings, engine: RuntimeEngine) -> int:
    cols = variants(ctx, settings)
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    total = len(settings.replicas) * len(cols) * sum(len(r) for _, r in settings.cells)
    done = 0
    for n in settings.replicas:
        profile = uniform(n, 0.2, local_rtt_ms=0.1, name=f"lan{n}")
        for v in cols:
            for payload, reads in settings.cells:
                # Every column starts each payload on a fresh cluster, so that
                # its first cell (writes: the ratios' cell) runs on nodes with no
                # history. The engine would otherwise keep one cluster for every
                # column of a protocol (EPaxos at 0, 5 and 50 % conflict), and
                # nodes get dearer per command as they age: a baseline node that
                # kept every command it ran was measured at twice the CPU per
                # command after 1.5M commands, and the 1 KB cells, run after a
                # column's 16 B ones, at 12 to 13 ms per 1,000 commands for
                # SDPaxos where a fresh cluster measures 6.4.
                engine.close()
                for read_pct in reads:
                    done += 1
                    row: dict[str, Any] = {
                        "sessions_per_region": sessions_for(settings, payload),
                        "replicas": n,
                        "payload_bytes": payload,
                        "read_pct": read_pct,
                        "column": v.column,
                        "protocol": v.protocol,
                        "conflict_pct": v.conflict_pct,
                        "clients_at": v.clients_at,
                    }
                    rows.append(row)
                    why = ctx.status(v.protocol)
                    if why:
                        row["status"] = why
                        continue
                    sessions = sessions_for(settings, payload)
                    per_region = [sessions] * n
                    if v.clients_at == "leader":
                        per_region = [0] * n
                        per_region[leader_of(n)] = sessions * n
                    # Keys of their own, but for EPaxos's share on the hot key (reads too).
                    workload = Workload(
                        conflict_pct=v.conflict_pct,
                        read_pct=read_pct,
                        payload_bytes=payload,
                        seed=ctx.seed,
                    )
                    spec = RunSpec(
                        protocol=v.protocol,
                        profile=profile,
                        workload=workload,
                        clients=Clients("closed", tuple(per_region)),
                        duration_ms=settings.duration_ms,
                        warmup_ms=settings.warmup_ms,
                        leader=leader_of(n),
                        seed=ctx.seed,
                    )
                    label = (
                        f"[{done}/{total}] {n} nodes, {payload} B, {read_pct:g}% reads, {v.column}"
                    )
                    out = ctx.run(engine, spec, label)
                    row.update(_figures(out))
                    row["status"] = "ok" if out.ok else f"FAILED: {out.verdict}"
                    if not out.ok:
                        failures.append(f"{label}: {out.verdict}")
                    if "capacity_per_s" in row:
                        ctx.progress(
                            f"{label}: {row['ops_per_s']:,.0f} ops/s measured, capacity"
                            f" {row['capacity_per_s']:,.0f} with one core per node (busiest"
                            f" n{row['busiest']} {row['busiest_cpu_ms_per_1000']:.1f} ms CPU"
                            f" per 1,000), machine {100 * row['machine_busy']:.0f} % busy"
                        )
    ratios = _ratios(rows)
    _plot(ctx, settings, cols, rows)
    result = {
        "settings": dataclasses.asdict(settings),
        "driver": "runtime: node processes on loopback, one raw-frame loader per region",
        "fsync": engine.fsync,
        "rows": rows,
        "ratios": ratios,
        "failures": failures,
    }
    write_results(ctx, result, _markdown(ctx, settings, cols, rows, ratios, engine.fsync))
    for f in failures:
        ctx.progress(f"FLAGGED: {f}")
    return 1 if failures else 0


def _ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """SDPaxos's write-only capacity over every other column's, beside the paper's."""
    out = []
    seen: set[tuple[int, int, str]] = set()
    for row in rows:
        if row["protocol"] == "sdpaxos" or row["read_pct"] != 0.0:
            continue
        n, payload, column = row["replicas"], row["payload_bytes"], row["column"]
        if (n, payload, column) in seen:
            continue
        seen.add((n, payload, column))
        sd = next(
            (
                r
                for r in rows
                if (r["protocol"], r["replicas"], r["payload_bytes"], r["read_pct"])
                == ("sdpaxos", n, payload, 0.0)
            ),
            None,
        )
        ok = (
            sd is not None
            and row.get("status") == "ok"
            and sd.get("status") == "ok"
            and row.get("capacity_per_s", 0) > 0
        )
        measured = round(sd["capacity_per_s"] / row["capacity_per_s"], 2) if ok and sd else None
        out.append(
            {
                "over": column,
                "protocol": row["protocol"],
                "replicas": n,
                "payload_bytes": payload,
                "conflict_pct": row["conflict_pct"],
                "measured": measured,
                # The paper's columns: "EPaxos" at each conflict rate, no forwarding.
                "paper": paper.sdpaxos_over(
                    "EPaxos" if row["protocol"] == "epaxos" else column,
                    n,
                    payload,
                    row["conflict_pct"],
                ),
                "status": row.get("status", ""),
            }
        )
    return out


def _figures(out: Any) -> dict[str, Any]:
    cpu = out.extra.get("cpu")
    verify = out.extra.get("verify") or {}
    if not cpu:
        return {"verify": verify.get("verdict")}
    per1000 = cpu["node_cpu_s_per_1000"]
    busiest = max(range(len(per1000)), key=lambda k: per1000[k])
    reads = [r for r in out.records if r.kind == "read" and r.complete_us is not None]
    return {
        "ops_per_s": cpu["ops_per_s"],
        "completed_in_window": cpu["completed_in_window"],
        "window_s": cpu["window_s"],
        "cpu_s_per_1000": per1000,
        "busiest": busiest,
        "busiest_cpu_ms_per_1000": per1000[busiest] * 1000,
        "capacity_per_s": 1000 / per1000[busiest] if per1000[busiest] > 0 else 0.0,
        "loader_cpu_s_per_1000": cpu["loader_cpu_s_per_1000"],
        "machine_busy": cpu["machine_busy"],
        "load_average": cpu["load_average"],
        "reads_local": sum(1 for r in reads if r.path == "local"),
        "reads_via_log": sum(1 for r in reads if r.path == "log"),
        "executed": verify.get("executed"),
        "verify": verify.get("verdict"),
        "leaders_at_end": {str(k): v for k, v in (verify.get("leaders") or {}).items()},
    }


def _markdown(
    ctx: Context,
    settings: Settings,
    cols: list[Variant],
    rows: list[dict[str, Any]],
    ratios: list[dict[str, Any]],
    fsync: bool,
) -> str:
    loads = [r["load_average"][0] for r in rows if r.get("load_average")]
    busy = [r["machine_busy"] for r in rows if r.get("machine_busy") is not None]
    lines = [
        "# throughput (runtime): node processes on loopback, closed-loop load (Fig. 11)",
        "",
        f"Engine `runtime`, seed {ctx.seed}{', quick' if ctx.quick else ''}. Per cell: 3 or 5"
        " `python -m sdpaxos node` processes, no emulated delay, TLS on, fsync"
        f" {'on' if fsync else 'off (as the paper prototype)'}; one raw-frame load generator"
        f" per region, {settings.sessions} closed-loop clients per region at 16 B and"
        f" {sessions_for(settings, 1024)} at 1 KB (Multi-Paxos: all at the leader, node n-1;"
        " Multi-Paxos-fwd: at every node, forwarded); warm-up"
        f" {settings.warmup_ms:g} ms, window {settings.duration_ms:g} ms (wall clock).",
        "",
        f"Machine: {os.cpu_count()} cores shared by the nodes, the loaders and other jobs;"
        + (
            f" 1-minute load average {min(loads):.2f} to {max(loads):.2f}, all cores busy"
            f" {100 * min(busy):.0f} to {100 * max(busy):.0f} % of the windows."
            if loads
            else " not measured."
        )
        + " Measured ops/s depend on that load; the capacity (1,000 / the busiest node's"
        " CPU seconds per 1,000 operations: ops/s with one core per node) depends on it"
        " much less.",
        "",
        "## SDPaxos over the others (write-only capacity), beside the paper",
        "",
        md_table(
            ["over", "replicas", "payload", "measured", "paper"],
            [
                [
                    r["over"],
                    r["replicas"],
                    f"{r['payload_bytes']} B",
                    "not measured" if r["measured"] is None else f"{r['measured']:.2f}x",
                    "-" if r["paper"] is None else f"{r['paper']:g}x",
                ]
                for r in ratios
            ],
        ),
        "",
    ]
    columns = [v.column for v in cols]
    for n in settings.replicas:
        for payload, reads in settings.cells:
            lines += [f"## {n} nodes, {payload} B", ""]
            table = []
            for read_pct in reads:
                cells: list[Any] = [f"{read_pct:g}%"]
                for column in columns:
                    row = _row(rows, n, payload, read_pct, column)
                    if row is not None and "capacity_per_s" in row and row["status"] == "ok":
                        cells.append(
                            f"{row['capacity_per_s']:,.0f} ({row['ops_per_s']:,.0f} measured)"
                        )
                    else:
                        cells.append("-" if row is None else str(row.get("status"))[:60])
                table.append(cells)
            lines += [
                "Capacity with one core per node, ops/s (measured on this machine, ops/s):",
                "",
                md_table(["reads", *columns], table),
                "",
            ]
            per = [
                r
                for r in rows
                if r["replicas"] == n and r["payload_bytes"] == payload and "cpu_s_per_1000" in r
            ]
            if per:
                lines += [
                    "CPU ms per 1,000 operations, each node and the loaders together; reads"
                    " served by the read path / through the log; the verification:",
                    "",
                    md_table(
                        [
                            "reads",
                            "protocol",
                            *[f"n{i}" for i in range(n)],
                            "loaders",
                            "machine busy",
                            "reads local / log",
                            "verified",
                        ],
                        [
                            [
                                f"{r['read_pct']:g}%",
                                r["column"],
                                *[f"{v * 1000:.2f}" for v in r["cpu_s_per_1000"]],
                                f"{r['loader_cpu_s_per_1000'] * 1000:.2f}",
                                f"{100 * r['machine_busy']:.0f} %",
                                f"{r['reads_local']} / {r['reads_via_log']}",
                                r.get("verify") or "-",
                            ]
                            for r in per
                        ],
                    ),
                    "",
                ]
    moved = [
        f"- {r['replicas']} nodes, {r['payload_bytes']} B, {r['read_pct']:g}% reads,"
        f" {r['column']}: the nodes followed {sorted(set(r['leaders_at_end'].values()))} at the"
        f" end, not node {leader_of(r['replicas'])} (the lead moved during the run)"
        for r in rows
        if r["protocol"] in ("sdpaxos", "multipaxos")
        and r.get("leaders_at_end")
        and any(v != leader_of(r["replicas"]) for v in r["leaders_at_end"].values())
    ]
    if moved:
        lines += ["## The lead moved", "", *moved, ""]
    return "\n".join(lines + plots_and_skipped(ctx))


def _row(
    rows: list[dict[str, Any]], n: int, payload: int, read_pct: float, column: str
) -> dict[str, Any] | None:
    for r in rows:
        if (r["replicas"], r["payload_bytes"], r["read_pct"], r["column"]) == (
            n,
            payload,
            read_pct,
            column,
        ):
            return r
    return None


def _plot(
    ctx: Context, settings: Settings, cols: list[Variant], rows: list[dict[str, Any]]
) -> None:
    ok = [r for r in rows if r.get("status") == "ok" and "capacity_per_s" in r]
    if not ok:
        return
    combos = [(n, p) for n in settings.replicas for p, _ in settings.cells]

    def draw(plt: Any) -> None:
        fig, axes = plt.subplots(
            2, len(combos), figsize=(4 * len(combos), 6.4), squeeze=False, sharex=True
        )
        for k, (n, payload) in enumerate(combos):
            for v in cols:
                pts = [
                    (r["read_pct"], r["capacity_per_s"], r["ops_per_s"])
                    for r in ok
                    if r["replicas"] == n
                    and r["payload_bytes"] == payload
                    and r["column"] == v.column
                ]
                if not pts:
                    continue
                xs = [x for x, _, _ in pts]
                axes[0][k].plot(xs, [c for _, c, _ in pts], marker="o", label=v.column)
                axes[1][k].plot(xs, [m for _, _, m in pts], marker="o", label=v.column)
            axes[0][k].set_title(f"{n} nodes, {payload} B")
            axes[0][k].set_ylabel("ops/s, one core per node")
            axes[1][k].set_ylabel("ops/s measured (shared cores)")
            axes[1][k].set_xlabel("reads (%)")
            for ax in axes[:, k]:
                ax.set_ylim(bottom=0)
                ax.legend(fontsize=7)
        fig.suptitle("runtime: capacity from CPU per operation (top), measured rate (bottom)")

    save_plot(ctx, "throughput_runtime.png", draw)
