"""Write the TLC configurations of tla/ from the tables below (run from anywhere).

Every .cfg file here is generated: edit this script, run it, commit both. Each
file's first comment lines say what it checks and carry one ``\\* check:``
directive that ``check.sh`` reads:

    module=M          the root module TLC checks (MCSDPaxos, Scenarios, ...)
    expect=ok         TLC must finish with no error
    expect=violated:I TLC must report invariant I violated (a mutation is caught)
    expect=blocked:D  a scenario must stop at depth D: no error, and the trace's
                      event D (1-based) can never happen (the fix works there)
    simulate=S        random simulation for S seconds at two TLC workers (seed 1,
                      depth 60; 2S/w seconds at w workers) instead of
                      breadth-first search; ok if no violation was found
    depth=D           (with simulate) the simulation's depth instead of 60
    long              left out of the default run (documented in README.md)

Scenario configurations come in pairs: ``Scenario<Name>.cfg`` with the bug's
mutation on, and ``Scenario<Name>ok.cfg`` with every mutation off.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Every mutation constant of SDPaxos.tla (all FALSE unless a config turns one on).
MUTATIONS = [
    "MutNoAllocGuard",
    "MutAcceptOldView",
    "MutNoInference",
    "MutNoReaccept",
    "MutRangeReadyBug",
    "MutEstOnHeartbeat",
    "MutIgnoreOwnLease",
    "MutRecoveryIgnoresPromise",
    "MutRangeFromOwnOFrom",
    "MutCompactedLooksEmpty",
    "MutOldEpochStillDecides",
    "MutLearnerCounted",
    "MutRemovedVoteCounted",
    "MutStopTwoAcceptors",
    "MutTwoAcceptorsBeyondFive",
    "MutEvenMajorityHalf",
    "MutLearnStopMinority",
    "MutPhase1Two",
    "MutLearnCOnAcceptAnyN",
]

#: The smallest scope: every knob off; each config turns on what it needs.
BASE: dict[str, object] = dict(
    N=3,
    MaxCmds=1,
    MaxView=0,
    MaxCRound=1,
    MaxCrashes=0,
    MaxSlot=1,
    MaxCIdx=1,
    MaxTime=0,
    Lease=0,
    LeaseHold=0,
    MaxReads=0,
    Proposers="{}",
    Candidates="{}",
    Crashable="{}",
    Recoverers="{}",
    Learners="{}",
    Voters="{}",
    CAcceptors="{}",
    Readers="{}",
    CRequests="FALSE",
    Retries="FALSE",
    Handovers="FALSE",
    Relays="FALSE",
    Isolated="{}",
    Heartbeats="FALSE",
    Compactors="{}",
    Installers="{}",
    StopLearners="{}",
)

#: Every invariant of SDPaxos.tla.
ALL_INVARIANTS = [
    "TypeOK",
    "CChosenUnique",
    "OChosenUnique",
    "ExecPrefixAgreement",
    "ExecMappingSound",
    "Nontriviality",
    "LinearizableOrder",
    "ReadyIsDurable",
    "NoOverAllocation",
    "ViewFencing",
    "ExecutedNeverRevoked",
    "NoAlarm",
]

#: Scenarios are caught through agreement or real-time order only.
SEMANTIC = ["ExecPrefixAgreement", "LinearizableOrder"]


class Scenario:
    """A review bug's interleaving (Scenarios.tla) and what TLC must report."""

    def __init__(
        self,
        mutation: str,
        violated: str,
        blocked_depth: int,
        comment: str,
        **consts: object,
    ) -> None:
        self.mutation = mutation
        self.violated = violated
        self.blocked_depth = blocked_depth
        self.comment = comment
        self.consts = consts


