"""Where a replica stands in the succession of views (paper section 3.3).

A replica is in one of three *view phases*, and only three events move it:

==============  =====================================  ==========================
event           what happens                            phase after
==============  =====================================  ==========================
``VOTE``        it promises a higher view to a          ``PROMISED``: no sequencer
                candidate (``HandleVRequest``)          until a range arrives
``ESTABLISH``   it accepts a view's whole rebuilt       ``FOLLOWING`` that view's
                range or its NewView (``Establish``)    sequencer
``WIN``         a majority voted for it                 ``LEADING``: it sequences
                (``BecomeSequencer``)
``RESTART``     it replays its records (``Restart``)    ``FOLLOWING`` if it had
                                                        established its promised
                                                        view under another
                                                        sequencer, else ``PROMISED``
==============  =====================================  ==========================

:data:`TRANSITIONS` is that table as data; :class:`ViewState` refuses any move
it does not list. The sequencer is derived from the phase (``None`` while
``PROMISED``), never stored beside it.
"""

from enum import Enum

from sdpaxos.core.errors import InvariantViolation
from sdpaxos.core.messages import NewView
from sdpaxos.core.types import ReplicaId, Slot, View


class ViewPhase(Enum):
    FOLLOWING = "following"
    LEADING = "leading"
    PROMISED = "promised"


class ViewEvent(Enum):
    VOTE = "vote"
    ESTABLISH = "establish"
    WIN = "win"
    RESTART_FOLLOWING = "restart-following"
    RESTART_PROMISED = "restart-promised"


_ANY = frozenset(ViewPhase)

#: event -> (phases it may happen in, phase after it).
TRANSITIONS: dict[ViewEvent, tuple[frozenset[ViewPhase], ViewPhase]] = {
    # A sequencer votes only while handing its role over; anyone else may vote.
    ViewEvent.VOTE: (_ANY, ViewPhase.PROMISED),
    # A deposed sequencer establishes its successor's view like anyone else.
    ViewEvent.ESTABLISH: (_ANY, ViewPhase.FOLLOWING),
    # A candidate may still follow the old sequencer, or have voted, or be a
    # sequencer re-running the election above a view that got none.
    ViewEvent.WIN: (_ANY, ViewPhase.LEADING),
    # Restart starts from the configuration's view 0 (``FOLLOWING`` or ``LEADING``).
    ViewEvent.RESTART_FOLLOWING: (
        frozenset({ViewPhase.FOLLOWING, ViewPhase.LEADING}),
        ViewPhase.FOLLOWING,
    ),
    ViewEvent.RESTART_PROMISED: (
        frozenset({ViewPhase.FOLLOWING, ViewPhase.LEADING}),
        ViewPhase.PROMISED,
    ),
}


class ViewState:
    """The promised view, the established view, and trust in the sequencer.

    ``view`` is the promised view: messages of older views are dropped. The
    *established* view ``(est_view, est_seq, est_start, est_base)`` is the newest
    whose whole rebuilt range ``[est_start, est_base)`` this replica accepted; it
    is what votes report. View 0 is established by the configuration, with an
    empty range.
    """

    __slots__ = (
        "distrust",
        "distrusted",
        "distrusted_ms",
        "est_base",
        "est_seq",
        "est_start",
        "est_view",
        "handing_over",
        "keys_wanted",
        "me",
        "new_view",
        "phase",
        "range_committed",
        "view",
    )

    def __init__(self, me: ReplicaId, sequencer: ReplicaId) -> None:
        self.me = me
        self.view = View(0)
        self.phase = ViewPhase.LEADING if sequencer == me else ViewPhase.FOLLOWING
        self.est_view = View(0)
        self.est_seq: ReplicaId = sequencer
        self.est_start = Slot(0)
        self.est_base = Slot(0)
        #: Established in ``view``: the view's range is known to be chosen.
        self.range_committed = True
        #: We stopped trusting the sequencer (straggler or hand-over): its
        #: heartbeats no longer renew our lease nor hold back our vote.
        self.distrust = False
        #: The sequencer we last distrusted, and when (or when we last voted for
        #: another candidate since): it gets no vote from us for a while, even
        #: after we voted for its successor and so stopped following it
        #: (``Election.refuses``). Until we establish a view.
        self.distrusted: ReplicaId | None = None
        self.distrusted_ms = 0.0
        #: Sequencer only: the replica it is handing its role to.
        self.handing_over: ReplicaId | None = None
        #: The NewView of ``view`` once its range is chosen (resent to stragglers).
        self.new_view: NewView | None = None
        #: The sequencer keeps its history table: our C-requests carry their
        #: keys (``Heartbeat.keys_wanted``; until its first heartbeat, yes).
        self.keys_wanted = True

    @property
    def sequencer(self) -> ReplicaId | None:
        """The sequencer of ``view``, or None while no range of it is accepted here."""
        return None if self.phase is ViewPhase.PROMISED else self.est_seq

    @property
    def is_sequencer(self) -> bool:
        return self.phase is ViewPhase.LEADING

    @property
    def established(self) -> bool:
        """This replica accepted the promised view's whole range."""
        return self.est_view == self.view

    def move(self, event: ViewEvent) -> None:
        allowed, after = TRANSITIONS[event]
        if self.phase not in allowed:
            raise InvariantViolation(f"view event {event.value} in phase {self.phase.value}")
        self.phase = after

    def establish(self, view: View, sequencer: ReplicaId, start: Slot, base: Slot) -> None:
        """Adopt ``view``: its range ``[start, base)`` is accepted here."""
        self.view = self.est_view = view
        self.est_seq, self.est_start, self.est_base = sequencer, start, base
        self.move(ViewEvent.WIN if sequencer == self.me else ViewEvent.ESTABLISH)
        self.range_committed = False
        self.distrust = False
        self.distrusted = None
        self.handing_over = None
        self.new_view = None
        self.keys_wanted = True
