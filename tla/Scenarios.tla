----------------------------- MODULE Scenarios -----------------------------
(***************************************************************************)
(* The review bugs' interleavings (issue 6), as event sequences for        *)
(* TraceSDPaxos.  With a bug's mutation on, TLC must report a semantic     *)
(* invariant (agreement, real-time order) violated before the end; with    *)
(* it off, the scenario cannot be completed or completes safely.           *)
(* E(a, r) is an event with no filter; EM(a, r, m) filters the message.    *)
(***************************************************************************)
EXTENDS TraceSDPaxos

E(a, r) == [a |-> a, r |-> r]
EM(a, r, m) == [a |-> a, r |-> r, m |-> m]

(* Bug 5, N = 3: sequencer R0, owner R1.  R1's C-instance 0 (value v)       *)
(* reaches only R1, but its O-instance is committed (through a C-request). *)
(* R0 and R2 both recover it, R0 at ballot 3, R2 at ballot 5.  R2's         *)
(* prepare reaches R0 first; R2 finds nothing and gets the no-op chosen     *)
(* with R0's acceptance.  Then R0's own prepare reaches R1, which reports   *)
(* v; R0's phase 2 (which must give up: it promised 5) proposes v at 3,     *)
(* R1 accepts, and v is chosen too.                                         *)
Bug5 == <<
    E("Propose", 1), E("SendCRequest", 1), E("HandleCRequest", 0), E("AllocateO", 0),
    E("SendOAccept", 0), E("HandleOAccept", 1), E("CommitO", 1),
    EM("HandleOCommit", 0, [slot |-> 0]), EM("HandleOCommit", 2, [slot |-> 0]),
    E("StartCRecovery", 2), E("StartCRecovery", 0),
    EM("HandleCPrepare", 0, [src |-> 2]),
    EM("HandleCPromise", 2, [src |-> 0]),
    EM("HandleCAccept", 0, [src |-> 2]),
    EM("HandleCAck", 2, [src |-> 0, b |-> 5]),
    EM("HandleCPrepare", 1, [src |-> 0]),
    EM("HandleCPromise", 0, [src |-> 1]),
    EM("HandleCAccept", 1, [src |-> 0, b |-> 3]),
    EM("HandleCAck", 0, [src |-> 1, b |-> 3]),
    E("Execute", 2), E("Execute", 0) >>
(* Bugs 3 and 10, N = 3: the sequencer R0 holds a lease from {R0, R1}.     *)
(* R1 runs for view 1 (early suspicion, or a straggler poll) and wins with  *)
(* R2's vote; its own vote must wait for the lease it granted R0, and with  *)
(* MutIgnoreOwnLease does not.  A write becomes READY in view 1; R0, still *)
(* inside its lease, serves a read without it.                             *)
Bug3 == <<
    E("SendHeartbeat", 0), [a |-> "HandleHeartbeat", r |-> 1, p |-> [grant |-> TRUE]],
    E("StartViewChange", 1), EM("HandleVRequest", 2, [src |-> 1]), E("BecomeSequencer", 1),
    E("Propose", 1), E("AllocateO", 1), [a |-> "SendOAccept", r |-> 1, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 2, [src |-> 1]), EM("HandleCAccept", 2, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 2]), E("CommitO", 1), E("Ready", 1),
    E("Read", 0), E("ServeRead", 0) >>

(* Bug 1, N = 5: the sequencer R0 allocates O0 = R0 (its own command) and  *)
(* O1 = R3, and every O-accept is lost.  R0 crashes; R1 wins view 1 with    *)
(* votes of R2 and R4; the inference gives a range for R3 only, which       *)
(* reaches only R3.  With the old ready rule R3 answers READY and executes  *)
(* it at slot 0; R1 crashes; R0 restarts and view 2 is rebuilt from R0's    *)
(* log, with R0's command at slot 0, which R2 executes.                     *)
Bug1 == <<
    [a |-> "Propose", r |-> 0, p |-> [c |-> 1]], [a |-> "Propose", r |-> 3, p |-> [c |-> 2]],
    EM("HandleCAccept", 0, [src |-> 3]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 0]], [a |-> "AllocateO", r |-> 0, p |-> [n |-> 3]],
    EM("HandleCAccept", 2, [src |-> 3]), EM("HandleCAck", 3, [src |-> 2]),
    EM("HandleCAccept", 2, [src |-> 0]), EM("HandleCAccept", 4, [src |-> 0]),
    EM("HandleCAck", 0, [src |-> 4, n |-> 0]), EM("HandleCCommit", 4, [n |-> 0]),
    E("Crash", 0),
    [a |-> "StartViewChange", r |-> 1, p |-> [v |-> 1]],
    EM("HandleVRequest", 2, [src |-> 1]), EM("HandleVRequest", 4, [src |-> 1]),
    E("BecomeSequencer", 1),
    [a |-> "SendOAccept", r |-> 1, p |-> [rng |-> TRUE]], EM("HandleOAccept", 3, [src |-> 1]),
    E("CommitO", 3), E("Ready", 3), E("Execute", 3),
    E("Crash", 1), E("Restart", 0),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 2]],
    EM("HandleVRequest", 0, [src |-> 2]), EM("HandleVRequest", 4, [src |-> 2]),
    E("BecomeSequencer", 2),
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 4, [src |-> 2]), EM("HandleOAccept", 0, [src |-> 2]),
    E("SendNewView", 2),
    [a |-> "RelayCCommit", r |-> 4, p |-> [n |-> 0, i |-> 0]], EM("HandleCCommit", 2, [n |-> 0]),
    E("Execute", 2) >>

(* Bug 2, N = 5: R1's command is READY at slot 0 in view 0 (accepted by R1 *)
(* and the sequencer R0 only).  R0 crashes; R1 wins view 1 but only its     *)
(* heartbeat reaches R4 before R1 crashes.  If that heartbeat raised R4's   *)
(* established view, view 2's voters take R1 for the old sequencer and      *)
(* infer for R0: the rebuilt log is empty, and a command proposed after     *)
(* the READY one takes slot 0 and executes first.                           *)
Bug2 == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]],
    EM("HandleCAccept", 0, [src |-> 1]), EM("HandleCAccept", 2, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 2]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], E("SendOAccept", 0),
    EM("HandleOAccept", 1, [src |-> 0]), E("CommitO", 1), E("Ready", 1),
    E("Crash", 0),
    [a |-> "StartViewChange", r |-> 1, p |-> [v |-> 1]],
    EM("HandleVRequest", 2, [src |-> 1]), EM("HandleVRequest", 3, [src |-> 1]),
    E("BecomeSequencer", 1), E("SendHeartbeat", 1),
    EM("AskRange", 4, [type |-> "Heartbeat", src |-> 1]),
    E("Crash", 1),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 2]],
    EM("HandleVRequest", 3, [src |-> 2]), EM("HandleVRequest", 4, [src |-> 2]),
    E("BecomeSequencer", 2),
    [a |-> "Propose", r |-> 2, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 2, p |-> [n |-> 2]],
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 3, [src |-> 2]), EM("HandleOAccept", 4, [src |-> 2]),
    EM("HandleCAccept", 3, [src |-> 2]), EM("HandleCAccept", 4, [src |-> 2]),
    EM("HandleCAck", 2, [src |-> 4, n |-> 2]), E("CommitO", 2), E("Execute", 2) >>

