"""Kv-store node processes on this machine, for ``kvstore local``, the demo, the
Jepsen-style tests and the benchmarks: start, stop, kill, restart, pause.

Each node is ``python -m kvstore serve --config FILE --id N``, a process of
its own (a kill is a real SIGKILL, a pause a real SIGSTOP), with its log in
``DIR/nodeN.log``. With ``bootstrap=True`` (a cluster whose directories were
just made) a node's first start passes ``--bootstrap``, and its restarts do
not: a node whose directory was lost then refuses to come back, as it should.

The file's spare nodes (``[kvstore] spares``, ids right after the replicas')
are nodes too, ``k >= members``: they start without ``--bootstrap`` and wait
to be added (:mod:`kvstore.config`).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from kvstore.config import KVConfig, load_kv_config

__all__ = ["ProcessCluster", "redis_ping"]

#: How long a node gets to answer PING on its Redis port after it starts.
START_TIMEOUT_S = 60.0
#: How long a node gets to stop after SIGTERM before it is killed.
STOP_GRACE_S = 10.0


def redis_ping(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether a Redis server answers PING at ``host:port`` (plaintext, no AUTH)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class ProcessCluster:
    """The node processes of one cluster file (see the module docstring)."""

    def __init__(
        self,
        path: Path | str,
        *,
        fsync: bool = True,
        log_level: str = "WARNING",
        extra_args: Sequence[str] = (),
        bootstrap: bool = False,
    ) -> None:
        self.path = Path(path)
        self.bootstrap = bootstrap
        #: Nodes started at least once by this object.
        self.started: set[int] = set()
        self.configs: list[KVConfig] = []
        first = load_kv_config(self.path, 0)
        #: Nodes ``0 .. members-1`` are the file's replicas; the rest its spares.
        self.members = len(first.node.replicas)
        spare_ids = [s.id for s in first.spares]
        if spare_ids != list(range(self.members, self.members + len(spare_ids))):
            raise ValueError(
                f"spare ids {spare_ids} do not follow the replicas' 0..{self.members - 1}"
            )
        self.configs = [first] + [
            load_kv_config(self.path, k) for k in range(1, self.members + len(spare_ids))
        ]
        self.fsync = fsync
        self.log_level = log_level
        self.extra_args = list(extra_args)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * len(self.configs)
        self._logs: list[IO[bytes] | None] = [None] * len(self.configs)
        self.paused: set[int] = set()

    @property
    def size(self) -> int:
        return len(self.configs)

    def redis_address(self, k: int) -> tuple[str, int]:
        return self.configs[k].redis_address

    def log_path(self, k: int) -> Path:
        return self.path.parent / f"node{k}.log"

    def start(self, k: int) -> None:
        """Start node ``k`` (it must not be running)."""
        if self.procs[k] is not None and self.procs[k].poll() is None:  # type: ignore[union-attr]
            raise RuntimeError(f"node {k} is already running")
        cmd = [
            sys.executable,
            "-m",
            "kvstore",
            "serve",
            "--config",
            str(self.path),
            "--id",
            str(k),
            "--log-level",
            self.log_level,
            *self.extra_args,
        ]
        if not self.fsync:
            cmd.append("--no-fsync")
        if self.bootstrap and k not in self.started and k < self.members:
            cmd.append("--bootstrap")
        log = self._logs[k]
        if log is None:
            log = self._logs[k] = self.log_path(k).open("ab")
        self.procs[k] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        self.started.add(k)

    def start_all(self) -> None:
        for k in range(self.size):
            self.start(k)

    def wait_ready(
        self, nodes: Sequence[int] | None = None, timeout_s: float = START_TIMEOUT_S
    ) -> None:
        """Wait until each node's Redis port answers PING; raise if one exited."""
        deadline = time.monotonic() + timeout_s
        for k in range(self.size) if nodes is None else nodes:
            host, port = self.redis_address(k)
            while not redis_ping(host, port):
                proc = self.procs[k]
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(
                        f"node {k} exited with status {proc.returncode}; see {self.log_path(k)}"
                    )
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {k} did not answer on {host}:{port}")
                time.sleep(0.05)

    def running(self, k: int) -> bool:
        proc = self.procs[k]
        return proc is not None and proc.poll() is None

    def kill(self, k: int) -> None:
        """SIGKILL node ``k`` and reap it (a crash: nothing is flushed)."""
        proc = self.procs[k]
        if proc is None:
            return
        if k in self.paused:
            self.resume(k)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()

    def restart(self, k: int) -> None:
        """Kill node ``k`` if it runs, then start it again on the same data."""
        self.kill(k)
        self.start(k)

    def pause(self, k: int) -> None:
        """SIGSTOP node ``k``: it holds its sockets and answers nothing."""
        proc = self.procs[k]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGSTOP)
            self.paused.add(k)

    def resume(self, k: int) -> None:
        proc = self.procs[k]
        if proc is not None and k in self.paused:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
        self.paused.discard(k)

    def sequencer(self) -> int | None:
        """The sequencer as the running nodes' INFO names it (the one most name)."""
        import redis

        named: dict[int, int] = {}
        for k in range(self.size):
            if not self.running(k) or k in self.paused:
                continue
            host, port = self.redis_address(k)
            try:
                info = redis.Redis(host=host, port=port, socket_timeout=1.0).info("replication")
            except Exception:  # a node that cannot answer names nobody
                continue
            seq = int(info.get("sequencer", -1))
            if seq >= 0:
                named[seq] = named.get(seq, 0) + 1
        return max(named, key=lambda s: named[s]) if named else None

    def stop(self) -> None:
        """SIGTERM every node (resuming paused ones first); kill what lingers."""
        for k in list(self.paused):
            self.resume(k)
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in self.procs:
            if proc is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in self._logs:
            if log is not None:
                log.close()
        self._logs = [None] * self.size

    def __enter__(self) -> ProcessCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
