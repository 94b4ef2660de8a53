"""Every replication protocol this package can run, by name, and what each can do.

Why: the benchmarks compare SDPaxos with Multi-Paxos, Mencius and EPaxos on the
same simulator, runtime, emulator and kv-store (the paper's evaluation, section
5 of the paper). Each protocol is a pure core with the driving API of
:class:`CoreReplica` and a table of message classes the wire format carries
(:class:`~sdpaxos.wire.codec.MessageCodec`). Whoever runs replicas asks this
module for a :class:`ProtocolSpec` by name and never imports a baseline itself.

What differs between the protocols beyond that API is declared here, in each
entry's :class:`Capabilities`, so that the runtime asks the entry instead of
probing the replica or testing the protocol's name (a test holds the runtime
to it: no protocol name stands as a literal in :mod:`sdpaxos.runtime`).

The baselines live in :mod:`sdpaxos.baselines` and are imported on first use,
so running SDPaxos never pays for them.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

from sdpaxos.core.app import StateMachine
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.messages import MESSAGE_TYPES
from sdpaxos.core.ready import Ready
from sdpaxos.core.replica import Replica
from sdpaxos.core.storage import Record, Snapshot
from sdpaxos.core.types import Command, ReplicaId, Wait
from sdpaxos.wire import codec as _sdpaxos_codec
from sdpaxos.wire.codec import MessageCodec, PackedMessages

__all__ = [
    "DEFAULT_PROTOCOL",
    "PROTOCOL_NAMES",
    "Capabilities",
    "CoreReplica",
    "CounterNames",
    "MakeReplica",
    "ProtocolError",
    "ProtocolSpec",
    "StartReplica",
    "Tracer",
    "protocol",
]


class CoreReplica(Protocol):
    """What a runner needs of any protocol's replica: the driving API of
    :class:`~sdpaxos.core.replica.Replica`.

    A command proposed with ``Wait.EXECUTED`` is answered once, EXECUTED with
    its result, never READY first: the runner hands each reply to whoever waits
    for that ``(client_id, seq)`` and forgets the wait (every protocol's core
    keeps that contract; each protocol's runtime test submits with
    ``wait="executed"`` and checks the results).

    The status fields are None where a protocol has no such thing (Mencius has
    no view, no sequencer and no lease; EPaxos has no executed prefix):
    ``proposals_waiting`` None means the runner cannot see the proposal queue,
    and the core's :class:`~sdpaxos.core.errors.Overloaded` refuses what does
    not fit. What a replica can do beyond this API is in :class:`Capabilities`.
    """

    def propose(self, command: Command, wait: Wait = ...) -> None: ...
    def step(self, message: Any, now_ms: float) -> None: ...
    def tick(self, now_ms: float) -> None: ...
    def ready(self) -> Ready: ...
    def read(self, read_id: int, key: bytes | None, now_ms: float) -> None: ...
    def observe_rtt(self, peer: ReplicaId, rtt_ms: float) -> None: ...
    def status(self) -> Any: ...
    def has_lease(self) -> bool | None: ...

    @property
    def stats(self) -> Any: ...
    @property
    def executed_upto(self) -> int | None: ...
    @property
    def proposals_waiting(self) -> int | None: ...
    @property
    def view(self) -> int | None: ...
    @property
    def sequencer(self) -> int | None: ...
    @property
    def is_sequencer(self) -> bool | None: ...


#: ``(config, replica_id, state_machine, rng, observe, records) -> replica``:
#: the same signature as the simulator's ``ReplicaFactory``. ``records`` are
#: what the replica persisted before a restart (``None`` on a first start).
MakeReplica = Callable[
    [ClusterConfig, int, StateMachine, random.Random, bool, list[Record] | None], Any
]

#: A core's trace hook: ``(event, replica_id, fields)`` (``tla/README.md``).
Tracer = Callable[[str, ReplicaId, dict[str, Any]], None]

#: ``(config, replica_id, state_machine, rng, records, snapshot, tracer) ->
#: replica``: a replica rebuilt from what a durable log holds, for a runner.
#: A protocol without snapshots refuses one (:class:`ProtocolError`); one
#: without a tracer is never given one (:attr:`Capabilities.tracer`).
StartReplica = Callable[
    [
        ClusterConfig,
        ReplicaId,
        StateMachine,
        random.Random,
        list[Record],
        Snapshot | None,
        Tracer | None,
    ],
    CoreReplica,
]


@dataclass(frozen=True, slots=True)
class CounterNames:
    """Which of a core's counters (its ``stats``) stand for the runtime's
    metrics: a protocol without one names its nearest (a leader election for a
    view change, a revocation for a C-recovery, executed commands for ready
    ones), or None for none (the metric stays 0)."""

    view_changes: str | None
    recoveries: str | None
    ready: str


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a protocol's replica does beyond :class:`CoreReplica`, declared."""

    #: ``request_snapshot()``, a restart from a snapshot, ``status().snapshot_slot``.
    snapshots: bool = False
    #: ``transfer_sequencer(target)`` (the ``transfer_sequencer`` admin operation).
    sequencer_transfer: bool = False
    #: ``read`` serves a linearizable read at every replica (SDPaxos: through
    #: the sequencer's lease, section 3.5). A baseline answers at most at its
    #: leader (Multi-Paxos) or nowhere (Mencius): reads go through the log there.
    reads_at_every_replica: bool = False
    #: The core keeps a session table (expiring sessions, registrations through
    #: the log). EPaxos does not: it remembers every executed ``(client_id,
    #: seq)`` for good, and a registration proposed there would reach the state
    #: machine as an empty command, so a runner answers registrations itself.
    session_table: bool = True
    #: The message field naming the sender (Mencius says ``sender``).
    sender_field: Literal["src", "sender"] = "src"
    #: The core calls a tracer (``tla/README.md``'s events) when given one.
    tracer: bool = False
    #: One replica leads and holds a lease (SDPaxos's sequencer, Multi-Paxos's
    #: leader): its status says ``is_sequencer`` and ``has_lease``, and a
    #: cluster serves at full speed once it holds them (what a benchmark waits
    #: for, and what a failover kills). Mencius and EPaxos have no such replica.
    leader_lease: bool = False
    #: The runtime runs the protocol's replicas as members of a changing
    #: membership (:class:`sdpaxos.core.member.Member`: one replica per epoch,
    #: learners, add/remove/replace; ``docs/membership.md``), and its peers
    #: exchange member messages (:mod:`sdpaxos.wire.members`). The baselines
    #: keep their fixed set of replicas.
    membership: bool = False


