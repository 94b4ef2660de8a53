"""The state machine of ``--engine runtime`` runs: what every node executed, in three digests.

``python -m sdpaxos node --app bench.runtime_app:BenchLog``. Why not the
runtime's ``digest`` app: its BLAKE2b chain is over every payload in execution
order, and EPaxos executes commands on different keys in different orders at
different replicas (correctly: they commute). The benchmark checks what each
protocol promises, so this app keeps

* the **count** of commands executed;
* an **order-free sum** of the payloads' hashes (mod 2**128): the same set of
  commands, whatever the order;
* an **order chain** over every payload in execution order: the same order
  (SDPaxos, Multi-Paxos and Mencius order every command);
* a **hot chain** over the payloads that start with :data:`HOT_MARK` (the load
  generators mark the writes on the conflict workload's hot key so): the same
  order of conflicting commands (what EPaxos promises).

``query`` answers all four (8 + 3 x 16 bytes) whatever it is asked, so a read
through a protocol's read path costs the node no more than the digest app's.
Light to import: the node process imports only this module of the benchmarks.
"""

from __future__ import annotations

import hashlib

__all__ = ["HOT_MARK", "QUERY_BYTES", "BenchLog", "parse_query"]

#: First byte of a payload written to the conflict workload's hot key.
HOT_MARK = b"h"
_COUNT_BYTES = 8
_HASH_BYTES = 16
_SUM_MOD = 1 << (8 * _HASH_BYTES)
#: Length of :meth:`BenchLog.query`'s answer.
QUERY_BYTES = _COUNT_BYTES + 3 * _HASH_BYTES


class BenchLog:
    """See the module docstring."""

    __slots__ = ("chain", "count", "hot", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.chain = bytes(_HASH_BYTES)
        self.hot = bytes(_HASH_BYTES)

    def apply(self, payload: bytes) -> bytes:
        h = hashlib.blake2b(payload, digest_size=_HASH_BYTES).digest()
        self.count += 1
        self.total = (self.total + int.from_bytes(h, "big")) % _SUM_MOD
        self.chain = hashlib.blake2b(self.chain + h, digest_size=_HASH_BYTES).digest()
        if payload[:1] == HOT_MARK:
            self.hot = hashlib.blake2b(self.hot + h, digest_size=_HASH_BYTES).digest()
        return b""

    def snapshot(self) -> bytes:
        return (
            self.count.to_bytes(_COUNT_BYTES, "big")
            + self.total.to_bytes(_HASH_BYTES, "big")
            + self.chain
            + self.hot
        )

    def restore(self, data: bytes) -> None:
        self.count, self.total, self.chain, self.hot = parse_query(data)

    def query(self, request: bytes) -> bytes:
        """Whatever the request: :meth:`snapshot` (see :func:`parse_query`)."""
        return self.snapshot()


def parse_query(data: bytes) -> tuple[int, int, bytes, bytes]:
    """``(count, order-free sum, order chain, hot chain)`` from a query's answer."""
    if len(data) != QUERY_BYTES:
        raise ValueError(f"a BenchLog answer is {QUERY_BYTES} bytes, got {len(data)}")
    h = _COUNT_BYTES
    return (
        int.from_bytes(data[:h], "big"),
        int.from_bytes(data[h : h + _HASH_BYTES], "big"),
        data[h + _HASH_BYTES : h + 2 * _HASH_BYTES],
        data[h + 2 * _HASH_BYTES :],
    )
