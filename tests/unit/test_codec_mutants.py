"""The wire codec (:mod:`sdpaxos.wire.codec`) at the edges its other tests miss.

Each test here kills mutants that survived a mutation run of ``codec.py``
against ``tests/unit/test_codec.py``, ``test_framing.py``, ``test_fast_tuples.py``,
``test_records.py`` and ``test_protocols.py`` (the mutants each one kills are
named in its docstring). They assert what a peer or a transport sees: which
bytes are refused with :class:`CodecError`, what is decoded, what an error says.

:class:`MessageCodec` (the baselines' codec) repeats the module functions'
checks in its own methods, so it is held here to the very same golden, malformed
and unencodable cases ``test_codec.py`` holds the module functions to.

How to re-run the mutation test (``scripts/mutation/codec.toml``, in a copy of
the tree: cosmic-ray rewrites the module in place), and the surviving mutants
judged equivalent with the reason for each: ``scripts/mutation/README.md``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack
import pytest

from sdpaxos.core.messages import MESSAGE_TYPES, CAccept, Message, OAccept, OAck, RRequestBatch
from sdpaxos.core.types import Ballot, CIndex, Command, ReplicaId, Slot, View
from sdpaxos.wire.codec import (
    MESSAGES_PER_BATCH_MAX,
    VERSION,
    CodecError,
    MessageCodec,
    decode,
    decode_batch,
    encode,
    encode_batch,
)
from tests.unit.test_codec import BAD_TO_ENCODE, GOLDEN, MALFORMED

#: The SDPaxos table through the class: the same format as the module functions.
MC = MessageCodec(MESSAGE_TYPES)

#: A small valid message (tag 5).
OACK = OAck(ReplicaId(1), View(2), Slot(3))


def _packed(obj: object) -> bytes:
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return bytes([VERSION]) + packed


# ----------------------------------------------------------- MessageCodec parity


@pytest.mark.parametrize(("msg", "golden_hex"), GOLDEN, ids=lambda v: type(v).__name__)
def test_message_codec_gives_the_golden_bytes(msg: Message, golden_hex: str) -> None:
    assert MC.encode(msg).hex() == golden_hex
    assert MC.decode(bytes.fromhex(golden_hex)) == msg
    assert MC.decode_batch(MC.encode_batch([msg, msg])) == [msg, msg]


@pytest.mark.parametrize(
    ("data", "expected"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED]
)
def test_message_codec_refuses_what_decode_refuses(data: bytes, expected: str) -> None:
    with pytest.raises(CodecError, match=expected):
        MC.decode(data)


def _message_level(data: bytes, expected: str) -> bool:
    """Is this malformed input one whose msgpack is sound (the error is in the message)?"""
    if not data or data[0] != VERSION or expected.startswith("malformed"):
        return False
    try:
        msgpack.unpackb(data[1:])
    except Exception:
        return False
    return True


#: The malformed messages that can sit in a batch: the error names their index.
IN_A_BATCH = [m for m in MALFORMED if _message_level(m[1], m[2])]


@pytest.mark.parametrize(
    ("data", "expected"), [m[1:] for m in IN_A_BATCH], ids=[m[0] for m in IN_A_BATCH]
)
def test_a_bad_message_in_a_batch_refuses_the_batch(data: bytes, expected: str) -> None:
    """All or nothing, through both APIs: the error names the message's index."""
    body = _packed([[5, 1, 2, 3], msgpack.unpackb(data[1:])])
    for decode_batch_of in (decode_batch, MC.decode_batch):
        with pytest.raises(CodecError, match="batch message 1: .*" + expected):
            decode_batch_of(body)


@pytest.mark.parametrize(
    ("msg", "expected"), [b[1:] for b in BAD_TO_ENCODE], ids=[b[0] for b in BAD_TO_ENCODE]
)
def test_message_codec_refuses_what_encode_refuses(msg: Any, expected: str) -> None:
    with pytest.raises(CodecError, match=expected):
        MC.encode(msg)
    with pytest.raises(CodecError, match=expected):
        MC.encode_batch([OACK, msg])


def test_message_codec_holds_the_batch_limit() -> None:
    """``len(body) > MESSAGES_PER_BATCH_MAX`` -> ``is`` / ``>=`` in the class's
    ``encode_batch`` and ``decode_batch``: the limit itself is allowed, one more is not."""
    msgs = [OACK] * MESSAGES_PER_BATCH_MAX
    assert len(MC.decode_batch(MC.encode_batch(msgs))) == MESSAGES_PER_BATCH_MAX
    with pytest.raises(CodecError, match="MESSAGES_PER_BATCH_MAX"):
        MC.encode_batch([*msgs, OACK])
    with pytest.raises(CodecError, match="MESSAGES_PER_BATCH_MAX"):
        MC.decode_batch(_packed([[5, 1, 2, 3]] * (MESSAGES_PER_BATCH_MAX + 1)))
    with pytest.raises(CodecError, match="expected a batch array"):
        MC.decode_batch(_packed(3))