class ProtocolError(ValueError):
    """An unknown protocol name, or a baseline module that does not define one."""


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """One protocol: how to build a replica, how its messages travel, what it can do."""

    name: str
    title: str
    make_replica: MakeReplica
    message_types: tuple[type, ...]
    codec: MessageCodec = field(repr=False, compare=False)
    #: A replica rebuilt from a durable log (see :data:`StartReplica`).
    start_replica: StartReplica = field(repr=False, compare=False)
    #: Durable record classes of the protocol's own, beyond the shared ones of
    #: :data:`sdpaxos.wire.records.RECORD_TYPES` (the runtime's log appends
    #: them to that table: :class:`sdpaxos.wire.records.RecordCodec`).
    record_types: tuple[type, ...] = ()
    capabilities: Capabilities = Capabilities()
    counters: CounterNames = CounterNames(None, None, "commands_executed")
    #: ``(messages, packed) -> frame`` and ``frame -> messages``: the codec's
    #: batch functions (SDPaxos's are the module's own, its fast path).
    encode_batch: Callable[[list[Any], PackedMessages], bytes] | None = field(
        default=None, repr=False, compare=False
    )
    decode_batch: Callable[[bytes], list[Any]] | None = field(
        default=None, repr=False, compare=False
    )
    #: What a node of this protocol names in its hello (None: nothing, as
    #: SDPaxos nodes said before there was a choice; a hello without a name is
    #: :data:`DEFAULT_PROTOCOL`'s).
    hello_name: str | None = None

    def request_snapshot(self, replica: CoreReplica) -> None:
        """Ask ``replica`` for a snapshot (:attr:`Capabilities.snapshots` only)."""
        if not self.capabilities.snapshots:
            raise ProtocolError(f"{self.title} has no snapshots")
        cast(Replica, replica).request_snapshot()

    def transfer_sequencer(self, replica: CoreReplica, target: ReplicaId) -> None:
        """Move the sequencer role (:attr:`Capabilities.sequencer_transfer` only)."""
        if not self.capabilities.sequencer_transfer:
            raise ProtocolError(f"{self.title} has no sequencer to transfer")
        cast(Replica, replica).transfer_sequencer(target)

    def batch_encoder(self) -> Callable[[list[Any], PackedMessages], bytes]:
        return self.encode_batch if self.encode_batch is not None else self.codec.encode_batch

    def batch_decoder(self) -> Callable[[bytes], list[Any]]:
        return self.decode_batch if self.decode_batch is not None else self.codec.decode_batch


