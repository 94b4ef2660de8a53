"""The batches a node packs, remembered with the items they were packed from,
so that the node applies its own batches without unpacking them.

Pure. Every replica applies every batch; the node that packed one would
otherwise unpack its own bytes again into the very items it had just packed
(two objects a SET in a run). Measured with ``python -m bench.kv_pipeline_cpu
--instructions`` (SET -P 16, three replicas applying, one of them the
packer): unpacking there costs about 500 instructions a SET, 2.7 % of the
whole per-command work.

So the node's batcher packs with :meth:`PackedBatches.pack`, which remembers,
and the store's ``apply`` (and ``query``, for a batch of reads) takes the
items back from it first. A batch is remembered by its bytes, not by
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


class PackedBatches(dict[bytes, list[BatchItem]]):
    """This node's packed batches: each one's bytes to the items it was packed
    from, until it is applied (see above).

    A dict, so that a store asks it cheaply: ``if packed:`` costs no call
    when nothing is in flight (every replica but the packer, and every
    payload of one command), and taking a batch is ``packed.pop(payload,
    None)`` (each batch is taken once). Only :meth:`pack` adds to it.
    """

    __slots__ = ()

    def pack(self, items: list[BatchItem]) -> bytes:
        """:func:`~kvstore.codec.encode_batch_items` of ``items``, remembered
        (the oldest forgotten past :data:`PACKED_MAX`).

        The caller hands ``items`` over: it must not change them afterwards.
        """
        payload = encode_batch_items(items)
        if len(self) >= PACKED_MAX:
            del self[next(iter(self))]
        self[payload] = items
        return payload
