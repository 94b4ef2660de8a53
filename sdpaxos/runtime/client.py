"""A client of a running cluster: submit commands, read, ask for status.

::

    async with Client([("10.0.0.1", 7000), ("10.0.0.2", 7000)], tls=files) as c:
        await c.submit(b"payload", key=b"k")
        value = await c.read(b"k")

**Exactly-once across retries.** Each command belongs to a session that the
client registers through the log (:func:`sdpaxos.core.sessions.registration`)
and numbers ``1, 2, 3, ...``. When a node does not answer in time, or the
connection drops, the client reconnects (to the next address, after a jittered
backoff) and resubmits the *same* ``(client_id, seq)``: the cluster executes
it once and answers the retry with the first result. A session has one command
outstanding; a client holds ``sessions`` of them, so that many commands are in
flight at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections.abc import Callable, Sequence
from typing import Any, cast

from sdpaxos.core.sessions import decode_session_id
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.config import NodeConfig, TlsFiles
from sdpaxos.runtime.errors import ClientError, SessionExpired, WaitName
from sdpaxos.runtime.tls import client_context
from sdpaxos.wire.codec import CodecError
from sdpaxos.wire.framing import Framer, frame

__all__ = ["Client", "ClientError", "SessionExpired"]

logger = logging.getLogger(__name__)

#: A request not answered in this long is sent again (after a reconnect).
ATTEMPT_TIMEOUT_S = 3.0
#: Backoff between attempts: from the minimum, doubling to the maximum, full jitter.
RETRY_BACKOFF_MIN_S = 0.02
RETRY_BACKOFF_MAX_S = 1.0
#: Most sessions one client holds (each allows one outstanding command).
SESSIONS_MAX = 4096
#: How often a connection looks for requests past their deadline.
_WATCHDOG_S = 0.05
#: Bytes of payloads and keys per SUBMIT_MANY frame (a frame must stay under the
#: node's RUNTIME_FRAME_BYTES_MAX; a single command up to COMMAND_BYTES_MAX
#: always fits alone), and what each item adds beyond its bytes.
_MANY_BYTES_MAX = rf.COMMAND_BYTES_MAX // 2
_ITEM_OVERHEAD = 48
#: Largest reply a client accepts (a status map, or a state machine's result).
REPLY_FRAME_BYTES_MAX = rf.RUNTIME_FRAME_BYTES_MAX


class _Conn(asyncio.Protocol):
    """A client's connection to one node.

    Requests sent in one loop turn leave together: the submits as one
    SUBMIT_MANY frame (one TLS record, one system call), the rest beside it.
    Each request has a deadline; one watchdog timer per connection fails the
    overdue ones with :class:`TimeoutError`, instead of a timer per request.
    """

    def __init__(self, hello: rf.Hello) -> None:
        self.hello = hello
        self.framer = Framer(REPLY_FRAME_BYTES_MAX)
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        #: request id -> (its future, the loop time it is overdue at)
        self.pending: dict[int, tuple[asyncio.Future[rf.Reply], float]] = {}
        self.lost: asyncio.Future[None] = self.loop.create_future()
        self._submits: list[rf.Submit] = []
        self._others: list[bytes] = []
        self._flush_scheduled = False
        self._watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(frame(rf.encode_runtime(self.hello)))

    def data_received(self, data: bytes) -> None:
        try:
            self.framer.feed(data)
            while (payload := self.framer.next_frame()) is not None:
                reply = rf.decode_runtime(payload)
                if isinstance(reply, rf.Reply):
                    self._resolve(reply)
                elif isinstance(reply, rf.ReplyMany):
                    for item in reply.items:
                        self._resolve(item)
                else:
                    raise rf.FrameError(f"a node sent {type(reply).__name__} to a client")
        except (CodecError, rf.FrameError) as exc:
            logger.warning("client: bad frame from node, reconnecting: %s", exc)
            self.close()

    def _resolve(self, reply: rf.Reply) -> None:
        entry = self.pending.pop(reply.request_id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self._watchdog is not None:
            self._watchdog.cancel()
        pending, self.pending = self.pending, {}
        for fut, _ in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError("connection lost"))

    def send(
        self, f: rf.RuntimeFrame, request_id: int, timeout_s: float
    ) -> asyncio.Future[rf.Reply]:
        fut: asyncio.Future[rf.Reply] = self.loop.create_future()
        if self.transport is None or self.transport.is_closing():
            fut.set_exception(ConnectionError("not connected"))
            return fut
        self.pending[request_id] = (fut, self.loop.time() + timeout_s)
        if isinstance(f, rf.Submit):
            self._submits.append(f)
        else:
            self._others.append(frame(rf.encode_runtime(f)))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)
        if self._watchdog is None:
            self._watchdog = self.loop.call_later(_WATCHDOG_S, self._watch)
        return fut

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._others = self._others, []
        submits, self._submits = self._submits, []
        chunk: list[rf.Submit] = []
        size = 0
        for f in submits:
            item = len(f.payload) + (len(f.key) if f.key is not None else 0) + _ITEM_OVERHEAD
            if chunk and (len(chunk) == rf.MANY_ITEMS_MAX or size + item > _MANY_BYTES_MAX):
                out.append(_submits_frame(chunk))
                chunk, size = [], 0
            chunk.append(f)
            size += item
        if chunk:
            out.append(_submits_frame(chunk))
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    def _watch(self) -> None:
        self._watchdog = None
        now = self.loop.time()
        overdue = [rid for rid, (fut, at) in self.pending.items() if at <= now or fut.done()]
        for rid in overdue:
            fut, _ = self.pending.pop(rid)
            if not fut.done():
                fut.set_exception(TimeoutError("no answer in time"))
        if self.pending:
            self._watchdog = self.loop.call_later(_WATCHDOG_S, self._watch)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _submits_frame(chunk: list[rf.Submit]) -> bytes:
    single = chunk[0] if len(chunk) == 1 else rf.SubmitMany(tuple(chunk))
    return frame(rf.encode_runtime(single))


class _Session:
    __slots__ = ("client_id", "seq")

    def __init__(self, client_id: int) -> None:
        self.client_id = client_id
        self.seq = 0


class Client:
    """Talks to any node of a cluster (see the module docstring).

    Args:
        addresses: ``(host, port)`` of the nodes, tried in turn.
        tls: the cluster CA and a *client* certificate and key, or None for a
            cluster configured with ``insecure = true``.
        client_name: the id in the hello (with TLS, the certificate decides).
        attempt_timeout_s: a request unanswered this long is retried elsewhere.
        rng: jitter for the backoff.
    """

    def __init__(
        self,
        addresses: Sequence[tuple[str, int]],
        *,
        tls: TlsFiles | None = None,
        client_name: int = 0,
        attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
        rng: random.Random | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("a client needs at least one node address")
        self.addresses = list(addresses)
        self.tls = tls
        self.attempt_timeout_s = attempt_timeout_s
        self._hello = rf.Hello(rf.Kind.CLIENT, client_name)
        self._rng = rng if rng is not None else random.Random()
        self._ssl = client_context(tls) if tls is not None else None
        self._conn: _Conn | None = None
        self._connecting: asyncio.Lock | None = None
        self._next_address = 0
        self._request_ids = itertools.count(1)
        self._idle: list[_Session] = []
        self._sessions_open = 0
        self._room: asyncio.Condition | None = None
        self.retries = 0

    @classmethod
    def for_cluster(cls, config: NodeConfig, tls: TlsFiles | None = None, **kw: Any) -> Client:
        """A client of the cluster a node's configuration describes."""
        return cls([(r.host, r.port) for r in config.replicas], tls=tls, **kw)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(conn.lost), 1.0)

    # ------------------------------------------------------------ connection

    async def _connection(self) -> _Conn:
        conn = self._conn
        if conn is not None and not conn.lost.done():
            return conn
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            conn = self._conn
            if conn is not None and not conn.lost.done():
                return conn
            loop = asyncio.get_running_loop()
            host, port = self.addresses[self._next_address % len(self.addresses)]
            self._next_address += 1
            _, proto = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Conn(self._hello),
                    host,
                    port,
                    ssl=self._ssl,
                    server_hostname=host if self._ssl is not None else None,
                ),
                self.attempt_timeout_s,
            )
            self._conn = proto
            return proto

    def _drop(self, conn: _Conn) -> None:
        if self._conn is conn:
            self._conn = None
        conn.close()

    async def _request(
        self, make: Callable[[int], rf.RuntimeFrame], timeout_s: float | None
    ) -> rf.Reply:
        """Send until answered (not RETRY), reconnecting as needed; ``make``
        builds the frame for a request id (the same command every time)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        backoff = RETRY_BACKOFF_MIN_S
        while True:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise TimeoutError("no node answered in time")
            attempt = (
                self.attempt_timeout_s
                if remaining is None
                else min(remaining, self.attempt_timeout_s)
            )
            conn: _Conn | None = None
            try:
                conn = await self._connection()
                rid = next(self._request_ids)
                reply = await conn.send(make(rid), rid, attempt)
            except (OSError, ConnectionError, TimeoutError) as exc:
                self.retries += 1
                logger.debug("client: attempt failed (%s), retrying", exc)
                if conn is not None:
                    self._drop(conn)
            else:
                if reply.code == rf.Code.NOT_MEMBER and len(self.addresses) > 1:
                    # Not applied through that node: ask another (a member).
                    self.retries += 1
                    self._drop(conn)
                elif reply.code != rf.Code.RETRY:
                    return reply
                else:
                    self.retries += 1
            await asyncio.sleep(self._rng.uniform(0, backoff))
            backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)

    # --------------------------------------------------------------- sessions

    async def _session(self) -> _Session:
        if self._idle:
            return self._idle.pop()
        if self._room is None:
            self._room = asyncio.Condition()
        async with self._room:
            while self._sessions_open >= SESSIONS_MAX and not self._idle:
                await self._room.wait()
            if self._idle:
                return self._idle.pop()
            self._sessions_open += 1
        nonce = self._rng.getrandbits(63) | 1
        try:
            reply = await self._request(lambda rid: rf.Submit(rid, nonce, 0, b"", None, 1), None)
        except BaseException:
            self._sessions_open -= 1
            raise
        _check(reply)
        return _Session(decode_session_id(reply.value))

    async def _release(self, session: _Session) -> None:
        self._idle.append(session)
        if self._room is not None:
            async with self._room:
                self._room.notify()

    # -------------------------------------------------------------------- API

    async def submit(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        wait: WaitName = "ready",
        timeout_s: float | None = None,
    ) -> bytes | None:
        """Replicate ``payload`` once, whatever the retries; see :meth:`Node.submit`.

        Raises:
            ClientError: the cluster refused the command for good (the message says why).
            SessionExpired: the session expired; the command was not applied.
            TimeoutError: no node answered within ``timeout_s``.
        """
        if type(payload) is not bytes:
            raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
        if wait not in ("ready", "executed"):
            raise ValueError(f'wait must be "ready" or "executed", got {wait!r}')
        session = await self._session()
        session.seq += 1
        cid, seq, w = session.client_id, session.seq, 1 if wait == "executed" else 0
        try:
            reply = await self._request(
                lambda rid: rf.Submit(rid, cid, seq, payload, key, w), timeout_s
            )
        except BaseException:
            self._sessions_open -= 1  # its command may be in flight: never reuse it
            raise
        await self._release(session)
        if reply.code == rf.Code.SESSION_EXPIRED:
            raise SessionExpired(f"session {cid} expired; the command was not applied")
        _check(reply)
        value = reply.value
        return value if isinstance(value, bytes) else None

    async def read(
        self,
        key: bytes | None = None,
        request: bytes | None = None,
        *,
        stale: bool = False,
        timeout_s: float = 10.0,
    ) -> bytes | None:
        """A linearizable read at whichever node answers; with ``stale=True``,
        that node's state as it is (faster, may miss recent writes)."""
        reply = await self._request(lambda rid: rf.Read(rid, key, request, stale), timeout_s)
        _check(reply)
        return reply.value if isinstance(reply.value, bytes) else None

    async def status(self, timeout_s: float = 5.0) -> dict[str, Any]:
        """The status map of the node this client is connected to."""
        reply = await self._request(lambda rid: rf.Status(rid), timeout_s)
        _check(reply)
        return dict(reply.value)

    async def admin(self, operation: str, argument: Any = None, timeout_s: float = 5.0) -> Any:
        """An operator's request to the connected node (see :meth:`Node.admin`)."""
        reply = await self._request(lambda rid: rf.Admin(rid, operation, argument), timeout_s)
        _check(reply)
        return reply.value


def _check(reply: rf.Reply) -> None:
    if reply.code in (rf.Code.ERROR, rf.Code.NOT_MEMBER):
        raise ClientError(str(reply.value))
