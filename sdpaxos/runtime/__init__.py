"""The runtime: what runs the pure core for real (issue 9, in progress).

So far: :mod:`sdpaxos.runtime.log`, the durable log (the core's ``Storage`` on
disk), and :mod:`sdpaxos.runtime.config`, a node's TOML configuration checked
key by key. The asyncio node, transport and embedding API come next.
"""
