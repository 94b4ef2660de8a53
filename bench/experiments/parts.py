"""The experiments the report is made of, each imported only when it runs.

Why a module of its own: ``python -m bench`` runs one of these or the report,
and the report runs all of them; with the dispatch here both import it and
neither imports the other (the report once imported ``bench.__main__``, which
imports the report: an import cycle).
"""

from __future__ import annotations

from collections.abc import Callable

from bench.common import Context

__all__ = ["ALONE", "PARTS", "part"]

#: The experiments of the report, in the order it shows them.
PARTS = ("latency", "throughput", "straggler", "failover")
#: Experiments of ``python -m bench`` the report does not run: ``reconfig``
#: (issue 31's membership changes; the paper has no such figure to set beside).
ALONE = ("reconfig",)


def part(name: str) -> Callable[[Context], int]:
    """The ``run`` of experiment ``name`` (one of :data:`PARTS` or :data:`ALONE`),
    imported now: each pulls in its own dependencies."""
    if name == "latency":
        from bench.experiments import latency

        return latency.run
    if name == "throughput":
        from bench.experiments import throughput

        return throughput.run
    if name == "straggler":
        from bench.experiments import straggler

        return straggler.run
    if name == "failover":
        from bench.experiments import failover

        return failover.run
    if name == "reconfig":
        from bench.experiments import reconfig

        return reconfig.run
    raise ValueError(f"no experiment {name!r}; choose from {', '.join(PARTS + ALONE)}")
