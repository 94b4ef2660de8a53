"""The kv-store's native client: the runtime's transport, exactly-once writes, read choice."""

from __future__ import annotations

import asyncio

import pytest

from kvstore.client import KVClient, ResponseError, SyncKVClient
from kvstore.codec import decode_value, encode_command
from kvstore.local import kv_client_tls as client_tls
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.client import Client

from .test_server import kv_cluster


def test_commands_answer_as_redis_py_would(tmp_path):
    async def main():
        async with kv_cluster(tmp_path):
            path = tmp_path / "cluster.toml"
            async with KVClient.for_cluster(path) as kv:
                assert await kv.set("a", "1") == "OK"
                assert await kv.get("a") == b"1"
                assert await kv.incr("n", 5) == 5
                assert await kv.cas("a", "1", "2") is True
                assert await kv.cas("a", "1", "3") is False
                assert await kv.mget("a", "n", "none") == [b"2", b"5", None]
                assert await kv.execute("EXISTS", "a", "a", "none") == 2
                assert await kv.delete("a") == 1
                with pytest.raises(ResponseError, match="wrong number of arguments for 'incr'"):
                    await kv.execute("INCR", "nope", "x")  # said locally, nothing sent
                await kv.set("s", "text")
                with pytest.raises(ResponseError, match="not an integer or out of range"):
                    await kv.incr("s")
                with pytest.raises(ResponseError, match="unknown command"):
                    await kv.execute("LPUSH", "l", "x")
                with pytest.raises(ValueError, match="consistency"):
                    await kv.get("a", consistency="eventual")  # type: ignore[arg-type]

    asyncio.run(main())


def test_a_retried_write_at_another_node_runs_once(tmp_path):
    async def main():
        async with kv_cluster(tmp_path) as nodes:
            addrs = [(n.node.config.me.host, n.node.bound_port) for n in nodes]
            one = Client([addrs[0]], tls=client_tls(tmp_path / "cluster.toml"))
            two = Client([addrs[2]], tls=client_tls(tmp_path / "cluster.toml"))
            cid = (await one._session()).client_id
            payload = encode_command([b"INCRBY", b"n", b"7"])

            def submit(rid):
                return rf.Submit(rid, cid, 1, payload, b"n", 1)

            first = await one._request(submit, 20)
            retry = await two._request(submit, 20)  # as after a timeout, elsewhere
            assert decode_value(first.value) == decode_value(retry.value) == 7
            async with KVClient.for_cluster(tmp_path / "cluster.toml") as kv:
                assert await kv.get("n") == b"7"  # executed once
            await one.close()
            await two.close()

    asyncio.run(main())


def test_a_stale_read_answers_without_a_quorum(tmp_path):
    async def main():
        async with kv_cluster(tmp_path) as nodes:
            host, port = nodes[2].node.config.me.host, nodes[2].node.bound_port
            kv = KVClient(Client([(host, port)], tls=client_tls(tmp_path / "cluster.toml")))
            await kv.set("k", "v")
            await nodes[0].stop()
            await nodes[1].stop()
            await asyncio.sleep(1.0)  # the sequencer's lease (300 ms) runs out
            assert await kv.get("k", consistency="stale") == b"v"
            kv.timeout_s = 1.5
            with pytest.raises(TimeoutError):
                await kv.get("k")
            await kv.close()

    asyncio.run(main())


def test_the_synchronous_client(tmp_path):
    async def serve(stop: asyncio.Event) -> None:
        async with kv_cluster(tmp_path):
            await stop.wait()

    import threading

    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def main() -> None:
            task = asyncio.ensure_future(serve(stop))
            while not (tmp_path / "cluster.toml").exists():
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)
            ready.set()
            await task

        loop.run_until_complete(main())

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert ready.wait(60)
        with SyncKVClient.for_cluster(tmp_path / "cluster.toml") as kv:
            assert kv.set("x", "1") == "OK"
            assert kv.incr("x", 2) == 3
            assert kv.get("x") == b"3"
            assert kv.get("x", consistency="stale") in (b"1", b"3")
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(60)
