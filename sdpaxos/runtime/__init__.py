"""The runtime: what runs the pure core for real.

* :mod:`~sdpaxos.runtime.node`: :class:`Node`, one replica on an asyncio loop
  (driver loop, group commit, connections), and its embedding API;
* :mod:`~sdpaxos.runtime.client`: :class:`Client`, exactly-once across retries;
* :mod:`~sdpaxos.runtime.sync`: :class:`SyncNode`, :class:`SyncClient` for code
  without an event loop;
* :mod:`~sdpaxos.runtime.log`: the durable log (the core's ``Storage`` on disk);
* :mod:`~sdpaxos.runtime.datadir`: a node's data directory, and whose it is
  (refused when empty unless bootstrapping, or of another cluster);
* :mod:`~sdpaxos.runtime.transport`, :mod:`~sdpaxos.runtime.frames`,
  :mod:`~sdpaxos.runtime.tls`: framed TCP with mutual TLS;
* :mod:`~sdpaxos.runtime.emulator`: the network-delay emulator;
* :mod:`~sdpaxos.runtime.metrics`: Prometheus metrics;
* :mod:`~sdpaxos.runtime.config`, :mod:`~sdpaxos.runtime.local`,
  :mod:`~sdpaxos.runtime.certs`, :mod:`~sdpaxos.runtime.cli`,
  :mod:`~sdpaxos.runtime.cliargs`: configuration, local clusters, certificates,
  and ``python -m sdpaxos`` (its options and their checks);
* :mod:`~sdpaxos.runtime.apps`: state machines for ``node --app`` (and tests);
* :mod:`~sdpaxos.runtime.fuzz`: ``python -m sdpaxos fuzz``, hostile frames at a
  live node.
"""
