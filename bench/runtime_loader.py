"""The benchmarks' one load generator (a process of its own): raw frames or the runtime's Client.

``python -m bench.runtime_loader CONN.json`` is started by
:func:`bench.cluster.start_loader`: one per region with clients for
:mod:`bench.runtime_engine` (every ``--engine runtime`` experiment), and
``--loaders`` of them, each connected to every node, for
:mod:`bench.runtime_throughput`. It opens one connection (TLS, like any
client) to each node of ``CONN``, a :class:`bench.raw_load.Load` (the one
raw loader), which speaks the runtime's client frames itself
(:mod:`sdpaxos.runtime.frames`): no task or future per operation, and the
submits one socket read (or one timer) unblocks go out in one write, as
``SUBMIT_MANY`` frames (``load: batch``, the default) or one ``SUBMIT`` frame
each (``load: raw``). So the load generator is cheap next to the nodes it
loads, and its CPU is measured too. ``load: client`` runs
:class:`sdpaxos.runtime.client.Client` instead (one per node, a task per
client calling ``submit``): what a program using the runtime's client costs.
``profile: FILE`` runs the loader under cProfile.

Its clients draw their operations from :class:`bench.workloads.OpStream` with the
same stream numbers and seeds as the simulator engine's (a run's clients are
split evenly over the connections, in order), and issue them

* **closed loop**: one operation outstanding per client, the next sent as soon as
  the answer arrives (the client's real round trip, loopback and TLS, stands in
  for the simulator's client hop);
* **open loop**: at the arrival times of :func:`bench.workloads.arrivals_us`
  (Poisson or fixed interval), whatever the answers.

Each client holds sessions of its own choosing (random 63-bit ids: the
protocols' sessions never expire here, so a client may pick its id, see
:mod:`sdpaxos.core.sessions`), one operation outstanding per session; an
open-loop client opens another session when all of its sessions are busy. A
run with ``register: true`` registers one session per client through the log
before it says ``ready`` (the throughput benchmark's: the nodes' small ids
cost them less per command).
Writes wait for READY; reads go through the node's read path (``READ``
frames) where the engine says the protocol has one at this node, and through
the log otherwise (a command waiting for EXECUTED), also after the read path
refused. A run with ``keys: false`` sends its writes without their keys (the
throughput benchmark's: SDPaxos orders every command, and a key costs bytes at
every node). Every operation is recorded when the run names an ``out`` file, with
its invoke and complete times in microseconds of ``time.monotonic()`` from the
origin the parent gives (the same clock in every process of this machine).

Protocol with the parent, one line each. The loader is started once per
cluster (``CONN.json``: the nodes' addresses, a client certificate, the
load), connects, and says ``connected``. For each run the parent says ``run
RUN.json`` (the clients, workload, window and where to write the records);
the loader says ``ready``; the parent says ``go T0`` (the origin, a
``time.monotonic()`` value); the loader says ``count N`` (operations
completed) every ``report_s`` (half a second by default) and ``done {...}``
at the end, after writing its records (msgpack) to the run's ``out`` file.
The window ends at ``end_us``, or when the parent says ``end`` (a run without
``end_us``); then the loader waits up to ``drain_s`` for the answers still
due. ``stop`` ends a run at once; ``quit`` (or the end of input, or a lost
connection) ends the loader.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import math
import random
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgpack

from bench.raw_load import Load, LoadClient, OpTuple, connect, op_source
from bench.runtime_procs import StdinWords, run_loop, say, split
from bench.workloads import Workload, arrivals_us

#: How often the loader tells the parent its count (a run's ``report_s``, if not given).
REPORT_INTERVAL_S = 0.5
#: Arrivals due within this much of a timer firing go out with it.
_EARLY_US = 500


def _parts(spec: dict[str, Any], ways: int) -> list[dict[str, Any]]:
    """The run ``spec`` of each of ``ways`` connections: its clients split
    evenly, in order (the first connections take one more)."""
    clients = spec["clients"]
    out, at = [], 0
    for count in split(len(clients), ways):
        out.append({**spec, "clients": clients[at : at + count]})
        at += count
    return out


async def _runs(stdin: StdinWords) -> AsyncIterator[dict[str, Any]]:
    """The runs the parent asks for (``run FILE``: the run's spec in FILE), one
    after another, until it says ``quit`` or ``stop``; other words are ignored."""
    while True:
        line = await stdin.queue.get()
        word, _, rest = line.partition(" ")
        if word in ("quit", "stop"):
            return
        if word == "run":
            yield json.loads(Path(rest).read_text())


async def _serve(conn: dict[str, Any]) -> None:
    """Connect once; then run what the parent asks (``run FILE``), one run after another,
    until ``quit`` (or the end of input, or a lost connection)."""
    loads = await connect(conn)
    stdin = StdinWords()
    say("connected")
    async for run_spec in _runs(stdin):
        for load, part in zip(loads, _parts(run_spec, len(loads)), strict=True):
            load.begin(part)
        if run_spec.get("register"):
            await asyncio.gather(*(load.register() for load in loads))
        say("ready")
        t0 = float(await stdin.expect("go"))
        result = await _run(loads, run_spec, t0, stdin)
        say("done " + json.dumps(result))
        if any(load.lost for load in loads):
            break
    for load in loads:
        if load.transport is not None:
            load.transport.close()


class _Listener:
    """The parent's words during a run: ``end`` ends the window now (the run
    then drains as at its end), ``stop`` ends the run now."""

    def __init__(self, stdin: StdinWords, end: Callable[[], None]) -> None:
        self.stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.get_running_loop().create_task(self._listen(stdin, end))

    async def _listen(self, stdin: StdinWords, end: Callable[[], None]) -> None:
        while True:
            head = (await stdin.queue.get()).partition(" ")[0]
            if head == "end":
                end()
            elif head == "stop":
                self.stopped.set_result(None)
                return

    def cancel(self) -> None:
        self._task.cancel()


async def _report_until(
    count: Callable[[], int],
    every_s: float,
    deadline_s: float,
    done: asyncio.Future[Any],
    stopped: asyncio.Future[Any],
) -> None:
    """Say ``count N`` every ``every_s`` until ``done``, ``stopped`` or the deadline."""
    while not done.done() and not stopped.done() and time.monotonic() < deadline_s:
        say(f"count {count()}")
        await asyncio.wait(
            [done, stopped],
            timeout=min(every_s, max(0.0, deadline_s - time.monotonic())),
        )


async def _run(
    loads: list[Load], spec: dict[str, Any], t0: float, stdin: StdinWords
) -> dict[str, Any]:
    """One run on every connection: from ``t0`` until the window's end
    (``end_us``; None: until the parent says ``end``), then a drain of at most
    ``drain_s``; the records to ``out`` (if given) and the totals returned."""
    loop = asyncio.get_running_loop()
    offset = loop.time() - time.monotonic()  # loop clock = monotonic + offset
    for load in loads:
        load.t0 = t0
    await asyncio.sleep(max(0.0, t0 - time.monotonic()))
    while time.monotonic() < t0:  # uvloop's timers may fire up to a millisecond early
        await asyncio.sleep(0)
    for load in loads:
        load.running = not load.lost
    timers: list[asyncio.TimerHandle] = []
    end_us: int | None = spec.get("end_us")

    if spec.get("mode") == "closed":
        now = loads[0].now_us()
        for load in loads:
            for c in load.clients:
                load.issue(c, now)
            load._flush()
    else:
        arrivals: list[tuple[int, int, Load, LoadClient, Any]] = []
        for load in loads:
            for c in load.clients:
                rng_c = random.Random(f"{spec['workload']['seed']}:arrivals:{c.index}")
                times = arrivals_us(
                    spec["rate_per_s"], 0, end_us or 0, poisson=spec["poisson"], rng=rng_c
                )
                first = next(times, None)
                if first is not None:
                    heapq.heappush(arrivals, (first, c.index, load, c, times))

        def fire() -> None:
            now = loads[0].now_us()
            touched = set()
            while arrivals and arrivals[0][0] <= now + _EARLY_US:
                _, index, load, c, times = heapq.heappop(arrivals)
                if not load.running:
                    continue
                load.issue(c, now)
                touched.add(load)
                nxt = next(times, None)
                if nxt is not None:
                    heapq.heappush(arrivals, (nxt, index, load, c, times))
            for load in touched:
                load._flush()
            if arrivals:
                timers.append(loop.call_at(t0 + arrivals[0][0] / 1e6 + offset, fire))

        if arrivals:
            timers.append(loop.call_at(t0 + arrivals[0][0] / 1e6 + offset, fire))

    sample_ms = spec.get("sample_ms")
    if sample_ms:

        def sample() -> None:
            asked = [
                load
                for load in loads
                if (end_us is None or load.now_us() < end_us) and not load.lost
            ]
            for load in asked:
                load.ask_status()
            if asked:
                timers.append(loop.call_later(sample_ms / 1000, sample))

        sample()

    ended: asyncio.Future[None] = loop.create_future()

    def end() -> None:
        if not ended.done():
            ended.set_result(None)

    listener = _Listener(stdin, end)
    every_s = spec.get("report_s", REPORT_INTERVAL_S)

    def completed() -> int:
        return sum(load.completed for load in loads)

    window_s = math.inf if end_us is None else t0 + end_us / 1e6
    if end_us is not None:
        timers.append(loop.call_at(window_s + offset, end))
    await _report_until(completed, every_s, window_s + 1.0, ended, listener.stopped)
    for load in loads:
        load.running = False
        if not load.pending and not load.drained.done():
            load.drained.set_result(None)
    for t in timers:
        t.cancel()
    drained = asyncio.gather(*(load.drained for load in loads))
    await _report_until(
        completed, every_s, time.monotonic() + spec["drain_s"], drained, listener.stopped
    )
    say(f"count {completed()}")
    listener.cancel()
    if spec.get("out") is not None:
        with open(spec["out"], "wb") as f:
            f.write(
                msgpack.packb(
                    {
                        "records": [r for load in loads for r in load.records],
                        "samples": [s for load in loads for s in load.samples],
                        "events": sorted(e for load in loads for e in load.events),
                    },
                    use_bin_type=True,
                )
            )
    return {
        "sent": sum(load.sent for load in loads),
        "completed": completed(),
        "open": sum(len(load.pending) for load in loads),
        "retries": sum(load.retries for load in loads),
        "fallbacks": sum(load.fallbacks for load in loads),
        "failures": [f for load in loads for f in load.failures][:20],
        "lost": any(load.lost for load in loads),
    }


# ------------------------------------------------------------ the runtime's Client


class LoadClientRun:
    """One run of ``load: client``: a task per client, one submit outstanding each."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.completed = 0
        self.running = True
        self.go: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    async def session(
        self, c: Any, next_op: Callable[[], OpTuple], registered: asyncio.Future[None]
    ) -> None:
        # The first submit registers the session (Client does it on demand).
        _, key, payload = next_op()
        await c.submit(payload, key=key)
        self.completed += 1
        registered.set_result(None)
        await self.go
        while self.running:
            _, key, payload = next_op()
            await c.submit(payload, key=key)
            self.completed += 1

    async def run(self, clients: list[Any], stdin: StdinWords) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        spec = self.spec
        workload = Workload(**spec["workload"])
        tasks, registrations = [], []
        for c, part in zip(clients, _parts(spec, len(clients)), strict=True):
            for index in part["clients"]:
                fut: asyncio.Future[None] = loop.create_future()
                registrations.append(fut)
                tasks.append(loop.create_task(self.session(c, op_source(workload, index), fut)))
        await asyncio.gather(*registrations)
        say("ready")
        await stdin.expect("go")
        self.go.set_result(None)
        listener = _Listener(stdin, self.end)
        every_s = spec.get("report_s", REPORT_INTERVAL_S)

        def count() -> int:
            return self.completed

        await _report_until(count, every_s, math.inf, self.ended, listener.stopped)
        self.running = False
        drained = asyncio.gather(*tasks, return_exceptions=True)
        deadline_s = time.monotonic() + spec["drain_s"]
        await _report_until(count, every_s, deadline_s, drained, listener.stopped)
        say(f"count {self.completed}")
        listener.cancel()
        failures = [repr(r) for r in drained.result() if isinstance(r, BaseException)]
        return {
            "sent": self.completed,
            "completed": self.completed,
            "open": 0,
            "retries": sum(c.retries for c in clients),
            "fallbacks": 0,
            "failures": failures[:20],
            "lost": False,
        }