(* Pitfall 5, N = 5: R3's C-instance is accepted only by itself when R1     *)
(* wins view 1 with votes of R2 and R4, so C[3] = -1 and no slot is         *)
(* inferred for R3.  Without view fences on C-instance messages, R2 and R4  *)
(* accept R3's old-view C-accept and R3 counts their view-1 C-ACKs: its    *)
(* command commits and is READY at slot 0 in view 0, and view 1 gives slot *)
(* 0 to a command proposed afterwards.                                      *)
OldView == <<
    [a |-> "Propose", r |-> 3, p |-> [c |-> 1]], E("SendCRequest", 3), E("HandleCRequest", 0),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 3]], E("SendOAccept", 0),
    EM("HandleOAccept", 3, [src |-> 0]),
    E("Crash", 0),
    [a |-> "StartViewChange", r |-> 1, p |-> [v |-> 1]],
    EM("HandleVRequest", 2, [src |-> 1]), EM("HandleVRequest", 4, [src |-> 1]),
    E("BecomeSequencer", 1),
    EM("HandleCAccept", 2, [src |-> 3]), EM("HandleCAccept", 4, [src |-> 3]),
    EM("HandleCAck", 3, [src |-> 4]), E("CommitO", 3), E("Ready", 3),
    [a |-> "Propose", r |-> 1, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 1, p |-> [n |-> 1]],
    [a |-> "SendOAccept", r |-> 1, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 2, [src |-> 1]), EM("HandleOAccept", 4, [src |-> 1]),
    EM("HandleCAccept", 2, [src |-> 1]), EM("HandleCAccept", 4, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 4, n |-> 1]), E("CommitO", 1), E("Execute", 1) >>

