"""Every replication protocol this package can run, by name.

Why: the benchmarks compare SDPaxos with Multi-Paxos, Mencius and EPaxos on the
same simulator, runtime, emulator and kv-store (the paper's evaluation, section
5 of the paper). Each protocol is a pure core with
the driving API of :class:`sdpaxos.core.replica.Replica` (``propose``, ``step``,
``tick``, ``ready``, ``observe_rtt``; ``read`` where it has a read path) and a
table of message classes the wire format carries
(:class:`~sdpaxos.wire.codec.MessageCodec`). Whoever runs replicas asks this
module for a :class:`ProtocolSpec` by name and never imports a baseline itself.

The baselines live in :mod:`sdpaxos.baselines` and are imported on first use,
so running SDPaxos never pays for them.
"""

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.core.app import StateMachine
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.messages import MESSAGE_TYPES
from sdpaxos.core.replica import Replica
from sdpaxos.core.storage import Record
from sdpaxos.core.types import ReplicaId
from sdpaxos.wire.codec import MessageCodec

__all__ = ["PROTOCOL_NAMES", "MakeReplica", "ProtocolError", "ProtocolSpec", "protocol"]

#: ``(config, replica_id, state_machine, rng, observe, records) -> replica``:
#: the same signature as the simulator's ``ReplicaFactory``. ``records`` are
#: what the replica persisted before a restart (``None`` on a first start).
MakeReplica = Callable[
    [ClusterConfig, int, StateMachine, random.Random, bool, list[Record] | None], Any
]

#: Module of each baseline; it defines ``MESSAGE_TYPES`` (append-only tuple of
#: message classes), ``make_replica`` (a :data:`MakeReplica`) and ``TITLE``,
#: and ``RECORD_TYPES`` if it persists records of its own.
_BASELINE_MODULES = {
    "multipaxos": "sdpaxos.baselines.multipaxos",
    "mencius": "sdpaxos.baselines.mencius",
    "epaxos": "sdpaxos.baselines.epaxos",
}

#: Every protocol name :func:`protocol` accepts, SDPaxos first.
PROTOCOL_NAMES: tuple[str, ...] = ("sdpaxos", *_BASELINE_MODULES)


class ProtocolError(ValueError):
    """An unknown protocol name, or a baseline module that does not define one."""


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """One protocol: how to build a replica and how its messages travel."""

    name: str
    title: str
    make_replica: MakeReplica
    message_types: tuple[type, ...]
    codec: MessageCodec = field(repr=False, compare=False)
    #: Durable record classes of the protocol's own, beyond the shared ones of
    #: :data:`sdpaxos.wire.records.RECORD_TYPES` (the runtime's log appends
    #: them to that table: :class:`sdpaxos.wire.records.RecordCodec`).
    record_types: tuple[type, ...] = ()


def _make_sdpaxos(
    config: ClusterConfig,
    replica_id: int,
    state_machine: StateMachine,
    rng: random.Random,
    observe: bool,
    records: list[Record] | None,
) -> Replica:
    return Replica(
        config, ReplicaId(replica_id), state_machine, rng=rng, observe=observe, records=records
    )


_CACHE: dict[str, ProtocolSpec] = {}


def protocol(name: str) -> ProtocolSpec:
    """The protocol called ``name`` (one of :data:`PROTOCOL_NAMES`).

    Raises :class:`ProtocolError` naming the choices for any other name.
    """
    spec = _CACHE.get(name)
    if spec is not None:
        return spec
    if name == "sdpaxos":
        spec = ProtocolSpec(
            "sdpaxos", "SDPaxos", _make_sdpaxos, MESSAGE_TYPES, MessageCodec(MESSAGE_TYPES)
        )
    elif name in _BASELINE_MODULES:
        module = importlib.import_module(_BASELINE_MODULES[name])
        try:
            types: tuple[type, ...] = module.MESSAGE_TYPES
            make: MakeReplica = module.make_replica
            title: str = module.TITLE
        except AttributeError as exc:
            raise ProtocolError(f"{module.__name__} does not define a protocol: {exc}") from exc
        records: tuple[type, ...] = getattr(module, "RECORD_TYPES", ())
        spec = ProtocolSpec(name, title, make, types, MessageCodec(types), records)
    else:
        raise ProtocolError(f"unknown protocol {name!r}; choose one of {', '.join(PROTOCOL_NAMES)}")
    _CACHE[name] = spec
    return spec
