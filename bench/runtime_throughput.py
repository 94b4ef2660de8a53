"""Throughput of the runtime: 3 node processes, 16-byte commands, many outstanding.

What runs
---------

A local cluster (:func:`sdpaxos.runtime.local.make_local_cluster`, TLS on
unless ``--insecure``) in a temporary directory, and its 3 replicas as real
processes (``python -m sdpaxos node --config F --id N [--no-fsync]``, the
default app ``digest``). Once every node answers a status request, sees both
peers and a sequencer holds its lease, ``--loaders`` load-generator processes
(this module with ``--loader-child``) open ``--outstanding`` sessions in total,
spread evenly over the 3 nodes, each session registered through the log like
the runtime's :class:`~sdpaxos.runtime.client.Client` does. Each session then
runs a closed loop: one 16-byte command outstanding, the next one sent as soon
as the node answers READY.

Two load generators (``--load``):

* ``raw`` (default): the runtime's client frames
  (:mod:`sdpaxos.runtime.frames`) over one connection per node, no task or
  future per command; the commands that a read of the socket unblocks go out in
  one write. It is what a lean client costs, so that the nodes, not the
  generator, are what is measured.
* ``client``: :class:`sdpaxos.runtime.client.Client` (one per node), one task
  per session calling ``submit``.
* ``batch``: the raw loader again, but the commands that one socket read
  unblocks go out as one ``SUBMIT_MANY`` frame, and the node answers each flush
  with one ``REPLY_MANY`` (what :class:`~sdpaxos.runtime.client.Client` does
  for the submits of one loop turn).

After ``--warmup`` seconds (not measured) the window opens: it lasts
``--seconds``, or until ``--commands`` READY replies came in it, whichever is
first. Reported for the window: commands committed (READY at the client) per
second; each node process's CPU seconds (``utime + stime`` of
``/proc/<pid>/stat``, every thread, so the log thread too) per 1,000 commands;
the load generators' CPU likewise. fsync on and fsync off run in the same
invocation (a fresh cluster each), and the table gives their ratio.

Verification (exit status 1 on failure): after the load stops and every
outstanding command was answered, a linearizable read (``Client.read``) at each
node returns the ``DigestLog`` count and digest; all three must be equal, and
the count must equal the commands the generators saw answered (plus nothing
else: a session's registration is not applied to the state machine).

Run ``python -m bench.runtime_throughput --help`` for the knobs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import msgpack

from bench.runtime_procs import ChildLines, cpu_seconds, machine_cpu, spawn, stop_processes
from bench.runtime_procs import StdinWords as _Stdin
from bench.runtime_procs import run_loop as _run_loop
from bench.runtime_procs import say as _say
from bench.runtime_procs import split as _split
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.config import load_config
from sdpaxos.runtime.local import client_tls, make_local_cluster

REPLICAS = 3
PAYLOAD_BYTES = 16
#: How long to wait for the cluster to come up (processes, TLS, a sequencer lease).
STARTUP_TIMEOUT_S = 60.0
#: How long loaders may take to open their sessions, and to drain at the end.
LOADER_TIMEOUT_S = 120.0
#: How often a loader reports its count to the parent.
REPORT_INTERVAL_S = 0.1


async def _fsyncs(path: Path) -> list[int]:
    """Each node's fsync count (its status), -1 for a node that did not answer."""
    from sdpaxos.runtime.client import Client

    cfg = load_config(path, 0)
    tls = client_tls(path, 0)
    out = []
    for r in cfg.replicas:
        c = Client([(r.host, r.port)], tls=tls)
        try:
            out.append(int((await c.status(5.0))["fsyncs"]))
        except Exception:
            out.append(-1)
        finally:
            await c.close()
    return out


# ------------------------------------------------------------------ the loaders


_COUNT_BYTES = 8


