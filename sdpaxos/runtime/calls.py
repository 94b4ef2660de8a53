"""The node's own callers: submits and reads made in the node's process.

:class:`~sdpaxos.runtime.node.Node` hands every ``submit``, ``submit_nowait``,
``read`` and ``read_nowait`` to :class:`Calls`, which numbers the commands in
sessions (a pool of them, one command outstanding each: the core's session
rule), proposes them through the driver, waiting for room while the proposal
queue is full, and turns the driver's answers into futures. Remote clients'
requests take :mod:`sdpaxos.runtime.clients` instead; both are waiters of the
same kind (:data:`~sdpaxos.runtime.driver.Waiter`).
"""

from __future__ import annotations

import asyncio
import random

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.membership import MEMBERSHIP_PREFIX
from sdpaxos.core.ready import Reply, ReplyKind
from sdpaxos.core.sessions import decode_session_id, registration
from sdpaxos.core.types import Command, Wait
from sdpaxos.runtime.driver import READ_TIMEOUT_S, Driver, Waiter
from sdpaxos.runtime.errors import NodeError, NotMember, SessionBusy, SessionExpired, WaitName
from sdpaxos.runtime.frames import COMMAND_BYTES_MAX
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.status import clock_ms, observe_latency

__all__ = ["SESSIONS_IDLE_MAX", "Calls", "Session"]

#: Idle local sessions kept for reuse by :meth:`Calls.submit`.
SESSIONS_IDLE_MAX = 4096


class Session:
    """A client session of a node: numbers its commands for exactly-once execution.

    One command at a time (the core's session rule); :meth:`Node.submit` keeps a
    pool of them, so callers need one only to control numbering themselves
    (:meth:`Node.session`).
    """

    def __init__(self, calls: Calls, client_id: int) -> None:
        self.calls = calls
        self.client_id = client_id
        self.seq = 0
        self.busy = False

    async def submit(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        wait: WaitName = "ready",
        timeout_s: float | None = None,
    ) -> bytes | None:
        """Propose ``payload`` as this session's next command and wait for it.

        Raises:
            SessionBusy: this session's previous command is still outstanding.
            SessionExpired: the session expired; the command was not applied.
        """
        if self.busy:
            raise SessionBusy("a session has one command outstanding at a time")
        self.busy = True
        try:
            self.seq += 1
            cmd = Command(self.client_id, self.seq, payload, key)
            reply = await self.calls.propose(cmd, wait_of(wait), timeout_s)
        finally:
            self.busy = False
        if reply.kind == ReplyKind.SESSION_EXPIRED:
            raise SessionExpired(f"session {self.client_id} expired; the command was not applied")
        return reply.result


def wait_of(wait: str) -> Wait:
    """The core's :class:`~sdpaxos.core.types.Wait` for a :data:`WaitName`."""
    if wait == "ready":
        return Wait.READY
    if wait == "executed":
        return Wait.EXECUTED
    raise ValueError(f'wait must be "ready" or "executed", got {wait!r}')


def check_payload(payload: object) -> None:
    """Refuse what cannot be a command's payload, before anything is proposed."""
    if type(payload) is not bytes:
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    if len(payload) > COMMAND_BYTES_MAX:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {COMMAND_BYTES_MAX}")
    if payload.startswith(MEMBERSHIP_PREFIX):
        raise ValueError("payloads may not start with the membership prefix (changes' own)")


class _Futures:
    """The reply sink of :meth:`Calls.propose`: the token is the caller's future."""

    def answered(
        self, future: asyncio.Future[Reply], request_id: int, reply: Reply | None, started_ms: float
    ) -> None:
        if future.done():
            return
        if reply is None:
            future.set_exception(NodeError("the node stopped before the command was answered"))
        else:
            future.set_result(reply)


_FUTURES = _Futures()


class _Nowaits:
    """The reply sink of :meth:`Calls.submit_nowait`: the token is the
    caller's future and the session the command took from the pool, which
    goes back to the pool once answered (not when it expired)."""

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def answered(
        self,
        token: tuple[asyncio.Future[bytes | None], Session],
        request_id: int,
        reply: Reply | None,
        started_ms: float,
    ) -> None:
        future, session = token
        if reply is None:
            if not future.done():
                future.set_exception(NodeError("the node stopped before the command was answered"))
            return
        calls = self.calls
        session.busy = False
        if reply.kind == ReplyKind.NOT_MEMBER:
            if not future.done():
                refusal = calls.driver.refusal()
                future.set_exception(NotMember(refusal or "this node is no member"))
            return
        observe_latency(calls.metrics, reply.kind, started_ms)
        if reply.kind == ReplyKind.SESSION_EXPIRED:
            if not future.done():
                future.set_exception(
                    SessionExpired(
                        f"session {session.client_id} expired; the command was not applied"
                    )
                )
            return
        if len(calls.sessions) < SESSIONS_IDLE_MAX:
            calls.sessions.append(session)
        if not future.done():
            future.set_result(reply.result)


