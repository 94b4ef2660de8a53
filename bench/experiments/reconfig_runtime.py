"""``reconfig --engine runtime``: the three membership changes on real node processes.

The runtime engine's harness as every ``--engine runtime`` experiment uses it
(:class:`bench.runtime_engine.RuntimeEngine`: TLS node processes on loopback,
the delay emulator, one load-generator process per region with clients), with
the changes made by a :class:`~bench.engines.Script` of this module
(:class:`Operator`) while the load runs:

* **Cluster.** Three nodes, one per region of a uniform profile with
  :data:`RTT_MS` round trips (the simulator half's), the sequencer at node 0.
  Two spare nodes, 3 and 4, are started before the load (their certificates
  issued by the cluster's CA, an empty directory, no ``--bootstrap``: they wait
  to be added, as ``tests/runtime/test_membership_processes.py`` starts them),
  both in the sequencer's region R0: a second replica there, then the
  sequencer's machine replaced by another in its region, then the second
  replica removed. Their links are delayed as their region's are, both ways
  (each node's emulator learns an added node's region from the membership).
* **Load.** Open-loop writes at a fixed interval at regions R1 and R2 only
  (:attr:`Settings.clients_per_region` clients each sending
  :attr:`Settings.rate_per_client_s` a second), each load generator at its
  region's node, which stays a member throughout. None at R0: its node is the
  sequencer's, replaced in the run, and a load generator is bound to its node
  (the paper's Fig. 14 has no clients in the leader's region either). Open
  loop, not the simulator's closed loop: at a fixed rate the load is the same
  before and after each change, and a stall shows as a gap in the completions
  either way (and before added nodes' links were emulated, closed-loop clients
  whose quorum became local took the machine's two cores). Latency is the client's
  (:func:`bench.runtime_engine.describe_latency`).
* **Changes.** At :attr:`Settings.first_ms` and every :attr:`Settings.gap_ms`
  after (or :data:`MIN_GAP_MS` after the previous one was done, if later),
  through node 1's admin channel (what ``python -m sdpaxos admin`` sends):
  ``add_replica 3`` (a learner caught up, then promoted: 3 -> 4),
  ``replace_replica 0 -> 4`` (the sequencer's node), ``remove_replica 3``
  (4 -> 3). A change is *proposed* when the request is sent (for an add or a
  replace this includes the learner's catch-up, so the stall window starts
  earlier than the simulator's, never later), and *done* when every member the
  answer names reports the answer's epoch in its status (polled every
  :data:`POLL_S`). Node 0, replaced, is stopped after the last change, so that
  the engine's verification (every live node of the file executed the same
  commands) covers nodes 1 and 2; :meth:`Operator.check` then compares node 4's
  digest with node 1's.

What differs from the simulator: the added nodes sit in R0 (the simulator's
are a round trip from everyone), the load is open loop, and times are wall
clock on a shared machine; one run is one sample.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.common import Context
from bench.engines import Clients, RunOutput, RunSpec, close_engine
from bench.experiments.reconfig_timeline import CHANGE_NAMES, ChangeTimes, Timeline
from bench.reconfig import AFTER_MS
from bench.runtime_cluster import APP, LocalCluster
from bench.runtime_engine import RuntimeEngine, describe_latency
from bench.runtime_procs import spawn
from bench.workloads import Workload
from sdpaxos.profiles import uniform

#: Round trip between the regions, ms (the simulator half's).
RTT_MS = 60.0
PROFILE = uniform(3, RTT_MS, name=f"uniform3x{RTT_MS:g}")
#: The sequencer's node (replaced in the run).
SEQUENCER = 0
#: The spare added, then removed; the node that replaces the sequencer's.
SPARE = 3
REPLACEMENT = 4
#: The member the operator's requests go to (a member throughout).
OPERATOR_NODE = 1
#: Regions with clients: those whose node stays a member.
CLIENT_REGIONS = (1, 2)
#: How often a change's members are asked for their epoch.
POLL_S = 0.02
#: How long one change may take (request to every member in its epoch).
CHANGE_TIMEOUT_S = 30.0
#: After the load's window, answers still due are waited for this long.
DRAIN_MS = 5_000.0
#: How long the new sequencer may take to show the verified nodes' digest.
CHECK_TIMEOUT_S = 15.0
#: How long a spare node may take to answer its first status.
SPARE_START_TIMEOUT_S = 60.0


#: A change is proposed no sooner than this after the previous one was done:
#: its stall window (1 s after the epoch) and the next one's baseline (1 s
#: before the proposal) must not overlap.
MIN_GAP_MS = 2 * AFTER_MS


@dataclass(frozen=True, slots=True)
class Settings:
    """Clients per region with clients and the rate of each (commands a
    second, at a fixed interval); the first change's time and the
    changes' spacing (a change waits for the previous one, see
    :data:`MIN_GAP_MS`); the load's length, which holds the three changes with
    room for slow ones (a change a learner's catch-up makes take seconds)."""

    clients_per_region: int
    rate_per_client_s: float
    first_ms: float
    gap_ms: float
    duration_ms: float


QUICK = Settings(8, 15.0, 3_000.0, 3_000.0, 18_000.0)
FULL = Settings(16, 15.0, 4_000.0, 5_000.0, 26_000.0)


@dataclass(frozen=True, slots=True)
class Step:
    """One change of the timeline: when, which admin operation, its argument."""

    name: str
    at_ms: float
    operation: str
    argument: Any


def plan(settings: Settings, addresses: dict[int, str]) -> list[Step]:
    """The three changes, at the earliest :attr:`Settings.gap_ms` apart from
    :attr:`Settings.first_ms` (the operator also waits for the previous one)."""
    at = [settings.first_ms + k * settings.gap_ms for k in range(len(CHANGE_NAMES))]
    add, replace, remove = CHANGE_NAMES
    return [
        Step(add, at[0], "add_replica", [SPARE, addresses[SPARE], PROFILE.regions[SEQUENCER]]),
        Step(
            replace,
            at[1],
            "replace_replica",
            [SEQUENCER, REPLACEMENT, addresses[REPLACEMENT], PROFILE.regions[SEQUENCER]],
        ),
        Step(remove, at[2], "remove_replica", SPARE),
    ]


class Operator:
    """The run's :class:`~bench.engines.Script`: starts the spares, makes the
    changes on time, records when each was proposed, committed and done."""

    def __init__(self, settings: Settings, progress: Callable[[str], None]) -> None:
        self.settings = settings
        self.progress = progress
        self.addresses: dict[int, str] = {}
        self.changes: list[ChangeTimes] = []
        self.election_ms = 0.0
        self.answers: list[Any] = []

    # ------------------------------------------------------------ main thread

    def prepare(self, cluster: LocalCluster) -> None:
        from sdpaxos.runtime.certs import issue_node_cert
        from sdpaxos.runtime.local import free_ports

        cfg = cluster.configs[0].cluster
        self.election_ms = cfg.lease_ms + cfg.election_margin_ms
        taken = {r.port for r in cluster.configs[0].replicas}
        ports = [p for p in free_ports(2 + len(taken)) if p not in taken][:2]
        for node, port in zip((SPARE, REPLACEMENT), ports, strict=True):
            issue_node_cert(cluster.root / "certs", node, force=True)
            self.addresses[node] = f"127.0.0.1:{port}"
            cmd = [
                *(sys.executable, "-m", "sdpaxos", "node", "--config", str(cluster.path)),
                *("--id", str(node), "--app", APP, "--log-level", "WARNING"),
                *("--address", self.addresses[node], "--region", PROFILE.regions[SEQUENCER]),
            ]
            if not cluster.fsync:
                cmd.append("--no-fsync")
            with open(cluster.root / f"node{node}.log", "ab") as log:
                cluster.others.append(spawn(cmd, stderr=log))
        asyncio.run(self._wait_spares(cluster))
        self.progress(f"runtime: spare nodes {SPARE} and {REPLACEMENT} up, waiting to be added")

    async def _wait_spares(self, cluster: LocalCluster) -> None:
        deadline = time.monotonic() + SPARE_START_TIMEOUT_S
        for node in (SPARE, REPLACEMENT):
            while True:
                st = await _status(cluster, self.addresses[node])
                if st is not None and st.get("role") is not None:
                    break
                if time.monotonic() > deadline or any(p.poll() is not None for p in cluster.others):
                    tail = (cluster.root / f"node{node}.log").read_text(errors="replace")[-1500:]
                    raise RuntimeError(f"spare node {node} did not come up:\n{tail}")
                await asyncio.sleep(0.1)

    def check(self, cluster: LocalCluster) -> dict[str, Any]:
        """After the engine verified nodes 1 and 2: node 4, the new sequencer,
        executed the same commands in the same order (its ``BenchLog``
        digest equals node 1's), within :data:`CHECK_TIMEOUT_S`."""
        return asyncio.run(self._check(cluster))

    async def _check(self, cluster: LocalCluster) -> dict[str, Any]:
        from bench.runtime_app import parse_query

        if not any(c.name == CHANGE_NAMES[1] and c.done_ms is not None for c in self.changes):
            return {"ok": True, "verdict": f"node {REPLACEMENT} was not made a member: not checked"}
        address = self.addresses[REPLACEMENT]
        deadline = time.monotonic() + CHECK_TIMEOUT_S
        theirs: Any = None
        while True:
            (ours,) = (await cluster.digests([OPERATOR_NODE])).values()
            raw = await _stale_read(cluster, address)
            try:
                theirs = parse_query(raw) if raw is not None else None
            except ValueError:
                theirs = None
            if ours is not None and theirs is not None and ours[:3] == theirs[:3]:
                return {
                    "ok": True,
                    "verdict": f"node {REPLACEMENT} (the new sequencer) executed the same"
                    f" {theirs[0]:,} commands in the same order as node {OPERATOR_NODE}",
                }
            if time.monotonic() > deadline:
                return {
                    "ok": False,
                    "verdict": f"node {REPLACEMENT} disagrees with node {OPERATOR_NODE} after"
                    f" {CHECK_TIMEOUT_S:g} s: executed"
                    f" {None if theirs is None else theirs[0]} against"
                    f" {None if ours is None else ours[0]}",
                }
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------ script thread

    def run(self, cluster: LocalCluster, origin_s: float) -> None:
        try:
            asyncio.run(self._changes(cluster, origin_s))
        finally:
            # The replaced node is out of every epoch from here on: stopped, so
            # that the verification asks the file's members that remain.
            cluster.kill(SEQUENCER)

    async def _changes(self, cluster: LocalCluster, origin_s: float) -> None:
        def now_ms() -> float:
            return (time.monotonic() - origin_s) * 1000

        clients: dict[str, Any] = {}
        try:
            await self._steps(cluster, now_ms, clients)
        finally:
            for c in clients.values():
                await c.close()

    async def _steps(
        self, cluster: LocalCluster, now_ms: Callable[[], float], clients: dict[str, Any]
    ) -> None:
        previous_ms = -MIN_GAP_MS
        for step in plan(self.settings, self.addresses):
            at_ms = max(step.at_ms, previous_ms + MIN_GAP_MS)
            await asyncio.sleep(max(0.0, (at_ms - now_ms()) / 1000))
            proposed = now_ms()
            self.progress(f"{step.name}: proposed at {proposed / 1000:.2f} s")
            record = ChangeTimes(step.name, proposed, None)
            self.changes.append(record)
            watch = asyncio.create_task(self._watch_pending(cluster, record, now_ms, clients))
            try:
                try:
                    answer = await _admin(cluster, step.operation, step.argument)
                finally:
                    watch.cancel()
                record.committed_ms = now_ms()
                self.answers.append(answer)
                await self._epoch_everywhere(cluster, answer, clients)
                record.done_ms = previous_ms = now_ms()
            except Exception as exc:  # recorded and reported: the run goes on
                previous_ms = now_ms()
                record.error = f"{type(exc).__name__}: {exc}"
                self.progress(f"{step.name}: FAILED: {record.error}")
                continue
            self.progress(
                f"{step.name}: committed after {record.committed_ms - proposed:.0f} ms,"
                f" epoch {answer.get('epoch')} at every member after"
                f" {record.done_ms - proposed:.0f} ms"
            )

    async def _watch_pending(
        self,
        cluster: LocalCluster,
        record: ChangeTimes,
        now_ms: Callable[[], float],
        clients: dict[str, Any],
    ) -> None:
        """When the operator's node first shows the change pending (its command
        executed there: the learner caught up, the change committed; the stop
        comes next). Cancelled when the change's answer comes."""
        r = cluster.configs[0].replicas[OPERATOR_NODE]
        while True:
            st = await _status(cluster, f"{r.host}:{r.port}", clients)
            if st is not None and st.get("pending"):
                record.pending_ms = now_ms()
                return
            await asyncio.sleep(POLL_S)

    async def _epoch_everywhere(
        self, cluster: LocalCluster, answer: dict[str, Any], clients: dict[str, Any]
    ) -> None:
        epoch = int(answer["epoch"])
        members = [str(m["address"]) for m in answer["members"]]
        deadline = time.monotonic() + CHANGE_TIMEOUT_S
        while True:
            seen = [await _status(cluster, a, clients) for a in members]
            if all(s is not None and s.get("epoch", -1) >= epoch for s in seen):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"not every member in epoch {epoch} within {CHANGE_TIMEOUT_S:g} s:"
                    f" {[None if s is None else s.get('epoch') for s in seen]}"
                )
            await asyncio.sleep(POLL_S)


