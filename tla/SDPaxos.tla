------------------------------- MODULE SDPaxos -------------------------------
(***************************************************************************)
(* SDPaxos (Zhao et al., SoCC 2018) as implemented by sdpaxos.core.        *)
(*                                                                         *)
(* One action per core handler, named like the handler and like the trace  *)
(* event (`HandleCAccept` <-> `Replica._handle_c_accept` <-> trace event    *)
(* "HandleCAccept").  See tla/README.md for the full table and for what is *)
(* abstracted, and docs/recovery.md for the recovery design in prose.      *)
(*                                                                         *)
(* NOTE on the network.  `msgs` is the SET of every message ever sent.  A  *)
(* handler never removes the message it handles, so every message can be   *)
(* received any number of times, in any order, or never: duplication,      *)
(* reordering and loss are all in the model without extra actions.  This   *)
(* is strictly more behaviour than a bag with Drop/Duplicate actions, and  *)
(* much smaller to check, because an idempotent re-delivery leads back to  *)
(* a state TLC has already seen.  DropMessage and DuplicateMessage are     *)
(* still defined (for trace validation); DropMessage only removes          *)
(* behaviours for safety and is disabled unless ModelLoss is TRUE.         *)
(*                                                                         *)
(* A receiver that acts on "a majority of X messages" (C-ACKs, votes,      *)
(* O-ACKs, C-promises) reads them from `msgs`: it is the step in which the *)
(* last of them arrives; the earlier ones arrived in steps that changed    *)
(* nothing the model needs to remember (as in Lamport's Paxos.tla).        *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    N,            \* number of replicas (3 or 5); ids 0..N-1
    MaxCmds,      \* client commands in the whole run
    MaxView,      \* highest view a replica may start
    MaxCRound,    \* highest C-recovery round (ballot = round * N + replica)
    MaxCrashes,   \* crashes in the whole run
    MaxSlot,      \* O-instances 0..MaxSlot-1
    MaxCIdx,      \* C-instances 0..MaxCIdx-1 per replica
    ModelLoss,    \* include DropMessage in Next (adds states, no behaviours)
    Proposers,    \* replicas whose clients propose (scope; R for everything)
    Candidates,   \* replicas whose timeout may fire (scope; R for everything)
    Crashable,    \* replicas that may crash (scope)
    Recoverers,   \* replicas that may run C-instance recovery (scope)
    Learners,     \* replicas that learn others' commits and execute (scope)
    Voters,       \* replicas that answer V-requests (scope)
    CAcceptors,   \* replicas that accept other replicas' C-accepts (scope)
    \* Deliberate bugs; every cfg but the mutation cfgs sets them all FALSE.
    MutNoAllocGuard,   \* allocate one O-instance per C-accept/C-request received
    MutAcceptOldView,  \* accept C-accepts whose view is older than ours
    MutNoInference,    \* N = 5: skip the R_m inference in the view change
    MutReadyNoPrefix,  \* N = 5 non-sequencer ready rule ignores O_k, k < j
    MutNoReaccept      \* send NewView without the majority re-acceptance

ASSUME N \in {3, 5}

R      == 0 .. (N - 1)
Maj    == N \div 2 + 1
Seq0   == 0                        \* the configured sequencer of view 0
Slots  == 0 .. (MaxSlot - 1)
CIdx   == 0 .. (MaxCIdx - 1)
Cmds   == 1 .. MaxCmds
Views  == 0 .. MaxView

\* C-values: a command id, NoOp, or Nil (nothing accepted).
NoOp   == -1
Nil    == -2
\* O-values: an owner id, NoCl (the paper's no-cl), or Empty.
NoCl   == -1
Empty  == -2
All    == -1                       \* dst of a broadcast O-accept

CBal(rnd, r) == rnd * N + r        \* core: make_ballot(round, replica), stride N here
BalOwner(b)  == b % N
MaxB         == CBal(MaxCRound, N - 1)

Max(S) == CHOOSE x \in S : \A y \in S : x >= y
Min(S) == CHOOSE x \in S : \A y \in S : x =< y
Range(f) == {f[x] : x \in DOMAIN f}

NoRec == [n |-> -1, i |-> -1, b |-> -1]     \* no C-recovery in progress
NoOCom == [b |-> -1, o |-> Empty]            \* no O-commit known

\* The nearest majority-1 peers that get the sequencer's own O-accepts
\* (configured proximity in the core; fixed by id here).
SeqPeers(s) == {(s + d) % N : d \in 1 .. (Maj - 1)}

-----------------------------------------------------------------------------
(***************************************************************************)
(* Variables.  Durable ones are exactly what Restart keeps.                *)
(***************************************************************************)

\* --- durable (core: storage records; kept by Restart) ---
VARIABLES
    cProm,     \* cProm[a][n][i]: ballot acceptor a promised for C_n^i (-1)
    cAccB,     \* cAccB[a][n][i]: ballot of the value a accepted for C_n^i (-1)
    cAccV,     \* cAccV[a][n][i]: that value (Nil)
    oAccB,     \* oAccB[a][j]: ballot (= view) of a's accepted value for O_j (-1)
    oAccV,     \* oAccV[a][j]: that value (Empty)
    pView,     \* pView[a]: promised view; messages of older views are dropped
    estView,   \* estView[a]: the last view whose re-proposed range a accepted
    estSeq,    \* estSeq[a]: that view's sequencer (sender of the range)
    estEnd     \* estEnd[a]: end of that view's range
durableVars == <<cProm, cAccB, cAccV, oAccB, oAccV, pView, estView, estSeq, estEnd>>

\* --- volatile (lost by Crash/Restart) ---
VARIABLES
    up,        \* up[r]: r is running
    nvView,    \* nvView[r]: view of the last NewView r adopted (-1 after restart)
    nvSeq,     \* nvSeq[r]: the sequencer of nvView[r]
    nvEnd,     \* nvEnd[r]: end of nvView[r]'s re-proposed range
    want,      \* want[s][n]: sequencer s: C-instances of n it was asked to order
    sent,      \* sent[s][d]: sequencer s: O-instances below this were sent to d
    cand,      \* cand[r]: view r is a candidate for (-1)
    candPhase, \* "none", "votes" (collecting votes), "reaccept" (range sent)
    candLog,   \* candLog[r]: the rebuilt assignment log being re-accepted
    prop,      \* prop[r]: C-proposals r leads and has not seen committed
    crec,      \* crec[r]: C-recovery r runs in phase 1 (NoRec if none)
    cCom,      \* cCom[r][n][i]: value r knows committed for C_n^i (Nil)
    oCom,      \* oCom[r][j]: [b, o] r knows committed for O_j (NoOCom)
    execd,     \* execd[r]: executed slots, in order: [slot, o, ci, cmd]
    lost       \* lost[r]: r's commands whose C-instance was chosen as no-op
volatileVars == <<up, nvView, nvSeq, nvEnd, want, sent, cand, candPhase, candLog,
                  prop, crec, cCom, oCom, execd, lost>>

\* --- network ---
VARIABLE msgs  \* every message ever sent

\* --- HISTORY variables: would not be present in an implementation ---
VARIABLES
    nextCmd,     \* next fresh client command (the environment)
    readySlot,   \* readySlot[c]: slot where c was ready (replied to), -1
    readyAt,     \* readyAt[c]: [n, i, v]: c's C-instance C_n^i, and the view it was ready in
    readyBefore, \* readyBefore[c]: commands ready when c was first proposed
    cVotes,      \* every C-acceptance ever: [a, n, i, b, v]
    oVotes,      \* every O-acceptance ever: [a, j, b, o]
    execSlots,   \* every [slot, o, v] any replica ever executed (v: view of the commit used)
    crashes,     \* crashes so far (bounded by MaxCrashes)
    fenceBroken, \* some acceptor accepted a message of a view older than its own
    revoked      \* a NewView overwrote (or dropped) an executed slot
historyVars == <<nextCmd, readySlot, readyAt, readyBefore, cVotes, oVotes, execSlots,
                 crashes, fenceBroken, revoked>>

vars == <<durableVars, volatileVars, msgs, historyVars>>

-----------------------------------------------------------------------------
(* Helpers *)

Active(r) == up[r] /\ nvView[r] = pView[r]         \* not frozen by a view change
IsSeq(s)  == Active(s) /\ nvSeq[s] = s /\ cand[s] = -1

\* End of sequencer s's log: every slot below it holds a value at ballot = its view.
SeqEnd(s) == Max({e \in 0 .. MaxSlot : \A j \in 0 .. (e - 1) : oAccB[s][j] = nvView[s]})
Cov(s, n) == Cardinality({j \in Slots : j < SeqEnd(s) /\ oAccV[s][j] = n})

\* r's own next C-index, derived from durable state (decision 6).
NextC(r) == 1 + Max({-1} \cup {i \in CIdx : cProm[r][r][i] >= 0})

\* The value r holds for O_j in its current view (its local assignment log).
LogVal(r, j) == IF j < nvEnd[r] \/ oAccB[r][j] = nvView[r] THEN oAccV[r][j] ELSE Empty

\* How many replicas the sequencer s knows accepted O_k in view v (itself
\* included): the prefix O-ACKs it received.
AckCount(s, v, k) ==
    Cardinality({s} \cup {q \in R : \E a \in msgs : a.type = "OAck" /\ a.dst = s
                                     /\ a.src = q /\ a.view = v /\ a.upto > k})

\* The O-instances r considers safe (the ready rule's quorum condition).
SafeP(r, k) ==
    \/ k < nvEnd[r]                                  \* chosen by the view change
    \/ /\ oAccB[r][k] = nvView[r]                    \* accepted by r and the sequencer
       /\ (nvSeq[r] # r \/ AckCount(r, nvView[r], k) >= Maj)
SafeSet(r) ==
    IF MutReadyNoPrefix /\ N = 5 /\ nvSeq[r] # r
    THEN {k \in Slots : SafeP(r, k)}
    ELSE 0 .. (Max({u \in 0 .. MaxSlot : \A k \in 0 .. (u - 1) : SafeP(r, k)}) - 1)

\* The slot the counting rule gives C_r^i in r's local log (-1 if none).
SlotOf(r, i) ==
    LET js == {j \in Slots : LogVal(r, j) = r
                   /\ Cardinality({h \in Slots : h < j /\ LogVal(r, h) = r}) = i}
    IN IF js = {} THEN -1 ELSE Min(js)

CountIn(seq, n) == Cardinality({k \in DOMAIN seq : seq[k] = n})
Executed(r, j) == j < Len(execd[r])

\* Upto of a prefix O-ACK: every O-instance below it accepted at ballot v.
PrefixUpto(b, v) == Max({u \in 0 .. MaxSlot : \A j \in 0 .. (u - 1) : b[j] = v})

\* The vote a replica sends (decision 2).  For each slot the accepted value,
\* or the committed one learned from an O-commit (ballot = its view), the
\* higher ballot first.
BestO(r, j) == IF oCom[r][j].b > oAccB[r][j] THEN oCom[r][j]
               ELSE [b |-> oAccB[r][j], o |-> oAccV[r][j]]
CMax(r, n) == Max({-1} \cup {i \in CIdx : cAccB[r][n][i] >= 0})
VoteMsg(r, c, v) ==
    [type |-> "Vote", src |-> r, dst |-> c, view |-> v,
     olog |-> [j \in Slots |-> BestO(r, j)],
     cmax |-> [n \in R |-> CMax(r, n)],
     ev |-> estView[r], es |-> estSeq[r], ee |-> estEnd[r]]

(***************************************************************************)
(* Rebuilding the assignment log from a majority of votes (decision 3).    *)
(***************************************************************************)
\* The k-th (1-based) slot holding m in lg, or MaxSlot if there is none.
KthSlot(lg, m, k) ==
    LET js == {j \in Slots : lg[j] = m /\ Cardinality({h \in Slots : h < j /\ lg[h] = m}) = k - 1}
    IN IF js = {} THEN MaxSlot ELSE Min(js)

\* Paper Fig. 7 lines 32-36: give R_m the first empty slots, one C-instance
\* per slot, until m's coverage reaches C+1 and no empty slot precedes the
\* (C+1)-th of them.
RECURSIVE Fill(_, _, _)
Fill(lg, m, C) ==
    LET empties == {j \in Slots : lg[j] = Empty}
        done == \/ C < 0
                \/ /\ Cardinality({j \in Slots : lg[j] = m}) >= C + 1
                   /\ ~\E h \in empties : h < KthSlot(lg, m, C + 1)
    IN IF done \/ empties = {} THEN lg
       ELSE Fill([lg EXCEPT ![Min(empties)] = m], m, C)

BuildLog(Q) ==     \* Q: a set of Vote messages from a majority
    LET W   == Max({q.ev : q \in Q})
        wq  == CHOOSE q \in Q : q.ev = W
        E   == wq.ee                   \* end of the newest established range
        old == wq.es                   \* the sequencer of that view
        srcs == {q.src : q \in Q}
        \* Values at ballot < W beyond W's range were superseded by W's
        \* re-proposal and are ignored.
        elig(j) == {q.olog[j] : q \in {x \in Q : x.olog[j].o # Empty
                                       /\ (j < E \/ x.olog[j].b >= W)}}
        best(j) == IF elig(j) = {} THEN Empty
                   ELSE (CHOOSE e \in elig(j) : \A f \in elig(j) : e.b >= f.b).o
        lg0 == [j \in Slots |-> best(j)]
        others == R \ (srcs \cup {old})
        lg1 == IF N = 5 /\ ~MutNoInference /\ old \notin srcs /\ Cardinality(others) = 1
               THEN LET m == CHOOSE x \in others : TRUE
                    IN Fill(lg0, m, Max({q.cmax[m] : q \in Q}))
               ELSE lg0
        nonEmpty == {j \in Slots : lg1[j] # Empty}
        len == IF nonEmpty = {} THEN 0 ELSE Max(nonEmpty) + 1
    IN [k \in 1 .. len |-> IF lg1[k - 1] = Empty THEN NoCl ELSE lg1[k - 1]]

-----------------------------------------------------------------------------
Init ==
    /\ cProm = [a \in R |-> [n \in R |-> [i \in CIdx |-> -1]]]
    /\ cAccB = [a \in R |-> [n \in R |-> [i \in CIdx |-> -1]]]
    /\ cAccV = [a \in R |-> [n \in R |-> [i \in CIdx |-> Nil]]]
    /\ oAccB = [a \in R |-> [j \in Slots |-> -1]]
    /\ oAccV = [a \in R |-> [j \in Slots |-> Empty]]
    /\ pView = [a \in R |-> 0]
    /\ estView = [a \in R |-> 0]
    /\ estSeq = [a \in R |-> Seq0]
    /\ estEnd = [a \in R |-> 0]
    /\ up = [r \in R |-> TRUE]
    /\ nvView = [r \in R |-> 0]
    /\ nvSeq = [r \in R |-> Seq0]
    /\ nvEnd = [r \in R |-> 0]
    /\ want = [s \in R |-> [n \in R |-> 0]]
    /\ sent = [s \in R |-> [d \in R |-> 0]]
    /\ cand = [r \in R |-> -1]
    /\ candPhase = [r \in R |-> "none"]
    /\ candLog = [r \in R |-> <<>>]
    /\ prop = [r \in R |-> {}]
    /\ crec = [r \in R |-> NoRec]
    /\ cCom = [r \in R |-> [n \in R |-> [i \in CIdx |-> Nil]]]
    /\ oCom = [r \in R |-> [j \in Slots |-> NoOCom]]
    /\ execd = [r \in R |-> <<>>]
    /\ lost = [r \in R |-> {}]
    \* View 0 is configured; its "notification" lets a restarted replica re-learn it.
    /\ msgs = {[type |-> "NewView", src |-> Seq0, view |-> 0, vals |-> <<>>]}
    /\ nextCmd = 1
    /\ readySlot = [c \in Cmds |-> -1]
    /\ readyAt = [c \in Cmds |-> [n |-> -1, i |-> -1, v |-> -1]]
    /\ readyBefore = [c \in Cmds |-> {}]
    /\ cVotes = {}
    /\ oVotes = {}
    /\ execSlots = {}
    /\ crashes = 0
    /\ fenceBroken = FALSE
    /\ revoked = FALSE

-----------------------------------------------------------------------------
(***************************************************************************)
(* Propose(r): R_r puts a client command in its next C-instance C_r^i at   *)
(* the owner ballot r (round 0), accepts it itself (durably, so i is never *)
(* reused after a restart) and sends the C-accept.  Safe: ballot r is used *)
(* only by r, and only once per instance, so C_r^i has one round-0 value.  *)
(* A command whose instance was chosen as no-op is re-proposed here too    *)
(* (lost[r]); exactly-once by (client id, seq) makes that harmless.        *)
(***************************************************************************)
Propose(r) ==
    /\ r \in Proposers /\ Active(r)
    /\ \E c \in (IF nextCmd =< MaxCmds THEN {nextCmd} ELSE {}) \cup lost[r] :
         LET i == NextC(r)
             v == pView[r]
         IN /\ i < MaxCIdx
            /\ cProm' = [cProm EXCEPT ![r][r][i] = r]
            /\ cAccB' = [cAccB EXCEPT ![r][r][i] = r]
            /\ cAccV' = [cAccV EXCEPT ![r][r][i] = c]
            /\ prop' = [prop EXCEPT ![r] = @ \cup {[n |-> r, i |-> i, b |-> r, v |-> c]}]
            /\ lost' = [lost EXCEPT ![r] = @ \ {c}]
            /\ msgs' = msgs \cup
                 {[type |-> "CAccept", src |-> r, view |-> v, n |-> r, i |-> i, b |-> r, v |-> c],
                  [type |-> "CAck", src |-> r, view |-> v, n |-> r, i |-> i, b |-> r]}
            /\ cVotes' = cVotes \cup {[a |-> r, n |-> r, i |-> i, b |-> r, v |-> c]}
            /\ IF c = nextCmd
               THEN /\ nextCmd' = nextCmd + 1
                    /\ readyBefore' = [readyBefore EXCEPT ![c] = {d \in Cmds : readySlot[d] >= 0}]
               ELSE UNCHANGED <<nextCmd, readyBefore>>
    /\ UNCHANGED <<oAccB, oAccV, pView, estView, estSeq, estEnd, up, nvView, nvSeq, nvEnd,
                   want, sent, cand, candPhase, candLog, crec, cCom, oCom, execd,
                   readySlot, readyAt, oVotes, execSlots, crashes, fenceBroken, revoked>>

\* The sequencer's allocation guard: want[n] is the number of C-instances n
\* has (index + 1), never a count of messages received.
WantAfter(w, i) == IF MutNoAllocGuard THEN Min({w + 1, MaxSlot}) ELSE Max({w, i + 1})

(***************************************************************************)
(* HandleCAccept(r, m): Paxos phase 2b for C_n^i, plus the sequencer's     *)
(* trigger.  Safe: the acceptor drops messages of views older than its own *)
(* (after voting in view v it never accepts an old-view C-accept, so the   *)
(* C_max it reported stays an upper bound, pitfall 5) and accepts only at  *)
(* a ballot >= its promise.  The sequencer only raises want[n] to i+1, so  *)
(* a duplicated or retransmitted C-accept never allocates twice.           *)
(***************************************************************************)
HandleCAccept(r, m) ==
    /\ m.type = "CAccept" /\ up[r]
    /\ r \in CAcceptors \/ r = BalOwner(m.b) \/ IsSeq(r)
    /\ (m.view >= pView[r] \/ MutAcceptOldView)
    /\ LET seqt == IsSeq(r) /\ m.view = nvView[r]
           ack  == [type |-> "CAck", src |-> r, view |-> pView[r], n |-> m.n, i |-> m.i, b |-> m.b]
           same == cAccB[r][m.n][m.i] = m.b /\ cProm[r][m.n][m.i] = m.b /\ ack \in msgs
           \* (a replica outside the CAcceptors scope still triggers as sequencer)
           acc  == (r \in CAcceptors \/ r = BalOwner(m.b)) /\ m.b >= cProm[r][m.n][m.i]
       IN /\ (acc /\ ~same) \/ (seqt /\ WantAfter(want[r][m.n], m.i) # want[r][m.n])
          /\ cProm' = IF acc THEN [cProm EXCEPT ![r][m.n][m.i] = m.b] ELSE cProm
          /\ cAccB' = IF acc THEN [cAccB EXCEPT ![r][m.n][m.i] = m.b] ELSE cAccB
          /\ cAccV' = IF acc THEN [cAccV EXCEPT ![r][m.n][m.i] = m.v] ELSE cAccV
          /\ cVotes' = IF acc THEN cVotes \cup {[a |-> r, n |-> m.n, i |-> m.i, b |-> m.b, v |-> m.v]}
                       ELSE cVotes
          /\ fenceBroken' = (fenceBroken \/ (acc /\ m.view < pView[r]))
          /\ msgs' = IF acc THEN msgs \cup {[type |-> "CAck", src |-> r, view |-> pView[r],
                                             n |-> m.n, i |-> m.i, b |-> m.b]}
                     ELSE msgs
          /\ want' = IF seqt THEN [want EXCEPT ![r][m.n] = WantAfter(@, m.i)] ELSE want
    /\ UNCHANGED <<oAccB, oAccV, pView, estView, estSeq, estEnd, up, nvView, nvSeq, nvEnd,
                   sent, cand, candPhase, candLog, prop, crec, cCom, oCom, execd, lost,
                   nextCmd, readySlot, readyAt, readyBefore, oVotes, execSlots, crashes, revoked>>

(***************************************************************************)
(* HandleCAck(r, m): the proposer of ballot m.b (its owner, or the         *)
(* recovering replica) commits C_n^i once a majority, itself included,     *)
(* accepted its ballot, and broadcasts the C-commit.  Safe: classic Paxos; *)
(* the value is the one it proposed at that ballot, which is unique.       *)
(***************************************************************************)
HandleCAck(r, m) ==
    /\ m.type = "CAck" /\ up[r] /\ BalOwner(m.b) = r /\ m.view >= pView[r]
    /\ \E p \in prop[r] :
         /\ p.n = m.n /\ p.i = m.i /\ p.b = m.b
         /\ Cardinality({q \in R : \E a \in msgs : a.type = "CAck" /\ a.src = q /\ a.n = p.n
                                     /\ a.i = p.i /\ a.b = p.b /\ a.view >= pView[r]}) >= Maj
         /\ cCom' = [cCom EXCEPT ![r][p.n][p.i] = p.v]
         /\ prop' = [prop EXCEPT ![r] = @ \ {p}]
         /\ msgs' = msgs \cup {[type |-> "CCommit", view |-> pView[r], n |-> p.n, i |-> p.i,
                                b |-> p.b, v |-> p.v]}
    /\ UNCHANGED <<durableVars, up, nvView, nvSeq, nvEnd, want, sent, cand, candPhase, candLog,
                   crec, oCom, execd, lost, historyVars>>

(***************************************************************************)
(* HandleCCommit(r, m): learn that C_n^i is chosen.  If r proposed a       *)
(* command there and the chosen value is a no-op (another replica          *)
(* recovered the instance), the command is re-proposed later (lost[r]).    *)
(***************************************************************************)
HandleCCommit(r, m) ==
    /\ m.type = "CCommit" /\ r \in Learners /\ up[r] /\ m.view >= pView[r]
    /\ cCom[r][m.n][m.i] = Nil
    /\ cCom' = [cCom EXCEPT ![r][m.n][m.i] = m.v]
    /\ LET mine == {p \in prop[r] : p.n = m.n /\ p.i = m.i}
           gone == {p.v : p \in {q \in mine : q.n = r /\ q.v \in Cmds /\ m.v = NoOp}}
       IN /\ prop' = [prop EXCEPT ![r] = @ \ mine]
          /\ lost' = [lost EXCEPT ![r] = @ \cup gone]
    /\ UNCHANGED <<durableVars, up, nvView, nvSeq, nvEnd, want, sent, cand, candPhase, candLog,
                   crec, oCom, execd, msgs, historyVars>>

(***************************************************************************)
(* HandleCRequest(s, m): the sequencer of m's view learns that n has       *)
(* C-instances 0..i.  Same guard as HandleCAccept.                         *)
(***************************************************************************)
HandleCRequest(s, m) ==
    /\ m.type = "CRequest" /\ IsSeq(s) /\ m.view = nvView[s]
    /\ WantAfter(want[s][m.n], m.i) # want[s][m.n]
    /\ want' = [want EXCEPT ![s][m.n] = WantAfter(@, m.i)]
    /\ UNCHANGED <<durableVars, up, nvView, nvSeq, nvEnd, sent, cand, candPhase, candLog, prop,
                   crec, cCom, oCom, execd, lost, msgs, historyVars>>

(***************************************************************************)
(* AllocateO(s, n): the sequencer gives the next O-instance to n while n's *)
(* coverage is below want[n] (paper Fig. 5 line 13, made idempotent).  It  *)
(* accepts the value itself (ballot = view) and sends an O-accept carrying *)
(* every O-instance the recipient has not been sent: to n, or, for its own *)
(* slots, to its nearest majority-1 peers.  Safe: one value per slot and   *)
(* view; never more O-instances for n than n has C-instances.              *)
(***************************************************************************)
AllocateO(s, n) ==
    /\ IsSeq(s)
    /\ Cov(s, n) < want[s][n]
    /\ LET e == SeqEnd(s)
           v == nvView[s]
           D == IF n # s THEN {n} ELSE SeqPeers(s)
           val(j) == IF j = e THEN n ELSE oAccV[s][j]
       IN /\ e < MaxSlot
          /\ oAccB' = [oAccB EXCEPT ![s][e] = v]
          /\ oAccV' = [oAccV EXCEPT ![s][e] = n]
          /\ oVotes' = oVotes \cup {[a |-> s, j |-> e, b |-> v, o |-> n]}
          /\ msgs' = msgs \cup
               {[type |-> "OAccept", src |-> s, dst |-> d, view |-> v, start |-> sent[s][d],
                 vals |-> [k \in 1 .. (e + 1 - sent[s][d]) |-> val(sent[s][d] + k - 1)],
                 rng |-> FALSE] : d \in D}
          /\ sent' = [sent EXCEPT ![s] = [d \in R |-> IF d \in D THEN e + 1 ELSE @[d]]]
    /\ UNCHANGED <<cProm, cAccB, cAccV, pView, estView, estSeq, estEnd, up, nvView, nvSeq,
                   nvEnd, want, cand, candPhase, candLog, prop, crec, cCom, oCom, execd, lost,
                   nextCmd, readySlot, readyAt, readyBefore, cVotes, execSlots, crashes, fenceBroken,
                   revoked>>

(***************************************************************************)
(* HandleOAccept(r, m): accept a range of O-instances at ballot m.view and *)
(* send a prefix O-ACK to the sender when the range holds its own slots or *)
(* is a view change's re-proposal.  Accepting at ballot v is a promise for *)
(* view v (pView := v), so a later O-accept of an older view can never     *)
(* overwrite it.  Accepting a re-proposal records it as the newest         *)
(* established range (estView/estSeq/estEnd, durable, reported in votes).  *)
(***************************************************************************)
HandleOAccept(r, m) ==
    /\ m.type = "OAccept" /\ up[r] /\ m.dst \in {r, All} /\ m.view >= pView[r]
    /\ LET v == m.view
           last == m.start + Len(m.vals) - 1
           inR(j) == m.start =< j /\ j =< last
           nb == [j \in Slots |-> IF inR(j) THEN v ELSE oAccB[r][j]]
           mine == m.rng \/ \E k \in DOMAIN m.vals : m.vals[k] = m.src
           ack == [type |-> "OAck", src |-> r, dst |-> m.src, view |-> v, upto |-> PrefixUpto(nb, v)]
       IN /\ last < MaxSlot
          \* a re-delivery that changes nothing is not a step
          /\ \/ \E j \in m.start .. last : oAccB[r][j] # v \/ oAccV[r][j] # m.vals[j - m.start + 1]
             \/ pView[r] # v
             \/ m.rng /\ v > estView[r]
             \/ mine /\ ack \notin msgs
          /\ pView' = [pView EXCEPT ![r] = v]
          /\ oAccB' = [oAccB EXCEPT ![r] = nb]
          /\ oAccV' = [oAccV EXCEPT ![r] = [j \in Slots |-> IF inR(j) THEN m.vals[j - m.start + 1]
                                                            ELSE @[j]]]
          /\ oVotes' = oVotes \cup {[a |-> r, j |-> j, b |-> v, o |-> m.vals[j - m.start + 1]] :
                                    j \in m.start .. last}
          /\ IF m.rng /\ v > estView[r]
             THEN /\ estView' = [estView EXCEPT ![r] = v]
                  /\ estSeq' = [estSeq EXCEPT ![r] = m.src]
                  /\ estEnd' = [estEnd EXCEPT ![r] = last + 1]
             ELSE UNCHANGED <<estView, estSeq, estEnd>>
          /\ msgs' = IF mine THEN msgs \cup {ack} ELSE msgs
    /\ UNCHANGED <<cProm, cAccB, cAccV, up, nvView, nvSeq, nvEnd, want, sent, cand, candPhase,
                   candLog, prop, crec, cCom, oCom, execd, lost, nextCmd, readySlot,
                   readyAt, readyBefore, cVotes, execSlots, crashes, fenceBroken, revoked>>

(***************************************************************************)
(* HandleOAck(r, m): a candidate whose re-proposed range was accepted by a *)
(* majority in its view has CHOSEN the range: it broadcasts the NewView    *)
(* notification.  (At a sequencer an O-ACK only adds to what it knows      *)
(* about acceptance; that knowledge is read from msgs by MaybeReady.)      *)
(* Safe: every later view's majority of voters intersects this majority, *)
(* which reports the range at ballot v or higher (decision 4).           *)
(***************************************************************************)
NewViewMsg(r, v, L) == [type |-> "NewView", src |-> r, view |-> v, vals |-> L]
\* History: did a NewView of view v carrying log L drop or change a slot
\* executed on the strength of a commit of an older view?  (A slot executed
\* in a later view v' > v, whose change completed first, is not revoked by
\* a late NewView(v): that NewView is dropped by everyone in v'.)
Revokes(L, v) == \E e \in execSlots : e.v < v /\ (e.slot >= Len(L) \/ L[e.slot + 1] # e.o)

HandleOAck(r, m) ==
    /\ m.type = "OAck" /\ up[r] /\ m.dst = r
    /\ cand[r] = m.view /\ pView[r] = m.view /\ candPhase[r] = "reaccept"
    /\ Cardinality({q \in R : \E a \in msgs : a.type = "OAck" /\ a.dst = r /\ a.src = q
                               /\ a.view = m.view /\ a.upto >= Len(candLog[r])}) >= Maj
    /\ msgs' = msgs \cup {NewViewMsg(r, m.view, candLog[r])}
    /\ revoked' = (revoked \/ Revokes(candLog[r], m.view))
    /\ cand' = [cand EXCEPT ![r] = -1]
    /\ candPhase' = [candPhase EXCEPT ![r] = "none"]
    /\ candLog' = [candLog EXCEPT ![r] = <<>>]
    /\ UNCHANGED <<durableVars, up, nvView, nvSeq, nvEnd, want, sent, prop, crec, cCom, oCom,
                   execd, lost, nextCmd, readySlot, readyAt, readyBefore, cVotes, oVotes, execSlots,
                   crashes, fenceBroken>>

(***************************************************************************)
(* HandleOCommit(r, m): learn that O_slot holds m.o (ballot m.view).  For  *)
(* N = 5 a non-sequencer's O-commit is revocable until executed: a later   *)
(* NewView overwrites it.                                                  *)
(***************************************************************************)
HandleOCommit(r, m) ==
    /\ m.type = "OCommit" /\ r \in Learners /\ up[r] /\ m.view >= pView[r]
    /\ ~Executed(r, m.slot)
    /\ oCom[r][m.slot].b < m.view \/ oCom[r][m.slot].o = Empty
    /\ oCom' = [oCom EXCEPT ![r][m.slot] = [b |-> m.view, o |-> m.o]]
    /\ UNCHANGED <<durableVars, up, nvView, nvSeq, nvEnd, want, sent, cand, candPhase, candLog,
                   prop, crec, cCom, execd, lost, msgs, historyVars>>

(***************************************************************************)
(* MaybeReady(r) (core: _maybe_ready): the owner commits its own           *)
(* O-instances in its safe prefix and broadcasts O-commits, and answers    *)
(* clients for committed C-instances whose slot is in the safe prefix:     *)
(* every O_k, k =< j, accepted by a majority (the sequencer counts         *)
(* O-ACKs), or, for a non-sequencer, by itself and the sequencer (paper    *)
(* Fig. 5 lines 21, 26 and 30), or chosen by the view change.              *)
(***************************************************************************)
MaybeReady(r) ==
    /\ Active(r)
    /\ LET v == nvView[r]
           S == SafeSet(r)
           newO == {k \in S : LogVal(r, k) = r /\ oCom[r][k] # [b |-> v, o |-> r]}
           rdy == {i \in CIdx : cCom[r][r][i] \in Cmds /\ readySlot[cCom[r][r][i]] < 0
                                /\ SlotOf(r, i) \in S}
       IN /\ newO # {} \/ rdy # {}
          /\ oCom' = [oCom EXCEPT ![r] = [k \in Slots |-> IF k \in newO THEN [b |-> v, o |-> r]
                                                          ELSE @[k]]]
          /\ msgs' = msgs \cup {[type |-> "OCommit", view |-> v, slot |-> k, o |-> r] : k \in newO}
          /\ readySlot' = [c \in Cmds |->
                             IF \E i \in rdy : cCom[r][r][i] = c
                             THEN SlotOf(r, CHOOSE i \in rdy : cCom[r][r][i] = c)
                             ELSE readySlot[c]]
          /\ readyAt' = [c \in Cmds |->
                             IF \E i \in rdy : cCom[r][r][i] = c
                             THEN [n |-> r, i |-> CHOOSE i \in rdy : cCom[r][r][i] = c, v |-> v]
                             ELSE readyAt[c]]
    /\ UNCHANGED <<durableVars, up, nvView, nvSeq, nvEnd, want, sent, cand, candPhase, candLog,
                   prop, crec, cCom, execd, lost, nextCmd, readyBefore, cVotes, oVotes,
                   execSlots, crashes, fenceBroken, revoked>>

(***************************************************************************)
(* Execute(r): the next slot j is committed; no-cl skips it; otherwise it  *)
(* runs C_n^k, k = number of n's C-instances covered by slots < j, once    *)
(* C_n^k is committed (a no-op runs nothing).  The mapping is recomputed   *)
(* from the executed prefix, never cached across views (pitfall 2).        *)
(***************************************************************************)
Execute(r) ==
    /\ r \in Learners /\ up[r]
    /\ LET j == Len(execd[r])
           o == oCom[r][j].o
           k == Cardinality({p \in DOMAIN execd[r] : execd[r][p].o = o})
       IN /\ j < MaxSlot
          /\ o # Empty
          /\ IF o = NoCl THEN TRUE ELSE k < MaxCIdx /\ cCom[r][o][k] # Nil
          /\ execd' = [execd EXCEPT ![r] = Append(@,
                         IF o = NoCl THEN [slot |-> j, o |-> NoCl, ci |-> -1, cmd |-> NoOp]
                         ELSE [slot |-> j, o |-> o, ci |-> k, cmd |-> cCom[r][o][k]])]
          /\ execSlots' = execSlots \cup {[slot |-> j, o |-> o, v |-> oCom[r][j].b]}
    /\ UNCHANGED <<durableVars, nvView, nvSeq, nvEnd, up, want, sent, cand, candPhase, candLog,
                   prop, crec, cCom, oCom, lost, msgs, nextCmd, readySlot, readyAt, readyBefore, cVotes,
                   oVotes, crashes, fenceBroken, revoked>>

(***************************************************************************)
(* StartViewChange(r): a timeout (decision 7; any replica, any time).  r   *)
(* promises view pView+1 durably, votes for itself and sends V-requests.   *)
(***************************************************************************)
StartViewChange(r) ==
    /\ r \in Candidates /\ up[r] /\ pView[r] < MaxView
    /\ LET v == pView[r] + 1
       IN /\ pView' = [pView EXCEPT ![r] = v]
          /\ cand' = [cand EXCEPT ![r] = v]
          /\ candPhase' = [candPhase EXCEPT ![r] = "votes"]
          /\ candLog' = [candLog EXCEPT ![r] = <<>>]
          /\ msgs' = msgs \cup {[type |-> "VRequest", src |-> r, view |-> v], VoteMsg(r, r, v)}
    /\ UNCHANGED <<cProm, cAccB, cAccV, oAccB, oAccV, estView, estSeq, estEnd, up, nvView,
                   nvSeq, nvEnd, want, sent, prop, crec, cCom, oCom, execd, lost, historyVars>>

(***************************************************************************)
(* HandleVRequest(r, m): vote at most once per view: only for a view above *)
(* the promised one, which is raised durably before the vote leaves.  From *)
(* now on r drops every message of an older view (fencing).  (Leases: a   *)
(* replica that granted one does not vote until it expires; that only     *)
(* delays this action, so it is covered, see docs/recovery.md.)           *)
(***************************************************************************)
HandleVRequest(r, m) ==
    /\ m.type = "VRequest" /\ r \in Voters /\ up[r] /\ m.view > pView[r]
    /\ pView' = [pView EXCEPT ![r] = m.view]
    /\ cand' = [cand EXCEPT ![r] = -1]
    /\ candPhase' = [candPhase EXCEPT ![r] = "none"]
    /\ candLog' = [candLog EXCEPT ![r] = <<>>]
    /\ msgs' = msgs \cup {VoteMsg(r, m.src, m.view)}
    /\ UNCHANGED <<cProm, cAccB, cAccV, oAccB, oAccV, estView, estSeq, estEnd, up, nvView,
                   nvSeq, nvEnd, want, sent, prop, crec, cCom, oCom, execd, lost, historyVars>>

(***************************************************************************)
(* HandleVote(r, m): the vote that completes a majority (r's own included). *)
(* Rebuild the log (highest ballot per slot, N = 5 inference, no-cl), then *)
(* re-propose the whole range at ballot v to everybody.                    *)
(***************************************************************************)
HandleVote(r, m) ==
    /\ m.type = "Vote" /\ up[r] /\ m.dst = r
    /\ cand[r] = m.view /\ pView[r] = m.view /\ candPhase[r] = "votes"
    /\ LET v == m.view
           VS == {x \in msgs : x.type = "Vote" /\ x.dst = r /\ x.view = v}
       IN \E Q \in SUBSET VS :
            /\ m \in Q
            /\ \E x \in Q : x.src = r
            /\ Cardinality(Q) >= Maj
            /\ LET L == BuildLog(Q)
               IN IF MutNoReaccept
                  THEN /\ msgs' = msgs \cup {NewViewMsg(r, v, L)}
                       /\ revoked' = (revoked \/ Revokes(L, v))
                       /\ cand' = [cand EXCEPT ![r] = -1]
                       /\ candPhase' = [candPhase EXCEPT ![r] = "none"]
                       /\ UNCHANGED candLog
                  ELSE /\ msgs' = msgs \cup {[type |-> "OAccept", src |-> r, dst |-> All,
                                             view |-> v, start |-> 0, vals |-> L, rng |-> TRUE]}
                       /\ candLog' = [candLog EXCEPT ![r] = L]
                       /\ candPhase' = [candPhase EXCEPT ![r] = "reaccept"]
                       /\ UNCHANGED <<cand, revoked>>
    /\ UNCHANGED <<durableVars, up, nvView, nvSeq, nvEnd, want, sent, prop, crec, cCom, oCom,
                   execd, lost, nextCmd, readySlot, readyAt, readyBefore, cVotes, oVotes, execSlots,
                   crashes, fenceBroken>>

(***************************************************************************)
(* HandleNewView(r, m): adopt view v: its sequencer, and its chosen range. *)
(* Every unexecuted O-instance in the range is overwritten and marked      *)
(* committed (even one r had marked committed: the N = 5 commit is         *)
(* revocable until executed); commits r knew beyond the range are dropped. *)
(* An executed slot is never overwritten; the history flag `revoked` marks *)
(* a NewView that would have had to.  Then r re-sends, in view v,          *)
(* C-requests for its C-instances without an O-instance and C-accepts for  *)
(* its uncommitted proposals.                                              *)
(***************************************************************************)
HandleNewView(r, m) ==
    /\ m.type = "NewView" /\ up[r] /\ m.view >= pView[r] /\ m.view > nvView[r]
    /\ LET v == m.view
           L == m.vals
           len == Len(L)
           ow(j) == j < len /\ ~Executed(r, j)
           mine == {i \in CIdx : cAccB[r][r][i] >= 0}
           covd == CountIn(L, r)
       IN /\ len =< MaxSlot
          /\ pView' = [pView EXCEPT ![r] = v]
          /\ nvView' = [nvView EXCEPT ![r] = v]
          /\ nvSeq' = [nvSeq EXCEPT ![r] = m.src]
          /\ nvEnd' = [nvEnd EXCEPT ![r] = len]
          /\ oAccB' = [oAccB EXCEPT ![r] = [j \in Slots |-> IF ow(j) THEN v ELSE @[j]]]
          /\ oAccV' = [oAccV EXCEPT ![r] = [j \in Slots |-> IF ow(j) THEN L[j + 1] ELSE @[j]]]
          /\ oVotes' = oVotes \cup {[a |-> r, j |-> j, b |-> v, o |-> L[j + 1]] :
                                    j \in {x \in 0 .. (len - 1) : ow(x)}}
          /\ oCom' = [oCom EXCEPT ![r] = [j \in Slots |-> IF j < len THEN [b |-> v, o |-> L[j + 1]]
                                                          ELSE NoOCom]]
          /\ revoked' = (revoked \/ \E p \in DOMAIN execd[r] :
                            LET e == execd[r][p] IN e.slot < len /\ L[e.slot + 1] # e.o)
          /\ IF v > estView[r]
             THEN /\ estView' = [estView EXCEPT ![r] = v]
                  /\ estSeq' = [estSeq EXCEPT ![r] = m.src]
                  /\ estEnd' = [estEnd EXCEPT ![r] = len]
             ELSE UNCHANGED <<estView, estSeq, estEnd>>
          /\ want' = [want EXCEPT ![r] = [n \in R |-> CountIn(L, n)]]
          /\ sent' = [sent EXCEPT ![r] = [d \in R |-> len]]
          /\ cand' = [cand EXCEPT ![r] = -1]
          /\ candPhase' = [candPhase EXCEPT ![r] = "none"]
          /\ candLog' = [candLog EXCEPT ![r] = <<>>]
          /\ msgs' = msgs
               \cup (IF mine # {} /\ Max(mine) >= covd
                     THEN {[type |-> "CRequest", src |-> r, view |-> v, n |-> r, i |-> Max(mine)]}
                     ELSE {})
               \cup {[type |-> "CAccept", src |-> r, view |-> v, n |-> p.n, i |-> p.i, b |-> p.b,
                      v |-> p.v] : p \in prop[r]}
    /\ UNCHANGED <<cProm, cAccB, cAccV, up, prop, crec, cCom, execd, lost, nextCmd, readySlot,
                   readyAt, readyBefore, cVotes, execSlots, crashes, fenceBroken>>

(***************************************************************************)
(* StartCRecovery(r): execution at r is blocked on C_n^k (its slot is      *)
(* committed, the C-instance is not).  r picks the smallest recovery       *)
(* ballot (round >= 1) above its own durable promise, promises it itself   *)
(* durably (so it never reuses a ballot after a restart) and sends         *)
(* C-prepare to all.                                                       *)
(***************************************************************************)
StartCRecovery(r) ==
    /\ r \in Recoverers /\ up[r] /\ crec[r] = NoRec
    /\ LET j == Len(execd[r])
           n == oCom[r][j].o
           k == Cardinality({p \in DOMAIN execd[r] : execd[r][p].o = n})
           rnds == {x \in 1 .. MaxCRound : n \in R /\ k < MaxCIdx /\ CBal(x, r) > cProm[r][n][k]}
       IN /\ j < MaxSlot /\ n \in R /\ k < MaxCIdx
          /\ cCom[r][n][k] = Nil
          /\ rnds # {}
          /\ LET b == CBal(Min(rnds), r)
             IN /\ cProm' = [cProm EXCEPT ![r][n][k] = b]
                /\ crec' = [crec EXCEPT ![r] = [n |-> n, i |-> k, b |-> b]]
                /\ msgs' = msgs \cup {[type |-> "CPrepare", src |-> r, view |-> pView[r],
                                       n |-> n, i |-> k, b |-> b]}
    /\ UNCHANGED <<cAccB, cAccV, oAccB, oAccV, pView, estView, estSeq, estEnd, up, nvView,
                   nvSeq, nvEnd, want, sent, cand, candPhase, candLog, prop, cCom, oCom, execd,
                   lost, historyVars>>

