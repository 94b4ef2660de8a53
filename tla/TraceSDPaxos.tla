---------------------------- MODULE TraceSDPaxos ----------------------------
(***************************************************************************)
(* SDPaxos constrained by a trace: each step of a behaviour must be the    *)
(* next event of `Trace`, a sequence of records                            *)
(*     [a |-> action name, r |-> replica, p |-> parameters, m |-> message] *)
(* where `m` (optional) filters the message the action handles: every      *)
(* field it names must have that value.  TLC explores only the behaviours  *)
(* that follow the trace, so a long trace is checked quickly.             *)
(*                                                                         *)
(* Two uses:                                                               *)
(*  - trace validation (TraceCheck.tla): the simulator's trace of a run;   *)
(*    success is reaching the end (`TraceFinished`), with every invariant  *)
(*    of SDPaxos holding on the way;                                       *)
(*  - scenarios (Scenarios.tla): a review bug's interleaving, replayed    *)
(*    with a mutation on; an invariant must fail before the end.          *)
(*                                                                         *)
(* After each event the trace may move the clock (`t`, optional).          *)
(***************************************************************************)
EXTENDS SDPaxos

CONSTANT Trace
VARIABLE l            \* the next event of Trace to match (1-based)

TVars == <<vars, l>>

Has(e, f) == f \in DOMAIN e
\* Does message x carry every field value the event's filter names?
Fits(e, x) == IF Has(e, "m") THEN \A f \in DOMAIN e.m : f \in DOMAIN x /\ x[f] = e.m[f]
              ELSE TRUE
\* A parameter the event fixes, or every value in S.
PV(e, f, S) == IF Has(e, "p") THEN IF f \in DOMAIN e.p THEN {e.p[f]} ELSE S ELSE S

\* The action the event names, at its replica, on a message that fits.
Act(e) ==
    LET r == e.r IN
    CASE e.a = "Tick"              -> Tick
      [] e.a = "TickTo"            -> e.p.t > clock /\ clock' = e.p.t
                                      /\ UNCHANGED <<durableVars, volatileVars, msgs, historyVars>>
      [] e.a = "Propose"           -> \E c \in PV(e, "c", ProposeChoices(r)) : ProposeCmd(r, c)
      [] e.a = "CommitO"           -> \E k \in PV(e, "upto", 1 .. MaxSlot) : CommitOTo(r, k)
      [] e.a = "LearnStop"         -> \E j \in PV(e, "slot", Slots) : LearnStopAt(r, j)
      [] e.a = "Execute"           -> Execute(r)
      [] e.a = "Resync"            -> Resync(r)
      [] e.a = "AllocateStop"      -> Acc(r) \in PV(e, "slot", {Acc(r)}) /\ AllocateStop(r)
      [] e.a = "StartEpoch"        -> StartEpoch(r) /\ ebase'[r] \in PV(e, "slot", {ebase'[r]})
                                      /\ ep'[r] \in PV(e, "epoch", {ep'[r]})
      [] e.a = "InstallEpoch"      -> \E p \in PV(e, "src", R) : InstallEpoch(r, p)
                                      /\ ebase'[r] \in PV(e, "slot", {ebase'[r]})
                                      /\ ep'[r] \in PV(e, "epoch", {ep'[r]})
      [] e.a = "TakeSnapshot"      -> \E S \in PV(e, "slot", 1 .. MaxSlot) : TakeSnapshotAt(r, S)
      [] e.a = "InstallSnapshot"   -> \E p \in PV(e, "src", R) :
                                        snap[p].slot \in PV(e, "slot", {snap[p].slot})
                                        /\ InstallSnapshot(r, p)
      [] e.a = "StartViewChange"   -> \E v \in PV(e, "v", Views) : StartViewChangeTo(r, v)
      [] e.a = "AbandonCandidacy"  -> AbandonCandidacy(r)
      [] e.a = "BecomeSequencer"   -> BecomeSequencer(r)
      [] e.a = "SendNewView"       -> SendNewView(r)
      [] e.a = "SendHeartbeat"     -> SendHeartbeat(r)
      [] e.a = "Read"              -> Read(r)
      [] e.a = "StartCRecovery"    -> StartCRecovery(r)
      [] e.a = "AbandonCRecovery"  -> AbandonCRecovery(r)
      [] e.a = "Crash"             -> Crash(r)
      [] e.a = "Restart"           -> Restart(r)
      [] e.a = "Ready"             -> \E f \in inflight[r] : f.i \in PV(e, "i", {f.i}) /\ Ready(r, f)
      [] e.a = "SendCAccept"       -> \E p \in prop[r] : Fits(e, p) /\ SendCAccept(r, p)
      [] e.a = "SendCRequest"      -> \E i \in PV(e, "i", CIdx) : SendCRequest(r, i)
      [] e.a = "AllocateO"         -> \E n \in PV(e, "n", R) : AllocateO(r, n)
      [] e.a = "SendOAccept"       -> \E j \in PV(e, "start", Slots) : \E rb \in PV(e, "rng", BOOLEAN) :
                                        SendOAccept(r, j, rb)
      [] e.a = "RelayOCommit"      -> \E j \in PV(e, "slot", Slots) : RelayOCommit(r, j)
      [] e.a = "RelayCCommit"      -> \E n \in PV(e, "n", R), i \in PV(e, "i", CIdx) : RelayCCommit(r, n, i)
      [] e.a = "Handover"          -> \E t \in PV(e, "t", R) : Handover(r, t)
      [] e.a = "ServeRead"         -> \E k \in PV(e, "k", DOMAIN rops) : ServeRead(r, k)
      [] e.a = "HandleCAccept"     -> \E m \in msgs : Fits(e, m) /\ \E lr \in PV(e, "learned", BOOLEAN) :
                                        HandleCAccept(r, m, lr)
      [] e.a = "HandleCAck"        -> \E m \in msgs : Fits(e, m) /\ HandleCAck(r, m)
      [] e.a = "HandleCCommit"     -> \E m \in msgs : Fits(e, m) /\ HandleCCommit(r, m)
      [] e.a = "HandleCRequest"    -> \E m \in msgs : Fits(e, m) /\ HandleCRequest(r, m)
      [] e.a = "HandleOAccept"     -> \E m \in msgs : Fits(e, m) /\ HandleOAccept(r, m)
      [] e.a = "HandleNewView"     -> \E m \in msgs : Fits(e, m) /\ HandleNewView(r, m)
      [] e.a = "AskRange"          -> \E m \in msgs : Fits(e, m) /\ AskRange(r, m)
      [] e.a = "HandleOCommit"     -> \E m \in msgs : Fits(e, m) /\ HandleOCommit(r, m)
      [] e.a = "HandleVRequest"    -> \E m \in msgs : Fits(e, m) /\ HandleVRequest(r, m)
      [] e.a = "HandleHeartbeat"   -> \E m \in msgs : Fits(e, m) /\ \E g \in PV(e, "grant", BOOLEAN) :
                                        HandleHeartbeat(r, m, g)
      [] e.a = "HandleRRequest"    -> \E m \in msgs : Fits(e, m) /\ HandleRRequest(r, m)
      [] e.a = "HandleRReply"      -> \E m \in msgs : Fits(e, m) /\ HandleRReply(r, m)
      [] e.a = "HandleHandover"    -> \E m \in msgs : Fits(e, m) /\ HandleHandover(r, m)
      [] e.a = "HandleCPrepare"    -> \E m \in msgs : Fits(e, m) /\ HandleCPrepare(r, m)
      [] e.a = "HandleCPromise"    -> \E m \in msgs : Fits(e, m) /\ HandleCPromise(r, m)