async def _serve_clients(conn: dict[str, Any]) -> None:
    """``load: client``: :class:`sdpaxos.runtime.client.Client` (one per node),
    one task per client calling ``submit`` in a closed loop; what a program
    using the runtime's client costs. Same words with the parent as
    :func:`_serve`; no records (only the totals)."""
    from sdpaxos.runtime.client import Client
    from sdpaxos.runtime.config import TlsFiles

    tls = None if conn.get("tls") is None else TlsFiles(*(Path(f) for f in conn["tls"]))
    clients = [Client([(host, port)], tls=tls) for host, port in conn["nodes"]]
    stdin = StdinWords()
    say("connected")
    async for run_spec in _runs(stdin):
        result = await LoadClientRun(run_spec).run(clients, stdin)
        say("done " + json.dumps(result))
    for c in clients:
        await c.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m bench.runtime_loader CONN.json (started by the bench harness)"
    if args in (["-h"], ["--help"]):
        print(usage)
        return 0
    if len(args) != 1:
        print(usage, file=sys.stderr)
        return 2
    try:
        conn = json.loads(Path(args[0]).read_text())
    except (OSError, ValueError) as exc:
        print(f"python -m bench.runtime_loader: cannot read {args[0]}: {exc}", file=sys.stderr)
        return 2
    if not isinstance(conn, dict):
        print(f"python -m bench.runtime_loader: {args[0]} is not a JSON object", file=sys.stderr)
        return 2
    client = conn.get("load") == "client"
    # The runtime's Client asserts an asyncio.Transport, which uvloop's is not.
    serve, fast = (_serve_clients, False) if client else (_serve, True)
    if conn.get("profile"):
        import cProfile

        prof = cProfile.Profile()
        prof.runcall(run_loop, serve(conn), fast)
        prof.dump_stats(conn["profile"])
    else:
        run_loop(serve(conn), fast=fast)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
