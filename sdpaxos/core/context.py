"""What every role of a replica shares: who it is, its clock, logs and outbox.

A role owns its own state and reads the shared pieces here; it changes them only
through their methods, or as the comment of the field says. Roles never hold one
another: what one role needs another to do goes through
:class:`~sdpaxos.core.reactions.Reactions`, which the facade's
:class:`~sdpaxos.core.router.Router` implements.
"""

import math
import random
from dataclasses import dataclass

from sdpaxos.core.clog import CLog
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.olog import OLog
from sdpaxos.core.outbox import Outbox
from sdpaxos.core.proximity import Proximity
from sdpaxos.core.types import CIndex, ReplicaId, Slot
from sdpaxos.core.views import ViewState


@dataclass(slots=True)
class Stats:
    """Counters for observability; never consulted by the protocol."""

    steps: int = 0
    rejected: int = 0
    stale: int = 0
    c_instances_started: int = 0
    o_instances_allocated: int = 0
    commands_ready: int = 0
    commands_executed: int = 0
    retransmissions: int = 0
    learn_requests: int = 0
    view_changes_started: int = 0
    views_won: int = 0
    c_recoveries_started: int = 0
    c_instances_recovered: int = 0
    reads_served: int = 0
    reads_refused: int = 0
    snapshots_taken: int = 0
    snapshots_installed: int = 0
    #: Installs while this replica followed no sequencer (in a view change).
    snapshots_installed_in_view_change: int = 0
    snapshots_offered: int = 0
    #: Client sessions expired (by lifetime or by the table's size), and commands
    #: not applied because their session had expired.
    sessions_expired: int = 0
    commands_session_expired: int = 0
    #: Messages that would have revoked an executed slot, and reports that
    #: contradict a protocol invariant in a view change. Must stay 0: a non-zero
    #: value is a protocol bug, surfaced without crashing the node.
    invariant_alarms: int = 0


class Progress:
    """How far execution got (the executor writes it; everyone reads it).

    Slots below ``slot`` are executed; in slot ``slot``, the first ``in_slot``
    C-instances are; ``count[owner]`` C-instances of each owner are. The learner
    and recovery read when it last moved and what it waits on, to decide when to
    ask peers and when to recover a C-instance.
    """

    __slots__ = ("blocked", "blocked_ms", "count", "dirty", "in_slot", "moved_ms", "slot", "stop")

    def __init__(self, replicas: int) -> None:
        self.slot = Slot(0)
        self.in_slot = 0
        self.count: list[int] = [0] * replicas
        #: Something that may unblock execution happened: run the executor at
        #: the next ``ready()`` (any role sets it; the executor clears it).
        self.dirty = False
        #: When execution last moved (the executor, or a snapshot installed).
        self.moved_ms = 0.0
        #: The C-instance execution waits on, and since when (the executor;
        #: an installed snapshot clears it).
        self.blocked: tuple[ReplicaId, CIndex] | None = None
        self.blocked_ms = 0.0
        #: The slot of the executed stop, once execution reached it: the epoch
        #: is over and nothing after it runs (``docs/membership.md``).
        self.stop: Slot | None = None

    def executed_end(self) -> Slot:
        """Slots below this are executed here, at least in part (final)."""
        return Slot(self.slot + 1) if self.in_slot else self.slot


class Context:
    """The shared pieces, built once per replica."""

    __slots__ = (
        "accept_quorum",
        "clock_origin_ms",
        "clog",
        "config",
        "majority",
        "me",
        "n",
        "now_ms",
        "olog",
        "out",
        "own_ordered",
        "progress",
        "prox",
        "rng",
        "stats",
        "stop_wanted",
        "views",
    )

    def __init__(
        self, config: ClusterConfig, me: ReplicaId, rng: random.Random, out: Outbox
    ) -> None:
        self.config = config
        self.me = me
        self.n = config.replicas
        self.majority = config.majority
        self.accept_quorum = config.accept_quorum
        self.rng = rng
        self.out = out
        self.stats = Stats()
        #: Milliseconds since the first time the driver gave (:meth:`advance_clock`),
        #: so that every "since" can start at 0 whatever clock the driver uses.
        self.now_ms = 0.0
        #: That first time, in the driver's clock (None: not given yet).
        self.clock_origin_ms: float | None = None
        self.clog = CLog(self.n)
        self.olog = OLog(self.n)
        self.views = ViewState(me, config.sequencer)
        self.prox = Proximity(me, self.n, self.accept_quorum, config.thrifty, config.rtt_ms)
        self.progress = Progress(self.n)
        #: How many of our own C-instances the safe prefix orders (the learner
        #: writes it; the command leader, elections and straggler detection read it).
        self.own_ordered = 0
        #: A membership change is pending in the executed state: the sequencer
        #: allocates the stop (``sdpaxos.core.epochs.request_stop``; ``docs/membership.md``).
        self.stop_wanted = False

    def advance_clock(self, now_ms: float) -> None:
        """The driver's time now: :attr:`now_ms` follows it, never backwards."""
        if type(now_ms) not in (int, float) or not math.isfinite(now_ms):
            raise LocalProtocolError(f"now_ms must be a finite number, got {now_ms!r}")
        if self.clock_origin_ms is None:
            self.clock_origin_ms = now_ms
        now = now_ms - self.clock_origin_ms
        if now > self.now_ms:  # monotonic, whatever the driver passes
            self.now_ms = now

    def jitter_ms(self) -> float:
        """A fresh election jitter (the only randomness the protocol draws)."""
        return self.rng.random() * self.config.election_jitter_ms

    def stalled(self) -> bool:
        """Is there something we know of that we have not executed?"""
        return self.progress.slot < self.olog.heard_upto

    def window_end(self) -> Slot:
        """Slots at or beyond this are refused from peers (``c_index_window_max``)."""
        return Slot(self.progress.slot + self.config.c_index_window_max)
