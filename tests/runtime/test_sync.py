"""The synchronous facades: a node and a client driven from plain threads."""

from __future__ import annotations

import threading

import pytest

from sdpaxos.runtime.apps import PayloadLog
from sdpaxos.runtime.local import client_tls, make_local_cluster, node_configs
from sdpaxos.runtime.node import NodeError
from sdpaxos.runtime.sync import SyncClient, SyncNode

from .helpers import FAST_PROTOCOL, payloads_of


def test_sync_node_and_client_from_many_threads(tmp_path):
    path = make_local_cluster(tmp_path, 3, protocol=FAST_PROTOCOL)
    nodes = [SyncNode(c, PayloadLog(), fsync=False, bootstrap=True) for c in node_configs(path)]
    try:
        errors = []

        def work(k):
            try:
                for j in range(10):
                    nodes[k % 3].submit(b"t%d-%d" % (k, j), timeout_s=20)
            except Exception as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(payloads_of(nodes[1].read())) == 60
        assert nodes[0].status().executed_upto > 0
        addresses = [(n.node.config.me.host, n.node.bound_port) for n in nodes]
        with SyncClient(addresses, tls=client_tls(path)) as client:
            assert int.from_bytes(client.submit(b"c", wait="executed"), "big") == 61
            assert payloads_of(client.read())[-1] == b"c"
            assert client.status()["id"] in (0, 1, 2)
    finally:
        for n in nodes:
            n.close()
    with pytest.raises(NodeError, match="closed"):
        nodes[0].submit(b"after close")
