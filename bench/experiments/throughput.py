"""``throughput``: batched capacity per protocol against read share and payload (Fig. 11).

How it measures (:mod:`bench.rounds`): every protocol runs in the round-based
in-memory driver, not the simulator. Each replica steps everything in its
inbox, calls ``ready()`` once per round and sends one encoded frame per
destination, with many closed-loop sessions per replica, so protocols batch
the way a loaded node does. The thread's CPU time of each replica's calls
(``propose``, ``step``, ``tick``, ``ready``, ``read``) and of its encoding and
decoding is charged to it. Per cell the table gives each replica's CPU seconds
per 1,000 completed operations and the **capacity** with one core per replica:
1,000 / the busiest replica's CPU seconds per 1,000 (the paper's machines had
a core or more per replica; the busiest replica is the bottleneck).

Setup: 3 and 5 replicas, no emulated delay, sessions at every replica (Multi-Paxos:
at the leader, the paper's setup; ``Multi-Paxos-fwd`` has them everywhere,
forwarded by the replicas), read share 0-100 %, 16 B and 1 KB payloads, writes to
unique keys (EPaxos at 0, 5, 50 % conflict), reads through each protocol's read
path (``read()``; not ``ok`` goes through the log). Warm-up operations are excluded.
Every run is verified (:func:`bench.rounds.verify`): every replica executed every
command in the same order (equal BLAKE2b chains) and every operation completed once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, md_table, save_plot, write_results
from bench.rounds import RoundSpec, run_rounds

TITLES = {
    "sdpaxos": "SDPaxos",
    "multipaxos": "Multi-Paxos",
    "mencius": "Mencius",
    "epaxos": "EPaxos",
}


@dataclass(frozen=True, slots=True)
class Settings:
    replicas: tuple[int, ...]
    payloads_bytes: tuple[int, ...]
    read_pcts: tuple[float, ...]
    #: Closed-loop sessions per replica (each one operation outstanding).
    sessions: int
    warmup: int
    commands: int
    #: EPaxos's conflict rates (the others run without conflict).
    epaxos_conflicts_pct: tuple[float, ...]


QUICK = Settings((3, 5), (16, 1024), (0.0, 50.0, 100.0), 1000, 6_000, 24_000, (5.0,))
FULL = Settings(
    (3, 5), (16, 1024), (0.0, 25.0, 50.0, 75.0, 100.0), 2000, 30_000, 150_000, (0.0, 5.0, 50.0)
)


@dataclass(frozen=True, slots=True)
class Variant:
    column: str
    protocol: str
    conflict_pct: float = 0.0
    clients_at: str = "all"


def _variants(ctx: Context, settings: Settings) -> list[Variant]:
    """The table's columns, in order."""
    out = []
    for proto in ctx.protocols:
        if proto == "epaxos":
            for c in settings.epaxos_conflicts_pct:
                out.append(Variant(f"EPaxos-{c:g}%", proto, c))
        elif proto == "multipaxos":
            out.append(Variant("Multi-Paxos", proto, clients_at="leader"))
            out.append(Variant("Multi-Paxos-fwd", proto))
        else:
            out.append(Variant(TITLES.get(proto, proto), proto))
    return out


