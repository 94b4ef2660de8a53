"""The shared in-memory driver: one ``Ready`` batch, carried out in the durability order."""

from sdpaxos.core import (
    CAccepted,
    ClusterConfig,
    Command,
    Executed,
    MemoryStorage,
    Message,
    ReadResult,
    Ready,
    Record,
    Replica,
    Reply,
    ReplyKind,
)
from sdpaxos.core.storage import Snapshot
from sdpaxos.sim.driver import Node, Outlet, carry_out
from sdpaxos.sim.explicit import Register

CMD = Command(7, 1, b"w")
RECORD = CAccepted(owner=1, index=0, ballot=1, commands=(CMD,))


class Journal:
    """A storage that writes down its calls in a journal :class:`JournalOutlet` shares."""

    def __init__(self, died: bool = False) -> None:
        self.calls: list[str] = []
        self.records: list[Record] = []
        self.died = died

    # Storage
    def append(self, records: list[Record]) -> None:
        self.calls.append("storage.append")
        self.records.extend(records)

    def load(self) -> list[Record]:
        return list(self.records)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        self.calls.append(f"storage.save_snapshot {snapshot.slot}")


class JournalOutlet(Outlet):
    def __init__(self, journal: Journal) -> None:
        self.j = journal

    def persisted(self, replica: int, records: list[Record]) -> None:
        self.j.calls.append("persisted")

    def send(self, replica: int, messages: list[tuple[int, Message]]) -> bool:
        self.j.calls.append(f"send {len(messages)}")
        return self.j.died

    def executed(self, replica: int, entries: list[Executed]) -> None:
        self.j.calls.append(f"executed {[e.slot for e in entries]}")

    def snapshotted(self, replica: int, snapshot: Snapshot) -> None:
        self.j.calls.append(f"snapshotted {snapshot.slot}")

    def replies(self, replica: int, replies: list[Reply]) -> None:
        self.j.calls.append("replies")

    def reads(self, replica: int, results: list[ReadResult]) -> None:
        self.j.calls.append("reads")


def full_batch() -> Ready:
    return Ready(
        persist=[RECORD],
        messages=[(2, "accept"), (0, "request")],  # type: ignore[list-item]
        replies=[Reply(7, 1, ReplyKind.READY)],
        executed=[Executed(0, 1, 0, CMD, b"1", False)],
        reads=[ReadResult(3, True)],
    )


def test_records_are_stored_before_messages_leave_and_before_any_answer() -> None:
    j = Journal()
    assert carry_out(1, full_batch(), j, JournalOutlet(j)) is True
    assert j.calls == ["storage.append", "persisted", "send 2", "executed [0]", "replies", "reads"]
    assert j.records == [RECORD]


def test_empty_parts_are_skipped_but_send_is_called_once_per_batch() -> None:
    j = Journal()
    assert carry_out(0, Ready(), j, JournalOutlet(j)) is True
    assert j.calls == ["send 0"]  # the point where a driver may cut a batch, every batch


def test_a_node_that_dies_while_sending_reports_executions_and_answers_nobody() -> None:
    j = Journal(died=True)
    assert carry_out(1, full_batch(), j, JournalOutlet(j)) is False
    assert j.calls == ["storage.append", "persisted", "send 2", "executed [0]"]


def _executing(*slots: int) -> list[Executed]:
    return [
        Executed(slot, 1, k, Command(7, k + 1, b"w"), b"1", False) for k, slot in enumerate(slots)
    ]


SNAP8 = Snapshot(8, (3, 3, 2), (2, 2, 1), 3, (), b"")


def test_a_taken_snapshot_is_reported_after_the_batch_s_executions_whatever_its_slot() -> None:
    """Captured at slot 8 and taken in a batch that executes slots 10 and 11 (a
    majority had executed slot 8 by then): reported after them, as taken. The old
    rule read the slot (8 <= 10: "installed") and reported it before them."""
    j = Journal()
    assert carry_out(1, Ready(executed=_executing(10, 11), snapshot=SNAP8), j, JournalOutlet(j))
    assert j.calls == [
        "storage.save_snapshot 8",
        "send 0",
        "executed [10, 11]",
        "snapshotted 8",
    ]


def test_an_installed_snapshot_is_reported_before_the_executions_that_follow_it() -> None:
    j = Journal()
    rd = Ready(executed=_executing(8, 9), snapshot=SNAP8, snapshot_installed=True)
    assert carry_out(1, rd, j, JournalOutlet(j))
    assert j.calls == ["storage.save_snapshot 8", "send 0", "snapshotted 8", "executed [8, 9]"]


def test_default_outlet_drops_everything_but_storage_keeps_the_records() -> None:
    storage = MemoryStorage()
    assert carry_out(1, full_batch(), storage, Outlet()) is True
    assert storage.load() == [RECORD]


class Cluster(Outlet):
    """A user's FIFO cluster of driver Nodes that checks durability at every send
    and every reply: the node's storage already holds every record of the batch."""

    def __init__(self, n: int) -> None:
        cfg = ClusterConfig(replicas=n)
        self.nodes: list[Node[Register]] = []
        for r in range(n):
            sm = Register()
            self.nodes.append(Node(r, Replica(cfg, r, sm), MemoryStorage(), sm))
        self.queue: list[tuple[int, Message]] = []
        self.replied: list[Reply] = []
        self.stored_before: list[int] = []
        self.batch: list[Record] = []
        self.stored_at_send = -1

    def persisted(self, replica: int, records: list[Record]) -> None:
        self.batch = records

    def _check_durable(self, replica: int) -> None:
        stored = self.nodes[replica].storage.load()
        assert stored[len(stored) - len(self.batch) :] == self.batch
        self.stored_before.append(len(self.batch))
        self.stored_at_send = len(stored)

    def send(self, replica: int, messages: list[tuple[int, Message]]) -> bool:
        self._check_durable(replica)
        self.queue.extend(messages)
        return False

    def replies(self, replica: int, replies: list[Reply]) -> None:
        self._check_durable(replica)
        self.replied.extend(replies)

    def flush(self, r: int) -> None:
        self.batch = []
        self.stored_at_send = -1
        self.nodes[r].flush(self)
        # Nothing of the batch reached storage after its messages left.
        assert self.stored_at_send == len(self.nodes[r].storage.load())


def test_nodes_of_the_real_core_persist_before_they_send_and_reply() -> None:
    c = Cluster(3)
    c.nodes[1].replica.propose(CMD)
    c.flush(1)
    for _ in range(1000):
        if not c.queue:
            break
        dst, msg = c.queue.pop(0)
        c.nodes[dst].replica.step(msg, 0.0)
        c.flush(dst)
    assert [(x.client_id, x.seq, x.kind) for x in c.replied] == [(7, 1, ReplyKind.READY)]
    assert any(c.stored_before)  # some batches did carry records, checked at send time
    assert [node.machine.log for node in c.nodes] == [[b"w"]] * 3
    assert isinstance(c.nodes[1].storage.load()[0], CAccepted)
