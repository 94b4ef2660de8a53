"""The one way the benchmarks run a cluster of node processes: start, wait until up, ask, stop.

Why one module: every benchmark on real processes needs the same few things,
and each used to do them its own way (four "wait until the cluster is up"
loops, each with its own idea of "up" and its own timeout). Here:

* :class:`SdpaxosNodes`: ``python -m sdpaxos node`` processes of a cluster
  file made by :func:`sdpaxos.runtime.local.make_local_cluster`, for
  :mod:`bench.runtime_engine` (every ``--engine runtime`` experiment and
  :mod:`bench.runtime_cpu`), :mod:`bench.runtime_throughput` and
  :mod:`bench.runtime_latency`. The cluster is **up** (:func:`is_up`) when
  every node answers a status request and sees every peer connected and, in
  a protocol with a single leader, a leader holds its lease (a given node, or
  any).
* :class:`KvNodes`: ``python -m kvstore serve`` processes of a kv-store
  cluster file (:func:`kvstore.local.make_kv_cluster`), for
  :mod:`bench.kv_vs_pysyncobj`: up when every node's Redis port answers PING.
* :func:`wait_until`: the one polling loop both use (and
  :mod:`bench.redis_benchmark`'s throw-away ``redis-server``).
* :func:`start_loader`: a :mod:`bench.runtime_loader` process, connected.

Every process is started by :func:`bench.runtime_procs.spawn` (killed if this
process dies) with its stderr in ``DIR/nodeK.log`` beside the cluster file,
and ended by :func:`bench.runtime_procs.stop_processes` on :meth:`Nodes.stop`,
:meth:`Nodes.close` or leaving a ``with`` block.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar

from bench.runtime_procs import ChildLines, spawn, stop_processes
from sdpaxos.protocols import protocol as protocol_entry

T = TypeVar("T")
Progress = Callable[[str], None]

#: Processes may take this long to come up (TLS, imports, a leader's lease).
STARTUP_TIMEOUT_S = 90.0
#: How often a wait asks again.
POLL_INTERVAL_S = 0.1
#: A load generator may take this long to connect.
LOADER_CONNECT_TIMEOUT_S = 60.0


class NodeExited(RuntimeError):
    """A node process ended while it was expected to run."""


class WrongLeader(RuntimeError):
    """Another node than the one asked for holds the lead."""

    def __init__(self, leader: int) -> None:
        super().__init__(f"node {leader} leads")
        self.leader = leader


def wait_until(
    ready: Callable[[], bool],
    *,
    timeout_s: float,
    what: Callable[[], str],
    check: Callable[[], None] | None = None,
    interval_s: float = POLL_INTERVAL_S,
) -> None:
    """Poll ``ready()`` until it is true; ``check()`` first each time (it raises
    to give up early, e.g. on a dead process); after ``timeout_s``, a
    RuntimeError saying ``what()`` is missing."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check is not None:
            check()
        if ready():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what()} (waited {timeout_s:g} s)")
        time.sleep(interval_s)


