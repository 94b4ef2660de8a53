"""The fuzzer: connections planned from a seed and carried out against a live node.

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

Each frame is judged before it is sent (:mod:`sdpaxos.testing.judging`), so the
fuzzer knows what the node must do with it, and checks it.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sdpaxos.core.messages import MESSAGE_TYPES
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.config import TlsFiles, load_config
from sdpaxos.runtime.tls import client_context
from sdpaxos.testing.judging import Verdict, harmless, judge, judge_hello
from sdpaxos.testing.mutations import (
    MUTATIONS,
    WRONG_TYPES,
    core_batch_wrong_src,
    core_message,
    mutate,
    runtime_seed,
)
from sdpaxos.testing.result import FuzzResult
from sdpaxos.wire.codec import CodecError, encode_batch
from sdpaxos.wire.framing import Framer, frame

__all__ = [
    "CLOSE_TIMEOUT_S",
    "CONCURRENCY_DEFAULT",
    "HANDSHAKE_ATTEMPTS",
    "NODE_SHARE_DEFAULT",
    "PER_CONNECTION_DEFAULT",
    "SILENT_CONNECTIONS",
    "Fuzzer",
    "Plan",
    "Target",
]

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
            return frame(rf.encode_runtime(rf.Admin(rid, op, rng.choice(WRONG_TYPES))))
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
                    seed = runtime_seed(rng, kind)
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
                    runtime_seed(rng, rf.Kind.CLIENT)
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
        """Send :attr:`frames` frames (a few more: whole connections), then return.

        The connections made are the first plans whose frames reach :attr:`frames`."""
        loop = asyncio.get_running_loop()
        self._started = loop.time()
        res = self.result
        side = [asyncio.ensure_future(self._silent()) for _ in range(self.silent)]
        whats = ["plaintext", "no-cert"] + (["foreign-ca"] if self.foreign is not None else [])
        for _ in range(self.handshakes):
            for what in whats:
                await self._handshake(what)
        counter = iter(range(1 << 62))
        # The plans are counted as they are taken, not as their frames go out:
        # which connections a run makes is then the seed's alone, not the
        # workers' timing (a run of the same seed judges the same frames).
        planned = res.frames

        async def worker() -> None:
            nonlocal planned
            while planned < self.frames:
                plan = self.plan(next(counter))
                planned += sum(plan.kinds.values())
                await self.run_plan(plan)

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
