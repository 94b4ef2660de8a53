"""Run ``redis-benchmark`` against one or more addresses and parse what it prints.

Why a wrapper
-------------
The kv-store vs PySyncObj comparison needs the same ``redis-benchmark`` settings
(``-t set,get -d 16``, a pipeline depth, a client count, a request count, a key
space) in every run, and its figures as data rather than text. ``redis-benchmark``
(Debian 12: package ``redis-tools``, version 7.0.15) prints with ``--csv`` one
header line and one line per test::

    "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",...
    "SET","383141.75","1.686","0.320","1.455","3.855","6.423","7.207"

:func:`parse_csv` turns that into ``{"SET": {"rps": ..., "p50_ms": ..., ...}}``.

Spreading over several nodes
----------------------------
The kv-store accepts writes at every node, so a fair load spreads its clients
over all of them. ``redis-benchmark`` talks to one address, so
:func:`run_spread` starts one ``redis-benchmark`` per address at the same time,
splitting ``-c`` and ``-n`` evenly, **one test at a time** (SET on every node,
then GET on every node) so that the processes' runs overlap in time. Merging:

* ``rps`` is the sum of the per-process rates (each measured over its own run);
  ``rps_conservative`` is the total request count over the slowest process's
  duration (``n_i / rps_i``), a lower bound when the processes do not end
  together.
* ``avg_ms`` is exact: the request-weighted mean of the per-process means.
* ``min_ms`` / ``max_ms`` are exact: min of mins, max of maxes.
* ``p50_ms`` / ``p95_ms`` / ``p99_ms`` are an **approximation**: the
  request-weighted mean of the per-process percentiles. Exact merged
  percentiles need the histograms, which ``redis-benchmark`` does not print;
  with evenly split clients on symmetric nodes the per-process percentiles are
  close and the approximation is good, with asymmetric nodes it is not.

Self-test: ``--start-redis-server`` runs a throw-away ``redis-server`` on a free
loopback port in a temporary directory (no persistence) and benchmarks it.
Nothing in ``sdpaxos`` or ``kvstore`` imports this module.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python bench/redis_benchmark.py`` (bench/README.md)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.cluster import wait_until
from kvstore.cluster import redis_ping

#: How long a throw-away ``redis-server`` gets to answer PING.
START_TIMEOUT_S = 10.0

#: CSV column -> key in the parsed result (``redis-benchmark`` 7.x names).
CSV_COLUMNS: dict[str, str] = {
    "rps": "rps",
    "avg_latency_ms": "avg_ms",
    "min_latency_ms": "min_ms",
    "p50_latency_ms": "p50_ms",
    "p95_latency_ms": "p95_ms",
    "p99_latency_ms": "p99_ms",
    "max_latency_ms": "max_ms",
}

TestResult = dict[str, float]
Results = dict[str, TestResult]


@dataclass(frozen=True)
class Address:
    """One ``host:port`` to benchmark."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        """Parse ``host:port`` (the last colon splits, so bare IPv6 is not supported)."""
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"expected host:port, got {text!r}")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_csv(text: str) -> Results:
    """Parse ``redis-benchmark --csv`` output into ``{test: {rps, avg_ms, p50_ms, ...}}``.

    Lines that are not CSV rows of known columns (warnings such as "Could not
    fetch server CONFIG" go to stderr, but be lenient) are skipped; a missing
    header is an error because the column order would be a guess.
    """
    rows = [line for line in text.splitlines() if line.startswith('"')]
    if not rows or not rows[0].startswith('"test"'):
        raise ValueError("no redis-benchmark CSV header found")
    reader = csv.DictReader(io.StringIO("\n".join(rows)))
    results: Results = {}
    for row in reader:
        test = row.get("test")
        if not test:
            continue
        parsed: TestResult = {}
        for column, key in CSV_COLUMNS.items():
            value = row.get(column)
            if value is not None and value != "":
                parsed[key] = float(value)
        if "rps" not in parsed:
            raise ValueError(f"row for {test!r} has no rps")
        results[test] = parsed
    return results


def build_command(
    address: Address,
    tests: Sequence[str],
    *,
    data_size: int = 16,
    pipeline: int = 1,
    clients: int = 50,
    requests: int = 100_000,
    keyspace: int | None = None,
    executable: str = "redis-benchmark",
) -> list[str]:
    """The ``redis-benchmark`` argv; ``keyspace`` is ``-r`` (random keys), None for one key."""
    argv = [
        executable,
        "-h",
        address.host,
        "-p",
        str(address.port),
        "-t",
        ",".join(tests),
        "-d",
        str(data_size),
        "-P",
        str(pipeline),
        "-c",
        str(clients),
        "-n",
        str(requests),
        "--csv",
    ]
    if keyspace:
        argv += ["-r", str(keyspace)]
    return argv


def merge(parts: Sequence[tuple[int, TestResult]]) -> TestResult:
    """Merge concurrent runs of one test, each given as ``(requests, result)``.

    See the module docstring: rps summed (plus a conservative total over the
    slowest run), mean exact, min/max exact, percentiles request-weighted means
    (an approximation).
    """
    if not parts:
        raise ValueError("nothing to merge")
    if len(parts) == 1:
        n, only = parts[0]
        return {**only, "rps_conservative": only["rps"], "requests": float(n)}
    total = sum(n for n, _ in parts)
    slowest = max(n / r["rps"] for n, r in parts if r["rps"] > 0)
    merged: TestResult = {
        "rps": sum(r["rps"] for _, r in parts),
        "rps_conservative": total / slowest,
        "requests": float(total),
    }
    for key in ("avg_ms", "p50_ms", "p95_ms", "p99_ms"):
        if all(key in r for _, r in parts):
            merged[key] = sum(n * r[key] for n, r in parts) / total
    if all("min_ms" in r for _, r in parts):
        merged["min_ms"] = min(r["min_ms"] for _, r in parts)
    if all("max_ms" in r for _, r in parts):
        merged["max_ms"] = max(r["max_ms"] for _, r in parts)
    return merged


def _split(total: int, ways: int) -> list[int]:
    """Split ``total`` into ``ways`` near-equal positive parts."""
    base, extra = divmod(total, ways)
    return [base + (1 if i < extra else 0) for i in range(ways)]


def run_spread(
    addresses: Sequence[Address],
    tests: Sequence[str] = ("set", "get"),
    *,
    data_size: int = 16,
    pipeline: int = 1,
    clients: int = 50,
    requests: int = 100_000,
    keyspace: int | None = 100_000,
    executable: str = "redis-benchmark",
    timeout_s: float = 600.0,
) -> dict[str, object]:
    """Benchmark each test on every address concurrently; return merged and per-node results.

    ``clients`` and ``requests`` are totals, split evenly over the addresses.
    Tests run one after another so the per-address processes of one test
    overlap (what makes summing their rates meaningful).
    """
    if clients < len(addresses):
        raise ValueError("need at least one client per address")
    client_split = _split(clients, len(addresses))
    request_split = _split(requests, len(addresses))
    merged: Results = {}
    # One entry per address (a list, so the same address may be given twice).
    per_node: list[dict[str, object]] = [{"address": str(a), "results": {}} for a in addresses]
    for test in tests:
        procs: list[tuple[int, int, subprocess.Popen[str]]] = []
        try:
            for i, (address, c, n) in enumerate(
                zip(addresses, client_split, request_split, strict=True)
            ):
                argv = build_command(
                    address,
                    [test],
                    data_size=data_size,
                    pipeline=pipeline,
                    clients=c,
                    requests=n,
                    keyspace=keyspace,
                    executable=executable,
                )
                proc = subprocess.Popen(
                    argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
                procs.append((i, n, proc))
            by_test: dict[str, list[tuple[int, TestResult]]] = {}
            for i, n, proc in procs:
                out, err = proc.communicate(timeout=timeout_s)
                if proc.returncode != 0:
                    raise RuntimeError(
                        f"redis-benchmark against {addresses[i]} exited {proc.returncode}: "
                        f"{err.strip()}"
                    )
                parsed = parse_csv(out)
                node_results = per_node[i]["results"]
                assert isinstance(node_results, dict)
                node_results.update(parsed)
                for name, result in parsed.items():
                    by_test.setdefault(name, []).append((n, result))
            for name, name_parts in by_test.items():
                merged[name] = merge(name_parts)
        finally:
            for _, _, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        print(f"[redis-benchmark] {test}: done", file=sys.stderr, flush=True)
    return {
        "settings": {
            "addresses": [str(a) for a in addresses],
            "tests": list(tests),
            "data_size": data_size,
            "pipeline": pipeline,
            "clients": clients,
            "requests": requests,
            "keyspace": keyspace,
        },
        "results": merged,
        "per_node": per_node,
    }


def free_port() -> int:
    """A loopback port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _check_running(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is not None:
        raise RuntimeError(f"redis-server exited with {proc.returncode}")


@contextlib.contextmanager
def redis_server(executable: str = "redis-server") -> Iterator[Address]:
    """A throw-away ``redis-server`` on a free loopback port, no persistence, cleaned up on exit.

    It runs in its own process group and temporary directory, so nothing is
    left behind whichever way the block exits.
    """
    if shutil.which(executable) is None:
        raise FileNotFoundError(f"{executable} not found (Debian: apt-get install redis-server)")
    workdir = tempfile.mkdtemp(prefix="redis-bench-")
    port = free_port()
    argv = [
        executable,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        workdir,
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    log = open(os.path.join(workdir, "redis.log"), "w")  # noqa: SIM115 (closed in finally)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(
            lambda: redis_ping("127.0.0.1", port),
            timeout_s=START_TIMEOUT_S,
            what=lambda: f"redis-server did not answer PING on 127.0.0.1:{port}",
            check=lambda: _check_running(proc),
        )
        yield Address("127.0.0.1", port)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def format_table(results: Results) -> str:
    """A small human table of merged results."""
    lines = [f"{'test':<6} {'rps':>12} {'p50 ms':>8} {'p99 ms':>8}"]
    for name, r in results.items():
        lines.append(
            f"{name:<6} {r['rps']:>12,.0f} {r.get('p50_ms', float('nan')):>8.3f} "
            f"{r.get('p99_ms', float('nan')):>8.3f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see ``--help``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--addr", action="append", default=[], help="host:port, repeat to spread over nodes"
    )
    parser.add_argument("--start-redis-server", action="store_true", help="self-test target")
    parser.add_argument("-t", "--tests", default="set,get")
    parser.add_argument("-d", "--data-size", type=int, default=16)
    parser.add_argument("-P", "--pipeline", type=int, default=1)
    parser.add_argument("-c", "--clients", type=int, default=50)
    parser.add_argument("-n", "--requests", type=int, default=100_000)
    parser.add_argument(
        "-r", "--keyspace", type=int, default=100_000, help="random keys; 0 for one key"
    )
    parser.add_argument("--json", help="write the result object to this file too")
    args = parser.parse_args(argv)
    if shutil.which("redis-benchmark") is None:
        print("redis-benchmark not found (Debian: apt-get install redis-tools)", file=sys.stderr)
        return 2
    tests = [t for t in args.tests.split(",") if t]
    kwargs = dict(
        data_size=args.data_size,
        pipeline=args.pipeline,
        clients=args.clients,
        requests=args.requests,
        keyspace=args.keyspace or None,
    )
    if args.start_redis_server:
        with redis_server() as address:
            out = run_spread([address], tests, **kwargs)
    else:
        if not args.addr:
            parser.error("give --addr (repeatable) or --start-redis-server")
        out = run_spread([Address.parse(a) for a in args.addr], tests, **kwargs)
    print(format_table(out["results"]), file=sys.stderr)  # type: ignore[arg-type]
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
