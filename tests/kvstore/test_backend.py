"""KVBackend and its Batcher in one process, over a node stand-in that applies
each batch at once: the runs a read becomes, the parts they answer through,
the loop turns before the replies leave, and the plain-SET fast path."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kvstore.codec import encode_command
from kvstore.resp import ConnState, Deferred
from tests.kvstore.resp_fake import request_bytes


class _ApplyingNode:
    """A node stand-in for KVBackend: each submitted payload is applied at once
    to a store (a replica of one), its answer given on the next loop turn."""

    reads_at_every_replica = True

    def __init__(self, store: Any) -> None:
        self.store = store
        self.payloads: list[bytes] = []
        self.keys: list[bytes | None] = []

    def submit_nowait(self, payload: bytes, *, key: bytes | None = None, wait: str = "ready"):
        self.payloads.append(payload)
        self.keys.append(key)
        future = asyncio.get_running_loop().create_future()
        future.set_result(self.store.apply(payload))
        return future

    def read_nowait(self, key: bytes | None = None, request: bytes | None = None, **kw: Any):
        future = asyncio.get_running_loop().create_future()
        future.set_result(self.store.query(request))
        return future


async def _turns_until(done: Any, most: int = 10) -> int:
    """Loop turns (``asyncio.sleep(0)``) until ``done()`` holds."""
    for turn in range(1, most + 1):
        await asyncio.sleep(0)
        if done():
            return turn
    raise AssertionError(f"not done after {most} loop turns")


def test_a_reads_runs_answer_through_one_deferred_each() -> None:
    """One kind of promise, one per run of a read: 16 GETs are one run of the
    read batch; GET GET SET GET is a read run, then a write run (the GET after
    the SET goes through the log, behind it); an error ends a run and is
    answered as a value where it stands. The node's own batches are applied
    from their items (the store's PackedBatches is empty afterwards)."""
    from kvstore.machine import KVStore
    from kvstore.server import KVBackend
    from kvstore.values import OK, Error

    async def main() -> None:
        store = KVStore()
        backend = KVBackend(_ApplyingNode(store), store)  # type: ignore[arg-type]
        gets = [[b"GET", b"k%d" % i] for i in range(16)]
        (part,) = backend.execute_many(gets, ConnState())
        assert type(part) is Deferred and part.count == 16
        await _turns_until(lambda: part.done)
        assert part.value == [None] * 16
        mixed = [[b"GET", b"a"], [b"GET", b"b"], [b"SET", b"a", b"1"], [b"GET", b"a"]]
        mixed += [[b"NOPE"], [b"GET", b"a"]]
        answers = backend.execute_many(mixed, ConnState())
        assert [type(a) for a in answers] == [Deferred, Deferred, Error, Deferred]
        parts = [a for a in answers if type(a) is Deferred]
        assert [p.count for p in parts] == [2, 2, 1]
        await _turns_until(lambda: all(p.done for p in parts))
        assert [p.value for p in parts] == [[None, None], [OK, b"1"], [b"1"]]
        assert not store.packed

    asyncio.run(main())


def test_execute_answers_one_command_with_a_value_or_a_deferred_of_one() -> None:
    """The single-command path (inline commands take it) answers with the same
    one kind of promise, standing for one reply."""
    from kvstore.machine import KVStore
    from kvstore.server import KVBackend
    from kvstore.values import OK, Error

    async def main() -> None:
        store = KVStore()
        backend = KVBackend(_ApplyingNode(store), store)  # type: ignore[arg-type]
        answer = backend.execute([b"SET", b"k", b"v"], ConnState())
        assert type(answer) is Deferred and answer.count == 1
        assert isinstance(backend.execute([b"NOPE"], ConnState()), Error)
        await _turns_until(lambda: answer.done)
        assert answer.value == [OK]
        written, _, _ = await _serve_reads([b"SET k w\r\nGET k\r\nINCR k\r\n"])
        assert written == b"+OK\r\n$1\r\nw\r\n-ERR value is not an integer or out of range\r\n"

    asyncio.run(main())


@pytest.mark.parametrize("command", [b"SET", b"GET"])
def test_replies_leave_in_the_loop_turn_their_batch_is_answered(command: bytes) -> None:
    """A read of 16 commands: the batch goes out at the next loop turn, the
    node stand-in answers it at the one after, and the replies are written in
    that same turn (the connection writes when a late reply arrives; it used
    to wait one more turn for a shared flush)."""
    from kvstore.machine import KVStore
    from kvstore.resp import RespConnection, RespServer
    from kvstore.server import KVBackend

    from .test_resp_hostile import FakeTransport

    async def main() -> None:
        store = KVStore()
        conn = RespConnection(RespServer(KVBackend(_ApplyingNode(store), store)))  # type: ignore[arg-type]
        transport = FakeTransport()
        conn.connection_made(transport)
        args = [command, b"k"] + ([b"v"] if command == b"SET" else [])
        conn.data_received(request_bytes(*args) * 16)
        assert await _turns_until(lambda: transport.written) == 2
        assert transport.written == (b"+OK\r\n" if command == b"SET" else b"$-1\r\n") * 16

    asyncio.run(main())


def test_the_batcher_never_builds_a_payload_past_the_limit():
    from kvstore import batcher as batching

    async def main():
        loop = asyncio.get_running_loop()
        sent: list[bytes] = []

        def submit(payload: bytes, key: bytes | None):
            sent.append(payload)
            future = loop.create_future()
            future.set_result(None)
            return future

        batcher = batching.Batcher(submit)
        small = [b"SET", b"k", b"v"]
        large = [b"SET", b"k", b"L" * (batching.BATCH_BYTES_MAX - 10)]
        for args in (small, large, small):
            batcher.add(args, b"k", batching.packed_bound(args))
        batcher.seal()
        batcher.flush()
        assert sent[0] == encode_command(small)  # flushed alone, before the large one
        assert encode_command(large) in sent  # the large one never shares a batch
        assert all(len(p) <= batching.BATCH_BYTES_MAX + 64 for p in sent)

    asyncio.run(main())


# --- the plain-SET fast path ---------------------------------------------------------------


async def _serve_reads(reads: list[bytes]) -> tuple[bytes, Any, _ApplyingNode]:
    """Feed ``reads`` to one connection of a RespServer over KVBackend; answer
    everything written back, the store, and the node stand-in."""
    from kvstore.machine import KVStore
    from kvstore.resp import RespConnection, RespServer
    from kvstore.server import KVBackend

    from .test_resp_hostile import FakeTransport

    store = KVStore()
    node = _ApplyingNode(store)
    server = RespServer(KVBackend(node, store))  # type: ignore[arg-type]
    conn = RespConnection(server)
    transport = FakeTransport()
    conn.connection_made(transport)
    for data in reads:
        conn.data_received(data)
        for _ in range(3):
            await asyncio.sleep(0)
    for _ in range(5):
        await asyncio.sleep(0)
    return transport.written, store, node


@pytest.mark.parametrize("per_read", [16, 1])
def test_plain_set_pipelines_answer_and_change_what_the_general_path_does(per_read: int):
    """A read of plain SETs takes the fast path (one run, OK replies written
    without decoding); the same SETs spelled ``sEt`` take the general path
    (command arrays, decoded answers). Byte-identical replies, the same whole
    state; and a read with a GET or SET NX inside mixes both, still right."""
    import random

    import msgpack

    from kvstore.machine import KVStore

    rng = random.Random(3)
    sets = [[b"k%d" % rng.randrange(40), b"v%d" % i] for i in range(3000 // (17 - per_read))]

    def reads(name: bytes) -> list[bytes]:
        return [
            b"".join(request_bytes(name, k, v) for k, v in sets[i : i + per_read])
            for i in range(0, len(sets), per_read)
        ]

    async def main() -> None:
        fast, fast_store, fast_node = await _serve_reads(reads(b"SET"))
        slow, slow_store, slow_node = await _serve_reads(reads(b"sEt"))
        assert fast == slow == b"+OK\r\n" * len(sets)
        assert fast_store.snapshot() == slow_store.snapshot()
        reference = KVStore()
        for k, v in sets:
            reference.apply(encode_command([b"SET", k, v]))
        assert fast_store.snapshot() == reference.snapshot()
        # The fast path's batches are one SET run each; the general path's
        # are command arrays (a read of one SET is a batch of one: a command).
        for p in fast_node.payloads:
            batch = msgpack.unpackb(p)
            if per_read == 1:
                assert batch[0] == b"SET" and len(batch) == 3
                continue
            items = msgpack.unpackb(batch.data)
            assert len(items) == 1 + 2 * items[0]
        for p in slow_node.payloads:
            batch = msgpack.unpackb(p)
            items = [batch] if per_read == 1 else msgpack.unpackb(batch.data)
            assert all(type(c) is list for c in items)
        mixed = (
            request_bytes(b"SET", b"a", b"1")
            + request_bytes(b"GET", b"a")
            + request_bytes(b"SET", b"a", b"2", b"NX")
            + request_bytes(b"SET", b"b", b"3")
            + request_bytes(b"SET", b"a", b"4")
            + request_bytes(b"GET", b"a")
        )
        out, store, _ = await _serve_reads([mixed])
        assert out == b"+OK\r\n$1\r\n1\r\n$-1\r\n+OK\r\n+OK\r\n$1\r\n4\r\n"
        assert store.items() == [(b"a", b"4"), (b"b", b"3")]
        # A batch names its key only when every SET in it names the same one.
        _, _, node = await _serve_reads(
            [
                b"".join(request_bytes(b"SET", b"same", b"%d" % i) for i in range(20)),
                request_bytes(b"SET", b"x", b"1") + request_bytes(b"SET", b"y", b"1"),
            ]
        )
        assert node.keys == [b"same", None]

    asyncio.run(main())


def test_the_batcher_splits_set_runs_at_the_batch_limits():
    from kvstore import batcher as batching
    from kvstore.codec import decode_results
    from kvstore.machine import KVStore

    async def main():
        loop = asyncio.get_running_loop()
        sent: list[bytes] = []
        store = KVStore()
        answers: list[int] = []

        def submit(payload: bytes, key: bytes | None):
            sent.append(payload)
            answers.append(len(decode_results(store.apply(payload))))
            future = loop.create_future()
            future.set_result(None)
            return future

        batcher = batching.Batcher(submit)
        flat = [x for i in range(1000) for x in (b"k%d" % i, b"v")]
        batcher.add_sets(flat, None, sum(map(len, flat)) + batching.SET_BOUND * 1000)
        assert batcher.seal()[0].count == 1000 and not sent
        more = [x for i in range(1000, 1100) for x in (b"k%d" % i, b"v")]
        batcher.add_sets(more, None, sum(map(len, more)) + batching.SET_BOUND * 100)
        parts = batcher.seal()
        assert [p.count for p in parts] == [24, 76]  # the batch filled at 1024
        assert answers == [batching.BATCH_COMMANDS_MAX]
        batcher.flush()
        assert answers == [1024, 76]
        # Over the byte limit: SET by SET, each batch under it.
        big = [x for i in range(8) for x in (b"b%d" % i, b"x" * (batching.BATCH_BYTES_MAX // 5))]
        batcher.add_sets(big, None, sum(map(len, big)) + batching.SET_BOUND * 8)
        assert sum(p.count for p in batcher.seal()) == 8
        batcher.flush()
        assert sum(answers) == 1108
        assert all(len(p) <= batching.BATCH_BYTES_MAX + 64 for p in sent)
        assert len(store) == 1108

    asyncio.run(main())
