"""The node's metrics: each call shows up in the exposition with its value, nodes
in one process keep their own values, the no-op variant keeps in step, and the
``/metrics`` endpoint answers scrapes and survives garbage."""

import asyncio
import inspect

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sdpaxos.runtime import metrics as metrics_mod
from sdpaxos.runtime.metrics import (
    LATENCY_BUCKETS_S,
    Metrics,
    NodeMetrics,
    NullMetrics,
    serve_metrics,
)


def _families(m: NodeMetrics) -> dict[str, str]:
    """Family name -> type, from the text exposition."""
    return {f.name: f.type for f in text_string_to_metric_families(m.render().decode())}


def _samples(text: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(m: NodeMetrics, name: str, **labels: str) -> float | None:
    """One sample's value, or None when the series does not exist."""
    labels.setdefault("node", m.node)
    return _samples(m.render()).get((name, frozenset(labels.items())))


def test_latency_buckets_cover_loopback_to_slow_wan() -> None:
    assert LATENCY_BUCKETS_S[0] == 0.0001
    assert LATENCY_BUCKETS_S[-1] == 10.0
    assert list(LATENCY_BUCKETS_S) == sorted(set(LATENCY_BUCKETS_S))
    # Geo-replication's 20-300 ms range is resolved finely, not in one bucket.
    assert sum(0.02 <= b <= 0.3 for b in LATENCY_BUCKETS_S) >= 6


def test_commit_and_execute_latency_histograms() -> None:
    m = NodeMetrics(1)
    for s in (0.0004, 0.03, 0.25):
        m.observe_commit_s(s)
    m.observe_execute_s(1.5)
    fam = _families(m)
    assert fam["sdpaxos_commit_latency_seconds"] == "histogram"
    assert fam["sdpaxos_execute_latency_seconds"] == "histogram"
    c = "sdpaxos_commit_latency_seconds"
    assert _value(m, c + "_count") == 3
    assert _value(m, c + "_sum") == pytest.approx(0.2804)
    assert _value(m, c + "_bucket", le="0.0001") == 0
    assert _value(m, c + "_bucket", le="0.0005") == 1
    assert _value(m, c + "_bucket", le="0.03") == 2
    assert _value(m, c + "_bucket", le="0.2") == 2
    assert _value(m, c + "_bucket", le="0.3") == 3
    assert _value(m, c + "_bucket", le="+Inf") == 3
    e = "sdpaxos_execute_latency_seconds"
    assert _value(m, e + "_count") == 1
    assert _value(m, e + "_sum") == 1.5
    assert _value(m, e + "_bucket", le="1.0") == 0
    assert _value(m, e + "_bucket", le="2.5") == 1


def test_commands_committed_counter() -> None:
    m = NodeMetrics(0)
    m.commands_committed(3)
    m.commands_committed(4)
    assert _families(m)["sdpaxos_commands_committed"] == "counter"
    assert _value(m, "sdpaxos_commands_committed_total") == 7


def test_fsync_latency_group_commit_size_and_bytes() -> None:
    m = NodeMetrics(0)
    m.observe_fsync_s(0.002, 5, 1000)
    m.observe_fsync_s(0.004, 1, 200)
    assert _value(m, "sdpaxos_fsync_latency_seconds_count") == 2
    assert _value(m, "sdpaxos_fsync_latency_seconds_sum") == pytest.approx(0.006)
    assert _value(m, "sdpaxos_fsync_latency_seconds_bucket", le="0.0025") == 1
    assert _value(m, "sdpaxos_fsync_latency_seconds_bucket", le="0.005") == 2
    assert _value(m, "sdpaxos_fsync_records_sum") == 6
    assert _value(m, "sdpaxos_fsync_records_bucket", le="1.0") == 1
    assert _value(m, "sdpaxos_fsync_records_bucket", le="4.0") == 1
    assert _value(m, "sdpaxos_fsync_records_bucket", le="8.0") == 2
    assert _value(m, "sdpaxos_log_written_bytes_total") == 1200


def test_peer_rtt_queue_and_connection() -> None:
    m = NodeMetrics(1, peers=[0, 2])
    # Named peers start disconnected with empty queues; no round trip yet.
    assert _value(m, "sdpaxos_peer_connected", peer="0") == 0
    assert _value(m, "sdpaxos_peer_send_queue_frames", peer="2") == 0
    assert _value(m, "sdpaxos_peer_rtt_seconds", peer="0") is None

    m.set_peer_rtt_s(2, 0.08)
    m.set_peer_queue(2, 3, 4096)
    m.set_peer_connected(2, True)
    m.set_peer_connected(0, True)
    m.set_peer_connected(0, False)
    m.set_peer_rtt_s(4, 0.2)  # a peer not named at construction
    assert _value(m, "sdpaxos_peer_rtt_seconds", peer="2") == 0.08
    assert _value(m, "sdpaxos_peer_rtt_seconds", peer="4") == 0.2
    assert _value(m, "sdpaxos_peer_send_queue_frames", peer="2") == 3
    assert _value(m, "sdpaxos_peer_send_queue_bytes", peer="2") == 4096
    assert _value(m, "sdpaxos_peer_connected", peer="2") == 1
    assert _value(m, "sdpaxos_peer_connected", peer="0") == 0
    # Gauges follow the latest value.
    m.set_peer_queue(2, 0, 0)
    m.set_peer_rtt_s(2, 0.05)
    assert _value(m, "sdpaxos_peer_send_queue_bytes", peer="2") == 0
    assert _value(m, "sdpaxos_peer_rtt_seconds", peer="2") == 0.05


def test_frames_rejected_by_reason() -> None:
    m = NodeMetrics(0)
    m.frame_rejected("malformed")
    m.frame_rejected("malformed")
    m.frame_rejected("wrong_src")
    m.frame_rejected("bad_mac")  # a reason outside the known list still counts
    name = "sdpaxos_frames_rejected_total"
    assert _value(m, name, reason="malformed") == 2
    assert _value(m, name, reason="wrong_src") == 1
    assert _value(m, name, reason="bad_mac") == 1
    # Known reasons exist at 0 before the first rejection (so rate() sees it).
    assert _value(m, name, reason="oversized") == 0
    assert _value(m, name, reason="unknown") == 0


def test_update_from_status_sets_gauges_and_counters() -> None:
    m = NodeMetrics(2)
    status = dict(
        view=7,
        executed_slot=120,
        is_sequencer=True,
        log_bytes=65536,
        snapshot_bytes=1024,
        view_changes=3,
        c_recoveries=5,
    )
    m.update_from_status(**status)
    assert _value(m, "sdpaxos_view") == 7
    assert _value(m, "sdpaxos_executed_slot") == 120
    assert _value(m, "sdpaxos_is_sequencer") == 1
    assert _value(m, "sdpaxos_log_bytes") == 65536
    assert _value(m, "sdpaxos_snapshot_bytes") == 1024
    assert _value(m, "sdpaxos_view_changes_total") == 3
    assert _value(m, "sdpaxos_c_recoveries_total") == 5
    fam = _families(m)
    assert fam["sdpaxos_view_changes"] == "counter"
    assert fam["sdpaxos_c_recoveries"] == "counter"
    assert fam["sdpaxos_view"] == "gauge"
    # The latest update wins.
    m.update_from_status(**{**status, "view": 8, "is_sequencer": False, "executed_slot": 130})
    assert _value(m, "sdpaxos_view") == 8
    assert _value(m, "sdpaxos_is_sequencer") == 0
    assert _value(m, "sdpaxos_executed_slot") == 130


def test_the_loops_stages_are_a_counter_per_stage() -> None:
    m = NodeMetrics(2)
    ints = ("view", "executed_slot", "log_bytes", "snapshot_bytes", "view_changes", "c_recoveries")
    status = {**dict.fromkeys(ints, 1), "is_sequencer": False}
    assert _value(m, "sdpaxos_loop_seconds_total", stage="decode") is None  # none given yet
    m.update_from_status(**status, stages_s={"decode": 0.25, "step": 1.5})
    assert _value(m, "sdpaxos_loop_seconds_total", stage="decode") == 0.25
    assert _value(m, "sdpaxos_loop_seconds_total", stage="step") == 1.5
    assert _families(m)["sdpaxos_loop_seconds"] == "counter"
    # An update without them keeps the last ones; one with them replaces them.
    m.update_from_status(**status)
    assert _value(m, "sdpaxos_loop_seconds_total", stage="step") == 1.5
    m.update_from_status(**status, stages_s={"decode": 0.5, "step": 2.0})
    assert _value(m, "sdpaxos_loop_seconds_total", stage="decode") == 0.5
    assert _value(m, "sdpaxos_loop_seconds_total", stage="step") == 2.0


def test_every_series_is_named_sdpaxos_and_labelled_with_its_node() -> None:
    m = NodeMetrics(3, peers=[1])
    m.set_peer_rtt_s(1, 0.01)
    families = list(text_string_to_metric_families(m.render().decode()))
    assert len(families) > 10
    for family in families:
        assert family.name.startswith("sdpaxos_")
        for s in family.samples:
            assert s.labels.get("node") == "3", s


def test_nodes_in_one_process_keep_their_own_values() -> None:
    a = NodeMetrics(0, peers=[1])
    b = NodeMetrics(1, peers=[0])
    same_id = NodeMetrics(0)  # a second node 0 (another cluster in the process)
    a.observe_commit_s(0.01)
    a.commands_committed(5)
    a.set_peer_rtt_s(1, 0.03)
    a.update_from_status(
        view=4,
        executed_slot=9,
        is_sequencer=True,
        log_bytes=1,
        snapshot_bytes=1,
        view_changes=1,
        c_recoveries=1,
    )
    assert _value(a, "sdpaxos_commands_committed_total") == 5
    for other in (b, same_id):
        assert _value(other, "sdpaxos_commands_committed_total") == 0
        assert _value(other, "sdpaxos_commit_latency_seconds_count") == 0
        assert _value(other, "sdpaxos_view") == 0
    assert _value(b, "sdpaxos_peer_rtt_seconds", peer="0") is None
    assert b'node="0"' not in b.render()
    # Nothing went to prometheus_client's global registry.
    global_text = prometheus_client.generate_latest(prometheus_client.REGISTRY)
    assert b"sdpaxos_" not in global_text


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(cls, name))
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }


