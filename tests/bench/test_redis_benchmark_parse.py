"""The kv-store vs PySyncObj benchmark pieces: the redis-benchmark CSV parser and merge,
the PySyncObj percentiles, and a short real PySyncObj cluster run. No timing assertions:
rates depend on the machine."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from bench import pysyncobj_cluster as psc
from bench import redis_benchmark as rb

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Captured from redis-benchmark 7.0.15 (Debian 12 redis-tools) against redis-server 7.0.15:
# redis-benchmark -h 127.0.0.1 -p 16399 -t set,get -d 16 -P 16 -c 50 -n 100000 --csv
CAPTURED_P16 = """\
"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","383141.75","1.686","0.320","1.455","3.855","6.423","7.207"
"GET","476190.50","1.201","0.280","0.951","2.975","4.727","8.591"
"""

# The same without pipelining (-n 20000).
CAPTURED_P1 = """\
"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"SET","35460.99","0.978","0.176","0.735","2.495","5.663","8.839"
"GET","42826.55","0.758","0.168","0.711","1.231","2.375","4.743"
"""


def test_parse_captured_pipelined_output() -> None:
    parsed = rb.parse_csv(CAPTURED_P16)
    assert list(parsed) == ["SET", "GET"]
    assert parsed["SET"] == {
        "rps": 383141.75,
        "avg_ms": 1.686,
        "min_ms": 0.320,
        "p50_ms": 1.455,
        "p95_ms": 3.855,
        "p99_ms": 6.423,
        "max_ms": 7.207,
    }
    assert parsed["GET"]["p99_ms"] == 4.727


def test_parse_ignores_noise_lines_but_needs_the_header() -> None:
    noisy = "WARNING: Could not fetch server CONFIG\n" + CAPTURED_P1 + "\n"
    assert rb.parse_csv(noisy)["GET"]["rps"] == 42826.55
    with pytest.raises(ValueError):
        rb.parse_csv('"SET","1.0","2.0"\n')


def test_merge_sums_rates_and_weights_latencies() -> None:
    a = rb.parse_csv(CAPTURED_P16)["SET"]
    b = rb.parse_csv(CAPTURED_P1)["SET"]
    merged = rb.merge([(100_000, a), (20_000, b)])
    assert merged["rps"] == pytest.approx(a["rps"] + b["rps"])
    # The slowest process took 20,000 / 35,460.99 s; 120,000 requests over that.
    assert merged["rps_conservative"] == pytest.approx(120_000 / (20_000 / b["rps"]))
    assert merged["avg_ms"] == pytest.approx((100_000 * 1.686 + 20_000 * 0.978) / 120_000)
    assert merged["p99_ms"] == pytest.approx((100_000 * 6.423 + 20_000 * 5.663) / 120_000)
    assert merged["min_ms"] == 0.176
    assert merged["max_ms"] == 8.839
    single = rb.merge([(5, a)])
    assert single["rps"] == single["rps_conservative"] == a["rps"]


def test_command_line_and_address() -> None:
    argv = rb.build_command(
        rb.Address.parse("127.0.0.1:7001"), ["set"], pipeline=16, clients=5, requests=10
    )
    assert argv[:5] == ["redis-benchmark", "-h", "127.0.0.1", "-p", "7001"]
    assert argv[argv.index("-P") + 1] == "16"
    assert "--csv" in argv and "-r" not in argv
    with pytest.raises(ValueError):
        rb.Address.parse("nope")


def test_percentile_nearest_rank() -> None:
    values = list(range(1, 101))  # 1..100
    assert psc.percentile(values, 50) == 50
    assert psc.percentile(values, 99) == 99
    assert psc.percentile(values, 100) == 100
    assert psc.percentile([7], 99) == 7
    assert psc.percentile([1, 2, 3], 0) == 1
    with pytest.raises(ValueError):
        psc.percentile([], 50)


def test_summarize_merges_loaders_exactly() -> None:
    loader_a = [1000] * 98  # 1 ms
    loader_b = [5000, 9000]  # the slow tail lives on another loader
    out = psc.summarize(loader_a + loader_b, window_s=2.0)
    assert out["writes"] == 100
    assert out["writes_per_s"] == 50
    assert out["p50_ms"] == 1.0
    assert out["p99_ms"] == 5.0
    assert out["max_ms"] == 9.0
    assert psc.summarize([], 1.0) == {"writes": 0.0, "writes_per_s": 0.0}


@pytest.mark.skipif(
    importlib.util.find_spec("pysyncobj") is None,
    reason="pysyncobj not installed (pip install pysyncobj==0.3.17)",
)
def test_pysyncobj_cluster_short_run(tmp_path: object) -> None:
    out_file = os.path.join(str(tmp_path), "pso.json")
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "bench", "pysyncobj_cluster.py"),
            "--outstanding",
            "200",
            "--warmup",
            "0.5",
            "--seconds",
            "2",
            "--keyspace",
            "1000",
            "--json",
            out_file,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["result"]["writes_per_s"] > 0
    assert len(report["replicas"]) == 3
    assert report["replicas_agree"]
    assert len({r["keys"] for r in report["replicas"]}) == 1
    assert report["replicas"][0]["keys"] > 0
    assert len({r["digest"] for r in report["replicas"]}) == 1
    assert report["replicas"][0]["digest"]
    with open(out_file) as f:
        assert json.load(f) == report
