"""Trace validation: a simulator run, replayed step by step against the TLA+ spec.

The core names its trace events after the spec's actions (``tla/SDPaxos.tla``;
the table in ``tla/README.md``). :class:`TraceRecorder` listens to a traced
:class:`~sdpaxos.sim.cluster.SimCluster` and turns what the replicas do into a
sequence of spec steps ``[a |-> action, r |-> replica, p |-> parameters,
m |-> message filter, s |-> state after]``; :mod:`sdpaxos.modelcheck` writes it
as a TLA+ module and asks TLC whether some behaviour of the spec takes exactly
those steps (``tla/TraceSDPaxos.tla``). A step the spec cannot take fails the
check, and the report names it (its number, action, replica and time). This
module stays pure (no I/O), like the rest of the simulator.

How code steps become spec steps:

* Handler events (``HandleCAccept``, ``HandleOAccept``, ...) name the message they
  handled by its type and identifying fields. The code handles duplicates and
  retransmissions too; the spec's handlers only take steps that change
  something, so a handler step may also be a *no-op* of the spec, provided a
  matching message exists. What the code did is then pinned by the state
  assertions (``s``: promised view, established view and sequencer, executed
  prefix of the replica after the step), and by every later step.
* Sends the spec folds into other actions (an O-accept, a C-commit relayed, a
  heartbeat, ...) become ``Sent`` steps: the message must exist afterwards,
  either sent earlier or sent now by one of the spec's send actions.
* Time: the spec's clock is the simulator's virtual time in microseconds
  (``TickTo``), with ``Lease = lease_ms * 1000``.
* Commands are numbered 1, 2, ... in the order they are first proposed; the
  core must run with one command per C-instance and one C-instance per
  O-instance (``c_batch_max = o_batch_max = recovery_batch_max = 1``), as the
  spec does, and with clocks that do not drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sdpaxos.core.messages import (
    CAccept,
    CCommit,
    CRequest,
    Heartbeat,
    NewView,
    OAccept,
    OCommit,
    VRequest,
)
from sdpaxos.core.replica import Replica
from sdpaxos.core.types import BALLOT_STRIDE, NO_CL

from .cluster import SimCluster
from .faults import FaultKind

#: The configuration a traced run must use (the spec's granularity).
TRACE_CONFIG: dict[str, Any] = {
    "c_batch_max": 1,
    "o_batch_max": 1,
    "recovery_batch_max": 1,
}

#: The faults a recorded run may use. Left out: reads and read storms (the
#: runs record no reads yet), drift (the spec has one clock), retries at
#: another replica (the spec re-proposes a command only where it lost its
#: C-instance), straggler detection (not mapped yet), tight limits (batching).
TRACE_FAULTS = frozenset(
    FaultKind(name)
    for name in (
        "crash",
        "restart",
        "pause",
        "slow",
        "partition",
        "oneway",
        "drop",
        "dup",
        "reorder",
        "droptype",
        "anyorder",
        "handover",
        "churn",
        "point",
    )
)

#: Code events with no spec step: they change nothing the spec tracks (a
#: rejected or stale message, a deferred vote, a learn request, counting the
#: votes before the last, ...), or the step is taken by the event they lead to.
#: The read events are here because recorded runs have no reads yet (the spec
#: answers with i_G, the core with its history table; ``tla/README.md``).
SILENT_EVENTS = frozenset(
    {
        "Reject",
        "Stale",
        "FutureView",
        "IgnoreVRequest",
        "DeferVote",
        "HandleVote",
        "HandleOAck",
        "HandleCAck",
        "LearnRequest",
        "AskRange",
        "Establish",
        "Repropose",
        "StragglerSuspect",
        "StragglerViewChange",
        "HandleRRequest",
        "HandleRReply",
    }
)

#: The message class each handler event comes from (to read its view).
HANDLED_MESSAGE = {
    "HandleCAccept": "CAccept",
    "HandleCCommit": "CCommit",
    "HandleCRequest": "CRequest",
    "HandleCPrepare": "CPrepare",
    "HandleCPromise": "CPromise",
    "HandleOCommit": "OCommit",
    "HandleNewView": "NewView",
    "HandleVRequest": "VRequest",
    "HandleHeartbeat": "Heartbeat",
    "HandleHandover": "SequencerHandover",
}

#: A spec module checks at most this many steps (TLC's state graph depth).
TRACE_STEPS_MAX = 20_000


class TraceUnsupported(Exception):
    """The run used a feature the trace mapping does not cover."""


@dataclass
class Step:
    """One step of the spec, as the trace module writes it."""

    action: str
    replica: int
    params: dict[str, Any] = field(default_factory=dict)
    msg: dict[str, Any] = field(default_factory=dict)
    lenient: bool = False
    post: dict[str, Any] = field(default_factory=dict)
    time_us: int = 0
    origin: str = ""

    def to_tla(self) -> str:
        parts = [f'a |-> "{self.action}"', f"r |-> {self.replica}"]
        if self.params:
            parts.append(f"p |-> {_tla(self.params)}")
        if self.msg:
            parts.append(f"m |-> {_tla(self.msg)}")
        if self.lenient:
            parts.append("x |-> TRUE")
        if self.post:
            parts.append(f"s |-> {_tla(self.post)}")
        return "[" + ", ".join(parts) + "]"


def _tla(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, Mapping):
        return "[" + ", ".join(f"{k} |-> {_tla(v)}" for k, v in value.items()) + "]"
    if isinstance(value, (tuple, list)):
        return "<<" + ", ".join(_tla(v) for v in value) + ">>"
    raise TypeError(f"no TLA+ form for {value!r}")


class TraceRecorder:
    """Records a traced cluster's run as spec steps.

    Attach it before the run starts (``SimCluster(traced=True,
    config_overrides=TRACE_CONFIG)``); read :attr:`steps` afterwards.
    """

    def __init__(self, cluster: SimCluster) -> None:
        if not cluster.traced:
            raise ValueError("trace validation needs SimCluster(traced=True)")
        cfg = cluster.config
        for name, value in TRACE_CONFIG.items():
            if getattr(cfg, name) != value:
                raise ValueError(f"trace validation needs {name} = {value}")
        if any(rate != 1.0 for rate in cluster.clock_rate) or any(cluster.clock_offset_us):
            raise ValueError("trace validation needs clocks without drift or offset")
        self.cluster = cluster
        self.n = cluster.n
        self.steps: list[Step] = []
        self.clock_us = 0
        self.commands: dict[tuple[int, int], int] = {}
        self.max_view = 0
        self.max_c_index = [0] * self.n
        self.max_slot = 0
        self.max_round = 0
        self.crashes = 0
        #: Per replica: the index of its last step in the batch being carried out.
        self._open: dict[int, int] = {}
        #: Per replica: the message it is stepping now.
        self._stepping: dict[int, Any] = {}
        cluster.step_listeners.append(self._stepping.__setitem__)
        cluster.trace_listeners.append(self._on_event)
        cluster.send_listeners.append(self._on_send)
        cluster.crash_listeners.append(self._on_crash)
        drain = cluster._drain

        def drain_then_close(r: int) -> None:
            # The replica finished its step: its state is final, so the batch's
            # last spec step carries it as the state the spec must reach.
            self._close(r)
            self._stepping.pop(r, None)
            drain(r)

        cluster._drain = drain_then_close  # type: ignore[method-assign]

    def _close(self, r: int) -> None:
        k = self._open.pop(r, None)
        if k is not None:
            self.steps[k].post = self._post(r)

    # -- bounds the spec's constants must cover ---------------------------------

    def constants(self) -> dict[str, int]:
        return {
            "N": self.n,
            "MaxCmds": max(1, len(self.commands)),
            "MaxView": self.max_view,
            "MaxCRound": max(1, self.max_round),
            "MaxCrashes": self.crashes,
            "MaxSlot": self.max_slot + 2,
            "MaxCIdx": max(self.max_c_index) + 1,
            "MaxTime": self.clock_us,
            "Lease": round(self.cluster.config.lease_ms * 1000),
            "LeaseHold": round(self.cluster.config.lease_hold_ms * 1000),
        }

    # -- listeners --------------------------------------------------------------

    def _ballot(self, ballot: int) -> int:
        """The spec's ballot (stride N) for a core ballot (stride BALLOT_STRIDE)."""
        rnd, owner = divmod(ballot, BALLOT_STRIDE)
        self.max_round = max(self.max_round, rnd)
        return rnd * self.n + owner

    def _view(self, view: int) -> int:
        self.max_view = max(self.max_view, view)
        return view

    def _slot(self, slot: int) -> int:
        self.max_slot = max(self.max_slot, slot)
        return slot

    def _cidx(self, owner: int, index: int) -> int:
        if 0 <= owner < self.n:
            self.max_c_index[owner] = max(self.max_c_index[owner], index)
        return index

    def _o(self, owner: int, count: int) -> int:
        if owner == NO_CL:
            return -1
        if count != 1:
            raise TraceUnsupported(f"an O-instance with count {count} (o_batch_max must be 1)")
        return owner

    def _tick(self) -> None:
        now = self.cluster.now_us
        if now > self.clock_us:
            self.clock_us = now
            self.steps.append(Step("TickTo", 0, {"t": now}, time_us=now, origin="clock"))

    def _post(self, r: int) -> dict[str, Any]:
        rep = self.cluster.replicas[r]
        if not isinstance(rep, Replica):
            return {}
        status = rep.status()
        return {
            "view": status.view,
            "ev": status.established_view,
            "es": status.established_sequencer,
            "exec": status.executed_end,
        }

    def _add(self, step: Step, *, post: bool = True) -> None:
        step.time_us = self.cluster.now_us
        self.steps.append(step)
        if post:
            self._open[step.replica] = len(self.steps) - 1

    def _on_crash(self, r: int) -> None:
        self._tick()
        self.crashes += 1
        self._add(Step("Crash", r, origin="crash"), post=False)

    def _on_event(self, r: int, event: str, f: dict[str, Any]) -> None:
        if event in SILENT_EVENTS:
            return
        self._tick()
        origin = f"{event} {f}"
        step = self._map(r, event, f)
        stepping = self._stepping.get(r)
        if (
            step
            and step[0].msg
            and stepping is not None
            and type(stepping).__name__ == HANDLED_MESSAGE.get(event)
        ):
            # The handled message's view pins it further (the code fences by view).
            step[0].msg.setdefault("view", self._view(stepping.view))
        for s in step:
            s.origin = origin
            self._add(s)

    def _map(self, r: int, event: str, f: dict[str, Any]) -> list[Step]:
        if event == "Propose":
            (cid,) = f["ids"]
            number = self.commands.setdefault(tuple(cid), len(self.commands) + 1)
            self._cidx(r, f["index"])
            return [Step("Propose", r, {"c": number})]
        if event == "CommitC":
            return [Step("HandleCAck", r, msg={"type": "CAck", "n": f["owner"], "i": f["index"]})]
        if event == "Ready":
            return [Step("Ready", r, {"i": f["index"]})]
        if event == "HandleCAccept":
            msg = {
                "type": "CAccept",
                "n": f["owner"],
                "i": self._cidx(f["owner"], f["index"]),
                "b": self._ballot(f["ballot"]),
            }
            return [Step("HandleCAccept", r, msg=msg, lenient=True)]
        if event == "HandleCCommit":
            msg = {"type": "CCommit", "n": f["owner"], "i": f["index"]}
            return [Step("HandleCCommit", r, msg=msg)]
        if event == "HandleCRequest":
            msg = {"type": "CRequest", "src": f["owner"]}
            return [Step("HandleCRequest", r, msg=msg, lenient=True)]
        if event == "AllocateO":
            steps = []
            for k, (owner, count) in enumerate(f["values"]):
                self._slot(f["start"] + k)
                steps.append(Step("AllocateO", r, {"n": self._o(owner, count)}))
            return steps
        if event == "HandleOAccept":
            msg = {
                "type": "OAccept",
                "view": self._view(f["view"]),
                "start": f["start"],
                "rng": f["range"],
            }
            m = self._stepping.get(r)
            if "values" in f and isinstance(m, OAccept):  # a buffered one, handled now
                msg["src"] = m.src
                msg["vals"] = tuple(self._o(o, c) for o, c in f["values"])
            elif isinstance(m, OAccept):
                msg["src"] = m.src
                msg["vals"] = tuple(self._o(o, c) for o, c in m.values)
            return [Step("HandleOAccept", r, msg=msg, lenient=True)]
        if event == "HandleNewView":
            msg = {"type": "NewView", "view": self._view(f["view"]), "start": f["start"]}
            return [Step("HandleNewView", r, msg=msg, lenient=True)]
        if event == "CommitO":
            return [Step("CommitO", r, {"upto": f["upto"]})]
        if event == "LearnStop":
            return [Step("LearnStop", r, {"slot": self._slot(f["slot"])})]
        if event == "HandleOCommit":
            msg = {
                "type": "OCommit",
                "slot": self._slot(f["slot"]),
                "b": f["ballot"],
                "o": self._o(f["owner"], f["count"]),
            }
            return [Step("HandleOCommit", r, msg=msg)]
        if event == "Execute":
            self._slot(f["slot"])
            return [Step("Execute", r)]
        if event == "StartViewChange":
            return [Step("StartViewChange", r, {"v": self._view(f["view"])})]
        if event == "AbandonViewChange":
            return [Step("AbandonCandidacy", r)]
        if event == "HandleVRequest":
            msg = {"type": "VRequest", "src": f["candidate"], "view": self._view(f["view"])}
            m = self._stepping.get(r)
            if isinstance(m, VRequest):
                msg["from"] = m.o_from
            # A vote sent again may be the very message sent before.
            return [Step("HandleVRequest", r, msg=msg, lenient=bool(f.get("again")))]
        if event == "BecomeSequencer":
            return [Step("BecomeSequencer", r)]
        if event == "SendNewView":
            return [Step("SendNewView", r)]
        if event == "HandleHeartbeat":
            msg = {"type": "Heartbeat", "src": f["src"], "view": f["view"]}
            m = self._stepping.get(r)
            if isinstance(m, Heartbeat):
                msg["base"] = m.base
            return [Step("HandleHeartbeat", r, {"grant": f["grant"]}, msg=msg)]
        if event == "StartCRecovery":
            self._ballot(f["ballot"])
            return [Step("StartCRecovery", r)]
        if event == "HandleCPrepare":
            msg = {
                "type": "CPrepare",
                "n": f["owner"],
                "i": f["start"],
                "b": self._ballot(f["ballot"]),
            }
            return [Step("HandleCPrepare", r, msg=msg, lenient=True)]
        if event == "HandleCPromise":
            msg = {"type": "CPromise", "n": f["owner"], "i": f["start"], "src": f["src"]}
            return [Step("HandleCPromise", r, msg=msg)]
        if event == "AbandonCRecovery":
            return [Step("AbandonCRecovery", r)]
        if event == "SequencerHandover":
            return [Step("Handover", r, {"t": f["target"]})]
        if event == "HandleHandover":
            msg = {"type": "Handover", "src": f["src"], "view": f["view"]}
            return [Step("HandleHandover", r, msg=msg, lenient=True)]
        if event == "Resync":
            return [Step("Resync", r)]
        if event == "Restart":
            return [Step("Restart", r)]
        raise TraceUnsupported(f"no spec step for the core's {event} event")

    def _on_send(self, src: int, dst: int, m: Any) -> None:
        self._tick()
        msgs: list[dict[str, Any]] = []
        if isinstance(m, OAccept):
            msgs.append(
                {
                    "type": "OAccept",
                    "src": src,
                    "view": self._view(m.view),
                    "start": self._slot(m.start),
                    "rng": m.rebuilt,
                    "vals": tuple(self._o(o, c) for o, c in m.values),
                }
            )
        elif isinstance(m, CAccept):
            msgs.append(
                {
                    "type": "CAccept",
                    "src": src,
                    "n": m.owner,
                    "i": self._cidx(m.owner, m.index),
                    "b": self._ballot(m.ballot),
                }
            )
        elif isinstance(m, CRequest):
            msgs.append({"type": "CRequest", "src": src, "i": m.index})
        elif isinstance(m, CCommit):
            msgs.append({"type": "CCommit", "n": m.owner, "i": m.index})
        elif isinstance(m, OCommit):
            for slot, ballot, owner, count in m.entries:
                msgs.append(
                    {
                        "type": "OCommit",
                        "slot": self._slot(slot),
                        "b": ballot,
                        "o": self._o(owner, count),
                    }
                )
        elif isinstance(m, Heartbeat):
            msgs.append(
                {"type": "Heartbeat", "src": src, "view": self._view(m.view), "base": m.base}
            )
        elif isinstance(m, NewView):
            msgs.append(
                {"type": "NewView", "src": src, "view": self._view(m.view), "start": m.start}
            )
        for msg in msgs:
            msg["view"] = self._view(m.view)
            step = Step("Sent", src, msg=msg, origin=f"send to {dst}: {m!r}"[:300])
            step.time_us = self.cluster.now_us
            # Only the latest of identical sends matters: skip exact repeats.
            if not any(
                s.action == "Sent" and s.replica == src and s.msg == msg for s in self.steps[-8:]
            ):
                self.steps.append(step)
