"""The kv-store's state machine: Redis 7 commands over a keyspace, deterministically.

Every replica applies the same payloads in the same order, so :class:`KVStore`
must reach the same state and answer the same bytes everywhere: no clock (hence
no expiry: ``SET ... EX`` is refused), no randomness, no iteration in hash
order (``KEYS`` and ``SCAN`` walk the keys sorted), and no exception out of
:meth:`KVStore.apply`, whatever the payload, since a payload that crashed one
replica would crash them all.

This module is the StateMachine side only: decoding a payload (one command,
or a batch of them: :mod:`kvstore.codec`), running it through the dispatch
table (:mod:`kvstore.dispatch`) and encoding the answer. The commands live
with their data type: :mod:`kvstore.keyspace` (the keys, and DEL, EXISTS,
KEYS, SCAN, ...), :mod:`kvstore.strings` (GET, SET, INCR, ...); glob
patterns in :mod:`kvstore.glob`.

Semantics follow Redis 7.0, including its error texts: checked by hand
against ``redis-server`` 7.0.15, and by a one-off differential run of 80,000
random commands (options, bad integers, glob quirks, arity errors) that
answered identically (KEYS compared as sorted sets). ``query`` refuses write
commands; ``apply`` runs reads too (answered like a query, changing nothing),
so a linearizable read can go through the log.

Speed: ``apply`` unpacks, finds the handler in a dict keyed by the command's
bytes and runs it; ``OK`` and nil results are pre-encoded; a batch's run of
plain SETs is one ``dict.update``; a batch this node packed is applied from
its items, not unpacked (:mod:`kvstore.batches`). Measured on the development
machine (Python 3.11, msgpack 1.2)::

    python -c "import timeit; from kvstore.machine import KVStore; \\
    from kvstore.codec import encode_command as e; \\
    s=KVStore(); p=e([b'SET', b'key:1234', b'v'*16]); \\
    print(1e6/min(timeit.repeat(lambda: s.apply(p), number=1000000, repeat=3)))"

1.59 million SET applies per second and 1.44 million GETs (16-byte values), so the machine
is a small part of a node's ~100k commands/s budget.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice

import msgpack

from kvstore.batches import PackedBatches
from kvstore.codec import (
    EXT_BATCH,
    PLAIN_SET,
    BatchItem,
    array_header,
    codec_default,
    decode_command,
    pack_trusted,
)
from kvstore.commands import write_key
from kvstore.dispatch import ERR_MALFORMED, execute
from kvstore.keyspace import Keyspace
from kvstore.values import OK, Value

__all__ = ["ERR_MALFORMED", "KVStore"]

_OK_BYTES = pack_trusted(OK)
_NIL_BYTES = pack_trusted(None)
_MALFORMED_BYTES = pack_trusted(ERR_MALFORMED)


def _runs_total(items: list[BatchItem]) -> int | None:
    """How many commands a batch's items stand for, or ``None`` if a SET run in
    it is malformed: its count is not a positive int, it runs past the end,
    or one of its keys and values is not bytes (:mod:`kvstore.codec`)."""
    total = 0
    i = 0
    n = len(items)
    while i < n:
        item = items[i]
        if type(item) is int:
            end = i + 1 + 2 * item
            if item < 1 or end > n or set(map(type, items[i + 1 : end])) != {bytes}:
                return None
            total += item
            i = end
        else:
            total += 1
            i += 1
    return total


class KVStore:
    """A deterministic Redis-like store, for SDPaxos' StateMachine protocol.

    ``packed`` is where this node's batcher packs its batches (see
    :mod:`kvstore.batches`); a store nobody packs for has an empty one.
    """

    __slots__ = ("_ks", "_pack", "_refused_set", "packed")

    def __init__(self, packed: PackedBatches | None = None) -> None:
        self._ks = Keyspace()
        #: The batches this node packed and has not applied yet.
        self.packed = packed if packed is not None else PackedBatches()
        # One Packer per store, reused: ten times cheaper than msgpack.packb per result
        # (a store is used by one thread, the node's loop).
        self._pack: Callable[[Value], bytes] = msgpack.Packer(
            use_bin_type=True, strict_types=True, default=codec_default
        ).pack
        #: What a plain SET answers as a query (a write refused), for SET runs.
        self._refused_set: bytes = self._pack(self.execute([b"SET", b"k", b"v"], writes=False))

    # -- the StateMachine protocol --

    def apply(self, payload: bytes) -> bytes:
        """Run one command from the log and answer its encoded result. Never raises."""
        return self._run(payload, writes=True)

    def query(self, request: bytes) -> bytes:
        """Answer a read command from local state (a write is refused, nothing changes)."""
        return self._run(request, writes=False)

    def _run(self, payload: bytes, writes: bool) -> bytes:
        packed = self.packed
        if packed:  # a batch this node packed is in flight: is it this one?
            items = packed.pop(payload, None)
            if items is not None:
                return self._batch_items(items, writes)
        try:
            args = msgpack.unpackb(payload)
        except Exception:
            return _MALFORMED_BYTES
        if type(args) is msgpack.ExtType:
            return self._batch(args, writes)
        result = execute(self._ks, args, writes)  # refuses anything but a list of bytes
        if result is OK:
            return _OK_BYTES
        if result is None:
            return _NIL_BYTES
        return self._pack(result)

    def _batch(self, ext: msgpack.ExtType, writes: bool) -> bytes:
        """A batch (:func:`kvstore.codec.encode_batch`): each command in order,
        answered as the array of their results (one per command; a run of
        ``n`` plain SETs answers ``n``)."""
        if ext.code != EXT_BATCH:
            return _MALFORMED_BYTES
        try:
            items = msgpack.unpackb(ext.data)
        except Exception:
            return _MALFORMED_BYTES
        return self._batch_items(items, writes)

    def _batch_items(self, items: object, writes: bool) -> bytes:
        """A batch's items (unpacked, or as this node packed them), applied."""
        if type(items) is not list or not items:
            return _MALFORMED_BYTES
        ks = self._ks
        count: int = items[0]
        if type(count) is int and len(items) == 1 + 2 * count and count > 0:
            # One run of plain SETs, the whole batch (what a SET pipeline makes).
            keys = items[1::2]
            values = items[2::2]
            if set(map(type, keys)) != {bytes} or set(map(type, values)) != {bytes}:
                return _MALFORMED_BYTES
            if not writes:
                return array_header(count) + self._refused_set * count
            ks.put_pairs(keys, values)
            return array_header(count) + _OK_BYTES * count
        if int in set(map(type, items)):
            # SET runs: check each before anything is applied, so that a
            # malformed batch changes nothing (a bad command alone is answered
            # alone, as it changes nothing either).
            total = _runs_total(items)
            if total is None:
                return _MALFORMED_BYTES
        else:
            total = len(items)
        pack = self._pack
        out = [array_header(total)]
        it = iter(items)
        for args in it:
            if type(args) is int:
                # A run of plain SETs (checked above): key, value, key, value, ...
                pairs = list(islice(it, 2 * args))
                if not writes:
                    out.append(self._refused_set * args)
                    continue
                ks.put_pairs(pairs[::2], pairs[1::2])
                out.append(_OK_BYTES * args)
                continue
            # The commonest command, plain SET, without the general dispatch
            # (every replica applies every command: this is the hot loop).
            if (
                writes
                and type(args) is list
                and len(args) == 3
                and args[0] in PLAIN_SET
                and type(args[1]) is bytes
                and type(args[2]) is bytes
            ):
                key = args[1]  # Keyspace.put, inlined
                data = ks.data  # not hoisted: FLUSHDB replaces the dict
                if ks.sorted_cache is not None and key not in data:
                    ks.sorted_cache = None
                data[key] = args[2]
                out.append(_OK_BYTES)
                continue
            result = execute(ks, args, writes)
            if result is OK:
                out.append(_OK_BYTES)
            elif result is None:
                out.append(_NIL_BYTES)
            else:
                out.append(pack(result))
        return b"".join(out)

    def snapshot(self) -> bytes:
        """The whole state as deterministic bytes: the items sorted by key, in msgpack."""
        return self._ks.snapshot()

    def restore(self, data: bytes) -> None:
        """Replace the state with a snapshot's; raises ValueError (state unchanged) on garbage.

        Only the canonical form :meth:`snapshot` writes is accepted (keys
        strictly increasing), so a restored store snapshots to the same bytes.
        """
        self._ks.restore(data)

    # -- helpers for the node and for tests --

    @staticmethod
    def write_key(payload: bytes) -> bytes | None:
        """The single key a payload's write names, else ``None`` ("any key")."""
        args = decode_command(payload)
        return None if args is None else write_key(args)

    def execute(self, args: object, writes: bool = True) -> Value:
        """Run a decoded command (``writes=False``: refuse writes). Never raises."""
        return execute(self._ks, args, writes)

    def items(self) -> list[tuple[bytes, bytes]]:
        """Every key and value, sorted (a copy: for tests and debugging)."""
        return sorted(self._ks.data.items())

    def __len__(self) -> int:
        return len(self._ks)
