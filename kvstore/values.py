"""The values a kv-store command answers with, shared by the state machine,
the Redis front end and the native client.

A result is one of: ``bytes`` (a bulk string), ``int`` (an integer), ``None``
(a nil), a ``list`` of results (an array), :class:`Simple` (a status line such
as ``OK``) or :class:`Error` (a Redis-style error, ``"ERR ..."`` or
``"WRONGTYPE ..."``). Keeping them plain Python values lets the state machine
stay ignorant of RESP, and lets the client hand users what redis-py would.
"""

from __future__ import annotations

from typing import NamedTuple, TypeAlias

__all__ = ["OK", "Error", "Simple", "Value"]


class Simple(NamedTuple):
    """A status reply: RESP ``+OK``."""

    text: str


class Error(NamedTuple):
    """An error reply: RESP ``-ERR ...``. ``text`` starts with the error code."""

    text: str


Value: TypeAlias = "bytes | int | Simple | Error | list[Value] | None"

OK = Simple("OK")
