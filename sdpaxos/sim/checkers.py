"""Safety checkers fed with a run's history, and the end-of-run liveness check.

Why here and not in the core: the checkers must judge the core from outside,
using only what a driver sees (``Ready.persist``, ``Ready.executed``,
``Ready.replies`` and what it proposed). They are incremental, so a violation
is raised at the first event that produced it, with the history that proves it.

Checked properties:

1. **One value per instance.** A value is *chosen* for a C-instance
   ``(owner, index)`` when a phase-2 quorum of replicas (a majority; two at
   N = 4) have persisted ``CAccepted`` of the same commands at the same
   ballot; for an O-instance ``slot`` when a phase-2 quorum persisted
   ``OAccepted`` covering it with the same value in the same view (an
   O-instance's ballot is its view). Two different chosen values for one
   instance, at any ballots, is a violation; for O-instances only when N != 5,
   since with N = 5 an O-instance is decided by two acceptors and may be
   overwritten by a later view while nobody has executed it (paper section 3.3).
   Other records (promises) do not choose values and are ignored.
2. **Prefix agreement.** The executed sequences ``(slot, owner, c_index,
   command, duplicate)`` of all replicas are prefixes of one another.
3. **Integrity.** Every executed command was proposed, and no
   ``(client_id, seq)`` executes twice as a non-duplicate on one replica (nor
   as a "duplicate" before it first executed). A command answered "session
   expired" (``Executed.session_expired``) was not applied: it is never a
   violation by itself, and it counts as an execution for nothing but the
   liveness check and real-time order (it did reach execution, in order). A
   registration (``seq`` 0) may execute more than once: each opens a session.
4. **Real-time order.** If command ``a`` was READY (a READY or EXECUTED reply
   at its leader) before ``b`` was proposed, ``a`` executes before ``b`` on
   every replica. "Before" is the simulator's event order, which refines
   virtual time.
5. **Read freshness.** A read answered ``ok`` by replica ``r`` has, at the
   moment ``r`` hands the answer out, applied every write that was READY
   (anywhere) before ``r.read()`` was called and that writes its key: a write
   of the same key, or a write or read with no key (an unnamed object, which
   the sequencer's history table treats as "every key"). That is the core's
   promise (``ReadResult``): the embedder then reads its local state machine.
   Reads answered not-``ok`` are fine: the client falls back to the log.

**Per-key order** (``Checker(n, per_key=True)``), for protocols that order
only interfering commands (EPaxos): properties 2 and 4 become

2'. **Prefix agreement per key.** For each key, the executed sequences of the
   commands on that key (with the same fields as in 2, the slot left out: it is
   a replica's own count) are prefixes of one another across replicas. A
   command with no key writes every object: the sequences of those agree too,
   and every keyed command is placed among them (how many of them executed
   before it), so the order between a keyed and an unkeyed command agrees.
4'. **Real-time order between interfering commands.** If ``a`` was READY before
   ``b`` was proposed and they interfere (same key, or either has none), ``a``
   executes before ``b`` on every replica.

Integrity (3) is unchanged and read freshness (5) is judged as before.

A command may be proposed at several replicas (a client that retries
elsewhere): any of them may answer it, and it must still execute once.

A crash loses a replica's volatile execution state; :meth:`Checker.restarted`
resets that replica's view so its re-execution is checked from slot 0 again.
"""

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sdpaxos.core.quorum import accept_quorum
from sdpaxos.core.ready import Executed, ReadResult, Reply
from sdpaxos.core.sessions import REGISTRATION_SEQ
from sdpaxos.core.storage import CAccepted, OAccepted, Record
from sdpaxos.core.types import Command

CommandKey = tuple[int, int]
#: What must agree across replicas at one position of the executed sequence:
#: the slot, the C-instance, the command, whether it was a duplicate, and the
#: state machine's result (so a replica whose state went wrong, say by installing
#: a bad snapshot, diverges at its next command), and whether its session had
#: expired (then it was not applied).
ExecKey = tuple[int, int, int, int, int, bytes, bool, bytes | None, bool]

#: How many missing commands a liveness report lists.
REPORT_ITEMS_MAX = 5