\* The spec's own sends, which the code's handlers fold into other steps or
\* repeat (retransmission, piggy-backing, answers to learn requests).
SendStep(r) ==
    \/ \E p \in prop[r] : SendCAccept(r, p)
    \/ \E i \in CIdx : SendCRequest(r, i)
    \/ \E j \in Slots : SendOAccept(r, j, FALSE) \/ SendOAccept(r, j, TRUE)
    \/ \E j \in Slots : RelayOCommit(r, j)
    \/ \E n \in R, i \in CIdx : RelayCCommit(r, n, i)
    \/ SendHeartbeat(r)

\* "Sent" (trace validation): the message the code sent exists afterwards:
\* sent before, or sent now by one of the spec's send actions.
Sent(e) ==
    \/ (\E m \in msgs : Fits(e, m)) /\ UNCHANGED vars
    \/ (~\E m \in msgs : Fits(e, m)) /\ SendStep(e.r) /\ \E m \in msgs' : Fits(e, m)

\* A lenient step (x): the code handled a duplicate or a retransmission, which
\* the spec's handler would not take as a step: a no-op on a matching message.
\* Only where the spec's handler has nothing left to do with that message:
\* the value is accepted already, the O-accept is held already or waits
\* beyond a gap, the sequencer knows the C-instance, the promise is made.
Dup(e, m) ==
    LET r == e.r IN
    CASE e.a = "HandleCAccept" -> \/ /\ cAccB[r][m.n][m.i] = m.b
                                     /\ [type |-> "CAck", ep |-> ep[r], src |-> r, view |-> pView[r], n |-> m.n,
                                         i |-> m.i, b |-> m.b] \in msgs
                                  \/ m.b < cProm[r][m.n][m.i]
      [] e.a = "HandleOAccept" -> \/ m.view < pView[r]
                                  \/ /\ joined[r] /\ est[r].v = m.view
                                     /\ LET acc == AccOn(oAccB[r], Max({est[r].base, snap[r].slot}),
                                                        m.view)
                                        IN acc >= m.start + Len(m.vals) \/ acc < m.start
      [] e.a = "HandleCRequest" -> ~IsSeq(r) \/ want[r][m.src] >= m.i + 1
      [] e.a = "HandleNewView" -> m.view < pView[r] \/ (joined[r] /\ est[r].v = m.view /\ rc[r])
      [] e.a = "HandleVRequest" -> m.view = pView[r] /\ votedFor[r] = m.src
                                   /\ VoteMsg(r, m.src, m.view, m.from) \in msgs
      [] e.a = "HandleHandover" -> leaseUntil[r] =< clock \/ m.view # pView[r]
      [] e.a = "HandleCPrepare" -> \/ cProm[r][m.n][m.i] > m.b
                                   \/ PromiseMsg(r, m.n, m.i, m.b) \in msgs
      [] OTHER -> FALSE