def test_null_metrics_keeps_in_step_with_node_metrics() -> None:
    protocol = {
        name
        for name in dir(Metrics)
        if not name.startswith("_") and callable(getattr(Metrics, name))
    }
    node = _public_methods(NodeMetrics)
    null = _public_methods(NullMetrics)
    assert set(node) == set(null) == protocol
    assert node == null  # same parameters, same annotations
    assert isinstance(NodeMetrics(0), Metrics)
    assert isinstance(NullMetrics(), Metrics)


def test_null_metrics_accepts_every_call_and_renders_nothing() -> None:
    n = NullMetrics()
    n.observe_commit_s(0.1)
    n.observe_execute_s(0.1)
    n.commands_committed(1)
    n.observe_fsync_s(0.001, 1, 10)
    n.set_peer_rtt_s(1, 0.1)
    n.set_peer_queue(1, 1, 1)
    n.set_peer_connected(1, True)
    n.frame_rejected("malformed")
    n.update_from_status(
        view=1,
        executed_slot=1,
        is_sequencer=False,
        log_bytes=1,
        snapshot_bytes=1,
        view_changes=1,
        c_recoveries=1,
    )
    assert n.render() == b""


# --- HTTP ---------------------------------------------------------------------


async def _request(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw``, read until the server closes; the status, headers and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    # A bound on a hung server, so that a broken one fails the test instead of
    # stalling it; never reached by a working one.
    response = await asyncio.wait_for(reader.read(), timeout=30)
    writer.close()
    await writer.wait_closed()
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    assert int(headers["content-length"]) == len(body)
    return status, headers, body


def test_http_serves_metrics_and_404s_other_paths() -> None:
    m = NodeMetrics(1)
    m.commands_committed(42)

    async def scenario() -> None:
        server = await serve_metrics(m, "127.0.0.1", 0)
        async with server:
            assert server.port != 0
            status, headers, body = await _request(
                server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
            )
            assert status == 200
            assert headers["content-type"].startswith("text/plain; version=0.0.4")
            assert (
                _samples(body)[("sdpaxos_commands_committed_total", frozenset({("node", "1")}))]
                == 42
            )
            status, _, body = await _request(server.port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
            assert status == 200
            status, _, _ = await _request(server.port, b"GET / HTTP/1.1\r\n\r\n")
            assert status == 404
            status, _, _ = await _request(server.port, b"GET /metricsx HTTP/1.1\r\n\r\n")
            assert status == 404
            status, _, _ = await _request(server.port, b"POST /metrics HTTP/1.1\r\n\r\n")
            assert status == 405
        # Closed: nobody listens any more.
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", server.port)

    asyncio.run(scenario())


def test_http_refuses_garbage_and_keeps_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_mod, "_REQUEST_TIMEOUT_S", 0.05)
    m = NodeMetrics(0)

    async def scenario() -> None:
        async with await serve_metrics(m, "127.0.0.1", 0) as server:
            port = server.port
            status, _, _ = await _request(port, b"\x00\xff\x16\x03 garbage\r\n\r\n")
            assert status == 400
            status, _, _ = await _request(port, b"GET /metrics\r\n\r\n")  # no version
            assert status == 400
            status, _, _ = await _request(port, b"GET /metrics SPDY/3\r\n\r\n")  # not HTTP/1.x
            assert status == 400
            # A head larger than the bound, with no end in sight.
            status, _, _ = await _request(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000)
            assert status == 400
            # A client that never finishes its request is cut off.
            status, _, _ = await _request(port, b"GET /metr")
            assert status == 400
            # A client that hangs up without a word.
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            await w.wait_closed()
            # Still serving.
            status, _, body = await _request(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert status == 200
            assert b"sdpaxos_view" in body

    asyncio.run(scenario())
