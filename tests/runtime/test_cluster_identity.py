"""A node whose file names another cluster, or another initial membership,
than its peers' never takes part: its peers refuse its connections, each
says why in its status (``refused``), and the cluster serves without it.

The data directory's identity (tests/runtime/test_datadir.py) catches a file
that disagrees with the node's own records; this is the other half of the
issue's "a node whose membership or cluster identity disagrees with its
peers' never votes or accepts; it says so".
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sdpaxos.runtime.apps import PayloadLog
from sdpaxos.runtime.config import NodeConfig, ReplicaAddress
from sdpaxos.runtime.local import make_local_cluster, node_configs
from sdpaxos.runtime.node import Node

from .helpers import FAST_PROTOCOL, eventually


def _other_name(cfg: NodeConfig) -> NodeConfig:
    return dataclasses.replace(cfg, cluster_name="another-cluster")


def _other_region(cfg: NodeConfig) -> NodeConfig:
    first, *rest = cfg.replicas
    moved = ReplicaAddress(first.id, first.host, first.port, first.region + "-moved")
    return dataclasses.replace(cfg, replicas=(moved, *rest))


def test_the_identity_names_the_cluster_and_digests_what_peers_share(tmp_path: Path) -> None:
    path = make_local_cluster(tmp_path, 3, insecure=True)
    a, b, c = node_configs(path)
    # Every node of one file says the same; addresses are not part of it.
    assert a.cluster_identity == b.cluster_identity == c.cluster_identity
    assert a.cluster_identity.startswith(a.cluster_name + "/")
    first = a.replicas[0]
    moved = ReplicaAddress(first.id, first.host, first.port + 1, first.region)
    assert dataclasses.replace(a, replicas=(moved, *a.replicas[1:])).cluster_identity == (
        a.cluster_identity
    )
    # Another name, region, membership or protocol: another identity.
    others = {
        _other_name(a).cluster_identity,
        _other_region(a).cluster_identity,
        dataclasses.replace(a, replicas=a.replicas[:2]).cluster_identity,
        dataclasses.replace(a, protocol="multipaxos").cluster_identity,
    }
    assert len(others) == 4 and a.cluster_identity not in others


@pytest.mark.parametrize("change", [_other_name, _other_region], ids=["name", "region"])
def test_a_node_of_another_cluster_is_refused_and_says_why(tmp_path: Path, change: Any) -> None:
    async def main() -> None:
        path = make_local_cluster(tmp_path, 3, insecure=True, protocol=FAST_PROTOCOL)
        configs = node_configs(path)
        configs[2] = change(configs[2])  # node 2's file disagrees with its peers'
        apps = [PayloadLog() for _ in configs]
        nodes = [
            Node(cfg, app, fsync=False, bootstrap=True)
            for cfg, app in zip(configs, apps, strict=True)
        ]
        for node in nodes:
            await node.start()
        try:
            # Nodes 0 and 1 dial node 2, which refuses both, naming the two identities.
            def refused() -> bool:
                return {i for i, _ in nodes[2].status().refused} == {0, 1}

            await eventually(refused, what="node 2 refuses nodes 0 and 1")
            for _, reason in nodes[2].status().refused:
                assert "of cluster " + repr(configs[0].cluster_identity) in reason
                assert repr(configs[2].cluster_identity) in reason
            # The two that agree serve; node 2 took no part in it.
            for k in range(5):
                await nodes[0].submit(b"w%d" % k, wait="executed")
            await asyncio.sleep(0.2)
            assert nodes[0].status().executed_upto == nodes[1].status().executed_upto
            assert not nodes[2].status().executed_upto
            assert apps[0].payloads == apps[1].payloads == [b"w%d" % k for k in range(5)]
            assert apps[2].payloads == []
            assert nodes[0].status().refused == ()
        finally:
            for node in nodes:
                await node.stop()

    asyncio.run(main())
