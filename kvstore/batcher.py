"""Batching at a kv-store node: the commands of one event-loop turn replicated
(or read) as one log command, and the batch's answer handed back in parts
(see :class:`Batcher`).

On the way of a write, the node's future for the batch is the one
:class:`asyncio.Future` (the node's API), and a part, a
:class:`~kvstore.resp.pending.Deferred`, the one kind of promise the front
end sees: the future's callback sets the parts, and each part's callback
writes its connection's replies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from kvstore.codec import (
    BatchItem,
    decode_results,
    decode_value,
    encode_batch_items,
    encode_command,
    encoded_oks,
)
from kvstore.resp.pending import Deferred
from kvstore.resp.writer import OkList
from kvstore.values import OK, Error, Value
from sdpaxos.runtime.errors import NotMember
from sdpaxos.runtime.node import NodeError, SessionExpired

__all__ = [
    "BATCH_BYTES_MAX",
    "BATCH_COMMANDS_MAX",
    "SET_BOUND",
    "STOPPED",
    "Batcher",
    "packed_bound",
]

log = logging.getLogger(__name__)

#: Most commands, and bytes of them, replicated (or read) as one batch.
BATCH_COMMANDS_MAX = 1024
BATCH_BYTES_MAX = 256 * 1024
#: What :func:`packed_bound` adds to a plain SET's key and value lengths.
SET_BOUND = 5 * 3 + 5 + len(b"SET")

TRYAGAIN = Error("TRYAGAIN no linearizable answer in time (no sequencer lease); try again")
MALFORMED_ANSWER = Error("ERR malformed batch answer")
STOPPED = Error("ERR this node is stopping; use another")


def refusal(exc: BaseException) -> Error:
    """The Redis error for a command the node refused: ``NOTMEMBER`` (with who the
    members are) when this node is no member of the cluster any more, or not
    yet (removed, a learner, waiting to be added: ``docs/membership.md``), so
    that the client sends it to a member; :data:`STOPPED` otherwise."""
    if isinstance(exc, NotMember):
        return Error(f"NOTMEMBER {exc}")
    return STOPPED


def failure(future: asyncio.Future[bytes | None]) -> Value | None:
    """The Redis error for a node's failed future, or None if it succeeded."""
    if future.cancelled():
        return STOPPED
    exc = future.exception()
    if exc is None:
        return None
    if isinstance(exc, TimeoutError):
        return TRYAGAIN
    if isinstance(exc, (NodeError, SessionExpired)):
        return refusal(exc)
    log.error("a command failed: %r", exc)
    return Error("ERR internal error")


def packed_bound(args: list[bytes]) -> int:
    """An upper bound on ``len(encode_command(args))``: msgpack spends at most 5
    header bytes on the array and on each bin string (an exact size would cost
    a packb per command; the batch limits only need a bound)."""
    return sum(map(len, args)) + 5 * len(args) + 5


