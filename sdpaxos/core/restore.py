"""Restart: rebuild a replica from its durable records (Ongaro's Restart: keep only these).

:func:`replay` fills the C-logs and the assignment log from the records and
returns what the rest of the replica needs (the promised and established views,
the next own C-instance index); :func:`resume` sets the views and the assignment
log's prefixes from it, and the facade hands the rest to the roles. What the
records do not hold is volatile by design (``docs/recovery.md`` section 5): a
replica that was the sequencer restarts without a sequencer and a view change
rebuilds what matters from durable votes.
"""

from dataclasses import dataclass

from sdpaxos.core.clog import CLog
from sdpaxos.core.errors import LocalProtocolError
from sdpaxos.core.olog import NOT_ESTABLISHED, OLog
from sdpaxos.core.storage import (
    CAccepted,
    CPromised,
    OAccepted,
    Record,
    ViewEstablished,
    ViewPromised,
)
from sdpaxos.core.types import Ballot, CIndex, OValue, ReplicaId, Slot, View
from sdpaxos.core.views import ViewEvent, ViewState


@dataclass(frozen=True, slots=True)
class Replayed:
    """What the records say beyond the logs themselves."""

    promised: View
    est_view: View
    est_seq: ReplicaId
    est_start: Slot
    est_base: Slot
    #: The index the next own C-instance gets (never one already used).
    next_index: CIndex


def replay(
    records: list[Record],
    me: ReplicaId,
    own_ballot: Ballot,
    sequencer: ReplicaId,
    clog: CLog,
    olog: OLog,
) -> Replayed:
    """Apply ``records`` in order to ``clog`` and ``olog``."""
    promised = View(0)
    next_index = CIndex(0)
    est: tuple[View, ReplicaId, Slot, Slot] = (View(0), sequencer, Slot(0), Slot(0))
    for rec in records:
        if isinstance(rec, CAccepted):
            inst = clog.entry(rec.owner, rec.index)
            if rec.ballot >= inst.ballot:
                inst.ballot = rec.ballot
                inst.commands = rec.commands
            inst.promised = max(inst.promised, rec.ballot)
            clog.c_max[rec.owner] = max(clog.c_max[rec.owner], rec.index)
            if rec.owner == me and rec.ballot == own_ballot:
                next_index = max(next_index, CIndex(rec.index + 1))
        elif isinstance(rec, CPromised):
            inst = clog.entry(rec.owner, rec.index)
            inst.promised = max(inst.promised, rec.ballot)
        elif isinstance(rec, OAccepted):
            _replay_o(olog, rec.view, rec.start, rec.values)
            promised = max(promised, rec.view)
        elif isinstance(rec, ViewEstablished):
            _replay_o(olog, rec.view, rec.start, rec.values)
            if rec.view >= est[0]:
                est = (rec.view, rec.sequencer, rec.start, rec.base)
            promised = max(promised, rec.view)
        elif isinstance(rec, ViewPromised):
            promised = max(promised, rec.view)
        else:
            raise LocalProtocolError(f"unknown durable record {rec!r}")
    return Replayed(promised, *est, next_index)


def resume(rp: Replayed, me: ReplicaId, views: ViewState, olog: OLog) -> None:
    """Take up the views the records say, and the assignment log's prefixes."""
    views.view = rp.promised
    views.est_view, views.est_seq = rp.est_view, rp.est_seq
    views.est_start, views.est_base = rp.est_start, rp.est_base
    views.range_committed = False
    if rp.est_view == rp.promised and rp.est_seq != me:
        views.move(ViewEvent.RESTART_FOLLOWING)
        olog.acc_upto = rp.est_base
        olog.acc_upto = olog.accepted_run_end(rp.promised)
    else:
        # Voted in a view we never established, or we were its sequencer:
        # every allocation we sent is durable (OAccepted is persisted before
        # the O-accepts leave), but the rest of a sequencer's state is
        # volatile (the allocation guard's wants, what each peer was sent and
        # acknowledged, whether the range is chosen, the history table reads
        # rely on, its lease). A view change rebuilds what matters from
        # durable votes (docs/recovery.md section 5).
        views.move(ViewEvent.RESTART_PROMISED)
        olog.acc_upto = NOT_ESTABLISHED
    olog.heard_upto = Slot(len(olog))
    olog.known_upto = max(olog.known_upto, olog.base)


def _replay_o(olog: OLog, ballot: View, start: Slot, values: tuple[OValue, ...]) -> None:
    olog.grow(start + len(values))
    owners, counts, ballots = olog.owner, olog.count, olog.ballot
    b = olog.base
    for k, (owner, count) in enumerate(values):
        slot = start + k - b
        if slot < 0:
            continue  # below the snapshot the replica restarts from
        if ballot >= ballots[slot]:
            owners[slot], counts[slot] = owner, count
            ballots[slot] = ballot