SCENARIOS: dict[str, Scenario] = {
    "Bug1": Scenario(
        "MutRangeReadyBug",
        "ExecPrefixAgreement",
        19,
        "Bug 1: the N = 5 ready rule's old cap lets a rebuilt range's slot be READY"
        " with two acceptors.",
        N=5,
        MaxCmds=2,
        MaxView=2,
        MaxCrashes=2,
        MaxSlot=2,
        Proposers="{0,3}",
        Candidates="{1,2}",
        Crashable="{0,1}",
        Learners="{2,3,4}",
        Voters="{0,2,4}",
        CAcceptors="{0,2,4}",
        Relays="TRUE",
    ),
    "Bug2": Scenario(
        "MutEstOnHeartbeat",
        "LinearizableOrder",
        16,
        "Bug 2: a heartbeat alone raises a replica's established view.",
        N=5,
        MaxCmds=2,
        MaxView=2,
        MaxCrashes=2,
        Proposers="{1,2}",
        Candidates="{1,2}",
        Crashable="{0,1}",
        Learners="{2}",
        Voters="{2,3,4}",
        CAcceptors="{0,2,3,4}",
        Heartbeats="TRUE",
    ),
    "Bug3": Scenario(
        "MutIgnoreOwnLease",
        "LinearizableOrder",
        5,
        "Bugs 3 and 10: a candidate counts its own vote inside the lease it granted.",
        Proposers="{1}",
        Candidates="{1}",
        Voters="{2}",
        CAcceptors="{2}",
        Readers="{0}",
        MaxView=1,
        MaxReads=1,
        Lease=1,
        LeaseHold=1,
        Heartbeats="TRUE",
    ),
    "Bug5": Scenario(
        "MutRecoveryIgnoresPromise",
        "ExecPrefixAgreement",
        18,
        "Bug 5: a C-recoverer's phase 2 ignores the higher ballot it promised meanwhile.",
        Proposers="{1}",
        Recoverers="{0,2}",
        Learners="{0,2}",
        CAcceptors="{0,1}",
        CRequests="TRUE",
    ),
    "Bug14": Scenario(
        "MutRangeFromOwnOFrom",
        "ExecPrefixAgreement",
        33,
        "Bug 14: the winner's range starts at its own o_from, not at its voters'"
        " lowest executed prefix.",
        N=5,
        MaxCmds=2,
        MaxView=2,
        MaxCrashes=2,
        MaxSlot=2,
        Proposers="{1,2}",
        Candidates="{1,2}",
        Crashable="{0,1}",
        Learners="{1,2}",
        Voters="{2,3,4}",
        CAcceptors="{0,2,3,4}",
    ),
    "OldView": Scenario(
        "MutAcceptOldView",
        "LinearizableOrder",
        12,
        "Pitfall 5: acceptors take C-accepts of a view older than the one they promised.",
        N=5,
        MaxCmds=2,
        MaxView=1,
        MaxCrashes=1,
        Proposers="{1,3}",
        Candidates="{1}",
        Crashable="{0}",
        Learners="{1}",
        Voters="{2,4}",
        CAcceptors="{2,4}",
        CRequests="TRUE",
    ),
    "NoInference": Scenario(
        "MutNoInference",
        "LinearizableOrder",
        27,
        "The N = 5 inference of the untraceable replica's O-instances (paper Fig. 7) is skipped.",
        N=5,
        MaxCmds=2,
        MaxView=1,
        MaxCrashes=2,
        MaxSlot=2,
        Proposers="{1,3}",
        Candidates="{1}",
        Crashable="{0,3}",
        Learners="{1}",
        Voters="{2,4}",
        CAcceptors="{2,4}",
        CRequests="TRUE",
    ),
    "NoReaccept": Scenario(
        "MutNoReaccept",
        "LinearizableOrder",
        12,
        "NewView is sent before a majority accepted the rebuilt range.",
        N=5,
        MaxCmds=2,
        MaxView=2,
        MaxCrashes=3,
        Proposers="{0,1}",
        Candidates="{1,2}",
        Crashable="{0,2}",
        Learners="{1}",
        Voters="{0,3,4}",
        CAcceptors="{3,4}",
    ),
    "NoAllocGuard": Scenario(
        "MutNoAllocGuard",
        "LinearizableOrder",
        4,
        "The allocation guard (Fig. 5 line 13): one O-instance per C-accept received.",
        MaxCmds=3,
        MaxSlot=3,
        MaxCIdx=2,
        Proposers="{1,2}",
        Learners="{1}",
        CAcceptors="{0}",
    ),
    "CompactedPromise": Scenario(
        "MutCompactedLooksEmpty",
        "ExecPrefixAgreement",
        17,
        "Snapshots: a C-promise for a compacted C-instance says 'nothing accepted'"
        " and its recoverer chooses a no-op for an executed command.",
        MaxCmds=1,
        Proposers="{1}",
        Recoverers="{2}",
        Learners="{0,1,2}",
        CAcceptors="{0}",
        Compactors="{0}",
    ),
    "SnapshotVote": Scenario(
        "MutCompactedLooksEmpty",
        "ExecPrefixAgreement",
        16,
        "Snapshots: a candidate ignores its voter's snapshot slot, and the slot the"
        " voter compacted looks empty to the rebuild.",
        MaxCmds=2,
        MaxView=1,
        MaxCrashes=1,
        Proposers="{1,2}",
        Candidates="{2}",
        Crashable="{0}",
        Learners="{0,1,2}",
        Voters="{1}",
        CAcceptors="{0}",
        Compactors="{1}",
    ),
    "OldEpochStillDecides": Scenario(
        "MutOldEpochStillDecides",
        "LinearizableOrder",
        5,
        "Membership: the old epoch orders and answers READY after its STOP (the"
        " sequencer allocates past it, the command leader counts past it).",
        N=4,
        EpochMembers="Replace3",
        MaxCmds=2,
        MaxSlot=2,
        Proposers="{1}",
        Learners="{1,2}",
        CAcceptors="{0,2}",
    ),
    "LearnerCounted": Scenario(
        "MutLearnerCounted",
        "ExecPrefixAgreement",
        3,
        "Membership: a learner's (a later epoch's member's) C-ACK counts in an epoch"
        " it is no member of.",
        N=4,
        EpochMembers="Replace3",
        Outsiders="OutsidersAct",
        Proposers="{1}",
        Recoverers="{2}",
        Learners="{1,2}",
        CAcceptors="{0,3}",
        CRequests="TRUE",
    ),
    "RemovedVoteCounted": Scenario(
        "MutRemovedVoteCounted",
        "ExecPrefixAgreement",
        13,
        "Membership: a removed replica's C-ACK of the epoch after its removal counts.",
        N=4,
        EpochMembers="Replace3",
        Outsiders="OutsidersAct",
        MaxSlot=2,
        Proposers="{1}",
        Recoverers="{2}",
        Learners="{0,1,2}",
        CAcceptors="{0,3}",
        Installers="{3}",
    ),
    "StopTwoAcceptors": Scenario(
        "MutStopTwoAcceptors",
        "ExecPrefixAgreement",
        4,
        "Membership, N = 5: a non-sequencer commits the STOP by the two-acceptor rule"
        " (itself and the sequencer) instead of the sequencer's majority rule.",
        N=5,
        EpochMembers="Shrink5to3",
        MaxView=1,
        MaxCrashes=1,
        Proposers="{2}",
        Candidates="{2}",
        Crashable="{0}",
        Learners="{1,2}",
        Voters="{3,4}",
        CAcceptors="{3,4}",
    ),
    "LearnStopMinority": Scenario(
        "MutLearnStopMinority",
        "ExecPrefixAgreement",
        4,
        "Membership, N = 5: a member learns the STOP chosen from its own acceptance and"
        " the sequencer's (two of five) instead of a majority's acknowledgements.",
        N=5,
        EpochMembers="Shrink5to3",
        MaxView=1,
        MaxCrashes=1,
        Proposers="{2}",
        Candidates="{2}",
        Crashable="{0}",
        Learners="{1,2}",
        StopLearners="{1,2}",
        Voters="{3,4}",
        CAcceptors="{3,4}",
    ),
    "TwoAcceptorsBeyondFive": Scenario(
        "MutTwoAcceptorsBeyondFive",
        "ExecPrefixAgreement",
        9,
        "N = 7: a non-sequencer commits its O-instance by the N = 5 two-acceptor rule"
        " (itself and the sequencer) instead of a majority's O-ACKs.",
        N=7,
        MaxCmds=2,
        MaxView=1,
        Proposers="{1,2}",
        Candidates="{2}",
        Learners="{1,2}",
        Voters="{3,4,5}",
        CAcceptors="{0,3,4,5,6}",
    ),
    "EvenMajorityHalf": Scenario(
        "MutEvenMajorityHalf",
        "ExecPrefixAgreement",
        4,
        "N = 6: every quorum, phase 1 and phase 2, is F + 1 = 3 (half the members)"
        " instead of a majority of 4 (at N = 4 the mutation now differs from the rules"
        " in phase 1 only: MutPhase1Two's scenario).",
        N=6,
        MaxCmds=2,
        MaxView=1,
        Proposers="{1,2}",
        Candidates="{2}",
        Learners="{1,2}",
        Voters="{3,4}",
        CAcceptors="{0,3,4,5}",
    ),
    "Phase1Two": Scenario(
        "MutPhase1Two",
        "ExecPrefixAgreement",
        12,
        "N = 4, flexible quorums done carelessly: the phase-1 quorums (votes, C-promises)"
        " are 2 like the phase-2 quorum, and 2 + 2 is not above 4.",
        N=4,
        MaxCmds=2,
        MaxView=1,
        Proposers="{1,2}",
        Candidates="{2}",
        Learners="{1,2}",
        Voters="{3}",
        CAcceptors="{0,3}",
    ),
    "LearnCOnAcceptAnyN": Scenario(
        "MutLearnCOnAcceptAnyN",
        "ExecPrefixAgreement",
        8,
        "N = 5: an acceptor learns a C-instance chosen when it accepts it (the proposer's"
        " acceptance and its own: two of five) although the phase-2 quorum is 3.",
        N=5,
        MaxCRound=1,
        Proposers="{1}",
        Recoverers="{3}",
        Learners="{0,3}",
        CAcceptors="{0,2,4}",
        Relays="TRUE",
    ),
}

