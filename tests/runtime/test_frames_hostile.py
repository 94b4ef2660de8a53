"""Hostile frames against a live node: each is counted, closes only its connection,
and the node keeps committing commands (issue: malformed, truncated, oversized and
unknown frames; identity from the certificate; ``src`` must be the authenticated peer).

Every test runs an in-process cluster of three nodes with TLS, no fsync, data in
``tmp_path``. Node 0 is the one attacked (it is also the sequencer).
"""

from __future__ import annotations

import asyncio
import random
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest

from sdpaxos.core.member import EpochMessage
from sdpaxos.core.messages import MESSAGE_TYPES, Heartbeat, RRequest
from sdpaxos.core.replica import Replica
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime import peers, transport
from sdpaxos.runtime.apps import DigestLog
from sdpaxos.runtime.certs import make_cluster_certs
from sdpaxos.runtime.client import Client
from sdpaxos.runtime.clients import Clients
from sdpaxos.runtime.config import load_config
from sdpaxos.runtime.local import client_tls, make_local_cluster, node_configs
from sdpaxos.runtime.node import Node
from sdpaxos.runtime.tls import client_context
from sdpaxos.testing import Fuzzer, Verdict, fuzz, fuzz_local, fuzzer, judge, judging
from sdpaxos.testing.fuzz import _in_library
from sdpaxos.wire.codec import FRAME_BYTES_MAX, VERSION, MessageCodec
from sdpaxos.wire.framing import frame
from sdpaxos.wire.members import MemberCodec

#: SDPaxos nodes exchange member messages (each core message in its epoch's envelope).
MEMBER_CODEC = MemberCodec(MessageCodec(MESSAGE_TYPES))

#: How long the node may take to close a connection it must refuse.
CLOSE_S = 5.0

Body = Callable[[Path, list[Node]], Awaitable[Any]]


def _run(tmp_path: Path, body: Body) -> Any:
    async def main() -> Any:
        path = make_local_cluster(tmp_path / "cluster", 3)
        nodes = [
            Node(cfg, DigestLog(), fsync=False, rng=random.Random(cfg.node_id), bootstrap=True)
            for cfg in node_configs(path)
        ]
        for node in nodes:
            await node.start()
        try:
            await _connected(nodes)
            return await body(path, nodes)
        finally:
            for node in reversed(nodes):
                await node.stop()

    return asyncio.run(main())


async def _connected(nodes: list[Node]) -> None:
    for _ in range(500):
        if all(p.connected for n in nodes for p in n.status().peers):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the cluster did not connect")


def _address(path: Path, node: int = 0) -> tuple[str, int]:
    r = load_config(path, 0).replicas[node]
    return r.host, r.port


def _context(path: Path, identity: tuple[str, int]) -> ssl.SSLContext:
    cfg = load_config(path, 0)
    assert cfg.tls is not None
    if identity[0] == "node":
        tls = load_config(path, identity[1]).tls
        assert tls is not None
        return client_context(tls)
    files = client_tls(path, identity[1])
    assert files is not None
    return client_context(files)


async def _send(
    address: tuple[str, int], ctx: ssl.SSLContext | None, data: bytes, *, close: bool = False
) -> tuple[bool, bytes]:
    """Send ``data``; (the node closed the connection within CLOSE_S, what it sent)."""
    host, port = address
    reader, writer = await asyncio.open_connection(
        host, port, ssl=ctx, server_hostname=host if ctx is not None else None
    )
    got = bytearray()
    closed = False
    try:
        writer.write(data)
        await writer.drain()
        if close:
            await asyncio.sleep(0.05)
            return False, bytes(got)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_S
        while (left := deadline - loop.time()) > 0:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), left)
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            got += chunk
    except (OSError, ssl.SSLError):
        closed = True
    finally:
        writer.close()
    return closed, bytes(got)


def _hello(kind: rf.Kind, ident: int) -> bytes:
    return frame(rf.encode_runtime(rf.Hello(kind, ident)))