(***************************************************************************)
(* HandleCPrepare(r, m): Paxos phase 1b for C_n^i: promise (durably) and   *)
(* report the accepted ballot and value.                                   *)
(***************************************************************************)
HandleCPrepare(r, m) ==
    /\ m.type = "CPrepare" /\ up[r] /\ m.view >= pView[r]
    /\ m.b >= cProm[r][m.n][m.i]
    /\ LET pm == [type |-> "CPromise", src |-> r, view |-> pView[r], n |-> m.n,
                  i |-> m.i, b |-> m.b, ab |-> cAccB[r][m.n][m.i], av |-> cAccV[r][m.n][m.i]]
       IN /\ pm \notin msgs
          /\ cProm' = [cProm EXCEPT ![r][m.n][m.i] = m.b]
          /\ msgs' = msgs \cup {pm}
    /\ UNCHANGED <<cAccB, cAccV, oAccB, oAccV, pView, estView, estSeq, estEnd, volatileVars,
                   historyVars>>

(***************************************************************************)
(* HandleCPromise(r, m): with promises from a majority, propose the value  *)
(* of the highest accepted ballot among them, or a no-op, at ballot b.     *)
(***************************************************************************)
HandleCPromise(r, m) ==
    /\ m.type = "CPromise" /\ up[r] /\ m.view >= pView[r]
    /\ crec[r] # NoRec /\ m.n = crec[r].n /\ m.i = crec[r].i /\ m.b = crec[r].b
    /\ LET P == {x \in msgs : x.type = "CPromise" /\ x.n = m.n /\ x.i = m.i /\ x.b = m.b
                              /\ x.view >= pView[r]}
       IN \E Q \in SUBSET P :
            /\ m \in Q
            /\ Cardinality({x.src : x \in Q}) >= Maj
            /\ LET hb == Max({x.ab : x \in Q})
                   val == IF hb < 0 THEN NoOp ELSE (CHOOSE x \in Q : x.ab = hb).av
               IN /\ crec' = [crec EXCEPT ![r] = NoRec]
                  /\ prop' = [prop EXCEPT ![r] = @ \cup {[n |-> m.n, i |-> m.i, b |-> m.b, v |-> val]}]
                  /\ msgs' = msgs \cup {[type |-> "CAccept", src |-> r, view |-> pView[r], n |-> m.n,
                                         i |-> m.i, b |-> m.b, v |-> val]}
    /\ UNCHANGED <<durableVars, up, nvView, nvSeq, nvEnd, want, sent, cand, candPhase, candLog,
                   cCom, oCom, execd, lost, historyVars>>