#: Witnesses: traces of Scenarios.tla with every mutation off that must complete
#: (TLC reports TraceNotFinished violated): the model can take these steps.
#: name -> (comment, constants); written as Witness<name>.cfg.
WITNESSES: dict[str, tuple[str, dict[str, object]]] = {
    "SevenMajority": (
        "N = 7, the majority rule (1.5 round trips): R1 commits its slot with the"
        " O-ACKs of R5 and R6 besides its own and the sequencer's O-accept, answers"
        " READY and executes it; R2 wins view 1 with R3, R4, R5, keeps the slot in its"
        " range and executes R1's command there.",
        dict(
            N=7,
            MaxView=1,
            Proposers="{1}",
            Candidates="{2}",
            Learners="{1,2}",
            Voters="{3,4,5}",
            CAcceptors="{0,5,6}",
        ),
    ),
    "ChangeWithCrash": (
        "Membership change {0,1,2} -> {1,2,3} with a crash in the middle: R1 crashes"
        " before its switch and restarts in epoch 0, its abandoned command is proposed"
        " again and executed in epoch 1; R1 crashes again and restarts in epoch 1 from"
        " the base.",
        dict(
            N=4,
            EpochMembers="Replace3",
            MaxCrashes=2,
            MaxSlot=2,
            Proposers="{1}",
            Crashable="{1}",
            Learners="{1,2}",
            CAcceptors="{2,3}",
            Installers="{3}",
        ),
    ),
    "ReadAfterChange": (
        "Membership change {0,1,2} -> {1,2,3}: R1's command, READY in epoch 0 before the"
        " STOP, is seen by a read that R2 asks in epoch 1 and R1 (epoch 1's sequencer,"
        " under its new lease) answers.",
        dict(
            N=4,
            EpochMembers="Replace3",
            MaxSlot=2,
            MaxReads=1,
            Lease=1,
            LeaseHold=1,
            Proposers="{1}",
            Learners="{1,2}",
            CAcceptors="{2}",
            Readers="{2}",
            Heartbeats="TRUE",
        ),
    ),
}

