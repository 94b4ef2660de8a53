"""The ``runtime`` engine's runner: one spec's run on a local cluster, collected and verified.

:mod:`bench.runtime_engine` says what a run does (nodes, load, faults, what is
measured); this module does it: :class:`RuntimeRunner` keeps the last cluster
(:mod:`bench.runtime_cluster`) for a spec that fits it, starts each region's
load, times the window and the faults, then collects the loaders' records
into a :class:`~bench.engines.RunOutput` with the window's CPU figures and the
verification that every live node executed the same commands
(:func:`agree`). :func:`believed_leaders` turns the status samples into who a
majority followed. It is apart from the engine's facade so that the facade
stays a thin :class:`~bench.engines.Engine` and the cluster's pieces can be
read (and tested) without a run's machinery.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from bench.cluster import WrongLeader
from bench.engines import RunOutput, RunSpec
from bench.raw_load import KIND_READ, PATH_LOCAL, PATH_LOG
from bench.runtime_cluster import LIVE, ClusterKey, LocalCluster, check, read_path
from bench.runtime_procs import (
    ChildLines,
    DutyCycle,
    cpu_seconds_or_nan,
    load_average,
    machine_cpu,
)
from bench.workloads import OpRecord

Progress = Callable[[str], None]

#: Starts of a cluster whose leader did not end up where the spec put it.
START_ATTEMPTS = 5
#: Loaders may take this long to connect.
LOADER_READY_TIMEOUT_S = 60.0
#: The origin is set this far after every loader is ready, so that all start together.
START_LEAD_S = 0.3
#: After the window, closed-loop clients' last operations are waited for this long.
CLOSED_DRAIN_S = 5.0
#: Open-loop drains wait at most this long, whatever the spec's ``drain_ms``.
OPEN_DRAIN_MAX_S = 10.0
#: After the drain, nodes may take this long to agree (execution trails READY).
VERIFY_TIMEOUT_S = 15.0
#: A spec's script (:class:`bench.engines.Script`) may run this long after the load ended.
SCRIPT_JOIN_TIMEOUT_S = 60.0
#: Protocols that order every command (the order chain must be equal); the
#: others (EPaxos) order conflicting commands only (the hot chain must be).
TOTAL_ORDER = frozenset({"sdpaxos", "multipaxos", "mencius"})

_PATHS = {0: "commit", PATH_LOCAL: "local", PATH_LOG: "log"}


@dataclass(slots=True)
class _LoaderProc:
    """One region's load generator in one run."""

    region: int
    lines: ChildLines
    out: Path
    spec_path: Path
    result: dict[str, Any] | None = None


@dataclass(slots=True)
class _Window:
    """CPU and counters at the window's start and end (taken by a timer thread)."""

    times: list[float] = field(default_factory=list)
    nodes: list[list[float]] = field(default_factory=list)
    loaders: list[list[float]] = field(default_factory=list)
    machine: list[tuple[float, float]] = field(default_factory=list)
    histograms: list[dict[int, tuple[float, float]]] = field(default_factory=list)