(***************************************************************************)
(* Crash(r) and Restart(r).  Restart keeps exactly durableVars (decision 6) *)
(* and re-learns the rest: the view from a NewView (view 0's is in msgs    *)
(* from the start), commits from C-/O-commits, and re-executes from slot 0. *)
(***************************************************************************)
Crash(r) ==
    /\ r \in Crashable /\ up[r] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![r] = FALSE]
    /\ crashes' = crashes + 1
    /\ UNCHANGED <<durableVars, nvView, nvSeq, nvEnd, want, sent, cand, candPhase, candLog, prop,
                   crec, cCom, oCom, execd, lost, msgs, nextCmd, readySlot, readyAt, readyBefore, cVotes,
                   oVotes, execSlots, fenceBroken, revoked>>

Restart(r) ==
    /\ ~up[r]
    /\ up' = [up EXCEPT ![r] = TRUE]
    /\ nvView' = [nvView EXCEPT ![r] = -1]
    /\ nvSeq' = [nvSeq EXCEPT ![r] = -1]
    /\ nvEnd' = [nvEnd EXCEPT ![r] = 0]
    /\ want' = [want EXCEPT ![r] = [n \in R |-> 0]]
    /\ sent' = [sent EXCEPT ![r] = [d \in R |-> 0]]
    /\ cand' = [cand EXCEPT ![r] = -1]
    /\ candPhase' = [candPhase EXCEPT ![r] = "none"]
    /\ candLog' = [candLog EXCEPT ![r] = <<>>]
    /\ prop' = [prop EXCEPT ![r] = {}]
    /\ crec' = [crec EXCEPT ![r] = NoRec]
    /\ cCom' = [cCom EXCEPT ![r] = [n \in R |-> [i \in CIdx |-> Nil]]]
    /\ oCom' = [oCom EXCEPT ![r] = [j \in Slots |-> NoOCom]]
    /\ execd' = [execd EXCEPT ![r] = <<>>]
    /\ lost' = [lost EXCEPT ![r] = {}]
    /\ UNCHANGED <<durableVars, msgs, historyVars>>