async def _status(
    cluster: LocalCluster, address: str, clients: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The status of the node at ``address``, or None when it does not answer.

    ``clients``: connections kept from one call to the next (a status every
    :data:`POLL_S` on a fresh TLS connection each would cost the nodes a
    handshake each, in the middle of what is measured); one that failed is
    dropped, and the next call connects again."""
    from sdpaxos.runtime.client import Client

    c = clients.get(address) if clients is not None else None
    if c is None:
        host, _, port = address.rpartition(":")
        c = Client([(host, int(port))], tls=cluster.tls, attempt_timeout_s=1.0)
        if clients is not None:
            clients[address] = c
    try:
        st: dict[str, Any] = await c.status(1.0)
        return st
    except Exception:
        if clients is not None:
            clients.pop(address, None)
            await c.close()
        return None
    finally:
        if clients is None:
            await c.close()


async def _stale_read(cluster: LocalCluster, address: str) -> bytes | None:
    """What the node at ``address`` executed so far (its app's answer), or None."""
    from sdpaxos.runtime.client import Client

    host, _, port = address.rpartition(":")
    c = Client([(host, int(port))], tls=cluster.tls, attempt_timeout_s=2.0)
    try:
        value: bytes | None = await c.read(None, b"", stale=True, timeout_s=2.0)
        return value
    except Exception:
        return None
    finally:
        await c.close()


async def _admin(cluster: LocalCluster, operation: str, argument: Any) -> dict[str, Any]:
    from sdpaxos.runtime.client import Client

    r = cluster.configs[0].replicas[OPERATOR_NODE]
    c = Client([(r.host, r.port)], tls=cluster.tls, attempt_timeout_s=CHANGE_TIMEOUT_S + 5)
    try:
        value = await c.admin(operation, argument, CHANGE_TIMEOUT_S + 5)
    finally:
        await c.close()
    if not isinstance(value, dict) or "epoch" not in value or "members" not in value:
        raise RuntimeError(f"{operation}: an answer without the membership: {value!r:.200}")
    return value


def timeline_of(out: RunOutput, operator: Operator, election_ms: float) -> Timeline:
    """The run's completions (writes answered, the client's latency) and changes."""
    completions = [
        (rec.complete_us / 1000, rec.region, (rec.complete_us - rec.invoke_us) / 1000)
        for rec in out.records
        if rec.complete_us is not None
    ]
    return Timeline(
        "runtime",
        RTT_MS,
        election_ms,
        [PROFILE.regions[r] for r in CLIENT_REGIONS],
        completions,
        [dataclasses.replace(c) for c in operator.changes],
        out.spec.window_us[1] / 1000,
    )


def run_runtime(ctx: Context) -> Timeline:
    """One runtime run of the three changes (see the module docstring)."""
    settings = QUICK if ctx.quick else FULL
    engine = ctx.engine()
    assert isinstance(engine, RuntimeEngine)
    operator = Operator(settings, ctx.progress)
    spec = RunSpec(
        protocol="sdpaxos",
        profile=PROFILE,
        workload=Workload(seed=ctx.seed),
        clients=Clients(
            "open",
            tuple(
                settings.clients_per_region if r in CLIENT_REGIONS else 0
                for r in range(PROFILE.size)
            ),
            rate_per_s=settings.rate_per_client_s,
            poisson=False,
        ),
        duration_ms=settings.duration_ms,
        drain_ms=DRAIN_MS,
        leader=SEQUENCER,
        seed=ctx.seed,
        script=operator,
    )
    try:
        out = ctx.run(engine, spec, "sdpaxos: add, replace the sequencer's node, remove")
    finally:
        close_engine(engine)
    timeline = timeline_of(out, operator, operator.election_ms)
    verify = (out.extra.get("verify") or {}).get("verdict", "")
    checked = (out.extra.get("script_check") or {}).get("verdict")
    if checked:
        verify += f"; {checked}"
    cpu = out.extra.get("cpu") or {}
    timeline.notes = [
        f"Real processes: three `python -m sdpaxos node` processes (TLS, fsync"
        f" {'on' if engine.fsync else 'off'}) on loopback behind the delay emulator"
        f" ({PROFILE.name}: every pair {RTT_MS:g} ms apart), the sequencer at node 0 (R0);"
        f" spares 3 and 4 (both in R0) started before the load; {settings.clients_per_region}"
        f" open-loop writers at R1 and at R2, each {settings.rate_per_client_s:g}/s at a"
        f" fixed interval ({settings.clients_per_region * settings.rate_per_client_s:g}"
        " commands/s per region; none at R0, whose node is replaced);"
        " the changes through node 1's admin channel: add 3, replace 0 by 4, remove 3."
        " A change is proposed when its request is sent (an add or replace: the"
        " learner's catch-up included) and done when every member named in the answer"
        " reports its epoch; 'pending at': when node 1 first showed the change pending"
        " (the learner caught up and the change's command executed; the stop and the"
        " next epoch's start follow). " + describe_latency(),
        "Not like the simulator: the added nodes sit in R0 (their links delayed as R0's,"
        " both ways), the simulator's a round trip from everyone; open-loop load."
        " Wall clock on a shared machine: one run, one sample.",
        f"Run: {'ok' if out.ok else 'PROBLEMS: ' + out.verdict}; {verify};"
        + (
            f" machine load average {cpu['load_average'][0]:.2f}, all cores"
            f" {100 * cpu['machine_busy']:.0f} % busy in the window."
            if cpu.get("load_average") and cpu.get("machine_busy") is not None
            else ""
        ),
    ]
    timeline.extra = {
        "runtime": {
            "ok": out.ok,
            "verdict": out.verdict,
            "verify": verify,
            "settings": dataclasses.asdict(settings),
            "answers": operator.answers,
            "machine_busy": cpu.get("machine_busy"),
            "load_average": cpu.get("load_average"),
        }
    }
    return timeline


__all__ = ["Operator", "Settings", "plan", "run_runtime", "timeline_of"]
