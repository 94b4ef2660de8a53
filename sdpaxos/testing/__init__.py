"""Tools for testing a deployment of sdpaxos, not part of the library.

Nothing in the library (the core, the wire format, the runtime, the simulator,
the checker, the protocol registry, the kv-store) imports this package: these
are tools pointed at it from outside, and ``lint-imports`` keeps it that way.

* :mod:`~sdpaxos.testing.fuzz`: ``python -m sdpaxos fuzz``, random and mutated
  frames thrown at a live node, which must keep serving and agreeing with its
  peers.
"""

from __future__ import annotations

from sdpaxos.testing.fuzz import (
    Fuzzer,
    FuzzResult,
    Plan,
    Target,
    Verdict,
    fuzz_cluster,
    fuzz_local,
    judge,
    judge_hello,
)

__all__ = [
    "FuzzResult",
    "Fuzzer",
    "Plan",
    "Target",
    "Verdict",
    "fuzz_cluster",
    "fuzz_local",
    "judge",
    "judge_hello",
]