(***************************************************************************)
(* Network actions.  With msgs a set of all sent messages, duplication is  *)
(* already there (a handler may take the same message again): the action   *)
(* is a named stutter step.  DropMessage forgets a message for good.       *)
(***************************************************************************)
DuplicateMessage(m) == m \in msgs /\ UNCHANGED vars
DropMessage(m) ==
    /\ ModelLoss /\ m \in msgs
    /\ msgs' = msgs \ {m}
    /\ UNCHANGED <<durableVars, volatileVars, historyVars>>

-----------------------------------------------------------------------------
Next ==
    \/ \E r \in R :
         \/ Propose(r) \/ MaybeReady(r) \/ Execute(r) \/ StartViewChange(r)
         \/ StartCRecovery(r) \/ Crash(r) \/ Restart(r)
         \/ \E n \in R : AllocateO(r, n)
         \/ \E m \in msgs :
              \/ HandleCAccept(r, m) \/ HandleCAck(r, m) \/ HandleCCommit(r, m)
              \/ HandleCRequest(r, m) \/ HandleOAccept(r, m) \/ HandleOAck(r, m)
              \/ HandleOCommit(r, m) \/ HandleVRequest(r, m) \/ HandleVote(r, m)
              \/ HandleNewView(r, m) \/ HandleCPrepare(r, m) \/ HandleCPromise(r, m)
    \/ \E m \in msgs : DropMessage(m)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(***************************************************************************)
