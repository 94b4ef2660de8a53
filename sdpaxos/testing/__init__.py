"""Tools for testing a deployment of sdpaxos, not part of the library.

Nothing in the library (the core, the wire format, the runtime, the simulator,
the checker, the protocol registry, the kv-store) imports this package: these
are tools pointed at it from outside, and ``lint-imports`` keeps it that way.

``python -m sdpaxos fuzz`` throws random and mutated frames at a live node,
which must keep serving and agreeing with its peers. Its modules, each
importing only those listed after it:

* :mod:`~sdpaxos.testing.fuzz`: the command line, and whole runs against a
  local or a running cluster (:func:`fuzz_local`, :func:`fuzz_cluster`);
* :mod:`~sdpaxos.testing.fuzzer`: what is sent and why: :class:`Target`,
  :class:`Plan`, :class:`Fuzzer`;
* :mod:`~sdpaxos.testing.judging`: how the node must take each frame
  (:class:`Verdict`, :func:`judge`, :func:`judge_hello`, :func:`harmless`);
* :mod:`~sdpaxos.testing.mutations`: seeds from the real encoders, and
  :func:`mutate`;
* :mod:`~sdpaxos.testing.result`: :class:`FuzzResult`, its checks and report.
"""

from __future__ import annotations

from sdpaxos.testing.fuzz import fuzz_cluster, fuzz_local
from sdpaxos.testing.fuzzer import Fuzzer, Plan, Target
from sdpaxos.testing.judging import Verdict, harmless, judge, judge_hello
from sdpaxos.testing.mutations import MUTATIONS, mutate
from sdpaxos.testing.result import FuzzResult

__all__ = [
    "MUTATIONS",
    "FuzzResult",
    "Fuzzer",
    "Plan",
    "Target",
    "Verdict",
    "fuzz_cluster",
    "fuzz_local",
    "harmless",
    "judge",
    "judge_hello",
    "mutate",
]