class CrcLog:
    """A cheaper stand-in for the ``digest`` app, to see what the app costs: the
    count and a CRC-32 chained over the payloads in execution order (weaker than
    BLAKE2b, enough to see replicas diverge in a benchmark). ``query`` answers
    like :class:`~sdpaxos.runtime.apps.DigestLog`: count (8 bytes) + 32 bytes.

    ``python -m sdpaxos node --app bench.runtime_throughput:CrcLog``."""

    def __init__(self) -> None:
        self.count = 0
        self.crc = 0

    def apply(self, payload: bytes) -> bytes:
        self.crc = zlib.crc32(payload, self.crc)
        self.count += 1
        return b""

    def snapshot(self) -> bytes:
        return self.count.to_bytes(_COUNT_BYTES, "big") + self.crc.to_bytes(4, "big") + bytes(28)

    def restore(self, data: bytes) -> None:
        self.count = int.from_bytes(data[:_COUNT_BYTES], "big")
        self.crc = int.from_bytes(data[_COUNT_BYTES : _COUNT_BYTES + 4], "big")

    def query(self, request: bytes) -> bytes:
        return self.snapshot()


def _payload(loader: int, session: int, seq: int) -> bytes:
    return struct.pack(">HIxxQ", loader, session, seq)


class _RawConn(asyncio.Protocol):
    """One connection to one node carrying many closed-loop sessions.

    A request id is ``session index << 32 | seq`` so that a reply names its
    session without a lookup table; a registration (seq 0) is ``index << 32``.
    """

    def __init__(
        self,
        loader: int,
        base: int,
        sessions: int,
        registered: asyncio.Future[None],
        batch: bool = False,
    ):
        from sdpaxos.wire.framing import Framer

        self.loader = loader
        self.base = base  # first session index of this connection (payload uniqueness)
        self.framer = Framer(rf.RUNTIME_FRAME_BYTES_MAX)
        self.transport: asyncio.Transport | None = None
        self.client_ids = [0] * sessions
        self.seqs = [0] * sessions
        self.to_register = sessions
        self.registered = registered
        #: Submit many commands per SUBMIT_MANY frame.
        self.batch = batch
        self.running = False
        self.stopped = False
        self.outstanding = 0
        self.answered = 0
        self.retries = 0
        self.failure: str | None = None
        self.drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pack = msgpack.Packer(use_bin_type=True).pack
        self._unpack = msgpack.unpackb
        self._prefix = struct.Struct(">I").pack

    def _frame(self, body: list[Any]) -> bytes:
        packed: bytes = b"\xc1" + self._pack(body)
        return self._prefix(len(packed)) + packed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport
        out = [self._frame([0, rf.MAGIC, rf.PROTOCOL_VERSION, int(rf.Kind.CLIENT), 0])]
        for i in range(len(self.seqs)):
            # Distinct and odd (never 0): two registrations with one nonce would share a reply.
            nonce = (os.getpid() << 24 | self.loader << 20 | (self.base + i)) << 1 | 1
            out.append(self._frame([10, i << 32, nonce, 0, b"", None, 1]))
        self.transport.write(b"".join(out))

    def _submit(self, i: int) -> bytes:
        seq = self.seqs[i] + 1
        self.seqs[i] = seq
        payload = _payload(self.loader, self.base + i, seq)
        return self._frame([10, i << 32 | seq, self.client_ids[i], seq, payload, None, 0])

    def _submit_many(self, sessions: list[int]) -> bytes:
        """The next command of each session, as frames or as one batch frame."""
        if not self.batch:
            return b"".join(self._submit(i) for i in sessions)
        items = []
        seqs, cids, loader, base = self.seqs, self.client_ids, self.loader, self.base
        for i in sessions:
            seq = seqs[i] + 1
            seqs[i] = seq
            items.append([i << 32 | seq, cids[i], seq, _payload(loader, base + i, seq), None, 0])
        return b"".join(
            self._frame([14, items[k : k + rf.MANY_ITEMS_MAX]])
            for k in range(0, len(items), rf.MANY_ITEMS_MAX)
        )

    def start(self) -> None:
        self.running = True
        assert self.transport is not None
        self.outstanding = len(self.seqs)
        self.transport.write(self._submit_many(list(range(len(self.seqs)))))

    def stop(self) -> None:
        self.running = False
        self.stopped = True
        if self.outstanding == 0 and not self.drained.done():
            self.drained.set_result(None)

    def data_received(self, data: bytes) -> None:
        framer = self.framer
        framer.feed(data)
        out: list[int] = []
        unpack = self._unpack
        while (payload := framer.next_frame()) is not None:
            body = unpack(payload[1:], use_list=False)
            if body[0] == 21:  # REPLY_MANY
                for rid, code, value in body[1]:
                    self._reply(rid, code, value, out)
            else:
                self._reply(body[1], body[2], body[3], out)
            if self.failure is not None:
                return
        if out:
            assert self.transport is not None
            self.transport.write(self._submit_many(out))
        if self.stopped and self.outstanding == 0 and not self.drained.done():
            self.drained.set_result(None)

    def _reply(self, rid: int, code: int, value: Any, out: list[int]) -> None:
        """One answer: READY frees its session for the next command (into ``out``)."""
        i, seq = rid >> 32, rid & 0xFFFFFFFF
        if code == 0 and seq:  # READY
            self.answered += 1
            if self.running:
                out.append(i)
            else:
                self.outstanding -= 1
        elif code in (0, 1) and seq == 0:  # a registration, executed
            self.client_ids[i] = int.from_bytes(value, "big")
            self.to_register -= 1
            if self.to_register == 0 and not self.registered.done():
                self.registered.set_result(None)
        elif code == rf.Code.RETRY:  # overloaded: the same command again, soon
            self.retries += 1
            if not seq:
                self.failure = f"registration refused: {value!r}"
                return
            payload = _payload(self.loader, self.base + i, seq)
            frame = self._frame([10, rid, self.client_ids[i], seq, payload, None, 0])
            asyncio.get_running_loop().call_later(0.01, self._resend, frame)
        else:
            self.failure = f"reply code {code} for session {i} seq {seq}: {value!r}"
            if self.transport is not None:
                self.transport.close()

    def _resend(self, frame: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.failure is None and not self.drained.done():
            self.failure = f"connection lost: {exc}"
        for fut in (self.registered, self.drained):
            if not fut.done():
                fut.set_exception(ConnectionError(self.failure or "connection lost"))


async def _report_until(done: asyncio.Future[Any], count: Any) -> None:
    while not done.done():
        _say(f"count {count()}")
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(asyncio.shield(done), REPORT_INTERVAL_S)


async def _loader_raw(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_config(args.config, 0)
    tls = client_tls(args.config, args.loader_index % 4)
    ssl_ctx = None
    if tls is not None:
        from sdpaxos.runtime.tls import client_context

        ssl_ctx = client_context(tls)
    loop = asyncio.get_running_loop()
    stdin = _Stdin()
    conns: list[_RawConn] = []
    per_node = _split(args.sessions, REPLICAS)
    base = 0
    for r, n in zip(cfg.replicas, per_node, strict=True):
        if n == 0:
            continue
        registered: asyncio.Future[None] = loop.create_future()
        b = base
        _, proto = await loop.create_connection(
            lambda b=b, n=n, registered=registered: _RawConn(
                args.loader_index, b, n, registered, batch=args.load == "batch"
            ),
            r.host,
            r.port,
            ssl=ssl_ctx,
            server_hostname=r.host if ssl_ctx is not None else None,
        )
        assert isinstance(proto, _RawConn)
        conns.append(proto)
        base += n
    await asyncio.gather(*(c.registered for c in conns))
    _say("ready")
    await stdin.expect("go")
    for c in conns:
        c.start()
    stopped = loop.create_task(stdin.expect("stop"))
    await _report_until(stopped, lambda: sum(c.answered for c in conns))
    for c in conns:
        c.stop()
    drained = asyncio.gather(*(c.drained for c in conns))
    await _report_until(drained, lambda: sum(c.answered for c in conns))
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    failures = [c.failure for c in conns if c.failure]
    return {
        "sent": sum(sum(c.seqs) for c in conns),
        "answered": sum(c.answered for c in conns),
        "retries": sum(c.retries for c in conns),
        "failures": failures,
    }


async def _loader_client(args: argparse.Namespace) -> dict[str, Any]:
    from sdpaxos.runtime.client import Client

    cfg = load_config(args.config, 0)
    tls = client_tls(args.config, args.loader_index % 4)
    loop = asyncio.get_running_loop()
    stdin = _Stdin()
    clients = [Client([(r.host, r.port)], tls=tls) for r in cfg.replicas]
    per_node = _split(args.sessions, REPLICAS)
    answered = 0
    running = True
    go = loop.create_future()

    async def session(c: Client, index: int, registered: asyncio.Future[None]) -> None:
        nonlocal answered
        # The first submit registers the session (Client does it on demand).
        await c.submit(_payload(args.loader_index, index, 0))
        answered += 1
        registered.set_result(None)
        await go
        seq = 1
        while running:
            await c.submit(_payload(args.loader_index, index, seq))
            answered += 1
            seq += 1

    tasks = []
    registrations = []
    index = 0
    for c, n in zip(clients, per_node, strict=True):
        for _ in range(n):
            fut: asyncio.Future[None] = loop.create_future()
            registrations.append(fut)
            tasks.append(loop.create_task(session(c, index, fut)))
            index += 1
    await asyncio.gather(*registrations)
    _say("ready")
    await stdin.expect("go")
    go.set_result(None)
    stopped = loop.create_task(stdin.expect("stop"))
    await _report_until(stopped, lambda: answered)
    running = False
    drained = asyncio.gather(*tasks, return_exceptions=True)
    await _report_until(drained, lambda: answered)
    failures = [repr(r) for r in drained.result() if isinstance(r, BaseException)]
    for c in clients:
        await c.close()
    return {
        "answered": answered,
        "retries": sum(c.retries for c in clients),
        "failures": failures,
    }


def _loader_main(args: argparse.Namespace) -> int:
    run = _loader_client if args.load == "client" else _loader_raw
    if args.loader_profile:
        import cProfile

        prof = cProfile.Profile()
        result = prof.runcall(_run_loop, run(args), args.load != "client")
        prof.dump_stats(args.loader_profile)
    else:
        result = _run_loop(run(args), args.load != "client")
    _say("done " + json.dumps(result))
    return 0


# ------------------------------------------------------------------ the parent


@dataclass
class ModeResult:
    fsync: bool
    seconds: float
    committed: int
    committed_per_s: float
    node_cpu_s: list[float]
    node_cpu_s_per_1000: list[float]
    loader_cpu_s: float
    loader_cpu_s_per_1000: float
    #: Commands over the CPU time of the 3 nodes and the loaders together: what one
    #: core does for the whole cluster (times the free cores: the ceiling here).
    commands_per_cpu_s: float
    #: Share of all cores' time busy during the window (every process, ours or not).
    machine_busy: float
    #: Log writes (one fsync each when fsync is on) per second, each node.
    fsyncs_per_s: list[float]
    answered_total: int
    executed: list[int]
    digests: list[str]
    retries: int
    agree: bool
    problems: list[str] = field(default_factory=list)
    node_status: list[dict[str, Any]] = field(default_factory=list)


#: A loader process's lines (``count``, ``ready``, ``done``), read by a thread.
_Loader = ChildLines


async def _wait_up(path: Path, timeout_s: float) -> None:
    from sdpaxos.runtime.client import Client

    cfg = load_config(path, 0)
    tls = client_tls(path, 0)
    deadline = time.monotonic() + timeout_s
    while True:
        statuses: list[dict[str, Any] | None] = []
        for r in cfg.replicas:
            c = Client([(r.host, r.port)], tls=tls, attempt_timeout_s=1.0)
            try:
                statuses.append(await c.status(1.0))
            except Exception:
                statuses.append(None)
            finally:
                await c.close()
        up = [s for s in statuses if s is not None]
        if len(up) == len(statuses):
            connected = all(all(p["connected"] for p in s["peers"]) for s in up)
            leased = any(s["is_sequencer"] and s["has_lease"] for s in up)
            if connected and leased:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"cluster not up after {timeout_s} s: {statuses}")
        await asyncio.sleep(0.2)


async def _read_digests(path: Path) -> tuple[list[int], list[str], list[dict[str, Any]]]:
    from sdpaxos.runtime.client import Client

    cfg = load_config(path, 0)
    tls = client_tls(path, 0)
    counts, digests, statuses = [], [], []
    for r in cfg.replicas:
        c = Client([(r.host, r.port)], tls=tls)
        try:
            value = await c.read(None, b"", timeout_s=30.0)
            assert value is not None and len(value) == 40
            counts.append(int.from_bytes(value[:8], "big"))
            digests.append(value[8:].hex())
            statuses.append(await c.status())
        finally:
            await c.close()
    return counts, digests, statuses


def run_mode(args: argparse.Namespace, fsync: bool, progress: Any) -> ModeResult:
    label = "fsync on" if fsync else "fsync off"
    root = Path(tempfile.mkdtemp(prefix="sdpaxos-rtbench-"))
    path = make_local_cluster(root, REPLICAS, insecure=args.insecure)
    node_cmd = [sys.executable, "-m", "sdpaxos", "node", "--bootstrap", "--config", str(path)]
    node_cmd += ["--log-level", "WARNING", "--app", args.app]
    if not fsync:
        node_cmd.append("--no-fsync")
    nodes: list[subprocess.Popen[bytes]] = []
    loaders: list[_Loader] = []
    try:
        for k in range(REPLICAS):
            cmd = [*node_cmd, "--id", str(k)]
            if args.node_profile is not None and k == args.node_profile_id:
                cmd = [
                    sys.executable,
                    "-m",
                    "cProfile",
                    "-o",
                    f"{args.node_profile}.{label.replace(' ', '-')}.prof",
                    "-m",
                    *cmd[2:],
                ]
            with open(root / f"node{k}.log", "ab") as log:
                nodes.append(spawn(cmd, stderr=log))
        _run_loop(_wait_up(path, STARTUP_TIMEOUT_S))
        progress(f"{label}: cluster up in {root}")
        for i, n in enumerate(_split(args.outstanding, args.loaders)):
            cmd = [sys.executable, "-m", "bench.runtime_throughput", "--loader-child"]
            cmd += ["--config", str(path), "--loader-index", str(i), "--sessions", str(n)]
            cmd += ["--load", args.load]
            if args.loader_profile:
                cmd += ["--loader-profile", f"{args.loader_profile}.{i}.{label[-3:].strip()}.prof"]
            proc = spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            loaders.append(_Loader(proc))
        for ld in loaders:
            if not ld.ready.wait(LOADER_TIMEOUT_S):
                raise RuntimeError("a loader did not open its sessions in time")
        registered = sum(ld.count for ld in loaders)
        progress(f"{label}: {args.outstanding} sessions open; warm-up {args.warmup} s")
        for ld in loaders:
            ld.tell("go")

        def snapshot() -> tuple[float, int, list[float], float, tuple[float, float]]:
            t = time.perf_counter()
            count = sum(ld.count for ld in loaders)
            return (
                t,
                count,
                [cpu_seconds(p.pid) for p in nodes],
                sum(cpu_seconds(ld.proc.pid) for ld in loaders),
                machine_cpu(),
            )

        time.sleep(args.warmup)
        f0 = _run_loop(_fsyncs(path))
        t0, c0, n0, l0, m0 = snapshot()
        last = t0
        while True:
            time.sleep(0.05)
            now = time.perf_counter()
            count = sum(ld.count for ld in loaders) - c0
            if now - t0 >= args.seconds or (args.commands and count >= args.commands):
                break
            if any(p.poll() is not None for p in nodes):
                raise RuntimeError(f"a node exited; see {root}/node*.log")
            if now - last >= 1.0:
                last = now
                progress(
                    f"{label}: {now - t0:.1f} s, {count:,} committed, {count / (now - t0):,.0f}/s"
                )
        t1, c1, n1, l1, m1 = snapshot()
        f1 = _run_loop(_fsyncs(path))
        for ld in loaders:
            ld.tell("stop")
        for ld in loaders:
            if not ld.finished.wait(LOADER_TIMEOUT_S):
                raise RuntimeError("a loader did not drain in time")
        seconds, committed = t1 - t0, c1 - c0
        node_cpu = [b - a for a, b in zip(n0, n1, strict=True)]
        loader_cpu = l1 - l0
        busy = (m1[0] - m0[0]) / max(1, m1[1] - m0[1])
        fsyncs = [b - a for a, b in zip(f0, f1, strict=True)]
        executed, digests, statuses = _run_loop(_read_digests(path))
        problems = []
        answered = 0
        retries = 0
        for k, ld in enumerate(loaders):
            if ld.done is None:
                problems.append(f"loader {k} exited without a result")
                continue
            answered += ld.done["answered"]
            retries += ld.done["retries"]
            problems += [f"loader {k}: {f}" for f in ld.done["failures"]]
        # Client mode counts each session's first submit (its registration is separate).
        del registered
        if len(set(digests)) != 1 or len(set(executed)) != 1:
            problems.append(f"nodes diverged: executed {executed}, digests {digests}")
        if executed and executed[0] != answered:
            problems.append(
                f"nodes executed {executed[0]} commands, loaders saw {answered} READY "
                f"(sent {[ld.done and ld.done.get('sent') for ld in loaders]})"
            )
        per1000 = max(committed, 1) / 1000
        return ModeResult(
            fsync=fsync,
            seconds=seconds,
            committed=committed,
            committed_per_s=committed / seconds if seconds > 0 else 0.0,
            node_cpu_s=node_cpu,
            node_cpu_s_per_1000=[c / per1000 for c in node_cpu],
            loader_cpu_s=loader_cpu,
            loader_cpu_s_per_1000=loader_cpu / per1000,
            commands_per_cpu_s=committed / max(1e-9, sum(node_cpu) + loader_cpu),
            machine_busy=busy,
            fsyncs_per_s=[f / seconds for f in fsyncs],
            answered_total=answered,
            executed=executed,
            digests=digests,
            retries=retries,
            agree=not problems,
            problems=problems,
            node_status=[
                {k: s.get(k) for k in ("id", "fsyncs", "records_written", "log_bytes", "view")}
                for s in statuses
            ],
        )
    finally:
        for ld in loaders:
            if ld.proc.poll() is None:
                ld.proc.kill()
            ld.proc.wait()
        stop_processes(nodes)
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)


