"""A node's send: a message broadcast to several peers is packed once per send.

Why: a C-accept of 250 commands costs tens of microseconds to check and pack;
the core broadcasts one message object to every peer, and the node hands one
``packed`` dict to every peer's batch of a send
(:func:`sdpaxos.wire.codec.encode_batch`). The frames are the bytes each batch
alone would give.
"""

from __future__ import annotations

from typing import Any

import pytest

from sdpaxos.core.messages import CAccept, OAck
from sdpaxos.core.types import Command
from sdpaxos.runtime import node as node_mod
from sdpaxos.runtime.apps import PayloadLog
from sdpaxos.runtime.local import make_local_cluster, node_configs
from sdpaxos.runtime.node import Node
from sdpaxos.wire.codec import FRAME_BYTES_MAX, decode_batch, encode_batch
from tests.unit.test_codec_packed import count_conversions


class _Conn:
    """Takes what the node sends to a peer."""

    def __init__(self) -> None:
        self.out: list[bytes] = []
        self.frames_dropped = 0

    def send(self, payload: bytes) -> None:
        self.out.append(payload)

    def flush(self) -> None:
        pass


def _accept(commands: int = 250, payload_bytes: int = 16) -> CAccept:
    cmds = tuple(Command(7, s, b"p" * payload_bytes, b"k%d" % s) for s in range(commands))
    return CAccept(0, 0, 0, 1, 0, cmds)


def _node(tmp_path: Any, n: int = 5) -> tuple[Node, list[_Conn]]:
    cfg = node_configs(make_local_cluster(tmp_path, n, insecure=True))[0]
    node = Node(cfg, PayloadLog(), fsync=False, bootstrap=True)
    conns = []
    for peer_id in range(1, n):
        conn = _Conn()
        node._peers[peer_id].conn = conn  # type: ignore[assignment]
        conns.append(conn)
    return node, conns


def test_a_broadcast_is_packed_once_and_every_peer_gets_the_same_bytes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, conns = _node(tmp_path)
    calls: list[tuple[list[Any], int]] = []
    real = node._encode_batch

    def encode(msgs: list[Any], packed: Any) -> bytes:
        calls.append((list(msgs), id(packed)))
        return real(msgs, packed)

    monkeypatch.setattr(node, "_encode_batch", encode)
    accept = _accept()
    acks = [OAck(0, 0, peer) for peer in range(1, 5)]
    for peer in range(1, 5):
        node._out.setdefault(peer, []).extend([accept, acks[peer - 1]])
    node._send_out()
    assert len(calls) == 4 and len({packed for _, packed in calls}) == 1
    for peer, conn in enumerate(conns, start=1):
        assert conn.out == [encode_batch([accept, acks[peer - 1]])]
        assert decode_batch(conn.out[0]) == [accept, acks[peer - 1]]


def test_the_accept_is_converted_once_for_four_peers(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, conns = _node(tmp_path)
    seen = count_conversions(monkeypatch)
    accept = _accept()
    for peer in range(1, 5):
        node._out[peer] = [accept]
    node._send_out()
    assert seen == [accept]
    assert all(len(conn.out) == 1 for conn in conns)


def test_a_batch_over_the_frame_limit_is_split_and_each_half_still_shared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = count_conversions(monkeypatch)
    big = _accept(commands=2, payload_bytes=FRAME_BYTES_MAX // 5)
    small = OAck(0, 0, 1)
    packed: dict[int, tuple[object, bytes]] = {}
    frames = node_mod._encode(encode_batch, [big, big, big, small], packed)
    assert seen == [big, small]  # the halves reuse what the whole batch packed
    assert [decode_batch(f) for f in frames] == [[big, big], [big, small]]
    assert all(len(f) <= FRAME_BYTES_MAX for f in frames)
    assert set(packed) == {id(big), id(small)}
