"""A counter replicated on three nodes of this machine (asyncio, mutual TLS).

Every node adds what any node submits, in the same order; a read at any node
is linearizable. Run: python examples/replicated_counter.py
"""

import asyncio
import contextlib
import tempfile

from sdpaxos import Node, make_local_cluster, node_configs


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def apply(self, payload: bytes) -> bytes:
        self.value += int(payload)
        return str(self.value).encode()

    def snapshot(self) -> bytes:
        return str(self.value).encode()

    def restore(self, data: bytes) -> None:
        self.value = int(data)

    def query(self, request: bytes) -> bytes:
        return str(self.value).encode()


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        configs = node_configs(make_local_cluster(directory, replicas=3))
        async with contextlib.AsyncExitStack() as stack:
            nodes = [
                await stack.enter_async_context(Node(c, Counter(), bootstrap=True)) for c in configs
            ]
            await asyncio.gather(*(node.submit(b"1") for node in nodes for _ in range(10)))
            print("total at node 2:", (await nodes[2].read()).decode())


if __name__ == "__main__":
    asyncio.run(main())
