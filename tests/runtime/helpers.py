"""Clusters for the runtime's tests: in-process nodes, and real node processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgpack

from sdpaxos.runtime.client import Client
from sdpaxos.runtime.local import client_tls, make_local_cluster, node_configs
from sdpaxos.runtime.node import Node

#: Fast timers for tests on loopback (failure detection within a second).
FAST_PROTOCOL = {
    "heartbeat_ms": 100.0,
    "lease_ms": 300.0,
    "candidate_timeout_ms": 300.0,
    "retransmit_ms": 100.0,
    "learn_ms": 100.0,
    "recover_ms": 300.0,
}


@contextlib.asynccontextmanager
async def in_process(
    tmp_path: Path,
    replicas: int,
    app: Callable[[], Any],
    *,
    insecure: bool = False,
    protocol: dict[str, Any] | None = None,
    **node_kw: Any,
) -> AsyncIterator[tuple[Path, list[Node]]]:
    """A cluster of ``replicas`` nodes in this event loop (fsync off unless asked)."""
    path = make_local_cluster(
        tmp_path, replicas, insecure=insecure, protocol=protocol or FAST_PROTOCOL
    )
    node_kw.setdefault("fsync", False)
    node_kw.setdefault("bootstrap", True)  # fresh directories: a new cluster
    nodes = [Node(cfg, app(), **node_kw) for cfg in node_configs(path)]
    for node in nodes:
        await node.start()
    try:
        yield path, nodes
    finally:
        for node in nodes:
            await node.stop()


async def eventually(check: Callable[[], bool], timeout_s: float = 20.0, what: str = "") -> None:
    """Wait until ``check()`` holds (polling), or fail saying ``what``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        await asyncio.sleep(0.02)


def payloads_of(value: bytes | None) -> list[bytes]:
    """What a PayloadLog's query answers: its payloads in order."""
    assert value is not None
    return [bytes(p) for p in msgpack.unpackb(value, raw=False)]


class ProcessCluster:
    """Real node processes (``python -m sdpaxos node``) sharing one cluster file."""

    def __init__(
        self,
        root: Path,
        replicas: int,
        *,
        app: str = "list",
        insecure: bool = False,
        protocol: dict[str, Any] | None = None,
        emulator: dict[str, Any] | None = None,
        regions: list[str] | None = None,
        fsync: bool = True,
    ) -> None:
        self.root = root
        self.replicas = replicas
        self.app = app
        self.fsync = fsync
        self.path = make_local_cluster(
            root,
            replicas,
            insecure=insecure,
            protocol=protocol if protocol is not None else FAST_PROTOCOL,
            emulator=emulator,
            regions=regions,
        )
        self.configs = node_configs(self.path)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.starts = 0
        #: Nodes started at least once (on a fresh directory, they bootstrap).
        self.started: set[int] = set()

    def start(self, k: int, *, bootstrap: bool | None = None) -> None:
        """Start node ``k``: with ``--bootstrap`` the first time (its directory
        is fresh), without it on a restart, unless ``bootstrap`` says."""
        if bootstrap is None:
            bootstrap = k not in self.started
        cmd = [
            sys.executable,
            "-m",
            "sdpaxos",
            "node",
            "--config",
            str(self.path),
            "--id",
            str(k),
            "--app",
            self.app,
            "--log-level",
            "INFO",
        ]
        if not self.fsync:
            cmd.append("--no-fsync")
        if bootstrap:
            cmd.append("--bootstrap")
        log = open(self.root / f"node{k}.log", "ab")  # noqa: SIM115 - the child holds it
        self.procs[k] = subprocess.Popen(cmd, stdout=log, stderr=log, env=os.environ.copy())
        log.close()
        self.starts += 1
        self.started.add(k)

    def start_all(self) -> None:
        for k in range(self.replicas):
            self.start(k)

    def kill(self, k: int) -> None:
        """SIGKILL: no cleanup, no flush; what is not durable is gone."""
        proc = self.procs.pop(k)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def pause(self, k: int) -> None:
        self.procs[k].send_signal(signal.SIGSTOP)

    def resume(self, k: int) -> None:
        self.procs[k].send_signal(signal.SIGCONT)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def client(self, only: int | None = None, **kw: Any) -> Client:
        targets = self.configs[0].replicas if only is None else [self.configs[0].replicas[only]]
        return Client([(r.host, r.port) for r in targets], tls=client_tls(self.path), **kw)

    async def status(self, k: int, timeout_s: float = 2.0) -> dict[str, Any] | None:
        c = self.client(only=k, attempt_timeout_s=timeout_s)
        try:
            return await c.status(timeout_s)
        except (TimeoutError, OSError, ConnectionError):
            return None
        finally:
            await c.close()

    async def wait_up(self, k: int, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            proc = self.procs.get(k)
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"node {k} exited with {proc.returncode}:\n{self.log_tail(k)}")
            st = await self.status(k, 0.5)
            if st is not None:
                return st
            await asyncio.sleep(0.05)
        raise AssertionError(f"node {k} did not come up:\n{self.log_tail(k)}")

    async def read(self, k: int, timeout_s: float = 10.0) -> bytes | None:
        c = self.client(only=k, attempt_timeout_s=timeout_s)
        try:
            return await c.read(None, timeout_s=timeout_s)
        finally:
            await c.close()

    def log_tail(self, k: int, lines: int = 30) -> str:
        path = self.root / f"node{k}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def default_sigint() -> None:
    """``preexec_fn`` for a child a test stops with Ctrl-C (SIGINT).

    Why: an ignored signal stays ignored across ``exec``, and a test runner
    started as a background job of a non-interactive shell ignores SIGINT, so
    its children would too and never stop. Restoring the default lets Python
    in the child install its ``KeyboardInterrupt`` handler as usual.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill a child started with ``start_new_session=True`` and everything it
    started (a ``local`` cluster's nodes too), whatever state the test left it in."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


class FailsInNodeProcesses:
    """An app a launcher loads fine and every ``node`` process refuses (it sees
    ``node`` on its command line): how a test makes all of a cluster's nodes exit."""

    def __init__(self) -> None:
        if "node" in sys.argv:
            raise ValueError("this app refuses to run in a node process")