class Calls:
    """Submits and reads of the node's own process (see the module docstring)."""

    def __init__(
        self,
        driver: Driver,
        cluster: ClusterConfig,
        rng: random.Random,
        metrics: Metrics | None,
    ) -> None:
        self.driver = driver
        self.cluster = cluster
        self.rng = rng
        self.metrics = metrics
        #: Idle sessions, reused by the next submit.
        self.sessions: list[Session] = []
        self._nowaits = _Nowaits(self)

    def check_running(self) -> Driver:
        driver = self.driver
        if driver.failed is not None:
            raise NodeError(f"the node stopped after a log failure: {driver.failed}")
        if not driver.running:
            raise NodeError("the node is not running (use `async with Node(...)`)")
        return driver

    async def propose(self, cmd: Command, wait: Wait, timeout_s: float | None) -> Reply:
        driver = self.check_running()
        future: asyncio.Future[Reply] = driver.loop.create_future()
        started = clock_ms()

        async def enqueue() -> Reply:
            await self._enqueue_when_room(cmd, wait, (_FUTURES, future, 0, started))
            return await future

        reply = await asyncio.wait_for(enqueue(), timeout_s)
        if reply.kind == ReplyKind.NOT_MEMBER:
            raise NotMember(driver.refusal() or "this node is no member of the running epoch")
        observe_latency(self.metrics, reply.kind, started)
        return reply

    async def _enqueue_when_room(self, cmd: Command, wait: Wait, waiter: Waiter) -> None:
        """Propose ``cmd``, waiting for room in the proposal queue while it is full."""
        driver = self.driver
        while not driver.enqueue(cmd, wait, waiter):
            await driver.room.wait()
            self.check_running()

    async def session(self) -> Session:
        """A new session (registered through the log when sessions expire)."""
        self.check_running()
        if self.cluster.session_lifetime_slots is None:
            return Session(self, self.rng.getrandbits(63) | 1)
        nonce = self.rng.getrandbits(63) | 1
        reply = await self.propose(registration(nonce), Wait.EXECUTED, None)
        return Session(self, decode_session_id(reply.result))

    async def submit(
        self, payload: bytes, key: bytes | None, wait: WaitName, timeout_s: float | None
    ) -> bytes | None:
        check_payload(payload)
        wait_of(wait)
        session = self.sessions.pop() if self.sessions else await self.session()
        try:
            result = await session.submit(payload, key=key, wait=wait, timeout_s=timeout_s)
        except (TimeoutError, asyncio.CancelledError, SessionExpired):
            raise  # the session may have a command in flight: do not reuse it
        if len(self.sessions) < SESSIONS_IDLE_MAX:
            self.sessions.append(session)
        return result

    def submit_nowait(
        self, payload: bytes, key: bytes | None, wait: WaitName
    ) -> asyncio.Future[bytes | None]:
        check_payload(payload)
        mode = wait_of(wait)
        driver = self.check_running()
        loop = driver.loop
        if self.sessions:
            session = self.sessions.pop()
        elif self.cluster.session_lifetime_slots is None:
            session = Session(self, self.rng.getrandbits(63) | 1)
        else:  # a session must be registered through the log first
            return asyncio.ensure_future(self.submit(payload, key, wait, None))
        session.seq += 1
        session.busy = True
        cmd = Command(session.client_id, session.seq, payload, key)
        future: asyncio.Future[bytes | None] = loop.create_future()
        waiter: Waiter = (self._nowaits, (future, session), 0, clock_ms())
        if not driver.enqueue(cmd, mode, waiter):

            def failed(task: asyncio.Task[None]) -> None:
                if not task.cancelled() and task.exception() is not None and not future.done():
                    future.set_exception(task.exception())  # type: ignore[arg-type]

            task = loop.create_task(self._enqueue_when_room(cmd, mode, waiter))
            task.add_done_callback(failed)
        return future

    def read_nowait(
        self, key: bytes | None, request: bytes | None, timeout_s: float = READ_TIMEOUT_S
    ) -> asyncio.Future[bytes | None]:
        driver = self.check_running()
        refusal = driver.refusal()
        if refusal is not None:
            raise NotMember(refusal)
        future: asyncio.Future[bytes | None] = driver.loop.create_future()

        def done(ok: bool, value: bytes | None) -> None:
            if future.done():
                return
            if ok:
                future.set_result(value)
            elif not driver.running:
                future.set_exception(NodeError("the node stopped before the read was answered"))
            else:
                future.set_exception(
                    TimeoutError(f"no linearizable read of {key!r} within {timeout_s} s")
                )

        driver.start_read(key, request, driver.now_ms() + timeout_s * 1000, done)
        return future

    async def read(
        self, key: bytes | None, request: bytes | None, timeout_s: float = READ_TIMEOUT_S
    ) -> bytes | None:
        driver = self.check_running()
        refusal = driver.refusal()
        if refusal is not None:
            raise NotMember(refusal)
        future: asyncio.Future[tuple[bool, bytes | None]] = driver.loop.create_future()

        def done(ok: bool, value: bytes | None) -> None:
            if not future.done():
                future.set_result((ok, value))

        driver.start_read(key, request, driver.now_ms() + timeout_s * 1000, done)
        ok, value = await future
        if not ok:
            self.check_running()
            raise TimeoutError(f"no linearizable read of {key!r} within {timeout_s} s")
        return value
