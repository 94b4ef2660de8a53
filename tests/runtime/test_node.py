"""The asyncio Node in one process: replication, durability order, restart, reads."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sdpaxos.runtime import clients as clients_module
from sdpaxos.runtime import driver as driver_module
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime import node as node_module
from sdpaxos.runtime import peers as peers_module
from sdpaxos.runtime.apps import PayloadLog
from sdpaxos.runtime.client import Client
from sdpaxos.runtime.local import client_tls, node_configs
from sdpaxos.runtime.node import Node, NodeError

from .helpers import FAST_PROTOCOL, eventually, in_process, payloads_of


def _same_everywhere(nodes, count):
    logs = [n.state_machine.payloads for n in nodes]
    return all(len(p) == count for p in logs) and all(p == logs[0] for p in logs)


@pytest.mark.parametrize(("replicas", "insecure"), [(3, False), (5, True)])
def test_commands_submitted_at_every_replica_execute_in_one_order(tmp_path, replicas, insecure):
    async def main():
        async with in_process(tmp_path, replicas, PayloadLog, insecure=insecure) as (_, nodes):
            sent = [b"c%d" % k for k in range(40 * replicas)]
            await asyncio.gather(
                *(nodes[k % replicas].submit(p, timeout_s=20) for k, p in enumerate(sent))
            )
            await eventually(lambda: _same_everywhere(nodes, len(sent)), what="all executed")
            assert sorted(nodes[0].state_machine.payloads) == sorted(sent)
            st = nodes[1].status()
            assert st.view >= 0 and st.sequencer is not None
            assert all(p.connected for p in st.peers) and len(st.peers) == replicas - 1

    asyncio.run(main())


def test_wait_executed_answers_the_state_machines_result(tmp_path):
    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (_, nodes):
            first = await nodes[2].submit(b"a", wait="executed", timeout_s=20)
            second = await nodes[1].submit(b"b", wait="executed", timeout_s=20)
            assert int.from_bytes(first, "big") == 1
            assert int.from_bytes(second, "big") == 2
            with pytest.raises(ValueError, match="wait must be"):
                await nodes[0].submit(b"c", wait="soon")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="payload must be bytes"):
                await nodes[0].submit("text")  # type: ignore[arg-type]

    asyncio.run(main())


def test_a_read_sees_every_write_ready_before_it(tmp_path):
    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (_, nodes):
            for k in range(20):
                await nodes[k % 3].submit(b"w%d" % k, timeout_s=20)
                seen = await nodes[(k + 1) % 3].read(None)
                assert b"w%d" % k in payloads_of(seen)

    asyncio.run(main())


def test_restart_rebuilds_the_state_from_the_durable_log(tmp_path):
    async def main():
        async with in_process(tmp_path, 3, PayloadLog, fsync=True) as (path, nodes):
            for k in range(30):
                await nodes[k % 3].submit(b"r%d" % k, timeout_s=20)
            await eventually(lambda: _same_everywhere(nodes, 30), what="executed")
            before = list(nodes[2].state_machine.payloads)
            await nodes[2].stop()
            again = Node(node_configs(path)[2], PayloadLog(), fsync=True)
            await again.start()
            nodes[2] = again  # the fixture stops it
            await eventually(
                lambda: again.state_machine.payloads == before, what="replayed after restart"
            )
            await nodes[0].submit(b"after", timeout_s=20)
            await eventually(lambda: _same_everywhere(nodes, 31), what="caught up")

    asyncio.run(main())


def test_nothing_leaves_before_its_records_are_durable_and_writes_are_grouped(tmp_path):
    """The durability gate: while the log thread is stuck, no reply comes and no
    message of the stuck node reaches a peer; released, the batches that piled up
    share few fsyncs (group commit)."""

    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (_, nodes):
            await nodes[0].submit(b"warm", timeout_s=20)
            await eventually(lambda: _same_everywhere(nodes, 1), what="warm-up")
            gate = threading.Event()
            stuck = nodes[1]
            original = stuck.driver._write

            def slow_write(records, snapshot):
                gate.wait()
                return original(records, snapshot)

            stuck.driver._write = slow_write
            stuck.driver.inline_writes = False  # the gate holds the log thread, not the loop
            steps_before = [n.replica.stats.steps for n in nodes]
            fsyncs_before = stuck.fsyncs
            pending = [
                asyncio.ensure_future(stuck.submit(b"g%d" % k, timeout_s=20)) for k in range(30)
            ]
            try:
                await asyncio.sleep(0.5)
                assert not any(p.done() for p in pending)
                # Peers execute nothing of the stuck node's new commands: its
                # C-accepts are held (its records come first).
                assert all(n.state_machine.payloads == [b"warm"] for n in nodes)
            finally:
                gate.set()  # else the stuck log thread would hang the teardown
            await asyncio.gather(*pending)
            await eventually(lambda: _same_everywhere(nodes, 31), what="released")
            assert stuck.fsyncs - fsyncs_before < 30
            assert steps_before != [n.replica.stats.steps for n in nodes]

    asyncio.run(main())


def test_a_log_failure_stops_the_node_instead_of_acknowledging(tmp_path):
    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (_, nodes):
            await nodes[0].submit(b"ok", timeout_s=20)

            def broken(records, snapshot):
                raise OSError(28, "No space left on device")

            nodes[0].driver._write = broken
            with pytest.raises(NodeError):
                await nodes[0].submit(b"lost", timeout_s=20)
            assert not nodes[0].running
            with pytest.raises(NodeError, match="log failure"):
                await nodes[0].submit(b"again")
            await eventually(
                lambda: all(b"lost" not in n.state_machine.payloads for n in nodes[1:]),
                what="never acknowledged",
            )

    asyncio.run(main())


def test_a_retry_at_another_node_is_answered_and_not_executed_twice(tmp_path):
    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (path, nodes):
            addrs = [(n.config.me.host, n.bound_port) for n in nodes]
            one = Client([addrs[0]], tls=client_tls(path))
            two = Client([addrs[2]], tls=client_tls(path))
            session = await one._session()
            cid = session.client_id

            def submit(rid):
                return rf.Submit(rid, cid, 1, b"once", None, 1)

            first = await one._request(submit, 20)
            retry = await two._request(submit, 20)
            assert first.code == retry.code == rf.Code.EXECUTED
            assert first.value == retry.value
            await nodes[1].submit(b"after", timeout_s=20)
            await eventually(lambda: _same_everywhere(nodes, 2), what="executed")
            assert nodes[1].state_machine.payloads == [b"once", b"after"]
            await one.close()
            await two.close()

    asyncio.run(main())


def test_stop_wakes_a_waiting_submit_with_an_error(tmp_path):
    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (_, nodes):
            await nodes[0].submit(b"x", timeout_s=20)
            await nodes[1].stop()
            await nodes[2].stop()
            waiting = asyncio.ensure_future(nodes[0].submit(b"no quorum"))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await nodes[0].stop()
            with pytest.raises(NodeError, match="stopped"):
                await waiting

    asyncio.run(main())


def test_status_reports_round_trips_and_lag_per_peer(tmp_path, monkeypatch):
    monkeypatch.setattr(peers_module, "PING_INTERVAL_S", 0.05)

    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (_, nodes):
            await nodes[0].submit(b"x", timeout_s=20)
            await eventually(
                lambda: all(p.rtt_ms is not None for p in nodes[0].status().peers),
                what="pings answered",
            )
            st = nodes[0].status().to_dict()
            assert {p["id"] for p in st["peers"]} == {1, 2}
            assert all(p["lag_slots"] is not None for p in st["peers"])
            assert st["log_bytes"] > 0 and st["log_records"] > 0

    asyncio.run(main())


def test_a_nodes_metrics_follow_its_work(tmp_path, monkeypatch):
    from prometheus_client.parser import text_string_to_metric_families

    from sdpaxos.runtime.metrics import NodeMetrics

    monkeypatch.setattr(peers_module, "PING_INTERVAL_S", 0.05)

    def samples(metrics):
        out = {}
        for family in text_string_to_metric_families(metrics.render().decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (_, nodes):
            metrics = NodeMetrics(0, peers=[1, 2])
            nodes[0].metrics = metrics
            for k in range(5):
                await nodes[0].submit(b"m%d" % k, timeout_s=20)
            await nodes[0].submit(b"e", wait="executed", timeout_s=20)
            await eventually(
                lambda: (
                    samples(metrics).get(("sdpaxos_commands_committed_total", (("node", "0"),)))
                    == 6
                ),
                what="committed counter (5 ready, 1 executed: each was committed)",
            )
            # The round trip gauge appears with the first pong, which a busy
            # machine may deliver after the commands (it was a KeyError then).
            rtt_key = ("sdpaxos_peer_rtt_seconds", (("node", "0"), ("peer", "1")))
            await eventually(lambda: rtt_key in samples(metrics), what="a pong from peer 1")
            got = samples(metrics)
            node0 = (("node", "0"),)
            assert got[("sdpaxos_commit_latency_seconds_count", node0)] == 5
            assert got[("sdpaxos_execute_latency_seconds_count", node0)] == 1
            assert got[("sdpaxos_fsync_latency_seconds_count", node0)] >= 1
            assert got[("sdpaxos_log_bytes", node0)] > 0
            assert got[rtt_key] > 0
            # The loop's stages, as NodeStatus.stages_s has them.
            loop = {
                dict(labels)["stage"]: v
                for (name, labels), v in got.items()
                if name == "sdpaxos_loop_seconds_total"
            }
            assert sorted(loop) == sorted(node_module.STAGES)
            assert all(loop[k] > 0 for k in ("decode", "step", "ready", "carry_out", "send"))

    asyncio.run(main())


def test_a_client_that_pipelines_past_the_bound_is_not_read_until_it_drains(tmp_path, monkeypatch):
    monkeypatch.setattr(clients_module, "CLIENT_REQUESTS_PENDING_MAX", 4)

    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (path, nodes):
            await nodes[0].submit(b"warm", timeout_s=20)
            gate = threading.Event()
            original = nodes[0].driver._write
            nodes[0].driver._write = lambda r, s: (gate.wait(), original(r, s))[1]
            nodes[0].driver.inline_writes = False  # the gate holds the log thread, not the loop
            client = Client([(nodes[0].config.me.host, nodes[0].bound_port)], tls=client_tls(path))
            sends = [
                asyncio.ensure_future(client.submit(b"p%d" % k, timeout_s=30)) for k in range(10)
            ]
            try:
                await eventually(
                    lambda: any(c.paused for c in nodes[0].clients.connections),
                    timeout_s=5,
                    what="paused",
                )
                conn = next(iter(nodes[0].clients.connections))
                assert conn.pending >= 4
            finally:
                gate.set()
            await asyncio.gather(*sends)
            assert not conn.paused and conn.pending == 0
            await client.close()

    asyncio.run(main())


def test_a_clients_concurrent_submits_travel_together(tmp_path):
    """Commands submitted in one loop turn leave as SUBMIT_MANY frames and come
    back as REPLY_MANY: far fewer frames than commands, every one answered."""

    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (path, nodes):
            address = (nodes[1].config.me.host, nodes[1].bound_port)
            async with Client([address], tls=client_tls(path)) as client:
                await client.submit(b"first", timeout_s=20)  # opens a session
                conn = next(iter(nodes[1].clients.connections))
                before = conn.frames_received
                io_before = nodes[1].status().io
                sent = [b"many%d" % k for k in range(300)]
                await asyncio.gather(*(client.submit(p, timeout_s=30) for p in sent))
                frames = conn.frames_received - before
                assert frames < 60, frames  # 300 registrations and 300 commands
                # The node's own counters (NodeStatus.io) saw the same frames,
                # and answered the 600 requests in far fewer (answers given in
                # one flush leave as one REPLY_MANY; one request frame's answers
                # may be spread over several flushes, so not "at most as many").
                io = nodes[1].status().io
                assert io["client_frames_in"] - io_before["client_frames_in"] == frames
                answers = io["client_frames_out"] - io_before["client_frames_out"]
                assert 0 < answers < 300, answers
                assert 0 < io["client_writes"] - io_before["client_writes"] <= answers
            await eventually(lambda: _same_everywhere(nodes, 301), what="executed")
            assert sorted(nodes[0].state_machine.payloads[1:]) == sorted(sent)
            ios = [n.status().io for n in nodes]
            for io in ios:  # batches of messages, written a loop turn's worth at a time
                assert io["turns"] > 0
                assert io["messages_out"] >= io["peer_frames_out"] >= io["peer_writes"] > 0
            # Nothing is counted in that was not counted out.
            assert 0 < sum(io["messages_in"] for io in ios) <= sum(io["messages_out"] for io in ios)
            assert (
                0
                < sum(io["peer_frames_in"] for io in ios)
                <= sum(io["peer_frames_out"] for io in ios)
            )

    asyncio.run(main())


def test_a_log_past_its_byte_limit_asks_for_a_snapshot_and_is_truncated(tmp_path):
    """``snapshot_log_bytes``: once the log holds that much, the node requests a
    snapshot; it is saved and the log truncated behind it (README: "a node asks
    for one when its log reaches" the limit)."""

    async def main():
        async with in_process(tmp_path, 3, PayloadLog, snapshot_log_bytes=1024) as (_, nodes):
            for k in range(60):
                await nodes[k % 3].submit(b"s%d" % k, timeout_s=20)
            await eventually(
                lambda: all(n.status().snapshot_bytes > 0 for n in nodes), what="snapshots"
            )
            st = nodes[0].status()
            assert st.snapshot_slot > 0
            assert st.stats["snapshots_taken"] >= 1

    asyncio.run(main())


def test_submit_nowait_keeps_thousands_in_flight_and_reuses_sessions(tmp_path, monkeypatch):
    # A small proposal queue, so that some commands wait for room (the path a
    # Redis pipeline of thousands takes), and a result for each.
    async def main():
        protocol = {**FAST_PROTOCOL, "propose_queue_max": 64}
        async with in_process(tmp_path, 3, PayloadLog, protocol=protocol) as (_, nodes):
            sent = [b"n%d" % k for k in range(600)]
            futures = [nodes[k % 3].submit_nowait(p, wait="executed") for k, p in enumerate(sent)]
            assert all(isinstance(f, asyncio.Future) for f in futures)
            results = await asyncio.wait_for(asyncio.gather(*futures), 30)
            positions = sorted(int.from_bytes(r, "big") for r in results)
            assert positions == list(range(1, len(sent) + 1))  # each executed once
            await eventually(lambda: _same_everywhere(nodes, len(sent)), what="all executed")
            # Sessions went back to the pool: a second wave draws no new ones.
            idle = len(nodes[0].calls.sessions)
            assert idle > 0
            more = [nodes[0].submit_nowait(b"again%d" % k) for k in range(idle)]
            assert len(nodes[0].calls.sessions) == 0
            assert await asyncio.gather(*more) == [None] * idle  # READY answers nothing
            assert len(nodes[0].calls.sessions) == idle
            value = await nodes[1].read_nowait(None)
            assert b"again0" in payloads_of(value)
            with pytest.raises(TypeError, match="payload must be bytes"):
                nodes[0].submit_nowait("text")  # type: ignore[arg-type]

    asyncio.run(main())


def test_submit_nowait_fails_its_future_when_the_node_stops(tmp_path):
    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (_, nodes):
            await nodes[1].stop()
            await nodes[2].stop()
            waiting = nodes[0].submit_nowait(b"no quorum")
            reading = nodes[0].read_nowait(b"k", timeout_s=30)
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await nodes[0].stop()
            with pytest.raises(NodeError, match="stopped"):
                await waiting
            with pytest.raises(NodeError, match="stopped"):
                await reading

    asyncio.run(main())


def test_a_stale_read_answers_from_the_local_state_without_a_quorum(tmp_path):
    async def main():
        async with in_process(tmp_path, 3, PayloadLog) as (path, nodes):
            await nodes[0].submit(b"before", wait="executed", timeout_s=20)
            await nodes[1].stop()
            await nodes[2].stop()
            address = [(nodes[0].config.me.host, nodes[0].bound_port)]
            async with Client(address, tls=client_tls(path)) as client:
                seen = await client.read(None, stale=True, timeout_s=5)
                assert payloads_of(seen) == [b"before"]
                # Once the sequencer's lease has run out (lease_ms 300), the
                # linearizable read has nothing to lean on: it is not answered.
                await asyncio.sleep(1.0)
                with pytest.raises(TimeoutError):
                    await client.read(None, timeout_s=1.5)
                assert payloads_of(await client.read(None, stale=True, timeout_s=5)) == [b"before"]

    asyncio.run(main())


async def _submit_many(reader, writer, items):
    """Send ``items`` as one SUBMIT_MANY; ``{request_id: (code, value)}`` once
    every item is answered, each exactly once; closes the connection."""
    from sdpaxos.wire.framing import Framer, frame

    writer.write(frame(rf.encode_runtime(rf.SubmitMany(items))))
    await writer.drain()
    framer = Framer()
    answers = {}
    while len(answers) < len(items):
        framer.feed(await asyncio.wait_for(reader.read(65536), 20))
        while (payload := framer.next_frame()) is not None:
            got = rf.decode_runtime(payload)
            for r in got.items if isinstance(got, rf.ReplyMany) else (got,):
                assert r.request_id not in answers
                answers[r.request_id] = (r.code, r.value)
    writer.close()
    return answers


def test_a_submit_many_mixing_every_case_answers_each_item_once(tmp_path):
    """The common case of a SUBMIT_MANY item (a session's next command) has a path
    of its own; the rest go the general way. One frame with a command, a refusal,
    the same command again, a registration with a payload and a command waiting
    for execution: every item is answered, each command executes once."""
    from sdpaxos.wire.framing import frame

    async def main():
        async with in_process(tmp_path, 3, PayloadLog, insecure=True) as (_, nodes):
            node = nodes[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", node.bound_port)
            writer.write(frame(rf.encode_runtime(rf.Hello(rf.Kind.CLIENT, 5))))
            sid = (1 << 62) | 77
            items = (
                rf.Submit(1, sid, 1, b"a", b"ka", 0),
                rf.Submit(2, 0, 1, b"nobody", None, 0),
                rf.Submit(3, sid, 1, b"a", b"ka", 0),  # the same command again
                rf.Submit(4, sid, 0, b"payload", None, 1),
                rf.Submit(5, sid + 1, 1, b"b", None, 1),
            )
            answers = await _submit_many(reader, writer, items)
            assert answers[1] == (rf.Code.READY, None) == answers[3]
            assert answers[2][0] == rf.Code.ERROR and "client_id 0" in answers[2][1]
            assert answers[4][0] == rf.Code.ERROR and "registration" in answers[4][1]
            assert answers[5][0] == rf.Code.EXECUTED
            await eventually(lambda: _same_everywhere(nodes, 2), what="executed")
            assert sorted(nodes[0].state_machine.payloads) == [b"a", b"b"]
            assert not node.driver.waiting

    asyncio.run(main())


def test_a_submit_many_beyond_the_proposal_queue_gets_retry_for_the_rest(tmp_path):
    """Every item past ``propose_queue_max`` is answered RETRY (the fast path of
    a SUBMIT_MANY and a single SUBMIT share one proposing step); the others
    commit, and none of the refused ones executes."""
    from sdpaxos.wire.framing import frame

    async def main():
        protocol = {**FAST_PROTOCOL, "propose_queue_max": 8}
        async with in_process(tmp_path, 3, PayloadLog, insecure=True, protocol=protocol) as (
            _,
            nodes,
        ):
            node = nodes[1]
            reader, writer = await asyncio.open_connection("127.0.0.1", node.bound_port)
            writer.write(frame(rf.encode_runtime(rf.Hello(rf.Kind.CLIENT, 5))))
            items = tuple(rf.Submit(k, (1 << 62) | k, 1, b"p%d" % k, None, 0) for k in range(1, 21))
            answers = await _submit_many(reader, writer, items)
            ready = sorted(k for k, (code, _) in answers.items() if code == rf.Code.READY)
            retry = sorted(k for k, (code, _) in answers.items() if code == rf.Code.RETRY)
            assert ready == list(range(1, 9)) and retry == list(range(9, 21))
            await eventually(lambda: _same_everywhere(nodes, 8), what="executed")
            assert sorted(nodes[0].state_machine.payloads) == sorted(b"p%d" % k for k in ready)
            assert not node.driver.waiting

    asyncio.run(main())


@pytest.mark.parametrize("fsync", [False, True])
def test_status_times_every_stage_of_the_loop(tmp_path, fsync):
    """NodeStatus.stages_s: a node that took a client's commands spent time in
    every stage; the others in every stage but the client's two; and more
    commands only add to them."""

    async def main():
        async with in_process(tmp_path, 3, PayloadLog, fsync=fsync) as (path, nodes):
            start = nodes[1].status().stages_s
            assert list(start) == list(node_module.STAGES)
            assert start["client"] == start["answer"] == 0.0  # no client yet
            address = (nodes[1].config.me.host, nodes[1].bound_port)
            async with Client([address], tls=client_tls(path)) as client:
                for k in range(5):
                    await client.submit(b"s%d" % k, timeout_s=20)
                await eventually(lambda: _same_everywhere(nodes, 5), what="executed")
                first = [n.status().stages_s for n in nodes]
                assert all(v > 0 for v in first[1].values()), first[1]
                for other in (first[0], first[2]):
                    assert other["client"] == other["answer"] == 0.0, other
                    busy = {k: v for k, v in other.items() if k not in ("client", "answer")}
                    assert all(v > 0 for v in busy.values()), other
                for k in range(5):
                    await client.submit(b"t%d" % k, timeout_s=20)
                await eventually(lambda: _same_everywhere(nodes, 10), what="executed")
                second = nodes[1].status().stages_s
                assert all(second[k] > first[1][k] for k in node_module.STAGES), second
                # Status requests are answered outside the stages: reading
                # them over the wire moves neither the client's nor the answers'.
                for _ in range(3):
                    st = await client.status()
                    assert set(st["stages_s"]) == set(node_module.STAGES)
                third = nodes[1].status().stages_s
                assert (third["client"], third["answer"]) == (second["client"], second["answer"])

    asyncio.run(main())


@pytest.mark.parametrize("fsync", [False, True])
def test_each_stage_counts_its_own_work_only(tmp_path, monkeypatch, fsync):
    """With a clock that moves only inside decoding (1 per frame), stepping
    (1,000 per message), ready() (1e6 per call), carrying out a batch (1e9)
    and releasing what it lets go (1e12: inline, or after the log thread's
    fsync) and the log append (its own figure, 7 per append), each stage holds
    exactly its own share: nothing of one leaks into another's bracket."""
    clock = [0.0]
    for module in (driver_module, peers_module, clients_module):
        monkeypatch.setattr(module, "_perf", lambda: clock[0])

    def moving(fn, step):
        def wrapped(*args, **kwargs):
            clock[0] += step
            return fn(*args, **kwargs)

        return wrapped

    async def main():
        async with in_process(tmp_path, 3, PayloadLog, fsync=fsync) as (_, nodes):
            counts = []
            for node in nodes:
                c = {"ready": 0, "carry_out": 0, "appends": 0, "releases": 0}
                counts.append(c)
                node.peers.decode_batch = moving(node.peers.decode_batch, 1.0)
                node.replica.step = moving(node.replica.step, 1000.0)
                ready, carry_out = node.replica.ready, node.driver._carry_out

                def counted_ready(ready=ready, c=c):
                    c["ready"] += 1
                    clock[0] += 1e6
                    return ready()

                def counted_carry_out(rd, carry_out=carry_out, c=c):
                    c["carry_out"] += 1
                    clock[0] += 1e9
                    return carry_out(rd)

                def counted_write(records, snapshot, c=c):
                    c["appends"] += 1
                    return 7.0, 0

                def counted_release(*args, release=node.driver._release, c=c):
                    c["releases"] += 1
                    clock[0] += 1e12
                    return release(*args)

                node.replica.ready = counted_ready
                node.driver._carry_out = counted_carry_out
                node.driver._write = counted_write
                node.driver._release = counted_release
            await asyncio.gather(*(nodes[k % 3].submit(b"e%d" % k, timeout_s=20) for k in range(9)))
            await eventually(lambda: _same_everywhere(nodes, 9), what="executed")
            for node, c in zip(nodes, counts, strict=True):
                st = node.status()
                assert st.stages_s == {
                    "decode": 1.0 * st.io["peer_frames_in"],
                    "step": 1000.0 * st.io["messages_in"],
                    "client": 0.0,
                    "ready": 1e6 * c["ready"],
                    "carry_out": 1e9 * c["carry_out"] + 1e12 * c["releases"],
                    "log": 7.0 * c["appends"],
                    "send": 0.0,
                    "answer": 0.0,
                }, (st.stages_s, st.io, c)
                assert c["ready"] > c["carry_out"] > 0 and c["appends"] > 0 and c["releases"] > 0

    asyncio.run(main())
