"""The runtime: what runs the pure core for real.

* :mod:`~sdpaxos.runtime.node`: :class:`Node`, one replica on an asyncio loop,
  the facade of the embedding API over three parts:
  :mod:`~sdpaxos.runtime.driver` (the replica and its durable log: group
  commit, release in batch order), :mod:`~sdpaxos.runtime.peers` (the other
  replicas' connections and frames) and :mod:`~sdpaxos.runtime.clients`
  (remote clients' requests), with :mod:`~sdpaxos.runtime.calls` for the
  node's own callers; :mod:`~sdpaxos.runtime.status` and
  :mod:`~sdpaxos.runtime.errors` hold what they share with callers;
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
  :mod:`~sdpaxos.runtime.cliargs`: configuration, local clusters,
  certificates, and ``python -m sdpaxos`` (its option checks in ``cliargs``);
* :mod:`~sdpaxos.runtime.apps`: state machines for ``node --app`` (and tests).

``python -m sdpaxos fuzz`` (hostile frames at a live node) is a testing tool,
not part of the runtime: it lives in :mod:`sdpaxos.testing`.
"""
