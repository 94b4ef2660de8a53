"""The protocol registry and the codec it gives each protocol."""

import random
from dataclasses import dataclass

import pytest

from sdpaxos.core.messages import MESSAGE_TYPES
from sdpaxos.core.types import Command
from sdpaxos.profiles import PAPER3
from sdpaxos.protocols import PROTOCOL_NAMES, ProtocolError, protocol
from sdpaxos.sim.run import run_closed_loop
from sdpaxos.wire import codec
from sdpaxos.wire.codec import CodecError, MessageCodec


@dataclass(frozen=True, slots=True)
class Ping:
    src: int
    nonce: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Carry:
    src: int
    commands: tuple[Command, ...]


@dataclass(frozen=True, slots=True)
class Other:
    src: int


def test_names_start_with_sdpaxos_and_unknown_names_are_refused() -> None:
    assert PROTOCOL_NAMES[0] == "sdpaxos"
    assert protocol("sdpaxos").message_types is MESSAGE_TYPES
    with pytest.raises(ProtocolError, match="choose one of sdpaxos"):
        protocol("raft")


def test_message_codec_round_trips_its_own_table_and_only_it() -> None:
    mc = MessageCodec((Ping, Carry))
    msgs = [Ping(1, 7, b"x"), Carry(2, (Command(3, 4, b"p", b"k"),))]
    assert mc.decode_batch(mc.encode_batch(msgs)) == msgs
    assert mc.decode(mc.encode(msgs[0])) == msgs[0]
    with pytest.raises(CodecError, match="not a message type of this codec"):
        mc.encode(Other(1))
    # A tag beyond the table, a field of the wrong type: refused, nothing half-built.
    bad_tag = codec.VERSION.to_bytes(1, "big") + b"\x91\x92\x05\x01"
    with pytest.raises(CodecError, match="unknown message tag"):
        mc.decode_batch(bad_tag)
    with pytest.raises(CodecError):
        mc.encode(Ping(1, "7", b"x"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        MessageCodec(())


def test_sdpaxos_spec_codec_matches_the_module_codec() -> None:
    spec = protocol("sdpaxos")
    rng = random.Random(3)
    replica = spec.make_replica(spec_config(), 0, _Machine(), rng, False, None)
    replica.propose(Command(1, 1, b"a"))
    out = [m for _, m in replica.ready().messages]
    assert out and spec.codec.encode_batch(out) == codec.encode_batch(out)


def test_run_closed_loop_records_the_protocol() -> None:
    result = run_closed_loop(PAPER3, seed=2, commands_per_region=3, protocol="sdpaxos")
    assert result.ok and result.options["protocol"] == "sdpaxos"


def spec_config():  # type: ignore[no-untyped-def]
    from sdpaxos.core.config import ClusterConfig
    from sdpaxos.core.types import ReplicaId

    return ClusterConfig(replicas=3, sequencer=ReplicaId(0))


class _Machine:
    def apply(self, payload: bytes) -> bytes:
        return payload

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass
