"""``python -m sdpaxos fuzz``: throw random and mutated frames at a live node.

::

    python -m sdpaxos fuzz --frames 100000 --seed 1              # own 3-node cluster
    python -m sdpaxos fuzz --frames 100000 --config cluster.toml --id 2

Without ``--config`` the command starts a local cluster of three nodes in this
process (TLS on, no fsync, in a temporary directory) and fuzzes node
``--target`` (0). With ``--config`` it fuzzes node ``--id`` of a running
cluster, using that cluster's certificates (the fuzzer holds them all, as an
insider would).

**What is sent.** Every connection is authenticated (mutual TLS) and says a
valid hello, then carries a few frames the node must take (``valid:*``: a
STATUS, a READ, a PING; ``bad-field:*``: well-formed requests the node must
refuse with an ERROR reply but not a close, such as a SUBMIT with client id 0)
and ends with one hostile frame: random bytes, a valid frame mutated (bit
flips, truncation, bytes inserted or deleted, a wrong or oversized length
prefix, a field of the wrong msgpack type, an unknown tag, a wrong arity),
seeds made with the real encoders (:func:`~sdpaxos.wire.codec.encode_batch`
of :mod:`sdpaxos.core.messages`, :func:`~sdpaxos.runtime.frames.encode_runtime`).
Other connections attack the hello itself (a client hello on a node
certificate, a node hello on a client certificate or naming another node, a
mutated hello), and a few stay silent (the hello timeout must close them).
Without TLS: a plaintext connection, a certificate of a foreign CA, and no
certificate must each get nothing processed.

Before sending, every frame is judged by :func:`judge` (the same decoders and
the same acceptance rules as the node): ``refused`` (the node must count it and
close the connection), ``incomplete`` (the node waits for the rest; the fuzzer
closes, and the node must count a truncated frame) or ``accepted``. So the
fuzzer knows what to expect, and checks it: every refused frame is answered by
the node closing that connection, and the node's ``frames_rejected`` counter
(read through STATUS) grows by the number of refusals expected.

**Why a peer connection carries only frames the runtime must refuse.** The
fuzzer impersonates a replica (it has the node's certificate), so a
well-formed core message with that replica's ``src`` would be believed: a
Byzantine replica, outside the protocol's fault model, which could break
agreement legitimately. So on a replica's connection the fuzzer sends only
what the *runtime* must refuse before the core sees it: frames malformed at
the framing or codec level, runtime frames a replica may not send, and core
batches with absurd field values (huge and negative ballots, slots, views)
in which some message's ``src`` is not the authenticated peer. A mutation
that happens to decode into messages the core would step is not sent (it is
counted as ``skipped``). On a client's connection anything goes except a
mutation that decodes into a command or an admin operation the node would
carry out (counted as skipped too): the commands committed during the run
are the real client's.

While fuzzing, a normal :class:`~sdpaxos.runtime.client.Client` of the fuzzed
node keeps submitting commands; afterwards one more command is executed and
every node answers a linearizable read. The run passes when the node kept
serving (commands committed during and after, every refusal closed its
connection, the counter matches) and every replica answers the same (for the
built-in ``digest`` app: the same count and digest of commands executed).

One caveat on the counter: a replica's connection can be replaced by the real
replica reconnecting at any moment (the node keeps the newest connection per
peer), and a frame in flight on the replaced connection is then never read.
So the check is ``expected - replaced <= counted <= expected``, where
``replaced`` is bounded by the number of replica connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
import math
import random
import ssl
import sys
import tempfile
import types
import typing
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from sdpaxos.core.messages import MESSAGE_TYPES
from sdpaxos.core.types import Command
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.certs import make_cluster_certs
from sdpaxos.runtime.config import NodeConfig, TlsFiles, load_config
from sdpaxos.runtime.tls import client_context
from sdpaxos.wire.codec import FRAME_BYTES_MAX, VERSION, CodecError, decode_batch, encode_batch
from sdpaxos.wire.framing import Framer, frame

__all__ = [
    "FuzzResult",
    "Fuzzer",
    "Plan",
    "Target",
    "Verdict",
    "fuzz_cluster",
    "judge",
    "judge_hello",
    "main",
]

logger = logging.getLogger(__name__)

#: Frames the node must take, sent on each connection before its hostile frame.
PER_CONNECTION_DEFAULT = 8
#: Share of connections that impersonate a replica (8% attack the hello, the rest are clients).
NODE_SHARE_DEFAULT = 0.3
#: Connections open at once.
CONCURRENCY_DEFAULT = 16
#: How long the node has to close a connection after a frame it must refuse.
CLOSE_TIMEOUT_S = 5.0
#: How long the fuzzer lets the node read an incomplete frame before it closes.
_INCOMPLETE_WAIT_S = 0.1
#: Silent connections (no hello) opened per run; the hello timeout must close them.
SILENT_CONNECTIONS = 2
#: Connections without TLS, with a foreign CA's certificate, and with none, each.
HANDSHAKE_ATTEMPTS = 3
#: Largest hello the node takes (``transport._HELLO_FRAME_BYTES_MAX``).
_HELLO_BYTES_MAX = 256
#: Admin operations the node carries out (anything else is answered with ERROR).
_ADMIN_OPERATIONS = frozenset({"snapshot", "transfer_sequencer", "partition", "emulator"})
#: Ints that break code which assumes small non-negative numbers.
_ABSURD_INTS = (
    -1,
    -2,
    -(1 << 31),
    -(1 << 63),
    (1 << 31) - 1,
    1 << 32,
    1 << 40,
    (1 << 63) - 1,
    (1 << 64) - 1,
)
#: Values of every msgpack type, to put where another type belongs.
_WRONG_TYPES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    (1 << 64) - 1,
    -(1 << 63),
    1.5,
    -0.0,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "sdpaxos",
    "\u00e9\u2603",
    b"",
    b"\xff" * 3,
    [],
    [1, 2],
    [[1, 2, 3]],
    {},
    {"a": 1},
    {1: b"x"},
    msgpack.ExtType(1, b"x"),
)
_PACKER = msgpack.Packer(use_bin_type=True)


# ------------------------------------------------------------------ judging


class Verdict(enum.Enum):
    """What the node must do with bytes sent after (or as) the hello."""

    #: Count it, log it and close the connection.
    REFUSED = "refused"
    #: Wait for the rest of a frame (counted as truncated when the fuzzer closes).
    INCOMPLETE = "incomplete"
    #: Take every frame.
    ACCEPTED = "accepted"


def _judge_payload(payload: bytes, kind: rf.Kind, peer: int) -> list[object]:
    """The node's rules for one frame after the hello (``Node.frame``), for a
    node without the delay emulator (the fuzzer's), which refuses DUE marks."""
    if kind == rf.Kind.NODE:
        if payload and payload[0] == VERSION:
            msgs = decode_batch(payload)
            for m in msgs:
                if m.src != peer:
                    raise rf.FrameError("wrong src")
            return list(msgs)
        f = rf.decode_runtime(payload)
        if not isinstance(f, (rf.Ping, rf.Pong)):
            raise rf.FrameError(f"a replica may not send {type(f).__name__}")
        return [f]
    f = rf.decode_runtime(payload)
    if not isinstance(f, (rf.Submit, rf.Read, rf.Status, rf.Admin)):
        raise rf.FrameError(f"a client may not send {type(f).__name__}")
    return [f]


def judge(data: bytes, kind: rf.Kind, peer: int) -> tuple[Verdict, list[object]]:
    """How a node must take ``data`` sent after an accepted hello of ``kind``
    (``peer``: the authenticated replica), and the frames it takes first."""
    framer = Framer(FRAME_BYTES_MAX)
    framer.feed(data)
    taken: list[object] = []
    while True:
        try:
            payload = framer.next_frame()
            if payload is None:
                break
            taken += _judge_payload(payload, kind, peer)
        except (CodecError, rf.FrameError):
            return Verdict.REFUSED, taken
    return (Verdict.INCOMPLETE if framer.buffered_bytes else Verdict.ACCEPTED), taken


def judge_hello(
    data: bytes, identity: tuple[str, int] | None, target: int, replicas: int
) -> tuple[Verdict, int]:
    """How a node (``target`` of ``replicas``, TLS on) must take ``data`` as the
    first bytes of a connection whose certificate says ``identity``; and how many
    bytes the hello took (the rest is judged by :func:`judge`)."""
    framer = Framer(FRAME_BYTES_MAX)
    framer.feed(data)
    if framer.buffered_bytes > _HELLO_BYTES_MAX + 4 and int.from_bytes(data[:4], "big") > (
        _HELLO_BYTES_MAX
    ):
        return Verdict.REFUSED, 0
    try:
        payload = framer.next_frame()
    except CodecError:
        return Verdict.REFUSED, 0
    if payload is None:
        return Verdict.INCOMPLETE, 0
    if len(payload) > _HELLO_BYTES_MAX:
        return Verdict.REFUSED, 0
    try:
        hello = rf.decode_runtime(payload)
    except rf.FrameError:
        return Verdict.REFUSED, 0
    if not isinstance(hello, rf.Hello):
        return Verdict.REFUSED, 0
    if hello.kind == rf.Kind.NODE:
        if hello.id >= replicas or hello.id == target or identity != ("node", hello.id):
            return Verdict.REFUSED, 0
    elif identity is None or identity[0] != "client":
        return Verdict.REFUSED, 0
    return Verdict.ACCEPTED, 4 + len(payload)


def harmless(frames: Sequence[object], kind: rf.Kind) -> bool:
    """Frames a fuzzer may let the node take: they change no replicated state."""
    for f in frames:
        if isinstance(f, (rf.Status, rf.Read)) or (kind == rf.Kind.NODE and isinstance(f, rf.Ping)):
            continue
        if isinstance(f, rf.Submit) and (f.client_id == 0 or (f.seq == 0 and f.payload)):
            continue  # refused with an ERROR reply, never proposed
        if isinstance(f, rf.Admin) and f.operation not in _ADMIN_OPERATIONS:
            continue
        return False
    return True


# ------------------------------------------------------------------ seeds


def _int(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.45:
        return rng.randrange(0, 8)
    if r < 0.85:
        return rng.choice(_ABSURD_INTS)
    return rng.randrange(-(1 << 63), 1 << 64)


def _value(annotation: Any, rng: random.Random) -> Any:
    """A random value of a message field's type (absurd numbers included)."""
    supertype = getattr(annotation, "__supertype__", None)
    if supertype is not None:
        return _value(supertype, rng)
    if annotation is int:
        return _int(rng)
    if annotation is bool:
        return rng.random() < 0.5
    if annotation is bytes:
        return rng.randbytes(rng.randrange(0, 12))
    if annotation is Command:
        key = rng.randbytes(rng.randrange(0, 4)) if rng.random() < 0.5 else None
        return Command(_int(rng), _int(rng), rng.randbytes(rng.randrange(0, 16)), key)
    if isinstance(annotation, type) and issubclass(annotation, tuple):  # a NamedTuple
        hints = typing.get_type_hints(annotation)
        return annotation(*(_value(h, rng) for h in hints.values()))
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        choice = rng.choice(args)
        return None if choice is type(None) else _value(choice, rng)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_value(args[0], rng) for _ in range(rng.randrange(0, 4)))
        return tuple(_value(a, rng) for a in args)
    raise TypeError(f"no generator for {annotation!r}")


def core_message(cls: type, src: int, rng: random.Random) -> Any:
    """A message of class ``cls`` from ``src`` with random (often absurd) fields."""
    hints = typing.get_type_hints(cls)
    values = {f.name: _value(hints[f.name], rng) for f in dataclasses.fields(cls)}
    values["src"] = src
    return cls(**values)


def _wrong_src(rng: random.Random, peer: int, replicas: int) -> int:
    others = [k for k in range(replicas) if k != peer]
    return rng.choice([*others, replicas, replicas + 7, -1, (1 << 63) - 1, (1 << 64) - 1])


def core_batch_wrong_src(rng: random.Random, peer: int, replicas: int) -> bytes:
    """A core batch (real encoder) in which at least one message's ``src`` is not ``peer``."""
    while True:
        count = rng.randrange(1, 4)
        bad = rng.randrange(count)
        msgs = [
            core_message(
                rng.choice(MESSAGE_TYPES),
                _wrong_src(rng, peer, replicas) if k == bad or rng.random() < 0.3 else peer,
                rng,
            )
            for k in range(count)
        ]
        try:
            return encode_batch(msgs)
        except CodecError:
            continue  # a value out of msgpack's range: draw again


def _runtime_seed(rng: random.Random, kind: rf.Kind) -> bytes:
    """A valid runtime frame's payload of any tag (some illegal on this connection)."""
    rid = _int(rng) % (1 << 64)
    choices: list[rf.RuntimeFrame] = [
        rf.Status(rid),
        rf.Read(rid, rng.randbytes(4) if rng.random() < 0.5 else None, None),
        rf.Submit(rid, rng.choice([0, 1, 7]), rng.randrange(3), rng.randbytes(8), None, 1),
        rf.Admin(rid, rng.choice(["snapshot", "nope", ""]), rng.choice([None, 1, "0|1"])),
        rf.Ping(rng.random() * 1e6),
        rf.Pong(rng.random() * 1e6, rng.randrange(100)),
        rf.Due(1.0, 1.0 + rng.random(), rng.randrange(1 << 64)),
        rf.Hello(rng.choice([rf.Kind.NODE, rf.Kind.CLIENT]), rng.randrange(4)),
        rf.Reply(rid, rf.Code.OK, {"a": 1}),
    ]
    return rf.encode_runtime(rng.choice(choices))


# -------------------------------------------------------------- mutations


def _flip(data: bytes, rng: random.Random, start: int) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randrange(1, 9)):
        if len(out) > start:
            out[rng.randrange(start, len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _reframe(payload: bytes, rng: random.Random, fix: float = 0.7) -> bytes:
    """``payload`` framed with its true length, or (sometimes) the old wrong one."""
    return frame(payload) if rng.random() < fix else len(payload).to_bytes(4, "big") + payload


def _restructure(payload: bytes, rng: random.Random, how: str) -> bytes | None:
    """Unpack ``payload`` (first byte + msgpack), change it, pack again."""
    try:
        body = msgpack.unpackb(payload[1:], raw=False, strict_map_key=False, use_list=True)
    except Exception:
        return None
    if not isinstance(body, list) or not body:
        return None
    target = body
    if payload[0] == VERSION:  # a batch: pick one message
        target = rng.choice(body)
        if not isinstance(target, list) or not target:
            return None
    if how == "tag":
        target[0] = rng.choice(
            [len(MESSAGE_TYPES), 3, 9, 14, 21, 99, 255, -1, (1 << 64) - 1, "0", None, 1.0]
        )
    elif how == "type":
        target[rng.randrange(len(target))] = rng.choice(_WRONG_TYPES)
    elif how == "value":
        target[rng.randrange(1, len(target)) if len(target) > 1 else 0] = rng.choice(_ABSURD_INTS)
    elif rng.random() < 0.5:  # arity
        del target[rng.randrange(len(target))]
    else:
        target.insert(rng.randrange(len(target) + 1), rng.choice(_WRONG_TYPES))
    try:
        packed: bytes = _PACKER.pack(body)
    except Exception:
        return None
    return payload[:1] + packed


MUTATIONS = (
    "bitflip",
    "bitflip-prefix",
    "truncate",
    "insert",
    "delete",
    "length",
    "oversized",
    "random",
    "raw",
    "empty",
    "msgpack-type",
    "unknown-tag",
    "absurd-value",
    "arity",
    "big",
)


def mutate(payload: bytes, rng: random.Random, how: str) -> bytes:
    """``payload`` (a valid frame's) mutated by ``how``; the result is framed bytes."""
    framed = frame(payload)
    if how == "bitflip":
        return framed[:4] + _flip(payload, rng, 0)
    if how == "bitflip-prefix":
        return _flip(framed, rng, 0)[:4] + payload
    if how == "truncate":
        return framed[: rng.randrange(1, len(framed))]
    if how == "insert":
        at = rng.randrange(len(payload) + 1)
        return _reframe(payload[:at] + rng.randbytes(rng.randrange(1, 17)) + payload[at:], rng)
    if how == "delete":
        at = rng.randrange(len(payload))
        cut = payload[:at] + payload[at + rng.randrange(1, 9) :]
        return _reframe(cut, rng) if rng.random() < 0.7 else framed[:4] + cut
    if how == "length":
        size = max(0, len(payload) + rng.choice([-3, -2, -1, 1, 2, 5, 100, 70000]))
        return size.to_bytes(4, "big") + payload
    if how == "oversized":
        size = rng.randrange(FRAME_BYTES_MAX + 1, 1 << 32)
        return size.to_bytes(4, "big") + payload
    if how == "random":
        first = rng.choice([VERSION, rf.RUNTIME_PREFIX, rng.randrange(256)])
        return frame(bytes([first]) + rng.randbytes(rng.randrange(0, 200)))
    if how == "raw":
        return rng.randbytes(rng.randrange(1, 64))
    if how == "empty":
        return frame(b"")
    if how == "big":  # over the runtime's limit, under the framer's
        size = rf.RUNTIME_FRAME_BYTES_MAX + rng.randrange(1, 1 << 16)
        return frame(payload[:1] + bytes(size - 1))
    restructured = _restructure(
        payload,
        rng,
        {"msgpack-type": "type", "unknown-tag": "tag", "absurd-value": "value"}.get(how, how),
    )
    if restructured is None:
        return _flip(framed, rng, 4)
    return frame(restructured)


# ------------------------------------------------------------------ plans


@dataclass(frozen=True)
class Target:
    """The node to fuzz: where it is, the cluster's size, and the certificates."""

    host: str
    port: int
    node_id: int
    replicas: int
    #: Certificate (``TlsFiles``) per identity: ``("node", k)`` and ``("client", k)``.
    certs: dict[tuple[str, int], TlsFiles]

    @classmethod
    def from_config(cls, path: Path | str, node_id: int) -> Target:
        """The node ``node_id`` of a cluster file, with its CA's certificates."""
        config = load_config(path, node_id)
        if config.tls is None:
            raise ValueError("the fuzz command needs a cluster with TLS")
        certs: dict[tuple[str, int], TlsFiles] = {}
        for r in config.replicas:
            tls = load_config(path, r.id).tls
            assert tls is not None
            certs[("node", r.id)] = tls
        directory = config.tls.ca.parent
        for k in range(64):
            pem, key = directory / f"client{k}.pem", directory / f"client{k}.key"
            if not (pem.exists() and key.exists()):
                break
            certs[("client", k)] = TlsFiles(config.tls.ca, pem, key)
        if not any(who == "client" for who, _ in certs):
            raise ValueError(f"no client certificate (client0.pem) next to {config.tls.ca}")
        me = config.me
        return cls(me.host, me.port, node_id, len(config.replicas), certs)


@dataclass
class Plan:
    """One connection: its certificate, the bytes it sends, what the node must do."""

    identity: tuple[str, int] | None
    #: ``plaintext``, ``foreign-ca``, ``no-cert``, ``silent``, ``hello``, ``client``, ``node``.
    role: str
    data: bytes = b""
    verdict: Verdict = Verdict.ACCEPTED
    #: Frames sent, by kind (each counted once).
    kinds: Counter[str] = field(default_factory=Counter)
    skipped: int = 0


@dataclass
class FuzzResult:
    """What a run sent and what the node did (see :meth:`FuzzResult.lines`)."""

    frames: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    verdicts: Counter[str] = field(default_factory=Counter)
    roles: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    closed_by_node: int = 0
    #: Connections that should have been closed by the node and were not.
    not_closed: int = 0
    #: Connections whose TLS handshake or first bytes failed on our side.
    connect_failed: int = 0
    replies: int = 0
    #: Replies the node sent where no reply may come (a refused handshake).
    leaks: int = 0
    #: Refusals the node must count, and how many of them were on replica connections.
    expected_rejects: int = 0
    node_expected_rejects: int = 0
    skipped: int = 0
    handshakes_refused: Counter[str] = field(default_factory=Counter)
    handshakes_tried: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    # Filled by :func:`fuzz_cluster`.
    rejected_before: int | None = None
    rejected_after: int | None = None
    commands_committed: int = 0
    commands_failed: int = 0
    final_ok: bool = False
    agree: bool = False
    answers: dict[int, str] = field(default_factory=dict)
    executed: dict[int, int] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)
    node_errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def check(self) -> None:
        """Fill :attr:`problems` from what was measured."""
        p = self.problems
        p.clear()
        if self.not_closed:
            p.append(f"{self.not_closed} connections not closed after a frame the node must refuse")
        if self.leaks:
            p.append(f"{self.leaks} replies on connections that should have been refused")
        for what, tried in self.handshakes_tried.items():
            if self.handshakes_refused[what] != tried:
                p.append(f"{what}: {tried - self.handshakes_refused[what]} handshakes got through")
        if self.rejected_before is not None and self.rejected_after is not None:
            counted = self.rejected_after - self.rejected_before
            low = self.expected_rejects - self.node_expected_rejects
            if not low <= counted <= self.expected_rejects:
                p.append(
                    f"frames_rejected grew by {counted}, expected {low}..{self.expected_rejects}"
                )
        if self.commands_committed == 0:
            p.append("no command committed while fuzzing")
        if not self.final_ok:
            p.append("the final command did not execute")
        if not self.agree:
            p.append(f"replicas disagree: {self.answers}")
        if self.node_errors:
            p.append(f"{len(self.node_errors)} exceptions in the nodes: {self.node_errors[:3]}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["frames_per_s"] = round(self.frames_per_s, 1)
        d["ok"] = self.ok
        return d

    def lines(self) -> list[str]:
        out = [
            f"frames sent: {self.frames} in {self.elapsed_s:.1f} s "
            f"({self.frames_per_s:.0f} frames/s) on {self.connections} connections",
            "  by verdict: " + ", ".join(f"{k} {v}" for k, v in sorted(self.verdicts.items())),
            "  by role:    " + ", ".join(f"{k} {v}" for k, v in sorted(self.roles.items())),
            "  by kind:",
        ]
        out += [f"    {k:<34} {v}" for k, v in sorted(self.kinds.items())]
        out += [
            f"mutations skipped (would be stepped or carried out): {self.skipped}",
            f"connections closed by the node: {self.closed_by_node}; "
            f"not closed when they should: {self.not_closed}; "
            f"connect failures: {self.connect_failed}",
            f"replies received: {self.replies}",
            "refused handshakes: "
            + ", ".join(
                f"{k} {self.handshakes_refused[k]}/{v}"
                for k, v in sorted(self.handshakes_tried.items())
            ),
        ]
        if self.rejected_before is not None and self.rejected_after is not None:
            out.append(
                f"node frames_rejected: {self.rejected_before} -> {self.rejected_after} "
                f"(+{self.rejected_after - self.rejected_before}; expected "
                f"{self.expected_rejects - self.node_expected_rejects}..{self.expected_rejects})"
            )
        if self.reasons:
            out.append("  logged reasons:")
            out += [f"    {k:<50} {v}" for k, v in self.reasons.most_common(25)]
        out += [
            f"commands committed while fuzzing: {self.commands_committed} "
            f"(failed: {self.commands_failed}); final command executed: {self.final_ok}",
            "replicas agree: "
            + ("yes" if self.agree else "NO")
            + "".join(f"\n  node {k}: {v}" for k, v in sorted(self.answers.items())),
        ]
        if self.executed:
            out.append(
                "executed slots: " + ", ".join(f"{k}:{v}" for k, v in sorted(self.executed.items()))
            )
        out.append("result: " + ("OK" if self.ok else "FAILED: " + "; ".join(self.problems)))
        return out


class Fuzzer:
    """Makes :class:`Plan` s from a seed and carries them out against a :class:`Target`.

    ``frames``: how many frames to send in all; ``per_connection``: frames the
    node must take before each hostile one; ``as_node``: the replica to
    impersonate (default: the highest id other than the target's).
    """

    def __init__(
        self,
        target: Target,
        *,
        frames: int,
        seed: int,
        per_connection: int = PER_CONNECTION_DEFAULT,
        concurrency: int = CONCURRENCY_DEFAULT,
        as_node: int | None = None,
        foreign: TlsFiles | None = None,
        silent: int = SILENT_CONNECTIONS,
        handshakes: int = HANDSHAKE_ATTEMPTS,
        node_share: float = NODE_SHARE_DEFAULT,
    ) -> None:
        if target.replicas < 2:
            raise ValueError("fuzzing needs a cluster of at least two replicas")
        self.target = target
        self.frames = frames
        self.seed = seed
        self.per_connection = max(0, per_connection)
        self.concurrency = max(1, concurrency)
        peers = [k for k in range(target.replicas) if k != target.node_id]
        self.as_node = as_node if as_node is not None else max(peers)
        if self.as_node not in peers:
            raise ValueError(f"as_node must be a peer of node {target.node_id}")
        self.foreign = foreign
        self.silent = silent
        self.handshakes = handshakes
        self.node_share = node_share
        self.result = FuzzResult()
        self._contexts: dict[object, ssl.SSLContext] = {}
        self._clients = sorted(k for who, k in target.certs if who == "client")
        self._started = 0.0
        self._node_lock: asyncio.Lock | None = None

    # ------------------------------------------------------------ contexts

    def context(self, identity: tuple[str, int] | None) -> ssl.SSLContext:
        """A TLS context that presents the certificate of ``identity`` (None: none)."""
        ctx = self._contexts.get(identity)
        if ctx is None:
            if identity is None:
                ca = next(iter(self.target.certs.values())).ca
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.load_verify_locations(ca)
            else:
                ctx = client_context(self.target.certs[identity])
            self._contexts[identity] = ctx
        return ctx

    def _foreign_context(self) -> ssl.SSLContext:
        """Trusts the cluster's CA, presents a foreign CA's certificate."""
        ctx = self._contexts.get("foreign")
        if ctx is None:
            assert self.foreign is not None
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.load_verify_locations(next(iter(self.target.certs.values())).ca)
            ctx.load_cert_chain(self.foreign.cert, self.foreign.key)
            self._contexts["foreign"] = ctx
        return ctx

    # --------------------------------------------------------------- plans

    def _survivable(self, rng: random.Random, kind: rf.Kind, plan: Plan) -> bytes:
        """One frame the node must take without closing (valid, or bad fields)."""
        rid = rng.getrandbits(64)
        if kind == rf.Kind.NODE:
            t = rng.choice([0.0, rng.random() * 1e9, -1.0, 1e300, -1e300, math.inf, -math.inf])
            plan.kinds["valid:ping"] += 1
            return frame(rf.encode_runtime(rf.Ping(t)))
        r = rng.random()
        if r < 0.35:
            plan.kinds["valid:status"] += 1
            return frame(rf.encode_runtime(rf.Status(rid)))
        if r < 0.5:
            plan.kinds["valid:read"] += 1
            key = rng.randbytes(rng.randrange(0, 8)) if rng.random() < 0.7 else None
            return frame(rf.encode_runtime(rf.Read(rid, key, rng.choice([None, b"", b"q"]))))
        if r < 0.7:
            plan.kinds["bad-field:submit-client-0"] += 1
            f = rf.Submit(rid, 0, rng.getrandbits(64), rng.randbytes(8), None, rng.randrange(2))
            return frame(rf.encode_runtime(f))
        if r < 0.8:
            plan.kinds["bad-field:registration-with-payload"] += 1
            f = rf.Submit(rid, rng.getrandbits(63) | 1, 0, b"x" + rng.randbytes(4), None, 1)
            return frame(rf.encode_runtime(f))
        if r < 0.9:
            plan.kinds["bad-field:admin-operation"] += 1
            op = rng.choice(["", "nope", "SNAPSHOT", "transfer-sequencer", "\x00"])
            return frame(rf.encode_runtime(rf.Admin(rid, op, rng.choice(_WRONG_TYPES))))
        # A mutation the node must take (e.g. a flipped request id), if one comes up.
        for _ in range(8):
            how = rng.choice(("bitflip", "absurd-value", "msgpack-type"))
            seed = rf.encode_runtime(
                rf.Status(rid) if rng.random() < 0.5 else rf.Read(rid, None, None)
            )
            data = mutate(seed, rng, how)
            verdict, taken = judge(data, kind, -1)
            if verdict == Verdict.ACCEPTED and taken and harmless(taken, kind):
                plan.kinds[f"valid-mutated:{how}"] += 1
                return data
        plan.kinds["valid:status"] += 1
        return frame(rf.encode_runtime(rf.Status(rid)))

    def _hostile(self, rng: random.Random, kind: rf.Kind, plan: Plan) -> tuple[bytes, Verdict]:
        """The frame that ends a connection: refused, or left incomplete."""
        peer = self.as_node if kind == rf.Kind.NODE else -1
        for _ in range(64):
            if kind == rf.Kind.NODE and rng.random() < 0.25:
                seed = core_batch_wrong_src(rng, peer, self.target.replicas)
                source = "core"
                if rng.random() < 0.4:
                    data, how = frame(seed), "wrong-src"
                else:
                    how = rng.choice(MUTATIONS)
                    data = mutate(seed, rng, how)
            else:
                if kind == rf.Kind.NODE and rng.random() < 0.5:
                    # A batch of real messages from this replica, to be mutated
                    # into something the runtime must refuse.
                    msgs = [
                        core_message(rng.choice(MESSAGE_TYPES), peer, rng)
                        for _ in range(rng.randrange(1, 3))
                    ]
                    try:
                        seed = encode_batch(msgs)
                    except CodecError:
                        continue
                    source = "core"
                else:
                    seed = _runtime_seed(rng, kind)
                    source = "runtime"
                how = rng.choice(MUTATIONS)
                if how == "big" and rng.random() < 0.9:
                    how = "bitflip"  # a megabyte each: keep them rare
                data = mutate(seed, rng, how)
            verdict, taken = judge(data, kind, peer)
            if verdict != Verdict.ACCEPTED and harmless(taken, kind):
                plan.kinds[f"{source}:{how}"] += 1
                return data, verdict
            plan.skipped += 1
        plan.kinds["runtime:empty"] += 1
        return frame(b""), Verdict.REFUSED

    def _hello_plan(self, rng: random.Random, plan: Plan) -> None:
        """A connection whose hello the node must refuse."""
        t = self.target
        nodes = [k for k in range(t.replicas)]
        peers = [k for k in nodes if k != t.node_id]
        choice = rng.randrange(7)
        if choice == 0:
            plan.identity = ("node", rng.choice(peers))
            hello, how = rf.Hello(rf.Kind.CLIENT, rng.randrange(4)), "client-hello-on-node-cert"
        elif choice == 1:
            plan.identity = ("client", rng.choice(self._clients))
            hello, how = rf.Hello(rf.Kind.NODE, rng.choice(peers)), "node-hello-on-client-cert"
        elif choice == 2 and len(peers) > 1:
            me = rng.choice(peers)
            plan.identity = ("node", me)
            other = rng.choice([k for k in peers if k != me])
            hello, how = rf.Hello(rf.Kind.NODE, other), "node-hello-of-another-node"
        elif choice == 3:
            plan.identity = ("node", rng.choice(nodes))
            bogus = rng.choice([t.node_id, t.replicas, 99, (1 << 64) - 1])
            hello, how = rf.Hello(rf.Kind.NODE, bogus), "node-hello-not-a-peer"
        else:
            plan.identity = rng.choice(
                [("node", rng.choice(peers)), ("client", rng.choice(self._clients))]
            )
            hello_kind = rf.Kind.CLIENT if plan.identity[0] == "client" else rf.Kind.NODE
            for _ in range(32):
                seed = (
                    _runtime_seed(rng, rf.Kind.CLIENT)
                    if rng.random() < 0.3
                    else rf.encode_runtime(rf.Hello(hello_kind, 0))
                )
                how = rng.choice(MUTATIONS)
                if how == "big":
                    how = "length"
                data = mutate(seed, rng, how)
                verdict, _ = judge_hello(data, plan.identity, t.node_id, t.replicas)
                if verdict != Verdict.ACCEPTED:
                    plan.data, plan.verdict = data, verdict
                    plan.kinds[f"hello:{how}"] += 1
                    return
                plan.skipped += 1
            hello, how = rf.Hello(rf.Kind.NODE, t.node_id), "node-hello-not-a-peer"
        plan.data = frame(rf.encode_runtime(hello))
        plan.verdict, _ = judge_hello(plan.data, plan.identity, t.node_id, t.replicas)
        assert plan.verdict == Verdict.REFUSED, how
        plan.kinds[f"hello:{how}"] += 1

    def plan(self, index: int) -> Plan:
        """Connection number ``index`` of this seed (the same bytes every run)."""
        rng = random.Random(self.seed * 1_000_003 + index)
        r = rng.random()
        if r < 0.08:
            plan = Plan(None, "hello")
            self._hello_plan(rng, plan)
            return plan
        t = self.target
        if r < 0.08 + self.node_share:
            kind, identity = rf.Kind.NODE, ("node", self.as_node)
        else:
            kind, identity = rf.Kind.CLIENT, ("client", rng.choice(self._clients))
        plan = Plan(identity, "node" if kind == rf.Kind.NODE else "client")
        hello = frame(rf.encode_runtime(rf.Hello(kind, identity[1])))
        assert judge_hello(hello, identity, t.node_id, t.replicas)[0] == Verdict.ACCEPTED
        parts = [hello]
        parts += [self._survivable(rng, kind, plan) for _ in range(self.per_connection)]
        last, plan.verdict = self._hostile(rng, kind, plan)
        parts.append(last)
        plan.data = b"".join(parts)
        return plan

    # ------------------------------------------------------------- running

    async def _open(
        self, ctx: ssl.SSLContext | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        t = self.target
        return await asyncio.wait_for(
            asyncio.open_connection(
                t.host, t.port, ssl=ctx, server_hostname=t.host if ctx is not None else None
            ),
            CLOSE_TIMEOUT_S,
        )

    @staticmethod
    async def _drain_until_eof(
        reader: asyncio.StreamReader, timeout_s: float
    ) -> tuple[bool, bytes]:
        """Read until the other side closes; (closed in time, what came)."""
        got = bytearray()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False, bytes(got)
                chunk = await asyncio.wait_for(reader.read(1 << 16), remaining)
                if not chunk:
                    return True, bytes(got)
                got += chunk
        except TimeoutError:
            return False, bytes(got)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            return True, bytes(got)

    @staticmethod
    def _close(writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            writer.close()

    @staticmethod
    def count_replies(data: bytes) -> int:
        """Replies in what a node sent (garbage, e.g. a TLS alert, counts none)."""
        framer = Framer(rf.RUNTIME_FRAME_BYTES_MAX)
        count = 0
        try:
            framer.feed(data)
            while (payload := framer.next_frame()) is not None:
                if isinstance(rf.decode_runtime(payload), rf.Reply):
                    count += 1
        except (CodecError, rf.FrameError):
            pass
        return count

    async def run_plan(self, plan: Plan) -> None:
        """Carry out one connection's plan and record what the node did."""
        if plan.role == "node":
            # One replica connection at a time: the node keeps the newest per
            # peer, so a second one would close the first before its frames are read.
            if self._node_lock is None:
                self._node_lock = asyncio.Lock()
            async with self._node_lock:
                await self._run_plan(plan)
        else:
            await self._run_plan(plan)

    async def _run_plan(self, plan: Plan) -> None:
        res = self.result
        res.connections += 1
        res.roles[plan.role] += 1
        res.skipped += plan.skipped
        try:
            reader, writer = await self._open(self.context(plan.identity))
        except (OSError, ssl.SSLError, TimeoutError):
            res.connect_failed += 1
            return
        sent = sum(plan.kinds.values())
        try:
            writer.write(plan.data)
            await writer.drain()
        except (OSError, ssl.SSLError):
            # The node closed before everything went (it may refuse at the first
            # bad byte while we still write): what was written still counts.
            pass
        res.frames += sent
        res.kinds.update(plan.kinds)
        res.verdicts[plan.verdict.value] += 1
        if plan.verdict == Verdict.INCOMPLETE:
            # The node waits for the rest: close, and it must count a truncated frame.
            # First let it read what we sent and take its replies (closing on
            # unread data would reset the connection, which may discard ours).
            _, got = await self._drain_until_eof(reader, _INCOMPLETE_WAIT_S)
            res.replies += self.count_replies(got)
            self._close(writer)
            res.expected_rejects += 1
            if plan.role == "node":
                res.node_expected_rejects += 1
            return
        closed, got = await self._drain_until_eof(reader, CLOSE_TIMEOUT_S)
        self._close(writer)
        res.replies += self.count_replies(got)
        if plan.verdict == Verdict.REFUSED:
            res.expected_rejects += 1
            if plan.role == "node":
                res.node_expected_rejects += 1
            if closed:
                res.closed_by_node += 1
            else:
                res.not_closed += 1

    async def _silent(self) -> None:
        """A connection that never says hello: the node must close it in time."""
        from sdpaxos.runtime.transport import HELLO_TIMEOUT_S

        res = self.result
        res.connections += 1
        res.roles["silent"] += 1
        try:
            reader, writer = await self._open(self.context(("client", self._clients[0])))
        except (OSError, ssl.SSLError, TimeoutError):
            res.connect_failed += 1
            return
        closed, _ = await self._drain_until_eof(reader, HELLO_TIMEOUT_S * 2 + CLOSE_TIMEOUT_S)
        self._close(writer)
        res.expected_rejects += 1
        res.kinds["silent:no-hello"] += 1
        if closed:
            res.closed_by_node += 1
        else:
            res.not_closed += 1

    async def _handshake(self, what: str) -> None:
        """A connection the node must not take at all: no frame is answered."""
        res = self.result
        res.connections += 1
        res.roles[what] += 1
        res.handshakes_tried[what] += 1
        hello = frame(rf.encode_runtime(rf.Hello(rf.Kind.CLIENT, 0)))
        status = frame(rf.encode_runtime(rf.Status(1)))
        ctx: ssl.SSLContext | None
        if what == "plaintext":
            ctx = None
        elif what == "foreign-ca":
            ctx = self._foreign_context()
        else:
            ctx = self.context(None)
        try:
            reader, writer = await self._open(ctx)
        except (OSError, ssl.SSLError, TimeoutError):
            res.handshakes_refused[what] += 1  # refused at the handshake
            return
        try:
            writer.write(hello + status)
            await writer.drain()
        except (OSError, ssl.SSLError):
            pass
        _, got = await self._drain_until_eof(reader, CLOSE_TIMEOUT_S)
        self._close(writer)
        res.kinds[f"handshake:{what}"] += 2
        res.frames += 2
        if self.count_replies(got):
            res.leaks += 1
        else:
            res.handshakes_refused[what] += 1

    async def run(self, progress: Callable[[FuzzResult], None] | None = None) -> FuzzResult:
        """Send :attr:`frames` frames (a few more: whole connections), then return."""
        loop = asyncio.get_running_loop()
        self._started = loop.time()
        res = self.result
        side = [asyncio.ensure_future(self._silent()) for _ in range(self.silent)]
        whats = ["plaintext", "no-cert"] + (["foreign-ca"] if self.foreign is not None else [])
        for _ in range(self.handshakes):
            for what in whats:
                await self._handshake(what)
        counter = iter(range(1 << 62))

        async def worker() -> None:
            while res.frames < self.frames:
                await self.run_plan(self.plan(next(counter)))

        async def report() -> None:
            while True:
                await asyncio.sleep(1.0)
                res.elapsed_s = loop.time() - self._started
                if progress is not None:
                    progress(res)

        reporter = asyncio.ensure_future(report())
        try:
            await asyncio.gather(*(worker() for _ in range(self.concurrency)))
            await asyncio.gather(*side)
        finally:
            reporter.cancel()
            for task in side:
                task.cancel()
        res.elapsed_s = loop.time() - self._started
        return res


# ------------------------------------------------------------ whole runs


class _ReasonCounter(logging.Handler):
    """Counts the node's logged refusals by reason (``node N: dropped WHO: REASON``)."""

    def __init__(self, result: FuzzResult) -> None:
        super().__init__(logging.WARNING)
        self.result = result

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if record.msg.startswith("node %d: dropped") and isinstance(args, tuple) and len(args) == 3:
            reason = str(args[2])
            self.result.reasons[_reason_key(reason)] += 1


def _reason_key(reason: str) -> str:
    """A reason without its numbers and details, to count alike ones together."""
    head = reason.split(":", 1)[0] if not reason.startswith("hello") else reason[:30]
    return "".join("N" if c.isdigit() else c for c in head)[:50].rstrip()


async def _load(client: Any, stop: asyncio.Event, res: FuzzResult) -> None:
    """Commands through a normal client of the fuzzed node while the fuzz runs."""
    k = 0
    while not stop.is_set():
        k += 1
        try:
            await client.submit(f"fuzz-load-{k}".encode(), timeout_s=10.0)
            res.commands_committed += 1
        except Exception as exc:
            res.commands_failed += 1
            logger.warning("fuzz: a command failed while fuzzing: %s", exc)
        await asyncio.sleep(0.005)


async def fuzz_cluster(
    path: Path | str,
    target_id: int,
    *,
    frames: int,
    seed: int,
    nodes: Sequence[Any] = (),
    per_connection: int = PER_CONNECTION_DEFAULT,
    concurrency: int = CONCURRENCY_DEFAULT,
    silent: int = SILENT_CONNECTIONS,
    handshakes: int = HANDSHAKE_ATTEMPTS,
    progress: Callable[[FuzzResult], None] | None = None,
) -> FuzzResult:
    """Fuzz node ``target_id`` of the running cluster of ``path`` while a client
    commits commands through it; then check every replica answers the same.

    ``nodes``: the cluster's :class:`~sdpaxos.runtime.node.Node` objects when
    they run in this process (their state machines are compared too).
    """
    from sdpaxos.runtime.client import Client

    target = Target.from_config(path, target_id)
    config: NodeConfig = load_config(path, target_id)
    with tempfile.TemporaryDirectory(prefix="sdpaxos-fuzz-foreign-") as foreign_dir:
        make_cluster_certs(foreign_dir, 1, clients=0)
        foreign = TlsFiles(
            Path(foreign_dir) / "ca.pem",
            Path(foreign_dir) / "node0.pem",
            Path(foreign_dir) / "node0.key",
        )
        fuzzer = Fuzzer(
            target,
            frames=frames,
            seed=seed,
            per_connection=per_connection,
            concurrency=concurrency,
            foreign=foreign,
            silent=silent,
            handshakes=handshakes,
        )
        res = fuzzer.result
        reasons = _ReasonCounter(res)
        node_logger = logging.getLogger("sdpaxos.runtime.node")
        node_logger.addHandler(reasons)
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()

        def on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            tb = exc.__traceback__ if exc is not None else None
            files = []
            while tb is not None:
                files.append(tb.tb_frame.f_code.co_filename)
                tb = tb.tb_next
            if any("sdpaxos" in f and "fuzz" not in f for f in files):
                res.node_errors.append(f"{context.get('message')}: {exc!r}")
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(on_error)
        client_files = target.certs[("client", 0)]
        addresses = [(r.host, r.port) for r in config.replicas]
        me = (config.me.host, config.me.port)
        client = Client([me], tls=client_files, rng=random.Random(seed))
        try:
            res.rejected_before = int((await client.status(30.0))["frames_rejected"])
            stop = asyncio.Event()
            load = asyncio.ensure_future(_load(client, stop, res))
            try:
                await fuzzer.run(progress)
            finally:
                stop.set()
                await load
            try:
                await client.submit(b"fuzz-final", wait="executed", timeout_s=30.0)
                res.final_ok = True
            except Exception as exc:
                logger.error("fuzz: the final command failed: %s", exc)
            res.rejected_after = int((await client.status(30.0))["frames_rejected"])
            for k, address in enumerate(addresses):
                reader = Client([address], tls=client_files, rng=random.Random(seed + k))
                try:
                    value = await reader.read(None, b"", timeout_s=30.0)
                    res.answers[k] = value.hex() if isinstance(value, bytes) else repr(value)
                    res.executed[k] = int((await reader.status(30.0))["executed_upto"])
                except Exception as exc:
                    res.answers[k] = f"no answer: {exc!r}"
                finally:
                    await reader.close()
            answers = set(res.answers.values())
            res.agree = len(answers) == 1 and not next(iter(answers)).startswith("no answer")
            states = {
                (n.state_machine.count, n.state_machine.digest)
                for n in nodes
                if hasattr(n.state_machine, "digest")
            }
            if len(states) > 1:
                res.agree = False
        finally:
            await client.close()
            node_logger.removeHandler(reasons)
            loop.set_exception_handler(previous)
    res.check()
    return res


async def fuzz_local(
    directory: Path | str,
    *,
    frames: int,
    seed: int,
    target_id: int = 0,
    replicas: int = 3,
    progress: Callable[[FuzzResult], None] | None = None,
    **kw: Any,
) -> FuzzResult:
    """Start a local cluster in this process (TLS on, no fsync) and fuzz one node."""
    from sdpaxos.runtime.apps import DigestLog
    from sdpaxos.runtime.local import make_local_cluster, node_configs
    from sdpaxos.runtime.node import Node

    path = make_local_cluster(directory, replicas)
    nodes = [
        Node(cfg, DigestLog(), fsync=False, rng=random.Random(seed + cfg.node_id), bootstrap=True)
        for cfg in node_configs(path)
    ]
    started: list[Node] = []
    try:
        for node in nodes:
            await node.start()
            started.append(node)
        return await fuzz_cluster(
            path, target_id, frames=frames, seed=seed, nodes=nodes, progress=progress, **kw
        )
    finally:
        for node in reversed(started):
            await node.stop()


# -------------------------------------------------------------------- CLI


def _progress(total: int) -> Callable[[FuzzResult], None]:
    def show(res: FuzzResult) -> None:
        print(
            f"fuzz: {res.frames}/{total} frames, {res.connections} connections, "
            f"{res.closed_by_node} closed by the node, {res.commands_committed} commands, "
            f"{res.frames_per_s:.0f} frames/s",
            file=sys.stderr,
            flush=True,
        )

    return show


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sdpaxos fuzz", description=__doc__.split("\n")[0] if __doc__ else None
    )
    p.add_argument("--frames", type=int, default=100_000, help="frames to send (default 100000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config", default=None, help="a running cluster's TOML file")
    p.add_argument("--id", type=int, default=None, help="with --config: the node to fuzz")
    p.add_argument("--target", type=int, default=0, help="without --config: the node to fuzz")
    p.add_argument("--per-connection", type=int, default=PER_CONNECTION_DEFAULT)
    p.add_argument("--concurrency", type=int, default=CONCURRENCY_DEFAULT)
    p.add_argument("--dir", default=None, help="without --config: where the cluster lives")
    p.add_argument("--log", default=None, help="the nodes' log file (default DIR/fuzz.log)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    if args.config is not None and args.id is None:
        p.error("--config needs --id (the node to fuzz)")
    if args.frames < 1:
        p.error("--frames must be positive")
    from sdpaxos.runtime.cli import run_loop

    kw: dict[str, Any] = {
        "frames": args.frames,
        "seed": args.seed,
        "per_connection": args.per_connection,
        "concurrency": args.concurrency,
        "progress": _progress(args.frames),
    }
    with tempfile.TemporaryDirectory(prefix="sdpaxos-fuzz-") as tmp:
        root = Path(args.dir) if args.dir else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        # The node logs every refusal: to a file, not the terminal.
        log_path = Path(args.log) if args.log else root / "fuzz.log"
        handler = logging.FileHandler(log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        logging.getLogger().setLevel(logging.INFO)
        print(f"fuzz: logging to {log_path}", file=sys.stderr)
        try:
            if args.config is not None:
                result = run_loop(fuzz_cluster(args.config, args.id, **kw))
            else:
                result = run_loop(fuzz_local(root, target_id=args.target, **kw))
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print("\n".join(result.lines()))
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
