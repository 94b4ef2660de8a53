----------------------------- MODULE MCSDPaxos -----------------------------
(* Model-checking wrapper: bounds and state constraints.  The constants are *)
(* set in the MC*.cfg files; README.md has the measured runs.               *)
EXTENDS SDPaxos

\* Keep the search finite: a cap on distinct messages (a proxy for the run's
\* length) on top of the bounds in the constants.
CONSTANT MaxMsgs
MsgBound == Cardinality(msgs) =< MaxMsgs

\* Scenario narrowing for the mutation configurations (each says which it
\* uses): they cut behaviours irrelevant to the bug's interleaving family so
\* that BFS reaches the counterexample in CI time.  Removing behaviours never
\* creates a violation, so a violation found under them is one of Spec.
NoViewZeroTraffic ==   \* nothing is proposed or ordered before the first view change
    /\ \A r \in R : ownNext[r] > 0 => pView[r] >= 1
MsgBoundNoViewZero == MsgBound /\ NoViewZeroTraffic

\* Reachability probes for the membership configurations (no configuration checks
\* them; README.md says how they were used): each is violated once the search or a
\* simulation reaches what it names.
ProbeNoSwitch == \A r \in R : ep[r] = 0
ProbeNoCommandAfterSwitch == ~\E x \in execHist : x.ep > 0 /\ x.cmd \in Cmds
ProbeNoReadAfterSwitch == ~\E k \in DOMAIN rops : rops[k].st = "done" /\ rops[k].e > 0
\* The same for the last epoch of a run of several changes (SIM5to7: epoch 2).
ProbeNoLastEpoch == \A r \in R : ep[r] < NEp - 1
ProbeNoCommandInLastEpoch == ~\E x \in execHist : x.ep = NEp - 1 /\ x.cmd \in Cmds
\* For the cluster sizes (MC4, SIM7): a command READY and then a view won above
\* view 0; a command executed in a view above 0; a read served.
ProbeNoReadyThenWin == ~(ReadySet # {} /\ \E x \in ranges : x.v > 0)
ProbeNoExecAfterViewChange == ~\E x \in execHist : x.v > 0 /\ x.cmd \in Cmds
ProbeNoReadServed == ~\E k \in DOMAIN rops : rops[k].st = "done"
=============================================================================
