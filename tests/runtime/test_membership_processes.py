"""Membership change with real node processes (``python -m sdpaxos node``) and
the operator's commands (``python -m sdpaxos admin ... add-replica |
remove-replica | replace-replica``, ``python -m sdpaxos certs --node``):

- a node started with an id that is not in the file, on an empty directory,
  waits and says so; ``add-replica`` makes it a member, and writes from before
  and after read back from every node;
- bad input (a member added again, a non-member removed, a bad address) is
  refused with a message that says why, and the membership is unchanged;
- a removed member says so and refuses clients clearly;
- a member SIGKILLed that lost its data refuses to start on an empty
  directory and is replaced by a fresh node; the cluster serves on; an added
  member that lost its data says so when restarted, and never takes part;
- a new node whose certificate names another id is refused.

TLS is on (the cluster's CA issues the new nodes' certificates).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest

from sdpaxos.runtime.client import Client, ClientError
from sdpaxos.runtime.local import client_tls, free_ports

from .helpers import ProcessCluster

#: Long enough for a change on a loaded machine; a change normally takes well
#: under a second here (no test asserts a duration).
ADMIN_TIMEOUT_S = 60


class MemberCluster(ProcessCluster):
    """A process cluster that can start nodes the file does not list."""

    def __init__(self, root: Path, replicas: int) -> None:
        super().__init__(root, replicas, fsync=False)
        #: Nodes started outside the file's list: id -> (host, port).
        self.extra: dict[int, tuple[str, int]] = {}

    def certs(self, node_id: int) -> subprocess.CompletedProcess[str]:
        return self.run("certs", "--out", str(self.root / "certs"), "--node", str(node_id))

    def start_new(self, node_id: int) -> str:
        """Start node ``node_id`` (not in the file) on an empty directory, no
        --bootstrap (its certificate issued the first time)."""
        if node_id not in self.extra:
            assert self.certs(node_id).returncode == 0
            (port,) = free_ports(1)
            self.extra[node_id] = ("127.0.0.1", port)
        host, port = self.extra[node_id]
        address = f"{host}:{port}"
        cmd = [
            *("node", "--config", str(self.path), "--id", str(node_id), "--app", self.app),
            *("--address", address, "--region", f"R{node_id}", "--no-fsync"),
        ]
        log = open(self.root / f"node{node_id}.log", "ab")  # noqa: SIM115 - the child holds it
        self.procs[node_id] = subprocess.Popen(
            [sys.executable, "-m", "sdpaxos", *cmd], stdout=log, stderr=log, env=os.environ.copy()
        )
        log.close()
        return address

    def run(self, *words: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sdpaxos", *words],
            capture_output=True,
            text=True,
            timeout=ADMIN_TIMEOUT_S + 30,
            check=False,
        )

    def admin(self, *words: str) -> subprocess.CompletedProcess[str]:
        return self.run("admin", "--config", str(self.path), *words)

    def client(self, only: int | None = None, **kw: Any) -> Client:
        if only is not None and only in self.extra:
            return Client([self.extra[only]], tls=client_tls(self.path), **kw)
        return super().client(only, **kw)

    async def until(self, k: int, check: Any, what: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Node ``k``'s status once ``check(status)`` holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            st = await self.status(k, 1.0)
            if st is not None and check(st):
                return st
            await asyncio.sleep(0.1)
        raise AssertionError(f"node {k}: not within {timeout_s} s: {what}\n{self.log_tail(k)}")


def _payloads(value: bytes | None) -> list[bytes]:
    assert value is not None
    return [bytes(p) for p in msgpack.unpackb(value, raw=False)]


def _members(st: dict[str, Any]) -> list[int]:
    return [m["id"] for m in st["members"]]


async def _up(cluster: MemberCluster) -> None:
    cluster.start_all()
    for k in range(cluster.replicas):
        await cluster.wait_up(k)


async def _write(cluster: MemberCluster, payload: bytes, at: int = 0) -> None:
    client = cluster.client(only=at)
    try:
        await client.submit(payload, wait="executed", timeout_s=30)
    finally:
        await client.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    c = MemberCluster(tmp_path, 3)
    try:
        yield c
    finally:
        c.stop_all()


def test_a_new_node_waits_is_added_and_a_removed_one_refuses_clients(
    cluster: MemberCluster,
) -> None:
    async def main() -> None:
        await _up(cluster)
        await _write(cluster, b"before")
        address = cluster.start_new(3)
        st = await cluster.until(3, lambda s: s.get("role") is not None, "status")
        assert st["role"] == "waiting to be added as a learner"

        # Bad input: refused, saying why; the membership is unchanged.
        done = cluster.admin("add-replica", "1", "--address", address, "--region", "R1")
        assert done.returncode == 1 and "node 1 is already a member" in done.stderr, done
        done = cluster.admin("remove-replica", "9")
        assert done.returncode == 1 and "neither a member nor a learner" in done.stderr, done
        done = cluster.admin("add-replica", "3", "--address", "nowhere", "--region", "R3")
        assert done.returncode == 2 and "HOST:PORT" in done.stderr, done
        st = await cluster.until(0, lambda s: True, "status")
        assert (st["epoch"], _members(st), list(st["learners"])) == (0, [0, 1, 2], [])

        done = cluster.admin("add-replica", "3", "--address", address, "--region", "R3")
        assert done.returncode == 0, done
        assert "member  3  " + address in done.stdout and "epoch 1" in done.stdout, done.stdout
        await cluster.until(3, lambda s: s["role"] == "member", "node 3 a member")
        await _write(cluster, b"after", at=3)
        for k in range(4):
            client = cluster.client(only=k)
            try:
                value = await client.read(None, timeout_s=20)
            finally:
                await client.close()
            assert _payloads(value) == [b"before", b"after"], k
        status = cluster.run("status", "--config", str(cluster.path))
        assert "membership (as node" in status.stdout and "member  3" in status.stdout, status

        done = cluster.admin("remove-replica", "2")
        assert done.returncode == 0 and "epoch 2" in done.stdout, done
        assert "member  2 " not in done.stdout
        await cluster.until(2, lambda s: s["role"] == "removed", "node 2 says removed")
        client = cluster.client(only=2)
        try:
            with pytest.raises(ClientError, match="no member"):
                await client.submit(b"refused", timeout_s=10)
        finally:
            await client.close()
        await _write(cluster, b"last", at=1)

    asyncio.run(main())


def test_a_killed_member_is_replaced_by_a_fresh_node_and_serving_continues(
    cluster: MemberCluster,
) -> None:
    async def main() -> None:
        await _up(cluster)
        await _write(cluster, b"before")
        cluster.kill(2)
        # Node 2 lost its disk: restarted on an empty directory, a member of
        # the file's list that forgot its promises refuses to start.
        shutil.rmtree(cluster.root / "node2")
        (cluster.root / "node2").mkdir()
        cluster.start(2)
        assert cluster.procs.pop(2).wait(timeout=60) == 1
        assert "refusing to start on an empty data directory" in cluster.log_tail(2)
        address = cluster.start_new(4)
        await cluster.until(4, lambda s: s.get("role") is not None, "node 4 up")
        done = cluster.admin("replace-replica", "2", "4", "--address", address, "--region", "R4")
        assert done.returncode == 0, (done, cluster.log_tail(0))
        assert "member  4  " + address in done.stdout and "member  2 " not in done.stdout
        await cluster.until(4, lambda s: s["role"] == "member", "node 4 a member")
        await _write(cluster, b"after", at=0)
        client = cluster.client(only=4)
        try:
            assert _payloads(await client.read(None, timeout_s=20)) == [b"before", b"after"]
        finally:
            await client.close()
        # A second replace of the dead id: it is no member any more.
        done = cluster.admin("replace-replica", "2", "5", "--address", address, "--region", "R5")
        assert done.returncode == 1 and "node 2 is not a member" in done.stderr, done
        # Node 4, an added member, loses its disk: restarted on an empty
        # directory it says so, and takes no part (it is replaced under a new id).
        cluster.kill(4)
        shutil.rmtree(cluster.root / "node4")
        cluster.start_new(4)
        st = await cluster.until(4, lambda s: s.get("role", "").startswith("lost"), "4 lost")
        assert st["role"] == "lost its data: replace it with replace-replica"
        await _write(cluster, b"still", at=1)

    asyncio.run(main())


def test_a_new_node_whose_certificate_names_another_id_is_refused(
    cluster: MemberCluster,
) -> None:
    async def main() -> None:
        await _up(cluster)
        certs = cluster.root / "certs"
        assert cluster.certs(5).returncode == 0
        # Node 3's files hold node 5's certificate and key.
        for suffix in (".pem", ".key"):
            shutil.copy(certs / f"node5{suffix}", certs / f"node3{suffix}")
        (port,) = free_ports(1)
        address = f"127.0.0.1:{port}"
        cmd = [
            *("node", "--config", str(cluster.path), "--id", "3", "--app", cluster.app),
            *("--address", address, "--region", "R3", "--no-fsync"),
        ]
        log = open(cluster.root / "node3.log", "ab")  # noqa: SIM115 - the child holds it
        cluster.procs[3] = subprocess.Popen(
            [sys.executable, "-m", "sdpaxos", *cmd], stdout=log, stderr=log, env=os.environ.copy()
        )
        log.close()
        done = cluster.admin("add-replica", "3", "--address", address, "--region", "R3")
        assert done.returncode == 1, done
        assert "certificate says ('node', 5)" in done.stderr, done.stderr
        assert "membership unchanged" in done.stderr
        st = await cluster.until(0, lambda s: True, "status")
        assert (st["epoch"], _members(st), list(st["learners"])) == (0, [0, 1, 2], [])

    asyncio.run(main())