(* Invariants (split so TLC names the one that fails).                     *)
(***************************************************************************)
CVals == Cmds \cup {NoOp}
OVals == R \cup {NoCl}

TypeOK ==
    /\ pView \in [R -> Views] /\ estView \in [R -> Views] /\ estEnd \in [R -> 0 .. MaxSlot]
    /\ estSeq \in [R -> R]
    /\ cProm \in [R -> [R -> [CIdx -> -1 .. MaxB]]]
    /\ cAccB \in [R -> [R -> [CIdx -> -1 .. MaxB]]]
    /\ cAccV \in [R -> [R -> [CIdx -> CVals \cup {Nil}]]]
    /\ oAccB \in [R -> [Slots -> -1 .. MaxView]]
    /\ oAccV \in [R -> [Slots -> OVals \cup {Empty}]]
    /\ up \in [R -> BOOLEAN]
    /\ nvView \in [R -> -1 .. MaxView] /\ nvSeq \in [R -> -1 .. (N - 1)]
    /\ nvEnd \in [R -> 0 .. MaxSlot]
    /\ cand \in [R -> -1 .. MaxView] /\ candPhase \in [R -> {"none", "votes", "reaccept"}]
    /\ cCom \in [R -> [R -> [CIdx -> CVals \cup {Nil}]]]
    /\ \A r \in R : \A j \in Slots : oCom[r][j].o \in OVals \cup {Empty}
    /\ \A r \in R : \A p \in DOMAIN execd[r] : execd[r][p].slot = p - 1
    /\ nextCmd \in 1 .. (MaxCmds + 1)
    /\ readySlot \in [Cmds -> -1 .. (MaxSlot - 1)]