(* The N = 5 inference is necessary: R3's command is READY at slot 0 with   *)
(* acceptors R3 and the sequencer R0; both crash; R1 wins with R2 and R4.   *)
NoInference == <<
    [a |-> "Propose", r |-> 3, p |-> [c |-> 1]],
    EM("HandleCAccept", 2, [src |-> 3]), EM("HandleCAccept", 4, [src |-> 3]),
    EM("HandleCAck", 3, [src |-> 4]), E("SendCRequest", 3), E("HandleCRequest", 0),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 3]], E("SendOAccept", 0),
    EM("HandleOAccept", 3, [src |-> 0]), E("CommitO", 3), E("Ready", 3),
    E("Crash", 0), E("Crash", 3),
    [a |-> "StartViewChange", r |-> 1, p |-> [v |-> 1]],
    EM("HandleVRequest", 2, [src |-> 1]), EM("HandleVRequest", 4, [src |-> 1]),
    E("BecomeSequencer", 1),
    [a |-> "Propose", r |-> 1, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 1, p |-> [n |-> 1]],
    [a |-> "SendOAccept", r |-> 1, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 2, [src |-> 1]), EM("HandleOAccept", 4, [src |-> 1]),
    EM("HandleCAccept", 2, [src |-> 1]), EM("HandleCAccept", 4, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 4, n |-> 1]), E("CommitO", 1), E("Execute", 1) >>

(* Majority re-acceptance is necessary (N = 5): R0's own command sits at O0 *)
(* accepted by R0 only.  R2 wins view 1 with R0 and R4 and, without the     *)
(* re-acceptance, sends NewView at once; R0 adopts it and its command is    *)
(* READY.  R0 and R2 crash; R1 wins view 2 with R3 and R4, who never        *)
(* accepted the range: slot 0 is rebuilt empty.                             *)
NoReaccept == <<
    [a |-> "Propose", r |-> 0, p |-> [c |-> 1]], [a |-> "AllocateO", r |-> 0, p |-> [n |-> 0]],
    E("Crash", 0), E("Restart", 0),
    EM("HandleCAccept", 3, [src |-> 0]), EM("HandleCAccept", 4, [src |-> 0]),
    EM("HandleCAck", 0, [src |-> 4]),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 1]],
    EM("HandleVRequest", 0, [src |-> 2]), EM("HandleVRequest", 4, [src |-> 2]),
    E("BecomeSequencer", 2), E("SendNewView", 2),
    EM("HandleNewView", 0, [src |-> 2]), E("CommitO", 0), E("Ready", 0),
    E("Crash", 0), E("Crash", 2),
    [a |-> "StartViewChange", r |-> 1, p |-> [v |-> 2]],
    EM("HandleVRequest", 3, [src |-> 1]), EM("HandleVRequest", 4, [src |-> 1]),
    E("BecomeSequencer", 1),
    [a |-> "Propose", r |-> 1, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 1, p |-> [n |-> 1]],
    [a |-> "SendOAccept", r |-> 1, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 3, [src |-> 1]), EM("HandleOAccept", 4, [src |-> 1]),
    EM("HandleCAccept", 3, [src |-> 1]), EM("HandleCAccept", 4, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 4, n |-> 1]), E("CommitO", 1), E("Execute", 1) >>

(* The allocation guard is necessary (pitfall 1), N = 3: R1's C-accept      *)
(* reaches the sequencer twice and, without the guard, R1 gets two slots.   *)
(* R2's command is READY at slot 2; R1's next command, proposed after that, *)
(* takes R1's spare slot 1 and executes first.                              *)
NoAllocGuard == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]], EM("HandleCAccept", 0, [src |-> 1]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], EM("HandleCAccept", 0, [src |-> 1]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]],
    [a |-> "Propose", r |-> 2, p |-> [c |-> 2]], EM("HandleCAccept", 0, [src |-> 2]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 2]], [a |-> "SendOAccept", r |-> 0, p |-> [start |-> 0]],
    EM("HandleOAccept", 1, [src |-> 0]), EM("HandleOAccept", 2, [src |-> 0]),
    EM("HandleCAck", 1, [src |-> 0]), EM("HandleCAck", 2, [src |-> 0]),
    E("CommitO", 2), E("Ready", 2),
    [a |-> "Propose", r |-> 1, p |-> [c |-> 3]], EM("HandleCAccept", 0, [src |-> 1, i |-> 1]),
    EM("HandleCAck", 1, [src |-> 0, i |-> 1]), E("CommitO", 1),
    E("Execute", 1), E("Execute", 1) >>

