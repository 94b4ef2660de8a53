"""``failover``: throughput over time per replica when the sequencer / leader dies (Fig. 14).

Setup (the paper's section 5.5): ``paper3`` (CA, OR, OH), the SDPaxos
sequencer or Multi-Paxos leader in CA, heartbeat and lease 500 ms (the
paper's), closed-loop clients at OR and OH only. CA is killed at ``kill_ms``
and never comes back. Per surviving region: completed operations in 100 ms
bins (the paper's resolution) and the stall, the number of empty bins from the
kill on times 100 ms (how the paper reads its figure). Only protocols with a
single leader take part (SDPaxos and Multi-Paxos); ``sdpaxos.sim.failover``
has the exact-stall and sweep-over-phases version for SDPaxos.

With ``--engine runtime`` the same spec runs on three node processes behind the
delay emulator; CA's process is SIGKILLed, and the new leader is read from the
survivors' status, sampled every 100 ms.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bench import paper
from bench.common import Context, md_table, save_plot, write_history_file, write_results
from bench.engines import Clients, RunOutput, RunSpec, close_engine
from bench.workloads import Workload
from sdpaxos.profiles import PAPER3
from sdpaxos.protocols import protocol

TITLES = {"sdpaxos": "SDPaxos", "multipaxos": "Multi-Paxos"}
BIN_MS = 100
HEARTBEAT_MS = 500.0
LEASE_MS = 500.0


@dataclass(frozen=True, slots=True)
class Settings:
    clients_per_region: int
    kill_ms: float
    after_ms: float


QUICK = Settings(10, 1_300.0, 1_700.0)
FULL = Settings(20, 2_300.0, 2_700.0)


def bins_per_region(out: RunOutput, end_us: int) -> dict[str, list[int]]:
    """Completed operations per :data:`BIN_MS` bin per region (complete bins only)."""
    count = end_us // (BIN_MS * 1000)
    bins = {r: [0] * count for r in out.spec.profile.regions}
    for rec in out.records:
        if rec.complete_us is not None and rec.complete_us // (BIN_MS * 1000) < count:
            bins[rec.region][rec.complete_us // (BIN_MS * 1000)] += 1
    return bins


def run(ctx: Context) -> int:
    engine = ctx.engine()
    try:
        return _run(ctx, engine)
    finally:
        close_engine(engine)


def _run(ctx: Context, engine: Any) -> int:
    settings = QUICK if ctx.quick else FULL
    profile = PAPER3
    leader = profile.index("CA")
    runs: dict[str, dict[str, Any]] = {}
    outputs: list[RunOutput] = []
    failures: list[str] = []
    for proto in ctx.protocols:
        if not protocol(proto).capabilities.leader_lease:
            continue  # no leader to kill
        why = ctx.status(proto)
        if why:
            runs[proto] = {"status": why}
            continue
        per_region = tuple(
            0 if r == leader else settings.clients_per_region for r in range(profile.size)
        )
        spec = RunSpec(
            protocol=proto,
            profile=profile,
            workload=Workload(seed=ctx.seed),
            clients=Clients("closed", per_region),
            duration_ms=settings.kill_ms + settings.after_ms,
            leader=leader,
            kill=(leader, settings.kill_ms),
            config_overrides={"heartbeat_ms": HEARTBEAT_MS, "lease_ms": LEASE_MS},
            sample_ms=float(BIN_MS),
            seed=ctx.seed,
        )
        out = ctx.run(engine, spec, f"{proto}: CA killed at {settings.kill_ms:g} ms")
        outputs.append(out)
        if not out.ok:
            failures.append(f"{proto}: {out.verdict}")
        end_us = spec.window_us[1]
        bins = bins_per_region(out, end_us)
        first = round(settings.kill_ms * 1000) // (BIN_MS * 1000)
        stalls = {}
        for region, counts in bins.items():
            if profile.index(region) == leader:
                continue
            stalls[region] = sum(1 for c in counts[first:] if c == 0) * BIN_MS
        new_leader = next(
            (
                lead
                for t, lead in out.leader_samples
                if t > settings.kill_ms * 1000 and lead not in (None, leader)
            ),
            None,
        )
        before = [lead for t, lead in out.leader_samples if t <= settings.kill_ms * 1000]
        runs[proto] = {
            "status": "ok" if out.ok else out.verdict,
            # Who led just before the kill (a busy machine can move the lead early).
            "leader_before_kill": (
                profile.regions[before[-1]] if before and before[-1] is not None else None
            ),
            "stall_ms": stalls,
            "new_leader": None if new_leader is None else profile.regions[new_leader],
            "bins": {r: b for r, b in bins.items() if profile.index(r) != leader},
        }
        if out.extra:  # the runtime: when the others first agreed on a new leader, the machine
            cpu = out.extra.get("cpu") or {}
            moved = next(
                (
                    t
                    for t, lead in out.leader_samples
                    if t > settings.kill_ms * 1000 and lead not in (None, leader)
                ),
                None,
            )
            runs[proto]["new_leader_after_ms"] = (
                None if moved is None else round(moved / 1000 - settings.kill_ms)
            )
            runs[proto]["machine_busy"] = cpu.get("machine_busy")
            runs[proto]["load_average"] = cpu.get("load_average")
            runs[proto]["verify"] = (out.extra.get("verify") or {}).get("verdict")
    if outputs:
        ctx.progress(f"wrote {write_history_file(ctx, outputs)}")
    _plot(ctx, settings, runs)
    result = {
        "settings": dataclasses.asdict(settings),
        "heartbeat_ms": HEARTBEAT_MS,
        "lease_ms": LEASE_MS,
        "bin_ms": BIN_MS,
        "runs": runs,
        "failures": failures,
    }
    write_results(ctx, result, _markdown(ctx, settings, runs))
    return 1 if failures else 0


def _markdown(ctx: Context, settings: Settings, runs: dict[str, dict[str, Any]]) -> str:
    runtime = ctx.engine_name == "runtime"
    how = (
        " The runtime: three node processes behind the delay emulator, CA's SIGKILLed;"
        " operations counted when their answer reached the client; time is wall clock from"
        " the run's start. The new leader is the first 100 ms sample in which both"
        " survivors' status named the same new sequencer / leader."
        if runtime
        else ""
    )
    lines = [
        "# failover: the sequencer / leader killed (the paper's Fig. 14)",
        "",
        f"Engine `{ctx.engine_name}`, seed {ctx.seed}{', quick' if ctx.quick else ''}. paper3,"
        f" leader in CA killed at {settings.kill_ms:g} ms,"
        f" {settings.clients_per_region} closed-loop"
        f" clients at OR and at OH, heartbeat {HEARTBEAT_MS:g} ms, lease {LEASE_MS:g} ms. Stall:"
        f" empty {BIN_MS} ms bins after the kill, times {BIN_MS} ms." + how,
        "",
    ]
    table = []
    for proto, r in runs.items():
        if "stall_ms" not in r:
            table.append([TITLES.get(proto, proto), r["status"].split(" (")[0], "", ""])
            continue
        leader = r["new_leader"] or "none seen"
        if r.get("new_leader_after_ms") is not None:
            leader += f" ({r['new_leader_after_ms']} ms after the kill)"
        if r.get("leader_before_kill") not in (None, "CA"):
            leader += f"; the lead was in {r['leader_before_kill']} before the kill"
        table.append(
            [TITLES.get(proto, proto), leader, r["stall_ms"].get("OR"), r["stall_ms"].get("OH")]
        )
    lines += [md_table(["protocol", "new leader", "OR stall ms", "OH stall ms"], table), ""]
    for proto, r in runs.items():
        if r.get("load_average") is not None:
            lines.append(
                f"- {TITLES.get(proto, proto)}: machine load average"
                f" {r['load_average'][0]:.2f}, all cores {100 * r['machine_busy']:.0f} % busy"
                f" in the window; {r.get('verify') or ''}; {r['status']}"
            )
    if runtime:
        lines.append("")
    lines += [
        f"The paper (SDPaxos): OR about {paper.FIG14_STALL_MS['OR']} ms, OH about"
        f" {paper.FIG14_STALL_MS['OH']} ms.",
        "",
    ]
    for plot in ctx.plots:
        lines += [f"![{plot}]({plot})", ""]
    return "\n".join(lines)


def _plot(ctx: Context, settings: Settings, runs: dict[str, dict[str, Any]]) -> None:
    runtime = ctx.engine_name == "runtime"
    drawn = {p: r for p, r in runs.items() if "bins" in r}
    if not drawn:
        return

    def draw(plt: Any) -> None:
        _fig, axes = plt.subplots(1, len(drawn), figsize=(7 * len(drawn), 3.6), squeeze=False)
        for ax, (proto, r) in zip(axes[0], drawn.items(), strict=True):
            for region, counts in r["bins"].items():
                xs = [(b + 0.5) * BIN_MS / 1000 for b in range(len(counts))]
                ax.step(xs, [c * 1000 / BIN_MS for c in counts], where="mid", label=region)
            ax.axvline(settings.kill_ms / 1000, color="red", linestyle="--", label="CA killed")
            ax.set_xlabel(f"time (s, {'wall clock' if runtime else 'virtual'})")
            ax.set_ylabel(f"ops/s ({BIN_MS} ms bins)")
            ax.set_title(
                f"{TITLES.get(proto, proto)}: leader in CA killed"
                + (" (real processes)" if runtime else "")
            )
            ax.legend(fontsize=8)

    save_plot(ctx, "failover.png", draw)