class Nodes:
    """One process per node of a cluster file: start, watch, kill, stop.

    Subclasses say how a node is started (:meth:`command`) and when the
    cluster is up (``wait_up``). With ``own_dir``, :meth:`close` deletes the
    cluster file's directory too.
    """

    def __init__(self, path: Path | str, size: int, *, own_dir: bool = False) -> None:
        self.path = Path(path).resolve()
        self.dir = self.path.parent
        self.size = size
        self.own_dir = own_dir
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * size
        #: Nodes killed on purpose (:meth:`kill`): their exit is no failure.
        self.dead: set[int] = set()
        #: Nodes started at least once (a restart does not bootstrap).
        self.started: set[int] = set()

    def command(self, k: int) -> list[str]:
        """Node ``k``'s command line."""
        raise NotImplementedError

    def start(self, k: int) -> None:
        """Start node ``k``, its stderr appended to :meth:`log_path`."""
        with open(self.log_path(k), "ab") as log:
            self.procs[k] = spawn(self.command(k), stderr=log)
        self.started.add(k)
        self.dead.discard(k)

    def start_all(self, order: Sequence[int] | None = None) -> None:
        for k in range(self.size) if order is None else order:
            self.start(k)

    @property
    def pids(self) -> list[int | None]:
        return [p.pid if p is not None else None for p in self.procs]

    def running(self, k: int) -> bool:
        p = self.procs[k]
        return p is not None and p.poll() is None

    def alive(self) -> list[int]:
        return [k for k in range(self.size) if self.running(k)]

    def kill(self, k: int) -> None:
        """SIGKILL node ``k`` (a fault: no cleanup, no flush); its exit is expected."""
        p = self.procs[k]
        if p is not None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGKILL)
        self.dead.add(k)

    def exited(self) -> list[int]:
        """Nodes that ended although nobody killed them."""
        return [
            k
            for k, p in enumerate(self.procs)
            if p is not None and p.poll() is not None and k not in self.dead
        ]

    def check_exits(self) -> None:
        """Raise :class:`NodeExited` (with its log's tail) for a node that ended."""
        for k in self.exited():
            p = self.procs[k]
            assert p is not None
            raise NodeExited(f"node {k} exited with {p.returncode}:\n{self.log_tail(k)}")

    def log_path(self, k: int) -> Path:
        return self.dir / f"node{k}.log"

    def log_tail(self, k: int, lines: int = 15) -> str:
        path = self.log_path(k)
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def wait(self, ready: Callable[[], bool], what: Callable[[], str], timeout_s: float) -> None:
        """:func:`wait_until` ``ready()``, giving up when a node exits."""
        wait_until(ready, timeout_s=timeout_s, what=what, check=self.check_exits)

    def stop(self) -> None:
        """End every node (SIGCONT, SIGTERM, then SIGKILL) and reap it."""
        stop_processes([p for p in self.procs if p is not None])
        self.procs = [None] * self.size

    def close(self) -> None:
        """:meth:`stop`; delete the directory too if it is this object's."""
        self.stop()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------- SDPaxos


def is_up(statuses: Sequence[dict[str, Any] | None], protocol: str, leader: int | None) -> bool:
    """Are these nodes' statuses (in node order, None: no answer) a cluster that is up?

    Every node answered and sees every peer connected; in a protocol whose
    replicas elect a leader with a lease (``Capabilities.leader_lease``), a
    node holds the lead with its lease: node
    ``leader``, or any when it is None. Raises :class:`WrongLeader` when
    another node than ``leader`` holds it.
    """
    if not statuses or any(s is None for s in statuses):
        return False
    up = [s for s in statuses if s is not None]
    connected = all(all(p["connected"] for p in s["peers"]) for s in up)
    if not protocol_entry(protocol).capabilities.leader_lease:
        return connected
    leading = [k for k, s in enumerate(up) if s.get("is_sequencer") and s.get("has_lease")]
    if leader is None:
        return connected and bool(leading)
    if connected and leader in leading:
        return True  # another's stale claim beside it is not a lost lead
    others = [k for k in leading if k != leader]
    if others:
        raise WrongLeader(others[0])
    return False


