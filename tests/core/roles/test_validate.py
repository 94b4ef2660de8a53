"""validate.py: every check refuses its bad message with a clear reason.

One case per ``raise`` in ``sdpaxos/core/validate.py`` (each was found to have no
test by deleting the raise and running the core tests), plus the well-formed
message next to it, which must pass. The replica-level tests check that a refused
message changes nothing (``tests/core/test_rules.py``).
"""

from typing import Any

import pytest

from sdpaxos.core import validate
from sdpaxos.core.context import Context
from sdpaxos.core.errors import PeerMessageError
from sdpaxos.core.messages import (
    CAccept,
    CAck,
    CCommit,
    CPrepare,
    CPromise,
    CRequest,
    Heartbeat,
    LearnRequest,
    NewView,
    OAccept,
    OAck,
    OCommit,
    RReply,
    RReplyBatch,
    RRequest,
    RRequestBatch,
    SequencerHandover,
    StragglerPoll,
    StragglerVote,
    Vote,
    VRequest,
)
from sdpaxos.core.types import Command
from tests.core.roles.conftest import committed_instance, make_ctx

#: A small window, so that "too many" and "beyond the window" are easy to reach.
WINDOW = 1024


def follower() -> Context:
    """Replica 1 of 3, following sequencer 0 in view 0; slots 0-1 executed."""
    ctx = make_ctx(3, me=1, sequencer=0, c_index_window_max=WINDOW)
    olog = ctx.olog
    olog.grow(3)
    olog.owner[:3], olog.count[:3], olog.ballot[:3] = [1, 2, 2], [1, 1, 1], [0, 0, 0]
    olog.committed[:2] = [True, True]
    olog.acc_upto = 3
    ctx.progress.slot = 2
    ctx.clog.logs[1][0] = committed_instance((Command(1, 1, b"x"),))
    return ctx


def sequencer() -> Context:
    return make_ctx(3, me=0, sequencer=0, c_index_window_max=WINDOW)


def ok_vote(**change: Any) -> Vote:
    fields = dict(
        src=2,
        view=1,
        o_from=0,
        entries=((0, 0, 1, 1),),
        c_max=(-1, 0, -1),
        est_view=0,
        est_seq=0,
        est_base=0,
        executed=0,
    )
    fields.update(change)
    return Vote(**fields)  # type: ignore[arg-type]


def ok_promise(**change: Any) -> CPromise:
    fields = dict(
        src=2,
        view=0,
        owner=1,
        start=0,
        ballot=257,
        ok=True,
        promised=257,
        ballots=(-1,),
        values=(None,),
        committed=(False,),
    )
    fields.update(change)
    return CPromise(**fields)  # type: ignore[arg-type]