(* Bug 14, N = 5 (found while documenting the redesign): X of R1 is READY   *)
(* and executed by R1 alone at slot 0, held by R1 and the sequencer R0.    *)
(* R0 crashes; R1 wins view 1 (R2, R3) with o_from = 1: if its range starts *)
(* there, slot 0 stays with R0 and R1 only.  R1 crashes; R2 wins view 2     *)
(* (R3, R4): slot 0 is a hole, and Y, proposed after X was READY, takes it. *)
Bug14 == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]],
    EM("HandleCAccept", 0, [src |-> 1]), EM("HandleCAccept", 2, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 2]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], E("SendOAccept", 0),
    EM("HandleOAccept", 1, [src |-> 0]), E("CommitO", 1), E("Ready", 1), E("Execute", 1),
    E("Crash", 0),
    [a |-> "StartViewChange", r |-> 1, p |-> [v |-> 1]],
    EM("HandleVRequest", 2, [src |-> 1]), EM("HandleVRequest", 3, [src |-> 1]),
    E("BecomeSequencer", 1), [a |-> "SendOAccept", r |-> 1, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 2, [src |-> 1]), EM("HandleOAccept", 3, [src |-> 1]),
    E("Crash", 1),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 2]],
    EM("HandleVRequest", 3, [src |-> 2]), EM("HandleVRequest", 4, [src |-> 2]),
    E("BecomeSequencer", 2),
    [a |-> "Propose", r |-> 2, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 2, p |-> [n |-> 2]],
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 3, [src |-> 2]), EM("HandleOAccept", 4, [src |-> 2]),
    EM("HandleCAccept", 3, [src |-> 2]), EM("HandleCAccept", 4, [src |-> 2]),
    EM("HandleCAck", 2, [src |-> 4, n |-> 2]), E("CommitO", 2), E("Execute", 2) >>

(* Snapshots, C-instance recovery, N = 3: R1's command is chosen at C_1^0  *)
(* (R1, R0) and executed at slot 0 by R1 and the sequencer R0, which then  *)
(* snapshots at slot 1 and forgets C_1^0.  R2 learns slot 0's O-commit and *)
(* recovers C_1^0.  R0's C-promise must say "compacted" (R2 gives up);     *)
(* with MutCompactedLooksEmpty it says "nothing accepted", R2 chooses a    *)
(* no-op with R0's acceptance and executes it at slot 0.                   *)
CompactedPromise == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]], EM("HandleCAccept", 0, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 0]), [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]],
    E("SendOAccept", 0), EM("HandleOAccept", 1, [src |-> 0]), E("CommitO", 1), E("Execute", 1),
    E("CommitO", 0), EM("HandleCCommit", 0, [n |-> 1]), E("Execute", 0),
    [a |-> "TakeSnapshot", r |-> 0, p |-> [slot |-> 1]],
    EM("HandleOCommit", 2, [slot |-> 0]), E("StartCRecovery", 2),
    EM("HandleCPrepare", 0, [src |-> 2]), EM("HandleCPromise", 2, [src |-> 0]),
    EM("HandleCAccept", 0, [src |-> 2]), EM("HandleCAck", 2, [src |-> 0, b |-> 5]),
    E("Execute", 2) >>

(* Snapshots, the view change, N = 3: as above, slot 0 (R1's command) is   *)
(* executed by R0 and R1; R1 snapshots at slot 1 and forgets slot 0.  R0    *)
(* crashes; R2 (o_from 0) runs for view 1 with R1's vote, whose snapshot    *)
(* slot 1 is above 0: R2 must install a snapshot first.  With              *)
(* MutCompactedLooksEmpty it wins at once: slot 0 looks empty, R2's own     *)
(* command takes it (R0, restarted, accepts it) and R2 executes it there.  *)
SnapshotVote == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]], EM("HandleCAccept", 0, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 0]), [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]],
    E("SendOAccept", 0), EM("HandleOAccept", 1, [src |-> 0]), E("CommitO", 1), E("Execute", 1),
    E("CommitO", 0), EM("HandleCCommit", 0, [n |-> 1]), E("Execute", 0),
    [a |-> "TakeSnapshot", r |-> 1, p |-> [slot |-> 1]],
    E("Crash", 0),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 1]], EM("HandleVRequest", 1, [src |-> 2]),
    E("BecomeSequencer", 2),
    [a |-> "Propose", r |-> 2, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 2, p |-> [n |-> 2]],
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]], E("Restart", 0),
    EM("HandleOAccept", 0, [src |-> 2]), EM("HandleCAccept", 0, [src |-> 2]),
    EM("HandleCAck", 2, [src |-> 0]), E("CommitO", 2), E("Execute", 2) >>