#: Breadth-first configurations: name -> (comment, directive extras, constants).
SEARCHES: dict[str, tuple[str, str, dict[str, object]]] = {
    "MC3": (
        "N = 3, normal case: one command, every replica accepts and executes.",
        "",
        dict(
            MaxCmds=1,
            MaxSlot=1,
            MaxMsgs=30,
            Proposers="{1}",
            Learners="{0,1,2}",
            CAcceptors="{0,1,2}",
        ),
    ),
    "MC3vc": (
        "N = 3, one command, a view change (candidate R2, voter R1); R2 executes. Long"
        " run since learning on accept (54,721 states, 146 s at one worker; CI time):"
        " in the default run a view change is searched by MC5 and MC3lease and sampled"
        " by SIM3.",
        " long",
        dict(
            MaxCmds=1,
            MaxView=1,
            MaxSlot=1,
            MaxMsgs=12,
            Proposers="{1}",
            Candidates="{2}",
            Learners="{2}",
            Voters="{1}",
            CAcceptors="{2}",
        ),
    ),
    "MC5": (
        "N = 5, one command, a view change with the inference (candidate R2, voters R3, R4).",
        "",
        dict(
            N=5,
            MaxCmds=1,
            MaxView=1,
            MaxSlot=1,
            MaxMsgs=10,
            Proposers="{1}",
            Candidates="{2}",
            Learners="{2}",
            Voters="{3,4}",
            CAcceptors="{3}",
            CRequests="TRUE",
        ),
    ),
    "MC3lease": (
        "N = 3, leases, a read and a view change (R0's lease, R1 runs with R2's vote);"
        " at this MsgBound a read completes or the view changes, not both in one run.",
        "",
        dict(
            MaxCmds=1,
            MaxView=1,
            MaxSlot=1,
            MaxReads=1,
            Lease=1,
            LeaseHold=1,
            MaxMsgs=10,
            Proposers="{1}",
            Candidates="{1}",
            Voters="{2}",
            CAcceptors="{2}",
            Readers="{0}",
            Heartbeats="TRUE",
            Isolated="{0}",
        ),
    ),
    "MC3snap": (
        "N = 3, snapshots: one command (R1) executed by R0 and R1, either snapshots it"
        " (R1 also after a crash), and the lagging R2 installs a snapshot.",
        "",
        dict(
            MaxCmds=1,
            MaxSlot=1,
            MaxCrashes=1,
            MaxMsgs=12,
            Proposers="{1}",
            Crashable="{1}",
            Learners="{0,1}",
            CAcceptors="{0}",
            Compactors="{0,1}",
            Installers="{2}",
        ),
    ),
    "MC3snapvc": (
        "N = 3, snapshots and a view change: R1's command executed by R0 and R1; R1"
        " snapshots; the lagging R2 runs for view 1 with R1's vote, installing R1's"
        " snapshot first when it is above its o_from. Long run.",
        " long",
        dict(
            MaxCmds=1,
            MaxView=1,
            MaxSlot=1,
            MaxMsgs=12,
            Proposers="{1}",
            Candidates="{2}",
            Learners="{0,1}",
            Voters="{1}",
            CAcceptors="{0}",
            Retries="TRUE",
            Compactors="{1}",
            Installers="{2}",
        ),
    ),
    "MC3change": (
        "N = 4 nodes, a membership change {0,1,2} -> {1,2,3} (R3 replaces the sequencer R0):"
        " R0 allocates the STOP, R1 and R2 execute it (R3, the learner, stays behind), R1"
        " (the new sequencer) may crash and restart in the middle; R1's one command lands"
        " in either epoch (or is abandoned at the stop and proposed again in epoch 1)."
        " Long run since learning on accept (25,593 states; CI time): in the default"
        " run a change with crashes is sampled by SIM3change and SIM3to4, replayed by"
        " WitnessChangeWithCrash and the membership scenarios, and trace-validated.",
        " long",
        dict(
            N=4,
            EpochMembers="Replace3",
            MaxCmds=1,
            MaxSlot=2,
            MaxCrashes=1,
            MaxMsgs=8,
            Proposers="{1}",
            Crashable="{1}",
            Learners="{1,2}",
            CAcceptors="{2}",
        ),
    ),
    "MC3changelearn": (
        "MC3change, and R1 and R2 may also learn the STOP chosen from the acknowledgements"
        " (LearnStop) instead of the sequencer's O-commit. Long run (44,516 states, 258 s at"
        " two workers, twice MC3change's).",
        " long",
        dict(
            N=4,
            EpochMembers="Replace3",
            MaxCmds=1,
            MaxSlot=2,
            MaxCrashes=1,
            MaxMsgs=8,
            Proposers="{1}",
            Crashable="{1}",
            Learners="{1,2}",
            CAcceptors="{2}",
            StopLearners="{1,2}",
        ),
    ),
    "MC3changeinstall": (
        "MC3change, and the learner R3 installs epoch 1's base from a member. Long run.",
        " long",
        dict(
            N=4,
            EpochMembers="Replace3",
            MaxCmds=1,
            MaxSlot=2,
            MaxCrashes=1,
            MaxMsgs=9,
            Proposers="{1}",
            Crashable="{1}",
            Learners="{1,2}",
            CAcceptors="{2}",
            Installers="{3}",
        ),
    ),
    "MC3changevc": (
        "N = 4 nodes, the change {0,1,2} -> {1,2,3} across a view change of epoch 0, no"
        " command: R0 allocates the STOP; R2 runs for view 1 with R1's vote and rebuilds"
        " the range (a chosen STOP stays; an unchosen one may be lost, and R2 allocates"
        " one again); R1 and R2 execute the STOP and switch. Long run.",
        " long",
        dict(
            N=4,
            EpochMembers="Replace3",
            MaxCmds=0,
            MaxView=1,
            MaxSlot=2,
            MaxMsgs=10,
            Candidates="{2}",
            Learners="{1,2}",
            Voters="{1}",
        ),
    ),
    "MC4": (
        "N = 4, phase-2 quorums of 2, phase-1 quorums of 3: one command (R1), accepted"
        " by R2 and R3 too (chosen once one of them accepts it; either may learn it so);"
        " R1 commits its slot with its own acceptance and the sequencer's O-accept (or an"
        " O-ACK), and answers READY; a view change (candidate R2, voters R1 and R3, both"
        " needed: 3 of 4) may follow it; R2 executes. Long run.",
        " long",
        dict(
            N=4,
            MaxCmds=1,
            MaxView=1,
            MaxSlot=1,
            MaxMsgs=12,
            Proposers="{1}",
            Candidates="{2}",
            Learners="{2}",
            Voters="{1,3}",
            CAcceptors="{2,3}",
        ),
    ),
    "MC4rec": (
        "N = 4, C-instance recovery with phase-2 quorums of 2: R1's command, accepted by"
        " R0 or R3 (R3 may learn it chosen as it accepts it), ordered through a C-request;"
        " R2 recovers it with a phase-1 quorum of 3 promises and must find the value."
        " Long run.",
        " long",
        dict(
            N=4,
            MaxCmds=1,
            MaxSlot=1,
            MaxMsgs=12,
            Proposers="{1}",
            Recoverers="{2}",
            Learners="{1,2,3}",
            CAcceptors="{0,3}",
            CRequests="TRUE",
        ),
    ),
    "MC3two": (
        "N = 3, normal case: two commands from two leaders; R0 executes. Long run.",
        " long",
        dict(
            MaxCmds=2,
            MaxSlot=2,
            MaxMsgs=20,
            Proposers="{1,2}",
            Learners="{0}",
            CAcceptors="{0}",
        ),
    ),
}

