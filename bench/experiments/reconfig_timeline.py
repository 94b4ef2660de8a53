"""What both engines of ``python -m bench reconfig`` hand to its measurement:
the changes, as they ran, and every completion of the load.

Its own module so that the runtime half (:mod:`bench.experiments.reconfig_runtime`)
and the experiment (:mod:`bench.experiments.reconfig`) share these types
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The changes in the order the timeline makes them (both engines).
CHANGE_NAMES = (
    "add a replica (3 -> 4)",
    "replace the sequencer's node",
    "remove a member (4 -> 3)",
)
#: The change whose bound includes an election.
SEQUENCER_CHANGE = CHANGE_NAMES[1]


@dataclass
class ChangeTimes:
    """One change as it ran, in ms from the run's origin. ``done_ms`` is when
    every member of its epoch ran that epoch; ``None`` (with ``error``) when
    it did not finish."""

    name: str
    proposed_ms: float
    done_ms: float | None
    committed_ms: float | None = None
    #: The runtime: when the operator's node first showed the change pending
    #: (the learner caught up, the change's command executed; the stop next).
    pending_ms: float | None = None
    error: str = ""


@dataclass
class Timeline:
    """What either engine hands to the measurement: every completion
    ``(time_ms, region, latency_ms)`` of the regions with clients, and the changes."""

    engine: str
    rtt_ms: float
    election_ms: float
    regions: list[str]
    completions: list[tuple[float, str, float]]
    changes: list[ChangeTimes]
    end_ms: float
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