def run(ctx: Context) -> int:
    if ctx.engine_name == "runtime":
        return _run_runtime(ctx)
    settings = QUICK if ctx.quick else FULL
    variants = _variants(ctx, settings)
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    cells = [
        (n, payload, read_pct)
        for n in settings.replicas
        for payload in settings.payloads_bytes
        for read_pct in settings.read_pcts
    ]
    total = len(cells) * len(variants)
    done = 0
    for n, payload, read_pct in cells:
        for v in variants:
            done += 1
            row: dict[str, Any] = {
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
            spec = RoundSpec(
                v.protocol,
                replicas=n,
                sessions=settings.sessions,
                commands=settings.commands,
                warmup=settings.warmup,
                read_pct=read_pct,
                payload_bytes=payload,
                conflict_pct=v.conflict_pct,
                clients_at=v.clients_at,
                seed=ctx.seed,
            )
            label = f"[{done}/{total}] {n} replicas, {payload} B, {read_pct:g}% reads, {v.column}"
            res = run_rounds(spec, progress=ctx.progress)
            row.update(res.to_json())
            row["status"] = "ok" if res.ok else "FAILED: " + "; ".join(res.problems[:3])
            if not res.ok:
                failures.append(f"{label}: {row['status']}")
            ctx.progress(
                f"{label}: capacity {res.capacity_per_s:,.0f} ops/s with one core per replica"
                f" (busiest r{res.busiest} {res.cpu_s_per_1000()[res.busiest] * 1000:.2f} ms"
                f" CPU per 1,000; {res.commands_per_instance:.0f} commands per instance;"
                f" {res.wall_s:.1f} s){'' if res.ok else ' ' + row['status']}"
            )
    ratios = _ratios(rows)
    _plot(ctx, settings, variants, rows)
    result = {
        "settings": dataclasses.asdict(settings),
        "driver": "bench.rounds (round-based, batched, codec in the loop)",
        "rows": rows,
        "ratios": ratios,
        "failures": failures,
    }
    write_results(ctx, result, _markdown(ctx, settings, variants, rows, ratios))
    return 1 if failures else 0


def _row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def paper_ratio(column: str, protocol: str, conflict: float, n: int, payload: int) -> float | None:
    """SDPaxos over ``column`` in the paper (Fig. 10's stated ratios, else Fig. 11's lines)."""
    for want in paper.PAPER_RATIOS:
        same = (want["over"], want["replicas"], want["payload_bytes"]) == (protocol, n, payload)
        if (
            same
            and float(want["conflict_pct"]) == conflict
            and (protocol != "multipaxos" or column == "Multi-Paxos")
        ):
            return float(want["ratio"])
    flat = paper.FIG11_FLAT_K.get(protocol, {}).get((n, payload))
    sd = paper.FIG11_SDPAXOS_K.get((n, payload))
    if flat is None or sd is None or column == "Multi-Paxos-fwd" or conflict not in (0.0,):
        return None
    return round(sd[0] / flat, 1)


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
        sd = _row(rows, protocol="sdpaxos", replicas=n, payload_bytes=payload, read_pct=0.0)
        ok = (
            sd is not None
            and row.get("status") == "ok"
            and sd.get("status") == "ok"
            and row["capacity_per_s"] > 0
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
                "paper": paper_ratio(column, row["protocol"], row["conflict_pct"], n, payload),
                "status": row.get("status", ""),
            }
        )
    return out


