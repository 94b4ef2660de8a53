"""bench.cluster, the one way the benchmarks start node processes and wait for them:
what "up" means, how a wait gives up, and kv-store and SDPaxos nodes started,
seen up (or seen dead, with their log) and ended. No duration is asserted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bench.cluster import KvNodes, NodeExited, SdpaxosNodes, WrongLeader, is_up, wait_until
from kvstore.cluster import redis_ping
from kvstore.local import make_kv_cluster


def _status(connected: bool = True, leads: bool = False) -> dict[str, Any]:
    return {
        "peers": [{"connected": connected}, {"connected": True}],
        "is_sequencer": leads,
        "has_lease": leads,
    }


def test_up_is_every_node_answering_seeing_its_peers_and_a_leader_with_its_lease() -> None:
    up = [_status(leads=True), _status(), _status()]
    assert is_up(up, "sdpaxos", None) and is_up(up, "sdpaxos", 0)
    assert not is_up([*up[:2], None], "sdpaxos", None)  # a node does not answer
    assert not is_up([up[0], _status(connected=False), up[2]], "sdpaxos", 0)
    assert not is_up([_status(), _status(), _status()], "multipaxos", None)  # no lease yet
    assert is_up([_status(), _status(), _status()], "epaxos", None)  # no leader to wait for
    assert not is_up([], "epaxos", None)
    with pytest.raises(WrongLeader) as exc:
        is_up(up, "sdpaxos", 2)
    assert exc.value.leader == 0
    assert is_up([_status(leads=True), _status(), _status(leads=True)], "sdpaxos", 2)


def test_a_wait_gives_up_saying_what_is_missing_or_when_its_check_raises() -> None:
    asked: list[int] = []
    wait_until(lambda: asked.append(1) or len(asked) == 3, timeout_s=60, what=str, interval_s=0)
    assert len(asked) == 3
    with pytest.raises(RuntimeError, match="node 2 did not answer"):
        wait_until(lambda: False, timeout_s=0, what=lambda: "node 2 did not answer")

    def dead() -> None:
        raise NodeExited("node 1 exited")

    with pytest.raises(NodeExited):
        wait_until(lambda: True, timeout_s=60, what=str, check=dead)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_kv_store_nodes_come_up_answer_ping_and_are_ended(tmp_path: Path) -> None:
    path = make_kv_cluster(tmp_path, 3, profile=None, protocol={"heartbeat_ms": 100.0})
    with KvNodes(path, fsync=False) as nodes:
        assert "--bootstrap" in nodes.command(0)
        nodes.start_up()
        assert all(redis_ping(*nodes.redis_address(k)) for k in range(3))
        assert "--bootstrap" not in nodes.command(0)  # a restart keeps its data
        pids = [p for p in nodes.pids if p is not None]
    assert len(pids) == 3 and all(_gone(p) for p in pids)
    assert (tmp_path / "node0.log").exists()  # not its directory: it deletes nothing


def test_a_node_that_dies_while_the_cluster_starts_is_reported_with_its_log(
    tmp_path: Path,
) -> None:
    nodes = SdpaxosNodes.create(
        tmp_path / "c", 3, cluster={"insecure": True}, app="no_such_module:App", own_dir=True
    )
    with pytest.raises(NodeExited, match=r"node \d exited with") as exc, nodes:
        nodes.start_up()
    assert "no_such_module" in str(exc.value)
    assert not (tmp_path / "c").exists()


def test_metrics_ports_are_never_the_clusters_peer_ports(tmp_path: Path, monkeypatch) -> None:
    """Ports are free when drawn, not reserved: a draw after the cluster file's
    may return a peer's port, and that node's metrics server could not bind."""
    import sdpaxos.runtime.local
    from sdpaxos.runtime.local import make_local_cluster

    path = make_local_cluster(tmp_path, 3, insecure=True)
    peers = [r.port for r in sdpaxos.runtime.local.node_configs(path)[0].replicas]

    def peers_first(count: int, host: str = "127.0.0.1") -> list[int]:
        return (peers + [40000 + k for k in range(count)])[:count]  # an unlucky draw

    monkeypatch.setattr(sdpaxos.runtime.local, "free_ports", peers_first)
    nodes = SdpaxosNodes(path, metrics=True)
    assert len(nodes.metrics_ports) == 3 and not set(nodes.metrics_ports) & set(peers)