@pytest.mark.parametrize("tag", [0, len(MESSAGE_TYPES) - 1])
def test_message_codec_decodes_the_first_and_last_tags(tag: int) -> None:
    """``0 <= tag < count``: the bounds themselves are tags (the first and last class)."""
    msg = next(m for m, _ in GOLDEN if MESSAGE_TYPES.index(type(m)) == tag)
    for decode_with in (decode, MC.decode):
        assert decode_with(encode(msg)) == msg


# ------------------------------------------------------------------ frame limit

#: The frame limit is part of the wire contract: a peer built with another
#: limit would refuse frames this one sends. 16 MiB.
FRAME_LIMIT_BYTES = 16 * 1024 * 1024


def _accept_of_bytes(total: int) -> Message:
    """A C-accept whose encoding is exactly ``total`` bytes."""
    ids = ReplicaId(1), View(2), ReplicaId(3), CIndex(4), Ballot(5)
    base = len(encode(CAccept(*ids, (Command(1, 2, b"x" * 70_000),))))
    return CAccept(*ids, (Command(1, 2, b"x" * (70_000 + total - base)),))


def test_a_frame_of_16_mib_is_the_largest_either_way() -> None:
    """``FRAME_BYTES_MAX = 16 * 1024 * 1024`` with any factor changed, and its two
    ``>`` checks (encode, decode) made ``>=``: 16 MiB crosses, one byte more does not."""
    largest = _accept_of_bytes(FRAME_LIMIT_BYTES)
    data = encode(largest)
    assert len(data) == FRAME_LIMIT_BYTES
    assert decode(data) == largest and MC.decode(data) == largest
    over = _accept_of_bytes(FRAME_LIMIT_BYTES + 1)
    with pytest.raises(CodecError, match="FRAME_BYTES_MAX"):
        encode(over)
    with pytest.raises(CodecError, match="FRAME_BYTES_MAX"):
        MC.encode(over)
    with pytest.raises(CodecError, match="FRAME_BYTES_MAX"):
        decode(data[:-1] + b"xx")  # one byte over, before any unpacking


def test_a_batch_carries_4096_messages_and_an_array_2_20_items() -> None:
    """``MESSAGES_PER_BATCH_MAX = 4096`` and ``ARRAY_ITEMS_MAX = 1 << 20`` with a
    number changed, and ``_check_items``' ``>`` made ``>=``: limits a peer relies
    on (one built with smaller ones would refuse this node's frames)."""
    assert len(decode_batch(encode_batch([OACK] * 4096))) == 4096
    with pytest.raises(CodecError, match="MESSAGES_PER_BATCH_MAX"):
        encode_batch([OACK] * 4097)
    ids = (7,) * (1 << 20)
    full = RRequestBatch(ReplicaId(1), View(2), ids, ())
    assert decode(encode(full)) == full
    with pytest.raises(CodecError, match="ARRAY_ITEMS_MAX"):
        encode(RRequestBatch(ReplicaId(1), View(2), (*ids, 7), ()))
    with pytest.raises(CodecError, match="max_array_len"):
        decode(_packed([22, 1, 2, [*ids, 7], []]))


# ------------------------------------------------------------ malformed input


def test_a_command_of_five_items_is_refused_with_codec_error() -> None:
    """``len(item) == 4`` -> ``>=``: a five-item command must not reach the
    four-item unpacking (its ValueError escaped ``decode`` as not a CodecError)."""
    with pytest.raises(CodecError, match=r"CAccept\.commands"):
        decode(_packed([0, 1, 2, 3, 4, 5, [[1, 2, b"x", b"k", b"extra"]]]))


@pytest.mark.parametrize("tag", [len(MESSAGE_TYPES) + 1, 1000, 2**63])
def test_any_tag_past_the_table_is_unknown(tag: int) -> None:
    """``tag < count`` -> ``!=`` / ``is not``: not only the first tag past the end
    (test_codec's case) but every one is refused with CodecError, not IndexError."""
    for decode_with in (decode, MC.decode):
        with pytest.raises(CodecError, match="unknown message tag"):
            decode_with(_packed([tag, 1, 2, 3]))


def test_an_o_value_is_checked_in_both_places() -> None:
    """``item[0]`` -> ``item[1]`` / ``item[-1]`` in the O-value check: a bad
    first element (a replica id) is refused as surely as a bad second one; and
    ``len(item) != 2`` -> ``>``: a short O-value is a CodecError, not an IndexError."""
    for value in ([True, 1], [b"x", 1], [None, 1], [1], []):
        with pytest.raises(CodecError, match=r"OAccept\.values"):
            decode(_packed([4, 1, 2, 3, [[1, 1], value], 0, False]))
    bad: Any = ((1, 1), (True, 1))
    with pytest.raises(CodecError, match=r"OAccept\.values"):
        encode(OAccept(ReplicaId(1), View(2), Slot(3), bad, Slot(0), False))


