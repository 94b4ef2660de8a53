"""A node's send: a message broadcast to several peers is packed once per send.

Why: a C-accept of 250 commands costs tens of microseconds to check and pack;
the core broadcasts one message object to every peer, and the node hands one
``packed`` dict to every peer's batch of a send
(:func:`sdpaxos.wire.codec.encode_batch`). The frames are the bytes each batch
alone would give.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from sdpaxos.core.member import EpochMessage
from sdpaxos.core.messages import CAccept, OAck
from sdpaxos.core.types import Command
from sdpaxos.protocols import protocol
from sdpaxos.runtime import peers as peers_mod
from sdpaxos.runtime.local import make_local_cluster, node_configs
from sdpaxos.runtime.peers import Peers
from sdpaxos.runtime.status import Tally
from sdpaxos.wire.codec import FRAME_BYTES_MAX, MessageCodec, decode_batch, encode_batch
from sdpaxos.wire.members import MemberCodec
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


#: SDPaxos nodes send member messages: each core message in its epoch's envelope.
MEMBER_CODEC = MemberCodec(protocol("sdpaxos").codec)


def _env(message: Any) -> EpochMessage:
    return EpochMessage(0, 0, message)


def _accept(commands: int = 250, payload_bytes: int = 16) -> CAccept:
    cmds = tuple(Command(7, s, b"p" * payload_bytes, b"k%d" % s) for s in range(commands))
    return CAccept(0, 0, 0, 1, 0, cmds)


def _node(tmp_path: Any, n: int = 5) -> tuple[Peers, list[_Conn]]:
    """Node 0's peers, each connection one that keeps what it is sent."""
    cfg = node_configs(make_local_cluster(tmp_path, n, insecure=True))[0]
    peers = Peers(
        cfg,
        protocol(cfg.protocol),
        None,  # type: ignore[arg-type]  # sending asks nothing of the driver
        tally=Tally(),
        metrics=None,
        emulator=None,
        rng=random.Random(1),
    )
    conns = []
    for peer_id in range(1, n):
        conn = _Conn()
        peers.peers[peer_id].conn = conn  # type: ignore[assignment]
        conns.append(conn)
    return peers, conns


def test_a_broadcast_is_packed_once_and_every_peer_gets_the_same_bytes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, conns = _node(tmp_path)
    calls: list[tuple[list[Any], int]] = []
    real = node.encode_batch

    def encode(msgs: list[Any], packed: Any) -> bytes:
        calls.append((list(msgs), id(packed)))
        return real(msgs, packed)

    monkeypatch.setattr(node, "encode_batch", encode)
    accept = _accept()
    acks = [OAck(0, 0, peer) for peer in range(1, 5)]
    # Each peer's envelope is its own; the message inside is the same object.
    sent = {peer: [_env(accept), _env(acks[peer - 1])] for peer in range(1, 5)}
    node.send(sent)
    assert len(calls) == 4 and len({packed for _, packed in calls}) == 1
    for peer, conn in enumerate(conns, start=1):
        assert conn.out == [MEMBER_CODEC.encode_batch(sent[peer])]
        assert MEMBER_CODEC.decode_batch(conn.out[0]) == sent[peer]


def test_the_accept_is_converted_once_for_four_peers(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, conns = _node(tmp_path)
    seen: list[object] = []
    real = MessageCodec._message_bytes

    def message_bytes(self: MessageCodec, msg: Any) -> bytes:
        seen.append(msg)
        return real(self, msg)

    # Inside the envelopes, the protocol's codec packs each message.
    monkeypatch.setattr(MessageCodec, "_message_bytes", message_bytes)
    accept = _accept()
    node.send({peer: [_env(accept)] for peer in range(1, 5)})
    assert seen == [accept]
    assert all(len(conn.out) == 1 for conn in conns)


def test_a_batch_over_the_frame_limit_is_split_and_each_half_still_shared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = count_conversions(monkeypatch)
    big = _accept(commands=2, payload_bytes=FRAME_BYTES_MAX // 5)
    small = OAck(0, 0, 1)
    packed: dict[int, tuple[object, bytes]] = {}
    frames = peers_mod._encode(encode_batch, [big, big, big, small], packed)
    assert seen == [big, small]  # the halves reuse what the whole batch packed
    assert [decode_batch(f) for f in frames] == [[big, big], [big, small]]
    assert all(len(f) <= FRAME_BYTES_MAX for f in frames)
    assert set(packed) == {id(big), id(small)}