class SdpaxosNodes(Nodes):
    """``python -m sdpaxos node`` processes of one local cluster file.

    ``app``: the nodes' state machine (None: the runtime's default, ``digest``).
    ``metrics``: each node serves ``/metrics`` on a port of its own
    (:attr:`metrics_ports`). ``trace_events``: the core events nodes keep.
    ``profile``: ``(node, file)`` runs that node under cProfile.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        app: str | None = None,
        fsync: bool = True,
        metrics: bool = False,
        trace_events: Sequence[str] = (),
        profile: tuple[int, str] | None = None,
        own_dir: bool = False,
        log_level: str = "WARNING",
    ) -> None:
        from sdpaxos.runtime.local import client_tls, free_ports, node_configs

        self.configs = node_configs(path)
        super().__init__(path, len(self.configs[0].replicas), own_dir=own_dir)
        self.protocol = self.configs[0].protocol
        self.tls = client_tls(self.path)
        self.app = app
        self.fsync = fsync
        self.trace_events = tuple(trace_events)
        self.profile = profile
        self.log_level = log_level
        #: Free now and none of the cluster's peer ports (a port drawn free
        #: apart from them could be one, and that node would not start).
        taken = {r.port for r in self.configs[0].replicas}
        drawn = free_ports(self.size + len(taken)) if metrics else []
        self.metrics_ports: list[int] = [p for p in drawn if p not in taken][: self.size]

    @classmethod
    def create(cls, root: Path | str, replicas: int, *, cluster: dict[str, Any], **kw: Any) -> Self:
        """A fresh cluster file in ``root`` (``cluster``: :func:`make_local_cluster`'s
        keyword arguments) and its nodes, not started yet."""
        from sdpaxos.runtime.local import make_local_cluster

        return cls(make_local_cluster(root, replicas, **cluster), **kw)

    def command(self, k: int) -> list[str]:
        cmd = ["-m", "sdpaxos", "node", "--bootstrap", "--config", str(self.path), "--id", str(k)]
        cmd += ["--log-level", self.log_level]
        if self.app is not None:
            cmd += ["--app", self.app]
        if not self.fsync:
            cmd.append("--no-fsync")
        if self.trace_events:
            cmd += ["--trace-events", ",".join(self.trace_events)]
        if self.metrics_ports:
            cmd += ["--metrics", f"127.0.0.1:{self.metrics_ports[k]}"]
        if self.profile is not None and self.profile[0] == k:
            cmd = ["-m", "cProfile", "-o", self.profile[1], *cmd]
        return [sys.executable, *cmd]

    def start_up(
        self, leader: int | None = None, attempts: int = 1, progress: Progress | None = None
    ) -> None:
        """Start every node and wait until the cluster is up (:func:`is_up`).

        With a ``leader``: that node must hold the lead; while another takes
        it as they come up, start again on fresh data directories, up to
        ``attempts`` times in all. A Multi-Paxos follower that hears no leader
        within a lease of its start runs for election itself, and a node
        dials the peers above its id: so a leader with the highest id starts
        first (the others dial it as they come up); any other leader starts
        with the rest (started first, it would dial peers that are not up yet
        and back off, up to seconds).
        """
        for attempt in range(1, attempts + 1):
            first = [leader] if leader is not None and leader == self.size - 1 else []
            try:
                for k in first:
                    self.start(k)
                    self.wait_listening(k)
                self.start_all([k for k in range(self.size) if k not in first])
                self.wait_up(leader)
                return
            except WrongLeader as exc:
                self.stop()
                for config in self.configs:
                    shutil.rmtree(config.data_dir, ignore_errors=True)
                    config.data_dir.mkdir()
                if attempt == attempts:
                    raise RuntimeError(
                        f"{self.protocol}: node {exc.leader} kept taking the lead from"
                        f" node {leader} while the cluster came up ({attempts} attempts)"
                    ) from None
                if progress is not None:
                    progress(f"runtime: node {exc.leader} took the lead while starting; again")

    def wait_listening(self, k: int, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Until node ``k`` answers a status request."""
        self.wait(
            lambda: self.ask(self.status(k, 1.0)) is not None,
            lambda: f"node {k} did not answer",
            timeout_s,
        )

    def wait_up(self, leader: int | None = None, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Until the cluster is up (:func:`is_up`); :class:`WrongLeader` if
        another node than ``leader`` holds the lead."""
        last: list[dict[str, Any] | None] = []

        def ready() -> bool:
            last[:] = self.ask(self.statuses(timeout_s=1.0))
            return is_up(last, self.protocol, leader)

        self.wait(ready, lambda: f"cluster not up: {last}", timeout_s)

    # ------------------------------------------------------------ talking to nodes

    @staticmethod
    def ask(coro: Awaitable[T]) -> T:
        """Run one request (a coroutine of this class) from synchronous code."""

        async def run() -> T:
            return await coro

        return asyncio.run(run())

    def client(self, k: int, timeout_s: float = 2.0) -> Any:
        """A runtime :class:`~sdpaxos.runtime.client.Client` of node ``k`` alone."""
        from sdpaxos.runtime.client import Client

        r = self.configs[0].replicas[k]
        return Client([(r.host, r.port)], tls=self.tls, attempt_timeout_s=timeout_s)

    async def each(
        self, ask: Callable[[Any], Awaitable[T]], nodes: Sequence[int] | None = None
    ) -> list[T]:
        """``ask(client)`` of each node (all, or ``nodes``), in order, each on a
        connection of its own (closed after); an error propagates."""
        out = []
        for k in range(self.size) if nodes is None else nodes:
            c = self.client(k)
            try:
                out.append(await ask(c))
            finally:
                await c.close()
        return out

    async def status(self, k: int, timeout_s: float = 2.0) -> dict[str, Any] | None:
        """Node ``k``'s status, or None when it does not answer."""
        c = self.client(k, timeout_s)
        try:
            st: dict[str, Any] = await c.status(timeout_s)
            return st
        except Exception:
            return None
        finally:
            await c.close()

    async def statuses(
        self, nodes: Sequence[int] | None = None, timeout_s: float = 2.0
    ) -> list[dict[str, Any] | None]:
        return [
            await self.status(k, timeout_s) for k in (range(self.size) if nodes is None else nodes)
        ]

    async def query(self, k: int, stale: bool, timeout_s: float = 2.0) -> bytes | None:
        """The app's answer at node ``k``: a linearizable read, or with ``stale``
        what the node executed so far. None when it does not answer."""
        c = self.client(k, timeout_s)
        try:
            value: bytes | None = await c.read(None, b"", stale=stale, timeout_s=timeout_s)
            return value
        except Exception:
            return None
        finally:
            await c.close()

    def commit_histogram(self, k: int) -> tuple[float, float]:
        """(sum of seconds, count) of node ``k``'s commit-latency histogram
        (``metrics`` on); OSError when it does not answer."""
        from prometheus_client.parser import text_string_to_metric_families

        url = f"http://127.0.0.1:{self.metrics_ports[k]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        total = count = 0.0
        for family in text_string_to_metric_families(text):
            if family.name == "sdpaxos_commit_latency_seconds":
                for sample in family.samples:
                    if sample.name.endswith("_sum"):
                        total = sample.value
                    elif sample.name.endswith("_count"):
                        count = sample.value
        return total, count

    def loader_conn(self, nodes: Sequence[int], client_cert: int = 0) -> dict[str, Any]:
        """What a :mod:`bench.runtime_loader` needs to connect to ``nodes``."""
        from sdpaxos.runtime.local import LOCAL_CLIENT_CERTS, client_tls

        tls = client_tls(self.path, client_cert % LOCAL_CLIENT_CERTS)
        return {
            "nodes": [
                [self.configs[0].replicas[k].host, self.configs[0].replicas[k].port] for k in nodes
            ],
            "tls": None if tls is None else [str(tls.ca), str(tls.cert), str(tls.key)],
        }


def start_loader(conn: dict[str, Any], spec_path: Path, log_path: Path) -> ChildLines:
    """A :mod:`bench.runtime_loader` process given ``conn`` (written to
    ``spec_path``), its stderr in ``log_path``, once it said ``connected``."""
    spec_path.write_text(json.dumps(conn))
    with open(log_path, "ab") as log:
        proc = spawn(
            [sys.executable, "-m", "bench.runtime_loader", str(spec_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    lines = ChildLines(proc)
    if not lines.connected.wait(LOADER_CONNECT_TIMEOUT_S) or lines.finished.is_set():
        stop_processes([proc], timeout_s=5.0)
        tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
        raise RuntimeError(f"a load generator did not connect:\n{tail}")
    return lines


def stop_loaders(loaders: Sequence[ChildLines], timeout_s: float = 5.0) -> None:
    """Tell each load generator to ``quit``, give them ``timeout_s`` to end on
    their own (a profiled one writes its profile then), then end what is left."""
    for lines in loaders:
        lines.tell("quit")
    deadline = time.monotonic() + timeout_s
    for lines in loaders:
        with contextlib.suppress(subprocess.TimeoutExpired):
            lines.proc.wait(max(0.0, deadline - time.monotonic()))
    stop_processes([lines.proc for lines in loaders], timeout_s=timeout_s)


# ---------------------------------------------------------------------- kv-store


class KvNodes(Nodes):
    """``python -m kvstore serve`` processes of one kv-store cluster file; a
    node's first start bootstraps it (its directory was just made)."""

    def __init__(
        self,
        path: Path | str,
        *,
        fsync: bool = True,
        own_dir: bool = False,
        log_level: str = "WARNING",
    ) -> None:
        from kvstore.config import load_kv_config

        first = load_kv_config(path, 0)
        size = len(first.node.replicas)
        self.configs = [first] + [load_kv_config(path, k) for k in range(1, size)]
        super().__init__(path, size, own_dir=own_dir)
        self.fsync = fsync
        self.log_level = log_level

    def command(self, k: int) -> list[str]:
        cmd = [sys.executable, "-m", "kvstore", "serve", "--config", str(self.path), "--id", str(k)]
        cmd += ["--log-level", self.log_level]
        if not self.fsync:
            cmd.append("--no-fsync")
        if k not in self.started:
            cmd.append("--bootstrap")
        return cmd

    def redis_address(self, k: int) -> tuple[str, int]:
        return self.configs[k].redis_address

    def wait_up(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Until every node's Redis port answers PING."""
        from kvstore.cluster import redis_ping

        self.wait(
            lambda: all(redis_ping(*self.redis_address(k)) for k in range(self.size)),
            lambda: "a kv-store node's Redis port did not answer PING",
            timeout_s,
        )

    def start_up(self) -> None:
        self.start_all()
        self.wait_up()
