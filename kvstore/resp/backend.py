"""What the Redis front end and the node (or a test's fake) agree on: the
connection's state the backend may read, and the backend's interface.

The front end never knows about replication: it hands every data command to
a :class:`Backend` and writes what it answers, so it can be tested against
an in-memory fake (``tests/kvstore/resp_fake.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kvstore.commands import CommandSpec
from kvstore.resp.pending import Deferred
from kvstore.values import Value

__all__ = ["Backend", "BatchBackend", "ConnState"]

_conn_ids = itertools.count(1)


@dataclass(slots=True)
class ConnState:
    """What the server knows about one client connection.

    ``stale_reads`` is the READONLY switch: True lets this connection's reads be
    answered from the local replica without the linearizability round.
    """

    id: int = field(default_factory=lambda: next(_conn_ids))
    name: bytes | None = None
    protocol: int = 2
    user: str | None = None
    stale_reads: bool = False
    db: int = 0
    addr: str = ""
    laddr: str = ""
    lib_name: bytes = b""
    lib_ver: bytes = b""


class Backend(Protocol):
    """What the front end needs from the node (or from a test's fake)."""

    def execute(self, args: list[bytes], conn: ConnState) -> Value | Deferred | Awaitable[Value]:
        """Run one data command; answer now, or with a :class:`Deferred` of one
        reply, or with an awaitable that answers later.

        Unknown commands get Redis' ``ERR unknown command ...`` from the backend.
        """
        ...

    def info(self, conn: ConnState) -> Mapping[str, Mapping[str, str | int]]:
        """INFO sections (``server``, ``clients``, ``replication``: role, view, ...)."""
        ...

    def command_table(self) -> Iterable[CommandSpec]:
        """The data commands, for COMMAND / COMMAND INFO / COMMAND DOCS."""
        ...


class BatchBackend(Backend, Protocol):
    """A backend that also takes many requests at once (the node is one).

    The front end then hands each read's consecutive data commands to
    :meth:`execute_many` in one call instead of one :meth:`Backend.execute`
    per command: with pipelines of small commands the per-call overhead (and
    one awaitable per command) was a large part of a node's CPU.
    """

    def execute_many(self, requests: list[list[bytes]], conn: ConnState) -> list[Value | Deferred]:
        """Run ``requests`` in order; answer in order: a value per request, or a
        :class:`Deferred` standing for its ``count`` consecutive requests.
        Every argument is bytes."""
        ...
