"""Remote clients: their frames to the driver, and the driver's answers back.

A client connection (:mod:`sdpaxos.runtime.client` at the other end) sends
requests, each with a request id, and gets exactly one answer per request:

- ``Submit`` / ``SubmitMany``: a command of the client's session, proposed
  through the driver (or joined to the proposal of the same ``(client_id,
  seq)`` in flight: a retry). The request waits for its reply (:meth:`Clients.answered`).
  A full proposal queue answers RETRY; a registration (``seq`` 0) on a
  protocol without a session table is answered here with a random session id;
- ``Read``: a linearizable read (or a stale one, answered at once);
- ``Admin``: an operator's operation (the node's :meth:`~sdpaxos.runtime.node.Node.admin`);
- ``Status``: the node's status, answered at once and outside every stage.

Answers gathered in one turn go to each connection as one frame
(``REPLY_MANY`` when there are several), written in :meth:`Clients.flush`,
before the peers' messages: they end a command's wait. A connection with
:data:`CLIENT_REQUESTS_PENDING_MAX` requests unanswered is not read until
it drains to half of that.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.membership import MEMBERSHIP_PREFIX
from sdpaxos.core.ready import Reply, ReplyKind
from sdpaxos.core.sessions import encode_session_id
from sdpaxos.core.types import Command, Wait
from sdpaxos.runtime import frames as rf
from sdpaxos.runtime.driver import READ_TIMEOUT_S, DriverPort
from sdpaxos.runtime.errors import NodeError
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.status import Tally, clock_ms, count_rejected, observe_latency
from sdpaxos.runtime.transport import Connection

__all__ = [
    "CLIENT_REQUESTS_PENDING_MAX",
    "OVERLOADED",
    "Clients",
]

_perf = time.perf_counter

#: Requests one client connection may have waiting before the node stops reading it.
CLIENT_REQUESTS_PENDING_MAX = 8192
#: Why a proposal was refused with RETRY.
logger = logging.getLogger(__name__)

OVERLOADED = "overloaded: the proposal queue is full"

# The client path runs once per command: enum members read through their class
# cost more than a module global, and a named tuple's own constructor is a
# Python function (tuple.__new__ builds the same value for half the price).
_READY, _EXECUTED = Wait.READY, Wait.EXECUTED
#: What a client is told, by the kind of the core's reply.
_CODE_OF_KIND = {
    ReplyKind.READY: rf.Code.READY,
    ReplyKind.EXECUTED: rf.Code.EXECUTED,
    ReplyKind.SESSION_EXPIRED: rf.Code.SESSION_EXPIRED,
    ReplyKind.NOT_MEMBER: rf.Code.NOT_MEMBER,
}
#: What a client is told with :attr:`~sdpaxos.runtime.frames.Code.NOT_MEMBER`
#: when the core refused a command (the node's own words are in its status).
NOT_MEMBER_TEXT = (
    "this node is no member of the epoch that runs (it waits to be added, is a learner, "
    "or was removed): the command was not applied; send it to a member"
)
_EXPIRED_CODE = rf.Code.SESSION_EXPIRED
#: Why a command whose payload starts with the membership prefix is refused.
RESERVED_TEXT = "payloads may not start with the membership prefix (membership changes' own)"
#: A client request's start time when no metrics were kept as it came in.
_NOT_TIMED = -1.0
_new = tuple.__new__


class Clients:
    """Every client connection of a node (the owner of those connections)."""

    def __init__(
        self,
        node_id: int,
        driver: DriverPort,
        *,
        session_table: bool,
        tls: bool,
        tally: Tally,
        metrics: Metrics | None,
        rng: random.Random,
        status: Callable[[], dict[str, Any]],
        admin: Callable[[str, Any], dict[str, Any] | Awaitable[dict[str, Any]]],
    ) -> None:
        self.id = node_id
        self.driver = driver
        #: Whether registrations go through the core (see the module docstring).
        self.registers_locally = not session_table
        #: Whether a client must show a client certificate (TLS is on).
        self.tls = tls
        self.tally = tally
        self.metrics = metrics
        self.rng = rng
        self._status = status
        self._admin = admin
        self.connections: set[Connection] = set()
        #: Admin operations that answer later (membership changes), until done.
        self._tasks: set[asyncio.Future[Any]] = set()
        #: Connections with answers gathered this turn (written by :meth:`flush`).
        self.dirty: set[Connection] = set()

    def answered(
        self, conn: Connection, request_id: int, reply: Reply | None, started_ms: float
    ) -> None:
        """A command's reply, for the request that proposed it (this is the
        :class:`~sdpaxos.runtime.driver.ReplySink` of every client request)."""
        if reply is None:
            return  # the node stopped: the connection is closed, the client retries elsewhere
        kind = reply.kind
        if started_ms != _NOT_TIMED:
            observe_latency(self.metrics, kind, started_ms)
        code = _CODE_OF_KIND.get(kind, _EXPIRED_CODE)
        if code == rf.Code.NOT_MEMBER:
            refusal = self.driver.refusal()
            self.answer(conn, request_id, code, refusal or NOT_MEMBER_TEXT)
            return
        self.answer(conn, request_id, code, reply.result)

    # ------------------------------------------------------------ connections

    def hello(self, conn: Connection, hello: rf.Hello, identity: tuple[str, int] | None) -> bool:
        """A client's hello on an accepted connection (with TLS, its certificate
        must be a client's)."""
        if self.tls and (identity is None or identity[0] != "client"):
            self.reject(conn, f"a client hello needs a client certificate, got {identity}")
            return False
        conn.kind = rf.Kind.CLIENT
        conn.peer_id = hello.id
        conn.owner = self
        self.connections.add(conn)
        return True

    def dialed(self, conn: Connection) -> bool:
        return False  # a node never dials a client

    def closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.dirty.discard(conn)

    def reject(self, conn: Connection, reason: str) -> None:
        count_rejected(self.tally, self.metrics, self.id, conn.describe(), reason)

    def close_all(self) -> None:
        for conn in list(self.connections):
            conn.close()

    # ---------------------------------------------------------------- requests

    def frame(self, conn: Connection, payload: bytes) -> None:
        """One request from a client's connection."""
        if not self.driver.running:
            return
        self.tally.io["client_frames_in"] += 1
        t0 = _perf()
        cf = rf.decode_runtime(payload)
        if type(cf) is rf.Status:
            self._answer_status(conn, cf.request_id)
            return
        try:
            self._request(conn, cf)
        finally:
            self.tally.stages_s["client"] += _perf() - t0

    def _answer_status(self, conn: Connection, request_id: int) -> None:
        """A status request, answered at once and outside :attr:`Tally.stages_s`:
        it is an operator's reading, not a command's work, and reading the
        stages (``bench.runtime_latency`` does, around a region's commands)
        must not move them."""
        if conn.open:
            reply = _new(rf.Reply, (request_id, rf.Code.OK, self._status()))
            conn.send(rf.encode_runtime(reply))
            io = self.tally.io
            io["client_frames_out"] += 1
            io["client_writes"] += 1
            conn.flush()

    def _request(self, conn: Connection, f: rf.RuntimeFrame) -> None:
        """A client's request (a status request is answered in :meth:`frame`)."""
        # Every request gets exactly one answer (answer counts it down): a
        # client that pipelines more than the bound is not read until it drains.
        conn.pending += 1
        if conn.pending >= CLIENT_REQUESTS_PENDING_MAX:
            conn.pause_reading()
        if isinstance(f, rf.Submit):
            self._submit(conn, f)
        elif isinstance(f, rf.SubmitMany):
            conn.pending += len(f.items) - 1
            self._submits(conn, f.items)
            if conn.pending >= CLIENT_REQUESTS_PENDING_MAX:
                conn.pause_reading()
        elif isinstance(f, rf.Read):
            self._read(conn, f)
        elif isinstance(f, rf.Admin):
            self._admin_request(conn, f)
        else:
            raise rf.FrameError(f"a client may not send {type(f).__name__}")

    def answer(self, conn: Connection, request_id: int, code: rf.Code, value: Any) -> None:
        """Answer one request (exactly once): gathered per connection and sent
        at the end of the turn, as one ``REPLY_MANY`` when there are several."""
        conn.pending -= 1
        if conn.paused and conn.pending <= CLIENT_REQUESTS_PENDING_MAX // 2:
            conn.resume_reading()
        if not conn.open:
            return
        conn.answers.append(_new(rf.Reply, (request_id, code, value)))
        self.dirty.add(conn)
        driver = self.driver
        if not driver.flush_scheduled:
            driver.kick()  # answers given outside a turn (admin, reads, refusals) go at the next

    def _submits(self, conn: Connection, items: tuple[rf.Submit, ...]) -> None:
        """:meth:`_submit` of each item, with its common case written out (a
        session's next command, not proposed yet): this runs once per command.
        Refusals, registrations and retries of a command in flight take the
        general path."""
        driver = self.driver
        waiting = driver.waiting
        timed = self.metrics is not None
        propose_new = driver.propose_new
        proposed = False
        for item in items:
            request_id, client_id, seq, payload, key, wait_code = item
            if (
                client_id == 0
                or seq == 0
                or (client_id, seq) in waiting
                or payload.startswith(MEMBERSHIP_PREFIX)
            ):
                self._submit(conn, item)
                continue
            if propose_new(
                _new(Command, (client_id, seq, payload, key)),
                _EXECUTED if wait_code == 1 else _READY,
                (self, conn, request_id, clock_ms() if timed else _NOT_TIMED),
            ):
                proposed = True
            else:
                self.answer(conn, request_id, rf.Code.RETRY, OVERLOADED)
        if proposed:
            driver.kick()

    def _submit(self, conn: Connection, f: rf.Submit) -> None:
        request_id, client_id, seq, payload, key, wait_code = f
        if client_id == 0:
            self.answer(conn, request_id, rf.Code.ERROR, "client_id 0: open a session first")
            return
        if payload.startswith(MEMBERSHIP_PREFIX):
            self.answer(conn, request_id, rf.Code.ERROR, RESERVED_TEXT)
            return
        if seq == 0:
            if payload:
                self.answer(conn, request_id, rf.Code.ERROR, "seq 0 is a registration: no payload")
                return
            if self.registers_locally:  # no session table: see the module docstring
                session_id = encode_session_id(self.rng.getrandbits(63) | 1)
                self.answer(conn, request_id, rf.Code.EXECUTED, session_id)
                return
        wait = _EXECUTED if wait_code == 1 or seq == 0 else _READY
        # The clock is read only for the latency metrics.
        started_ms = clock_ms() if self.metrics is not None else _NOT_TIMED
        waiter = (self, conn, request_id, started_ms)
        cmd: Command = _new(Command, (client_id, seq, payload, key))
        if not self.driver.enqueue(cmd, wait, waiter):
            self.answer(conn, request_id, rf.Code.RETRY, OVERLOADED)

    def _read(self, conn: Connection, f: rf.Read) -> None:
        rid = f.request_id

        def done(ok: bool, value: bytes | None) -> None:
            if ok:
                self.answer(conn, rid, rf.Code.READ_OK, value)
            else:
                self.answer(conn, rid, rf.Code.RETRY, "no linearizable read in time")

        driver = self.driver
        refusal = driver.refusal()
        if refusal is not None:
            self.answer(conn, rid, rf.Code.NOT_MEMBER, refusal)
            return
        if f.stale:
            done(True, driver.query(f.key, f.request))
            return
        driver.start_read(f.key, f.request, driver.now_ms() + READ_TIMEOUT_S * 1000, done)

    def _admin_request(self, conn: Connection, f: rf.Admin) -> None:
        try:
            value = self._admin(f.operation, f.argument)
        except (ValueError, LocalProtocolError) as exc:
            self.answer(conn, f.request_id, rf.Code.ERROR, str(exc))
            return
        if not isinstance(value, dict):
            # One that takes long (a membership change): answered when it is done.
            task = asyncio.ensure_future(value)
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._admin_done(conn, f.request_id, t))
            return
        self.answer(conn, f.request_id, rf.Code.OK, value)

    def _admin_done(self, conn: Connection, request_id: int, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            self.answer(conn, request_id, rf.Code.ERROR, "cancelled: the node stopped")
            return
        exc = task.exception()
        if exc is None:
            self.answer(conn, request_id, rf.Code.OK, task.result())
        elif isinstance(exc, ValueError | LocalProtocolError | NodeError | TimeoutError):
            self.answer(conn, request_id, rf.Code.ERROR, str(exc) or type(exc).__name__)
        else:
            logger.error("admin request failed: %r", exc)
            self.answer(conn, request_id, rf.Code.ERROR, f"internal error: {exc!r}")

    # ------------------------------------------------------------------ answers

    def flush(self) -> None:
        """Write this turn's answers, one frame per connection (``REPLY_MANY``
        when there are several)."""
        dirty = self.dirty
        if not dirty:
            return
        t0 = _perf()
        io = self.tally.io
        self.dirty = set()
        for conn in dirty:
            answers = conn.answers
            if answers:
                conn.answers = []
                if len(answers) == 1:
                    conn.send(rf.encode_runtime(answers[0]))
                    io["client_frames_out"] += 1
                else:
                    for k in range(0, len(answers), rf.MANY_ITEMS_MAX):
                        chunk = tuple(answers[k : k + rf.MANY_ITEMS_MAX])
                        conn.send(rf.encode_runtime(rf.ReplyMany(chunk)))
                        io["client_frames_out"] += 1
            if conn.out:
                io["client_writes"] += 1
            conn.flush()
        self.tally.stages_s["answer"] += _perf() - t0
