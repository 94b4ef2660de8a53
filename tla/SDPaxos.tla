------------------------------- MODULE SDPaxos -------------------------------
(***************************************************************************)
(* SDPaxos (Zhao et al., SoCC 2018) as implemented by sdpaxos.core.        *)
(*                                                                         *)
(* One action per protocol step of the core, named like the core's trace  *)
(* event (tla/README.md has the table, which tests/test_tla.py checks      *)
(* against the code).  docs/recovery.md is the design in prose.           *)
(*                                                                         *)
(* The model is deliberately PERMISSIVE: whenever the core decides *when*  *)
(* to do something (timers, retransmission, which peer gets which message, *)
(* when to relay commits, when to give up), the model lets it happen at    *)
(* any time the protocol state allows.  The core's behaviours are then a   *)
(* subset of the model's, which is what trace validation (Trace*.tla)      *)
(* checks on simulator runs, and every invariant TLC proves here holds for *)
(* the core a fortiori.                                                    *)
(*                                                                         *)
(* NOTE on the network.  `msgs` is the SET of every message ever sent.  A  *)
(* handler never removes the message it handles, so every message can be   *)
(* received any number of times, in any order, or never: loss,             *)
(* duplication and reordering are in the model without extra actions.     *)
(* A receiver that acts on "a majority of X messages" (C-ACKs, votes,      *)
(* O-ACKs, C-promises, lease grants) reads them from `msgs`, as in         *)
(* Lamport's Paxos.tla.                                                    *)
(*                                                                         *)
(* Membership.  The run is a sequence of epochs (EpochMembers), each this *)
(* protocol over its members, ended by a STOP O-value (docs/membership.md; *)
(* the section "Membership change" below).                                *)
(*                                                                         *)
(* Time.  One global clock (perfect clocks; the core's margins for rate   *)
(* error are argued in docs/recovery.md section 11).  A lease grant at     *)
(* time g forbids the grantor any vote, its own candidacy included, before *)
(* g + Lease; the sequencer uses a grant answering its heartbeat sent at   *)
(* t only while clock < t + LeaseHold (LeaseHold =< Lease).                *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    N,            \* number of replica ids 0..N-1 (every epoch's members are among them;
                  \* without a membership change, the replicas: 3 to 7)
    MaxCmds,      \* client commands in the whole run
    MaxView,      \* highest view a replica may start
    MaxCRound,    \* highest C-recovery round (ballot = round * N + replica)
    MaxCrashes,   \* crashes in the whole run
    MaxSlot,      \* O-instances 0..MaxSlot-1
    MaxCIdx,      \* C-instances 0..MaxCIdx-1 per replica
    MaxTime,      \* the clock runs 0..MaxTime
    Lease,        \* lease_ms in clock units
    LeaseHold,    \* lease_hold_ms in clock units
    MaxReads,     \* linearizable reads in the whole run
    Proposers,    \* replicas whose clients propose (scope; R for everything)
    Candidates,   \* replicas that may start a view change (scope)
    Crashable,    \* replicas that may crash (scope)
    Recoverers,   \* replicas that may run C-instance recovery (scope)
    Learners,     \* replicas that learn others' commits and execute (scope)
    Voters,       \* replicas that answer V-requests (scope)
    CAcceptors,   \* replicas that accept other replicas' C-accepts (scope)
    Readers,      \* replicas whose clients read (scope)
    CRequests,    \* model C-requests (scope: a C-accept, being broadcast here, covers them)
    Retries,      \* model abandoned candidacies and re-sent votes (scope)
    Heartbeats,   \* model heartbeats and lease grants (scope; needed for reads)
    Handovers,    \* model hand-overs of the sequencer role (scope)
    Relays,       \* model relayed commits (answers to learn requests; scope)
    Isolated,     \* replicas that receive no message of a view above 0 (a partition; scope)
    Compactors,   \* replicas that may take snapshots (TakeSnapshot; scope)
    Installers,   \* replicas that may install another replica's snapshot (scope)
    StopLearners, \* replicas that may learn a STOP chosen from acknowledgements (LearnStop; scope)
    \* Deliberate bugs; every cfg but the mutation cfgs sets them all FALSE.
    MutNoAllocGuard,     \* allocate one O-instance per C-accept/C-request received
    MutAcceptOldView,    \* no view fence on C-instance messages (pitfall 5): acceptors
                         \* take older views' C-accepts, leaders count any view's C-ACKs
    MutNoInference,      \* N = 5: skip the R_m inference in the view change
    MutNoReaccept,       \* NewView without the majority re-acceptance of the range
    MutRangeReadyBug,    \* bug 1: the N = 5 ready rule's old cap (`safe > base`)
    MutEstOnHeartbeat,   \* bug 2: a heartbeat raises the established view
    MutIgnoreOwnLease,   \* bugs 3, 10: a candidate wins inside its own lease grant
    MutRecoveryIgnoresPromise, \* bug 5: recovery phase 2 ignores a higher promise
    MutRangeFromOwnOFrom,      \* bug 14: the range starts at the winner's o_from, not at
                               \* the lowest executed prefix among its votes
    MutCompactedLooksEmpty,    \* what a replica compacted looks never accepted: its C-promise
                               \* for a compacted C-instance says "nothing accepted" (and it
                               \* accepts that instance afresh), and a candidate ignores its
                               \* voters' snapshot slots (their forgotten slots look empty)
    MutOldEpochStillDecides,   \* membership: the sequencer allocates after its STOP and the
                               \* command leader's counting goes past it (the old epoch orders
                               \* and answers READY after its stop)
    MutLearnerCounted,         \* membership: a learner's (a later epoch's member's) messages of
                               \* an epoch it is no member of are handled and counted
    MutRemovedVoteCounted,     \* membership: a removed replica's messages of an epoch after
                               \* its removal are handled and counted
    MutStopTwoAcceptors,       \* membership: a replica commits a STOP like its own O-instances
                               \* (N = 5: by the two-acceptor rule, itself and the sequencer)
    MutTwoAcceptorsBeyondFive, \* N = 6, 7: a non-sequencer still uses the N = 5 two-acceptor
                               \* rule (quorum.uses_two_acceptor_rule as `replicas >= 5`)
    MutEvenMajorityHalf,       \* even N: every quorum is F + 1 = (N - 1) div 2 + 1, half the
                               \* members (quorum.majority as `(replicas - 1) // 2 + 1`)
    MutLearnStopMinority,      \* membership: a member learns the STOP chosen once it and the
                               \* sequencer accepted it (LearnStop without a majority's acks)
    MutPhase1Two,              \* N = 4: the phase-1 quorums (votes, C-promises, lease grants, the
                               \* majority-executed point) are 2 too, like the phase-2 quorum (a
                               \* careless "flexible quorum": 2 + 2 is not above 4)
    MutLearnCOnAcceptAnyN      \* an acceptor learns a C-instance chosen when it accepts it (its
                               \* proposer's acceptance and its own) whatever the phase-2 quorum
                               \* (N = 5, 6, 7 too, where it is above 2)

R      == 0 .. (N - 1)             \* every replica id of the whole run

(***************************************************************************)
(* Membership (docs/membership.md).  Two definitions a configuration may   *)
(* override (`EpochMembers <- Replace3`; the cfg syntax has no tuples), so *)
(* that a configuration without a change needs no new constant:           *)
(*  - EpochMembers: the member sets of epochs 0, 1, .. (which change is    *)
(*    asked does not matter to safety; where the stop lands does);         *)
(*  - Outsiders (scope): whether a replica that is no member of its epoch  *)
(*    (a learner, a removed replica) takes protocol steps; its messages    *)
(*    are dropped by the members (Counted).                                *)
(***************************************************************************)
EpochMembers == << R >>
Replace3   == << {0, 1, 2}, {1, 2, 3} >>        \* N = 4: R3 replaces R0 (the sequencer)
Grow3to5   == << {0, 1, 2}, {0, 1, 2, 3, 4} >>  \* N = 5: two learners promoted at one stop
Shrink5to3 == << {0, 1, 2, 3, 4}, {2, 3, 4} >>  \* N = 5: R0 (the sequencer) and R1 removed
\* Even sizes are transitional (docs/membership.md 5): one PROMOTE per stop.
Grow3to4   == << {0, 1, 2}, {0, 1, 2, 3} >>     \* N = 4: a learner promoted (N = 4 rules after)
Grow5to6to7 == << {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5, 6} >>
                                                \* N = 7: two PROMOTEs, two stops
Outsiders == FALSE
OutsidersAct == TRUE
NEp    == Len(EpochMembers)        \* epochs 0 .. NEp-1
Epochs == 0 .. (NEp - 1)
Mem(e) == EpochMembers[e + 1]      \* the members of epoch e
Size(e) == Cardinality(Mem(e))
\* Two kinds of quorum (tla/README.md, "Phase-1 and phase-2 quorums").  Phase 1
\* (view-change votes, C-recovery promises, lease grants, the majority-executed
\* point): a majority, MajE.  Phase 2 (the acceptances that choose a value: C-ACKs,
\* O-ACKs, the rebuilt range's acceptances, a STOP's acknowledgements): AccQE, a
\* majority too except at 4 members, where it is 2 (core: quorum.accept_quorum).
\* 3 + 2 > 4: every phase-1 quorum meets every phase-2 quorum (Flexible Paxos, Howard
\* et al. 2016), which is all Paxos needs; two phase-2 quorums need not meet.
MajE(e) == Size(e) \div 2 + 1
AccQE(e) == IF Size(e) = 4 THEN 2 ELSE MajE(e)
Seq0   == 0                        \* the configured sequencer of view 0 of epoch 0
\* The sequencer of view 0 of epoch e: the old one if it stays, else the lowest member
\* (docs/membership.md 3.1 step 1; the model fixes it per epoch).
Seq0Of(e) == IF Seq0 \in Mem(e) THEN Seq0 ELSE CHOOSE x \in Mem(e) : \A y \in Mem(e) : x =< y

\* Epochs of 3 to 7 members: the majority rule at 3, 4, 6 and 7 (with phase-2 quorums
\* of 2 at 4), the two-acceptor rule at 5 (docs/membership.md 5; N = 1 and 2 are not
\* modelled).
ASSUME /\ NEp >= 1 /\ \A e \in Epochs : Mem(e) \subseteq R /\ Size(e) \in 3 .. 7
       /\ Seq0 \in Mem(0) /\ LeaseHold =< Lease

\* Whose messages of epoch e count: its members (with the mutations, also learners:
\* members of a later epoch only; or removed replicas: members of an earlier one only).
Learner(e) == {q \in R \ Mem(e) : \E k \in Epochs : k > e /\ q \in Mem(k)}
Removed(e) == {q \in R \ Mem(e) : \E k \in Epochs : k < e /\ q \in Mem(k)}
Voting(e) == Mem(e) \cup (IF MutLearnerCounted THEN Learner(e) ELSE {})
                    \cup (IF MutRemovedVoteCounted THEN Removed(e) ELSE {})
Slots  == 0 .. (MaxSlot - 1)
CIdx   == 0 .. (MaxCIdx - 1)
Cmds   == 1 .. MaxCmds
Views  == 0 .. MaxView

\* C-values: a command id, NoOp, or Nil (nothing).
NoOp   == -1
Nil    == -2
\* O-values: an owner id, NoCl (the paper's no-cl), Empty (nothing), or Stop (the
\* O-value that ends an epoch, docs/membership.md 3: STOP_VALUE).
NoCl   == -1
Empty  == -2
Stop   == -3
NoEntry == [b |-> -1, o |-> Empty]

CBal(rnd, r) == rnd * N + r        \* core: make_ballot(round, replica), stride N here
BalOwner(b)  == b % N
BalRound(b)  == IF b < 0 THEN 0 ELSE b \div N
MaxB         == CBal(MaxCRound, N - 1)

Max(S) == CHOOSE x \in S : \A y \in S : x >= y
\* The sets of k messages of X from k distinct senders (k is a phase-1 quorum less one:
\* 1 for N = 3, 2 for N = 4 and 5, 3 for N = 6 and 7), each set once, its senders
\* in increasing order.  Enumerating them, rather than SUBSET X, keeps TLC's work
\* per state polynomial.
RECURSIVE Picks(_, _)
Picks(X, k) ==
    IF k = 0 THEN {{}}
    ELSE IF k = 1 THEN {{x} : x \in X}
    ELSE IF k = 2 THEN UNION {{{x, y} : y \in {z \in X : z.src > x.src}} : x \in X}
    ELSE UNION {{{x} \cup P : P \in Picks({z \in X : z.src > x.src}, k - 1)} : x \in X}
Min(S) == CHOOSE x \in S : \A y \in S : x =< y

NoCand == [v |-> -1, from |-> -1]
NoRec  == [n |-> -1, i |-> -1, b |-> -1]
NoReady == [n |-> -1, i |-> -1, j |-> -1, v |-> -1, e |-> -1]
NoSnap  == [slot |-> 0, exec |-> <<>>, cmax |-> [n \in 0 .. (N - 1) |-> -1]]

-----------------------------------------------------------------------------
(***************************************************************************)
(* Variables.  Durable ones are exactly what Restart keeps (the core's     *)
(* storage records, sdpaxos/core/storage.py).                              *)
(***************************************************************************)
VARIABLES
    cProm,     \* cProm[a][n][i]: ballot a promised for C_n^i (-1)       CPromised, CAccepted
    cAccB,     \* cAccB[a][n][i]: ballot of a's accepted value (-1)       CAccepted
    cAccV,     \* cAccV[a][n][i]: that value (Nil)                        CAccepted
    ownNext,   \* ownNext[a]: a's next own C-index (its own CAccepted records)
    oAccB,     \* oAccB[a][j]: ballot (a view) of the O-value a holds for O_j (-1)
    oAccV,     \* oAccV[a][j]: that value (Empty)       OAccepted, ViewEstablished
    pView,     \* pView[a]: promised view                ViewPromised (and the above)
    est,       \* est[a]: [v, s, start, base] the newest view whose whole rebuilt
               \* range a accepted, its sequencer, and the range [start, base)
    snap,      \* snap[a]: a's newest snapshot (docs/recovery.md 16.1): [slot, exec, cmax]:
               \* every slot below `slot` is executed and forgotten; `exec` is what a
               \* executed there (the state machine and the per-owner counts: the
               \* model's execd prefix); `cmax` the per-owner c_max when it was made
    ep,        \* ep[a]: a's epoch (docs/membership.md; the base snapshot's membership state)
    ebase      \* ebase[a]: the first (global) slot of a's epoch: the slot after its stop
epochVars == <<ep, ebase>>
durableVars == <<cProm, cAccB, cAccV, ownNext, oAccB, oAccV, pView, est, snap, epochVars>>

VARIABLES
    up,        \* up[r]: r is running
    joined,    \* joined[r]: r adopted pView[r] (knows its sequencer; core: acc_upto >= 0)
    rc,        \* rc[r]: the range of r's view is known chosen (NewView, or a heartbeat base)
    oCom,      \* oCom[r][j]: r knows its value of O_j is committed
    oComB,     \* oComB[r][j]: the ballot it was chosen at (relays report it, -1)
    cCom,      \* cCom[r][n][i]: the value r knows committed for C_n^i (Nil)
    execd,     \* execd[r]: executed slots, in order: [slot, o, ci, cmd]
    safeUpto,  \* safeUpto[r]: r's safe prefix in its view (core: _o_safe_upto)
    want,      \* want[s][n]: sequencer s: C-instances of n it was asked to order
    cand,      \* cand[r]: the view change r runs: [v, from] (NoCand)
    votedFor,  \* votedFor[r]: whom r voted for in pView[r] (-1)
    prop,      \* prop[r]: C-values r proposes (own or recovered) not yet committed: [n, i, b, v]
    inflight,  \* inflight[r]: own C-instances started, not ready yet: [i, c]
    lost,      \* lost[r]: r's commands whose C-instance was chosen as something else
    crec,      \* crec[r]: the C-recovery r runs (NoRec)
    leaseUntil,\* leaseUntil[r]: r granted a lease: no vote (its own included) before
    handing    \* handing[s]: s is handing the sequencer role over (serves no reads)
volatileVars == <<up, joined, rc, oCom, oComB, cCom, execd, safeUpto, want, cand, votedFor, prop,
                  inflight, lost, crec, leaseUntil, handing>>

VARIABLES
    clock,     \* the global clock
    msgs       \* every message ever sent

\* --- HISTORY variables: would not be present in an implementation ---
VARIABLES
    nextCmd,     \* next fresh client command (the environment)
    readyAt,     \* readyAt[c]: where c was first answered READY: [n, i, j, v] (NoReady)
    readyBefore, \* readyBefore[c]: commands READY when c was first proposed
    cVotes,      \* every C-acceptance ever: [a, n, i, b, v]
    oVotes,      \* every O-acceptance ever: [a, j, b, o]
    execHist,    \* every [slot, o, ci, cmd] any replica ever executed
    ranges,      \* every log a sequencer built at winning: [v, s, log] (log: whole, from 0)
    rops,        \* reads: [r, st, before, slot, result, e (the epoch it was asked in)];
                 \* st in {"ask","wait","done","fail"}
    crashes,     \* crashes so far (bounded by MaxCrashes)
    alarm,       \* a core alarm fired (invariant_alarms): must stay FALSE
    execHigh     \* execHigh[r]: the longest executed prefix r ever had (crashes included)
historyVars == <<nextCmd, readyAt, readyBefore, cVotes, oVotes, execHist, ranges, rops,
                 crashes, alarm, execHigh>>

vars == <<durableVars, volatileVars, clock, msgs, historyVars>>

-----------------------------------------------------------------------------
(* Helpers *)

Executed(r, j) == j < Len(execd[r])
\* r acts in its epoch: it is up and a member (or, in scope Outsiders, any replica).
Member(r)   == r \in Mem(ep[r])
Live(r)     == up[r] /\ (Member(r) \/ Outsiders)
\* A message of epoch m.ep counts (is handled) only from a member of that epoch
\* (docs/membership.md 4.4, 4.6); commits (no sender) are facts about the epoch.
Counted(m)  == IF "src" \in DOMAIN m THEN m.src \in Voting(m.ep) ELSE TRUE
\* r handles only counted messages of its own epoch.
Rcv(r, m)   == m.ep = ep[r] /\ Counted(m)
\* The quorums r's protocol steps count (the invariants count MajE and AccQE, the
\* true ones, whatever the mutation).  Maj(r): phase 1 (core: quorum.majority,
\* N // 2 + 1 at every N).  AccQ(r): phase 2 (core: quorum.accept_quorum, 2 at
\* N = 4, else the majority).  HalfE(e): what MutEvenMajorityHalf counts instead at
\* an even size, for both kinds.
HalfE(e)    == (Size(e) - 1) \div 2 + 1
Maj(r)      == IF MutEvenMajorityHalf /\ Size(ep[r]) % 2 = 0 THEN HalfE(ep[r])
               ELSE IF MutPhase1Two /\ Size(ep[r]) = 4 THEN 2
               ELSE MajE(ep[r])
AccQ(r)     == IF MutEvenMajorityHalf /\ Size(ep[r]) % 2 = 0 THEN HalfE(ep[r])
               ELSE AccQE(ep[r])
Est(r)      == Live(r) /\ joined[r]
SeqOf(r)    == IF joined[r] THEN est[r].s ELSE -1
IsSeq(s)    == Est(s) /\ est[s].s = s

\* The core's OLog.acc_upto: from the range's base on, every slot held at the
\* view's ballot (the sequencer's log ends there).  -1 when not joined.
Acc(r) ==
    IF ~joined[r] THEN -1
    ELSE LET b == Max({est[r].base, snap[r].slot})   \* (below its snapshot: executed)
         IN Max({k \in b .. MaxSlot : \A j \in b .. (k - 1) : oAccB[r][j] = pView[r]})

Known(r, j) == Executed(r, j) \/ oAccB[r][j] = pView[r] \/ oCom[r][j]
KnownUpto(r) == Max({k \in 0 .. MaxSlot : \A j \in 0 .. (k - 1) : Known(r, j)})
CommittedPrefix(r) ==
    Max({k \in Len(execd[r]) .. MaxSlot : \A j \in Len(execd[r]) .. (k - 1) : oCom[r][j]})

\* What r knows the sequencer of its view accepted: the end of its O-accepts,
\* heartbeats and NewView in this view (the sequencer accepted all it sends).
SeqAcc(r) ==
    LET s == SeqOf(r)
        v == pView[r]
    IN Max({-1}
           \cup {m.start + Len(m.vals) : m \in {x \in msgs : x.type = "OAccept" /\ x.ep = ep[r] /\ x.src = s /\ x.view = v}}
           \cup {m.len : m \in {x \in msgs : x.type = "Heartbeat" /\ x.ep = ep[r] /\ x.src = s /\ x.view = v}}
           \cup {m.start + Len(m.vals) : m \in {x \in msgs : x.type = "NewView" /\ x.ep = ep[r] /\ x.src = s /\ x.view = v}})

\* r's knowledge of q's accepted prefix in r's view (prefix O-ACKs).
AckOf(r, q) ==
    IF q = r THEN Acc(r)
    ELSE Max({-1} \cup {a.upto : a \in {x \in msgs : x.type = "OAck" /\ x.ep = ep[r] /\ x.src = q
                                                   /\ x.view = pView[r]}}
                  \cup (IF q = SeqOf(r) THEN {SeqAcc(r)} ELSE {}))
\* The longest prefix a phase-2 quorum (r's view of it) accepted: chosen.
QuorumAcc(r) ==
    Max({k \in -1 .. MaxSlot : Cardinality({q \in Voting(ep[r]) : AckOf(r, q) >= k}) >= AccQ(r)})

\* Which rule decides r's safe prefix (core: quorum.uses_two_acceptor_rule): the
\* two-acceptor rule at a non-sequencer of a 5-member epoch; the majority rule
\* everywhere else: at the sequencer, and at N = 3, 4, 6, 7.  With N = 4, 6, 7
\* (quorum.leader_and_sequencer_suffice is FALSE) the acceptors also send their
\* O-ACKs to the owners of the slots they accept, so that an owner counts a
\* majority itself (1.5 round trips, docs/protocol.md 5.5); the model's O-ACKs
\* reach anyone (`msgs`), so that routing needs no rule here.
UsesTwoAcceptorRule(r, seq) ==
    /\ seq # r
    /\ IF MutTwoAcceptorsBeyondFive THEN Size(ep[r]) >= 5 ELSE Size(ep[r]) = 5

\* The safe prefix (core: Learner.advance_safe_prefix).
SafePrefix(r) ==
    LET seq == SeqOf(r)
        own == Min({Acc(r), SeqAcc(r)})
        base == est[r].base
        raw ==
          IF UsesTwoAcceptorRule(r, seq)
          THEN IF MutRangeReadyBug
               THEN \* the old rule: cap by the committed prefix only beyond the base
                    IF own > base /\ CommittedPrefix(r) < base THEN Min({own, CommittedPrefix(r)})
                    ELSE own
               ELSE IF rc[r] THEN own ELSE -1
          ELSE Max({Min({QuorumAcc(r), Acc(r)}), CommittedPrefix(r)})
    IN Min({raw, KnownUpto(r)})

\* r's O-values for the counting rule: below its snapshot, what it executed there
\* (the core counts from the snapshot's per-owner executed counts), else its log.
OV(r) == [j \in Slots |-> IF j < snap[r].slot THEN snap[r].exec[j + 1].o ELSE oAccV[r][j]]
\* r's log holds a STOP of its epoch below slot hi.
HasStop(r, hi) == \E j \in ebase[r] .. (hi - 1) : OV(r)[j] = Stop

\* The slot the counting rule gives C_r^i in r's log (-1 if none below MaxSlot).
SlotOf(r, i) ==
    LET ov == OV(r)
        lo == ebase[r]     \* (C-instances are numbered from 0 in every epoch)
        js == {j \in lo .. (MaxSlot - 1) :
                 ov[j] = r /\ Cardinality({h \in lo .. (j - 1) : ov[h] = r}) = i}
    IN IF js = {} THEN -1 ELSE Min(js)

Count(f, lo, hi, n) == Cardinality({j \in lo .. (hi - 1) : f[j] = n})
\* c_max: the snapshot keeps it, so forgetting accepted C-instances never lowers it.
CMax(r, n) == Max({snap[r].cmax[n]} \cup {i \in CIdx : cAccB[r][n][i] >= 0})
\* n's C-instances r compacted: those its snapshot executed (below executed[n]).
SnapCnt(r, n) == Cardinality({p \in DOMAIN snap[r].exec : p > ebase[r] /\ snap[r].exec[p].o = n})
Compacted(r, n, i) == i < SnapCnt(r, n)

\* The vote r sends for view v to candidate c, reporting slots from `from` on.
OLogFrom(r, from) ==
    [j \in Slots |-> IF j >= from /\ oAccB[r][j] >= 0
                     THEN [b |-> oAccB[r][j], o |-> oAccV[r][j]] ELSE NoEntry]
VoteMsg(r, c, v, from) ==
    [type |-> "Vote", ep |-> ep[r], src |-> r, dst |-> c, view |-> v, from |-> from,
     olog |-> OLogFrom(r, from), cmax |-> [n \in R |-> CMax(r, n)],
     ev |-> est[r].v, es |-> est[r].s, eb |-> est[r].base, exec |-> Len(execd[r]),
     snap |-> snap[r].slot]

\* Un-commit what r learned committed in views older than v and did not execute.
ForgetOlder(r, v) ==
    [j \in Slots |-> oCom[r][j] /\ (Executed(r, j) \/ oAccB[r][j] >= v)]

(***************************************************************************)
(* The rebuild (core: view_change.rebuild_assignment_log).  Q is a set of  *)
(* vote records, one per voter, the candidate's own included; `from` is    *)
(* the candidate's executed prefix; cov[n] counts n's C-instances covered  *)
(* below it; M is the epoch's member set.  Returns [log |-> values of     *)
(* slots from, from+1, ..; stray].  The range ends at its first STOP: what *)
(* follows is dropped (docs/membership.md 3.2).                            *)
(***************************************************************************)
BuildLog(Q, from, cov, M) ==
    LET W    == Max({q.ev : q \in Q})
        wq   == CHOOSE q \in Q : q.ev = W /\ \A x \in Q : x.ev = W => q.src =< x.src
        old  == wq.es
        B    == wq.eb
        srcs == {q.src : q \in Q}
        ok(e, j) == e.b >= 0 /\ e.b =< W /\ ~(e.b < W /\ j >= B)
        elig(j) == {q.olog[j] : q \in {x \in Q : ok(x.olog[j], j)}}
        best(j) == IF j < from \/ elig(j) = {} THEN Empty
                   ELSE (CHOOSE e \in elig(j) : \A f \in elig(j) : e.b >= f.b).o
        lg0  == [j \in Slots |-> best(j)]
        high == {j \in Slots : \E q \in Q : q.olog[j].b > W}
        others == M \ (srcs \cup {old})
        infer == Cardinality(M) = 5 /\ ~MutNoInference /\ old \notin srcs /\ Cardinality(others) = 1
        m    == CHOOSE x \in M : x \in others
        need == Max({q.cmax[m] : q \in Q}) + 1
        holes == {j \in from .. (MaxSlot - 1) : lg0[j] = Empty}
        top  == IF \E j \in Slots : lg0[j] # Empty THEN Max({j \in Slots : lg0[j] # Empty}) + 1 ELSE from
        hole == IF {j \in holes : j < top} = {} THEN top ELSE Min({j \in holes : j < top})
        stray == {j \in Slots : j > hole /\ lg0[j] # Empty /\ lg0[j] # m}
        covd == cov[m] + Count(lg0, from, hole, m)
        len  == IF infer THEN hole - from + Max({0, need - covd}) ELSE top - from
        val(k) == LET j == from + k - 1
                  IN IF infer /\ j >= hole THEN m
                     ELSE IF lg0[j] = Empty THEN NoCl ELSE lg0[j]
        stops == {k \in 1 .. len : val(k) = Stop}
        cut  == IF stops = {} \/ MutOldEpochStillDecides THEN len ELSE Min(stops)
    IN [log |-> [k \in 1 .. cut |-> val(k)],
        bad |-> high # {} \/ (infer /\ stray # {}),
        fits |-> from + cut =< MaxSlot]

-----------------------------------------------------------------------------
Init ==
    /\ cProm = [a \in R |-> [n \in R |-> [i \in CIdx |-> -1]]]
    /\ cAccB = [a \in R |-> [n \in R |-> [i \in CIdx |-> -1]]]
    /\ cAccV = [a \in R |-> [n \in R |-> [i \in CIdx |-> Nil]]]
    /\ ownNext = [a \in R |-> 0]
    /\ oAccB = [a \in R |-> [j \in Slots |-> -1]]
    /\ oAccV = [a \in R |-> [j \in Slots |-> Empty]]
    /\ pView = [a \in R |-> 0]
    /\ est = [a \in R |-> [v |-> 0, s |-> Seq0, start |-> 0, base |-> 0]]
    /\ snap = [a \in R |-> NoSnap]
    /\ ep = [a \in R |-> 0]
    /\ ebase = [a \in R |-> 0]
    /\ up = [r \in R |-> TRUE]
    /\ joined = [r \in R |-> TRUE]
    /\ rc = [r \in R |-> TRUE]
    /\ oCom = [r \in R |-> [j \in Slots |-> FALSE]]
    /\ oComB = [r \in R |-> [j \in Slots |-> -1]]
    /\ cCom = [r \in R |-> [n \in R |-> [i \in CIdx |-> Nil]]]
    /\ execd = [r \in R |-> <<>>]
    /\ safeUpto = [r \in R |-> 0]
    /\ want = [s \in R |-> [n \in R |-> 0]]
    /\ cand = [r \in R |-> NoCand]
    /\ votedFor = [r \in R |-> -1]
    /\ prop = [r \in R |-> {}]
    /\ inflight = [r \in R |-> {}]
    /\ lost = [r \in R |-> {}]
    /\ crec = [r \in R |-> NoRec]
    /\ leaseUntil = [r \in R |-> 0]
    /\ handing = [r \in R |-> FALSE]
    /\ clock = 0
    /\ msgs = {}
    /\ nextCmd = 1
    /\ readyAt = [c \in Cmds |-> NoReady]
    /\ readyBefore = [c \in Cmds |-> {}]
    /\ cVotes = {}
    /\ oVotes = {}
    /\ execHist = {}
    /\ ranges = {}
    /\ rops = <<>>
    /\ crashes = 0
    /\ alarm = FALSE
    /\ execHigh = [r \in R |-> 0]

ReadySet == {c \in Cmds : readyAt[c] # NoReady}
-----------------------------------------------------------------------------
(***************************************************************************)
(* Command leader.                                                         *)
(***************************************************************************)

(* Propose(r): R_r puts a client command in its next C-instance C_r^i at   *)
(* the owner ballot (round 0), accepts it itself (durably: i is never      *)
(* reused) and sends the C-accept.  A command whose instance was chosen as *)
(* something else is re-proposed here too (lost[r]); (client id, seq)      *)
(* keeps it exactly-once.  The sequencer's own command raises its want.    *)
ProposeChoices(r) == (IF nextCmd =< MaxCmds THEN {nextCmd} ELSE {}) \cup lost[r]
ProposeCmd(r, c) ==
    /\ r \in Proposers /\ Est(r) /\ c \in ProposeChoices(r)
    /\ LET i == ownNext[r]
             v == pView[r]
         IN /\ i < MaxCIdx
            /\ cProm' = [cProm EXCEPT ![r][r][i] = r]
            /\ cAccB' = [cAccB EXCEPT ![r][r][i] = r]
            /\ cAccV' = [cAccV EXCEPT ![r][r][i] = c]
            /\ ownNext' = [ownNext EXCEPT ![r] = i + 1]
            /\ prop' = [prop EXCEPT ![r] = @ \cup {[n |-> r, i |-> i, b |-> r, v |-> c]}]
            /\ inflight' = [inflight EXCEPT ![r] = @ \cup {[i |-> i, c |-> c]}]
            /\ lost' = [lost EXCEPT ![r] = @ \ {c}]
            /\ want' = IF IsSeq(r) THEN [want EXCEPT ![r][r] = Max({@, i + 1})] ELSE want
            /\ msgs' = msgs \cup
                 {[type |-> "CAccept", ep |-> ep[r], src |-> r, view |-> v, n |-> r, i |-> i, b |-> r, v |-> c],
                  [type |-> "CAck", ep |-> ep[r], src |-> r, view |-> v, n |-> r, i |-> i, b |-> r]}
            /\ cVotes' = cVotes \cup {[e |-> ep[r], a |-> r, n |-> r, i |-> i, b |-> r, v |-> c]}
            /\ IF c = nextCmd
               THEN /\ nextCmd' = nextCmd + 1
                    /\ readyBefore' = [readyBefore EXCEPT ![c] = ReadySet]
               ELSE UNCHANGED <<epochVars, nextCmd, readyBefore>>
    /\ UNCHANGED <<epochVars, snap, oAccB, oAccV, pView, est, up, joined, rc, oCom, oComB, cCom, execd, safeUpto,
                   cand, votedFor, crec, leaseUntil, handing, clock, readyAt, oVotes, execHist, execHigh,
                   ranges, rops, crashes, alarm>>

Propose(r) == \E c \in ProposeChoices(r) : ProposeCmd(r, c)

(* SendCAccept(r, p): (re)send a C-value r proposes and has not seen        *)
(* committed, in r's current view (retransmission; resynchronisation after *)
(* a view change, when acceptors that voted dropped the old-view copies).   *)
SendCAccept(r, p) ==
    /\ Live(r) /\ p \in prop[r]
    /\ LET m == [type |-> "CAccept", ep |-> ep[r], src |-> r, view |-> pView[r], n |-> p.n, i |-> p.i,
                 b |-> p.b, v |-> p.v]
       IN /\ m \notin msgs
          /\ msgs' = msgs \cup {m}
    /\ UNCHANGED <<durableVars, volatileVars, clock, historyVars>>

(* SendCRequest(r, i): ask the sequencer to order C-instances 0..i of r     *)
(* (thrifty quorums without the sequencer, retransmission, resync).         *)
SendCRequest(r, i) ==
    /\ CRequests /\ Live(r) /\ i < ownNext[r]
    /\ LET m == [type |-> "CRequest", ep |-> ep[r], src |-> r, view |-> pView[r], i |-> i]
       IN /\ m \notin msgs
          /\ msgs' = msgs \cup {m}
    /\ UNCHANGED <<durableVars, volatileVars, clock, historyVars>>

\* r learns that its own C_r^i is chosen with value val.
OwnChosen(r, i, val) ==
    LET mine == {f \in inflight[r] : f.i = i}
        gone == {f.c : f \in {g \in mine : g.c # val}}
    IN /\ inflight' = [inflight EXCEPT ![r] = @ \ {g \in mine : g.c # val}]
       /\ lost' = [lost EXCEPT ![r] = @ \cup gone]

(* HandleCAck(r, m): the proposer of ballot m.b (the owner, or a           *)
(* recoverer) commits C_n^i once a phase-2 quorum (AccQ: a majority, 2 at  *)
(* N = 4) accepted its ballot, and broadcasts the C-commit.  Classic Paxos *)
(* phase 2.                                                                *)
HandleCAck(r, m) ==
    /\ m.type = "CAck" /\ Rcv(r, m) /\ Live(r) /\ BalOwner(m.b) = r /\ (m.view = pView[r] \/ MutAcceptOldView)
    /\ \E p \in prop[r] :
         /\ p.n = m.n /\ p.i = m.i /\ p.b = m.b
         /\ Cardinality({q \in Voting(ep[r]) : \E a \in msgs : a.type = "CAck" /\ a.ep = ep[r]
                                     /\ a.src = q /\ a.n = p.n /\ a.i = p.i /\ a.b = p.b}) >= AccQ(r)
         /\ cCom' = [cCom EXCEPT ![r][p.n][p.i] = p.v]
         /\ prop' = [prop EXCEPT ![r] = @ \ {p}]
         /\ msgs' = msgs \cup {[type |-> "CCommit", ep |-> ep[r], view |-> pView[r], n |-> p.n, i |-> p.i,
                                v |-> p.v]}
         /\ IF p.n = r THEN OwnChosen(r, p.i, p.v) ELSE UNCHANGED <<epochVars, inflight, lost>>
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, execd, safeUpto, want, cand, votedFor,
                   crec, leaseUntil, handing, clock, historyVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Acceptor of C-instances.                                                *)
(***************************************************************************)

(* HandleCAccept(r, m, learn): Paxos phase 2b for C_n^i in r's view      *)
(* (messages of other views are dropped: after voting, an old-view         *)
(* C-accept is refused, so the C[m] the vote reported stays an upper       *)
(* bound, pitfall 5), plus the sequencer's trigger: want[n] :=             *)
(* max(want[n], i+1), so a duplicated or retransmitted C-accept never      *)
(* allocates twice.                                                        *)
(*                                                                         *)
(* Learning on accept (core: Acceptor.handle_c_accept, traced              *)
(* HandleCAccept learned=True).  A proposer (the owner, or a recoverer)    *)
(* accepts its own value at its ballot before it sends the C-accept        *)
(* (ProposeCmd, CPromiseQuorum; only a ballot's owner sends its            *)
(* C-accepts), so once r accepts it from m.src # r, {m.src, r} accepted    *)
(* m.v at m.b: where the phase-2 quorum is 2 (N = 3 and 4 here) it is     *)
(* chosen, and r marks it committed at once, as HandleCCommit does.        *)
(* learn = TRUE is that step; learn = FALSE is the step without it: the    *)
(* model lets the acceptor learn or not (the code before this rule never   *)
(* learned here; trace validation of either is then a subset), and a      *)
(* trace pins it when it names `learned`.  A re-delivered C-accept r      *)
(* accepted already may teach it too, as long as r has not learned it     *)
(* (the code learns whenever the instance is not committed there: after a *)
(* restart, a retransmission).  Scope: as HandleCCommit, only              *)
(* a Learner or the instance's owner learns.                               *)
LearnsOnAccept(r, m) ==
    /\ m.src # r
    /\ AccQ(r) = 2 \/ MutLearnCOnAcceptAnyN
    /\ r \in Learners \/ m.n = r
HandleCAccept(r, m, learn) ==
    /\ m.type = "CAccept" /\ Rcv(r, m) /\ Live(r)
    /\ IF MutAcceptOldView THEN m.view =< pView[r] ELSE m.view = pView[r]
    /\ LET acc  == (r \in CAcceptors \/ r = BalOwner(m.b)) /\ m.b >= cProm[r][m.n][m.i]
                   /\ (cCom[r][m.n][m.i] = Nil \/ cCom[r][m.n][m.i] = m.v)
                   \* (a compacted C-instance was executed: never accepted again)
                   /\ (~Compacted(r, m.n, m.i) \/ MutCompactedLooksEmpty)
           seqt == IsSeq(r) /\ m.src = m.n /\ m.view = pView[r]
           w    == IF MutNoAllocGuard THEN Min({want[r][m.n] + 1, MaxSlot})
                   ELSE Max({want[r][m.n], m.i + 1})
           ack  == [type |-> "CAck", ep |-> ep[r], src |-> r, view |-> pView[r], n |-> m.n, i |-> m.i, b |-> m.b]
       IN /\ acc \/ seqt
          \* (a C-accept r accepted already still teaches it the value: after a restart,
          \* which forgets commits, a retransmission does, as in the code)
          /\ \/ acc /\ (cAccB[r][m.n][m.i] # m.b \/ ack \notin msgs \/ (learn /\ cCom[r][m.n][m.i] = Nil))
             \/ seqt /\ w # want[r][m.n]
          /\ learn => acc /\ LearnsOnAccept(r, m)
          /\ cProm' = IF acc THEN [cProm EXCEPT ![r][m.n][m.i] = m.b] ELSE cProm
          /\ cAccB' = IF acc THEN [cAccB EXCEPT ![r][m.n][m.i] = m.b] ELSE cAccB
          /\ cAccV' = IF acc THEN [cAccV EXCEPT ![r][m.n][m.i] = m.v] ELSE cAccV
          /\ cVotes' = IF acc THEN cVotes \cup {[e |-> ep[r], a |-> r, n |-> m.n, i |-> m.i, b |-> m.b, v |-> m.v]}
                       ELSE cVotes
          /\ msgs' = IF acc THEN msgs \cup {ack} ELSE msgs
          /\ want' = IF seqt THEN [want EXCEPT ![r][m.n] = w] ELSE want
          \* (learning: the bookkeeping of HandleCCommit)
          /\ IF learn
             THEN /\ cCom' = [cCom EXCEPT ![r][m.n][m.i] = m.v]
                  /\ prop' = [prop EXCEPT ![r] = {p \in @ : ~(p.n = m.n /\ p.i = m.i)}]
                  /\ IF m.n = r THEN OwnChosen(r, m.i, m.v) ELSE UNCHANGED <<inflight, lost>>
             ELSE UNCHANGED <<cCom, prop, inflight, lost>>
    /\ UNCHANGED <<epochVars, ownNext, snap, oAccB, oAccV, pView, est, up, joined, rc, oCom, oComB, execd,
                   safeUpto, cand, votedFor, crec, leaseUntil, handing,
                   clock, nextCmd, readyAt, readyBefore, oVotes, execHist, execHigh, ranges, rops, crashes,
                   alarm>>

(* HandleCCommit(r, m): learn that C_n^i is chosen.  An own instance chosen *)
(* as something else (recovered as a no-op meanwhile) is re-proposed.       *)
HandleCCommit(r, m) ==
    /\ m.type = "CCommit" /\ Rcv(r, m) /\ Live(r) /\ m.view = pView[r] /\ (r \in Learners \/ m.n = r)
    /\ cCom[r][m.n][m.i] = Nil /\ ~Compacted(r, m.n, m.i)
    /\ cCom' = [cCom EXCEPT ![r][m.n][m.i] = m.v]
    /\ prop' = [prop EXCEPT ![r] = {p \in @ : ~(p.n = m.n /\ p.i = m.i)}]
    /\ IF m.n = r THEN OwnChosen(r, m.i, m.v) ELSE UNCHANGED <<epochVars, inflight, lost>>
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, execd, safeUpto, want, cand, votedFor,
                   crec, leaseUntil, handing, clock, msgs, historyVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Sequencer.                                                              *)
(***************************************************************************)

(* HandleCRequest(s, m): the sequencer of m's view learns that n has      *)
(* C-instances 0..i.  Same guard as HandleCAccept.                         *)
HandleCRequest(s, m) ==
    /\ m.type = "CRequest" /\ Rcv(s, m) /\ IsSeq(s) /\ m.view = pView[s]
    /\ LET w == IF MutNoAllocGuard THEN Min({want[s][m.src] + 1, MaxSlot})
                ELSE Max({want[s][m.src], m.i + 1})
       IN /\ w # want[s][m.src]
          /\ want' = [want EXCEPT ![s][m.src] = w]
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, execd, safeUpto, cand, votedFor,
                   prop, inflight, lost, crec, leaseUntil, handing, clock, msgs, historyVars>>

(* Resync(s): a new sequencer orders its own C-instances still in flight   *)
(* (section 2.8; the core: _resync), as Propose does for a sequencer.       *)
Resync(s) ==
    /\ IsSeq(s) /\ inflight[s] # {}
    /\ LET w == Max({f.i + 1 : f \in inflight[s]})
       IN /\ w > want[s][s]
          /\ want' = [want EXCEPT ![s][s] = w]
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, execd, safeUpto, cand, votedFor,
                   prop, inflight, lost, crec, leaseUntil, handing, clock, msgs, historyVars>>

(* AllocateO(s, n): the next O-instance goes to n while n's coverage in s's *)
(* log is below want[n] (Fig. 5 line 13, made idempotent).  s accepts it    *)
(* itself, durably (ballot = view); sending is SendOAccept.                 *)
AllocateO(s, n) ==
    /\ IsSeq(s)
    /\ LET e == Acc(s)
           v == pView[s]
       IN /\ e < MaxSlot
          /\ Count(OV(s), ebase[s], e, n) < want[s][n]
          \* (nothing after a STOP, docs/membership.md 3.2)
          /\ ~HasStop(s, e) \/ MutOldEpochStillDecides
          /\ oAccB' = [oAccB EXCEPT ![s][e] = v]
          /\ oAccV' = [oAccV EXCEPT ![s][e] = n]
          /\ oCom' = [oCom EXCEPT ![s][e] = FALSE]
          /\ oVotes' = oVotes \cup {[e |-> ep[s], a |-> s, j |-> e, b |-> v, o |-> n]}
    /\ UNCHANGED <<epochVars, cProm, cAccB, cAccV, ownNext, snap, pView, est, up, joined, rc, oComB, cCom, execd,
                   safeUpto, want, cand, votedFor, prop, inflight, lost, crec, leaseUntil,
                   handing, clock, msgs, nextCmd, readyAt, readyBefore, cVotes, execHist, execHigh, ranges,
                   rops, crashes, alarm>>

(* AllocateStop(s) (core: Sequencer.allocate_stop): a membership change is *)
(* pending (the model abstracts the change command: one may be pending at  *)
(* any time while a next epoch exists): the sequencer allocates the STOP   *)
(* as its next O-instance, once per log, and nothing after it (AllocateO). *)
(* It is committed like the sequencer's own O-instances: by the majority   *)
(* rule (CommitO at the sequencer, for every N), and its O-commit is       *)
(* broadcast (docs/membership.md 3.1).                                     *)
AllocateStop(s) ==
    /\ IsSeq(s) /\ ep[s] + 1 < NEp
    /\ LET e == Acc(s)
           v == pView[s]
       IN /\ e < MaxSlot
          /\ ~HasStop(s, e)
          /\ oAccB' = [oAccB EXCEPT ![s][e] = v]
          /\ oAccV' = [oAccV EXCEPT ![s][e] = Stop]
          /\ oCom' = [oCom EXCEPT ![s][e] = FALSE]
          /\ oVotes' = oVotes \cup {[e |-> ep[s], a |-> s, j |-> e, b |-> v, o |-> Stop]}
    /\ UNCHANGED <<epochVars, cProm, cAccB, cAccV, ownNext, snap, pView, est, up, joined, rc, oComB, cCom,
                   execd, safeUpto, want, cand, votedFor, prop, inflight, lost, crec, leaseUntil,
                   handing, clock, msgs, nextCmd, readyAt, readyBefore, cVotes, execHist, execHigh,
                   ranges, rops, crashes, alarm>>

\* The O-accept of slots start .. Acc(s)-1 of s's log; rebuilt: it begins with
\* the whole rebuilt range of s's view.
OAcceptMsg(s, start, rebuilt) ==
    [type |-> "OAccept", ep |-> ep[s], src |-> s, view |-> pView[s], start |-> start,
     vals |-> [k \in 1 .. (Acc(s) - start) |-> oAccV[s][start + k - 1]],
     base |-> est[s].base, rng |-> rebuilt]

(* SendOAccept(s, start, rebuilt): the sequencer sends the O-instances of   *)
(* its log from `start` (the paper's piggy-backing: always up to its end).  *)
(* A peer that has not acknowledged the range gets the range first, whole. *)
SendOAccept(s, start, rebuilt) ==
    /\ IsSeq(s)
    /\ IF rebuilt THEN start = est[s].start /\ est[s].v > 0
       ELSE est[s].base =< start /\ start < Acc(s)
    \* (nothing below its snapshot: a sequencer that compacted into its range can no
    \* longer send it whole; a peer lacking it installs a snapshot or a view changes)
    /\ start >= snap[s].slot
    /\ LET m == OAcceptMsg(s, start, rebuilt)
       IN /\ m \notin msgs
          /\ msgs' = msgs \cup {m}
    /\ UNCHANGED <<durableVars, volatileVars, clock, historyVars>>
-----------------------------------------------------------------------------
(***************************************************************************)
(* Acceptor of O-instances, and how a view is established.                 *)
(***************************************************************************)

\* The accepted prefix (Acc) of a replica in view v with range end b, on a
\* ballot vector bv.
AccOn(bv, b, v) == Max({k \in b .. MaxSlot : \A j \in b .. (k - 1) : bv[j] = v})

\* Would values vals from slot start change a slot r executed?  (The core
\* counts an invariant alarm and rejects the message.)
RevokesExecuted(r, start, vals) ==
    \E k \in DOMAIN vals : Executed(r, start + k - 1) /\ execd[r][start + k].o # vals[k]
\* A slot r holds at ballot v with another value: a broken peer (rejected).
Contradicts(r, start, vals, v) ==
    \E k \in DOMAIN vals : start + k - 1 < MaxSlot /\ oAccB[r][start + k - 1] = v
                           /\ oAccV[r][start + k - 1] # vals[k]

(* HandleOAccept(r, m): accept O-instances at ballot m.view.  A replica    *)
(* not yet established in m's view accepts only an O-accept that begins    *)
(* with the view's whole rebuilt range, in one durable record             *)
(* (ViewEstablished), which establishes the view: its sequencer, its base, *)
(* and every later O-accept of it.  Within a view acceptance is contiguous *)
(* from the range: an O-accept beyond a gap waits.  Accepting at ballot v  *)
(* promises v.  The O-ACK goes to the sender (and, N = 4, 6, 7, owners).   *)
HandleOAccept(r, m) ==
    /\ m.type = "OAccept" /\ Rcv(r, m) /\ Live(r) /\ m.view >= pView[r]
    /\ LET v    == m.view
           estd == joined[r] /\ est[r].v = v
           endm == m.start + Len(m.vals)
       IN /\ estd \/ m.rng
          /\ estd => m.src = est[r].s /\ m.base = est[r].base
          /\ endm =< MaxSlot
          /\ IF RevokesExecuted(r, m.start, m.vals)
             THEN /\ alarm' = TRUE
                  /\ UNCHANGED <<durableVars, volatileVars, msgs, oVotes>>
             ELSE
             /\ ~Contradicts(r, m.start, m.vals, v)
             /\ LET rng  == IF estd THEN <<>> ELSE SubSeq(m.vals, 1, m.base - m.start)
                    \* (the range below r's snapshot is cut: r executed it, 16.5)
                    inRng(j) == m.start =< j /\ j < m.base /\ j >= snap[r].slot
                    b1   == IF estd THEN oAccB[r]
                            ELSE [j \in Slots |-> IF inRng(j) THEN v ELSE oAccB[r][j]]
                    v1   == IF estd THEN oAccV[r]
                            ELSE [j \in Slots |-> IF inRng(j) THEN m.vals[j - m.start + 1]
                                                  ELSE oAccV[r][j]]
                    base == Max({IF estd THEN est[r].base ELSE m.base, snap[r].slot})
                    acc0 == AccOn(b1, base, v)
                    take(j) == m.start =< acc0 /\ acc0 =< j /\ j < endm
                    b2   == [j \in Slots |-> IF take(j) THEN v ELSE b1[j]]
                    v2   == [j \in Slots |-> IF take(j) THEN m.vals[j - m.start + 1] ELSE v1[j]]
                    ack  == [type |-> "OAck", ep |-> ep[r], src |-> r, view |-> v, upto |-> AccOn(b2, base, v)]
                    newv == {[e |-> ep[r], a |-> r, j |-> j, b |-> v, o |-> v2[j]] :
                               j \in {x \in Slots : b2[x] = v /\ (b1[x] # v \/ ~estd)}}
                IN /\ b2 # oAccB[r] \/ v2 # oAccV[r] \/ ~estd \/ ack \notin msgs
                   /\ oAccB' = [oAccB EXCEPT ![r] = b2]
                   /\ oAccV' = [oAccV EXCEPT ![r] = v2]
                   /\ oVotes' = oVotes \cup newv
                   /\ msgs' = msgs \cup {ack}
                   /\ IF estd
                      THEN UNCHANGED <<epochVars, pView, est, joined, rc, oCom, oComB, safeUpto, cand, votedFor,
                                       want, handing>>
                      ELSE /\ pView' = [pView EXCEPT ![r] = v]
                           /\ est' = [est EXCEPT ![r] = [v |-> v, s |-> m.src, start |-> m.start,
                                                          base |-> m.base]]
                           /\ joined' = [joined EXCEPT ![r] = TRUE]
                           /\ rc' = [rc EXCEPT ![r] = FALSE]
                           /\ oCom' = [oCom EXCEPT ![r] = [j \in Slots |->
                                         oCom[r][j] /\ (Executed(r, j)
                                           \/ (oAccB[r][j] >= v /\ ~(m.start =< j /\ j < m.base)))]]
                           /\ oComB' = oComB
                           /\ safeUpto' = [safeUpto EXCEPT ![r] = 0]
                           /\ cand' = [cand EXCEPT ![r] = NoCand]
                           /\ votedFor' = [votedFor EXCEPT ![r] = -1]
                           /\ want' = [want EXCEPT ![r] = [n \in R |-> 0]]
                           /\ handing' = [handing EXCEPT ![r] = FALSE]
                   /\ UNCHANGED alarm
    /\ UNCHANGED <<epochVars, cProm, cAccB, cAccV, ownNext, snap, up, cCom, execd, prop, inflight, lost, crec,
                   leaseUntil, clock, nextCmd, readyAt, readyBefore, cVotes, execHist, execHigh, ranges,
                   rops, crashes>>

(* HandleNewView(r, m): the range of m's view is chosen (the paper's       *)
(* notification).  Establishes the view if r had not, and commits the      *)
(* range's unexecuted slots; an executed slot is never overwritten.         *)
HandleNewView(r, m) ==
    /\ m.type = "NewView" /\ Rcv(r, m) /\ Live(r) /\ m.view >= pView[r]
    /\ LET v    == m.view
           estd == joined[r] /\ est[r].v = v
           endm == m.start + Len(m.vals)
           inR(j) == m.start =< j /\ j < endm /\ j >= snap[r].slot
       IN /\ estd => m.src = est[r].s /\ m.start = est[r].start /\ endm = est[r].base
          /\ endm =< MaxSlot
          /\ ~(estd /\ rc[r])
          /\ IF RevokesExecuted(r, m.start, m.vals)
             THEN /\ alarm' = TRUE
                  /\ UNCHANGED <<durableVars, volatileVars, msgs, oVotes>>
             ELSE
             /\ ~Contradicts(r, m.start, m.vals, v)
             /\ oAccB' = [oAccB EXCEPT ![r] = [j \in Slots |-> IF inR(j) THEN v ELSE @[j]]]
             /\ oAccV' = [oAccV EXCEPT ![r] = [j \in Slots |-> IF inR(j) THEN m.vals[j - m.start + 1]
                                                                ELSE @[j]]]
             /\ oVotes' = oVotes \cup {[e |-> ep[r], a |-> r, j |-> j, b |-> v, o |-> m.vals[j - m.start + 1]] :
                                        j \in {x \in Slots : inR(x)}}
             /\ oCom' = [oCom EXCEPT ![r] = [j \in Slots |->
                           inR(j) \/ (oCom[r][j] /\ (estd \/ Executed(r, j) \/ oAccB[r][j] >= v))]]
             /\ oComB' = [oComB EXCEPT ![r] = [j \in Slots |->
                            IF inR(j) /\ ~Executed(r, j) /\ ~(oCom[r][j] /\ (estd \/ oAccB[r][j] >= v))
                            THEN v ELSE @[j]]]
             /\ rc' = [rc EXCEPT ![r] = TRUE]
             /\ pView' = [pView EXCEPT ![r] = v]
             /\ est' = [est EXCEPT ![r] = [v |-> v, s |-> m.src, start |-> m.start, base |-> endm]]
             /\ joined' = [joined EXCEPT ![r] = TRUE]
             /\ IF estd THEN UNCHANGED <<epochVars, safeUpto, cand, votedFor, want, handing>>
                ELSE /\ safeUpto' = [safeUpto EXCEPT ![r] = 0]
                     /\ cand' = [cand EXCEPT ![r] = NoCand]
                     /\ votedFor' = [votedFor EXCEPT ![r] = -1]
                     /\ want' = [want EXCEPT ![r] = [n \in R |-> 0]]
                     /\ handing' = [handing EXCEPT ![r] = FALSE]
             /\ UNCHANGED <<epochVars, msgs, alarm>>
    /\ UNCHANGED <<epochVars, cProm, cAccB, cAccV, ownNext, snap, up, cCom, execd, prop, inflight, lost, crec,
                   leaseUntil, clock, nextCmd, readyAt, readyBefore, cVotes, execHist, execHigh, ranges,
                   rops, crashes>>

(* AskRange(r, m): a heartbeat or an O-accept of a view r has not           *)
(* established (it lacks the range): r asks for the range (O-ACK upto -1).  *)
(* A heartbeat never establishes a view (bug 2); MutEstOnHeartbeat makes it *)
(* raise the reported established view the way the old code did.           *)
AskRange(r, m) ==
    /\ MutEstOnHeartbeat
    /\ m.type \in {"Heartbeat", "OAccept"} /\ Rcv(r, m) /\ Live(r) /\ m.view >= pView[r]
    /\ ~(joined[r] /\ est[r].v = m.view)
    /\ m.type = "OAccept" => ~m.rng
    /\ LET ask == [type |-> "OAck", ep |-> ep[r], src |-> r, view |-> m.view, upto |-> -1]
       IN IF MutEstOnHeartbeat /\ m.type = "Heartbeat" /\ est[r].v < m.view
          THEN /\ est' = [est EXCEPT ![r] = [@ EXCEPT !.v = m.view, !.s = m.src]]
               /\ pView' = [pView EXCEPT ![r] = m.view]
               /\ joined' = [joined EXCEPT ![r] = FALSE]
               /\ msgs' = msgs \cup {ask}
          ELSE /\ ask \notin msgs
               /\ msgs' = msgs \cup {ask}
               /\ UNCHANGED <<epochVars, est, pView, joined>>
    /\ UNCHANGED <<epochVars, cProm, cAccB, cAccV, ownNext, snap, oAccB, oAccV, up, rc, oCom, oComB, cCom, execd,
                   safeUpto, want, cand, votedFor, prop, inflight, lost, crec, leaseUntil,
                   handing, clock, historyVars>>

(* HandleOCommit(r, m): O_j was chosen at ballot m.b with value m.o.  r     *)
(* records it durably at that ballot before it may execute it (so an        *)
(* executed slot is held by a majority even when it committed with two      *)
(* acceptors, N = 5).  A commit is relayed only within a view, whose        *)
(* members forgot older unexecuted commits: one below the view is final.    *)
HandleOCommit(r, m) ==
    /\ m.type = "OCommit" /\ Rcv(r, m) /\ Live(r) /\ r \in Learners /\ m.view = pView[r]
    /\ LET j == m.slot
       IN /\ ~(oAccB[r][j] = m.b /\ oAccV[r][j] # m.o)
          /\ IF Executed(r, j)
             THEN /\ execd[r][j + 1].o # m.o
                  /\ alarm' = TRUE
                  /\ UNCHANGED <<epochVars, oAccB, oAccV, oCom, oComB, oVotes>>
             ELSE IF oAccB[r][j] > m.b
             THEN IF oAccV[r][j] = m.o
                  THEN \* (an older commit ballot than the one r knows says "final")
                       /\ ~oCom[r][j] \/ m.b < oComB[r][j]
                       /\ oCom' = [oCom EXCEPT ![r][j] = TRUE]
                       /\ oComB' = [oComB EXCEPT ![r][j] = m.b]
                       /\ UNCHANGED <<epochVars, oAccB, oAccV, oVotes, alarm>>
                  ELSE /\ alarm' = TRUE
                       /\ UNCHANGED <<epochVars, oAccB, oAccV, oCom, oComB, oVotes>>
             ELSE IF m.b < est[r].v /\ j >= est[r].base
             THEN /\ alarm' = TRUE
                  /\ UNCHANGED <<epochVars, oAccB, oAccV, oCom, oComB, oVotes>>
             ELSE /\ ~oCom[r][j] \/ oAccB[r][j] # m.b
                  /\ oAccB' = [oAccB EXCEPT ![r][j] = m.b]
                  /\ oAccV' = [oAccV EXCEPT ![r][j] = m.o]
                  /\ oCom' = [oCom EXCEPT ![r][j] = TRUE]
                  /\ oComB' = [oComB EXCEPT ![r][j] = m.b]
                  /\ oVotes' = oVotes \cup {[e |-> ep[r], a |-> r, j |-> j, b |-> m.b, o |-> m.o]}
                  /\ UNCHANGED alarm
    /\ UNCHANGED <<epochVars, cProm, cAccB, cAccV, ownNext, snap, pView, est, up, joined, rc, cCom, execd,
                   safeUpto, want, cand, votedFor, prop, inflight, lost, crec, leaseUntil,
                   handing, clock, msgs, nextCmd, readyAt, readyBefore, cVotes, execHist, execHigh, ranges,
                   rops, crashes>>

(* RelayOCommit(r, j) and RelayCCommit(r, n, i): answer a LearnRequest     *)
(* with a commit r knows, in r's view.                                     *)
RelayOCommit(r, j) ==
    /\ Relays /\ Live(r) /\ oCom[r][j] /\ oComB[r][j] >= 0
    /\ j >= snap[r].slot     \* (below it, the answer is the snapshot: InstallSnapshot)
    /\ LET m == [type |-> "OCommit", ep |-> ep[r], view |-> pView[r], slot |-> j, b |-> oComB[r][j],
                 o |-> oAccV[r][j]]
       IN /\ m \notin msgs
          /\ msgs' = msgs \cup {m}
    /\ UNCHANGED <<durableVars, volatileVars, clock, historyVars>>

RelayCCommit(r, n, i) ==
    /\ Relays /\ Live(r) /\ cCom[r][n][i] # Nil /\ ~Compacted(r, n, i)
    /\ LET m == [type |-> "CCommit", ep |-> ep[r], view |-> pView[r], n |-> n, i |-> i, v |-> cCom[r][n][i]]
       IN /\ m \notin msgs
          /\ msgs' = msgs \cup {m}
    /\ UNCHANGED <<durableVars, volatileVars, clock, historyVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Learner and executor.                                                   *)
(***************************************************************************)

(* CommitO(r) (core: _advance_safe_prefix): extend r's safe prefix: every  *)
(* O_k below it accepted by a phase-2 quorum (AccQ: a majority, 2 of 4),   *)
(* or, N = 5 and r not the sequencer, by r and the sequencer once the      *)
(* view's range is chosen (Fig. 5 lines 21, 26, 30).  r commits its own    *)
(* O-instances there and broadcasts their                                  *)
(* O-commits; the sequencer learns every O-instance there.                  *)
CommitOTo(r, safe) ==
    /\ Est(r)
    /\ safe =< SafePrefix(r)
    /\ LET v == pView[r]
           \* (MutStopTwoAcceptors: a STOP committed like r's own O-instances)
           mine(j) == oAccV[r][j] = r \/ (MutStopTwoAcceptors /\ oAccV[r][j] = Stop)
           own == {j \in Slots : j < safe /\ mine(j) /\ ~oCom[r][j]}
           all == IF IsSeq(r) THEN {j \in Slots : snap[r].slot =< j /\ j < safe} ELSE {}
           ownIn == {j \in Slots : safeUpto[r] =< j /\ j < safe /\ mine(j)}
       IN /\ safe > safeUpto[r]
          \* (the core traces the step only when it commits or counts an own slot)
          /\ ownIn \cup {j \in all : ~oCom[r][j]} # {}
          /\ safeUpto' = [safeUpto EXCEPT ![r] = safe]
          /\ oCom' = [oCom EXCEPT ![r] = [j \in Slots |-> @[j] \/ j \in own \/ j \in all]]
          /\ oComB' = [oComB EXCEPT ![r] = [j \in Slots |->
                         IF ~oCom[r][j] /\ (j \in own \/ j \in all) THEN oAccB[r][j] ELSE @[j]]]
          \* (the sequencer also broadcasts the commit of its STOP, membership.md 3.1)
          /\ LET stops == {j \in all : oAccV[r][j] = Stop /\ ~oCom[r][j]}
             IN msgs' = msgs \cup {[type |-> "OCommit", ep |-> ep[r], view |-> v, slot |-> j,
                                    b |-> oAccB[r][j], o |-> oAccV[r][j]] : j \in own \cup stops}
    /\ UNCHANGED <<durableVars, up, joined, rc, cCom, execd, want, cand, votedFor, prop,
                   inflight, lost, crec, leaseUntil, handing, clock, historyVars>>

\* The safe prefix a replica computes from the O-ACKs it has received, which
\* may be fewer than the spec's message set holds: any prefix up to SafePrefix.
CommitO(r) == \E k \in 1 .. MaxSlot : CommitOTo(r, k)

(* LearnStopAt(r, j) (core: Learner.learn_stop_from_acks): a member that   *)
(* is not the sequencer learns its epoch's STOP, at slot j, chosen from the *)
(* acknowledgements: the STOP's O-accept goes to every member and every     *)
(* acceptor acknowledges it to every member (docs/membership.md 3.1; the    *)
(* model's O-ACKs reach anyone).  Once a phase-2 quorum (AccQ: a majority, *)
(* 2 of 4), r among them, accepted every O-instance up to and including   *)
(* the STOP in r's view, all of them                                       *)
(* are chosen at that ballot, and r commits them, without the sequencer's   *)
(* O-commit.                                                                *)
LearnStopAt(r, j) ==
    /\ Est(r) /\ ~IsSeq(r) /\ r \in Learners /\ r \in StopLearners
    /\ snap[r].slot =< j /\ j < Acc(r)
    /\ oAccV[r][j] = Stop /\ ~oCom[r][j]
    /\ j < IF MutLearnStopMinority THEN SeqAcc(r) ELSE QuorumAcc(r)
    /\ LET now(k) == snap[r].slot =< k /\ k =< j
       IN /\ oCom' = [oCom EXCEPT ![r] = [k \in Slots |-> @[k] \/ now(k)]]
          /\ oComB' = [oComB EXCEPT ![r] = [k \in Slots |->
                         IF ~oCom[r][k] /\ now(k) THEN oAccB[r][k] ELSE @[k]]]
    /\ UNCHANGED <<durableVars, up, joined, rc, cCom, execd, safeUpto, want, cand, votedFor, prop,
                   inflight, lost, crec, leaseUntil, handing, clock, msgs, historyVars>>

LearnStop(r) == \E j \in Slots : LearnStopAt(r, j)

(* Ready(r, f): own C-instance f.i holds f.c, is committed, and the slot   *)
(* the counting rule gives it lies in the safe prefix: answer the client.  *)
Ready(r, f) ==
    /\ Est(r) /\ f \in inflight[r]
    /\ cCom[r][r][f.i] = f.c
    /\ LET j == SlotOf(r, f.i)
       IN /\ 0 =< j /\ j < safeUpto[r]
          \* (nothing after a STOP is READY, docs/membership.md 3.2)
          /\ ~HasStop(r, j) \/ MutOldEpochStillDecides
          /\ inflight' = [inflight EXCEPT ![r] = @ \ {f}]
          /\ readyAt' = IF readyAt[f.c] = NoReady
                        THEN [readyAt EXCEPT ![f.c] = [n |-> r, i |-> f.i, j |-> j, v |-> pView[r],
                                                                 e |-> ep[r]]]
                        ELSE readyAt
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, execd, safeUpto, want, cand,
                   votedFor, prop, lost, crec, leaseUntil, handing, clock, msgs, nextCmd,
                   readyBefore, cVotes, oVotes, execHist, execHigh, ranges, rops, crashes, alarm>>

(* Execute(r): the next slot j is committed; no-cl skips it; otherwise it  *)
(* runs C_n^k, k = n's C-instances covered by slots < j, once C_n^k is      *)
(* committed (a no-op runs nothing).  Counting is recomputed from the       *)
(* executed prefix, never cached across views (pitfall 2).                  *)
Execute(r) ==
    /\ Live(r) /\ r \in Learners
    /\ LET j == Len(execd[r])
           o == oAccV[r][j]
           k == Cardinality({p \in DOMAIN execd[r] : p > ebase[r] /\ execd[r][p].o = o})
       IN /\ j < MaxSlot /\ oCom[r][j]
          /\ o # Stop      \* (the executor stops at the STOP: StartEpoch executes it)
          /\ IF o = NoCl THEN TRUE ELSE k < MaxCIdx /\ cCom[r][o][k] # Nil
          /\ LET e == IF o = NoCl THEN [slot |-> j, o |-> NoCl, ci |-> -1, cmd |-> NoOp, v |-> pView[r],
                                         ep |-> ep[r]]
                      ELSE [slot |-> j, o |-> o, ci |-> k, cmd |-> cCom[r][o][k], v |-> pView[r],
                            ep |-> ep[r]]
             IN /\ execd' = [execd EXCEPT ![r] = Append(@, e)]
                /\ execHist' = execHist \cup {e}
                /\ execHigh' = [execHigh EXCEPT ![r] = Max({@, j + 1})]
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, safeUpto, want, cand, votedFor,
                   prop, inflight, lost, crec, leaseUntil, handing, clock, msgs, nextCmd,
                   readyAt, readyBefore, cVotes, oVotes, ranges, rops, crashes, alarm>>
-----------------------------------------------------------------------------
(***************************************************************************)
(* View change.                                                            *)
(***************************************************************************)

(* StartViewChange(r): a timeout, a straggler poll or a hand-over (any      *)
(* replica, any time: the model has no timers).  r becomes a candidate for  *)
(* a higher view and sends V-requests; it promises the view only when it    *)
(* wins (docs/recovery.md section 0), and keeps serving its old view.       *)
StartViewChangeTo(r, v) ==
    /\ r \in Candidates /\ Live(r)
    /\ v > Max({cand[r].v, pView[r]})
    /\ LET from == Len(execd[r])
         IN /\ cand' = [cand EXCEPT ![r] = [v |-> v, from |-> from]]
            /\ msgs' = msgs \cup {[type |-> "VRequest", ep |-> ep[r], src |-> r, view |-> v, from |-> from]}
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, execd, safeUpto, want, votedFor,
                   prop, inflight, lost, crec, leaseUntil, handing, clock, historyVars>>

StartViewChange(r) == \E v \in Views : StartViewChangeTo(r, v)

(* AbandonCandidacy(r): a heartbeat of a live sequencer, or a timeout.      *)
AbandonCandidacy(r) ==
    /\ Retries /\ Live(r) /\ cand[r] # NoCand
    /\ cand' = [cand EXCEPT ![r] = NoCand]
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, execd, safeUpto, want, votedFor,
                   prop, inflight, lost, crec, leaseUntil, handing, clock, msgs, historyVars>>

(* HandleVRequest(r, m): vote at most once per view, only for a view above  *)
(* the promised one (raised durably before the vote leaves), and never      *)
(* before the lease r granted expires (section 3.5).  A live sequencer      *)
(* votes only for the target of its own hand-over.  From now on r drops     *)
(* every message of an older view (fencing) and forgets the unexecuted      *)
(* commits of older views (revocable with N = 5).  A lost vote is resent.   *)
HandleVRequest(r, m) ==
    /\ m.type = "VRequest" /\ Rcv(r, m) /\ r \in Voters /\ Live(r)
    /\ \/ /\ m.view > pView[r]
          \* (a vote for the lease's own holder keeps the promise the lease made)
          /\ clock >= leaseUntil[r] \/ m.src = SeqOf(r)
          /\ IsSeq(r) => handing[r]
          /\ pView' = [pView EXCEPT ![r] = m.view]
          /\ joined' = [joined EXCEPT ![r] = FALSE]
          /\ rc' = [rc EXCEPT ![r] = FALSE]
          /\ oCom' = [oCom EXCEPT ![r] = ForgetOlder(r, m.view)]
          /\ oComB' = oComB
          /\ safeUpto' = [safeUpto EXCEPT ![r] = 0]
          /\ cand' = [cand EXCEPT ![r] = NoCand]
          /\ votedFor' = [votedFor EXCEPT ![r] = m.src]
          /\ want' = [want EXCEPT ![r] = [n \in R |-> 0]]
          /\ handing' = [handing EXCEPT ![r] = FALSE]
          /\ msgs' = msgs \cup {VoteMsg(r, m.src, m.view, m.from)}
       \/ /\ Retries /\ m.view = pView[r] /\ votedFor[r] = m.src /\ ~joined[r]
          /\ VoteMsg(r, m.src, m.view, m.from) \notin msgs
          /\ msgs' = msgs \cup {VoteMsg(r, m.src, m.view, m.from)}
          /\ UNCHANGED <<epochVars, pView, joined, rc, oCom, oComB, safeUpto, cand, votedFor, want, handing>>
    /\ UNCHANGED <<epochVars, cProm, cAccB, cAccV, ownNext, snap, oAccB, oAccV, est, up, cCom, execd, prop,
                   inflight, lost, crec, leaseUntil, clock, historyVars>>

(* BecomeSequencer(r) (core: HandleVote completing a majority): with votes  *)
(* from a majority, its own (computed now) included, and only once its own  *)
(* lease grant has expired, r rebuilds the log from its executed prefix on  *)
(* (BuildLog), accepts the range itself in one durable record, and becomes  *)
(* the sequencer.  It may allocate at once; nothing beyond the range can be *)
(* safe before a phase-2 quorum accepted the range.                        *)
BecomeSequencer(r) ==
    /\ Live(r) /\ cand[r] # NoCand
    /\ LET v    == cand[r].v
           from == cand[r].from
           VS   == {x \in msgs : x.type = "Vote" /\ x.ep = ep[r] /\ Counted(x) /\ x.dst = r
                                /\ x.view = v /\ x.from = from}
           own  == [src |-> r, olog |-> OLogFrom(r, from), cmax |-> [n \in R |-> CMax(r, n)],
                    ev |-> est[r].v, es |-> est[r].s, eb |-> est[r].base, snap |-> snap[r].slot]
           cov  == [n \in R |-> Cardinality({p \in 1 .. from : p > ebase[r] /\ execd[r][p].o = n})]
       IN /\ v > pView[r]
          /\ clock >= leaseUntil[r] \/ MutIgnoreOwnLease
          \* (r may have executed beyond `from` since it started: those slots are
          \* chosen, and the rebuild must give them the same values, else alarm)
          /\ from =< Len(execd[r])
          \* (phase 1: a majority's votes, Maj, whatever the phase-2 quorum)
          /\ \E Q \in Picks({x \in VS : x.src # r}, Maj(r) - 1) :
               \* A vote reports slots only from its voter's snapshot on (16.3): a
               \* candidate whose o_from is below a snapshot slot of its votes (its own
               \* included) installs a snapshot and asks again from there first.
               /\ MutCompactedLooksEmpty \/ \A x \in Q \cup {own} : x.snap =< from
               /\ LET res == BuildLog({[src |-> x.src, olog |-> x.olog, cmax |-> x.cmax,
                                        ev |-> x.ev, es |-> x.es, eb |-> x.eb] : x \in Q}
                                      \cup {own}, from, cov, Mem(ep[r]))
                      \* The range also re-proposes what r executed and some voter did
                      \* not (held by two replicas only, N = 5, until then), from r's
                      \* snapshot on: below it, slots are majority-executed and final.
                      start == IF MutRangeFromOwnOFrom THEN from
                               ELSE Min({from, Max({snap[r].slot,
                                                    Min({from} \cup {x.exec : x \in Q})})})
                      L   == [k \in 1 .. (from - start) |-> execd[r][start + k].o] \o res.log
                      end == start + Len(L)
                      inR(j) == start =< j /\ j < end
                      full == [k \in 1 .. end |-> IF k - 1 < start THEN execd[r][k].o
                                                  ELSE L[k - start]]
                  IN /\ res.fits
                     /\ pView' = [pView EXCEPT ![r] = v]
                     /\ est' = [est EXCEPT ![r] = [v |-> v, s |-> r, start |-> start, base |-> end]]
                     /\ joined' = [joined EXCEPT ![r] = TRUE]
                     /\ rc' = [rc EXCEPT ![r] = FALSE]
                     /\ oAccB' = [oAccB EXCEPT ![r] = [j \in Slots |-> IF inR(j) THEN v ELSE @[j]]]
                     /\ oAccV' = [oAccV EXCEPT ![r] = [j \in Slots |-> IF inR(j) THEN L[j - start + 1]
                                                                       ELSE @[j]]]
                     /\ oCom' = [oCom EXCEPT ![r] = [j \in Slots |-> Executed(r, j)
                                                                  /\ j >= snap[r].slot]]
                     /\ oComB' = oComB
                     /\ oVotes' = oVotes \cup {[e |-> ep[r], a |-> r, j |-> j, b |-> v, o |-> L[j - start + 1]] :
                                                j \in {x \in Slots : inR(x)}}
                     /\ ranges' = ranges \cup {[e |-> ep[r], lo |-> ebase[r], v |-> v, s |-> r,
                                                 log |-> full]}
                     /\ alarm' = (alarm \/ res.bad
                                   \/ \E j \in from .. (Len(execd[r]) - 1) :
                                         j >= end \/ L[j - start + 1] # execd[r][j + 1].o)
    /\ cand' = [cand EXCEPT ![r] = NoCand]
    /\ votedFor' = [votedFor EXCEPT ![r] = r]
    /\ want' = [want EXCEPT ![r] = [n \in R |-> 0]]
    /\ safeUpto' = [safeUpto EXCEPT ![r] = 0]
    /\ handing' = [handing EXCEPT ![r] = FALSE]
    /\ UNCHANGED <<epochVars, cProm, cAccB, cAccV, ownNext, snap, up, cCom, execd, prop, inflight, lost, crec,
                   leaseUntil, clock, msgs, nextCmd, readyAt, readyBefore, cVotes, execHist, execHigh,
                   rops, crashes>>

(* SendNewView(s) (core: the rebuilt range acknowledged by a phase-2        *)
(* quorum, AccQ: a majority, 2 of 4): the                                  *)
(* range is chosen; s commits it and notifies everyone.                     *)
SendNewView(s) ==
    /\ IsSeq(s) /\ ~rc[s]
    /\ est[s].start >= snap[s].slot    \* (it sends the range whole, as SendOAccept)
    /\ \/ MutNoReaccept
       \/ Cardinality({s} \cup {q \in Voting(ep[s]) : \E a \in msgs : a.type = "OAck" /\ a.ep = ep[s]
                                    /\ a.src = q /\ a.view = pView[s] /\ a.upto >= est[s].base})
            >= AccQ(s)    \* (phase 2: the range accepted at ballot pView[s] is chosen)
    /\ LET st == est[s].start
           b  == est[s].base
       IN /\ rc' = [rc EXCEPT ![s] = TRUE]
          /\ oCom' = [oCom EXCEPT ![s] = [j \in Slots |-> @[j] \/ (st =< j /\ j < b)]]
          /\ oComB' = [oComB EXCEPT ![s] = [j \in Slots |->
                         IF ~oCom[s][j] /\ st =< j /\ j < b THEN pView[s] ELSE @[j]]]
          /\ msgs' = msgs \cup {[type |-> "NewView", ep |-> ep[s], src |-> s, view |-> pView[s], start |-> st,
                                 vals |-> [k \in 1 .. (b - st) |-> oAccV[s][st + k - 1]]]}
    /\ UNCHANGED <<durableVars, up, joined, cCom, execd, safeUpto, want, cand, votedFor, prop,
                   inflight, lost, crec, leaseUntil, handing, clock, historyVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Heartbeats, the lease, reads and hand-over.                             *)
(***************************************************************************)

(* SendHeartbeat(s): the sequencer asks for lease grants (stamp = its       *)
(* clock) and says how long its log is and, once chosen, its range's base.  *)
SendHeartbeat(s) ==
    /\ IsSeq(s) /\ Heartbeats
    /\ LET m == [type |-> "Heartbeat", ep |-> ep[s], src |-> s, view |-> pView[s], stamp |-> clock,
                 len |-> Acc(s), base |-> IF rc[s] THEN est[s].base ELSE -1]
       IN /\ m \notin msgs
          /\ msgs' = msgs \cup {m}
    /\ UNCHANGED <<durableVars, volatileVars, clock, historyVars>>

(* HandleHeartbeat(r, m): from the sequencer of r's established view: a    *)
(* base says the range is chosen (its slots are committed); r may grant a   *)
(* lease: no vote, its own included, before clock + Lease.                  *)
HandleHeartbeat(r, m, grant) ==
    /\ m.type = "Heartbeat" /\ Rcv(r, m) /\ Est(r) /\ m.view = pView[r] /\ m.src = est[r].s
    /\ m.base >= 0 => m.base = est[r].base
    /\ LET learnRange == m.base >= 0 /\ ~rc[r]
           g == [type |-> "LeaseGrant", ep |-> ep[r], src |-> r, view |-> m.view, stamp |-> m.stamp]
       IN /\ learnRange \/ grant
          /\ rc' = IF learnRange THEN [rc EXCEPT ![r] = TRUE] ELSE rc
          /\ oCom' = IF learnRange
                     THEN [oCom EXCEPT ![r] = [j \in Slots |->
                             @[j] \/ (est[r].start =< j /\ j < est[r].base /\ j >= snap[r].slot)]]
                     ELSE oCom
          /\ oComB' = IF learnRange
                      THEN [oComB EXCEPT ![r] = [j \in Slots |->
                              IF est[r].start =< j /\ j < est[r].base /\ ~Executed(r, j)
                                 /\ j >= snap[r].slot
                              THEN pView[r] ELSE @[j]]]
                      ELSE oComB
          /\ leaseUntil' = IF grant THEN [leaseUntil EXCEPT ![r] = clock + Lease] ELSE leaseUntil
          /\ msgs' = IF grant THEN msgs \cup {g} ELSE msgs
    /\ UNCHANGED <<durableVars, up, joined, cCom, execd, safeUpto, want, cand, votedFor, prop,
                   inflight, lost, crec, handing, clock, historyVars>>

\* s holds a lease from a majority (itself included) at this instant.
HasLease(s) ==
    /\ IsSeq(s) /\ rc[s] /\ ~handing[s]
    \* (a sequencer that holds a stop answers no read in that epoch, membership.md 4.5)
    /\ ~HasStop(s, Acc(s))
    /\ \E hb \in msgs :
         /\ hb.type = "Heartbeat" /\ hb.ep = ep[s] /\ hb.src = s /\ hb.view = pView[s]
         /\ clock < hb.stamp + LeaseHold
         /\ Cardinality({s} \cup {q \in Voting(ep[s]) :
                                   [type |-> "LeaseGrant", ep |-> ep[s], src |-> q, view |-> pView[s],
                                    stamp |-> hb.stamp] \in msgs}) >= Maj(s)
         \* (Maj, the phase-1 quorum: every vote quorum must hold a grantor)

ExecutedCmds(r) == {execd[r][p].cmd : p \in DOMAIN execd[r]}

(* Read(r): a client of r asks for a linearizable read.  The sequencer      *)
(* answers itself under its lease (slot = the end of its log - 1, the       *)
(* paper's i_G); any other replica sends an R-request.                      *)
Read(r) ==
    /\ r \in Readers /\ Est(r) /\ Len(rops) < MaxReads
    /\ LET id == Len(rops) + 1
           op(st, slot) == [r |-> r, st |-> st, before |-> ReadySet, slot |-> slot,
                            result |-> {}, e |-> ep[r]]
       IN IF IsSeq(r)
          THEN /\ HasLease(r)
               /\ rops' = Append(rops, op("wait", Acc(r) - 1))
               /\ UNCHANGED msgs
          ELSE /\ rops' = Append(rops, op("ask", -1))
               /\ msgs' = msgs \cup {[type |-> "RRequest", ep |-> ep[r], src |-> r, view |-> pView[r], id |-> id]}
    /\ UNCHANGED <<durableVars, volatileVars, clock, nextCmd, readyAt, readyBefore, cVotes,
                   oVotes, execHist, execHigh, ranges, crashes, alarm>>

(* HandleRRequest(s, m): the sequencer answers with the end of its log, but *)
(* only while it holds its lease at this instant.                           *)
HandleRRequest(s, m) ==
    /\ m.type = "RRequest" /\ Rcv(s, m) /\ IsSeq(s) /\ m.view = pView[s] /\ HasLease(s)
    /\ LET a == [type |-> "RReply", ep |-> ep[s], src |-> s, view |-> m.view, id |-> m.id, slot |-> Acc(s) - 1]
       IN /\ a \notin msgs
          /\ msgs' = msgs \cup {a}
    /\ UNCHANGED <<durableVars, volatileVars, clock, historyVars>>

(* HandleRReply(r, m): the reader now waits until it executed that slot.    *)
HandleRReply(r, m) ==
    /\ m.type = "RReply" /\ Rcv(r, m) /\ Est(r) /\ m.view = pView[r] /\ m.src = est[r].s
    /\ m.id \in DOMAIN rops /\ rops[m.id].r = r /\ rops[m.id].st = "ask"
    /\ rops' = [rops EXCEPT ![m.id].st = "wait", ![m.id].slot = m.slot]
    /\ UNCHANGED <<durableVars, volatileVars, clock, msgs, nextCmd, readyAt, readyBefore,
                   cVotes, oVotes, execHist, execHigh, ranges, crashes, alarm>>

(* ServeRead(r, k): r executed through the slot: the read returns r's state. *)
ServeRead(r, k) ==
    /\ Live(r) /\ k \in DOMAIN rops /\ rops[k].r = r /\ rops[k].st = "wait"
    /\ Len(execd[r]) > rops[k].slot
    /\ rops' = [rops EXCEPT ![k].st = "done", ![k].result = ExecutedCmds(r)]
    /\ UNCHANGED <<durableVars, volatileVars, clock, msgs, nextCmd, readyAt, readyBefore,
                   cVotes, oVotes, execHist, execHigh, ranges, crashes, alarm>>

(* Handover(s, t): the sequencer gives its role up on purpose: it stops      *)
(* serving reads at once and releases the lease it holds.                   *)
Handover(s, t) ==
    \* (again, to another target, if the first one did not take over)
    /\ Handovers /\ IsSeq(s) /\ rc[s] /\ t \in Candidates /\ t # s
    /\ handing' = [handing EXCEPT ![s] = TRUE]
    /\ leaseUntil' = [leaseUntil EXCEPT ![s] = clock]
    /\ LET m == [type |-> "Handover", ep |-> ep[s], src |-> s, view |-> pView[s], target |-> t]
       IN /\ m \notin msgs
          /\ msgs' = msgs \cup {m}
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, execd, safeUpto, want, cand,
                   votedFor, prop, inflight, lost, crec, clock, historyVars>>

(* HandleHandover(r, m): the holder released its lease: r may vote now.     *)
HandleHandover(r, m) ==
    /\ m.type = "Handover" /\ Rcv(r, m) /\ Est(r) /\ m.view = pView[r] /\ m.src = est[r].s
    /\ leaseUntil[r] > clock
    /\ leaseUntil' = [leaseUntil EXCEPT ![r] = clock]
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, execd, safeUpto, want, cand,
                   votedFor, prop, inflight, lost, crec, handing, clock, msgs, historyVars>>

Tick ==
    /\ clock < MaxTime
    /\ clock' = clock + 1
    /\ UNCHANGED <<durableVars, volatileVars, msgs, historyVars>>
-----------------------------------------------------------------------------
(***************************************************************************)
(* C-instance recovery: Paxos phase 1 and 2 on a C-instance a committed     *)
(* O-instance maps to, by a replica whose execution is blocked on it.       *)
(***************************************************************************)

\* cpt: "compacted below executed[n]" (16.3), instead of what r forgot: nothing.
PromiseMsg(r, n, i, b) ==
    [type |-> "CPromise", ep |-> ep[r], src |-> r, view |-> pView[r], n |-> n, i |-> i, b |-> b,
     ab |-> cAccB[r][n][i], av |-> cAccV[r][n][i], com |-> cCom[r][n][i],
     cpt |-> Compacted(r, n, i) /\ ~MutCompactedLooksEmpty]

(* StartCRecovery(r): the smallest recovery ballot (round >= 1) above r's  *)
(* own promise; r promises it itself, durably, and sends C-prepares.        *)
StartCRecovery(r) ==
    /\ r \in Recoverers /\ Est(r) /\ crec[r] = NoRec
    /\ LET j == Len(execd[r])
           n == oAccV[r][j]
           k == Cardinality({p \in DOMAIN execd[r] : p > ebase[r] /\ execd[r][p].o = n})
       IN /\ j < MaxSlot /\ oCom[r][j] /\ n \in R /\ n # r /\ k < MaxCIdx
          /\ cCom[r][n][k] = Nil
          /\ LET b == CBal(BalRound(cProm[r][n][k]) + 1, r)
             IN /\ BalRound(b) =< MaxCRound
                /\ cProm' = [cProm EXCEPT ![r][n][k] = b]
                /\ crec' = [crec EXCEPT ![r] = [n |-> n, i |-> k, b |-> b]]
                /\ msgs' = msgs \cup {[type |-> "CPrepare", ep |-> ep[r], src |-> r, view |-> pView[r], n |-> n,
                                       i |-> k, b |-> b],
                                      PromiseMsg(r, n, k, b)}
    /\ UNCHANGED <<epochVars, cAccB, cAccV, ownNext, snap, oAccB, oAccV, pView, est, up, joined, rc, oCom, oComB, cCom,
                   execd, safeUpto, want, cand, votedFor, prop, inflight, lost, leaseUntil,
                   handing, clock, historyVars>>

(* HandleCPrepare(r, m): phase 1b: promise (durably) and report the        *)
(* accepted ballot and value, and whether r knows the instance chosen.     *)
(* For an instance r compacted it promises nothing and says "compacted".  *)
HandleCPrepare(r, m) ==
    /\ m.type = "CPrepare" /\ Rcv(r, m) /\ Live(r) /\ m.view = pView[r]
    /\ m.b >= cProm[r][m.n][m.i]
    /\ LET pm  == PromiseMsg(r, m.n, m.i, m.b)
       IN /\ pm \notin msgs \/ (~pm.cpt /\ cProm[r][m.n][m.i] # m.b)
          /\ cProm' = IF pm.cpt THEN cProm ELSE [cProm EXCEPT ![r][m.n][m.i] = m.b]
          /\ msgs' = msgs \cup {pm}
    /\ UNCHANGED <<epochVars, cAccB, cAccV, ownNext, snap, oAccB, oAccV, pView, est, volatileVars, clock,
                   historyVars>>

(* HandleCPromise(r, m): with promises from a majority, propose the chosen *)
(* value if one is known, else the value of the highest accepted ballot,   *)
(* else a no-op, at ballot b, and accept it ourselves: unless we promised  *)
(* a higher ballot meanwhile (a competing recoverer; bug 5), then give up. *)
(* A promise saying "compacted": the instance was executed, so its value   *)
(* is chosen: give up (and install a snapshot), never choose a no-op.      *)
CPromiseCompacted(r, m) ==
    /\ m.type = "CPromise" /\ Rcv(r, m) /\ Live(r) /\ m.view = pView[r]
    /\ crec[r] # NoRec /\ m.n = crec[r].n /\ m.i = crec[r].i /\ m.b = crec[r].b
    /\ m.cpt
    /\ crec' = [crec EXCEPT ![r] = NoRec]
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, execd, safeUpto, want, cand,
                   votedFor, prop, inflight, lost, leaseUntil, handing, clock, msgs, historyVars>>
CPromiseQuorum(r, m) ==
    /\ m.type = "CPromise" /\ Rcv(r, m) /\ Live(r) /\ m.view = pView[r]
    /\ crec[r] # NoRec /\ m.n = crec[r].n /\ m.i = crec[r].i /\ m.b = crec[r].b
    /\ ~m.cpt
    /\ LET P == {x \in msgs : x.type = "CPromise" /\ x.ep = ep[r] /\ Counted(x) /\ x.n = m.n
                              /\ x.i = m.i /\ x.b = m.b /\ ~x.cpt}
           n == m.n
           i == m.i
           b == m.b
       \* (phase 1: a majority's promises, Maj, whatever the phase-2 quorum)
       IN \E Q0 \in Picks({x \in P : x.src # m.src}, Maj(r) - 1) :
            LET Q == Q0 \cup {m} IN
            /\ m.src \notin {x.src : x \in Q0}
            /\ LET coms == {x.com : x \in {y \in Q : y.com # Nil}}
                   hb   == Max({x.ab : x \in Q})
                   val  == IF coms # {} THEN CHOOSE c \in coms : TRUE
                           ELSE IF hb < 0 THEN NoOp ELSE (CHOOSE x \in Q : x.ab = hb).av
               IN IF (cProm[r][n][i] > b /\ ~MutRecoveryIgnoresPromise) \/ cCom[r][n][i] # Nil
                  THEN /\ crec' = [crec EXCEPT ![r] = NoRec]
                       /\ UNCHANGED <<epochVars, cProm, cAccB, cAccV, prop, msgs, cVotes>>
                  ELSE /\ cProm' = [cProm EXCEPT ![r][n][i] = b]
                       /\ cAccB' = [cAccB EXCEPT ![r][n][i] = b]
                       /\ cAccV' = [cAccV EXCEPT ![r][n][i] = val]
                       /\ cVotes' = cVotes \cup {[e |-> ep[r], a |-> r, n |-> n, i |-> i, b |-> b, v |-> val]}
                       /\ crec' = [crec EXCEPT ![r] = NoRec]
                       /\ prop' = [prop EXCEPT ![r] = @ \cup {[n |-> n, i |-> i, b |-> b, v |-> val]}]
                       /\ msgs' = msgs \cup
                            {[type |-> "CAccept", ep |-> ep[r], src |-> r, view |-> pView[r], n |-> n, i |-> i,
                              b |-> b, v |-> val],
                             [type |-> "CAck", ep |-> ep[r], src |-> r, view |-> pView[r], n |-> n, i |-> i,
                              b |-> b]}
    /\ UNCHANGED <<epochVars, ownNext, snap, oAccB, oAccV, pView, est, up, joined, rc, oCom, oComB, cCom, execd,
                   safeUpto, want, cand, votedFor, inflight, lost, leaseUntil, handing, clock,
                   nextCmd, readyAt, readyBefore, oVotes, execHist, execHigh, ranges, rops, crashes, alarm>>

HandleCPromise(r, m) == CPromiseCompacted(r, m) \/ CPromiseQuorum(r, m)

AbandonCRecovery(r) ==
    /\ Live(r) /\ crec[r] # NoRec
    /\ crec' = [crec EXCEPT ![r] = NoRec]
    /\ UNCHANGED <<durableVars, up, joined, rc, oCom, oComB, cCom, execd, safeUpto, want, cand,
                   votedFor, prop, inflight, lost, leaseUntil, handing, clock, msgs, historyVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Crash(r) and Restart(r).  Restart keeps exactly durableVars and rebuilds *)
(* the rest as Replica._restore does: the promised view, joined if the      *)
(* replica established it and was not its sequencer (a restarted sequencer *)
(* forgot allocations it may not have persisted... it rejoins by a view     *)
(* change), its own accepted C-instances driven again, and a lease it may   *)
(* have granted just before the crash honoured for a whole Lease.           *)
(***************************************************************************)
Crash(r) ==
    /\ r \in Crashable /\ up[r] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![r] = FALSE]
    /\ crashes' = crashes + 1
    /\ rops' = [k \in DOMAIN rops |->
                  IF rops[k].r = r /\ rops[k].st \in {"ask", "wait"} THEN [rops[k] EXCEPT !.st = "fail"]
                  ELSE rops[k]]
    /\ UNCHANGED <<durableVars, joined, rc, oCom, oComB, cCom, execd, safeUpto, want, cand, votedFor,
                   prop, inflight, lost, crec, leaseUntil, handing, clock, msgs, nextCmd, readyAt,
                   readyBefore, cVotes, oVotes, execHist, execHigh, ranges, alarm>>

Restart(r) ==
    /\ ~up[r]
    /\ LET mine == {i \in CIdx : cAccB[r][r][i] = r}
       IN /\ prop' = [prop EXCEPT ![r] = {[n |-> r, i |-> i, b |-> r, v |-> cAccV[r][r][i]] : i \in mine}]
          /\ inflight' = [inflight EXCEPT ![r] = {[i |-> i, c |-> cAccV[r][r][i]] : i \in mine}]
    /\ up' = [up EXCEPT ![r] = TRUE]
    /\ joined' = [joined EXCEPT ![r] = est[r].v = pView[r] /\ est[r].s # r]
    /\ rc' = [rc EXCEPT ![r] = FALSE]
    /\ oCom' = [oCom EXCEPT ![r] = [j \in Slots |-> FALSE]]
    /\ oComB' = [oComB EXCEPT ![r] = [j \in Slots |-> -1]]
    /\ cCom' = [cCom EXCEPT ![r] = [n \in R |-> [i \in CIdx |-> Nil]]]
    /\ execd' = [execd EXCEPT ![r] = snap[r].exec]    \* (re-executes from its snapshot, 16.4)
    /\ safeUpto' = [safeUpto EXCEPT ![r] = 0]
    /\ want' = [want EXCEPT ![r] = [n \in R |-> 0]]
    /\ cand' = [cand EXCEPT ![r] = NoCand]
    /\ votedFor' = [votedFor EXCEPT ![r] = -1]
    /\ lost' = [lost EXCEPT ![r] = {}]
    /\ crec' = [crec EXCEPT ![r] = NoRec]
    /\ leaseUntil' = [leaseUntil EXCEPT ![r] = clock + Lease]
    /\ handing' = [handing EXCEPT ![r] = FALSE]
    /\ UNCHANGED <<durableVars, clock, msgs, historyVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Snapshots (docs/recovery.md section 16).  The model keeps execd[r], the *)
(* sequence r executed, as the abstraction of the state machine and of the *)
(* per-owner executed counts: a snapshot at slot S keeps its first S       *)
(* entries (snap[r].exec) and r forgets, durably and in memory, its        *)
(* O-instances below S and the C-instances its snapshot executed (below    *)
(* executed[n] for each owner n), keeping c_max in the snapshot and its    *)
(* next own C-index (ownNext).  Below its snapshot r answers only with the *)
(* snapshot: it relays no commit there, accepts and promises no compacted *)
(* C-instance (its C-promise says "compacted"), and its votes carry the    *)
(* snapshot slot (BecomeSequencer).                                        *)
(***************************************************************************)

\* The majority-executed point: the highest slot a majority executed.  The core's
\* sequencer computes it from the executed prefixes its lease grants report and
\* announces it in heartbeats.  The model reads it from a ghost instead (the
\* longest prefix each replica ever executed, before crashes too): every point
\* the core can compute from grants is at most this one, so the model allows at
\* least every snapshot the core can take.
MajExecuted(r) ==
    Max({k \in 0 .. MaxSlot : Cardinality({q \in Mem(ep[r]) : execHigh[q] >= k}) >= Maj(r)})
    \* (Maj: a majority executed, so every phase-1 quorum of voters holds one of them)

\* r adopts snapshot [slot S, exec ex, cmax cm] and forgets what lies below it.
Compact(r, S, ex, cm) ==
    LET cnt == [n \in R |-> Cardinality({p \in DOMAIN ex : p > ebase[r] /\ ex[p].o = n})]
        gone(n, i) == i < cnt[n]
    IN /\ snap' = [snap EXCEPT ![r] = [slot |-> S, exec |-> ex, cmax |-> cm]]
       /\ cProm' = [cProm EXCEPT ![r] = [n \in R |-> [i \in CIdx |->
                      IF gone(n, i) THEN -1 ELSE cProm[r][n][i]]]]
       /\ cAccB' = [cAccB EXCEPT ![r] = [n \in R |-> [i \in CIdx |->
                      IF gone(n, i) THEN -1 ELSE cAccB[r][n][i]]]]
       /\ cAccV' = [cAccV EXCEPT ![r] = [n \in R |-> [i \in CIdx |->
                      IF gone(n, i) THEN Nil ELSE cAccV[r][n][i]]]]
       /\ cCom' = [cCom EXCEPT ![r] = [n \in R |-> [i \in CIdx |->
                     IF gone(n, i) THEN Nil ELSE cCom[r][n][i]]]]
       /\ oAccB' = [oAccB EXCEPT ![r] = [j \in Slots |-> IF j < S THEN -1 ELSE oAccB[r][j]]]
       /\ oAccV' = [oAccV EXCEPT ![r] = [j \in Slots |-> IF j < S THEN Empty ELSE oAccV[r][j]]]
       /\ oCom' = [oCom EXCEPT ![r] = [j \in Slots |-> j >= S /\ oCom[r][j]]]
       /\ oComB' = [oComB EXCEPT ![r] = [j \in Slots |-> IF j < S THEN -1 ELSE oComB[r][j]]]
       /\ prop' = [prop EXCEPT ![r] = {p \in @ : ~gone(p.n, p.i)}]

(* TakeSnapshot(r) (core: Snapshots.take): r snapshots at slot S: at most   *)
(* its executed prefix and the majority-executed point (16.2: a committed   *)
(* but revocable slot is never compacted).                                  *)
TakeSnapshotAt(r, S) ==
    /\ r \in Compactors /\ Live(r)
    /\ snap[r].slot < S /\ S =< Len(execd[r]) /\ S =< MajExecuted(r)
    /\ Compact(r, S, SubSeq(execd[r], 1, S), [n \in R |-> CMax(r, n)])
    /\ UNCHANGED <<epochVars, ownNext, pView, est, up, joined, rc, execd, safeUpto, want, cand, votedFor,
                   inflight, lost, crec, leaseUntil, handing, clock, msgs, historyVars>>

TakeSnapshot(r) == \E S \in 1 .. MaxSlot : TakeSnapshotAt(r, S)

(* InstallSnapshot(r, p) (core: Snapshots.install): r adopts p's snapshot,  *)
(* whose slot is above r's executed prefix (a learn request answered with   *)
(* a snapshot offer, a C-promise saying "compacted", a vote with a higher   *)
(* snapshot slot; the model lets it happen at any time).  r's executed      *)
(* sequence becomes the snapshot's, its c_max the maximum of both; r        *)
(* forgets what lies below.  A candidate asks for votes again from its new  *)
(* executed prefix, in the same view.  (p's snapshot is durable and grows   *)
(* only, so reading it now covers an offer p sent at any time since it took *)
(* it; an offer of an older snapshot of p, installed later, is not          *)
(* modelled.)                                                               *)
InstallSnapshot(r, p) ==
    /\ r \in Installers /\ Live(r) /\ p # r /\ ep[p] = ep[r]
    /\ snap[p].slot > Len(execd[r])
    /\ LET S == snap[p].slot
       IN /\ Compact(r, S, snap[p].exec, [n \in R |-> Max({CMax(r, n), snap[p].cmax[n]})])
          /\ execd' = [execd EXCEPT ![r] = snap[p].exec]
          /\ execHigh' = [execHigh EXCEPT ![r] = Max({@, S})]
          /\ IF cand[r] # NoCand
             THEN /\ cand' = [cand EXCEPT ![r].from = S]
                  /\ msgs' = msgs \cup {[type |-> "VRequest", ep |-> ep[r], src |-> r, view |-> cand[r].v,
                                         from |-> S]}
             ELSE UNCHANGED <<epochVars, cand, msgs>>
    /\ UNCHANGED <<epochVars, ownNext, pView, est, up, joined, rc, safeUpto, want, votedFor, inflight, lost,
                   crec, leaseUntil, handing, clock, nextCmd, readyAt, readyBefore, cVotes, oVotes,
                   execHist, ranges, rops, crashes, alarm>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Membership change (docs/membership.md 3 and 4): the history is a        *)
(* sequence of epochs, each a fixed-membership SDPaxos over the members    *)
(* Mem(e).  Epoch e ends at the slot s of its STOP; epoch e+1 starts at    *)
(* slot s+1 (global slots: the executed log spans epochs) from the state   *)
(* at the stop (the base snapshot: snap at slot s+1, every C-count 0).     *)
(* Every per-epoch state is reset: views restart at 0 with the fixed       *)
(* sequencer Seq0Of(e+1), C-instances are numbered from 0 per owner again, *)
(* the O-log holds nothing above the base, promises and leases are gone.   *)
(* Own C-instances not executed by the stop are abandoned and their        *)
(* commands proposed again in e+1 (lost).  Switching is one atomic, durable *)
(* step: a crash before it restarts in e (the stop is executed again), one *)
(* after it restarts in e+1 from the base snapshot (membership.md 4.3; the *)
(* code sends nothing of e+1 before the base is durable, so a crash between *)
(* executing the stop and saving the base is a crash before the step).    *)
(* A replica that is no member of e+1 is removed: it acts no more (unless  *)
(* Outsiders), and its messages are dropped (Counted).                     *)
(***************************************************************************)
NewEpoch(r, ex) ==
    LET e == ep[r] + 1
        b == Len(ex)
        \* (what r itself executed: a replica that installs the base carries every own
        \* command it did not execute, those the base executed included, into e+1,
        \* where they run again as session duplicates: Member._install; found by
        \* trace validation, tla/README.md)
        done == {execd[r][p].cmd : p \in DOMAIN execd[r]}
    IN /\ ep' = [ep EXCEPT ![r] = e]
       /\ ebase' = [ebase EXCEPT ![r] = b]
       /\ execd' = [execd EXCEPT ![r] = ex]
       /\ execHigh' = [execHigh EXCEPT ![r] = Max({@, b})]
       /\ snap' = [snap EXCEPT ![r] = [slot |-> b, exec |-> ex, cmax |-> [n \in R |-> -1]]]
       /\ cProm' = [cProm EXCEPT ![r] = [n \in R |-> [i \in CIdx |-> -1]]]
       /\ cAccB' = [cAccB EXCEPT ![r] = [n \in R |-> [i \in CIdx |-> -1]]]
       /\ cAccV' = [cAccV EXCEPT ![r] = [n \in R |-> [i \in CIdx |-> Nil]]]
       /\ ownNext' = [ownNext EXCEPT ![r] = 0]
       /\ oAccB' = [oAccB EXCEPT ![r] = [j \in Slots |-> -1]]
       /\ oAccV' = [oAccV EXCEPT ![r] = [j \in Slots |-> Empty]]
       /\ pView' = [pView EXCEPT ![r] = 0]
       /\ est' = [est EXCEPT ![r] = [v |-> 0, s |-> Seq0Of(e), start |-> b, base |-> b]]
       /\ joined' = [joined EXCEPT ![r] = TRUE]
       /\ rc' = [rc EXCEPT ![r] = TRUE]
       /\ oCom' = [oCom EXCEPT ![r] = [j \in Slots |-> FALSE]]
       /\ oComB' = [oComB EXCEPT ![r] = [j \in Slots |-> -1]]
       /\ cCom' = [cCom EXCEPT ![r] = [n \in R |-> [i \in CIdx |-> Nil]]]
       /\ safeUpto' = [safeUpto EXCEPT ![r] = b]
       /\ want' = [want EXCEPT ![r] = [n \in R |-> 0]]
       /\ cand' = [cand EXCEPT ![r] = NoCand]
       /\ votedFor' = [votedFor EXCEPT ![r] = -1]
       /\ prop' = [prop EXCEPT ![r] = {}]
       /\ inflight' = [inflight EXCEPT ![r] = {}]
       /\ lost' = [lost EXCEPT ![r] = (@ \cup {f.c : f \in inflight[r]}) \ done]
       /\ crec' = [crec EXCEPT ![r] = NoRec]
       /\ leaseUntil' = [leaseUntil EXCEPT ![r] = 0]
       /\ handing' = [handing EXCEPT ![r] = FALSE]
       \* (a read waiting at r is asked again in the new epoch: the old one fails)
       /\ rops' = [k \in DOMAIN rops |->
                     IF rops[k].r = r /\ rops[k].st \in {"ask", "wait"} THEN [rops[k] EXCEPT !.st = "fail"]
                     ELSE rops[k]]

(* StartEpoch(r) (core: Member): r executes the STOP at its next slot j:   *)
(* it ends epoch ep[r] and starts ep[r]+1 at slot j+1.                     *)
StartEpoch(r) ==
    /\ Live(r) /\ r \in Learners
    /\ LET j == Len(execd[r])
           x == [slot |-> j, o |-> Stop, ci |-> -1, cmd |-> NoOp, v |-> pView[r], ep |-> ep[r]]
       IN /\ j < MaxSlot /\ oCom[r][j] /\ oAccV[r][j] = Stop /\ ep[r] + 1 < NEp
          /\ NewEpoch(r, Append(execd[r], x))
          /\ execHist' = execHist \cup {x}
    /\ UNCHANGED <<up, clock, msgs, nextCmd, readyAt, readyBefore, cVotes, oVotes, ranges, crashes,
                   alarm>>

(* InstallEpoch(r, p) (core: Member): r, still in epoch e (a late member, a *)
(* learner, or a replica that crashed before its switch was durable), sees *)
(* a replica p of e+1 (its EpochNotice, or any message of e+1) and installs *)
(* e+1's base snapshot from p: the same as executing the stop.  (p serves   *)
(* its base while it is its newest snapshot.)  p need not be a member of   *)
(* e+1: a replica removed by the stop executed it too and holds the same   *)
(* base, which the code serves (Member._answer_pull: it may be the only    *)
(* one left that executed the stop); trace validation found the code doing *)
(* it (tla/README.md, "Trace validation").                                 *)
InstallEpoch(r, p) ==
    /\ r \in Installers /\ up[r] /\ up[p] /\ ep[p] = ep[r] + 1
    /\ snap[p].slot = ebase[p] /\ Len(execd[r]) < ebase[p]
    /\ NewEpoch(r, snap[p].exec)
    /\ UNCHANGED <<up, clock, msgs, nextCmd, readyAt, readyBefore, cVotes, oVotes, execHist, ranges,
                   crashes, alarm>>

-----------------------------------------------------------------------------
\* Scope: an Isolated replica is cut off from every view above 0.
Deliverable(r, m) == r \notin Isolated \/ m.view = 0

Next ==
    \/ Tick
    \/ \E r \in R :
         \/ Propose(r) \/ CommitO(r) \/ Execute(r) \/ StartViewChange(r)
         \/ AbandonCandidacy(r) \/ BecomeSequencer(r) \/ SendNewView(r) \/ SendHeartbeat(r)
         \/ Read(r) \/ StartCRecovery(r) \/ AbandonCRecovery(r) \/ Crash(r) \/ Restart(r)
         \/ Resync(r) \/ TakeSnapshot(r) \/ AllocateStop(r) \/ StartEpoch(r) \/ LearnStop(r)
         \/ \E p \in R : InstallEpoch(r, p)
         \/ \E p \in R : InstallSnapshot(r, p)
         \/ \E f \in inflight[r] : Ready(r, f)
         \/ \E p \in prop[r] : SendCAccept(r, p)
         \/ \E i \in CIdx : SendCRequest(r, i)
         \/ \E n \in R : AllocateO(r, n)
         \/ \E j \in Slots : SendOAccept(r, j, FALSE) \/ SendOAccept(r, j, TRUE)
                            \/ RelayOCommit(r, j)
         \/ \E n \in R, i \in CIdx : RelayCCommit(r, n, i)
         \/ \E t \in R : Handover(r, t)
         \/ \E k \in DOMAIN rops : ServeRead(r, k)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleCAccept(r, m, FALSE)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleCAccept(r, m, TRUE)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleCAck(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleCCommit(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleCRequest(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleOAccept(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleNewView(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ AskRange(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleOCommit(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleVRequest(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleHeartbeat(r, m, TRUE)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleHeartbeat(r, m, FALSE)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleRRequest(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleRReply(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleHandover(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleCPrepare(r, m)
         \/ \E m \in msgs : Deliverable(r, m) /\ HandleCPromise(r, m)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(***************************************************************************)
(* Invariants (one definition each, so TLC names the one that fails).      *)
(***************************************************************************)
CVals == Cmds \cup {NoOp}

TypeOK ==
    /\ pView \in [R -> Views]
    /\ \A a \in R : est[a].v \in Views /\ est[a].v =< pView[a] /\ est[a].s \in R
                    /\ 0 =< est[a].start /\ est[a].start =< est[a].base /\ est[a].base =< MaxSlot
    /\ oAccB \in [R -> [Slots -> -1 .. MaxView]]
    /\ \A a \in R : snap[a].slot \in 0 .. MaxSlot /\ Len(snap[a].exec) = snap[a].slot
                    /\ snap[a].slot =< Len(execd[a])
    /\ clock \in 0 .. MaxTime

\* C-instance (e, n, i) is chosen with value v: a phase-2 quorum of epoch e's members
\* (AccQE: a majority, 2 of 4) accepted v at one ballot (C-instances are named by
\* epoch, owner and index).
ChosenC(e, n, i, v) ==
    \E b \in -1 .. MaxB :
        Cardinality({a \in Mem(e) : [e |-> e, a |-> a, n |-> n, i |-> i, b |-> b, v |-> v] \in cVotes})
            >= AccQE(e)
ChosenO(e, j, o) ==
    \E b \in Views :
        Cardinality({a \in Mem(e) : [e |-> e, a |-> a, j |-> j, b |-> b, o |-> o] \in oVotes}) >= AccQE(e)

CChosenUnique ==
    \A e \in Epochs, n \in R, i \in CIdx : \A v1, v2 \in CVals :
        ChosenC(e, n, i, v1) /\ ChosenC(e, n, i, v2) => v1 = v2

OChosenUnique ==     \* Paxos for O-instances: epochs of 3, 4, 6, 7 (the N = 5 commit rule is not Paxos)
    \A e \in Epochs : Size(e) # 5 =>
        \A j \in Slots : \A o1, o2 \in R \cup {NoCl, Stop} : ChosenO(e, j, o1) /\ ChosenO(e, j, o2) => o1 = o2

\* Consistency: no two replicas (or incarnations) ever executed different
\* things in one (global) slot, in any epoch; so executed logs are prefixes of one
\* another across epochs, and every replica switched epochs at the same stop.
ExecPrefixAgreement ==
    \A e1, e2 \in execHist : e1.slot = e2.slot =>
        e1.o = e2.o /\ e1.ci = e2.ci /\ e1.cmd = e2.cmd /\ e1.ep = e2.ep

\* Each executed slot runs the command the counting rule maps it to (counting in
\* the slot's epoch), or a no-op (no-cl, or the STOP).
ExecMappingSound ==
    \A r \in R : \A p \in DOMAIN execd[r] :
        LET e == execd[r][p] IN
        IF e.o \in {NoCl, Stop} THEN e.cmd = NoOp
        ELSE /\ e.ci = Cardinality({h \in 1 .. (p - 1) : execd[r][h].ep = e.ep /\ execd[r][h].o = e.o})
             /\ ChosenC(e.ep, e.o, e.ci, e.cmd)

Nontriviality ==
    \A e \in execHist : e.cmd \in {c \in Cmds : c < nextCmd} \cup {NoOp}

\* Linearizability, as the clients see it.  Writes: a command READY before
\* another was proposed executes first, everywhere.  Reads: a read reflects
\* every command READY before it was issued.
FirstPos(r, c) == Min({p \in DOMAIN execd[r] : execd[r][p].cmd = c})
WritesInOrder ==
    \A r \in R : \A c1, c2 \in Cmds :
        (c1 \in readyBefore[c2] /\ c2 \in ExecutedCmds(r))
            => /\ c1 \in ExecutedCmds(r)
               /\ FirstPos(r, c1) < FirstPos(r, c2)
ReadsFresh == \A k \in DOMAIN rops : rops[k].st = "done" => rops[k].before \subseteq rops[k].result
LinearizableOrder == WritesInOrder /\ ReadsFresh

\* What READY promises (restated: the N = 5 inference may move a READY command to
\* an EARLIER slot, past slots no command was READY or executed in, which keeps
\* LinearizableOrder): whoever executes past its slot executed it at or before
\* that slot, and every later view's log orders its C-instance at or before it.
KthSlot(lg, lo, n, i) ==  \* lg: a sequence (slot j is lg[j+1]), counted from lo; -1 if none
    LET js == {j \in lo .. (Len(lg) - 1) : lg[j + 1] = n
                 /\ Cardinality({h \in lo .. (j - 1) : lg[h + 1] = n}) = i}
    IN IF js = {} THEN -1 ELSE Min(js)
ReadyIsDurable ==
    \A c \in ReadySet :
        LET a == readyAt[c] IN
        /\ \A r \in R : Len(execd[r]) > a.j =>
              \E p \in 1 .. (a.j + 1) : execd[r][p].cmd = c
        /\ \A x \in ranges : x.e = a.e /\ x.v > a.v =>
              LET k == KthSlot(x.log, x.lo, a.n, a.i) IN 0 =< k /\ k =< a.j

\* Never more O-instances for n than n has C-instances (in one epoch, while n is in it).
NoOverAllocation ==
    /\ \A s \in R : IsSeq(s) => \A n \in R : ep[n] = ep[s] =>
          Count(OV(s), ebase[s], Acc(s), n) =< ownNext[n]
    /\ \A x \in ranges : \A n \in R : ep[n] = x.e =>
          Cardinality({k \in DOMAIN x.log : k > x.lo /\ x.log[k] = n}) =< ownNext[n]

\* One winner per view (of an epoch).
ViewFencing == \A x, y \in ranges : x.e = y.e /\ x.v = y.v => x.s = y.s

\* A log built by a later view keeps every slot executed in an earlier one of its
\* epoch (whenever that execution happened), and every slot of an earlier epoch.
ExecutedNeverRevoked ==
    \A x \in ranges : \A e \in execHist :
        (e.ep = x.e /\ e.v < x.v) \/ e.ep < x.e => e.slot < Len(x.log) /\ x.log[e.slot + 1] = e.o

\* The core never raises an alarm (invariant_alarms stays 0).
NoAlarm == ~alarm
=============================================================================
