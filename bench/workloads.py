"""Workloads of the paper's evaluation, as seeded generators and per-operation records.

Why a module of its own: every experiment (latency, throughput, straggler,
failover) and every engine (simulator, real processes) draws its operations
from the same generators and records them the same way, so that two protocols
are compared on exactly the same stream of operations, and a run's history can
be written out and checked.

Conventions (the paper's section 5 and ``docs/PEERS.md`` section 5 of
the shared docs):

* **conflict rate** (``keys="conflict"``, the EPaxos client's ``-c``): each
  write goes to one hot key with probability ``conflict_pct``, otherwise to a
  key no other operation uses;
* **uniform** or **zipfian** keys (``keys="uniform"`` / ``"zipf"``) over
  ``key_count`` keys, zipf exponent 0.99 (YCSB's), for the read experiments;
* **read share**: each operation is a read with probability ``read_pct``;
* **payload**: each write carries ``payload_bytes`` (the paper: 16 B and 1 KB);
* **arrivals** for open-loop clients: Poisson or fixed interval at a rate.

Every draw comes from a ``random.Random`` seeded by ``(seed, stream)``, one
stream per client, so a client's operations do not depend on how many other
clients there are or on the protocol's timing.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

KeyMode = Literal["conflict", "uniform", "zipf"]
OpKind = Literal["write", "read"]

#: The hot key of the conflict-rate workload.
HOT_KEY = b"hot"
#: YCSB's zipfian constant, the paper's Fig. 13.
ZIPF_EXPONENT = 0.99
#: Keys of the uniform and zipfian workloads (the paper: 500,000; fewer is
#: enough to measure and keeps the zipf table small).
KEY_COUNT_DEFAULT = 100_000
#: Largest key space a workload may draw from (the zipf table is this long).
KEY_COUNT_MAX = 1_000_000
#: Largest payload, bytes (the paper's largest is 1 KB).
PAYLOAD_BYTES_MAX = 1 << 20


@dataclass(frozen=True, slots=True)
class Workload:
    """What operations a client issues; see the module docstring."""

    conflict_pct: float = 0.0
    read_pct: float = 0.0
    keys: KeyMode = "conflict"
    key_count: int = KEY_COUNT_DEFAULT
    zipf_exponent: float = ZIPF_EXPONENT
    payload_bytes: int = 16
    seed: int = 1
    #: A read goes to the key its client wrote last (so it returns a value of
    #: ``payload_bytes``), not to the key the key mode draws; a client that has
    #: not written yet reads the drawn key. The draws are the same either way.
    read_written: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.conflict_pct <= 100:
            raise ValueError(f"conflict_pct must be in 0..100, got {self.conflict_pct}")
        if not 0 <= self.read_pct <= 100:
            raise ValueError(f"read_pct must be in 0..100, got {self.read_pct}")
        if self.keys not in ("conflict", "uniform", "zipf"):
            raise ValueError(f"keys must be conflict, uniform or zipf, got {self.keys!r}")
        if not 1 <= self.key_count <= KEY_COUNT_MAX:
            raise ValueError(f"key_count must be in 1..{KEY_COUNT_MAX}")
        if not 1 <= self.payload_bytes <= PAYLOAD_BYTES_MAX:
            raise ValueError(f"payload_bytes must be in 1..{PAYLOAD_BYTES_MAX}")
        if not self.zipf_exponent > 0:
            raise ValueError("zipf_exponent must be > 0")

    def label(self) -> str:
        """A short name for tables: ``"writes, 5% conflict, 16 B"``."""
        parts = [f"{self.read_pct:g}% reads" if self.read_pct else "writes"]
        if self.keys == "conflict":
            parts.append(f"{self.conflict_pct:g}% conflict")
        else:
            parts.append(f"{self.keys} keys")
        parts.append(_size(self.payload_bytes))
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "conflict_pct": self.conflict_pct,
            "read_pct": self.read_pct,
            "keys": self.keys,
            "key_count": self.key_count,
            "zipf_exponent": self.zipf_exponent,
            "payload_bytes": self.payload_bytes,
            "seed": self.seed,
            "read_written": self.read_written,
        }


def _size(n: int) -> str:
    return f"{n // 1024} KB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


class ZipfTable:
    """Draws ranks ``0 .. n-1`` with probability proportional to ``1 / (rank + 1) ** s``.

    Why a table: inverse-CDF sampling by bisection is exact for any exponent
    (YCSB's 0.99 has no closed form) and costs one ``random()`` per draw.
    """

    __slots__ = ("_cdf",)

    def __init__(self, n: int, exponent: float) -> None:
        weights = (1.0 / (k + 1) ** exponent for k in range(n))
        cdf = list(itertools.accumulate(weights))
        total = cdf[-1]
        self._cdf = [c / total for c in cdf]

    def draw(self, rng: random.Random) -> int:
        return min(bisect.bisect_left(self._cdf, rng.random()), len(self._cdf) - 1)


_ZIPF_TABLES: dict[tuple[int, float], ZipfTable] = {}


def zipf_table(n: int, exponent: float) -> ZipfTable:
    """A shared table per ``(n, exponent)``: building one is the expensive part."""
    table = _ZIPF_TABLES.get((n, exponent))
    if table is None:
        table = _ZIPF_TABLES[(n, exponent)] = ZipfTable(n, exponent)
    return table


@dataclass(frozen=True, slots=True)
class Op:
    """One operation a client issues: a write of ``payload`` to ``key``, or a read of it."""

    kind: OpKind
    key: bytes
    payload: bytes


class OpStream:
    """The operations of one client (``stream``), reproducible from ``(workload.seed, stream)``."""

    __slots__ = ("_last_write_key", "_n", "_rng", "_zipf", "stream", "workload")

    def __init__(self, workload: Workload, stream: int) -> None:
        self.workload = workload
        self.stream = stream
        self._rng = random.Random(f"{workload.seed}:{stream}")
        self._n = 0
        self._last_write_key: bytes | None = None
        self._zipf = (
            zipf_table(workload.key_count, workload.zipf_exponent)
            if workload.keys == "zipf"
            else None
        )

    def next(self) -> Op:
        w = self.workload
        rng = self._rng
        self._n += 1
        kind: OpKind = "read" if rng.random() * 100 < w.read_pct else "write"
        if w.keys == "conflict":
            if rng.random() * 100 < w.conflict_pct:
                key = HOT_KEY
            else:
                key = b"u%d-%d" % (self.stream, self._n)
        elif self._zipf is not None:
            key = b"k%d" % self._zipf.draw(rng)
        else:
            key = b"k%d" % rng.randrange(w.key_count)
        payload = b""
        if kind == "write":
            payload = (b"s%dn%d" % (self.stream, self._n)).ljust(w.payload_bytes, b".")
            self._last_write_key = key
        elif w.read_written and self._last_write_key is not None:
            key = self._last_write_key
        return Op(kind, key, payload)

    def take(self, count: int) -> list[Op]:
        """The next ``count`` operations (the tests read a stream so)."""
        return [self.next() for _ in range(count)]


def arrivals_us(
    rate_per_s: float, start_us: int, end_us: int, *, poisson: bool, rng: random.Random
) -> Iterator[int]:
    """Open-loop arrival times in ``[start_us, end_us)`` at ``rate_per_s`` on average.

    Poisson (exponential gaps) or a fixed interval; a fixed-interval client starts
    at a random phase so that many of them do not all fire at once.
    """
    if not rate_per_s > 0:
        raise ValueError(f"rate_per_s must be > 0, got {rate_per_s}")
    gap_us = 1e6 / rate_per_s
    t = float(start_us) + (0.0 if poisson else rng.random() * gap_us)
    while True:
        if poisson:
            t += rng.expovariate(1.0) * gap_us
        at = round(t)
        if at >= end_us:
            return
        yield at
        if not poisson:
            t += gap_us


# -- per-operation records ------------------------------------------------------


@dataclass(slots=True)
class OpRecord:
    """One operation as a client saw it, in microseconds of the engine's clock.

    ``path``: ``"commit"`` (a write, complete when READY at its replica),
    ``"local"`` (a read the replica served itself) or ``"log"`` (a read sent
    through the log as a command: the protocol has no read path, or the
    replica answered not-ok). ``complete_us`` is ``None`` for an operation
    still open when the run ended.
    """

    op_id: int
    client: int
    region: str
    kind: OpKind
    key: bytes
    invoke_us: int
    complete_us: int | None = None
    path: str = "commit"
    value: str = ""


def history_lines(records: Sequence[OpRecord]) -> Iterator[str]:
    """``records`` in the JSON-lines format ``python -m sdpaxos.check`` reads.

    Writes are ``["put", key, value]`` with output ``null``; reads are
    ``["get", key]`` with no output (the engine does not return values, so
    their result is unknown to the checker: it checks the writes' real-time
    order only). An operation open at the end is ``"info"``.
    """
    for rec in sorted(records, key=lambda r: (r.invoke_us, r.op_id)):
        key = rec.key.decode("latin-1")
        obj: dict[str, Any] = {"client": rec.client}
        if rec.kind == "write":
            obj["input"] = ["put", key, rec.value]
            obj["output"] = None
        else:
            obj["input"] = ["get", key]
        obj["invoke"] = rec.invoke_us / 1e6
        if rec.complete_us is None:
            obj["status"] = "info"
        else:
            obj["complete"] = rec.complete_us / 1e6
            obj["status"] = "ok"
        obj["meta"] = f"{rec.region} {rec.path}"
        yield json.dumps(obj, separators=(",", ":"))


def write_history(records: Sequence[OpRecord], path: str | Path) -> Path:
    """Write :func:`history_lines` to ``path``; returns it."""
    p = Path(path)
    with p.open("w", encoding="utf-8") as f:
        for line in history_lines(records):
            f.write(line + "\n")
    return p


# -- statistics -------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (``fraction`` in (0, 1])."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(fraction * len(sorted_values) - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass(frozen=True, slots=True)
class Summary:
    """Latency of a group of operations, ms; ``ci95_ms`` is the half-width of the
    mean's 95 % confidence interval (normal approximation), as the paper reports."""

    count: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    ci95_ms: float

    @classmethod
    def of(cls, latencies_ms: Sequence[float]) -> Summary:
        values = sorted(latencies_ms)
        n = len(values)
        if not n:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        mean = math.fsum(values) / n
        var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
        return cls(
            n, mean, percentile(values, 0.5), percentile(values, 0.99), 1.96 * math.sqrt(var / n)
        )

    def to_json(self) -> dict[str, Any]:
        def r(v: float) -> float | None:
            return None if math.isnan(v) else round(v, 3)

        return {
            "count": self.count,
            "mean_ms": r(self.mean_ms),
            "p50_ms": r(self.p50_ms),
            "p99_ms": r(self.p99_ms),
            "ci95_ms": r(self.ci95_ms),
        }


def summarize(
    records: Sequence[OpRecord], regions: Sequence[str], kind: OpKind
) -> dict[str, Summary]:
    """Per region, the latency of completed operations of ``kind``."""
    out: dict[str, list[float]] = {r: [] for r in regions}
    for rec in records:
        if rec.kind == kind and rec.complete_us is not None and rec.region in out:
            out[rec.region].append((rec.complete_us - rec.invoke_us) / 1000)
    return {r: Summary.of(v) for r, v in out.items()}