(* Membership change (docs/membership.md), N = 4 nodes, epochs {0,1,2}    *)
(* then {1,2,3} (Replace3: R3 replaces the sequencer R0; R1 is view 0's    *)
(* sequencer of epoch 1).                                                  *)
(*                                                                         *)
(* The old epoch decides after its stop: the sequencer R0 allocates the    *)
(* STOP at slot 0, then (with MutOldEpochStillDecides) R1's command c1 at  *)
(* slot 1, and R1's counting goes past the STOP: c1 is READY at slot 1 in  *)
(* epoch 0.  R1 and R2 execute the STOP and start epoch 1 at slot 1; c2,   *)
(* proposed after c1 was READY, is ordered at slot 1 there and executed    *)
(* first, and c1 never executes.                                           *)
OldEpochStillDecides == <<
    E("AllocateStop", 0), [a |-> "Propose", r |-> 1, p |-> [c |-> 1]],
    EM("HandleCAccept", 0, [src |-> 1]), EM("HandleCAck", 1, [src |-> 0]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], [a |-> "SendOAccept", r |-> 0, p |-> [start |-> 0]],
    EM("HandleOAccept", 1, [src |-> 0]), E("CommitO", 1), E("Ready", 1), E("CommitO", 0),
    EM("HandleOCommit", 2, [slot |-> 0]), [a |-> "StartEpoch", r |-> 2, p |-> [epoch |-> 1, slot |-> 1]],
    EM("HandleOCommit", 1, [slot |-> 0]), [a |-> "StartEpoch", r |-> 1, p |-> [epoch |-> 1, slot |-> 1]],
    [a |-> "Propose", r |-> 1, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 1, p |-> [n |-> 1]],
    [a |-> "SendOAccept", r |-> 1, p |-> [start |-> 1]], EM("HandleOAccept", 2, [src |-> 1]),
    EM("HandleCAccept", 2, [src |-> 1]), EM("HandleCAck", 1, [src |-> 2]), E("CommitO", 1),
    E("Execute", 1) >>

(* A learner counted: R3, a member of epoch 1 only, accepts R1's C-accept   *)
(* of epoch 0, and (with MutLearnerCounted) R1 counts its C-ACK: c1 is      *)
(* "chosen" by R1 and R3.  R1 executes it at slot 0; R2 recovers the        *)
(* C-instance with R0 (members, neither accepted it) and chooses a no-op.  *)
LearnerCounted == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]], EM("HandleCAccept", 3, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 3]), E("SendCRequest", 1), E("HandleCRequest", 0),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], E("SendOAccept", 0),
    EM("HandleOAccept", 1, [src |-> 0]), E("CommitO", 1), E("Execute", 1),
    EM("HandleOCommit", 2, [slot |-> 0]), E("StartCRecovery", 2),
    EM("HandleCPrepare", 0, [src |-> 2]), EM("HandleCPromise", 2, [src |-> 0]),
    EM("HandleCAccept", 0, [src |-> 2]), EM("HandleCAck", 2, [src |-> 0, b |-> 6]),
    E("Execute", 2) >>

(* A removed replica's vote counted: epoch 0 stops at slot 0 (R0's STOP,    *)
(* accepted by R0 and R1).  R0, R1 and R2 execute it; R0 is removed; R3     *)
(* installs epoch 1's base from R1.  In epoch 1, R0 still accepts R1's      *)
(* C-accept and (with MutRemovedVoteCounted) R1 counts its C-ACK: c1 is     *)
(* "chosen" by R1 and R0, and R1 executes it at slot 1.  R2 recovers the   *)
(* C-instance with R3 (members, neither accepted it): a no-op at slot 1.   *)
RemovedVoteCounted == <<
    E("AllocateStop", 0), E("SendOAccept", 0), EM("HandleOAccept", 1, [src |-> 0]), E("CommitO", 0),
    E("StartEpoch", 0), EM("HandleOCommit", 1, [slot |-> 0]), E("StartEpoch", 1),
    EM("HandleOCommit", 2, [slot |-> 0]), E("StartEpoch", 2),
    [a |-> "InstallEpoch", r |-> 3, p |-> [src |-> 1, epoch |-> 1, slot |-> 1]],
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]], EM("HandleCAccept", 0, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 0]), [a |-> "AllocateO", r |-> 1, p |-> [n |-> 1]],
    E("SendOAccept", 1), EM("HandleOAccept", 2, [src |-> 1]), E("CommitO", 1), E("Execute", 1),
    EM("HandleOCommit", 2, [slot |-> 1]), E("StartCRecovery", 2),
    EM("HandleCPrepare", 3, [src |-> 2]), EM("HandleCPromise", 2, [src |-> 3]),
    EM("HandleCAccept", 3, [src |-> 2]), EM("HandleCAck", 2, [src |-> 3, b |-> 6]),
    E("Execute", 2) >>

(* The STOP is committed by the majority rule only, N = 5 included: with   *)
(* Shrink5to3 (epochs {0,1,2,3,4} then {2,3,4}), R1 accepts the sequencer *)
(* R0's STOP at slot 0 and (with MutStopTwoAcceptors) commits it by the    *)
(* two-acceptor rule, executes it and leaves epoch 0.  R0 crashes; R2 wins *)
(* view 1 with R3 and R4, none of which holds the STOP (the inference finds *)
(* nothing of R1's), and R2's command takes slot 0.                        *)
StopTwoAcceptors == <<
    E("AllocateStop", 0), E("SendOAccept", 0), EM("HandleOAccept", 1, [src |-> 0]),
    E("CommitO", 1), E("StartEpoch", 1), E("Crash", 0),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 1]],
    EM("HandleVRequest", 3, [src |-> 2]), EM("HandleVRequest", 4, [src |-> 2]),
    E("BecomeSequencer", 2),
    [a |-> "Propose", r |-> 2, p |-> [c |-> 1]], [a |-> "AllocateO", r |-> 2, p |-> [n |-> 2]],
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 3, [src |-> 2]), EM("HandleOAccept", 4, [src |-> 2]),
    EM("HandleCAccept", 3, [src |-> 2]), EM("HandleCAccept", 4, [src |-> 2]),
    EM("HandleCAck", 2, [src |-> 4]), E("CommitO", 2), E("Execute", 2) >>