\* C_n^i is chosen with value v: a majority accepted v at one ballot.
ChosenC(n, i, v) ==
    \E b \in -1 .. MaxB : Cardinality({a \in R : [a |-> a, n |-> n, i |-> i, b |-> b, v |-> v] \in cVotes}) >= Maj
ChosenO(j, o) ==
    \E b \in Views : Cardinality({a \in R : [a |-> a, j |-> j, b |-> b, o |-> o] \in oVotes}) >= Maj

CChosenUnique ==
    \A n \in R, i \in CIdx : \A v1, v2 \in CVals : ChosenC(n, i, v1) /\ ChosenC(n, i, v2) => v1 = v2

OChosenUnique ==     \* Paxos for O-instances: N = 3 only (N = 5 commits are not Paxos)
    \A j \in Slots : \A o1, o2 \in OVals : ChosenO(j, o1) /\ ChosenO(j, o2) => o1 = o2

\* Consistency: executed logs are prefixes of one another.
ExecPrefixAgreement ==
    \A r1, r2 \in R : \A p \in 1 .. Len(execd[r1]) :
        p =< Len(execd[r2]) => execd[r1][p] = execd[r2][p]

\* Each executed slot runs the command the counting rule maps it to, or a no-op.
ExecMappingSound ==
    \A r \in R : \A p \in DOMAIN execd[r] :
        LET e == execd[r][p] IN
        IF e.o = NoCl THEN e.cmd = NoOp
        ELSE /\ e.ci = Cardinality({h \in 1 .. (p - 1) : execd[r][h].o = e.o})
             /\ ChosenC(e.o, e.ci, e.cmd)

