"""``throughput``: what each protocol costs per command, against read share and payload (Fig. 11).

Why CPU time and not commands per second: the simulator's replicas are
infinitely fast in virtual time, and on this machine all replicas share two
cores with other work, so a wall-clock rate would measure the machine. Every
replica is wrapped (:mod:`bench.cputime`) and the CPU time of its calls
(``propose``, ``step``, ``tick``, ``ready``, ``read``, and encoding and
decoding its messages) is charged to it. Per configuration the table gives
each replica's CPU seconds per 1,000 completed operations, and the
**capacity** the protocol would reach with one core per replica: 1,000 divided
by the busiest replica's CPU seconds per 1,000 (the paper's machines had a core
or two per replica; the busiest replica is the bottleneck, e.g. the
Multi-Paxos leader).

Setup (the paper's section 5.3, "a local cluster"): 3 and 5 replicas with a
0.2 ms round trip and no emulated wide-area delay, closed-loop clients at every
replica (each one operation outstanding), writes to unique keys (no conflict;
EPaxos also at 5 %), reads of unique keys through each protocol's read path,
16 B and 1 KB payloads. Warm-up excluded: CPU counters are reset when it ends
and only operations completed after it count.

What it does not model: a real node batches every command that arrived since
its last turn into one message, and the simulator hands a replica one event at
a time and collects its effects right after, so commands are not batched
across clients here (each command is its own C-instance, or log entry). The
figures are per-command costs of the pure cores, the same for every protocol.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, md_table, save_plot, write_history_file, write_results
from bench.engines import Clients, RunOutput, RunSpec
from bench.workloads import Workload, completed_between
from sdpaxos.profiles import DelayProfile, uniform

TITLES = {
    "sdpaxos": "SDPaxos",
    "multipaxos": "Multi-Paxos",
    "mencius": "Mencius",
    "epaxos": "EPaxos",
}
#: The LAN: round trip between replicas and to a replica's own clients, ms.
LAN_RTT_MS = 0.2
LOCAL_RTT_MS = 0.1


@dataclass(frozen=True, slots=True)
class Settings:
    replicas: tuple[int, ...]
    payloads_bytes: tuple[int, ...]
    read_pcts: tuple[float, ...]
    clients_per_region: int
    warmup_ms: float
    duration_ms: float
    #: EPaxos's conflict rates (the others run without conflict).
    epaxos_conflicts_pct: tuple[float, ...]


QUICK = Settings((3, 5), (16, 1024), (0.0, 50.0, 100.0), 10, 5.0, 30.0, (5.0,))
FULL = Settings((3, 5), (16, 1024), (0.0, 25.0, 50.0, 75.0, 100.0), 20, 20.0, 100.0, (0.0, 5.0))


def lan(n: int) -> DelayProfile:
    return uniform(n, LAN_RTT_MS, local_rtt_ms=LOCAL_RTT_MS, name=f"lan{n}")


def _variants(ctx: Context, settings: Settings) -> list[tuple[str, str, float]]:
    """(column, protocol, conflict %) in table order."""
    out = []
    for proto in ctx.protocols:
        if proto == "epaxos":
            for c in settings.epaxos_conflicts_pct:
                out.append((f"EPaxos-{c:g}%", proto, c))
        else:
            out.append((TITLES.get(proto, proto), proto, 0.0))
    return out


def measure(out: RunOutput) -> dict[str, Any]:
    """CPU per 1,000 completed operations per replica, and the one-core capacity."""
    assert out.cpu is not None
    start, end = out.spec.window_us
    done = completed_between(out.records, start, end)
    n = out.spec.profile.size
    per_1000 = [out.cpu.total_s(r) / done * 1000 if done else math.nan for r in range(n)]
    busiest = max(range(n), key=lambda r: per_1000[r]) if done else 0
    capacity = 1000 / per_1000[busiest] if done and per_1000[busiest] > 0 else math.nan
    return {
        "completed": done,
        "cpu_s_per_1000": [round(v, 5) for v in per_1000],
        "busiest": busiest,
        "capacity_per_s": round(capacity, 1),
        "busiest_breakdown_s": {k: round(v, 5) for k, v in out.cpu.seconds[busiest].items()},
        "busiest_calls": dict(out.cpu.calls[busiest]),
    }


def run(ctx: Context) -> int:
    settings = QUICK if ctx.quick else FULL
    engine = ctx.engine()
    variants = _variants(ctx, settings)
    rows: list[dict[str, Any]] = []
    outputs: list[RunOutput] = []
    failures: list[str] = []
    for n in settings.replicas:
        for payload in settings.payloads_bytes:
            for read_pct in settings.read_pcts:
                for column, proto, conflict in variants:
                    row: dict[str, Any] = {
                        "replicas": n,
                        "payload_bytes": payload,
                        "read_pct": read_pct,
                        "column": column,
                        "protocol": proto,
                        "conflict_pct": conflict,
                    }
                    rows.append(row)
                    why = ctx.status(proto)
                    if why:
                        row["status"] = why
                        continue
                    spec = RunSpec(
                        protocol=proto,
                        profile=lan(n),
                        workload=Workload(
                            conflict_pct=conflict,
                            read_pct=read_pct,
                            payload_bytes=payload,
                            seed=ctx.seed,
                        ),
                        clients=Clients("closed", (settings.clients_per_region,) * n),
                        duration_ms=settings.duration_ms,
                        warmup_ms=settings.warmup_ms,
                        cpu=True,
                        seed=ctx.seed,
                    )
                    label = f"{n} replicas, {payload} B, {read_pct:g}% reads, {column}"
                    out = ctx.run(engine, spec, label)
                    outputs.append(out)
                    row["status"] = "ok" if out.ok else out.verdict
                    if not out.ok:
                        failures.append(f"{label}: {out.verdict}")
                    row.update(measure(out))
                    ctx.progress(
                        f"{label}: capacity {row['capacity_per_s']:,.0f} ops/s with one core per"
                        f" replica (busiest {TITLES.get(proto, proto)} replica {row['busiest']})"
                    )
    ratios = _ratios(rows)
    if outputs:
        ctx.progress(f"wrote {write_history_file(ctx, outputs)}")
    _plot(ctx, settings, variants, rows)
    result = {
        "settings": dataclasses.asdict(settings),
        "lan_rtt_ms": LAN_RTT_MS,
        "rows": rows,
        "ratios": ratios,
        "failures": failures,
    }
    write_results(ctx, result, _markdown(ctx, settings, variants, rows, ratios))
    return 1 if failures else 0


def _cap(rows: list[dict[str, Any]], **match: Any) -> float | None:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()) and "capacity_per_s" in row:
            return float(row["capacity_per_s"])
    return None


def _ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """SDPaxos's capacity over the other's, write-only, next to the paper's ratio."""
    out = []
    for want in paper.PAPER_RATIOS:
        n, payload, over, conflict = (
            want["replicas"],
            want["payload_bytes"],
            want["over"],
            want["conflict_pct"],
        )
        sd = _cap(rows, protocol="sdpaxos", replicas=n, payload_bytes=payload, read_pct=0.0)
        other = _cap(
            rows,
            protocol=over,
            replicas=n,
            payload_bytes=payload,
            read_pct=0.0,
            conflict_pct=float(conflict),
        )
        ratio = sd / other if sd and other else None
        out.append({**want, "measured": None if ratio is None else round(ratio, 2)})
    return out


