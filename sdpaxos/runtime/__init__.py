"""The runtime: what runs the pure core for real (issue 9, in progress).

So far: :mod:`sdpaxos.runtime.log`, the durable log (the core's ``Storage`` on
disk); :mod:`sdpaxos.runtime.config`, a node's TOML configuration checked key
by key; and :mod:`sdpaxos.runtime.certs` (``python -m sdpaxos certs``), the
cluster CA and the node and client certificates for mutual TLS. The asyncio
node, transport and embedding API come next.
"""
