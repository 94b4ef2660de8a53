"""Clients that drive a kv-store through redis-py and record what they saw.

Each client is an asyncio task with its own connection to one node (its
region's), issuing one operation at a time on a few keys: GET, SET of a value
never written before, CAS (our compare-and-set) and DEL. Every operation goes
into a :class:`sdpaxos.check.testing.Recorder` as the checker's ``KeyValue``
model reads it (``get``, ``put``, ``cas``, ``delete``), so the history can be
checked for linearizability, and its latency into a per-region sample.

What an error means for the history (the checker must never be told an
operation failed when it may have happened):

* a write that got an error, a timeout or a lost connection may have been
  applied: it is left open (*unknown*);
* a read that got an error did not change anything: it is left out;
* an operation whose connection could not be made was never sent: left out.
  Before each operation the client makes sure it is connected (a PING that is
  not recorded), so a node that is down costs no open operations.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.check.testing import Recorder

__all__ = ["Sample", "Workload", "WorkloadResult", "run_clients"]

#: How long one operation may take before its client gives up on it.
OPERATION_TIMEOUT_S = 5.0
#: Pause after a failed connection before the client tries again.
RECONNECT_PAUSE_S = 0.2
#: Pause after a node answered NOTMEMBER (it is no member, and stays so for a while).
NOT_MEMBER_PAUSE_S = 1.0


@dataclass(frozen=True, slots=True)
class Workload:
    """The mix of operations: shares of each kind (the rest are GETs) and the keys."""

    keys: int = 5
    put_share: float = 0.3
    cas_share: float = 0.15
    delete_share: float = 0.05
    #: A client thinks this long between operations (0: as fast as it can).
    think_s: float = 0.0


@dataclass(slots=True)
class Sample:
    """What one region's clients measured."""

    region: str
    read_ms: list[float] = field(default_factory=list)
    write_ms: list[float] = field(default_factory=list)
    errors: int = 0
    #: (seconds since the start, 1) per completed operation, for throughput over time.
    done_at_s: list[float] = field(default_factory=list)


@dataclass(slots=True)
class WorkloadResult:
    recorder: Recorder
    samples: dict[str, Sample]
    seconds: float


async def _client(
    client_id: int,
    address: tuple[str, int],
    sample: Sample,
    recorder: Recorder,
    workload: Workload,
    rng: random.Random,
    stop: asyncio.Event,
    started: float,
    connect: Callable[[tuple[str, int]], Any],
) -> None:
    from redis.exceptions import ResponseError

    r = connect(address)
    n = 0
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(r.ping(), OPERATION_TIMEOUT_S)
            except Exception:
                sample.errors += 1
                await r.aclose()
                await asyncio.sleep(RECONNECT_PAUSE_S)
                r = connect(address)
                continue
            key = f"k{rng.randrange(workload.keys)}"
            roll = rng.random()
            n += 1
            if roll < workload.put_share:
                value = f"{client_id}-{n}"
                op: tuple[Any, ...] = ("put", key, value)
                command: tuple[Any, ...] = ("SET", key, value)
            elif roll < workload.put_share + workload.cas_share:
                old, new = (
                    f"{rng.randrange(max(1, client_id))}-{rng.randrange(1, n + 1)}",
                    (f"{client_id}-{n}"),
                )
                op = ("cas", key, (old, new))
                command = ("CAS", key, old, new)
            elif roll < workload.put_share + workload.cas_share + workload.delete_share:
                op = ("delete", key)
                command = ("DEL", key)
            else:
                op = ("get", key)
                command = ("GET", key)
            write = op[0] != "get"
            pending = recorder.invoke(client_id, op)
            t0 = time.perf_counter()
            try:
                raw = await asyncio.wait_for(r.execute_command(*command), OPERATION_TIMEOUT_S)
            except ResponseError as exc:
                sample.errors += 1
                if write:
                    recorder.unknown(pending)
                else:
                    recorder.fail(pending)
                if str(exc).startswith("NOTMEMBER"):
                    # A node that is no member (removed, or not yet added)
                    # answers at once: without a pause the client would fill
                    # the history with open writes, each one the checker must
                    # try both ways.
                    await asyncio.sleep(NOT_MEMBER_PAUSE_S)
                continue
            except (Exception, asyncio.CancelledError) as exc:
                sample.errors += 1
                if write:
                    recorder.unknown(pending)
                else:
                    recorder.fail(pending)
                await r.aclose()
                r = connect(address)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            elapsed_ms = (time.perf_counter() - t0) * 1000.0
            if op[0] == "get":
                output: Any = None if raw is None else raw.decode()
            elif op[0] == "cas":
                output = raw == 1
            else:
                output = None
            recorder.complete(pending, output)
            (sample.write_ms if write else sample.read_ms).append(elapsed_ms)
            sample.done_at_s.append(time.monotonic() - started)
            if workload.think_s:
                await asyncio.sleep(workload.think_s)
    finally:
        await r.aclose()


def redis_connect(
    *, password: str | None = None, username: str | None = None, ssl_ca: str | None = None
) -> Callable[[tuple[str, int]], Any]:
    """A factory of redis-py asyncio clients with no retries of their own (a retry
    of a write would be a second operation the history does not know of)."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    def connect(address: tuple[str, int]) -> Any:
        host, port = address
        kw: dict[str, Any] = {}
        if ssl_ca is not None:
            kw.update(ssl=True, ssl_ca_certs=ssl_ca, ssl_check_hostname=False)
        return aioredis.Redis(
            host=host,
            port=port,
            username=username,
            password=password,
            single_connection_client=True,
            socket_timeout=OPERATION_TIMEOUT_S,
            socket_connect_timeout=1.0,
            retry=Retry(NoBackoff(), 0),
            protocol=2,
            **kw,
        )

    return connect


async def run_clients(
    addresses: Sequence[tuple[str, int]],
    regions: Sequence[str],
    *,
    clients_per_node: int,
    seconds: float,
    workload: Workload | None = None,
    seed: int = 1,
    connect: Callable[[tuple[str, int]], Any] | None = None,
    on_tick: Callable[[float, int], None] | None = None,
    recorder: Recorder | None = None,
) -> WorkloadResult:
    """Run ``clients_per_node`` clients against each address for ``seconds``.

    ``on_tick(elapsed_s, operations_done)`` is called every 0.25 s (progress,
    and the nemesis's clock).
    """
    workload = workload or Workload()
    recorder = recorder or Recorder()
    connect = connect or redis_connect()
    stop = asyncio.Event()
    started = time.monotonic()
    samples = {region: Sample(region) for region in regions}
    tasks = []
    client_id = 0
    for address, region in zip(addresses, regions, strict=True):
        for _ in range(clients_per_node):
            client_id += 1
            rng = random.Random(seed * 1_000_003 + client_id)
            tasks.append(
                asyncio.ensure_future(
                    _client(
                        client_id,
                        address,
                        samples[region],
                        recorder,
                        workload,
                        rng,
                        stop,
                        started,
                        connect,
                    )
                )
            )
    try:
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= seconds:
                break
            if on_tick is not None:
                on_tick(elapsed, sum(len(s.done_at_s) for s in samples.values()))
            await asyncio.sleep(min(0.25, seconds - elapsed))
    finally:
        stop.set()
        done, pending = await asyncio.wait(tasks, timeout=OPERATION_TIMEOUT_S + 2)
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for t in done:
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
    return WorkloadResult(recorder, samples, time.monotonic() - started)