(* N = 7, the majority rule (docs/protocol.md 5.5): R1's command is        *)
(* chosen (R0, R1, R5, R6) and the sequencer R0 gives it slot 0, whose      *)
(* O-accept reaches only R1.  With MutTwoAcceptorsBeyondFive R1 commits the *)
(* slot by the N = 5 two-acceptor rule (itself and R0), answers READY and   *)
(* executes it.  R2 wins view 1 with R3, R4 and R5, none of which holds the *)
(* slot (and N = 7 has no inference), and R2's own command takes slot 0.    *)
TwoAcceptorsBeyondFive == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]],
    EM("HandleCAccept", 0, [src |-> 1]), EM("HandleCAccept", 5, [src |-> 1]),
    EM("HandleCAccept", 6, [src |-> 1]), EM("HandleCAck", 1, [src |-> 6]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], E("SendOAccept", 0),
    EM("HandleOAccept", 1, [src |-> 0]), E("CommitO", 1), E("Ready", 1), E("Execute", 1),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 1]],
    EM("HandleVRequest", 3, [src |-> 2]), EM("HandleVRequest", 4, [src |-> 2]),
    EM("HandleVRequest", 5, [src |-> 2]), E("BecomeSequencer", 2),
    [a |-> "Propose", r |-> 2, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 2, p |-> [n |-> 2]],
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 3, [src |-> 2]), EM("HandleOAccept", 4, [src |-> 2]),
    EM("HandleOAccept", 5, [src |-> 2]),
    EM("HandleCAccept", 3, [src |-> 2]), EM("HandleCAccept", 4, [src |-> 2]),
    EM("HandleCAccept", 5, [src |-> 2]), EM("HandleCAck", 2, [src |-> 5]),
    E("CommitO", 2), E("Execute", 2) >>

(* N = 6, even: a majority is 4.  With MutEvenMajorityHalf every quorum,   *)
(* phase 1 and phase 2, is 3 (F + 1, F = 2), and 3 + 3 is not above 6: R1's *)
(* command is chosen with the C-ACKs of R0 and R5, its slot 0 committed     *)
(* with R0's O-accept and R5's O-ACK, READY and executed at R1.  R2 wins    *)
(* view 1 with the votes of R3 and R4, none holding slot 0, and R2's own    *)
(* command, chosen and ordered with R3 and R4, takes slot 0.  (The scenario *)
(* was at N = 4 until the phase-2 quorum of 4 members became 2: there the   *)
(* mutation now differs from the rules in phase 1 only, which Phase1Two     *)
(* shows; at N = 4 this trace would only block later, at the vote.)        *)
EvenMajorityHalf == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]],
    EM("HandleCAccept", 0, [src |-> 1]), EM("HandleCAccept", 5, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 5]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], E("SendOAccept", 0),
    EM("HandleOAccept", 1, [src |-> 0]), EM("HandleOAccept", 5, [src |-> 0]),
    E("CommitO", 1), E("Ready", 1), E("Execute", 1),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 1]],
    EM("HandleVRequest", 3, [src |-> 2]), EM("HandleVRequest", 4, [src |-> 2]),
    E("BecomeSequencer", 2),
    [a |-> "Propose", r |-> 2, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 2, p |-> [n |-> 2]],
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 3, [src |-> 2]), EM("HandleOAccept", 4, [src |-> 2]),
    EM("HandleCAccept", 3, [src |-> 2]), EM("HandleCAccept", 4, [src |-> 2]),
    EM("HandleCAck", 2, [src |-> 4]), E("CommitO", 2), E("Execute", 2) >>

