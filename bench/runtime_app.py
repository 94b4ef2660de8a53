"""The benchmarks' one state machine: what every replica executed, in three digests.

``python -m sdpaxos node --app bench.runtime_app:BenchLog`` runs it in the node
processes; the in-memory round driver (:mod:`bench.rounds`, which
``python -m bench.core_micro`` and the throughput and straggler experiments
run) builds it in one process. Why not the runtime's ``digest`` app: its
BLAKE2b chain is over every payload in execution order, and EPaxos executes
commands on different keys in different orders at different replicas
(correctly: they commute). The benchmark checks what each protocol promises,
so this app keeps

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
is a dict store (0.115 us here for ``BenchLog(store=True).apply``), and every
node of every protocol pays it for every command. With BLAKE2b (two per
command: 0.85 us at 16 B, 1.7 us at 1 KB, ``python -m timeit`` on
:meth:`BenchLog.apply`) it was over a quarter of the busiest SDPaxos node's
CPU at 3 nodes (3.0 us per command, ``python -m bench.runtime_cpu``) and
diluted every ratio between protocols; now 0.28 and 0.50 us (best of 9; with
the test for a store that a node skips, 0.29 to 0.31 and 0.51). A command's
checksum goes into the sum and, as a polynomial hash modulo the prime
2**61 - 1, into the chains: they catch a lost, duplicated or reordered command
(what a protocol bug does), not a forgery.

**The store** (``BenchLog(store=True)``, the in-memory driver's): the machine
is also the paper's key-value map. A payload :func:`kv_put` builds stores the
payload under its key (its value is the rest: keeping the payload whole saves
copying the value), one :func:`kv_get` builds answers the value; anything else
is a no-op. It keeps the payloads in execution order too, until the driver
takes them (:meth:`BenchLog.take_order`: the driver checks per-key orders and
exactly-once execution with them), and the digests are folded from them then,
outside the replica's timed ``ready()``: per command the store costs a list
append and a dict store (0.115 us at 16 B and 1 KB alike, as much as the
round driver's ``KVMachine`` it replaces), not the digests' 0.26 to 0.51 us
(folding 1,000 payloads of 16 B or 1 KB), which grow with the payload and
would dilute every ratio at 1 KB. A node cannot keep the order (its memory
would grow with every command): it folds each command at once.

``query`` answers the four digests (8 + 3 x 16 bytes) whatever it is asked, so
a read through a protocol's read path costs the node no more than the digest
app's. Light to import: the node process imports only this module of the
benchmarks.
"""

from __future__ import annotations

from zlib import crc32

__all__ = [
    "GET",
    "HOT_MARK",
    "KEY_BYTES_MAX",
    "KV_HEADER_BYTES",
    "PUT",
    "QUERY_BYTES",
    "BenchLog",
    "kv_get",
    "kv_put",
    "parse_query",
]

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

#: First byte of a store's payload: a put (write) or a get (a read through the log).
PUT = 0x50  # "P"
GET = 0x47  # "G"
#: Store payload layout: op (1 byte), key length (1 byte), key, value.
KV_HEADER_BYTES = 2
KEY_BYTES_MAX = 255
_ITEM_LEN_BYTES = 4


def kv_put(key: bytes, value: bytes) -> bytes:
    """The payload of a put of ``value`` to ``key``."""
    if len(key) > KEY_BYTES_MAX:
        raise ValueError(f"key of {len(key)} bytes; at most {KEY_BYTES_MAX}")
    return bytes((PUT, len(key))) + key + value


def kv_get(key: bytes, tag: bytes) -> bytes:
    """The payload of a get of ``key``; ``tag`` only makes it unique (an operation id)."""
    if len(key) > KEY_BYTES_MAX:
        raise ValueError(f"key of {len(key)} bytes; at most {KEY_BYTES_MAX}")
    return bytes((GET, len(key))) + key + tag


