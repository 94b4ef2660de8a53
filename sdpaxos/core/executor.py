"""The executor: runs committed commands in the global order (paper section 3.1).

Slot ``j`` holding ``(n, c)`` runs the next ``c`` C-instances of replica ``n``:
nothing maps a C-instance to a slot ahead of time (pitfall 2 of
``docs/protocol.md``); the executor counts as it goes (:class:`Progress`).
Execution waits on the first slot that is not committed, or on a C-instance
that is not; C-instance recovery starts from what it waits on
(:attr:`~sdpaxos.core.context.Progress.blocked`). ``(client_id, seq)`` sessions
(:class:`~sdpaxos.core.sessions.Sessions`) make execution exactly-once across a
client's retries; when sessions expire, they expire after a slot is executed,
so every replica expires the same ones.
"""

from typing import Any

from sdpaxos.core.app import StateMachine
from sdpaxos.core.context import Context
from sdpaxos.core.ready import Executed, Reply, ReplyKind
from sdpaxos.core.sessions import Outcome, Sessions, load_checked
from sdpaxos.core.types import STOP, CIndex, Command, ReplicaId, Slot


class Executor:
    """Applies committed slots in order; answers clients that wait for execution."""

    def __init__(
        self,
        ctx: Context,
        state_machine: StateMachine,
        exec_waiters: set[tuple[int, int]],
        *,
        observe: bool,
        offset: int = 0,
    ) -> None:
        self.s = ctx
        self.sm = state_machine
        #: The command leader's clients waiting for execution (shared, not copied).
        self.exec_waiters = exec_waiters
        self.observe = observe
        #: Added to a slot wherever it leaves the replica (sessions, ``Executed``):
        #: an epoch's slots are numbered from 0, the global log's go on from the
        #: slot after the previous epoch's stop (``docs/membership.md`` section 4.3).
        self.slot_offset = offset
        #: Per client session: its last executed seq, that command's result, its last slot.
        cfg = ctx.config
        self.sessions = Sessions(cfg.session_lifetime_slots, cfg.sessions_max)

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
        sessions = self.sessions
        expiring = sessions.lifetime_slots is not None
        expired_before = sessions.expired
        while slot < limit and committed[slot - b]:
            owner = owners[slot - b]
            if owner == STOP:
                # The epoch ends here: nothing after the stop runs in it
                # (docs/membership.md section 3.2). Whoever drives the epochs
                # (sdpaxos.core.member) reads ``progress.stop`` and starts the next.
                progress.stop = Slot(slot)
                break
            if owner >= 0:
                count = counts[slot - b]
                log = logs[owner]
                while in_slot < count:
                    k = exec_count[owner]
                    inst = log.get(CIndex(k))
                    if inst is None or not inst.committed:
                        progress.slot, progress.in_slot = Slot(slot), in_slot
                        if slot != start_slot:
                            progress.moved_ms = s.now_ms
                        blocked = (owner, CIndex(k))
                        if blocked != progress.blocked:
                            progress.blocked = blocked
                            progress.blocked_ms = s.now_ms
                        s.stats.sessions_expired += sessions.expired - expired_before
                        return
                    self.apply(Slot(slot + self.slot_offset), owner, k, inst.commands or ())
                    exec_count[owner] = k + 1
                    in_slot += 1
            if expiring:
                sessions.slot_executed(slot + self.slot_offset)
            slot += 1
            in_slot = 0
        progress.slot, progress.in_slot = Slot(slot), in_slot
        progress.blocked = None
        if slot != start_slot:
            progress.moved_ms = s.now_ms
        s.stats.sessions_expired += sessions.expired - expired_before

    def apply(self, slot: Slot, owner: ReplicaId, k: int, commands: tuple[Command, ...]) -> None:
        s = self.s
        out = s.out
        waiters = self.exec_waiters if owner == s.me else None
        observe = self.observe
        sessions = self.sessions
        refused_before = sessions.refused
        if not (waiters or observe):
            # Nobody here waits for these results: the session table runs the
            # batch alone (one call, no per-command outcome).
            sessions.run_batch(commands, slot, self.sm.apply)
        else:
            results: list[tuple[bytes | None, Outcome]] = []
            sessions.run_batch(commands, slot, self.sm.apply, results)
            duplicate, expired = Outcome.DUPLICATE, Outcome.EXPIRED
            for cmd, (result, outcome) in zip(commands, results, strict=True):
                if waiters:
                    key = (cmd.client_id, cmd.seq)
                    if key in waiters:
                        waiters.discard(key)
                        kind = (
                            ReplyKind.SESSION_EXPIRED if outcome is expired else ReplyKind.EXECUTED
                        )
                        out.reply(Reply(cmd.client_id, cmd.seq, kind, result))
                if observe:
                    out.executed.append(
                        Executed(
                            slot, owner, k, cmd, result, outcome is duplicate, outcome is expired
                        )
                    )
        s.stats.commands_session_expired += sessions.refused - refused_before
        s.stats.commands_executed += len(commands)
        if out.tracer is not None:
            out.trace("Execute", slot=slot, owner=owner, c_index=k, commands=len(commands))

    def dump_sessions(self) -> tuple[Any, ...]:
        """The session table as a snapshot carries it (:meth:`Sessions.dump`)."""
        return self.sessions.dump()

    def load_sessions(self, sessions: tuple[Any, ...]) -> None:
        """Replace the table with a snapshot's. It may come from a peer: a
        malformed one, or one with other limits than ours, is refused whole."""
        mine = self.sessions
        self.sessions = load_checked(sessions, mine.lifetime_slots, mine.sessions_max)