Nontriviality ==
    \A r \in R : \A p \in DOMAIN execd[r] : execd[r][p].cmd \in {c \in Cmds : c < nextCmd} \cup {NoOp}

\* A command ready (answered) before another was proposed executes first.
FirstPos(r, c) == Min({p \in DOMAIN execd[r] : execd[r][p].cmd = c})
LinearizableOrder ==
    \A r \in R : \A c1, c2 \in Cmds :
        (c1 \in readyBefore[c2] /\ \E p \in DOMAIN execd[r] : execd[r][p].cmd = c2)
            => /\ \E p \in DOMAIN execd[r] : execd[r][p].cmd = c1
               /\ FirstPos(r, c1) < FirstPos(r, c2)

\* A ready command keeps its slot: whoever executes that slot runs it, every
\* later view's rebuilt log maps that slot to the command's C-instance, and so
\* does the log of every sequencer of that view or a later one.
MapsTo(lg, lo, j, n, i) ==     \* lg: a function from lo .. to O-values
    lg[j + lo] = n /\ Cardinality({k \in lo .. (j + lo - 1) : lg[k] = n}) = i
ReadyIsDurable ==
    \A c \in Cmds : readySlot[c] >= 0 =>
        LET j == readySlot[c]
            a == readyAt[c]
        IN /\ \A r \in R : Executed(r, j) => execd[r][j + 1].cmd = c
           /\ \A m \in msgs : (m.type = "NewView" /\ m.view > a.v) =>
                 j < Len(m.vals) /\ MapsTo(m.vals, 1, j, a.n, a.i)
           /\ \A s \in R : (Active(s) /\ nvSeq[s] = s /\ nvView[s] >= a.v /\ j < SeqEnd(s)) =>
                 MapsTo(oAccV[s], 0, j, a.n, a.i)

