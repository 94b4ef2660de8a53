"""An in-memory :class:`kvstore.resp.Backend` for the front end's tests, and a
server running it on a background event loop (so sync redis-py can talk to it).

Keys starting with ``slow:`` are answered with futures that the backend
completes later, all of a batch in a seeded random order, so a test can check
that replies still come back in request order.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
from collections.abc import Awaitable, Iterator, Mapping
from concurrent.futures import Future as ThreadFuture
from contextlib import contextmanager
from typing import Any

from kvstore.resp import (
    CommandSpec,
    ConnState,
    Deferred,
    RespLimits,
    RespServer,
)
from kvstore.values import OK, Error, Value


class FakeBackend:
    """GET/SET/DEL/INCR over a dict; ``slow:`` keys answer late and out of order."""

    def __init__(self, seed: int = 7, deferred: bool = False) -> None:
        #: Answer late with a kvstore.resp.Deferred of one reply (the node's way)
        #: instead of a future.
        self.deferred = deferred
        self.data: dict[bytes, bytes] = {}
        self.rng = random.Random(seed)
        self.waiting: list[tuple[asyncio.Future[Value] | Deferred, Value]] = []
        self.release_scheduled = False
        self.out_of_order = 0  # futures completed before an earlier-started one
        self.stale_seen: list[bool] = []

    def execute(self, args: list[bytes], conn: ConnState) -> Value | Awaitable[Value]:
        name = args[0].upper()
        if name == b"BOOM":
            raise RuntimeError("the fake backend fails on purpose")
        if name == b"ABOOM":
            return self._later_error()
        if name == b"STALE?":
            return int(conn.stale_reads)
        result = self._run(name, args)
        if len(args) > 1 and args[1].startswith(b"slow:"):
            return self._defer(result)
        return result

    async def _later_error(self) -> Value:
        await asyncio.sleep(0)
        raise RuntimeError("the fake backend fails later on purpose")

    def _run(self, name: bytes, args: list[bytes]) -> Value:
        if name == b"SET" and len(args) == 3:
            self.data[args[1]] = args[2]
            return OK
        if name == b"GET" and len(args) == 2:
            return self.data.get(args[1])
        if name == b"DEL" and len(args) >= 2:
            return sum(self.data.pop(k, None) is not None for k in args[1:])
        if (name == b"INCR" and len(args) == 2) or (name == b"INCRBY" and len(args) == 3):
            try:
                n = int(self.data.get(args[1], b"0")) + (int(args[2]) if len(args) == 3 else 1)
            except ValueError:
                return Error("ERR value is not an integer or out of range")
            self.data[args[1]] = b"%d" % n
            return n
        if name in (b"SET", b"GET", b"DEL", b"INCR", b"INCRBY"):
            return Error(f"ERR wrong number of arguments for '{name.decode().lower()}' command")
        return Error(f"ERR unknown command '{args[0].decode(errors='replace')}'")

    def _defer(self, result: Value) -> asyncio.Future[Value] | Deferred:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Value] | Deferred = (
            Deferred() if self.deferred else loop.create_future()
        )
        self.waiting.append((future, result))
        if not self.release_scheduled:
            self.release_scheduled = True
            loop.call_soon(self._release)
        return future

    def _release(self) -> None:
        """Complete every waiting future, shuffled (seeded)."""
        self.release_scheduled = False
        batch, self.waiting = self.waiting, []
        order = list(range(len(batch)))
        self.rng.shuffle(order)
        self.out_of_order += sum(1 for a, b in itertools.pairwise(order) if b < a)
        for i in order:
            future, result = batch[i]
            if isinstance(future, Deferred):
                future.set([result])
            elif not future.done():
                future.set_result(result)

    def info(self, conn: ConnState) -> Mapping[str, Mapping[str, str | int]]:
        return {"replication": {"role": "master", "view": 3, "sequencer": "node0", "lag": 0}}

    def command_table(self) -> list[CommandSpec]:
        return [
            CommandSpec(
                "get", 2, "read", 1, 1, 1, ("readonly", "fast"), "Returns the value of a key."
            ),
            CommandSpec("set", 3, "write", 1, 1, 1, ("write",), "Sets the value of a key."),
            CommandSpec("del", -2, "write", 1, -1, 1, ("write",), "Deletes keys."),
            CommandSpec("incr", 2, "write", 1, 1, 1, ("write", "fast"), "Adds one to a key."),
        ]


class BatchFakeBackend(FakeBackend):
    """The fake with ``execute_many`` (the node's way): records each run's
    length; with ``deferred``, each stretch of answers known at once is handed
    back as one Deferred for them all, completed on a later loop turn."""

    def __init__(self, seed: int = 7, deferred: bool = False) -> None:
        super().__init__(seed, deferred)
        self.runs: list[int] = []

    def execute_many(
        self, requests: list[list[bytes]], conn: ConnState
    ) -> list[Value | Deferred | Awaitable[Value]]:
        self.runs.append(len(requests))
        out: list[Value | Deferred | Awaitable[Value]] = []
        stretch: list[Value] = []
        for args in requests:
            answer = self.execute(args, conn)
            if self.deferred and type(answer) in (bytes, int, type(None), Error, type(OK)):
                stretch.append(answer)  # type: ignore[arg-type]
                continue
            self._close(stretch, out)
            stretch = []
            out.append(answer)
        self._close(stretch, out)
        return out

    def _close(self, stretch: list[Value], out: list[Any]) -> None:
        if stretch:
            part = Deferred(len(stretch))
            asyncio.get_running_loop().call_soon(part.set, stretch)
            out.append(part)


class LoopThread:
    """An event loop (uvloop if asked) on a daemon thread, with a RespServer on it."""

    def __init__(self, use_uvloop: bool = False) -> None:
        if use_uvloop:
            import uvloop

            self.loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        else:
            self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        future: ThreadFuture[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout=30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@contextmanager
def running_server(
    backend: FakeBackend | None = None,
    *,
    users: Mapping[str, str] | None = None,
    ssl: Any = None,
    limits: RespLimits | None = None,
    use_uvloop: bool = False,
) -> Iterator[RespServer]:
    """A RespServer over ``backend`` on 127.0.0.1, a free port, on a loop thread."""
    thread = LoopThread(use_uvloop)
    server = RespServer(backend or FakeBackend(), users=users, ssl=ssl, limits=limits)
    try:
        thread.run(server.start("127.0.0.1", 0))
        yield server
    finally:
        thread.run(server.close())
        thread.stop()


def request_bytes(*args: bytes) -> bytes:
    """A request as a client sends it: a multibulk of ``args``."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
