"""Real node processes on loopback: crashes (SIGKILL), restarts, partitions.

Each test starts ``python -m sdpaxos node`` processes from one cluster file
(TLS on, fsync on, the ``list`` app that keeps every payload in order) and
talks to them through the runtime's client, as a user would.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from sdpaxos.runtime.client import Client

from .helpers import ProcessCluster, payloads_of


async def _load(client: Client, prefix: bytes, count: int, acked: list[bytes]) -> None:
    for k in range(count):
        payload = prefix + b"%d" % k
        await client.submit(payload, timeout_s=60)
        acked.append(payload)


async def _converged(cluster: ProcessCluster, nodes: list[int], acked: list[bytes]) -> list[bytes]:
    """Wait until every node in ``nodes`` has executed the same log holding all
    of ``acked``, each once; return that log."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    logs: list[list[bytes]] = []
    while loop.time() < deadline:
        logs = []
        for k in nodes:
            try:
                logs.append(payloads_of(await cluster.read(k, timeout_s=5)))
            except (TimeoutError, OSError, ConnectionError):
                logs.append([])
        if all(log == logs[0] for log in logs) and set(acked) <= set(logs[0]):
            assert len(set(logs[0])) == len(logs[0]), "a command executed twice"
            return logs[0]
        await asyncio.sleep(0.2)
    lengths = [len(log) for log in logs]
    missing = sorted(set(acked) - set(logs[0] if logs else []))[:5]
    raise AssertionError(f"no agreement: log lengths {lengths}, missing e.g. {missing}")


@pytest.mark.parametrize("replicas", [3, 5])
def test_commands_at_every_replica_survive_a_killed_sequencer(tmp_path, replicas):
    cluster = ProcessCluster(tmp_path, replicas)

    async def main():
        cluster.start_all()
        for k in range(replicas):
            await cluster.wait_up(k)
        acked: list[bytes] = []
        clients = [cluster.client(only=k) for k in range(replicas)]
        await asyncio.gather(*(_load(c, b"a%d-" % k, 15, acked) for k, c in enumerate(clients)))
        st = await cluster.status(1)
        sequencer = st["sequencer"]
        cluster.kill(sequencer)
        survivors = [k for k in range(replicas) if k != sequencer]
        everywhere = cluster.client()  # fails over from the dead node by itself
        await asyncio.gather(
            *(_load(clients[k], b"b%d-" % k, 10, acked) for k in survivors),
            _load(everywhere, b"c-", 10, acked),
        )
        st = await cluster.status(survivors[0])
        assert st["sequencer"] != sequencer and st["view"] > 0
        cluster.start(sequencer)
        await cluster.wait_up(sequencer)
        log = await _converged(cluster, list(range(replicas)), acked)
        assert len(log) == len(acked)
        for c in [*clients, everywhere]:
            await c.close()

    try:
        asyncio.run(main())
    finally:
        cluster.stop_all()


def test_a_replica_far_behind_catches_up_by_snapshot(tmp_path):
    from .helpers import FAST_PROTOCOL

    cluster = ProcessCluster(tmp_path, 3, protocol={**FAST_PROTOCOL, "snapshot_slots_min": 20})

    async def main():
        cluster.start_all()
        for k in range(3):
            await cluster.wait_up(k)
        acked: list[bytes] = []
        client = cluster.client(only=0)
        await _load(client, b"before-", 10, acked)
        cluster.kill(2)
        await _load(client, b"while-", 150, acked)
        cluster.start(2)
        await cluster.wait_up(2)
        await _converged(cluster, [0, 1, 2], acked)
        st = await cluster.status(2)
        assert st["stats"]["snapshots_installed"] >= 1
        assert st["snapshot_slot"] > 0
        await client.close()

    try:
        asyncio.run(main())
    finally:
        cluster.stop_all()