\* Never more O-instances for n than n has C-instances (in any sequencer's
\* current log, and in any rebuilt log).
MaxCreated(n) == Max({-1} \cup {m.i : m \in {x \in msgs : x.type = "CAccept" /\ x.n = n}})
NoOverAllocation ==
    /\ \A s \in R : \A n \in R : (up[s] /\ nvSeq[s] = s /\ nvView[s] >= 0) =>
          Cardinality({j \in Slots : j < SeqEnd(s) /\ oAccV[s][j] = n}) =< MaxCreated(n) + 1
    /\ \A m \in msgs : m.type = "NewView" => \A n \in R : CountIn(m.vals, n) =< MaxCreated(n) + 1

\* One winner per view, and no acceptor ever took a message of an older view.
ViewFencing ==
    /\ \A m1, m2 \in msgs : (m1.type = "NewView" /\ m2.type = "NewView" /\ m1.view = m2.view)
                                => m1 = m2
    /\ ~fenceBroken

\* No NewView ever overwrote or dropped an executed slot, and no slot was
\* executed with a value that contradicts a NewView's range.
ExecutedNeverRevoked ==
    /\ ~revoked
    /\ \A m \in msgs : m.type = "NewView" =>
          \A e \in execSlots : e.slot < Len(m.vals) => m.vals[e.slot + 1] = e.o

=============================================================================