class SafetyViolation(AssertionError):
    """A safety property failed; the message says which, where and with what history."""


class LivenessViolation(AssertionError):
    """After the network healed and the run went on, some command never executed."""


def _short(value: object, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(slots=True)
class _Votes:
    """Acceptances of one instance: ballot -> value -> replicas."""

    by_ballot: dict[int, dict[object, set[int]]] = field(default_factory=dict)
    chosen: object = None
    chosen_ballot: int = -1
    chosen_by: tuple[int, ...] = ()


#: Per-key mode: what must agree at one position of a key's executed sequence
#: (for a keyed command, first how many unkeyed commands executed before it).
KeyExecKey = tuple[object, ...]


@dataclass(slots=True)
class _ReplicaView:
    """What the checker knows of one replica's (volatile) execution."""

    position: int = 0
    done: set[CommandKey] = field(default_factory=set)
    #: Commands that reached execution: ``done``, and those answered "session expired".
    settled: set[CommandKey] = field(default_factory=set)
    #: readies[0:covered] have all executed on this replica.
    covered: int = 0
    #: Per-key mode: position in each key's sequence (``None``: unkeyed commands),
    #: and how far each key's READY list has executed here.
    key_position: dict[bytes | None, int] = field(default_factory=dict)
    key_covered: dict[bytes | None, int] = field(default_factory=dict)


class Checker:
    """Incremental checker of one cluster's history (replicas ``0 .. replicas-1``)."""

    def __init__(self, replicas: int, *, per_key: bool = False) -> None:
        assert replicas >= 1
        self.replicas = replicas
        #: Order per key (2', 4' in the module docstring) instead of one total order.
        self.per_key = per_key
        self._key_order: dict[bytes | None, list[KeyExecKey]] = {}
        #: Per-key mode: READY commands per key (``None``: unkeyed), and for each
        #: keyed proposal how many of its key's and of the unkeyed were READY then.
        self._key_readies: dict[bytes | None, list[CommandKey]] = {}
        self._key_needs: dict[CommandKey, tuple[int, int]] = {}
        #: Acceptances that choose a value: a majority, two at N = 4 (a phase-2 quorum).
        self.quorum = accept_quorum(replicas)
        self._c_votes: dict[tuple[int, int], _Votes] = {}
        self._o_votes: dict[int, _Votes] = {}
        self._order: list[ExecKey] = []
        self._views = [_ReplicaView() for _ in range(replicas)]
        self._proposed: dict[CommandKey, tuple[int, Command]] = {}
        #: For each proposal, how many commands were READY when it was proposed.
        self._readies_before: dict[CommandKey, int] = {}
        self._readies: list[CommandKey] = []
        self._ready_set: set[CommandKey] = set()
        self._excused: set[CommandKey] = set()
        #: Every replica a command was proposed at (retries may go elsewhere).
        self._leaders: dict[CommandKey, set[int]] = {}
        #: Pending reads: read id -> (replica, key, how many commands were READY).
        self._reads: dict[int, tuple[int, bytes | None, int]] = {}
        self.reads_issued = 0
        #: Reads answered ``ok`` (each checked for freshness) and not ``ok``.
        self.reads_ok = 0
        self.reads_refused = 0
        self.chosen_c = 0
        self.chosen_o = 0
        self.events = 0
        #: Snapshots that moved a replica's execution forward (installs, restarts).
        self.snapshots_covered = 0

    # -- inputs -------------------------------------------------------------

    def proposed(self, replica: int, command: Command) -> None:
        """``command`` was handed to ``replica.propose``."""
        key = (command.client_id, command.seq)
        self._leaders.setdefault(key, set()).add(replica)
        if key in self._proposed:
            return  # a retry of the same command; the first proposal counts
        self._proposed[key] = (replica, command)
        self._readies_before[key] = len(self._readies)
        if self.per_key and command.key is not None:
            self._key_needs[key] = (
                len(self._key_readies.get(command.key, ())),
                len(self._key_readies.get(None, ())),
            )

    def replied(self, replica: int, reply: Reply) -> None:
        """``replica`` (the command leader) answered a client."""
        key = (reply.client_id, reply.seq)
        if key not in self._proposed:
            raise SafetyViolation(
                f"replica {replica} replied {reply.kind.name} for {key}, never proposed"
            )
        leaders = self._leaders[key]
        if replica not in leaders:
            raise SafetyViolation(
                f"replica {replica} replied for {key}, which was proposed at"
                f" replica(s) {sorted(leaders)} only"
            )
        if key not in self._ready_set:
            self._ready_set.add(key)
            self._readies.append(key)
            if self.per_key:
                written = self._proposed[key][1].key
                self._key_readies.setdefault(written, []).append(key)

    def persisted(self, replica: int, records: Sequence[Record]) -> None:
        """``replica`` made ``records`` durable (``Ready.persist``)."""
        self.events += 1
        for rec in records:
            if isinstance(rec, CAccepted):
                votes = self._c_votes.setdefault((rec.owner, rec.index), _Votes())
                if self._vote(votes, replica, rec.ballot, rec.commands):
                    self.chosen_c += 1
                    self._check_agree(
                        f"C-instance (owner={rec.owner}, index={rec.index})",
                        votes,
                        rec.ballot,
                        rec.commands,
                    )
            elif isinstance(rec, OAccepted):
                for i, value in enumerate(rec.values):
                    slot = rec.start + i
                    votes = self._o_votes.setdefault(slot, _Votes())
                    if self._vote(votes, replica, rec.view, value):
                        self.chosen_o += 1
                        if self.replicas != 5:
                            # With N = 5 an O-instance is decided by two acceptors,
                            # not a Paxos majority, and a later view may overwrite
                            # one nobody executed (paper section 3.3); there the
                            # execution checks (prefixes, real-time order) apply.
                            self._check_agree(f"O-instance {slot}", votes, rec.view, value)
            # Other records (promises, view votes) choose nothing: not checked here.

    def executed(self, replica: int, entries: Sequence[Executed]) -> None:
        """``replica`` applied ``entries`` (``Ready.executed``), in order."""
        self.events += 1
        view = self._views[replica]
        for e in entries:
            cmd = e.command
            key: CommandKey = (cmd.client_id, cmd.seq)
            ek: ExecKey = (
                e.slot,
                e.owner,
                e.c_index,
                cmd.client_id,
                cmd.seq,
                cmd.payload,
                e.duplicate,
                e.result,
                e.session_expired,
            )
            where = (
                f"replica {replica} position {view.position}"
                f" (slot {e.slot}, C({e.owner},{e.c_index}))"
            )
            if self.per_key:
                self._check_key_order(view, cmd.key, ek, where)
            elif view.position < len(self._order):
                expected = self._order[view.position]
                if expected != ek:
                    raise SafetyViolation(
                        f"executed sequences diverge at {where}: executed {_short(ek)}"
                        f" where another replica executed {_short(expected)}"
                    )
            else:
                self._order.append(ek)
            view.position += 1
            proposal = self._proposed.get(key)
            if proposal is None or proposal[1] != cmd:
                raise SafetyViolation(
                    f"{where} executed {_short(cmd)}, which was never proposed"
                    + ("" if proposal is None else f" (proposed was {_short(proposal[1])})")
                )
            if e.duplicate:
                if key not in view.done:
                    raise SafetyViolation(
                        f"{where} marked {key} a duplicate but it had not executed there"
                    )
                continue
            if e.session_expired:  # not applied: no execution, first or second
                view.settled.add(key)
                self._check_real_time(replica, view, key, where)
                continue
            if key in view.done and cmd.client_id != 0 and cmd.seq != REGISTRATION_SEQ:
                raise SafetyViolation(f"{where} executed {key} a second time as a non-duplicate")
            view.done.add(key)
            view.settled.add(key)
            self._check_real_time(replica, view, key, where)

    def snapshot(self, replica: int, slot: int) -> None:
        """``replica`` holds a snapshot of every slot below ``slot`` (taken or
        installed): what those slots executed counts as executed there."""
        view = self._views[replica]
        end = bisect.bisect_left(self._order, (slot,))
        if view.position >= end:
            return
        for ek in self._order[view.position : end]:
            if ek[6]:
                continue  # a duplicate executes nothing
            key = (ek[3], ek[4])
            view.settled.add(key)
            if not ek[8]:  # (one whose session had expired was not applied)
                view.done.add(key)
        view.position = end
        readies = self._readies
        while view.covered < len(readies) and readies[view.covered] in view.settled:
            view.covered += 1
        self.snapshots_covered += 1

    def restarted(self, replica: int) -> None:
        """``replica`` was rebuilt from storage: its execution starts over."""
        self._views[replica] = _ReplicaView()

    def crashed(self, replica: int) -> None:
        """``replica`` crashed: its proposals that were not yet READY may be lost,
        and so are the reads it had not answered."""
        for key, leaders in self._leaders.items():
            if replica in leaders and key not in self._ready_set:
                self._excused.add(key)
        for read_id in [i for i, (r, _, _) in self._reads.items() if r == replica]:
            del self._reads[read_id]

    def read_issued(self, replica: int, read_id: int, key: bytes | None) -> None:
        """``replica.read(read_id, key, ...)`` is being called now."""
        if read_id in self._reads:
            raise ValueError(f"read id {read_id} is already pending (the driver must not reuse it)")
        self._reads[read_id] = (replica, key or None, len(self._readies))
        self.reads_issued += 1

    def read_served(self, replica: int, result: ReadResult) -> None:
        """``replica`` handed out ``result`` (``Ready.reads``); judged at this moment."""
        asked = self._reads.pop(result.read_id, None)
        if asked is None:
            raise SafetyViolation(
                f"replica {replica} answered read {result.read_id}, which is not pending there"
            )
        where, key, readies = asked
        if where != replica:
            raise SafetyViolation(
                f"replica {replica} answered read {result.read_id}, asked at replica {where}"
            )
        if not result.ok:
            self.reads_refused += 1
            return
        self.reads_ok += 1
        view = self._views[replica]
        for k in self._readies[min(view.covered, readies) : readies]:
            if k in view.settled:  # applied, or not applied at all (session expired)
                continue
            written = self._proposed[k][1].key
            if key is None or written is None or written == key:
                raise SafetyViolation(
                    f"stale read: replica {replica} served read {result.read_id} of {key!r}"
                    f" without {k} (a write of {written!r}), which was READY before the"
                    " read was asked"
                )

    def _required(self) -> list[CommandKey]:
        """Commands that must execute everywhere: every READY one (READY is durable),
        and every other one whose leaders did not crash before it was READY."""
        return [k for k in self._proposed if k in self._ready_set or k not in self._excused]

    def check_liveness(self, live: Iterable[int]) -> None:
        """Every proposed command executed on every live replica.

        Exempt are commands never READY whose leader crashed before: nobody
        promised anything about them.
        """
        required = self._required()
        for replica in sorted(set(live)):
            done = self._views[replica].settled
            missing = [k for k in required if k not in done]
            if missing:
                shown = ", ".join(
                    f"{k} (leader {self._proposed[k][0]})" for k in missing[:REPORT_ITEMS_MAX]
                )
                more = len(missing) - REPORT_ITEMS_MAX
                raise LivenessViolation(
                    f"replica {replica} never executed {len(missing)} of {len(required)}"
                    f" proposed commands: {shown}" + (f" and {more} more" if more > 0 else "")
                )

    def check_safety(self) -> None:
        """Re-check, from the recorded acceptances, that no instance has two chosen values.

        The incremental checks already raise at the event that breaks a property;
        this recomputes "chosen" from scratch (every ballot and value with a
        phase-2 quorum of acceptors), so it also catches a bug in the incremental
        bookkeeping. Cheap enough to run after every step of a small test.
        """
        instances: list[tuple[str, _Votes]] = [
            (f"C-instance {key}", votes) for key, votes in sorted(self._c_votes.items())
        ]
        if self.replicas != 5:
            instances += [(f"O-instance {slot}", v) for slot, v in sorted(self._o_votes.items())]
        for what, votes in instances:
            chosen: list[tuple[int, object]] = [
                (ballot, value)
                for ballot, by_value in sorted(votes.by_ballot.items())
                for value, voters in by_value.items()
                if len(voters) >= self.quorum
            ]
            if any(value != chosen[0][1] for _, value in chosen):
                raise SafetyViolation(f"{what}: two values chosen: {_short(chosen, 300)}")

    # -- queries --------------------------------------------------------------

    @property
    def proposals(self) -> int:
        return len(self._proposed)

    def executed_count(self, replica: int) -> int:
        return len(self._views[replica].done)

    def executed_everywhere(self, live: Iterable[int]) -> bool:
        """The liveness condition as a boolean, to decide when a drain may stop."""
        required = self._required()
        return all(all(k in self._views[r].settled for k in required) for r in live)

    # -- internals ------------------------------------------------------------

    def _vote(self, votes: _Votes, replica: int, ballot: int, value: object) -> bool:
        """Record an acceptance; True when it completes a phase-2 quorum for ``value``."""
        voters = votes.by_ballot.setdefault(ballot, {}).setdefault(value, set())
        if replica in voters:
            return False
        voters.add(replica)
        return len(voters) == self.quorum

    def _check_agree(self, what: str, votes: _Votes, ballot: int, value: object) -> None:
        voters = tuple(sorted(votes.by_ballot[ballot][value]))
        if votes.chosen_by and votes.chosen != value:
            raise SafetyViolation(
                f"{what}: two values chosen: {_short(votes.chosen)} at ballot"
                f" {votes.chosen_ballot} by replicas {list(votes.chosen_by)}, and"
                f" {_short(value)} at ballot {ballot} by replicas {list(voters)}"
            )
        if not votes.chosen_by:
            votes.chosen, votes.chosen_ballot, votes.chosen_by = value, ballot, voters

    def _check_key_order(
        self, view: _ReplicaView, written: bytes | None, ek: ExecKey, where: str
    ) -> None:
        """2': ``ek`` (without its slot) continues ``written``'s sequence as on every replica."""
        entry: KeyExecKey = ek[1:]
        if written is not None:
            entry = (view.key_position.get(None, 0), *entry)
        order = self._key_order.setdefault(written, [])
        position = view.key_position.get(written, 0)
        if position < len(order):
            expected = order[position]
            if expected != entry:
                raise SafetyViolation(
                    f"executed sequences of key {written!r} diverge at {where} (position"
                    f" {position} of that key): executed {_short(entry)} where another"
                    f" replica executed {_short(expected)}"
                )
        else:
            order.append(entry)
        view.key_position[written] = position + 1

    def _covered(self, view: _ReplicaView, written: bytes | None) -> int:
        """How many of ``written``'s READY commands (in READY order) executed here."""
        readies = self._key_readies.get(written, [])
        covered = view.key_covered.get(written, 0)
        while covered < len(readies) and readies[covered] in view.settled:
            covered += 1
        view.key_covered[written] = covered
        return covered

    def _check_real_time(
        self, replica: int, view: _ReplicaView, key: CommandKey, where: str
    ) -> None:
        if self.per_key:
            written = self._proposed[key][1].key
            if written is not None:  # 4': only the commands it interferes with
                need_key, need_unkeyed = self._key_needs.get(key, (0, 0))
                for group, need in ((written, need_key), (None, need_unkeyed)):
                    covered = self._covered(view, group)
                    if covered < need:
                        first = self._key_readies[group][covered]
                        raise SafetyViolation(
                            f"real-time order broken at {where}: executed {key} before"
                            f" {first}, which interferes with it and was READY before"
                            f" {key} was proposed"
                        )
                return
            # An unkeyed command interferes with everything: the total check below.
        readies = self._readies
        while view.covered < len(readies) and readies[view.covered] in view.settled:
            view.covered += 1
        need = self._readies_before.get(key, 0)
        if view.covered < need:
            first = readies[view.covered]
            raise SafetyViolation(
                f"real-time order broken at {where}: executed {key} before {first},"
                f" but {first} was READY before {key} was proposed"
            )
