"""The batches a node packs, remembered with the items they were packed from,
so that the node applies its own batches without unpacking them.

Pure. Every replica applies every batch; the node that packed one would
otherwise unpack its own bytes again into the very items it had just packed
(two objects a SET in a run). Measured with ``python -m bench.kv_pipeline_cpu
--instructions`` (SET -P 16, three replicas applying, one of them the
packer): unpacking there costs about 500 instructions a SET, 2.7 % of the
whole per-command work.

So the node's batcher packs with :meth:`PackedBatches.pack`, which remembers,
and the store's ``apply`` (and ``query``, for a batch of reads) asks
:meth:`PackedBatches.take` first. A batch is remembered by its bytes, not by
the object that carries them: any payload equal to one packed here unpacks to
equal items (packing is deterministic), so whichever object the node hands
back, and wherever it came from, applying the remembered items does exactly
what unpacking would. Each batch is taken once; at most :data:`PACKED_MAX`
are kept (the oldest is forgotten and then simply unpacked).
"""

from __future__ import annotations

from kvstore.codec import BatchItem, encode_batch_items

__all__ = ["PACKED_MAX", "PackedBatches"]

#: Batches remembered at once (a node has a few in flight).
PACKED_MAX = 64


class PackedBatches:
    """This node's packed batches, by their bytes, until each is applied (see above)."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: dict[bytes, list[BatchItem]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def pack(self, items: list[BatchItem]) -> bytes:
        """:func:`~kvstore.codec.encode_batch_items` of ``items``, remembered.

        The caller hands ``items`` over: it must not change them afterwards.
        """
        payload = encode_batch_items(items)
        memo = self._items
        if len(memo) >= PACKED_MAX:
            del memo[next(iter(memo))]
        memo[payload] = items
        return payload

    def take(self, payload: bytes) -> list[BatchItem] | None:
        """The items ``payload`` was packed from here (forgotten from now on),
        or ``None`` if it was not packed here (or was forgotten)."""
        memo = self._items
        if not memo:
            return None
        return memo.pop(payload, None)