async def _until(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not within 5 s: {what}")


async def _still_serving(path: Path, node: Node, client: Client) -> None:
    """The client connected before the attack commits through the same connection."""
    conn = client._conn
    assert conn is not None and not conn.lost.done()
    result = await client.submit(b"after the attack", wait="executed", timeout_s=20.0)
    assert result is not None
    assert client._conn is conn, "the client's connection was closed too"
    assert client.retries == 0
    # And a new client of the node commits too.
    async with Client([_address(path, node.id)], tls=client_tls(path)) as fresh:
        await fresh.submit(b"new client", wait="ready", timeout_s=20.0)


def _garbage() -> bytes:
    return random.Random(1).randbytes(64)


# Bytes sent after a valid hello, on a client's (``client``) or node 2's
# (``node``) connection; each must be refused.
REFUSED_CASES: dict[str, tuple[str, bytes]] = {
    "garbage bytes": ("client", _garbage()),
    "garbage frame": ("client", frame(b"\xc1\x93garbage")),
    "oversized length prefix": ("client", (FRAME_BYTES_MAX + 1).to_bytes(4, "big") + b"x" * 16),
    "oversized prefix on a replica": ("node", ((1 << 32) - 1).to_bytes(4, "big") + b"x"),
    "unknown runtime tag": (
        "client",
        frame(bytes([rf.RUNTIME_PREFIX]) + msgpack.packb([99, 1])),
    ),
    "runtime frame a client may not send": ("client", frame(rf.encode_runtime(rf.Ping(1.0)))),
    "runtime frame a replica may not send": ("node", frame(rf.encode_runtime(rf.Status(1)))),
    "unknown core tag": (
        "node",
        frame(bytes([VERSION]) + msgpack.packb([[len(MESSAGE_TYPES), 2, 0, 1, 2]])),
    ),
    "empty frame on a replica": ("node", frame(b"")),
    "emulator mark to a node without the emulator": (
        "node",
        frame(rf.encode_runtime(rf.Due(1.0, 2.0, 7))),
    ),
    "pong of an infinitely old ping": ("node", frame(rf.encode_runtime(rf.Pong(float("-inf"), 0)))),
    "core batch of a wrong type": ("node", frame(bytes([VERSION]) + msgpack.packb({"a": 1}))),
}


@pytest.mark.parametrize("case", sorted(REFUSED_CASES))
def test_refused_frame_closes_only_its_connection(tmp_path: Path, case: str) -> None:
    role, bad = REFUSED_CASES[case]
    kind = rf.Kind.NODE if role == "node" else rf.Kind.CLIENT
    # The case is what the fuzzer's judge calls refused, so the two agree.
    assert judge(bad, kind, 2)[0] == Verdict.REFUSED

    async def body(path: Path, nodes: list[Node]) -> None:
        node = nodes[0]
        async with Client([_address(path)], tls=client_tls(path)) as client:
            await client.submit(b"before", timeout_s=20.0)
            before = node.frames_rejected
            identity = ("node", 2) if role == "node" else ("client", 1)
            hello = _hello(kind, identity[1])
            closed, _ = await _send(_address(path), _context(path, identity), hello + bad)
            assert closed
            assert node.frames_rejected == before + 1
            await _still_serving(path, node, client)

    _run(tmp_path, body)


def test_a_bug_handling_a_frame_closes_that_connection_not_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame that makes our own code raise (here: a planted bug on STATUS) is
    refused like a bad frame: counted, its connection closed, the node serving."""
    original = Clients._answer_status

    def buggy(self: Clients, conn: Any, request_id: int) -> None:
        if request_id == 666:
            raise KeyError("planted")
        original(self, conn, request_id)

    monkeypatch.setattr(Clients, "_answer_status", buggy)

    async def body(path: Path, nodes: list[Node]) -> None:
        node = nodes[0]
        async with Client([_address(path)], tls=client_tls(path)) as client:
            await client.submit(b"before", timeout_s=20.0)
            before = node.frames_rejected
            data = _hello(rf.Kind.CLIENT, 1) + frame(rf.encode_runtime(rf.Status(666)))
            closed, _ = await _send(_address(path), _context(path, ("client", 1)), data)
            assert closed
            assert node.frames_rejected == before + 1
            await _still_serving(path, node, client)

    _run(tmp_path, body)


def test_truncated_frame_then_close_is_counted(tmp_path: Path) -> None:
    async def body(path: Path, nodes: list[Node]) -> None:
        node = nodes[0]
        async with Client([_address(path)], tls=client_tls(path)) as client:
            await client.submit(b"before", timeout_s=20.0)
            before = node.frames_rejected
            status = frame(rf.encode_runtime(rf.Status(7)))
            data = _hello(rf.Kind.CLIENT, 1) + status[:-3]
            await _send(_address(path), _context(path, ("client", 1)), data, close=True)
            await _until(lambda: node.frames_rejected == before + 1, "truncated frame counted")
            await _still_serving(path, node, client)

    _run(tmp_path, body)


def test_wrong_src_batch_is_dropped_before_any_message_is_stepped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stepped: list[object] = []
    marker = 0x5D9A05

    def step(self: Replica, message: Any, now_ms: float) -> None:
        if isinstance(message, RRequest) and message.read_id == marker:
            stepped.append(message)
        original(self, message, now_ms)

    original = Replica.step
    monkeypatch.setattr(Replica, "step", step)

    async def body(path: Path, nodes: list[Node]) -> None:
        node = nodes[0]
        ctx = _context(path, ("node", 2))
        good = RRequest(2, 0, marker, b"k")  # from node 2, on node 2's connection
        liar = Heartbeat(1, 0, 0, 0, 0)  # says node 1, on node 2's connection
        async with Client([_address(path)], tls=client_tls(path)) as client:
            await client.submit(b"before", timeout_s=20.0)
            before = node.frames_rejected
            hello = _hello(rf.Kind.NODE, 2)
            batch = MEMBER_CODEC.encode_batch([EpochMessage(0, 2, good), EpochMessage(0, 1, liar)])
            closed, _ = await _send(_address(path), ctx, hello + frame(batch))
            assert closed
            assert node.frames_rejected == before + 1
            assert stepped == [], "a message of the refused batch was stepped"
            await _still_serving(path, node, client)
            # Control: the same message alone is stepped (so the check above can fail).
            alone = MEMBER_CODEC.encode_batch([EpochMessage(0, 2, good)])
            data = hello + frame(alone) + b"\x00\x00"  # then a truncated frame
            await _send(_address(path), ctx, data, close=True)
            await _until(lambda: stepped == [good], "the good message stepped")

    _run(tmp_path, body)


HELLO_CASES = {
    "client hello on a node certificate": (("node", 2), rf.Kind.CLIENT, 0),
    "node hello on a client certificate": (("client", 0), rf.Kind.NODE, 2),
    "node hello naming another node": (("node", 2), rf.Kind.NODE, 1),
    "node hello naming the node itself": (("node", 0), rf.Kind.NODE, 0),
}


@pytest.mark.parametrize("case", sorted(HELLO_CASES))
def test_hello_must_match_the_certificate(tmp_path: Path, case: str) -> None:
    identity, kind, ident = HELLO_CASES[case]

    async def body(path: Path, nodes: list[Node]) -> None:
        node = nodes[0]
        links = {p: node.peers.peers[p].conn for p in (1, 2)}
        async with Client([_address(path)], tls=client_tls(path)) as client:
            await client.submit(b"before", timeout_s=20.0)
            before = node.frames_rejected
            status = frame(rf.encode_runtime(rf.Status(1)))
            closed, got = await _send(
                _address(path), _context(path, identity), _hello(kind, ident) + status
            )
            assert closed
            assert Fuzzer.count_replies(got) == 0
            assert node.frames_rejected == before + 1
            # The real replicas' links were not replaced by the impostor.
            assert {p: node.peers.peers[p].conn for p in (1, 2)} == links
            await _still_serving(path, node, client)

    _run(tmp_path, body)


def test_no_hello_in_time_is_counted_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "HELLO_TIMEOUT_S", 0.2)

    async def body(path: Path, nodes: list[Node]) -> None:
        node = nodes[0]
        async with Client([_address(path)], tls=client_tls(path)) as client:
            await client.submit(b"before", timeout_s=20.0)
            before = node.frames_rejected
            closed, _ = await _send(_address(path), _context(path, ("client", 0)), b"")
            assert closed
            assert node.frames_rejected == before + 1
            await _still_serving(path, node, client)

    _run(tmp_path, body)


def _foreign_context(path: Path, tmp_path: Path, who: str) -> ssl.SSLContext:
    """Trusts the cluster's CA; presents a certificate of another CA."""
    make_cluster_certs(tmp_path / "foreign", 3, clients=1)
    cfg = load_config(path, 0)
    assert cfg.tls is not None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(cfg.tls.ca)
    ctx.load_cert_chain(tmp_path / "foreign" / f"{who}.pem", tmp_path / "foreign" / f"{who}.key")
    return ctx


def _plain_context(path: Path) -> ssl.SSLContext:
    """Trusts the cluster's CA; presents no certificate."""
    cfg = load_config(path, 0)
    assert cfg.tls is not None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(cfg.tls.ca)
    return ctx


@pytest.mark.parametrize("how", ["foreign-ca client", "foreign-ca node", "no certificate"])
def test_peer_without_a_cluster_certificate_cannot_connect(tmp_path: Path, how: str) -> None:
    async def body(path: Path, nodes: list[Node]) -> None:
        node = nodes[0]
        links = {p: node.peers.peers[p].conn for p in (1, 2)}
        if how == "no certificate":
            ctx, hello = _plain_context(path), _hello(rf.Kind.CLIENT, 0)
        elif how == "foreign-ca client":
            ctx, hello = _foreign_context(path, tmp_path, "client0"), _hello(rf.Kind.CLIENT, 0)
        else:
            ctx, hello = _foreign_context(path, tmp_path, "node2"), _hello(rf.Kind.NODE, 2)
        clients_before = set(node.clients.connections)
        try:
            closed, got = await _send(
                _address(path), ctx, hello + frame(rf.encode_runtime(rf.Status(1)))
            )
        except (OSError, ssl.SSLError):
            closed, got = True, b""  # refused during the handshake
        assert closed
        assert Fuzzer.count_replies(got) == 0
        assert set(node.clients.connections) == clients_before
        assert {p: node.peers.peers[p].conn for p in (1, 2)} == links
        async with Client([_address(path)], tls=client_tls(path)) as client:
            await client.submit(b"after", wait="executed", timeout_s=20.0)

    _run(tmp_path, body)


def test_plaintext_to_a_tls_node_gets_nothing_processed(tmp_path: Path) -> None:
    async def body(path: Path, nodes: list[Node]) -> None:
        node = nodes[0]
        before = node.frames_rejected
        clients_before = set(node.clients.connections)
        data = _hello(rf.Kind.CLIENT, 0) + frame(rf.encode_runtime(rf.Status(1)))
        closed, got = await _send(_address(path), None, data)
        assert closed
        assert Fuzzer.count_replies(got) == 0
        assert set(node.clients.connections) == clients_before
        assert node.frames_rejected == before  # never got as far as a frame
        async with Client([_address(path)], tls=client_tls(path)) as client:
            await client.submit(b"after", wait="executed", timeout_s=20.0)

    _run(tmp_path, body)


def test_fuzz_blames_the_node_for_exceptions_in_the_library_not_in_its_own_modules() -> None:
    # The loop's exception handler of a fuzz run records an exception as the
    # node's when its traceback passes through the library's code.
    assert _in_library(peers.__file__) and _in_library(transport.__file__)
    for tool in (fuzz, fuzzer, judging):
        assert not _in_library(tool.__file__)
    assert not _in_library(asyncio.__file__)


def test_fuzz_2000_frames_node_keeps_serving_and_replicas_agree(tmp_path: Path) -> None:
    result = asyncio.run(fuzz_local(tmp_path, frames=2000, seed=1))
    assert result.problems == []
    assert result.frames >= 2000
    assert result.not_closed == 0
    assert result.closed_by_node > 0
    assert result.commands_committed > 0 and result.final_ok
    assert result.agree and len(set(result.answers.values())) == 1
    assert result.rejected_before is not None and result.rejected_after is not None
    counted = result.rejected_after - result.rejected_before
    assert counted >= result.expected_rejects - result.node_expected_rejects
    assert counted <= result.expected_rejects
    # Every refusal the node counted is logged with its reason, and the run tallies them.
    assert sum(result.reasons.values()) >= counted > 0
    assert result.verdicts["refused"] > 0 and result.verdicts["incomplete"] > 0


def test_a_fuzz_run_makes_the_seeds_connections_whatever_the_timing() -> None:
    """Which connections a run makes is the seed's alone: the plans are counted
    as they are taken, so workers that finish in another order (here: random
    delays) stop after the same plans, and a run's judged counts repeat."""
    from sdpaxos.testing import Fuzzer
    from sdpaxos.testing.fuzzer import Target

    def run(delays: random.Random) -> list[int]:
        fuzzer = Fuzzer(
            # The plans read only which identities there are, never their files.
            Target("127.0.0.1", 1, 0, 3, dict.fromkeys([("client", 0), ("node", 2)])),  # type: ignore[arg-type]
            frames=400,
            seed=3,
            silent=0,
            handshakes=0,
        )
        taken: list[int] = []
        plan = fuzzer.plan

        def numbered(index: int) -> Any:
            taken.append(index)
            return plan(index)

        async def run_plan(p: Any) -> None:
            await asyncio.sleep(delays.random() / 100)
            fuzzer.result.frames += sum(p.kinds.values())

        fuzzer.plan = numbered  # type: ignore[method-assign]
        fuzzer.run_plan = run_plan  # type: ignore[method-assign]
        asyncio.run(fuzzer.run())
        return sorted(taken)

    first = run(random.Random(0))
    assert first == list(range(len(first))) and len(first) > 16
    assert run(random.Random(1)) == first
