"""The paper's numbers, to print beside ours (the paper's section 5 and its figures).

Why here and not in the experiments: they are data read off the paper's
figures (approximate, "≈"), and several experiments and the report show them.
"""

from __future__ import annotations

from sdpaxos.profiles import (
    FORMULA_REPLICAS_MAX,
    DelayProfile,
    sdpaxos_commit_ms,
)


def formula_ms(profile: DelayProfile, sequencer: int) -> dict[str, float] | None:
    """SDPaxos's expected commit latency per region (``sdpaxos_commit_ms``), or
    None where there is no formula (more than five regions): nothing to judge."""
    if profile.size > FORMULA_REPLICAS_MAX:
        return None
    return sdpaxos_commit_ms(profile, sequencer)


#: The bar: SDPaxos within this share of the formula at every region.
FORMULA_TOLERANCE = 0.05

#: Fig. 12, average commit latency (ms) per region, by the paper's column name.
FIG12_MS: dict[str, dict[str, dict[str, float]]] = {
    "paper3": {
        "SDPaxos": {"CA": 21, "OR": 21, "OH": 52.5},
        "Mencius": {"CA": 37, "OR": 37, "OH": 53},
        "Mencius-imbalanced": {"CA": 42, "OR": 43, "OH": 55},
        "EPaxos-0%": {"CA": 22, "OR": 22, "OH": 52},
    },
    "paper5": {
        "SDPaxos": {"CA": 52, "OR": 70, "OH": 70, "IRE": 138, "SEL": 148},
        "Mencius": {"CA": 128, "OR": 122, "OH": 117, "IRE": 145, "SEL": 155},
        "Mencius-imbalanced": {"CA": 133, "OR": 118, "OH": 143, "IRE": 130, "SEL": 228},
        "EPaxos-0%": {"CA": 52, "OR": 70, "OH": 70, "IRE": 127, "SEL": 150},
        "EPaxos-5%": {"CA": 53, "OR": 73, "OH": 76, "IRE": 140, "SEL": 185},
        "EPaxos-50%": {"CA": 77, "OR": 110, "OH": 112, "IRE": 200, "SEL": 238},
    },
}

#: Fig. 13, SDPaxos read latency (ms) with uniform keys, R/W 1:1 (the
#: theoretical minimum: a round trip to the sequencer in CA).
FIG13_SDPAXOS_UNIFORM_MS: dict[str, dict[str, float]] = {
    "paper3": {"CA": 1.5, "OR": 21.5, "OH": 52},
    "paper5": {"CA": 1, "OR": 22, "OH": 54, "IRE": 136, "SEL": 148},
}

#: Fig. 10, throughput (thousand req/s) against conflict rate, writes only:
#: per (protocol, replicas, payload bytes), at FIG10_CONFLICT_PCTS.
FIG10_CONFLICT_PCTS = (0, 5, 25, 50, 75, 100)
FIG10_K: dict[tuple[str, int, int], tuple[float, ...]] = {
    ("sdpaxos", 3, 16): (122, 120, 123, 120, 122, 120),
    ("sdpaxos", 5, 16): (119, 118, 120, 117, 118, 119),
    ("epaxos", 3, 16): (92, 71, 65, 67, 61, 60),
    ("epaxos", 5, 16): (91, 70, 65, 58, 57, 51),
    ("sdpaxos", 3, 1024): (70, 70, 70, 69, 70, 69),
    ("sdpaxos", 5, 1024): (69, 69, 68, 68, 68, 68),
    ("epaxos", 3, 1024): (69, 65.5, 60.5, 55.5, 52.5, 45),
    ("epaxos", 5, 1024): (68, 51, 53, 52, 50, 45),
}

#: Fig. 11, throughput (thousand req/s) against read share, no straggler, no
#: conflict: SDPaxos per (replicas, payload bytes) at 0/25/50/75/100 % reads,
#: and the flat lines of the others (write-only).
FIG11_SDPAXOS_K: dict[tuple[int, int], tuple[float, ...]] = {
    (3, 16): (122, 150, 178, 345, 490),
    (5, 16): (120, 152, 195, 365, 550),
    (3, 1024): (69, 73, 94, 132, 206),
    (5, 1024): (69, 75, 109, 142, 221),
}
FIG11_READ_PCTS = (0, 25, 50, 75, 100)
FIG11_FLAT_K: dict[str, dict[tuple[int, int], float]] = {
    "mencius": {(3, 16): 115, (5, 16): 110, (3, 1024): 68, (5, 1024): 67},
    "epaxos": {(3, 16): 92, (5, 16): 92, (3, 1024): 69, (5, 1024): 68},
    "multipaxos": {(3, 16): 75, (5, 16): 57, (3, 1024): 19, (5, 1024): 11},
}

#: Fig. 9(a), 3 replicas, 16 B writes: throughput (thousand req/s) with one
#: straggler and the reduction from no straggler. "leader" is the sequencer for
#: SDPaxos (SDPaxos-S) and the leader for Multi-Paxos.
FIG9A_16B: dict[str, dict[str, tuple[float, float]]] = {
    "multipaxos": {"leader": (24, -67.2)},
    "mencius": {"other": (60, -47.7)},
    "epaxos": {"other": (71, -21.7)},
    "sdpaxos": {"leader": (88, -28.2), "other": (98, -20.0)},
}
#: Fig. 9(b): a slow sequencer is "detected within 2 seconds".
STRAGGLER_DETECTION_S = 2.0
#: Fig. 14: the OR and OH replicas stall about 300 and 400 ms after CA dies.
FIG14_STALL_MS = {"OR": 300, "OH": 400}


#: The paper's name of each protocol, as the tables and plots title their columns.
TITLES: dict[str, str] = {
    "sdpaxos": "SDPaxos",
    "multipaxos": "Multi-Paxos",
    "mencius": "Mencius",
    "epaxos": "EPaxos",
}


def sdpaxos_over(title: str, n: int, payload: int, conflict: float) -> float | None:
    """SDPaxos's write-only throughput over ``title``'s (a column of :data:`TITLES`)
    in the paper: Fig. 10 where it has the conflict rate, else Fig. 11's flat
    lines at no conflict; None where the paper has no such figure."""
    proto = {v: k for k, v in TITLES.items()}.get(title)
    if proto is None:
        return None
    pcts = FIG10_CONFLICT_PCTS
    sd10 = FIG10_K.get(("sdpaxos", n, payload))
    other10 = FIG10_K.get((proto, n, payload))
    if sd10 and other10 and conflict in pcts:
        i = pcts.index(int(conflict))
        return round(sd10[i] / other10[i], 2)
    flat = FIG11_FLAT_K.get(proto, {}).get((n, payload))
    sd = FIG11_SDPAXOS_K.get((n, payload))
    if flat is None or sd is None or conflict != 0.0:
        return None
    return round(sd[0] / flat, 2)
