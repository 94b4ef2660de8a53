"""bench.runtime_cpu's client-path timer leans on a node's internals (its
waiting table, its flush): a change there must break this, not the tool
silently."""

import math

from bench.runtime_cpu import client_path_us


def test_the_client_path_timer_runs_and_gives_a_time_per_command() -> None:
    us = client_path_us(items=100, frames=2, passes=2)
    assert math.isfinite(us) and us > 0