ALL_ROLES_3 = "{0,1,2}"
ALL_ROLES_5 = "{0,1,2,3,4}"


def _everything(n: int) -> dict[str, object]:
    roles = "{" + ",".join(str(i) for i in range(n)) + "}"
    return dict(
        N=n,
        MaxCmds=3,
        MaxView=3,
        MaxCRound=2,
        MaxCrashes=2,
        MaxSlot=4,
        MaxCIdx=2,
        MaxTime=6,
        Lease=2,
        LeaseHold=2,
        MaxReads=2,
        MaxMsgs=1000,
        Proposers=roles,
        Candidates=roles,
        Crashable=roles,
        Recoverers=roles,
        Learners=roles,
        Voters=roles,
        CAcceptors=roles,
        Readers=roles,
        CRequests="TRUE",
        Retries="TRUE",
        Handovers="TRUE",
        Relays="TRUE",
        Heartbeats="TRUE",
        Compactors=roles,
        Installers=roles,
    )


def _change(n: int, members: str, **more: object) -> dict[str, object]:
    """A membership change in a scope random runs get through: every replica in
    every role, outsiders acting, no leases, reads or hand-overs."""
    roles = "{" + ",".join(str(i) for i in range(n)) + "}"
    return (
        dict(
            N=n,
            EpochMembers=members,
            Outsiders="OutsidersAct",
            MaxCmds=2,
            MaxView=2,
            MaxCrashes=2,
            MaxSlot=4,
            MaxCIdx=2,
            MaxMsgs=1000,
            Proposers=roles,
            Candidates=roles,
            Crashable=roles,
            Recoverers=roles,
            Learners=roles,
            Voters=roles,
            CAcceptors=roles,
            CRequests="TRUE",
            Retries="TRUE",
            Relays="TRUE",
            Compactors=roles,
            Installers=roles,
            StopLearners=roles,
        )
        | more
    )


