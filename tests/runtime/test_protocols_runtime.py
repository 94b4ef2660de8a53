"""The runtime runs any protocol by name: Multi-Paxos, Mencius and EPaxos nodes
replicate, the kv-store runs on Multi-Paxos, a bad name is refused, and no node of
another protocol gets into a cluster."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from kvstore.config import load_kv_config
from kvstore.local import make_kv_cluster
from kvstore.server import KVNode
from sdpaxos.core.errors import ConfigError
from sdpaxos.runtime.apps import PayloadLog
from sdpaxos.runtime.client import Client
from sdpaxos.runtime.config import parse_config
from sdpaxos.runtime.datadir import read_identity
from sdpaxos.runtime.local import client_tls, make_local_cluster, node_configs
from sdpaxos.runtime.node import Node, NodeError

from .helpers import FAST_PROTOCOL, ProcessCluster, eventually, in_process, payloads_of

BASELINES = ["multipaxos", "mencius"]


def _agree(nodes: list[Node], count: int) -> bool:
    logs = [n.state_machine.payloads for n in nodes]  # type: ignore[attr-defined]
    return all(len(p) == count for p in logs) and all(p == logs[0] for p in logs)


def _one_leader(nodes: list[Node]) -> bool:
    statuses = [n.status() for n in nodes]
    leaders = {st.sequencer for st in statuses}
    if len(leaders) != 1 or None in leaders:
        return False
    (leader,) = leaders
    return [st.is_sequencer for st in statuses] == [k == leader for k in range(len(nodes))]


@pytest.mark.parametrize("name", BASELINES)
def test_commands_submitted_at_every_node_execute_in_one_order(tmp_path, name):
    async def main():
        protocol = {"name": name, **FAST_PROTOCOL}
        async with in_process(tmp_path, 3, PayloadLog, protocol=protocol) as (_, nodes):
            sent = [b"c%d" % k for k in range(90)]
            await asyncio.gather(
                *(nodes[k % 3].submit(p, timeout_s=20) for k, p in enumerate(sent[:60]))
            )
            results = await asyncio.gather(
                *(
                    nodes[k % 3].submit(p, wait="executed", timeout_s=20)
                    for k, p in enumerate(sent[60:])
                )
            )
            assert all(r is not None for r in results)
            await eventually(lambda: _agree(nodes, len(sent)), what="all executed everywhere")
            assert sorted(nodes[0].state_machine.payloads) == sorted(sent)
            st = nodes[1].status()
            assert st.protocol == name and st.snapshots is False and st.snapshot_slot is None
            assert st.executed_upto is not None and st.executed_upto > 0
            assert all(p.connected for p in st.peers)
            if name == "mencius":  # no view, no sequencer, no lease: shown as None
                assert st.view is None and st.sequencer is None and st.has_lease is None
            else:
                # The leader the nodes agree on says it leads (node 0 unless a
                # loaded machine made the followers elect another meanwhile).
                await eventually(lambda: _one_leader(nodes), what="one leader, known to all")
            assert nodes[0].frames_rejected == 0
            # What the protocol lacks is refused plainly.
            with pytest.raises(ValueError, match="has no snapshots"):
                nodes[0].admin("snapshot", None)
            with pytest.raises(ValueError, match="has no sequencer to transfer"):
                nodes[0].admin("transfer_sequencer", 1)

    asyncio.run(main())


def test_mencius_node_processes_replicate_and_restart(tmp_path):
    """Real processes: the protocol's own records (Mencius's next own instance)
    go through the durable log and come back after a SIGKILL."""

    async def main():
        cluster = ProcessCluster(
            tmp_path, 3, protocol={"name": "mencius", **FAST_PROTOCOL}, fsync=False
        )
        try:
            cluster.start_all()
            for k in range(3):
                assert (await cluster.wait_up(k))["protocol"] == "mencius"
            client = cluster.client()
            for k in range(15):
                await client.submit(b"p%d" % k, timeout_s=20)
            cluster.kill(2)
            cluster.start(2)
            await cluster.wait_up(2)
            for k in range(15, 20):
                await client.submit(b"p%d" % k, timeout_s=20)
            await client.close()
            expected = sorted(b"p%d" % k for k in range(20))

            async def logs():
                out = []
                for k in range(3):
                    c = cluster.client(only=k)
                    try:
                        out.append(payloads_of(await c.read(None, stale=True, timeout_s=5)))
                    finally:
                        await c.close()
                return out

            deadline = asyncio.get_running_loop().time() + 20
            while True:
                got = await logs()
                if all(sorted(g) == expected for g in got) and got[0] == got[1] == got[2]:
                    break
                assert asyncio.get_running_loop().time() < deadline, got
                await asyncio.sleep(0.1)
            assert read_identity(tmp_path / "node2")["protocol"] == "mencius"
        finally:
            cluster.stop_all()

    asyncio.run(asyncio.wait_for(main(), 60))  # a node that cannot log hangs its clients


def _hot(payloads: list[bytes]) -> list[bytes]:
    """The commands on the one conflicting key, in the order a replica executed them."""
    return [p for p in payloads if p.startswith(b"h")]


def test_epaxos_nodes_order_conflicting_commands_alike_at_every_node(tmp_path):
    """EPaxos: commands on one hot key, submitted at all three nodes at once,
    execute in one order everywhere; commands on keys of their own may execute
    in different orders but execute everywhere, once. A client's registration
    never reaches the state machine (EPaxos keeps no session table), and what
    EPaxos lacks (snapshots, a sequencer, an executed slot) is refused or None."""

    async def main():
        protocol = {"name": "epaxos", **FAST_PROTOCOL}
        async with in_process(tmp_path, 3, PayloadLog, protocol=protocol) as (path, nodes):
            hot = [b"h%d" % k for k in range(45)]
            own = [b"u%d" % k for k in range(45)]
            await asyncio.gather(
                *(nodes[k % 3].submit(p, key=b"hot", timeout_s=20) for k, p in enumerate(hot)),
                *(nodes[k % 3].submit(p, key=p, timeout_s=20) for k, p in enumerate(own)),
            )
            client = Client(
                [(r.host, r.port) for r in node_configs(path)[0].replicas],
                tls=client_tls(path),
            )
            try:
                result = await client.submit(b"h-client", key=b"hot", wait="executed")
                assert result is not None
            finally:
                await client.close()
            sent = sorted([*hot, *own, b"h-client"])

            def settled() -> bool:
                logs = [n.state_machine.payloads for n in nodes]  # type: ignore[attr-defined]
                return all(sorted(p) == sent for p in logs)

            await eventually(settled, what="every command executed at every node, once")
            logs = [n.state_machine.payloads for n in nodes]  # type: ignore[attr-defined]
            assert _hot(logs[0]) == _hot(logs[1]) == _hot(logs[2])
            assert b"" not in logs[0]  # the client's registration was not applied
            st = nodes[2].status()
            assert st.protocol == "epaxos" and st.snapshots is False
            assert st.executed_upto is None and st.sequencer is None and st.view is None
            assert st.stats["commands_executed"] == len(sent)
            assert st.stats["fast_commits"] + st.stats["slow_commits"] > 0
            assert all(n.frames_rejected == 0 for n in nodes)
            with pytest.raises(ValueError, match="has no snapshots"):
                nodes[0].admin("snapshot", None)
            with pytest.raises(ValueError, match="has no sequencer to transfer"):
                nodes[0].admin("transfer_sequencer", 1)

    asyncio.run(main())


def test_epaxos_node_processes_replicate_and_restart_from_their_log(tmp_path):
    """Real EPaxos processes: commands at every node, half of them on one hot key;
    a node SIGKILLed and restarted rebuilds its instances (``InstanceRecord``s)
    from its durable log, and every node ends with every command, the hot key's
    in one order."""

    async def main():
        cluster = ProcessCluster(
            tmp_path, 3, protocol={"name": "epaxos", **FAST_PROTOCOL}, fsync=False
        )
        clients = []
        try:
            cluster.start_all()
            for k in range(3):
                assert (await cluster.wait_up(k))["protocol"] == "epaxos"
            clients = [cluster.client(only=k) for k in range(3)]

            async def burst(first: int, last: int, at: list[int]) -> None:
                await asyncio.gather(
                    *(
                        clients[at[k % len(at)]].submit(
                            b"%s%d" % (b"h" if k % 2 else b"u", k),
                            key=b"hot" if k % 2 else b"u%d" % k,
                            timeout_s=20,
                        )
                        for k in range(first, last)
                    )
                )

            await burst(0, 30, [0, 1, 2])
            await clients[2].close()
            cluster.kill(2)
            await burst(30, 40, [0, 1])  # a majority goes on without node 2
            cluster.start(2)
            await cluster.wait_up(2)
            clients[2] = cluster.client(only=2)
            await burst(40, 50, [0, 1, 2])
            expected = sorted(b"%s%d" % (b"h" if k % 2 else b"u", k) for k in range(50))

            async def logs() -> list[list[bytes]]:
                return [payloads_of(await c.read(None, stale=True, timeout_s=5)) for c in clients]

            deadline = asyncio.get_running_loop().time() + 20
            while True:
                got = await logs()
                if all(sorted(g) == expected for g in got):
                    break
                assert asyncio.get_running_loop().time() < deadline, got
                await asyncio.sleep(0.1)
            assert _hot(got[0]) == _hot(got[1]) == _hot(got[2])
            assert read_identity(tmp_path / "node2")["protocol"] == "epaxos"
            assert "restarted from" in cluster.log_tail(2, 200)
        finally:
            for c in clients:
                await c.close()
            cluster.stop_all()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_kvstore_runs_on_multipaxos(tmp_path):
    async def main():
        path = make_kv_cluster(
            tmp_path, 3, profile=None, protocol={"name": "multipaxos", **FAST_PROTOCOL}
        )
        nodes = [KVNode(load_kv_config(path, k), fsync=False, bootstrap=True) for k in range(3)]
        for n in nodes:
            await n.start()
        clients = []
        try:
            for n in nodes:
                host, _ = n.config.redis_address
                clients.append(
                    aioredis.Redis(
                        host=host, port=n.redis_port, protocol=2, retry=Retry(NoBackoff(), 0)
                    )
                )
            for k in range(12):
                assert await clients[k % 3].set(f"key{k}", f"v{k}") is True
                # Linearizable at every node, the leader's followers included
                # (their reads go through the log).
                assert await clients[(k + 1) % 3].get(f"key{k}") == f"v{k}".encode()
            info = await clients[1].info("replication")
            assert info["protocol"] == "multipaxos" and "snapshot_slot" not in info
        finally:
            for c in clients:
                await c.aclose()
            for n in nodes:
                await n.stop()

    asyncio.run(main())


def test_an_unknown_protocol_name_is_refused_naming_the_key_and_the_choices(tmp_path):
    base = {"cluster": {"replicas": [{"address": "127.0.0.1:7000"}]}, "tls": {"insecure": True}}
    choices = "choose one of sdpaxos, multipaxos, mencius, epaxos"
    with pytest.raises(ConfigError, match=r"cluster\.protocol\.name: unknown protocol 'raft'; "):
        parse_config({**base, "cluster": {**base["cluster"], "protocol": {"name": "raft"}}})
    with pytest.raises(ConfigError, match=re.escape(choices)):
        parse_config({**base, "cluster": {**base["cluster"], "protocol": "paxos"}}, node_id=0)
    short = parse_config({**base, "cluster": {**base["cluster"], "protocol": "mencius"}}, node_id=0)
    assert short.protocol == "mencius"
    assert parse_config(base, node_id=0).protocol == "sdpaxos"
    with pytest.raises(ValueError, match="unknown protocol 'raft'"):
        make_local_cluster(tmp_path, 3, insecure=True, protocol={"name": "raft"})


def test_a_node_of_another_protocol_cannot_join(tmp_path, caplog):
    """Node 1 runs Mencius in a Multi-Paxos cluster: node 0 dials it and node 1
    dials node 2, and each listener refuses the hello; nothing node 1 sends is
    ever stepped, and the Multi-Paxos majority goes on."""

    async def main():
        path = make_local_cluster(
            tmp_path, 3, insecure=True, protocol={"name": "multipaxos", **FAST_PROTOCOL}
        )
        configs = node_configs(path)
        odd = configs[1].__class__(**{**_fields(configs[1]), "protocol": "mencius"})
        nodes = [
            Node(configs[0], PayloadLog(), fsync=False, bootstrap=True),
            Node(odd, PayloadLog(), fsync=False, bootstrap=True),
            Node(configs[2], PayloadLog(), fsync=False, bootstrap=True),
        ]
        for n in nodes:
            await n.start()
        try:
            for k in range(10):
                await nodes[k % 2 * 2].submit(b"m%d" % k, timeout_s=20)
            await eventually(
                lambda: nodes[1].frames_rejected > 0 and nodes[2].frames_rejected > 0,
                what="both hellos refused",
            )
            assert nodes[1].replica.stats.steps == 0  # type: ignore[union-attr]
            assert nodes[0].status().peers[0].connected is False
            assert not any(p.connected for p in nodes[1].status().peers)
            assert len(nodes[0].state_machine.payloads) == 10  # type: ignore[attr-defined]
            assert nodes[1].state_machine.payloads == []  # type: ignore[attr-defined]
        finally:
            for n in nodes:
                await n.stop()
        refusals = [r.getMessage() for r in caplog.records if "running protocol" in r.getMessage()]
        assert any("'mencius'; this node runs 'multipaxos'" in m for m in refusals)
        assert any("'multipaxos'; this node runs 'mencius'" in m for m in refusals)
        # Nor does a data directory change protocol on a restart.
        with pytest.raises(NodeError, match="holds the log of protocol 'mencius'"):
            await Node(configs[1], PayloadLog(), fsync=False).start()

    with caplog.at_level(logging.WARNING, logger="sdpaxos.runtime.node"):
        asyncio.run(main())


def _fields(config):
    import dataclasses

    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}


def test_a_node_keeps_the_trace_events_it_is_asked_for(tmp_path):
    """``trace_events`` (``python -m sdpaxos node --trace-events``): the named core
    events, timed, in the status; none for a node that was not asked. The
    benchmarks read the straggler detection's events so."""

    async def main():
        path = make_local_cluster(tmp_path, 3, insecure=True, protocol=FAST_PROTOCOL)
        wanted = {"SequencerHandover", "Establish"}
        nodes = [
            Node(
                cfg, PayloadLog(), fsync=False, trace_events=wanted if k < 2 else (), bootstrap=True
            )
            for k, cfg in enumerate(node_configs(path))
        ]
        for n in nodes:
            await n.start()
        try:
            await nodes[1].submit(b"before", timeout_s=20)
            before = time.monotonic() * 1000
            nodes[0].admin("transfer_sequencer", 1)
            await eventually(lambda: nodes[1].status().is_sequencer is True, what="handed over")
            await nodes[2].submit(b"after", timeout_s=20)
            # The old sequencer hands over, then follows the new view.
            kept = nodes[0].status().events
            assert [e for _, e in kept] == ["SequencerHandover", "Establish"]
            assert before <= kept[0][0] <= kept[1][0] <= time.monotonic() * 1000
            assert {e for _, e in nodes[1].status().events} <= wanted
            assert nodes[2].status().events == ()
        finally:
            for n in nodes:
                await n.stop()

    asyncio.run(main())