def test_a_partitioned_minority_heals(tmp_path):
    cluster = ProcessCluster(
        tmp_path, 3, emulator={"profile": "uniform3"}, regions=["R0", "R1", "R2"]
    )

    async def main():
        cluster.start_all()
        for k in range(3):
            await cluster.wait_up(k)
        acked: list[bytes] = []
        await _load(cluster.client(only=1), b"pre-", 5, acked)
        admins = [cluster.client(only=k) for k in range(3)]
        for c in admins:
            await c.admin("partition", "1,2|0")
        await _load(cluster.client(only=1), b"split-", 10, acked)
        st0 = await cluster.status(0)
        assert st0["executed_upto"] < (await cluster.status(1))["executed_upto"]
        for c in admins:
            await c.admin("partition", None)
        await _converged(cluster, [0, 1, 2], acked)
        for c in admins:
            await c.close()

    try:
        asyncio.run(main())
    finally:
        cluster.stop_all()


def _sigkill_run(tmp_path, seed: int, kills: int, replicas: int = 3) -> None:
    rng = random.Random(seed)
    cluster = ProcessCluster(tmp_path, replicas)

    async def main():
        cluster.start_all()
        for k in range(replicas):
            await cluster.wait_up(k)
        acked: list[bytes] = []
        stop = asyncio.Event()

        async def loader(name: int) -> None:
            client = cluster.client(attempt_timeout_s=1.0, rng=random.Random(seed * 100 + name))
            k = 0
            while not stop.is_set():
                payload = b"L%d-%d" % (name, k)
                await client.submit(payload, timeout_s=120)
                acked.append(payload)
                k += 1
            await client.close()

        loaders = [asyncio.ensure_future(loader(n)) for n in range(4)]
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(0.1, 0.8))
            victim = rng.randrange(replicas)
            cluster.kill(victim)
            await asyncio.sleep(rng.uniform(0.05, 0.5))
            cluster.start(victim)
            await cluster.wait_up(victim)
        stop.set()
        await asyncio.gather(*loaders)
        assert len(acked) > kills
        await _converged(cluster, list(range(replicas)), acked)

    try:
        asyncio.run(main())
    finally:
        cluster.stop_all()


def test_sigkill_at_random_moments_loses_no_acknowledged_command(tmp_path):
    """Every command acknowledged as ready is executed after the restarts, once,
    in the same order at every replica (8 kills, the sequencer among the victims
    as chance has it; ``-m slow`` runs 100)."""
    _sigkill_run(tmp_path, seed=7, kills=8)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_sigkill_long(tmp_path, seed):
    _sigkill_run(tmp_path, seed=seed, kills=20)


def test_data_of_a_three_node_cluster_is_refused_under_a_five_node_file(tmp_path):
    """N = 3 data directories started under an N = 5 file: every node refuses,
    in one line naming both sizes, even with --bootstrap (ignored once a
    directory holds data), and its directory is left as it was."""
    import subprocess
    import sys

    from sdpaxos.runtime.local import make_local_cluster

    three = ProcessCluster(tmp_path / "three", 3, insecure=True)

    async def write() -> None:
        client = three.client()
        three.start_all()
        for k in range(3):
            await three.wait_up(k)
        await client.submit(b"three", timeout_s=60)
        await client.close()

    try:
        asyncio.run(write())
    finally:
        three.stop_all()
    five = make_local_cluster(tmp_path / "five", 5, insecure=True)
    # The same data directories, the bigger membership.
    five.write_text(
        five.read_text().replace(
            'data_dir = "node{id}"', f'data_dir = "{tmp_path}/three/node{{id}}"'
        )
    )
    for k in range(3):
        data = tmp_path / "three" / f"node{k}"
        before = {p.name: p.read_bytes() for p in data.iterdir()}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "sdpaxos",
                "node",
                "--config",
                str(five),
                "--id",
                str(k),
                "--bootstrap",
                "--app",
                "list",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert errors == [
            f"error: node {k} did not start: data directory {data} is of a cluster of 3 "
            "replicas, the file has 5: a replica's records mean nothing in another membership "
            "(the file's list is the initial membership and never changes: change it with "
            "admin add-replica, remove-replica, replace-replica); start it under its own "
            "cluster's file, or give this node its own data_dir"
        ], done.stderr
        assert "Traceback" not in done.stderr
        assert {p.name: p.read_bytes() for p in data.iterdir()} == before
