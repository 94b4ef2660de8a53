"""The ``throughput`` experiment's cells and what is derived from them.

A cell is one protocol (a :class:`Column`) at one replica count, payload, read
share and conflict rate (:data:`CellKey`); its JSON is the median run's
figures. This module holds what both halves of the experiment read: the
:class:`Settings`, the issue's :data:`BARS`, and the comparisons between cells
(:func:`bar_rows`, :func:`ratio_rows`), so that the run
(:mod:`bench.experiments.throughput`) and its tables and plots
(:mod:`bench.experiments.throughput_report`) both import it and not each other.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, TypeGuard

from bench import paper

TITLES = paper.TITLES

#: The issue's bars: SDPaxos over the other, (column, replicas, payload, conflict %).
BARS: list[tuple[str, int, int, float, float]] = [
    ("Multi-Paxos", 5, 16, 0.0, 2.0),
    ("Multi-Paxos", 5, 1024, 0.0, 6.0),
    ("EPaxos", 5, 16, 5.0, 1.7),
    ("EPaxos", 3, 16, 5.0, 1.7),
]


@dataclass(frozen=True, slots=True)
class Settings:
    replicas: tuple[int, ...]
    payloads_bytes: tuple[int, ...]
    #: Fig. 10's conflict rates (SDPaxos and EPaxos, writes only).
    conflicts_pct: tuple[float, ...]
    #: Fig. 11's read shares (every protocol, no conflict).
    read_pcts: tuple[float, ...]
    #: Closed-loop sessions per replica (each one operation outstanding).
    sessions: int
    warmup: int
    commands: int
    #: Runs per cell, one per pass over every cell; the cell is the run with
    #: the median CPU capacity (the bytes are the same in every run: the
    #: driver is deterministic).
    repeats: int
    #: Also Multi-Paxos with clients at every replica (forwarding).
    forwarding: bool
    #: Passes over the bars' cells only, after the passes over every cell, each
    #: bar's two cells back to back. Why: a bar is judged on the median of its
    #: pass ratios, and one pass's ratio moves by 0.2 or more on this machine
    #: (its slow spells last about a second, as long as a cell's run); three
    #: ratios give a median that moves almost as much.
    bar_passes: int = 0
    #: Each protocol's cells in a worker process of its own
    #: (:class:`bench.rounds.ProtocolWorkers`: why); False runs every cell in
    #: this process.
    isolated: bool = True


@dataclass(frozen=True, slots=True)
class Column:
    """One line of a figure: a protocol and where its clients are."""

    title: str
    protocol: str
    clients_at: str = "all"


CellKey = tuple[str, str, int, int, float, float]  # title, protocol, n, payload, reads, conflict


def passed(cell: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether ``cell`` ran and passed its checks (then it is a cell, not None)."""
    return cell is not None and cell.get("status") == "ok"


def find_cell(
    cells: dict[CellKey, dict[str, Any]],
    title: str,
    n: int,
    payload: int,
    reads: float = 0.0,
    conflict: float = 0.0,
) -> dict[str, Any] | None:
    for (t, _p, nn, pp, rr, cc), cell in cells.items():
        if (t, nn, pp, rr, cc) == (title, n, payload, reads, conflict):
            return cell
    return None


def ratio_of(sd: dict[str, Any] | None, other: dict[str, Any] | None, field: str) -> float | None:
    if not (passed(sd) and passed(other)) or sd is None or other is None or not other[field] > 0:
        return None
    return round(float(sd[field]) / float(other[field]), 2)


def pass_ratios_of(sd: dict[str, Any] | None, other: dict[str, Any] | None) -> list[float]:
    """SDPaxos's CPU capacity over the other's, pass by pass (the two cells ran
    next to each other in each pass; see
    :func:`bench.experiments.throughput.run`)."""
    if not (passed(sd) and passed(other)) or sd is None or other is None:
        return []
    a, b = sd.get("capacity_runs_per_s") or [], other.get("capacity_runs_per_s") or []
    if len(a) != len(b):
        return []
    return [round(x / y, 2) for x, y in zip(a, b, strict=True) if y > 0]


def bar_rows(cells: dict[CellKey, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for title, n, payload, conflict, bar in BARS:
        sd = find_cell(cells, "SDPaxos", n, payload, 0.0, conflict)
        other = find_cell(cells, title, n, payload, 0.0, conflict)
        # The ratio of each pass, and their median: this machine's slow spells
        # last seconds, and both cells of a pass ran within them.
        pass_ratios = pass_ratios_of(sd, other)
        out.append(
            {
                "over": title,
                "replicas": n,
                "payload_bytes": payload,
                "conflict_pct": conflict,
                "bar": bar,
                "paper": paper.sdpaxos_over(title, n, payload, conflict),
                "cpu": ratio_of(sd, other, "capacity_per_s"),
                "cpu_pass_ratios": pass_ratios,
                "cpu_paired": median_or_none(pass_ratios),
                "cpu_nic": ratio_of(sd, other, "capacity_both_per_s"),
                "nic": ratio_of(sd, other, "nic_capacity_per_s"),
                "nic_peers_only": ratio_of(sd, other, "nic_peers_only_capacity_per_s"),
                "closed_loop": ratio_of(sd, other, "ops_per_round"),
                "bound_sdpaxos": sd.get("bound") if passed(sd) and sd else None,
                "bound_other": other.get("bound") if passed(other) and other else None,
                # The NIC model for a leader that sends every payload to N-1
                # peers against replicas that each send (N-1)/N of them: N
                # counting replica links only, N-1 with the clients' requests
                # arriving at the replicas (an SDPaxos replica then takes in one
                # payload per command: a 1/N share from clients, (N-1)/N from peers).
                "nic_theory_peers_only": n if title.startswith("Multi-Paxos") else None,
                "nic_theory_with_clients": n - 1 if title.startswith("Multi-Paxos") else None,
            }
        )
    return out


def median_or_none(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def ratio_rows(cells: dict[CellKey, dict[str, Any]], settings: Settings) -> list[dict[str, Any]]:
    """SDPaxos's write-only capacity over every other column's, each cell of Fig. 10/11."""
    out = []
    for (title, _proto, n, payload, reads, conflict), cell in cells.items():
        if title == "SDPaxos" or reads != 0.0:
            continue
        sd = find_cell(cells, "SDPaxos", n, payload, 0.0, conflict)
        out.append(
            {
                "over": title,
                "replicas": n,
                "payload_bytes": payload,
                "conflict_pct": conflict,
                "cpu": ratio_of(sd, cell, "capacity_per_s"),
                "cpu_nic": ratio_of(sd, cell, "capacity_both_per_s"),
                "paper": paper.sdpaxos_over(title, n, payload, conflict),
            }
        )
    return out