def _markdown(
    ctx: Context,
    settings: Settings,
    variants: list[tuple[str, str, float]],
    rows: list[dict[str, Any]],
    ratios: list[dict[str, Any]],
) -> str:
    lines = [
        "# throughput: CPU per command and one-core-per-replica capacity (the paper's Fig. 11)",
        "",
        f"Engine `{ctx.engine_name}`, seed {ctx.seed}{', quick' if ctx.quick else ''}."
        f" LAN ({LAN_RTT_MS} ms round trip), {settings.clients_per_region} closed-loop clients"
        f" per replica, warm-up {settings.warmup_ms:g} ms excluded, {settings.duration_ms:g} ms"
        " measured (virtual time). CPU: `time.thread_time` around every call into a replica"
        " and its messages' encoding/decoding. No batching across clients (see bench/README.md).",
        "",
        "Capacity = 1000 / (busiest replica's CPU s per 1,000 operations): ops/s with one core"
        " per replica. Cells: capacity ops/s (busiest replica's CPU ms per 1,000 ops).",
        "",
    ]
    columns = [c for c, _, _ in variants]
    for n in settings.replicas:
        for payload in settings.payloads_bytes:
            lines += [f"## {n} replicas, {payload} B", ""]
            table = []
            for read_pct in settings.read_pcts:
                cells: list[Any] = [f"{read_pct:g}%"]
                for column in columns:
                    row = next(
                        r
                        for r in rows
                        if r["replicas"] == n
                        and r["payload_bytes"] == payload
                        and r["read_pct"] == read_pct
                        and r["column"] == column
                    )
                    if "capacity_per_s" in row:
                        busiest = row["cpu_s_per_1000"][row["busiest"]] * 1000
                        cells.append(f"{row['capacity_per_s']:,.0f} ({busiest:.0f} ms)")
                    else:
                        cells.append(row["status"].split(" (")[0])
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
                    "CPU ms per 1,000 operations, per replica:",
                    "",
                    md_table(
                        ["reads", "protocol", *[f"r{i}" for i in range(n)]],
                        [
                            [
                                f"{r['read_pct']:g}%",
                                r["column"],
                                *[v * 1000 for v in r["cpu_s_per_1000"]],
                            ]
                            for r in per
                        ],
                    ),
                    "",
                ]
    lines += ["## SDPaxos over the others (write-only capacity), and the paper's ratio", ""]
    lines += [
        md_table(
            ["over", "replicas", "payload", "conflict", "measured", "paper"],
            [
                [
                    TITLES[r["over"]],
                    r["replicas"],
                    f"{r['payload_bytes']} B",
                    f"{r['conflict_pct']}%",
                    "not measured" if r["measured"] is None else f"{r['measured']:.2f}x",
                    f"{r['ratio']}x",
                ]
                for r in ratios
            ],
        ),
        "",
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
    variants: list[tuple[str, str, float]],
    rows: list[dict[str, Any]],
) -> None:
    if not any("capacity_per_s" in r for r in rows):
        return
    combos = [(n, p) for n in settings.replicas for p in settings.payloads_bytes]

    def draw(plt: Any) -> None:
        fig, axes = plt.subplots(1, len(combos), figsize=(4 * len(combos), 3.6), squeeze=False)
        for ax, (n, payload) in zip(axes[0], combos, strict=True):
            for column, _, _ in variants:
                pts = [
                    (r["read_pct"], r["capacity_per_s"])
                    for r in rows
                    if r["replicas"] == n
                    and r["payload_bytes"] == payload
                    and r["column"] == column
                    and "capacity_per_s" in r
                ]
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=column)
            ax.set_title(f"{n} replicas, {payload} B")
            ax.set_xlabel("reads (%)")
            ax.set_ylabel("ops/s, one core per replica")
            ax.set_ylim(bottom=0)
            ax.legend(fontsize=7)
        fig.suptitle("capacity from CPU time per operation (simulator, no batching)")

    save_plot(ctx, "throughput.png", draw)