(* N = 4, flexible quorums: the phase-2 quorum is 2, the phase-1 quorum 3  *)
(* (3 + 2 > 4).  R1's command is chosen with R0's C-ACK, its slot 0        *)
(* committed with R0's O-accept (both legal now), READY and executed at R1. *)
(* With MutPhase1Two the votes' quorum is 2 as well: R2 wins view 1 with    *)
(* R3's vote alone, neither holding slot 0, and R2's own command, chosen    *)
(* and ordered with R3, takes slot 0.  Without the mutation R2 needs a      *)
(* second vote: the trace blocks at event 12, BecomeSequencer.             *)
Phase1Two == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]],
    EM("HandleCAccept", 0, [src |-> 1]), EM("HandleCAck", 1, [src |-> 0]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], E("SendOAccept", 0),
    EM("HandleOAccept", 1, [src |-> 0]), E("CommitO", 1), E("Ready", 1), E("Execute", 1),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 1]],
    EM("HandleVRequest", 3, [src |-> 2]), E("BecomeSequencer", 2),
    [a |-> "Propose", r |-> 2, p |-> [c |-> 2]], [a |-> "AllocateO", r |-> 2, p |-> [n |-> 2]],
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 3, [src |-> 2]), EM("HandleCAccept", 3, [src |-> 2]),
    EM("HandleCAck", 2, [src |-> 3]), E("CommitO", 2), E("Execute", 2) >>

(* N = 5, the phase-2 quorum is 3.  The sequencer R0 accepts R1's          *)
(* C-accept (R1 and R0: two of five) and, with MutLearnCOnAcceptAnyN,      *)
(* learns it chosen; it orders it at slot 0, commits the slot with the      *)
(* O-ACKs of R3 and R4, and executes R1's command there.  R3 learns slot 0  *)
(* committed (a relayed O-commit) and recovers C_1^0 with the promises of  *)
(* R2 and R4, which accepted nothing: a no-op is chosen (R3, R2, R4), and R3 *)
(* executes it at slot 0.  Without the mutation R0 has not learnt the       *)
(* C-instance: the trace blocks at event 8, R0's Execute.                  *)
LearnCOnAcceptAnyN == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]], EM("HandleCAccept", 0, [src |-> 1]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], E("SendOAccept", 0),
    EM("HandleOAccept", 3, [src |-> 0]), EM("HandleOAccept", 4, [src |-> 0]),
    E("CommitO", 0), E("Execute", 0),
    [a |-> "RelayOCommit", r |-> 0, p |-> [slot |-> 0]], EM("HandleOCommit", 3, [slot |-> 0]),
    E("StartCRecovery", 3),
    EM("HandleCPrepare", 2, [src |-> 3]), EM("HandleCPrepare", 4, [src |-> 3]),
    EM("HandleCPromise", 3, [src |-> 4]),
    EM("HandleCAccept", 2, [src |-> 3]), EM("HandleCAccept", 4, [src |-> 3]),
    EM("HandleCAck", 3, [src |-> 4]), E("Execute", 3) >>

(* Not a bug: a witness of the majority rule at N = 7 (1.5 round trips,    *)
(* WitnessSevenMajority.cfg).  R1's command is chosen (R0, R1, R5, R6); the *)
(* sequencer R0 gives it slot 0, whose O-accept R1, R5 and R6 accept: with  *)
(* their O-ACKs and R0's O-accept, four of seven, R1 commits the slot,      *)
(* answers READY and executes it.  R2 wins view 1 with R3, R4 and R5; R5's *)
(* vote carries slot 0, so the rebuilt range keeps it; R3, R4 and R5 accept *)
(* the range, R2 commits it (NewView) and executes R1's command at slot 0   *)
(* (whose C-commit it learnt in view 0).                                   *)
SevenMajority == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]],
    EM("HandleCAccept", 0, [src |-> 1]), EM("HandleCAccept", 5, [src |-> 1]),
    EM("HandleCAccept", 6, [src |-> 1]), EM("HandleCAck", 1, [src |-> 6]),
    EM("HandleCCommit", 2, [n |-> 1]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], E("SendOAccept", 0),
    EM("HandleOAccept", 1, [src |-> 0]), EM("HandleOAccept", 5, [src |-> 0]),
    EM("HandleOAccept", 6, [src |-> 0]),
    E("CommitO", 1), E("Ready", 1), E("Execute", 1),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 1]],
    EM("HandleVRequest", 3, [src |-> 2]), EM("HandleVRequest", 4, [src |-> 2]),
    EM("HandleVRequest", 5, [src |-> 2]), E("BecomeSequencer", 2),
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 3, [src |-> 2]), EM("HandleOAccept", 4, [src |-> 2]),
    EM("HandleOAccept", 5, [src |-> 2]), E("SendNewView", 2), E("Execute", 2) >>