def format_table(results: list[ModeResult]) -> str:
    head = (
        "| fsync | commands/s | CPU s / 1000 cmds, node 0 / 1 / 2 | loader CPU s / 1000 "
        "| commands / CPU s (all 4) | machine busy | log writes/s, node 0 / 1 / 2 | window |"
    )
    lines = [head, "|---|---:|---|---:|---:|---:|---|---|"]
    for r in results:
        cpu = " / ".join(f"{c:.4f}" for c in r.node_cpu_s_per_1000)
        lines.append(
            f"| {'on' if r.fsync else 'off'} | {r.committed_per_s:,.0f} | {cpu} | "
            f"{r.loader_cpu_s_per_1000:.4f} | {r.commands_per_cpu_s:,.0f} | "
            f"{100 * r.machine_busy:.0f} % | "
            f"{' / '.join(f'{f:,.0f}' for f in r.fsyncs_per_s)} | "
            f"{r.committed:,} in {r.seconds:.1f} s |"
        )
    by = {r.fsync: r for r in results}
    if True in by and False in by and by[True].committed_per_s > 0:
        ratio = by[False].committed_per_s / by[True].committed_per_s
        lines.append("")
        lines.append(f"fsync off / fsync on: {ratio:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.runtime_throughput", description=__doc__.split("\n")[0]
    )
    p.add_argument("--seconds", type=float, default=10.0, help="measured window (default 10)")
    p.add_argument("--commands", type=int, default=0, help="end the window after this many")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds not measured (default 3)")
    p.add_argument("--outstanding", type=int, default=3000, help="sessions in total")
    p.add_argument("--loaders", type=int, default=1, help="load-generator processes")
    p.add_argument(
        "--load",
        choices=["raw", "client", "batch"],
        default="raw",
        help="raw frames (default), the runtime's Client, or raw SUBMIT_MANY frames",
    )
    p.add_argument("--insecure", action="store_true", help="no TLS")
    p.add_argument(
        "--app",
        default="digest",
        help="the nodes' app: digest (default) or bench.runtime_throughput:CrcLog (cheaper)",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument("--fsync-only", action="store_true")
    only.add_argument("--no-fsync-only", action="store_true")
    p.add_argument("--quick", action="store_true", help="short windows (about a minute)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--keep", action="store_true", help="keep the cluster directories")
    p.add_argument("--node-profile", default=None, help="cProfile node --node-profile-id to FILE")
    p.add_argument("--node-profile-id", type=int, default=0)
    p.add_argument("--loader-profile", default=None, help="cProfile each loader to FILE.*")
    # The load generator's own process.
    p.add_argument("--loader-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--loader-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--sessions", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.loader_child:
        return _loader_main(args)
    if args.quick:
        args.seconds = min(args.seconds, 5.0)
        args.warmup = min(args.warmup, 2.0)
    if args.outstanding < REPLICAS * args.loaders:
        p.error("--outstanding must be at least 3 per loader")

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    modes = [True, False]
    if args.fsync_only:
        modes = [True]
    elif args.no_fsync_only:
        modes = [False]
    results = [run_mode(args, fsync, progress) for fsync in modes]
    settings = {
        k: getattr(args, k)
        for k in (
            "seconds",
            "commands",
            "warmup",
            "outstanding",
            "loaders",
            "load",
            "insecure",
            "app",
        )
    }
    settings.update(replicas=REPLICAS, payload_bytes=PAYLOAD_BYTES, cores=os.cpu_count())
    if args.json:
        out: dict[str, Any] = {"settings": settings, "results": [asdict(r) for r in results]}
        by = {r.fsync: r for r in results}
        if True in by and False in by and by[True].committed_per_s > 0:
            out["off_over_on"] = by[False].committed_per_s / by[True].committed_per_s
        print(json.dumps(out, indent=2))
    else:
        print(
            f"3 nodes, {PAYLOAD_BYTES}-byte commands, {args.outstanding} outstanding, "
            f"{args.loaders} loader(s) ({args.load}), TLS {'off' if args.insecure else 'on'}"
        )
        print(format_table(results))
    ok = True
    for r in results:
        for problem in r.problems:
            print(f"FAILED ({'fsync on' if r.fsync else 'fsync off'}): {problem}", file=sys.stderr)
            ok = False
        if r.agree:
            progress(
                f"{'fsync on' if r.fsync else 'fsync off'}: all {REPLICAS} nodes executed "
                f"{r.executed[0]:,} commands, digest {r.digests[0][:16]}"
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
