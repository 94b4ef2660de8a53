"""The state machine of ``--engine runtime`` runs: what every node executed, in three digests.

``python -m sdpaxos node --app bench.runtime_app:BenchLog``. Why not the
runtime's ``digest`` app: its BLAKE2b chain is over every payload in execution
order, and EPaxos executes commands on different keys in different orders at
different replicas (correctly: they commute). The benchmark checks what each
protocol promises, so this app keeps

* the **count** of commands executed;
* an **order-free sum** of the payloads' checksums (mod 2**128): the same set
  of commands, whatever the order;
* an **order chain** over every payload in execution order: the same order
  (SDPaxos, Multi-Paxos and Mencius order every command);
* a **hot chain** over the payloads that start with :data:`HOT_MARK` (the load
  generators mark the writes on the conflict workload's hot key so): the same
  order of conflicting commands (what EPaxos promises).

Why a CRC-32 per command and not a cryptographic hash: this app stands for
the paper's state machine, an in-memory key-value map, whose cost per command
is a dict store (0.14 us here for the round driver's ``KVMachine.apply``),
and every node of every protocol pays it for every command. With BLAKE2b (two
per command: 0.85 us at 16 B, 1.7 us at 1 KB, ``python -m timeit`` on
:meth:`BenchLog.apply`) it was over a quarter of the busiest SDPaxos node's
CPU at 3 nodes (3.0 us per command, ``python -m bench.runtime_cpu``) and
diluted every ratio between protocols, as the round driver's BLAKE2b chain did
until that became a key-value store; now 0.31 and 0.58 us. A command's
checksum goes into the sum and, as a polynomial hash modulo the prime
2**61 - 1, into the chains: they catch a lost, duplicated or reordered command
(what a protocol bug does), not a forgery.

``query`` answers all four (8 + 3 x 16 bytes) whatever it is asked, so a read
through a protocol's read path costs the node no more than the digest app's.
Light to import: the node process imports only this module of the benchmarks.
"""

from __future__ import annotations

from zlib import crc32

__all__ = ["HOT_MARK", "QUERY_BYTES", "BenchLog", "parse_query"]

#: First byte of a payload written to the conflict workload's hot key.
HOT_MARK = b"h"
_COUNT_BYTES = 8
_HASH_BYTES = 16
_SUM_MASK = (1 << (8 * _HASH_BYTES)) - 1
#: A chain is a polynomial hash of its commands' checksums, in order, modulo
#: the Mersenne prime 2**61 - 1 (a fixed base: the same at every node).
_CHAIN_PRIME = (1 << 61) - 1
_CHAIN_BASE = 0x5DEECE66D1234567 % _CHAIN_PRIME
#: Length of :meth:`BenchLog.query`'s answer.
QUERY_BYTES = _COUNT_BYTES + 3 * _HASH_BYTES


class BenchLog:
    """See the module docstring."""

    __slots__ = ("chain", "count", "hot", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.chain = 0
        self.hot = 0

    def apply(self, payload: bytes) -> bytes:
        item = crc32(payload) + 1  # never 0: every command moves a chain
        self.count += 1
        self.total = (self.total + item) & _SUM_MASK
        self.chain = (self.chain * _CHAIN_BASE + item) % _CHAIN_PRIME
        if payload[:1] == HOT_MARK:
            self.hot = (self.hot * _CHAIN_BASE + item) % _CHAIN_PRIME
        return b""

    def snapshot(self) -> bytes:
        return (
            self.count.to_bytes(_COUNT_BYTES, "big")
            + self.total.to_bytes(_HASH_BYTES, "big")
            + self.chain.to_bytes(_HASH_BYTES, "big")
            + self.hot.to_bytes(_HASH_BYTES, "big")
        )

    def restore(self, data: bytes) -> None:
        """Become the log ``data`` describes; malformed ``data`` changes nothing."""
        count, total, chain, hot = parse_query(data)
        chain_value, hot_value = _chain_value(chain), _chain_value(hot)
        self.count, self.total, self.chain, self.hot = count, total, chain_value, hot_value

    def query(self, request: bytes) -> bytes:
        """Whatever the request: :meth:`snapshot` (see :func:`parse_query`)."""
        return self.snapshot()


def _chain_value(chain: bytes) -> int:
    value = int.from_bytes(chain, "big")
    if value >= _CHAIN_PRIME:
        raise ValueError(f"a BenchLog chain is below 2**61 - 1, got {value}")
    return value


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
