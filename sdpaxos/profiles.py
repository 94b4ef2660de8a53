"""Delay profiles: region names and their round-trip-time matrix.

Shared by the simulator (:mod:`sdpaxos.sim.network`) and the runtime's delay
emulator, so it sits beside both, importing neither.

Built in are the deployments of the SDPaxos paper's Table 1: ``paper3``
(CA, OR, OH) and ``paper5`` (CA, OR, OH, IRE, SEL). Papers publish
round trips, so a profile stores RTTs and the one-way delay of a link is half
of it, unless an explicit (possibly asymmetric) ``one_way_ms`` matrix is
given. The diagonal is the round trip inside a region, i.e. client <-> local
replica; replicas never message themselves over the network.

User matrices come as JSON::

    {"regions": ["A", "B", "C"],
     "rtt_ms": [[0.5, 40, 80], [40, 0.5, 60], [80, 60, 0.5]],
     "one_way_ms": null}

and are validated with errors that name the offending entry.
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdpaxos.core.quorum import accept_quorum

Matrix = tuple[tuple[float, ...], ...]

#: Most regions a profile may have (the core allows up to 256 replicas).
REGIONS_MAX = 256


class ProfileError(ValueError):
    """A delay profile (built-in name, JSON file or matrix) is invalid."""


def _as_matrix(name: str, raw: Any, regions: Sequence[str]) -> Matrix:
    n = len(regions)
    if not isinstance(raw, (list, tuple)) or len(raw) != n:
        got = len(raw) if isinstance(raw, (list, tuple)) else type(raw).__name__
        raise ProfileError(f"{name} must have {n} rows (one per region), got {got}")
    rows: list[tuple[float, ...]] = []
    for i, row in enumerate(raw):
        if not isinstance(row, (list, tuple)) or len(row) != n:
            got = len(row) if isinstance(row, (list, tuple)) else type(row).__name__
            raise ProfileError(f"{name} row {i} ({regions[i]}) must have {n} entries, got {got}")
        values: list[float] = []
        for j, v in enumerate(row):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ProfileError(
                    f"{name}[{regions[i]}][{regions[j]}] must be a number, got {v!r}"
                )
            if not math.isfinite(v) or v < 0:
                raise ProfileError(
                    f"{name}[{regions[i]}][{regions[j]}] must be finite and >= 0, got {v!r}"
                )
            values.append(float(v))
        rows.append(tuple(values))
    return tuple(rows)


@dataclass(frozen=True, slots=True)
class DelayProfile:
    """Regions (one replica each) and the delays between them.

    Attributes:
        name: for reports.
        regions: region names, replica ``i`` lives in ``regions[i]``.
        rtt_ms: symmetric round-trip matrix; ``rtt_ms[i][i]`` is the client hop RTT.
        one_way_ms: optional per-direction override (``one_way_ms[src][dst]``);
            defaults to ``rtt_ms / 2``.
    """

    name: str
    regions: tuple[str, ...]
    rtt_ms: Matrix
    one_way_ms: Matrix | None = None

    def __post_init__(self) -> None:
        n = len(self.regions)
        if n < 1 or n > REGIONS_MAX:
            raise ProfileError(f"a profile needs 1..{REGIONS_MAX} regions, got {n}")
        for r in self.regions:
            if not isinstance(r, str) or not r:
                raise ProfileError(f"region names must be non-empty strings, got {r!r}")
        dupes = sorted({r for r in self.regions if self.regions.count(r) > 1})
        if dupes:
            raise ProfileError(f"duplicate region names: {', '.join(dupes)}")
        _as_matrix("rtt_ms", self.rtt_ms, self.regions)
        for i in range(n):
            for j in range(i + 1, n):
                a, b = self.rtt_ms[i][j], self.rtt_ms[j][i]
                if a != b:
                    raise ProfileError(
                        f"rtt_ms must be symmetric: {self.regions[i]}->{self.regions[j]} is {a}"
                        f" but {self.regions[j]}->{self.regions[i]} is {b}"
                        " (use one_way_ms for asymmetric paths)"
                    )
        if self.one_way_ms is not None:
            _as_matrix("one_way_ms", self.one_way_ms, self.regions)

    @classmethod
    def from_lists(
        cls,
        name: str,
        regions: Sequence[str],
        rtt_ms: Any,
        one_way_ms: Any = None,
    ) -> "DelayProfile":
        """Build and validate a profile from plain lists (e.g. parsed JSON)."""
        if isinstance(regions, str) or not isinstance(regions, (list, tuple)):
            raise ProfileError(f"regions must be a list of names, got {regions!r}")
        regs = tuple(regions)
        for r in regs:
            if not isinstance(r, str) or not r:
                raise ProfileError(f"region names must be non-empty strings, got {r!r}")
        rtt = _as_matrix("rtt_ms", rtt_ms, regs)
        one_way = None if one_way_ms is None else _as_matrix("one_way_ms", one_way_ms, regs)
        return cls(name, regs, rtt, one_way)

    @property
    def size(self) -> int:
        return len(self.regions)

    def index(self, region: str) -> int:
        """Replica id of ``region`` (a name, or a decimal index)."""
        if region in self.regions:
            return self.regions.index(region)
        if region.isdecimal() and int(region) < self.size:
            return int(region)
        raise ProfileError(
            f"unknown region {region!r}; profile {self.name} has {', '.join(self.regions)}"
        )

    def one_way_us(self, src: int, dst: int) -> int:
        """One-way delay of link ``src -> dst`` in integer microseconds."""
        if self.one_way_ms is not None:
            return round(self.one_way_ms[src][dst] * 1000)
        return round(self.rtt_ms[src][dst] * 1000 / 2)

    def client_rtt_us(self, region: int) -> int:
        """Client <-> local replica round trip (the diagonal)."""
        return round(self.rtt_ms[region][region] * 1000)

    def replica_rtt_ms(self) -> Matrix:
        """The matrix to hand to ``ClusterConfig(rtt_ms=...)``: configured proximity.

        The diagonal is zeroed: it is the client hop, and a replica is at
        distance zero from itself.
        """
        n = self.size
        return tuple(
            tuple(0.0 if i == j else self.rtt_ms[i][j] for j in range(n)) for i in range(n)
        )

    def subset(self, regions: Sequence[str]) -> "DelayProfile":
        """The profile restricted to ``regions`` (in the given order)."""
        idx = [self.index(r) for r in regions]
        if len(set(idx)) != len(idx):
            raise ProfileError(f"--replicas lists a region twice: {', '.join(regions)}")
        names = tuple(self.regions[i] for i in idx)
        rtt = tuple(tuple(self.rtt_ms[i][j] for j in idx) for i in idx)
        ow = (
            None
            if self.one_way_ms is None
            else tuple(tuple(self.one_way_ms[i][j] for j in idx) for i in idx)
        )
        return DelayProfile(f"{self.name}[{','.join(names)}]", names, rtt, ow)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "regions": list(self.regions),
            "rtt_ms": [list(r) for r in self.rtt_ms],
            "one_way_ms": None if self.one_way_ms is None else [list(r) for r in self.one_way_ms],
        }


_TABLE1_REGIONS = ("CA", "OR", "OH", "IRE", "SEL")
#: SDPaxos paper Table 1 (round trips in ms; diagonal = inside one region).
_TABLE1_RTT_MS: Matrix = (
    (1.16, 20.0, 52.0, 139.0, 146.0),
    (20.0, 0.02, 68.0, 125.0, 133.0),
    (52.0, 68.0, 1.1, 84.0, 197.0),
    (139.0, 125.0, 84.0, 0.48, 229.0),
    (146.0, 133.0, 197.0, 229.0, 1.11),
)

PAPER5 = DelayProfile("paper5", _TABLE1_REGIONS, _TABLE1_RTT_MS)
PAPER3 = DelayProfile("paper3", _TABLE1_REGIONS[:3], tuple(r[:3] for r in _TABLE1_RTT_MS[:3]))

BUILTIN: dict[str, DelayProfile] = {"paper3": PAPER3, "paper5": PAPER5}


def uniform(n: int, rtt_ms: float, *, local_rtt_ms: float = 0.5, name: str = "") -> DelayProfile:
    """``n`` regions ``R0..R{n-1}``, every pair ``rtt_ms`` apart."""
    if not 1 <= n <= REGIONS_MAX:
        # Checked here, not only by DelayProfile: the n x n matrix comes first,
        # and for a typo like uniform100000 it fills the memory.
        raise ProfileError(f"a profile needs 1..{REGIONS_MAX} regions, got {n}")
    regions = tuple(f"R{i}" for i in range(n))
    rtt = tuple(tuple(local_rtt_ms if i == j else rtt_ms for j in range(n)) for i in range(n))
    return DelayProfile(name or f"uniform{n}x{rtt_ms:g}", regions, rtt)


def builtin(name: str) -> DelayProfile:
    """A built-in profile by name: ``paper3``, ``paper5``, or ``uniformN`` (100 ms RTT)."""
    if name in BUILTIN:
        return BUILTIN[name]
    if name.startswith("uniform") and name[len("uniform") :].isdecimal():
        return uniform(int(name[len("uniform") :]), 100.0, name=name)
    known = ", ".join(sorted(BUILTIN))
    raise ProfileError(f"unknown profile {name!r}; built-in: {known}, uniformN")


def load_json(path: str | Path) -> DelayProfile:
    """Load a user matrix from a JSON file (format in the module docstring)."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"cannot read matrix file {p}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ProfileError(f"matrix file {p} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ProfileError(f"matrix file {p} must hold a JSON object")
    unknown = sorted(set(raw) - {"name", "regions", "rtt_ms", "one_way_ms"})
    if unknown:
        raise ProfileError(f"matrix file {p}: unknown keys {', '.join(unknown)}")
    for key in ("regions", "rtt_ms"):
        if key not in raw:
            raise ProfileError(f"matrix file {p} lacks {key!r}")
    name = raw.get("name", p.stem)
    if not isinstance(name, str):
        raise ProfileError(f"matrix file {p}: name must be a string")
    return DelayProfile.from_lists(name, raw["regions"], raw["rtt_ms"], raw.get("one_way_ms"))


#: Most replicas :func:`sdpaxos_commit_ms` has a formula for.
FORMULA_REPLICAS_MAX = 5


def sdpaxos_commit_ms(profile: DelayProfile, sequencer: int) -> dict[str, float]:
    """SDPaxos's commit latency per region at light load, with no faults: the
    rules of ``docs/protocol.md`` sections 5.3 to 5.6, from ``propose`` to READY
    at the command leader (the client's hop left out), thrifty quorums ordered
    as :class:`sdpaxos.core.proximity.Proximity` orders them (configured round
    trips, ring order on ties).

    What a deployment should expect before it measures: ``python -m bench latency
    --profile`` prints it beside what each region measured.

    * The C-instance: the round trip to the farthest replica of the leader's
      thrifty quorum (its nearest peers that make a phase-2 quorum with it:
      ``N // 2`` of them, one at N = 4).
    * The sequencer's own command: that alone (its O-accept travels with it).
    * Another's: the longer of that and the round trip to the sequencer (the
      two-acceptor rule for N = 5, ordinary Paxos for N = 3, and a phase-2
      quorum of two for N = 4).

    Up to five replicas only, where one round trip is the claim and the rule is
    exact (``tests/sim/test_latency.py`` checks it on random matrices). With
    seven or more, an O-instance needs a majority whose O-ACKs reach the leader
    by whichever O-accept carried its slot first, which depends on the load.

    Raises:
        ProfileError: ``sequencer`` is not a replica of ``profile``, or the
            profile has more than five regions.
    """
    n = profile.size
    if not 0 <= sequencer < n:
        raise ProfileError(f"sequencer {sequencer} is not a replica of {profile.name} (0..{n - 1})")
    if n > FORMULA_REPLICAS_MAX:
        raise ProfileError(
            f"no latency formula for {n} replicas (up to {FORMULA_REPLICAS_MAX}: one round trip)"
        )
    rtt = profile.replica_rtt_ms()

    def one_way(src: int, dst: int) -> float:
        return profile.one_way_us(src, dst) / 1000

    def near(me: int) -> list[int]:
        return sorted((p for p in range(n) if p != me), key=lambda p: (rtt[me][p], (p - me) % n))

    quorum_size = accept_quorum(n)
    out: dict[str, float] = {}
    for leader in range(n):
        quorum = near(leader)[: quorum_size - 1]
        latency = max((one_way(leader, p) + one_way(p, leader) for p in quorum), default=0.0)
        if leader != sequencer:
            to_sequencer = one_way(leader, sequencer)
            latency = max(latency, to_sequencer + one_way(sequencer, leader))
        out[profile.regions[leader]] = round(latency, 3)
    return out