class BenchLog:
    """See the module docstring; ``store``: also the key-value map (in-memory driver)."""

    __slots__ = ("chain", "count", "data", "hot", "order", "total")

    def __init__(self, store: bool = False) -> None:
        self.count = 0
        self.total = 0
        self.chain = 0
        self.hot = 0
        #: The key-value map (key -> the put's whole payload), None: no store.
        self.data: dict[bytes, bytes] | None = {} if store else None
        #: The store's payloads applied and not yet folded into the digests.
        self.order: list[bytes] = []

    def apply(self, payload: bytes) -> bytes:
        data = self.data
        if data is not None:
            self.order.append(payload)
            try:
                end = KV_HEADER_BYTES + payload[1]
                op = payload[0]
            except IndexError:
                return b""  # not a command of the store's: a no-op (still in the digests)
            if op == PUT:
                data[payload[KV_HEADER_BYTES:end]] = payload
                return b"ok"
            value = data.get(payload[KV_HEADER_BYTES:end])
            return b"" if value is None else value[end:]
        item = crc32(payload) + 1  # never 0: every command moves a chain
        self.count += 1
        self.total = (self.total + item) & _SUM_MASK
        self.chain = (self.chain * _CHAIN_BASE + item) % _CHAIN_PRIME
        if payload[:1] == HOT_MARK:
            self.hot = (self.hot * _CHAIN_BASE + item) % _CHAIN_PRIME
        return b""

    def take_order(self) -> list[bytes]:
        """The store's payloads applied since the last call, in order, folded
        into the digests now (a node's are folded as it applies them: empty)."""
        out = self.order
        if out:
            self.order = []
            count, total, chain, hot = self.count, self.total, self.chain, self.hot
            for payload in out:
                item = crc32(payload) + 1
                count += 1
                total = (total + item) & _SUM_MASK
                chain = (chain * _CHAIN_BASE + item) % _CHAIN_PRIME
                if payload[:1] == HOT_MARK:
                    hot = (hot * _CHAIN_BASE + item) % _CHAIN_PRIME
            self.count, self.total, self.chain, self.hot = count, total, chain, hot
        return out

    @property
    def applied(self) -> int:
        """Commands applied, folded or not."""
        return self.count + len(self.order)

    def digest(self) -> str:
        """The order chain in hex: equal at two replicas that executed the same order."""
        self.take_order()
        return f"{self.chain:016x}"

    def value(self, key: bytes) -> bytes | None:
        """What the store holds under ``key`` (None: never put, or no store)."""
        payload = None if self.data is None else self.data.get(key)
        return None if payload is None else payload[KV_HEADER_BYTES + len(key) :]

    def snapshot(self) -> bytes:
        """The four digests (:data:`QUERY_BYTES`), then the store's puts, each
        length-prefixed, in key order."""
        self.take_order()
        head = (
            self.count.to_bytes(_COUNT_BYTES, "big")
            + self.total.to_bytes(_HASH_BYTES, "big")
            + self.chain.to_bytes(_HASH_BYTES, "big")
            + self.hot.to_bytes(_HASH_BYTES, "big")
        )
        if not self.data:
            return head
        return head + b"".join(
            len(p).to_bytes(_ITEM_LEN_BYTES, "big") + p for _, p in sorted(self.data.items())
        )

    def restore(self, data: bytes) -> None:
        """Become the log ``data`` describes; malformed ``data`` changes nothing."""
        store = self.data is not None
        count, total, chain, hot = parse_query(data, store)
        chain_value, hot_value = _chain_value(chain), _chain_value(hot)
        items = _parse_items(data[QUERY_BYTES:]) if store else None
        self.count, self.total, self.chain, self.hot = count, total, chain_value, hot_value
        self.order = []
        if items is not None:
            self.data = items

    def query(self, request: bytes) -> bytes:
        """Whatever the request: the four digests (see :func:`parse_query`)."""
        return self.snapshot()[:QUERY_BYTES]


def _chain_value(chain: bytes) -> int:
    value = int.from_bytes(chain, "big")
    if value >= _CHAIN_PRIME:
        raise ValueError(f"a BenchLog chain is below 2**61 - 1, got {value}")
    return value


def _parse_items(data: bytes) -> dict[bytes, bytes]:
    items: dict[bytes, bytes] = {}
    at = 0
    while at < len(data):
        size = int.from_bytes(data[at : at + _ITEM_LEN_BYTES], "big")
        payload = data[at + _ITEM_LEN_BYTES : at + _ITEM_LEN_BYTES + size]
        if len(payload) != size or size < KV_HEADER_BYTES:
            raise ValueError("a BenchLog store snapshot is truncated")
        items[payload[KV_HEADER_BYTES : KV_HEADER_BYTES + payload[1]]] = payload
        at += _ITEM_LEN_BYTES + size
    return items


def parse_query(data: bytes, store: bool = False) -> tuple[int, int, bytes, bytes]:
    """``(count, order-free sum, order chain, hot chain)`` from a query's answer
    (``store``: from a store's snapshot, whose puts follow them)."""
    if len(data) != QUERY_BYTES and not (store and len(data) > QUERY_BYTES):
        raise ValueError(f"a BenchLog answer is {QUERY_BYTES} bytes, got {len(data)}")
    h = _COUNT_BYTES
    return (
        int.from_bytes(data[:h], "big"),
        int.from_bytes(data[h : h + _HASH_BYTES], "big"),
        data[h + _HASH_BYTES : h + 2 * _HASH_BYTES],
        data[h + 2 * _HASH_BYTES : QUERY_BYTES],
    )