class RuntimeRunner:
    """Runs specs on local clusters, keeping the last one for a spec that fits it."""

    def __init__(self, fsync: bool = False, metrics: bool = False) -> None:
        self.fsync = fsync
        self.metrics = metrics
        self.cluster: LocalCluster | None = None
        self.clusters_started = 0

    def close(self) -> None:
        if self.cluster is not None:
            cluster, self.cluster = self.cluster, None
            cluster.close()
            LIVE.discard(cluster)

    def _cluster_for(self, spec: RunSpec, progress: Progress | None) -> LocalCluster:
        key = ClusterKey.of(spec, self.fsync, self.metrics)
        if self.cluster is not None and (self.cluster.key != key or self.cluster.dirty):
            self.close()
        if self.cluster is not None:
            try:
                self.cluster.wait_up(key.leader)  # still up, the same node leading
                return self.cluster
            except WrongLeader as exc:  # the lead moved in an earlier run: start afresh
                if progress is not None:
                    progress(f"runtime: node {exc.leader} leads now; a fresh cluster")
                self.close()
        started = time.perf_counter()
        cluster = LocalCluster(key)
        LIVE.add(cluster)
        self.cluster = cluster
        cluster.start_up(key.leader, attempts=START_ATTEMPTS, progress=progress)
        self.clusters_started += 1
        if progress is not None:
            where = "emulated " + spec.profile.name if cluster.emulated else "LAN, no emulator"
            progress(
                f"runtime: {spec.protocol} cluster of {cluster.n} nodes up"
                f" ({where}, fsync {'on' if self.fsync else 'off'})"
                f" in {time.perf_counter() - started:.1f} s"
            )
        return cluster

    def run(self, spec: RunSpec, progress: Progress | None = None) -> RunOutput:
        check(spec)
        started = time.perf_counter()
        cluster = self._cluster_for(spec, progress)
        try:
            out = self._run_on(cluster, spec, progress)
        except BaseException:
            self.close()
            raise
        if cluster.dirty:
            self.close()
        out.wall_s = time.perf_counter() - started
        return out

    # ------------------------------------------------------------ the run itself

    def _run_on(self, cluster: LocalCluster, spec: RunSpec, progress: Progress | None) -> RunOutput:
        n = cluster.n
        cluster.runs += 1
        end_us = spec.window_us[1]
        open_loop = spec.clients.mode == "open"
        drain_s = min(OPEN_DRAIN_MAX_S, spec.drain_ms / 1000) if open_loop else CLOSED_DRAIN_S
        loaders: list[_LoaderProc] = []
        index = 0
        sample_alive = spec.sample_ms is not None
        for r in range(n):
            count = spec.clients.per_region[r]
            clients = list(range(index, index + count))
            index += count
            if not count and not (sample_alive and r in cluster.alive()):
                continue
            spec_path = cluster.root / f"run{cluster.runs}-load{r}.json"
            out_path = cluster.root / f"run{cluster.runs}-load{r}.msgpack"
            loader_spec = {
                "region_index": r,
                "clients": clients,
                "mode": spec.clients.mode,
                "rate_per_s": spec.clients.rate_per_s,
                "poisson": spec.clients.poisson,
                "workload": spec.workload.to_json(),
                "read_path": read_path(spec.protocol, r, spec.leader),
                "end_us": end_us,
                "drain_s": drain_s,
                "sample_ms": spec.sample_ms,
                "out": str(out_path),
            }
            spec_path.write_text(json.dumps(loader_spec))
            loaders.append(_LoaderProc(r, cluster.loader(r), out_path, spec_path))
        duty: DutyCycle | None = None
        script: threading.Thread | None = None
        if spec.script is not None:
            cluster.dirty = True  # the script changes the cluster: not reused after
            spec.script.prepare(cluster)
        timers: list[threading.Timer] = []
        window = _Window()
        finished = False
        try:
            deadline = time.monotonic() + LOADER_READY_TIMEOUT_S
            for ld in loaders:
                ld.lines.reset()
                ld.lines.tell(f"run {ld.spec_path}")
            for ld in loaders:
                if not ld.lines.ready.wait(max(0.0, deadline - time.monotonic())):
                    raise RuntimeError(
                        f"the load generator of {spec.profile.regions[ld.region]} did not"
                        f" connect:\n{cluster.loader_log(ld.region)}"
                    )
            t0 = time.monotonic() + START_LEAD_S
            for ld in loaders:
                ld.lines.tell(f"go {t0!r}")

            def snapshot() -> None:
                window.times.append(time.monotonic())
                window.nodes.append(
                    [cpu_seconds_or_nan(p) if p is not None else math.nan for p in cluster.pids]
                )
                window.loaders.append([cpu_seconds_or_nan(ld.lines.proc.pid) for ld in loaders])
                window.machine.append(machine_cpu())
                if cluster.metrics_ports:
                    window.histograms.append(cluster.commit_histograms())

            def at(offset_s: float, action: Callable[[], None]) -> None:
                timer = threading.Timer(max(0.0, t0 + offset_s - time.monotonic()), action)
                timer.daemon = True
                timers.append(timer)
                timer.start()

            start_us, _ = spec.window_us
            at(start_us / 1e6, snapshot)
            at(end_us / 1e6, snapshot)
            if spec.kill is not None:
                victim, kill_ms = spec.kill
                at(kill_ms / 1000, lambda: cluster.kill(victim))
            if spec.slow is not None:
                slow_pid = cluster.pids[spec.slow[0]]
                assert slow_pid is not None
                duty = DutyCycle(slow_pid, spec.slow[1])
                cluster.dirty = True
                at(spec.slow[2] / 1000, duty.start)
            if spec.script is not None:
                act = spec.script.run
                script = threading.Thread(
                    target=lambda: act(cluster, t0), name="run-script", daemon=True
                )
                script.start()
            self._wait_loaders(spec, loaders, t0, end_us, drain_s, progress)
            if script is not None:
                script.join(SCRIPT_JOIN_TIMEOUT_S)
                if script.is_alive():
                    raise RuntimeError(
                        f"the run's script did not end within {SCRIPT_JOIN_TIMEOUT_S:g} s"
                        " of the load's end"
                    )
            finished = True
        finally:
            for timer in timers:
                timer.cancel()
            if duty is not None:
                duty.stop()
            if not finished:  # a loader in the middle of a run is no use for the next
                cluster.stop_loaders()
        return self._collect(cluster, spec, loaders, window, duty)

    def _wait_loaders(
        self,
        spec: RunSpec,
        loaders: list[_LoaderProc],
        t0: float,
        end_us: int,
        drain_s: float,
        progress: Progress | None,
    ) -> None:
        hard_deadline = t0 + end_us / 1e6 + drain_s + 30.0
        next_report = time.monotonic() + 2.0
        while not all(ld.lines.done_event.is_set() for ld in loaders):
            time.sleep(0.05)
            now = time.monotonic()
            if now > hard_deadline:
                for ld in loaders:
                    ld.lines.tell("stop")
                if now > hard_deadline + 10:
                    raise RuntimeError("load generators did not finish")
            if progress is not None and now >= next_report:
                next_report = now + 2.0
                done = sum(ld.lines.count for ld in loaders)
                progress(
                    f"{spec.protocol}: {max(0.0, now - t0):.1f}/{end_us / 1e6:.1f} s,"
                    f" {done:,} ops completed"
                )
        for ld in loaders:
            ld.result = ld.lines.done

    def _collect(
        self,
        cluster: LocalCluster,
        spec: RunSpec,
        loaders: list[_LoaderProc],
        window: _Window,
        duty: DutyCycle | None,
    ) -> RunOutput:
        regions = spec.profile.regions
        records: list[OpRecord] = []
        samples: dict[str, list[list[Any]]] = {}
        events: list[tuple[int, str, str]] = []
        problems: list[str] = []
        answered_commands = 0
        for ld in loaders:
            region = regions[ld.region]
            if ld.result is None or not ld.out.exists():
                problems.append(f"the load generator of {region} ended without its records")
                continue
            data = msgpack.unpackb(ld.out.read_bytes(), raw=False)
            for uid, kind, path, key, invoke_us, complete_us in data["records"]:
                op_id = len(records)
                rec = OpRecord(
                    op_id=op_id,
                    client=uid,
                    region=region,
                    kind="read" if kind == KIND_READ else "write",
                    key=bytes(key),
                    invoke_us=invoke_us,
                    complete_us=None if complete_us < 0 else complete_us,
                    path=_PATHS[path],
                    value=f"v{ld.region}-{op_id}",
                )
                records.append(rec)
                if rec.complete_us is not None and rec.path != "local":
                    answered_commands += 1
            samples[region] = data["samples"]
            events += [(t, name, region) for t, name in data.get("events", [])]
            failures = ld.result.get("failures", [])
            if ld.region in cluster.dead:  # its node was killed on purpose: expected
                failures = [f for f in failures if not f.startswith("connection lost")]
            problems += [f"{region}: {f}" for f in failures]
        cluster.commands_answered += answered_commands
        out = RunOutput(spec, records)
        extra: dict[str, Any] = {
            "engine": "runtime",
            "node_pids": [p for p in cluster.pids if p is not None],
            "loader_pids": [ld.lines.proc.pid for ld in loaders],
            "fsync": self.fsync,
            "emulated": cluster.emulated,
            "cluster_runs": cluster.runs,
            "loaders": {regions[ld.region]: ld.result for ld in loaders},
            "status_samples": samples,
            "events": sorted(events),
        }
        extra.update(self._window_figures(cluster, spec, loaders, window, records))
        if duty is not None:
            extra["slow"] = {
                "replica": spec.slow[0] if spec.slow else None,
                "factor": duty.factor,
                "period_ms": duty.period_s * 1000,
                "stops": duty.stops,
            }
        if spec.kill is not None:
            extra["killed"] = sorted(cluster.dead)
        if spec.sample_ms is not None:
            out.leader_samples = believed_leaders(samples, regions, spec.sample_ms)
        for k in cluster.exited():
            p = cluster.procs[k]
            if p is not None:
                cluster.dirty = True
                problems.append(
                    f"node {k} exited with {p.returncode} during the run:\n{cluster.log_tail(k)}"
                )
        cpu = extra.get("cpu")
        if cpu and not cpu["completed_in_window"] and sum(spec.clients.per_region):
            problems.append("no operation completed in the measured window")
        verify = self._verify(cluster, spec)
        extra["verify"] = verify
        if not verify["ok"]:
            problems.append(verify["verdict"])
        elif spec.script is not None:  # the nodes the script started, against the verified
            checked = spec.script.check(cluster)
            extra["script_check"] = checked
            if not checked["ok"]:
                problems.append(checked["verdict"])
        out.extra = extra
        if problems:
            out.ok = False
            out.verdict = "; ".join(problems[:5])
        return out

    def _window_figures(
        self,
        cluster: LocalCluster,
        spec: RunSpec,
        loaders: list[_LoaderProc],
        window: _Window,
        records: list[OpRecord],
    ) -> dict[str, Any]:
        if len(window.times) < 2:
            return {"cpu": None}
        regions = spec.profile.regions
        seconds = window.times[1] - window.times[0]
        start_us, end_us = spec.window_us
        completed = sum(
            1 for r in records if r.complete_us is not None and start_us <= r.complete_us < end_us
        )
        node_cpu = [b - a for a, b in zip(window.nodes[0], window.nodes[1], strict=True)]
        loader_cpu = {
            regions[ld.region]: b - a
            for ld, a, b in zip(loaders, window.loaders[0], window.loaders[1], strict=True)
        }
        (b0, t0), (b1, t1) = window.machine
        per1000 = max(completed, 1) / 1000
        figures: dict[str, Any] = {
            "cpu": {
                "window_s": seconds,
                "completed_in_window": completed,
                "ops_per_s": completed / seconds if seconds > 0 else 0.0,
                "node_cpu_s": node_cpu,
                "node_cpu_s_per_1000": [c / per1000 for c in node_cpu],
                "loader_cpu_s": loader_cpu,
                "loader_cpu_s_per_1000": sum(loader_cpu.values()) / per1000,
                "machine_busy": (b1 - b0) / max(1.0, t1 - t0),
                "load_average": load_average(),
                "cores": os.cpu_count(),
            }
        }
        if len(window.histograms) == 2:
            means: dict[str, float | None] = {}
            for k in range(cluster.n):
                a = window.histograms[0].get(k)
                b = window.histograms[1].get(k)
                if a is None or b is None or b[1] <= a[1]:
                    means[regions[k]] = None
                else:
                    means[regions[k]] = (b[0] - a[0]) / (b[1] - a[1]) * 1000
            figures["node_commit_ms"] = means
        return figures

    def _verify(self, cluster: LocalCluster, spec: RunSpec) -> dict[str, Any]:
        """Every live node executed the same commands (and orders, as promised)."""
        alive = cluster.alive()
        total = spec.protocol in TOTAL_ORDER
        deadline = time.monotonic() + VERIFY_TIMEOUT_S
        while True:
            got = asyncio.run(cluster.digests(alive))
            answers = [v for v in got.values() if v is not None]
            ok = answers and len(answers) == len(alive)
            if ok and agree(answers, spec.protocol, cluster.commands_answered):
                return {
                    "ok": True,
                    "verdict": f"{len(alive)} nodes executed the same"
                    f" {answers[0][0]:,} commands"
                    + (" in one order" if total else ", the hot key's in one order"),
                    "executed": answers[0][0],
                    "nodes": alive,
                    # Who each node follows at the end (a fault may have moved it).
                    "leaders": asyncio.run(_leaders_of(cluster, alive)),
                }
            if time.monotonic() > deadline:
                counts = {k: (v[0] if v else None) for k, v in got.items()}
                return {
                    "ok": False,
                    "verdict": f"nodes disagree or miss commands after {VERIFY_TIMEOUT_S:g} s:"
                    f" executed {counts}, at least {cluster.commands_answered} answered",
                    "executed": counts,
                    "nodes": alive,
                }
            time.sleep(0.2)


