"""``reconfig --engine runtime``: the membership changes on real node processes (being built)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.common import Context

if TYPE_CHECKING:
    from bench.experiments.reconfig import Timeline


def run_runtime(ctx: Context) -> Timeline:
    raise NotImplementedError("reconfig --engine runtime is not built yet; use --engine sim")