(* Membership, N = 5, with MutLearnStopMinority: R1 learns the STOP chosen *)
(* from R0's O-accept and its own acceptance alone (two of five, not a     *)
(* majority's acknowledgements), executes it and leaves epoch 0.  R0       *)
(* crashes; R2 wins view 1 with R3 and R4, none of which holds the STOP,   *)
(* and R2's command takes slot 0.  Without the mutation LearnStop waits for *)
(* a third acknowledgement: the trace blocks at event 4.                   *)
LearnStopMinority == <<
    E("AllocateStop", 0), E("SendOAccept", 0), EM("HandleOAccept", 1, [src |-> 0]),
    E("LearnStop", 1), E("StartEpoch", 1), E("Crash", 0),
    [a |-> "StartViewChange", r |-> 2, p |-> [v |-> 1]],
    EM("HandleVRequest", 3, [src |-> 2]), EM("HandleVRequest", 4, [src |-> 2]),
    E("BecomeSequencer", 2),
    [a |-> "Propose", r |-> 2, p |-> [c |-> 1]], [a |-> "AllocateO", r |-> 2, p |-> [n |-> 2]],
    [a |-> "SendOAccept", r |-> 2, p |-> [rng |-> TRUE]],
    EM("HandleOAccept", 3, [src |-> 2]), EM("HandleOAccept", 4, [src |-> 2]),
    EM("HandleCAccept", 3, [src |-> 2]), EM("HandleCAccept", 4, [src |-> 2]),
    EM("HandleCAck", 2, [src |-> 4]), E("CommitO", 2), E("Execute", 2) >>

(* Not a bug: a witness that the model takes the change with a crash in    *)
(* the middle (WitnessChangeWithCrash.cfg: the trace must complete, every  *)
(* mutation off).  R1's command is accepted by R1 and R2 in epoch 0 but not *)
(* ordered; the STOP is chosen at slot 0 (R0, R2); R1 crashes before its   *)
(* switch and restarts in epoch 0, executes the STOP, abandons the command *)
(* and proposes it again in epoch 1, where it is READY and executed at     *)
(* slot 1; R3 installs epoch 1's base.  R1 crashes again and restarts in   *)
(* epoch 1 from the base (its executed prefix is the STOP's slot only).    *)
ChangeWithCrash == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]], EM("HandleCAccept", 2, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 2]),
    [a |-> "AllocateStop", r |-> 0, p |-> [slot |-> 0]], E("SendOAccept", 0),
    EM("HandleOAccept", 2, [src |-> 0]), E("CommitO", 0),
    E("Crash", 1), [a |-> "Restart", r |-> 1, s |-> [exec |-> 0]],
    EM("HandleOCommit", 1, [slot |-> 0]), [a |-> "StartEpoch", r |-> 1, p |-> [epoch |-> 1, slot |-> 1]],
    EM("HandleOCommit", 2, [slot |-> 0]), E("StartEpoch", 2),
    [a |-> "InstallEpoch", r |-> 3, p |-> [src |-> 1, epoch |-> 1, slot |-> 1]],
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]], [a |-> "AllocateO", r |-> 1, p |-> [n |-> 1]],
    E("SendOAccept", 1), EM("HandleOAccept", 3, [src |-> 1]), EM("HandleCAccept", 3, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 3]), E("CommitO", 1), E("Ready", 1),
    [a |-> "Execute", r |-> 1, s |-> [exec |-> 2]],
    E("Crash", 1), [a |-> "Restart", r |-> 1, s |-> [exec |-> 1]] >>

(* Not a bug: a witness of a read across the change                       *)
(* (WitnessReadAfterChange.cfg).  R1's command c1 is READY at slot 0 in    *)
(* epoch 0, the STOP follows at slot 1; R1 and R2 execute both and switch. *)
(* In epoch 1, R2 grants R1 (view 0's sequencer) a lease and asks a read;  *)
(* R1 answers with slot 1, and R2's read, served there, reflects c1.       *)
ReadAfterChange == <<
    [a |-> "Propose", r |-> 1, p |-> [c |-> 1]], EM("HandleCAccept", 2, [src |-> 1]),
    EM("HandleCAck", 1, [src |-> 2]), EM("HandleCAccept", 0, [src |-> 1]),
    [a |-> "AllocateO", r |-> 0, p |-> [n |-> 1]], [a |-> "AllocateStop", r |-> 0, p |-> [slot |-> 1]],
    [a |-> "SendOAccept", r |-> 0, p |-> [start |-> 0]], EM("HandleOAccept", 1, [src |-> 0]),
    E("CommitO", 1), E("Ready", 1), E("CommitO", 0), E("Execute", 1),
    EM("HandleOCommit", 1, [slot |-> 1]), [a |-> "StartEpoch", r |-> 1, p |-> [epoch |-> 1, slot |-> 2]],
    EM("HandleOCommit", 2, [slot |-> 0]), EM("HandleCCommit", 2, [n |-> 1]), E("Execute", 2),
    EM("HandleOCommit", 2, [slot |-> 1]), E("StartEpoch", 2),
    E("SendHeartbeat", 1), [a |-> "HandleHeartbeat", r |-> 2, p |-> [grant |-> TRUE], m |-> [src |-> 1]],
    E("Read", 2), EM("HandleRRequest", 1, [src |-> 2]), EM("HandleRReply", 2, [src |-> 1]),
    E("ServeRead", 2) >>

=============================================================================