def test_an_empty_string_is_no_bytes() -> None:
    """``raw=False`` -> ``True``: msgpack would hand a str over as bytes, and an
    empty one gets past ``max_str_len=0``; a str is never a key or a payload."""
    for decode_with in (decode, MC.decode):
        with pytest.raises(CodecError, match=r"RRequest\.key"):
            decode_with(_packed([15, 1, 4, 77, ""]))
        with pytest.raises(CodecError, match=r"CAccept\.commands"):
            decode_with(_packed([0, 1, 2, 3, 4, 5, [[1, 2, ""]]]))


def test_an_extension_value_of_any_length_is_malformed_msgpack() -> None:
    """``max_ext_len=0`` -> 1: no extension type is part of the format, however
    short (an empty one passes msgpack and is refused by the field's type check)."""
    with pytest.raises(CodecError, match="malformed msgpack"):
        decode(_packed([5, 1, 2, msgpack.ExtType(1, b"a")]))
    with pytest.raises(CodecError, match=r"OAck\.upto"):
        decode(_packed([5, 1, 2, msgpack.ExtType(1, b"")]))


@dataclasses.dataclass(frozen=True, slots=True)
class _Triples:
    """A message of a protocol that carries arrays of 3- and 4-int arrays: the
    two table entries no SDPaxos or baseline message uses today."""

    src: int
    triples: tuple[tuple[int, int, int], ...]
    quads: tuple[tuple[int, int, int, int], ...]


def test_arrays_of_3_and_4_int_arrays_cross_and_other_arities_do_not() -> None:
    """``_int_tuples_codec(3)`` / ``(4)`` with the number changed, and its arity
    checks' ``!=`` made ``<``: a protocol's message with such fields round-trips,
    and an entry shorter or longer is refused both ways (an encoder that took a
    longer one would send what the decoder refuses)."""
    mc = MessageCodec((_Triples,))
    msg = _Triples(1, ((1, 2, 3), (4, 5, 6)), ((1, 2, 3, 4),))
    assert mc.decode(mc.encode(msg)) == msg
    wrong: list[tuple[Any, Any]] = [
        (((1, 2),), ()),
        (((1, 2, 3, 4),), ()),
        ((), ((1, 2, 3),)),
        ((), ((1, 2, 3, 4, 5),)),
    ]
    for bad in (_Triples(1, triples, quads) for triples, quads in wrong):
        with pytest.raises(CodecError, match="_Triples"):
            mc.encode(bad)
    with pytest.raises(CodecError, match=r"_Triples\.triples"):
        mc.decode(_packed([0, 1, [[1, 2, 3, 4]], []]))
    with pytest.raises(CodecError, match=r"_Triples\.quads"):
        mc.decode(_packed([0, 1, [], [[1, 2, 3, 4, 5]]]))


# --------------------------------------------------------------- error messages


def test_a_wrong_arity_says_how_many_fields_came() -> None:
    """``len(items) - 1`` -> ``^ 1``: the count in the error is the fields sent
    (an even-length array tells the two apart)."""
    with pytest.raises(CodecError, match=r"has 5 fields, got 3$"):
        decode(_packed([1, 1, 2, 3]))


def test_an_error_shows_at_most_80_characters_of_the_bad_value() -> None:
    """``len(text) > _REPR_CHARS_MAX`` with any other comparison (or ``not``), and
    the cut's numbers: a peer's bad value shows in the error (and so in a log
    line) cut to 80 characters ending in ``...``; one of 80 characters or fewer
    shows whole."""
    huge = b"y" * 10_000
    with pytest.raises(CodecError) as info:
        decode(_packed([1, 1, 2, huge, 4, 5]))
    shown = str(info.value).split("bytes ", 1)[1]
    assert shown == repr(huge)[:77] + "..."
    for whole in (b"z" * (80 - 3), b"x"):  # reprs of 80 and 4 characters
        with pytest.raises(CodecError) as info:
            decode(_packed([1, 1, 2, whole, 4, 5]))
        assert str(info.value).endswith("bytes " + repr(whole))


def test_a_wrong_version_names_the_byte_that_came() -> None:
    """``data[0]`` -> ``data[1]`` / ``data[-1]`` in the message: an operator
    reading the log learns which version the peer speaks."""
    with pytest.raises(CodecError, match=r"^unsupported wire version 7 \(expected 1\)$"):
        decode(b"\x07" + encode(OACK)[1:])
