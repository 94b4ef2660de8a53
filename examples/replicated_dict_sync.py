"""A dictionary replicated on three nodes, from plain synchronous code.

SyncNode runs each node's event loop in a background thread, so a script, a
notebook or a WSGI view can call it directly. Run:
python examples/replicated_dict_sync.py
"""

import json
import tempfile

from sdpaxos import SyncNode, make_local_cluster, node_configs


class Dict:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def apply(self, payload: bytes) -> bytes:
        key, value = json.loads(payload)
        self.data[key] = value
        return b"OK"

    def snapshot(self) -> bytes:
        return json.dumps(self.data, sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        self.data = json.loads(data)

    def query(self, key: bytes) -> bytes:
        return self.data.get(key.decode(), "").encode()


with tempfile.TemporaryDirectory() as directory:
    nodes = [
        SyncNode(c, Dict(), bootstrap=True) for c in node_configs(make_local_cluster(directory, 3))
    ]
    try:
        nodes[0].submit(json.dumps(["colour", "blue"]).encode(), key=b"colour")
        nodes[1].submit(json.dumps(["shape", "round"]).encode(), key=b"shape")
        print("colour at node 2:", nodes[2].read(b"colour").decode())
        print("shape at node 0:", nodes[0].read(b"shape").decode())
    finally:
        for node in nodes:
            node.close()