Unchanged(e) == Has(e, "x") /\ (\E m \in msgs : Fits(e, m) /\ Dup(e, m)) /\ UNCHANGED vars

\* The state the code reported after the step (s), for the step's replica.
Post(e) ==
    Has(e, "s") =>
      LET r == e.r IN
      /\ "view" \in DOMAIN e.s => pView'[r] = e.s.view
      /\ "ev" \in DOMAIN e.s => est'[r].v = e.s.ev
      /\ "es" \in DOMAIN e.s => est'[r].s = e.s.es
      /\ "exec" \in DOMAIN e.s => Len(execd'[r]) = e.s.exec

Step(e) ==
    /\ IF e.a = "Sent" THEN Sent(e) ELSE Act(e) \/ Unchanged(e)
    /\ Post(e)

TraceInit == Init /\ l = 1 /\ TLCSet(1, 1)

TraceNext ==
    /\ l =< Len(Trace)
    /\ Step(Trace[l])
    /\ l' = l + 1
    /\ IF l + 1 > TLCGet(1) THEN TLCSet(1, l + 1) ELSE TRUE

\* Violated exactly when the whole trace was matched: for trace validation, TLC
\* reporting this invariant violated means success (check.sh reads it so).
TraceNotFinished == l =< Len(Trace)
=============================================================================
