"""The Redis front end's limits: what one client may make a server hold.

Redis enforces these on requests (hiredis, a *reply* parser, does not), and
the front end adds the pipeline bound: past it, and whenever the transport's
write buffer is full, a connection stops reading, so a client cannot make the
server buffer without bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

__all__ = [
    "BULK_BYTES_MAX",
    "CLIENTS_MAX",
    "HEADER_LINE_MAX",
    "INLINE_BYTES_MAX",
    "MULTIBULK_MAX",
    "PIPELINE_PENDING_MAX",
    "REQUEST_BYTES_MAX",
    "RespLimits",
]

#: How many requests one connection may have started but not yet answered.
PIPELINE_PENDING_MAX = 1024
#: Client connections served at once (Redis' maxclients default).
CLIENTS_MAX = 10_000
#: The largest request (an incomplete one, while it is being received).
REQUEST_BYTES_MAX = 8 * 1024 * 1024
#: The largest bulk string in a request (Redis' proto-max-bulk-len is 512 MB).
BULK_BYTES_MAX = REQUEST_BYTES_MAX
#: The most arguments in one request (Redis allows up to INT_MAX).
MULTIBULK_MAX = 1024 * 1024
#: The longest inline command line (Redis' PROTO_INLINE_MAX_SIZE).
INLINE_BYTES_MAX = 64 * 1024
#: The longest header line (``*N`` / ``$N``) a request may have.
HEADER_LINE_MAX = 32


@dataclass(frozen=True)
class RespLimits:
    """Per-connection limits; the defaults are the module constants."""

    pipeline_pending_max: int = PIPELINE_PENDING_MAX
    request_bytes_max: int = REQUEST_BYTES_MAX
    bulk_bytes_max: int = BULK_BYTES_MAX
    multibulk_max: int = MULTIBULK_MAX
    inline_bytes_max: int = INLINE_BYTES_MAX

    @cached_property
    def count_line_safe(self) -> int:
        """A ``*N`` line of at most this many bytes (without its CRLF) has an
        N with fewer digits than ``multibulk_max``, so under it: the front end
        need not parse it."""
        return len(str(self.multibulk_max)) if self.multibulk_max >= 0 else 0