def _markdown(
    ctx: Context,
    settings: Settings,
    variants: list[Variant],
    rows: list[dict[str, Any]],
    ratios: list[dict[str, Any]],
) -> str:
    lines = [
        "# throughput: batched CPU per operation and one-core-per-replica capacity (Fig. 11)",
        "",
        f"Round-based driver (`bench/rounds.py`), seed {ctx.seed}{', quick' if ctx.quick else ''}:"
        f" {settings.sessions} closed-loop sessions per replica (Multi-Paxos: all at the leader;"
        f" Multi-Paxos-fwd: at every replica, forwarded), {settings.warmup:,} operations of"
        f" warm-up excluded, {settings.commands:,} measured. Each replica steps its whole inbox"
        " and calls ready() once per round; frames encoded and decoded with the protocol's"
        " codec. CPU: `time.thread_time` around each replica's calls and codec work.",
        "",
        "Capacity = 1000 / (busiest replica's CPU s per 1,000 operations): ops/s with one core"
        " per replica. Cells: capacity ops/s (busiest replica's CPU ms per 1,000 ops).",
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
        "Paper: Fig. 10 states 2.1x and 6.1x over Multi-Paxos (5 replicas, 16 B / 1 KB) and"
        " 1.7x over EPaxos at 5 % conflict; the other ratios are read off Fig. 11's lines.",
        "",
    ]
    columns = [v.column for v in variants]
    for n in settings.replicas:
        for payload in settings.payloads_bytes:
            lines += [f"## {n} replicas, {payload} B", ""]
            table = []
            for read_pct in settings.read_pcts:
                cells: list[Any] = [f"{read_pct:g}%"]
                for column in columns:
                    row = _row(
                        rows, replicas=n, payload_bytes=payload, read_pct=read_pct, column=column
                    )
                    assert row is not None
                    if row.get("status") == "ok":
                        busiest = row["cpu_s_per_1000"][row["busiest"]] * 1000
                        cells.append(f"{row['capacity_per_s']:,.0f} ({busiest:.2f} ms)")
                    else:
                        cells.append(str(row.get("status", "")).split(" (")[0][:60])
                k = paper.FIG11_SDPAXOS_K.get((n, payload))
                pct = int(read_pct)
                cells.append(
                    f"{k[paper.FIG11_READ_PCTS.index(pct)]:g}K"
                    if k and pct in paper.FIG11_READ_PCTS
                    else "-"
                )
                table.append(cells)
            lines += [md_table(["reads", *columns, "paper SDPaxos"], table), ""]
            per = [
                r
                for r in rows
                if r["replicas"] == n and r["payload_bytes"] == payload and "cpu_s_per_1000" in r
            ]
            if per:
                lines += [
                    "CPU ms per 1,000 operations, per replica; commands per instance; reads"
                    " served locally / through the log:",
                    "",
                    md_table(
                        [
                            "reads",
                            "protocol",
                            *[f"r{i}" for i in range(n)],
                            "cmds/instance",
                            "reads ok / log",
                        ],
                        [
                            [
                                f"{r['read_pct']:g}%",
                                r["column"],
                                *[f"{v * 1000:.2f}" for v in r["cpu_s_per_1000"]],
                                f"{r['commands_per_instance']:.0f}",
                                f"{r['reads_ok']} / {r['reads_via_log']}",
                            ]
                            for r in per
                        ],
                    ),
                    "",
                ]
    lines += [
        "The paper's flat lines (write-only, thousand req/s): "
        + "; ".join(
            f"{TITLES[p]} " + ", ".join(f"{n}R {b} B {v:g}K" for (n, b), v in vals.items())
            for p, vals in paper.FIG11_FLAT_K.items()
        ),
        "",
    ]
    for plot in ctx.plots:
        lines += [f"![{plot}]({plot})", ""]
    if ctx.skipped:
        lines += ["## Not run", ""] + [f"- {p}: {why}" for p, why in ctx.skipped.items()] + [""]
    return "\n".join(lines)


def _plot(
    ctx: Context,
    settings: Settings,
    variants: list[Variant],
    rows: list[dict[str, Any]],
) -> None:
    if not any(r.get("status") == "ok" for r in rows):
        return
    combos = [(n, p) for n in settings.replicas for p in settings.payloads_bytes]

    def draw(plt: Any) -> None:
        fig, axes = plt.subplots(1, len(combos), figsize=(4 * len(combos), 3.6), squeeze=False)
        for ax, (n, payload) in zip(axes[0], combos, strict=True):
            for v in variants:
                pts = [
                    (r["read_pct"], r["capacity_per_s"])
                    for r in rows
                    if r["replicas"] == n
                    and r["payload_bytes"] == payload
                    and r["column"] == v.column
                    and r.get("status") == "ok"
                ]
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=v.column)
            ax.set_title(f"{n} replicas, {payload} B")
            ax.set_xlabel("reads (%)")
            ax.set_ylabel("ops/s, one core per replica")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7)
        fig.suptitle("capacity from CPU time per operation (round-based driver, batched)")

    save_plot(ctx, "throughput.png", draw)


def _run_runtime(ctx: Context) -> int:
    """``--engine runtime``: real node processes (:mod:`bench.experiments.throughput_runtime`)."""
    from bench.experiments import throughput_runtime

    return throughput_runtime.run(ctx)
