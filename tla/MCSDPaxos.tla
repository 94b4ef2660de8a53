----------------------------- MODULE MCSDPaxos -----------------------------
(* Model-checking wrapper: bounds and the state constraint.  The constants  *)
(* are set in the MC*.cfg files; see README.md for the measured runs.       *)
EXTENDS SDPaxos

\* Keep the search finite and small: bounded by the constants already; this
\* only caps the number of distinct messages (a proxy for the run's length).
CONSTANT MaxMsgs
MsgBound == Cardinality(msgs) =< MaxMsgs
=============================================================================