BIG = 10**6
#: (what, replica, bad message, words the refusal must contain, a good message or None)
CASES: list[tuple[str, Any, Any, str, Any]] = [
    (
        "O-value not a pair",
        follower,
        OAccept(0, 0, 3, ((1,),), 0, False),
        "bad O-value",
        OAccept(0, 0, 3, ((1, 1),), 0, False),
    ),
    (
        "no-cl with a count",
        follower,
        OAccept(0, 0, 3, ((-1, 2),), 0, False),
        "no-cl with count",
        OAccept(0, 0, 3, ((-1, 0),), 0, False),
    ),
    ("O-value owner", follower, OAccept(0, 0, 3, ((7, 1),), 0, False), "bad O-value owner", None),
    (
        "C-accept ballot",
        follower,
        CAccept(2, 0, 2, 0, -5, ()),
        "bad ballot",
        CAccept(2, 0, 2, 0, 2, ()),
    ),
    (
        "C-accept too big",
        follower,
        CAccept(2, 0, 2, 0, 2, (Command(1, 1, b""),) * 300),
        "too many commands",
        None,
    ),
    (
        "C-accept changes a chosen value",
        follower,
        CAccept(0, 0, 1, 0, 1, (Command(9, 9, b"y"),)),
        "chosen C-instance",
        CAccept(0, 0, 1, 0, 1, (Command(1, 1, b"x"),)),
    ),
    (
        "C-instance owner",
        follower,
        CAck(2, 0, 7, 0, 0),
        "bad C-instance owner",
        CAck(2, 0, 1, 0, 0),
    ),
    ("C-instance index", follower, CAck(2, 0, 1, -1, 0), "bad C-instance index", None),
    ("C-instance window", follower, CAck(2, 0, 1, BIG, 0), "beyond the window", None),
    (
        "C-commit too big",
        follower,
        CCommit(2, 0, 2, 0, 2, (Command(1, 1, b""),) * 300),
        "too many commands",
        CCommit(2, 0, 2, 0, 2, None),
    ),
    (
        "C-request to a non-sequencer",
        follower,
        CRequest(2, 0, 2, 0, 0, ()),
        "not the sequencer",
        None,
    ),
    (
        "C-request for another",
        sequencer,
        CRequest(2, 0, 1, 0, 0, ()),
        "another replica",
        CRequest(2, 0, 2, 0, 0, ()),
    ),
    ("C-request upto", sequencer, CRequest(2, 0, 2, 0, 5, ()), "bad o_accepted_upto", None),
    (
        "C-request keys",
        sequencer,
        CRequest(2, 0, 2, 0, 0, ("k",)),
        "bad C-request keys",
        CRequest(2, 0, 2, 0, 0, (b"k",)),
    ),
    ("O-accept start", follower, OAccept(0, 0, -1, (), 0, False), "bad O-accept start", None),
    ("O-accept range flag", follower, OAccept(0, 0, 3, (), 0, 1), "range flag", None),
    (
        "O-accept too many",
        follower,
        OAccept(0, 0, 3, ((1, 1),) * 5000, 0, False),
        "too many values",
        None,
    ),
    (
        "range not whole",
        follower,
        OAccept(0, 1, 3, ((1, 1),), 9, True),
        "whole range",
        OAccept(0, 1, 3, ((1, 1),), 4, True),
    ),
    (
        "O-accept window",
        follower,
        OAccept(0, 0, BIG, ((1, 1),), 0, False),
        "beyond the window",
        None,
    ),
    ("O-accept base", follower, OAccept(0, 0, 3, ((1, 1),), 2, False), "says base", None),
    (
        "O-accept not from the sequencer",
        follower,
        OAccept(2, 0, 3, ((1, 1),), 0, False),
        "not the sequencer",
        None,
    ),
    (
        "O-accept revokes an executed slot",
        follower,
        OAccept(0, 0, 0, ((2, 1),), 0, False),
        "revoke executed slot",
        OAccept(0, 0, 0, ((1, 1),), 0, False),
    ),
    (
        "O-accept conflicts at one ballot",
        follower,
        OAccept(0, 0, 2, ((1, 1),), 0, False),
        "already holds",
        OAccept(0, 0, 2, ((2, 1),), 0, False),
    ),
    ("O-ACK window", follower, OAck(2, 0, BIG), "beyond the window", OAck(2, 0, 3)),
    ("O-ACK beyond the sequencer", sequencer, OAck(2, 0, 1), "sequencer's own log", OAck(2, 0, 0)),
    (
        "O-commit too many",
        follower,
        OCommit(0, 0, ((2, 0, 1, 1),) * 5000),
        "too many entries",
        None,
    ),
    (
        "O-commit entry shape",
        follower,
        OCommit(0, 0, ((2, 0, 1),)),
        "bad O-commit entry",
        OCommit(0, 0, ((2, 0, 2, 1),)),
    ),
    ("O-commit slot", follower, OCommit(0, 0, ((-2, 0, 1, 1),)), "bad O-commit slot", None),
    ("O-commit ballot", follower, OCommit(0, 0, ((2, 3, 1, 1),)), "bad O-commit ballot", None),
    (
        "O-commit revokes",
        follower,
        OCommit(0, 0, ((0, 0, 2, 1),)),
        "revoke executed slot",
        OCommit(0, 0, ((0, 0, 1, 1),)),
    ),
    (
        "O-commit conflicts at one ballot",
        follower,
        OCommit(0, 0, ((2, 0, 1, 1),)),
        "O-commit says",
        None,
    ),
    ("O-commit window", follower, OCommit(0, 0, ((BIG, 0, 1, 1),)), "beyond the window", None),
    (
        "learn request o_from",
        follower,
        LearnRequest(2, 0, -3, ()),
        "bad o_from",
        LearnRequest(2, 0, -1, ()),
    ),
    (
        "learn request too many",
        follower,
        LearnRequest(2, 0, 0, ((1, 0),) * 5000),
        "too many C-instances",
        None,
    ),
    (
        "learn request item",
        follower,
        LearnRequest(2, 0, 0, ((1,),)),
        "bad c_wanted item",
        LearnRequest(2, 0, 0, ((1, 0),)),
    ),
    ("heartbeat", follower, Heartbeat(0, 0, -1, 1, -1), "bad heartbeat", Heartbeat(0, 0, 3, 1, -1)),
    ("heartbeat base type", follower, Heartbeat(0, 0, 3, 1, -2), "bad heartbeat base", None),
    ("heartbeat base", follower, Heartbeat(0, 0, 3, 1, 2), "says base", Heartbeat(0, 0, 3, 1, 0)),
    (
        "heartbeat keys flag",
        follower,
        Heartbeat(0, 0, 3, 1, -1, 0, 1),  # type: ignore[arg-type]
        "bad keys-wanted flag",
        Heartbeat(0, 0, 3, 1, -1, 0, False),
    ),
    ("V-request", follower, VRequest(2, 1, -1), "bad o_from", VRequest(2, 1, 0)),
    ("vote o_from", follower, ok_vote(o_from=-1), "bad o_from", ok_vote()),
    ("vote c_max length", follower, ok_vote(c_max=(0,)), "bad c_max", None),
    ("vote entries", follower, ok_vote(entries=[(0, 0, 1, 1)]), "bad entries", None),
    ("vote entry shape", follower, ok_vote(entries=((0, 0, 1),)), "bad vote entry", None),
    ("vote entry slot", follower, ok_vote(entries=((-1, 0, 1, 1),)), "bad vote entry", None),
    ("vote c_max values", follower, ok_vote(c_max=(-1, -2, -1)), "bad c_max", None),
    ("vote established view", follower, ok_vote(est_view=1), "established view", None),
    ("vote est_seq", follower, ok_vote(est_seq=3), "est_seq", None),
    ("vote est_base", follower, ok_vote(est_base=-1), "est_base", None),
    ("vote executed", follower, ok_vote(executed=-1), "executed prefix", None),
    ("NewView shape", follower, NewView(0, 1, -1, ()), "bad NewView", NewView(0, 1, 3, ())),
    (
        "NewView too many",
        follower,
        NewView(0, 1, 3, ((1, 1),) * (WINDOW + 1)),
        "too many values",
        None,
    ),
    ("NewView window", follower, NewView(0, 1, BIG, ((1, 1),)), "beyond the window", None),
    ("NewView revokes", follower, NewView(0, 1, 0, ((2, 1),)), "revoke executed slot", None),
    (
        "C-prepare range",
        follower,
        CPrepare(2, 0, 1, 0, 0, 257),
        "bad C-prepare range",
        CPrepare(2, 0, 1, 0, 1, 257),
    ),
    ("C-prepare ballot", follower, CPrepare(2, 0, 1, 0, 1, 2), "bad recovery ballot", None),
    ("C-promise owner", follower, ok_promise(owner=9), "bad C-promise owner", ok_promise()),
    ("C-promise verdict", follower, ok_promise(ok=1), "verdict", None),
    ("C-promise shape", follower, ok_promise(values=()), "bad shape", None),
    (
        "C-promise value",
        follower,
        ok_promise(values=((Command(1, 1, b""),) * 300,)),
        "bad value",
        None,
    ),
    ("R-request", follower, RRequest(2, 0, 1, "k"), "bad R-request", RRequest(2, 0, 1, b"k")),
    ("R-reply", follower, RReply(0, 0, 1, 0, 1), "bad R-reply", RReply(0, 0, 1, 0, True)),
    (
        "R-request batch ids",
        sequencer,
        RRequestBatch(1, 0, [1], (b"k",)),
        "read ids are not a tuple",
        RRequestBatch(1, 0, (1,), (b"k",)),
    ),
    (
        "R-request batch size",
        sequencer,
        RRequestBatch(1, 0, (1,) * 4097, (b"k",) * 4097),
        "more than reads_per_message_max",
        RRequestBatch(1, 0, (1,) * 4096, (b"k",) * 4096),
    ),
    (
        "R-request batch id type",
        sequencer,
        RRequestBatch(1, 0, (False,), (b"k",)),
        "not an int",
        None,
    ),
    (
        "R-request batch keys",
        sequencer,
        RRequestBatch(1, 0, (1, 2), (b"k",)),
        "one key per read",
        None,
    ),
    ("R-request batch key type", sequencer, RRequestBatch(1, 0, (1,), ("k",)), "not bytes", None),
    (
        "R-reply batch shape",
        follower,
        RReplyBatch(0, 0, (1,), (2,), ()),
        "one slot and one verdict",
        RReplyBatch(0, 0, (1,), (2,), (True,)),
    ),
    ("R-reply batch types", follower, RReplyBatch(0, 0, (1,), (2,), (0,)), "not a bool", None),
    (
        "R-reply batch slot",
        follower,
        RReplyBatch(0, 0, (1, 2), (2, -5), (True, False)),
        "slot -5",
        None,
    ),
    (
        "R-reply batch ids",
        follower,
        RReplyBatch(0, 0, (1, 2.0), (1, 2), (True, True)),
        "not an int",
        None,
    ),
    (
        "straggler vote",
        follower,
        StragglerVote(2, 0, 1),
        "bad straggler vote",
        StragglerVote(2, 0, True),
    ),
    (
        "hand-over",
        follower,
        SequencerHandover(2, 0, 1),
        "not from the sequencer",
        SequencerHandover(0, 0, 1),
    ),
    ("unknown type", follower, "not a message", "unknown message type", StragglerPoll(2, 0)),
]


@pytest.mark.parametrize(
    ("what", "make", "bad", "reason", "good"), CASES, ids=[c[0] for c in CASES]
)
def test_each_check_refuses_its_bad_message(
    what: str, make: Any, bad: Any, reason: str, good: Any
) -> None:
    ctx = make()
    with pytest.raises(PeerMessageError, match=reason):
        validate.check(ctx, bad)
    if good is not None:
        validate.check(ctx, good)  # the well-formed neighbour passes


def test_a_revocation_is_an_alarm() -> None:
    with pytest.raises(PeerMessageError) as refused:
        validate.check(follower(), OAccept(0, 0, 0, ((2, 1),), 0, False))
    assert refused.value.alarm
    with pytest.raises(PeerMessageError) as refused:
        validate.check(follower(), OAccept(0, 0, 2, ((1, 1),), 0, False))
    assert not refused.value.alarm


def test_every_message_the_replica_handles_has_a_check() -> None:
    """``Replica._route`` looks a handled message's check up without a fallback."""
    from sdpaxos.core import ClusterConfig, Replica
    from tests.core.harness import Register

    rep = Replica(ClusterConfig(replicas=3), 0, Register())
    assert set(validate.CHECKS) == set(rep._handlers)