#: Definitions of SDPaxos.tla a configuration may override (``name <- definition``):
#: EpochMembers (default << 0..N-1 >>: no membership change) and Outsiders
#: (default FALSE; OutsidersAct: replicas that are no members still take steps).
OVERRIDES = ("EpochMembers", "Outsiders")


#: Random simulations: name -> (comment, seconds, constants); the seconds may be
#: "S depth=D" for a depth other than 60, and end in " long".
SIMULATIONS: dict[str, tuple[str, int | str, dict[str, object]]] = {
    "SIM3": (
        "N = 3, everything on: 3 commands, 3 views, 2 crashes, reads, recovery, hand-overs.",
        20,
        _everything(3),
    ),
    "SIM5": (
        "N = 5, everything on: 3 commands, 3 views, 2 crashes, reads, recovery, hand-overs.",
        20,
        _everything(5),
    ),
    "SIM3change": (
        "N = 4 nodes, a membership change {0,1,2} -> {1,2,3} (R3 replaces the sequencer R0)"
        " in a scope narrow enough that random runs reach the new epoch and run commands"
        " there (100 steps): 2 commands, 2 views per epoch, 2 crashes, recovery, relays,"
        " snapshots and installs; learners and removed replicas keep taking steps (their"
        " messages are dropped); no leases, reads or hand-overs.",
        "20 depth=100",
        _change(4, "Replace3"),
    ),
    "SIM5change": (
        "N = 5, a membership change {0,1,2,3,4} -> {2,3,4} (the sequencer R0 and R1"
        " removed: the N = 5 rules in epoch 0, the majority rule in epoch 1) in the scope"
        " of SIM3change. Long run.",
        "60 depth=150 long",
        _change(5, "Shrink5to3"),
    ),
    "SIM3to5": (
        "N = 5, a membership change {0,1,2} -> {0,1,2,3,4} (two learners promoted at one"
        " stop: the N = 5 rules in epoch 1) in the scope of SIM3change. Long run.",
        "60 depth=150 long",
        _change(5, "Grow3to5"),
    ),
    "SIM3to4": (
        "N = 4, a membership change {0,1,2} -> {0,1,2,3} (a learner promoted: the"
        " majority rule of even N, 1.5 round trips, in epoch 1) in the scope of"
        " SIM3change.",
        "20 depth=100",
        _change(4, "Grow3to4"),
    ),
    "SIM5to7": (
        "N = 7, two changes {0..4} -> {0..5} -> {0..6} (one PROMOTE per stop: the N = 5"
        " rules in epoch 0, the majority rule at N = 6 in epoch 1 and at N = 7 in epoch"
        " 2) in a narrower scope than SIM3change, so that random runs get through two"
        " stops: a fifth slot, 1 view per epoch, 1 crash, no snapshots taken, learners"
        " idle until they install a base. Long run.",
        "120 depth=200 long",
        {
            k: v
            for k, v in _change(
                7, "Grow5to6to7", MaxSlot=5, MaxView=1, MaxCrashes=1, Compactors="{}"
            ).items()
            if k != "Outsiders"
        },
    ),
    "SIM7": (
        "N = 7, one epoch of seven members (the majority rule of N >= 7, 1.5 round"
        " trips) in the scope of SIM3change without a change: 2 commands, 2 views,"
        " 2 crashes, recovery, relays, snapshots and installs; no leases, reads or"
        " hand-overs. Long run.",
        "60 depth=100 long",
        {k: v for k, v in _change(7, "").items() if k not in OVERRIDES},
    ),
    "SIM3snap": (
        "N = 3, snapshots in a smaller scope than SIM3 (so that a majority executes"
        " often) and deeper (100 steps, so that view changes follow snapshots):"
        " 2 commands, 2 views, 1 crash, recovery, relays,"
        " every replica takes and installs snapshots; no leases, reads or hand-overs.",
        "15 depth=100",
        dict(
            MaxCmds=2,
            MaxView=2,
            MaxCrashes=1,
            MaxSlot=3,
            MaxCIdx=2,
            MaxMsgs=1000,
            Proposers=ALL_ROLES_3,
            Candidates=ALL_ROLES_3,
            Crashable=ALL_ROLES_3,
            Recoverers=ALL_ROLES_3,
            Learners=ALL_ROLES_3,
            Voters=ALL_ROLES_3,
            CAcceptors=ALL_ROLES_3,
            CRequests="TRUE",
            Retries="TRUE",
            Relays="TRUE",
            Compactors=ALL_ROLES_3,
            Installers=ALL_ROLES_3,
        ),
    ),
    "SIM5snap": (
        "N = 5, snapshots in the scope of SIM3snap (2 commands, 2 views, 1 crash,"
        " recovery, relays, every replica takes and installs snapshots). Long run.",
        "120 depth=100 long",
        dict(
            N=5,
            MaxCmds=2,
            MaxView=2,
            MaxCrashes=1,
            MaxSlot=3,
            MaxCIdx=2,
            MaxMsgs=1000,
            Proposers=ALL_ROLES_5,
            Candidates=ALL_ROLES_5,
            Crashable=ALL_ROLES_5,
            Recoverers=ALL_ROLES_5,
            Learners=ALL_ROLES_5,
            Voters=ALL_ROLES_5,
            CAcceptors=ALL_ROLES_5,
            CRequests="TRUE",
            Retries="TRUE",
            Relays="TRUE",
            Compactors=ALL_ROLES_5,
            Installers=ALL_ROLES_5,
        ),
    ),
}


