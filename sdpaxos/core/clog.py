"""The C-logs: one log of C-instances per replica, as this replica knows them.

Each entry holds the acceptor state of one C-instance (promised and accepted
ballot, value, committed flag) and, for instances this replica proposes (its
own, or ones it recovers), the leader state (who acknowledged, when it was
sent). :meth:`CLog.accept` is the one place a C-value is accepted, so the
per-owner highest accepted index that votes report (``c_max``, the N = 5
inference's input) can never miss an acceptance.
"""

from sdpaxos.core.storage import CAccepted
from sdpaxos.core.types import Ballot, CIndex, Command, ReplicaId

#: The ballot of nothing promised or accepted.
NO_BALLOT = Ballot(-1)


class CInstance:
    """One C-instance as this replica knows it (acceptor and, if proposed here, leader state)."""

    __slots__ = ("acks", "ballot", "commands", "committed", "promised", "sent_ms", "started_ms")

    def __init__(self) -> None:
        self.promised: Ballot = NO_BALLOT
        self.ballot: Ballot = NO_BALLOT
        self.commands: tuple[Command, ...] | None = None
        self.committed = False
        #: Leader only: replicas that accepted ``ballot`` (self included).
        self.acks: set[ReplicaId] | None = None
        #: Leader only: time of the last (re)transmission, and of the first.
        self.sent_ms = 0.0
        self.started_ms = 0.0


class CLog:
    """Every replica's C-log, indexed ``logs[owner][index]``, and ``c_max`` per owner.

    Instances below ``floor[owner]`` were executed and forgotten (a snapshot
    covers them): nothing below it is ever created again, and whoever asks about
    them is answered with the snapshot.
    """

    __slots__ = ("c_max", "floor", "logs")

    def __init__(self, replicas: int) -> None:
        self.logs: list[dict[CIndex, CInstance]] = [{} for _ in range(replicas)]
        #: Per owner: the highest C-instance index accepted here (-1: none).
        self.c_max: list[int] = [-1] * replicas
        #: Per owner: instances below this were executed and compacted.
        self.floor: list[int] = [0] * replicas

    def compact(self, executed: tuple[int, ...] | list[int]) -> None:
        """Forget each owner's instances below ``executed[owner]`` (all executed)."""
        for owner, upto in enumerate(executed):
            log = self.logs[owner]
            low = self.floor[owner]
            if upto <= low:
                continue
            if upto - low > len(log):
                for index in [i for i in log if i < upto]:
                    del log[index]
            else:
                for i in range(low, upto):
                    log.pop(CIndex(i), None)
            self.floor[owner] = upto

    def get(self, owner: ReplicaId, index: CIndex) -> CInstance | None:
        return self.logs[owner].get(index)

    def entry(self, owner: ReplicaId, index: CIndex) -> CInstance:
        """The entry of ``owner.index``, created empty if this replica has none."""
        log = self.logs[owner]
        inst = log.get(index)
        if inst is None:
            inst = log[index] = CInstance()
        return inst

    def is_committed(self, owner: ReplicaId, index: CIndex) -> bool:
        inst = self.logs[owner].get(index)
        return inst is not None and inst.committed

    def top_promised(self, owner: ReplicaId, start: CIndex, end: CIndex) -> Ballot:
        """The highest ballot promised on ``owner.start .. end-1`` (-1: none)."""
        log = self.logs[owner]
        return max(
            (log[CIndex(i)].promised for i in range(start, end) if i in log), default=NO_BALLOT
        )

    def accept(
        self,
        owner: ReplicaId,
        index: CIndex,
        inst: CInstance,
        ballot: Ballot,
        commands: tuple[Command, ...],
    ) -> CAccepted:
        """Accept ``commands`` for ``owner.index`` at ``ballot``; returns the record
        the caller must persist before anything that depends on it leaves."""
        inst.promised = max(inst.promised, ballot)
        inst.ballot = ballot
        inst.commands = commands
        if index > self.c_max[owner]:
            self.c_max[owner] = index
        return CAccepted(owner, index, ballot, commands)