#: The protocol a cluster runs when its file names none, and the one whose
#: nodes say hello without a name.
DEFAULT_PROTOCOL = "sdpaxos"

#: Module of each baseline; it defines ``MESSAGE_TYPES`` (append-only tuple of
#: message classes), ``make_replica`` (a :data:`MakeReplica`) and ``TITLE``,
#: and ``RECORD_TYPES`` if it persists records of its own. What it can do
#: beyond the driving API is declared in :data:`_BASELINE_ENTRIES`.
_BASELINE_MODULES = {
    "multipaxos": "sdpaxos.baselines.multipaxos",
    "mencius": "sdpaxos.baselines.mencius",
    "epaxos": "sdpaxos.baselines.epaxos",
}

#: Each baseline's capabilities and counters (the modules cannot import this one).
_BASELINE_ENTRIES: dict[str, tuple[Capabilities, CounterNames]] = {
    "multipaxos": (
        Capabilities(leader_lease=True),
        CounterNames("elections_started", None, "commands_executed"),
    ),
    "mencius": (
        Capabilities(sender_field="sender"),
        CounterNames(None, "revocations", "commands_executed"),
    ),
    "epaxos": (
        Capabilities(session_table=False),
        CounterNames(None, None, "commands_ready"),
    ),
}

#: Every protocol name :func:`protocol` accepts, SDPaxos first.
PROTOCOL_NAMES: tuple[str, ...] = (DEFAULT_PROTOCOL, *_BASELINE_MODULES)


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


def _start_sdpaxos(
    config: ClusterConfig,
    replica_id: ReplicaId,
    state_machine: StateMachine,
    rng: random.Random,
    records: list[Record],
    snapshot: Snapshot | None,
    tracer: Tracer | None,
) -> CoreReplica:
    return Replica(
        config,
        replica_id,
        state_machine,
        rng=rng,
        records=records,
        snapshot=snapshot,
        tracer=tracer,
    )


def _starter(title: str, make: MakeReplica) -> StartReplica:
    """A baseline's :data:`StartReplica`: its factory, refusing a snapshot."""

    def start(
        config: ClusterConfig,
        replica_id: ReplicaId,
        state_machine: StateMachine,
        rng: random.Random,
        records: list[Record],
        snapshot: Snapshot | None,
        tracer: Tracer | None,
    ) -> CoreReplica:
        if snapshot is not None:
            raise ProtocolError(f"a snapshot, which {title} cannot use")
        replica: CoreReplica = make(config, replica_id, state_machine, rng, False, records or None)
        return replica

    return start


_CACHE: dict[str, ProtocolSpec] = {}


def protocol(name: str) -> ProtocolSpec:
    """The protocol called ``name`` (one of :data:`PROTOCOL_NAMES`).

    Raises :class:`ProtocolError` naming the choices for any other name.
    """
    spec = _CACHE.get(name)
    if spec is not None:
        return spec
    if name == DEFAULT_PROTOCOL:
        spec = ProtocolSpec(
            DEFAULT_PROTOCOL,
            "SDPaxos",
            _make_sdpaxos,
            MESSAGE_TYPES,
            MessageCodec(MESSAGE_TYPES),
            _start_sdpaxos,
            capabilities=Capabilities(
                snapshots=True,
                sequencer_transfer=True,
                reads_at_every_replica=True,
                tracer=True,
                leader_lease=True,
                membership=True,
            ),
            counters=CounterNames("view_changes_started", "c_recoveries_started", "commands_ready"),
            encode_batch=_sdpaxos_codec.encode_batch,
            decode_batch=_sdpaxos_codec.decode_batch,
            hello_name=None,
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
        capabilities, counters = _BASELINE_ENTRIES[name]
        spec = ProtocolSpec(
            name,
            title,
            make,
            types,
            MessageCodec(types),
            _starter(title, make),
            records,
            capabilities=capabilities,
            counters=counters,
            hello_name=name,
        )
    else:
        raise ProtocolError(f"unknown protocol {name!r}; choose one of {', '.join(PROTOCOL_NAMES)}")
    _CACHE[name] = spec
    return spec