def _constants(consts: dict[str, object], on: str = "") -> list[str]:
    lines = ["CONSTANTS"]
    lines += [f"    {k} = {v}" for k, v in consts.items() if k not in OVERRIDES]
    lines += [f"    {k} <- {v}" for k, v in consts.items() if k in OVERRIDES]
    lines += [f"    {m} = {'TRUE' if m == on else 'FALSE'}" for m in MUTATIONS]
    return lines


def _write(name: str, lines: list[str]) -> None:
    (HERE / f"{name}.cfg").write_text("\n".join(lines) + "\n")


def generate() -> list[str]:
    """Write every configuration; return the file names written."""
    written: list[str] = []
    for name, sc in SCENARIOS.items():
        consts = {**BASE, **sc.consts}
        for mutated in (True, False):
            if mutated:
                what = f"With {sc.mutation} on, TLC must report {sc.violated} violated."
                check = f"module=Scenarios expect=violated:{sc.violated}"
            else:
                what = (
                    f"With every mutation off the trace must stop at event"
                    f" {sc.blocked_depth} (TLC depth {sc.blocked_depth})."
                )
                check = f"module=Scenarios expect=blocked:{sc.blocked_depth}"
            lines = [f"\\* {sc.comment}", f"\\* {what}", f"\\* check: {check}"]
            lines += _constants(consts, sc.mutation if mutated else "")
            lines += [f"    Trace <- {name}", "INIT TraceInit", "NEXT TraceNext", "INVARIANTS"]
            lines += [f"    {i}" for i in [*SEMANTIC, "TraceNotFinished"]]
            cfg = f"Scenario{name}" + ("" if mutated else "ok")
            _write(cfg, lines)
            written.append(cfg)
    for name, (comment, consts) in WITNESSES.items():
        lines = [
            f"\\* {comment}",
            "\\* With every mutation off the whole trace must happen (TraceNotFinished violated).",
            "\\* check: module=Scenarios expect=violated:TraceNotFinished",
        ]
        lines += _constants({**BASE, **consts})
        lines += [f"    Trace <- {name}", "INIT TraceInit", "NEXT TraceNext", "INVARIANTS"]
        lines += [f"    {i}" for i in [*SEMANTIC, "TraceNotFinished"]]
        _write(f"Witness{name}", lines)
        written.append(f"Witness{name}")
    for name, (comment, extra, consts) in SEARCHES.items():
        lines = [f"\\* {comment}", f"\\* check: module=MCSDPaxos expect=ok{extra}"]
        lines += _constants({**BASE, **consts})
        lines += ["INIT Init", "NEXT Next", "CONSTRAINT MsgBound", "INVARIANTS"]
        lines += [f"    {i}" for i in ALL_INVARIANTS]
        _write(name, lines)
        written.append(name)
    for name, (comment, seconds, consts) in SIMULATIONS.items():
        lines = [
            f"\\* {comment}",
            f"\\* check: module=MCSDPaxos expect=ok simulate={seconds}",
        ]
        lines += _constants({**BASE, **consts})
        lines += ["INIT Init", "NEXT Next", "CONSTRAINT MsgBound", "INVARIANTS"]
        lines += [f"    {i}" for i in ALL_INVARIANTS]
        _write(name, lines)
        written.append(name)
    return written


if __name__ == "__main__":
    names = generate()
    stale = sorted(
        p.stem for p in HERE.glob("*.cfg") if p.stem not in names and not p.stem.startswith("Trace")
    )
    extra = f"; not generated here: {stale}" if stale else ""
    print(f"wrote {len(names)} configurations{extra}")
    sys.exit(0)