def agree(answers: list[tuple[int, int, bytes, bytes]], protocol: str, answered: int) -> bool:
    """Do these nodes' ``BenchLog`` answers show the same commands, at least the
    ``answered`` ones, in the order ``protocol`` promises: every command's (total
    order), or the hot key's (EPaxos orders only conflicting commands)?"""
    if protocol in TOTAL_ORDER:
        same = len({(count, total, chain) for count, total, chain, _ in answers}) == 1
    else:
        same = len({(count, total, hot) for count, total, _, hot in answers}) == 1
    return same and answers[0][0] >= answered


async def _leaders_of(cluster: LocalCluster, alive: list[int]) -> dict[int, Any]:
    out: dict[int, Any] = {}
    for k in alive:
        st = await cluster.status(k, 2.0)
        out[k] = None if st is None else st.get("sequencer")
    return out


def believed_leaders(
    samples: dict[str, list[list[Any]]], regions: tuple[str, ...], sample_ms: float
) -> list[tuple[int, int | None]]:
    """Per ``sample_ms`` bin, the leader a majority of the cluster's nodes believed
    in (their latest sample in the bin), else None (no majority, or in a view change)."""
    bin_us = round(sample_ms * 1000)
    by_bin: dict[int, dict[str, Any]] = {}
    for region, rows in samples.items():
        for row in rows:
            by_bin.setdefault(row[0] // bin_us, {})[region] = row[1]
    out: list[tuple[int, int | None]] = []
    majority = len(regions) // 2 + 1
    for b in sorted(by_bin):
        votes = Counter(v for v in by_bin[b].values() if v is not None)
        top = votes.most_common(1)
        leader = top[0][0] if top and top[0][1] >= majority else None
        out.append((b * bin_us, leader))
    return out
