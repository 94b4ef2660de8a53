"""A listening RESP server: accepts connections, holds what they share (the
backend, the users, the limits, the counters) and writes late replies that
wait for a loop turn."""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
from collections.abc import Mapping

from kvstore.resp.backend import Backend
from kvstore.resp.connection import RespConnection
from kvstore.resp.limits import CLIENTS_MAX, RespLimits

__all__ = ["RespServer", "serve_resp"]

log = logging.getLogger(__name__)


class RespServer:
    """A listening RESP server over one :class:`~kvstore.resp.backend.Backend`.

    ``users`` (name → password) makes AUTH required; ``ssl`` makes the port TLS-only.
    ``stats`` counts connections, commands, protocol errors and internal errors.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        ssl: _ssl.SSLContext | None = None,
        users: Mapping[str, str] | None = None,
        limits: RespLimits | None = None,
        clients_max: int = CLIENTS_MAX,
        stale_reads: bool = False,
    ) -> None:
        self.backend = backend
        #: Connections served at once; one more is told so and closed.
        self.clients_max = clients_max
        #: The read mode of a new connection (READONLY / READWRITE change it).
        self.stale_reads = stale_reads
        self.ssl = ssl
        self.users = dict(users) if users is not None else None
        self.limits = limits or RespLimits()
        self.stats: dict[str, int] = {
            "connections_received": 0,
            "commands": 0,
            "protocol_errors": 0,
            "internal_errors": 0,
            "rejected_connections": 0,
        }
        self.connections: set[RespConnection] = set()
        self.server: asyncio.Server | None = None
        self.port: int | None = None
        #: Connections with work left for the next loop turn.
        self._to_flush: list[RespConnection] = []

    def flush_later(self, conn: RespConnection) -> None:
        """Run ``conn``'s late flush at the next loop turn, together with every
        other connection's: one loop callback for all of them."""
        if not self._to_flush:
            asyncio.get_running_loop().call_soon(self._late_flush)
        self._to_flush.append(conn)

    def _late_flush(self) -> None:
        conns = self._to_flush
        self._to_flush = []
        for conn in conns:
            try:
                conn._late_flush()
            except Exception:
                log.exception("writing the replies of %s failed", conn.state.addr)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host:port`` (``port=0`` picks a free port, see ``self.port``)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: RespConnection(self), host, port, ssl=self.ssl, reuse_address=True
        )
        self.port = self.server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        if self.server is not None:
            await self.server.wait_closed()


async def serve_resp(
    backend: Backend,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ssl: _ssl.SSLContext | None = None,
    users: Mapping[str, str] | None = None,
    limits: RespLimits | None = None,
    clients_max: int = CLIENTS_MAX,
    stale_reads: bool = False,
) -> RespServer:
    """Start a :class:`RespServer` listening on ``host:port`` and answer it."""
    server = RespServer(
        backend,
        ssl=ssl,
        users=users,
        limits=limits,
        clients_max=clients_max,
        stale_reads=stale_reads,
    )
    await server.start(host, port)
    return server
