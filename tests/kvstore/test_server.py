"""Kv-store nodes in one process, used through redis-py: replication, reads, errors."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from kvstore.codec import encode_command
from kvstore.config import load_kv_config
from kvstore.local import make_kv_cluster
from kvstore.server import KVNode
from sdpaxos.runtime.frames import COMMAND_BYTES_MAX
from tests.kvstore.resp_fake import request_bytes

from ..runtime.helpers import FAST_PROTOCOL, eventually


@contextlib.asynccontextmanager
async def kv_cluster(
    tmp_path: Path, replicas: int = 3, **cluster_kw: Any
) -> AsyncIterator[list[KVNode]]:
    path = make_kv_cluster(tmp_path, replicas, profile=None, protocol=FAST_PROTOCOL, **cluster_kw)
    nodes = [KVNode(load_kv_config(path, k), fsync=False, bootstrap=True) for k in range(replicas)]
    for n in nodes:
        await n.start()
    try:
        yield nodes
    finally:
        for n in nodes:
            await n.stop()


def _client(node: KVNode, **kw: Any) -> aioredis.Redis:
    """redis-py without its own retries (they would hide what the node answered)."""
    host, _ = node.config.redis_address
    return aioredis.Redis(
        host=host, port=node.redis_port, protocol=2, retry=Retry(NoBackoff(), 0), **kw
    )


def test_a_write_at_one_node_is_read_at_every_other(tmp_path):
    async def main():
        async with kv_cluster(tmp_path) as nodes:
            clients = [_client(n) for n in nodes]
            for k in range(20):
                assert await clients[k % 3].set(f"key{k}", f"v{k}") is True
                # Linearizable: the next read anywhere sees it.
                assert await clients[(k + 1) % 3].get(f"key{k}") == f"v{k}".encode()
            assert await clients[0].incr("n") == 1
            assert await clients[1].incrby("n", 5) == 6
            assert await clients[2].mget("key0", "key1", "nothing") == [b"v0", b"v1", None]
            assert await clients[0].execute_command("CAS", "key0", "v0", "w0") == 1
            assert await clients[1].execute_command("CAS", "key0", "v0", "x0") == 0
            assert await clients[2].get("key0") == b"w0"
            with pytest.raises(ResponseError, match="not an integer"):
                await clients[0].incr("key0")
            with pytest.raises(ResponseError, match="unknown command"):
                await clients[0].execute_command("LPUSH", "l", "x")
            await eventually(
                lambda: len({n.store.snapshot() for n in nodes}) == 1, what="same state"
            )
            for c in clients:
                await c.aclose()

    asyncio.run(main())


def test_concurrent_increments_from_every_node_all_count(tmp_path):
    async def main():
        async with kv_cluster(tmp_path) as nodes:
            clients = [_client(n) for n in nodes]

            async def bump(c: aioredis.Redis, times: int) -> None:
                for _ in range(times):
                    await c.incr("counter")

            await asyncio.gather(*(bump(c, 30) for c in clients for _ in range(3)))
            assert await clients[1].get("counter") == b"270"
            for c in clients:
                await c.aclose()

    asyncio.run(main())


def test_a_pipeline_of_thousands_is_answered_in_order(tmp_path):
    async def main():
        async with kv_cluster(tmp_path) as nodes:
            c = _client(nodes[1])
            pipe = c.pipeline(transaction=False)
            for k in range(3000):
                pipe.set(f"p{k}", str(k))
                if k % 3 == 0:
                    pipe.get(f"p{k}")
            results = await pipe.execute()
            expected: list[Any] = []
            for k in range(3000):
                expected.append(True)
                if k % 3 == 0:
                    expected.append(str(k).encode())
            assert results == expected
            await c.aclose()

    asyncio.run(main())


def test_readonly_reads_locally_and_info_names_the_sequencer(tmp_path):
    async def main():
        async with kv_cluster(tmp_path) as nodes:
            c = _client(nodes[2])
            await c.set("a", "1")
            info = await c.info("replication")
            assert info["sequencer"] == 0 and info["role"] == "replica"
            assert "peer0" in info and info["view"] >= 0
            assert (await _client(nodes[0]).info("replication"))["role"] == "sequencer"
            # Stop the other two: a linearizable read has no lease to lean on,
            # a READONLY connection still answers from this replica's state.
            await nodes[0].stop()
            await nodes[1].stop()
            await asyncio.sleep(1.0)  # the lease (lease_ms 300) runs out
            stale = _client(nodes[2])
            assert await stale.execute_command("READONLY") in (True, b"OK")
            assert await stale.get("a") == b"1"
            fresh = _client(nodes[2])
            nodes[2].backend.read_timeout_s = 0.5
            with pytest.raises(ResponseError, match="no linearizable answer in time"):
                await fresh.get("a")
            for x in (c, stale, fresh):
                await x.aclose()

    asyncio.run(main())


def test_auth_and_tls_when_configured(tmp_path):
    async def main():
        async with kv_cluster(tmp_path, users={"app": "s3cret"}, redis_tls=True) as nodes:
            ca = str(nodes[0].config.node.tls.ca)
            good = _client(
                nodes[0],
                username="app",
                password="s3cret",
                ssl=True,
                ssl_ca_certs=ca,
                ssl_check_hostname=False,
            )
            assert await good.set("x", "1") is True
            no_auth = _client(nodes[0], ssl=True, ssl_ca_certs=ca, ssl_check_hostname=False)
            with pytest.raises(Exception, match=r"NOAUTH|Authentication"):
                await no_auth.get("x")
            plain = _client(nodes[0], username="app", password="s3cret")
            with pytest.raises(Exception):  # noqa: B017 - any failure: no TLS, no service
                await asyncio.wait_for(plain.get("x"), 5)
            assert await good.get("x") == b"1"
            for x in (good, no_auth, plain):
                with contextlib.suppress(Exception):
                    await x.aclose()

    asyncio.run(main())


def test_garbage_on_one_connection_leaves_the_others_served(tmp_path):
    async def main():
        async with kv_cluster(tmp_path) as nodes:
            host, _ = nodes[0].config.redis_address
            s = socket.create_connection((host, nodes[0].redis_port), timeout=5)
            s.sendall(b"*1\r\n$99999999999\r\n")
            reply = await asyncio.to_thread(s.recv, 200)
            assert reply.startswith(b"-ERR Protocol error")
            assert await asyncio.to_thread(s.recv, 200) == b""  # closed
            s.close()
            c = _client(nodes[0])
            assert await c.set("still", "here") is True
            assert nodes[0].resp.stats["protocol_errors"] == 1
            await c.aclose()

    asyncio.run(main())


def test_a_pipelines_writes_travel_as_few_log_commands(tmp_path):
    async def main():
        async with kv_cluster(tmp_path) as nodes:
            node = nodes[0].node
            proposals: list[bytes] = []
            submit = node.submit_nowait

            def counting(payload: bytes, **kw: Any):
                proposals.append(payload)
                return submit(payload, **kw)

            node.submit_nowait = counting  # type: ignore[method-assign]
            c = _client(nodes[0])
            pipe = c.pipeline(transaction=False)
            for k in range(500):
                pipe.set(f"b{k}", str(k))
            pipe.incr("b0")
            assert await pipe.execute() == [True] * 500 + [1]
            assert 1 <= len(proposals) <= 10  # batches, not one command each
            other = _client(nodes[2])
            assert await other.mget(*(f"b{k}" for k in range(1, 500))) == [
                str(k).encode() for k in range(1, 500)
            ]
            for x in (c, other):
                await x.aclose()

    asyncio.run(main())


def test_an_oversized_command_is_refused_and_the_node_keeps_serving(tmp_path):
    async def main():
        async with kv_cluster(tmp_path) as nodes:
            c = _client(nodes[0])
            with pytest.raises(ResponseError, match="the store takes at most"):
                await c.set("big", b"x" * (2 << 20))
            # One byte under the limit goes through, alone (never batched past it).
            size = COMMAND_BYTES_MAX - 1
            size -= len(encode_command([b"SET", b"large", b"y" * size])) - size
            assert len(encode_command([b"SET", b"large", b"y" * size])) == COMMAND_BYTES_MAX - 1
            pipe = c.pipeline(transaction=False)
            pipe.set("small", "1")
            pipe.set("large", b"y" * size)
            pipe.set("small2", "2")
            assert await pipe.execute() == [True, True, True]
            assert await _client(nodes[1]).strlen("large") == size
            assert await c.get("big") is None
            await c.aclose()

    asyncio.run(main())


def test_a_read_pipelined_between_two_writes_sees_the_first_only(tmp_path):
    """Redis runs a connection's commands in order: GET after SET k a and before
    SET k b answers a, though all three arrive in one read (the read goes
    through the log in the writes' batch, between them)."""

    async def main():
        async with kv_cluster(tmp_path) as nodes:
            c = _client(nodes[1])
            for i in range(20):
                pipe = c.pipeline(transaction=False)
                pipe.set("k", f"a{i}").get("k").set("k", f"b{i}").get("k")
                assert await pipe.execute() == [True, f"a{i}".encode(), True, f"b{i}".encode()]
            await c.aclose()

    asyncio.run(main())


def test_a_mixed_pipeline_answers_every_command_in_order(tmp_path):
    """execute_many's runs: errors (unknown, arity, type) and front-end commands
    between data commands, reads after writes, each answered in its place."""

    async def main():
        async with kv_cluster(tmp_path) as nodes:
            c = _client(nodes[0])
            await c.set("pre", "0")
            pipe = c.pipeline(transaction=False)
            pipe.get("pre")
            pipe.set("s", "x")
            pipe.execute_command("NOSUCH", "a")
            pipe.execute_command("GET")
            pipe.incr("s")
            pipe.ping()
            pipe.incr("n")
            pipe.mget("s", "n", "none")
            pipe.echo("e")
            pipe.delete("s")
            pipe.exists("s", "n")
            got = await pipe.execute(raise_on_error=False)
            assert got[:2] == [b"0", True]
            assert isinstance(got[2], ResponseError) and "unknown command" in str(got[2])
            assert isinstance(got[3], ResponseError) and "wrong number" in str(got[3])
            assert isinstance(got[4], ResponseError) and "not an integer" in str(got[4])
            assert got[5:] == [True, 1, [b"x", b"1", None], b"e", 1, 1]
            await c.aclose()

    asyncio.run(main())


def test_a_plain_set_pipeline_reaches_every_replica_as_it_was_sent(tmp_path):
    """Through real nodes: 2,000 plain SETs pipelined in one write at each of
    the three nodes (the fast path, batches split at their limit): every
    replica ends in the state of applying them one by one."""
    import socket as socket_

    from kvstore.machine import KVStore

    async def main():
        async with kv_cluster(tmp_path) as nodes:
            reference = KVStore()
            for n, node in enumerate(nodes):
                commands = [[b"SET", b"k%d" % (i % 500), b"%d-%d" % (n, i)] for i in range(2000)]
                for c in commands:
                    reference.apply(encode_command(c))
                reader, writer = await asyncio.open_connection("127.0.0.1", node.redis_port)
                writer.transport.get_extra_info("socket").setsockopt(
                    socket_.IPPROTO_TCP, socket_.TCP_NODELAY, 1
                )
                writer.write(b"".join(request_bytes(*c) for c in commands))
                expected = b"+OK\r\n" * len(commands)
                got = await asyncio.wait_for(reader.readexactly(len(expected)), 30)
                assert got == expected
                writer.close()
            await eventually(
                lambda: {n.store.snapshot() for n in nodes} == {reference.snapshot()},
                what="every replica in the one-by-one state",
            )

    asyncio.run(main())


def test_a_redis_client_at_a_removed_node_is_told_to_use_a_member(tmp_path):
    """docs/membership.md section 4.1: a removed node answers NOTMEMBER (saying who
    the members are), never a stale value, and the members go on serving."""

    async def main():
        async with kv_cluster(tmp_path) as nodes:
            clients = [_client(n) for n in nodes]
            assert await clients[2].set("a", "1") is True
            after = await nodes[0].node.remove_replica(2)
            assert 2 not in [m["id"] for m in after["members"]]
            await eventually(lambda: nodes[2].node.status().role == "removed", what="node 2 knows")
            with pytest.raises(ResponseError, match=r"^NOTMEMBER .*members are \[0, 1\]"):
                await clients[2].set("b", "2")
            with pytest.raises(ResponseError, match=r"^NOTMEMBER"):
                await clients[2].get("a")
            assert await clients[1].set("c", "3") is True
            assert await clients[0].mget("a", "b", "c") == [b"1", None, b"3"]
            for c in clients:
                await c.aclose()

    asyncio.run(main())