class Batcher:
    """Gathers the commands of one event-loop turn into one log command (or one read).

    Every command the node replicates costs a session, a log record and a
    slot in a C-instance, whatever its size; a Redis pipeline, or many clients
    at once, bring hundreds of small commands per loop turn. So the commands
    that arrive in one turn travel as one :func:`~kvstore.codec.encode_batch`
    payload (packed by one ``msgpack.packb`` of their items when the batch is
    sent; consecutive plain SETs as one run, see :mod:`kvstore.codec`), and
    the array of results is handed back in *parts*: a part is a
    :class:`Deferred` for a run of consecutive commands of one connection
    (:meth:`add` them, then :meth:`seal`), so the answers cost one callback
    per run, not per command. The batch names a key only if all its commands
    name the same one. It is linearizable still: the batch takes effect at one
    point, inside every command's interval. A batch is sent early when it
    reaches :data:`BATCH_COMMANDS_MAX` commands or :data:`BATCH_BYTES_MAX`
    bytes (counted with :func:`packed_bound`).
    """

    __slots__ = (
        "_bytes",
        "_count",
        "_items",
        "_key",
        "_keyed",
        "_open",
        "_pack",
        "_parts",
        "_run_at",
        "_scheduled",
        "_sealed",
        "_submit",
    )

    def __init__(
        self,
        submit: Callable[[bytes, bytes | None], asyncio.Future[bytes | None]],
        pack: Callable[[list[BatchItem]], bytes] = encode_batch_items,
    ) -> None:
        self._submit = submit
        #: Packs a batch's items into its payload (the store's
        #: :meth:`kvstore.batches.PackedBatches.pack`, which remembers them).
        self._pack = pack
        #: The batch's items: argument lists, and SET runs (a count, then keys and values).
        self._items: list[Any] = []
        self._count = 0  # commands in the batch
        self._run_at = -1  # index of the open SET run's count in _items, or -1
        #: The batch's parts in batch order; the open run is not in it yet.
        self._parts: list[Deferred] = []
        self._open = 0  # commands added since the last part was made
        self._sealed: list[Deferred] = []  # parts made for the caller's open run
        self._bytes = 0
        self._key: bytes | None = None
        self._keyed = True  # every command so far names self._key
        self._scheduled = False

    def _note_key(self, key: bytes | None) -> None:
        if not self._count:
            self._key, self._keyed = key, key is not None
        elif self._keyed and key != self._key:
            self._keyed = False

    def _added(self, count: int, size: int) -> None:
        self._count += count
        self._open += count
        self._bytes += size
        if self._count >= BATCH_COMMANDS_MAX or self._bytes >= BATCH_BYTES_MAX:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def add(self, args: list[bytes], key: bytes | None, size: int) -> None:
        """Append one command (``size``: its :func:`packed_bound`); its answer
        comes in the part :meth:`seal` makes."""
        if self._count and self._bytes + size > BATCH_BYTES_MAX:
            self.flush()  # a big command goes alone, never over the payload limit
        self._note_key(key)
        self._items.append(args)
        self._run_at = -1
        self._added(1, size)

    def add_set(self, key: bytes, value: bytes, size: int) -> None:
        """Append ``SET key value`` (a plain SET: no options) to the batch's
        open SET run; as :meth:`add` otherwise."""
        if self._count and self._bytes + size > BATCH_BYTES_MAX:
            self.flush()
        self._note_key(key)
        items = self._items
        at = self._run_at
        if at < 0:
            self._run_at = len(items)
            items.append(1)
        else:
            items[at] += 1
        items.append(key)
        items.append(value)
        self._added(1, size)

    def add_sets(self, flat: list[bytes], key: bytes | None, size: int) -> None:
        """Append plain SETs at once: ``flat`` is key, value, key, value, ...;
        ``key`` the one key they all name (else None), ``size`` the sum of
        their :func:`packed_bound`. What does not fit the batch goes into the
        next, as :meth:`add_set` would send it."""
        count = len(flat) // 2
        if self._bytes + size > BATCH_BYTES_MAX:
            for i in range(0, len(flat), 2):
                k, v = flat[i], flat[i + 1]
                self.add_set(k, v, len(k) + len(v) + SET_BOUND)
            return
        room = BATCH_COMMANDS_MAX - self._count
        if count > room:  # the batch fills up part-way: the rest starts the next
            head = flat[: 2 * room]
            self.add_sets(head, key, sum(map(len, head)) + SET_BOUND * room)
            tail = flat[2 * room :]
            self.add_sets(tail, key, sum(map(len, tail)) + SET_BOUND * (count - room))
            return
        self._note_key(key)
        items = self._items
        at = self._run_at
        if at < 0:
            self._run_at = len(items)
            items.append(count)
        else:
            items[at] += count
        items += flat
        self._added(count, size)

    def _close_run(self) -> None:
        if self._open:
            part = Deferred(self._open)
            self._parts.append(part)
            self._sealed.append(part)
            self._open = 0

    def seal(self) -> list[Deferred]:
        """The parts answering the commands added since the last seal, in order
        (more than one if a batch was sent in between)."""
        self._close_run()
        sealed = self._sealed
        self._sealed = []
        return sealed

    def drop_open(self) -> None:
        """Forget the parts of an abandoned run (the node stopped while adding)."""
        self._close_run()
        for part in self._sealed:
            part.set([STOPPED] * part.count)
        self._sealed = []

    def flush(self) -> None:
        self._scheduled = False
        count = self._count
        if not count:
            return
        self._close_run()
        items = self._items
        parts = self._parts
        key = self._key if self._keyed else None
        self._items = []
        self._parts = []
        self._count = 0
        self._run_at = -1
        self._bytes = 0
        if count > 1:
            payload = self._pack(items)
        elif type(items[0]) is int:  # one plain SET
            payload = encode_command([b"SET", items[1], items[2]])
        else:
            payload = encode_command(items[0])
        try:
            future = self._submit(payload, key)
        except NodeError as exc:
            refused = refusal(exc)
            for part in parts:
                part.set([refused] * part.count)
            return
        if count == 1:
            future.add_done_callback(partial(answer_one, parts[0]))
        else:
            future.add_done_callback(partial(answer_many, parts, count))


def answer_one(out: Deferred, future: asyncio.Future[bytes | None]) -> None:
    """A batch of one command answered: its part is its reply."""
    failed = failure(future)
    if failed is not None:
        out.set([failed])
        return
    raw = future.result()
    out.set([None if raw is None else decode_value(raw)])


def answer_many(parts: list[Deferred], total: int, future: asyncio.Future[bytes | None]) -> None:
    """A batch of ``total`` commands answered: each part gets its commands' replies."""
    failed = failure(future)
    if failed is None:
        raw = future.result()
        if raw == encoded_oks(total):
            # Every command answered OK (a batch of plain SETs): no decoding,
            # and the front end writes each part without looking at its items.
            for part in parts:
                part.set(OkList([OK] * part.count))
            return
        try:
            results: Value = None if raw is None else decode_results(raw)
        except ValueError:
            results = decode_value(raw) if raw is not None else None
        if type(results) is list and len(results) == total:
            if len(parts) == 1:
                parts[0].set(results)
                return
            at = 0
            for part in parts:
                count = part.count
                part.set(results[at : at + count])
                at += count
            return
        failed = results if isinstance(results, Error) else MALFORMED_ANSWER
    for part in parts:
        part.set([failed] * part.count)
