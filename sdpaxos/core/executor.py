"""The executor: runs committed commands in the global order (paper section 3.1).

Slot ``j`` holding ``(n, c)`` runs the next ``c`` C-instances of replica ``n``:
nothing maps a C-instance to a slot ahead of time (pitfall 2 of
``docs/protocol.md``); the executor counts as it goes (:class:`Progress`).
Execution waits on the first slot that is not committed, or on a C-instance
that is not; C-instance recovery starts from what it waits on
(:attr:`Executor.blocked`). ``(client_id, seq)`` sessions make execution
exactly-once across a client's retries.
"""

from sdpaxos.core.app import StateMachine
from sdpaxos.core.context import Context
from sdpaxos.core.errors import PeerMessageError
from sdpaxos.core.ready import Executed, Reply, ReplyKind
from sdpaxos.core.types import NO_CL, CIndex, Command, ReplicaId, Slot


class Executor:
    """Applies committed slots in order; answers clients that wait for execution."""

    def __init__(
        self,
        ctx: Context,
        state_machine: StateMachine,
        exec_waiters: set[tuple[int, int]],
        *,
        observe: bool,
    ) -> None:
        self.s = ctx
        self.sm = state_machine
        #: The command leader's clients waiting for execution (shared, not copied).
        self.exec_waiters = exec_waiters
        self.observe = observe
        #: When execution last moved (the learner asks peers when it stalls).
        self.progress_ms = 0.0
        #: The C-instance execution waits on, and since when.
        self.blocked: tuple[ReplicaId, CIndex] | None = None
        self.blocked_ms = 0.0
        #: Per client: its last executed seq and that command's result.
        self.sessions: dict[int, tuple[int, bytes | None]] = {}

    def execute(self) -> None:
        """Run every slot whose O-instance and C-instances are committed, in order."""
        s = self.s
        progress = s.progress
        progress.dirty = False
        olog = s.olog
        owners, counts, committed = olog.owner, olog.count, olog.committed
        logs = s.clog.logs
        exec_count = progress.count
        slot: int = progress.slot
        in_slot = progress.in_slot
        b = olog.base
        limit = len(owners) + b
        start_slot = slot
        while slot < limit and committed[slot - b]:
            owner = owners[slot - b]
            if owner != NO_CL:
                count = counts[slot - b]
                log = logs[owner]
                while in_slot < count:
                    k = exec_count[owner]
                    inst = log.get(CIndex(k))
                    if inst is None or not inst.committed:
                        progress.slot, progress.in_slot = Slot(slot), in_slot
                        if slot != start_slot:
                            self.progress_ms = s.now_ms
                        blocked = (owner, CIndex(k))
                        if blocked != self.blocked:
                            self.blocked = blocked
                            self.blocked_ms = s.now_ms
                        return
                    self.apply(Slot(slot), owner, k, inst.commands or ())
                    exec_count[owner] = k + 1
                    in_slot += 1
            slot += 1
            in_slot = 0
        progress.slot, progress.in_slot = Slot(slot), in_slot
        self.blocked = None
        if slot != start_slot:
            self.progress_ms = s.now_ms

    def apply(self, slot: Slot, owner: ReplicaId, k: int, commands: tuple[Command, ...]) -> None:
        s = self.s
        out = s.out
        waiters = self.exec_waiters if owner == s.me else None
        sessions = self.sessions
        sm_apply = self.sm.apply
        observe = self.observe
        for cmd in commands:
            cid = cmd.client_id
            duplicate = False
            if cid:
                session = sessions.get(cid)
                if session is not None and cmd.seq <= session[0]:
                    duplicate = True
                    result = session[1] if cmd.seq == session[0] else None
                else:
                    result = sm_apply(cmd.payload)
                    sessions[cid] = (cmd.seq, result)
            else:
                result = sm_apply(cmd.payload)
            if waiters:
                key = (cid, cmd.seq)
                if key in waiters:
                    waiters.discard(key)
                    out.reply(Reply(cid, cmd.seq, ReplyKind.EXECUTED, result))
            if observe:
                out.executed.append(Executed(slot, owner, k, cmd, result, duplicate))
        s.stats.commands_executed += len(commands)
        if out.tracer is not None:
            out.trace("Execute", slot=slot, owner=owner, c_index=k, commands=len(commands))

    def dump_sessions(self) -> tuple[tuple[int, int, bytes | None], ...]:
        """The session table as a snapshot carries it: ``(client_id, seq, result)``."""
        return tuple((cid, seq, result) for cid, (seq, result) in sorted(self.sessions.items()))

    def load_sessions(self, sessions: tuple[object, ...]) -> None:
        """Replace the table with a snapshot's (checked: a snapshot may come from a peer)."""
        table: dict[int, tuple[int, bytes | None]] = {}
        for entry in sessions:
            if not (
                isinstance(entry, tuple)
                and len(entry) == 3
                and type(entry[0]) is int
                and type(entry[1]) is int
                and (entry[2] is None or isinstance(entry[2], bytes))
            ):
                raise PeerMessageError(f"bad session in snapshot: {entry!r:.80}")
            table[entry[0]] = (entry[1], entry[2])
        self.sessions = table

    def stalled(self) -> bool:
        """Is there something we know of that we have not executed?"""
        return self.s.progress.slot < self.s.olog.heard_upto
