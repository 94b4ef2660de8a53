"""Snapshots, compaction and state transfer (``docs/recovery.md`` section 16).

Each test pins one rule with the explicit-delivery harness or one role: a
replica cut off until its peers compacted past it catches up by snapshot; a
compacted acceptor never lets a recoverer choose a no-op; a candidate below a
voter's snapshot installs it first; a transfer resumes where it stopped and
installs atomically; a restart re-executes from the snapshot, not slot 0.
"""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.errors import ConfigError
from sdpaxos.core.messages import (
    CAccept,
    CCommit,
    CPrepare,
    CPromise,
    LearnRequest,
    Message,
    SnapshotChunk,
    SnapshotRequest,
)
from sdpaxos.core.storage import (
    Snapshot,
    decode_snapshot,
    encode_snapshot,
)
from sdpaxos.core.types import ReplicaId, Slot
from sdpaxos.sim.explicit import Net, Register
from tests.core.state import whole_state


def _compacting_net(**config: Any) -> Net:
    return Net.build(3, sequencer=0, snapshot_slots_min=2, snapshot_chunk_bytes=16, **config)


def _load(net: Net, proposer: int, commands: int, first_client: int = 1) -> None:
    """``commands`` one-command sessions at ``proposer``, each run to quiet."""
    for k in range(commands):
        net.propose(proposer, client=first_client + k, seq=1, payload=b"p%d" % (first_client + k))
        net.run(3)


def _run(net: Net, ticks: int, keep: Any) -> None:
    """``Net.run`` with a filter: ``keep(src, dst, msg)`` False drops a message."""
    for _ in range(ticks):
        net.tick()
        net.deliver_all(keep=keep)


def _load_filtered(net: Net, proposer: int, commands: int, keep: Any) -> None:
    """:func:`_load` with a message filter."""
    for k in range(commands):
        net.propose(proposer, client=k + 1, seq=1)
        _run(net, 3, keep)


def _payloads(net: Net, r: int) -> list[bytes]:
    return list(net.machines[r].log)


# ----------------------------------------------------------- partition, catch up


def test_a_replica_cut_off_past_every_compaction_catches_up_by_snapshot() -> None:
    net = _compacting_net()
    net.partition({2}, {0, 1})
    _load(net, proposer=1, commands=24)
    net.run(120)  # heartbeats carry the majority-executed point: 0 and 1 compact
    base = [rep.ctx.olog.base for rep in net.replicas]
    assert min(base[0], base[1]) > net.replicas[2].executed_upto + 4, base
    assert net.storages[0].load_snapshot() is not None
    net.heal()
    net.run(200)
    rep2 = net.replicas[2]
    assert rep2.stats.snapshots_installed >= 1
    assert rep2.executed_upto == net.replicas[0].executed_upto
    # The same commands, in the same order, through the snapshot and after it.
    assert _payloads(net, 2) == _payloads(net, 0) == _payloads(net, 1)
    assert len(_payloads(net, 2)) == 24
    # Replica 2 never executed a slot below the snapshot it installed.
    installed_at = rep2.ctx.olog.base
    assert all(e.slot >= installed_at for e in net.executed[2]) or not net.executed[2]
    # It runs normally afterwards.
    _load(net, proposer=2, commands=3, first_client=100)
    net.run(50)
    assert _payloads(net, 2) == _payloads(net, 0)
    assert len(_payloads(net, 0)) == 27


def test_compaction_frees_the_logs_and_truncates_the_records() -> None:
    net = _compacting_net()
    _load(net, proposer=1, commands=30)
    net.run(120)
    for r, rep in enumerate(net.replicas):
        s = rep.ctx
        assert s.olog.base > 20
        assert len(s.olog.owner) == len(s.olog) - s.olog.base  # the columns start at base
        for owner in range(3):
            assert all(index >= s.clog.floor[owner] for index in s.clog.logs[owner])
        assert sum(s.clog.floor) > 20
        snap = net.storages[r].load_snapshot()
        assert snap is not None and snap.slot == s.olog.base
        # What stays in storage is only what the snapshot does not cover.
        assert len(net.storages[r]) < 10


def test_no_compaction_below_what_a_majority_executed() -> None:
    """Replica 0 executes alone (its peers accept, but never learn that the
    C-instances are chosen: N = 5, where an acceptance does not complete a
    phase-2 quorum with the proposer's): it captures a snapshot but never
    compacts, because no majority executed that far."""
    net = Net.build(5, sequencer=0, snapshot_slots_min=2, snapshot_chunk_bytes=16)
    keep = lambda src, dst, msg: not isinstance(msg, CCommit | LearnRequest | CPrepare)  # noqa: E731
    _load_filtered(net, proposer=0, commands=10, keep=keep)
    _run(net, 120, keep)
    rep0 = net.replicas[0]
    assert rep0.executed_upto >= 8
    assert all(net.replicas[r].executed_upto == 0 for r in (1, 2, 3, 4))
    assert rep0.snapshots.captured is not None  # ready, waiting for a majority
    assert rep0.ctx.olog.base == 0
    assert rep0.stats.snapshots_taken == 0


# ------------------------------------------------------------------ restart


def test_a_restart_starts_from_the_snapshot_not_slot_zero() -> None:
    net = _compacting_net()
    _load(net, proposer=1, commands=20)
    net.run(120)
    snap = net.storages[2].load_snapshot()
    assert snap is not None and snap.slot > 10
    before = _payloads(net, 2)
    net.crash(2)
    net.restart(2)
    rep2 = net.replicas[2]
    assert rep2.executed_upto == snap.slot  # from the snapshot, before any message
    assert rep2.ctx.olog.base == snap.slot
    net.run(100)
    # It executed nothing below the snapshot again, and caught up to the same state.
    assert all(e.slot >= snap.slot for e in net.executed[2])
    assert _payloads(net, 2) == before
    _load(net, proposer=0, commands=2, first_client=50)
    net.run(50)
    assert _payloads(net, 2) == _payloads(net, 0)


# ----------------------------------------------------- C-instance recovery


def test_a_compacted_acceptor_answers_compacted_and_the_recoverer_installs() -> None:
    """Replica 2 learns the order but never replica 1's C-instances, and cannot
    learn by asking: it recovers them, and its peers compacted them. They must
    answer "compacted", never "nothing accepted" (else 2 would choose a no-op
    for executed commands); 2 then installs their snapshot."""
    net = _compacting_net()

    def cut_off(*kinds: type) -> Any:
        return lambda src, dst, msg: not (2 in (src, dst) and isinstance(msg, kinds))

    # 2 hears the order but none of 1's C-instances, until its peers compacted.
    phase1 = cut_off(CAccept, CCommit, LearnRequest, SnapshotChunk, CPrepare)
    _load_filtered(net, proposer=1, commands=12, keep=phase1)
    _run(net, 100, phase1)
    rep2 = net.replicas[2]
    assert net.replicas[0].ctx.clog.floor[1] > 0 and net.replicas[1].ctx.clog.floor[1] > 0
    blocked = rep2.ctx.progress.blocked
    assert blocked is not None and blocked[0] == 1
    # Now 2 may recover, but still not learn or fetch a snapshot.
    phase2 = cut_off(CAccept, CCommit, LearnRequest, SnapshotChunk)
    _run(net, 150, phase2)
    # The compacted promises made 2 fetch a snapshot (nothing else asks for one here).
    assert [m for src, dst, m in net.sent if src == 2 and isinstance(m, SnapshotRequest)]
    # And they changed nothing at the acceptors: no instance below their floors.
    for r in (0, 1):
        clog = net.replicas[r].ctx.clog
        assert all(index >= clog.floor[1] for index in clog.logs[1])
    promises = [m for src, dst, m in net.sent if dst == 2 and isinstance(m, CPromise)]
    assert promises and all(p.compacted > p.start for p in promises if p.src != 2)
    # Replica 2 never proposed a value (no-op or other) for replica 1's instances.
    assert not [m for src, dst, m in net.sent if src == 2 and isinstance(m, CAccept)]
    assert rep2.stats.snapshots_installed == 0
    net.run(100)  # now let the snapshot through
    assert rep2.stats.snapshots_installed >= 1
    assert _payloads(net, 2) == _payloads(net, 0)


# --------------------------------------------------------------- transfer


def test_a_lost_chunk_is_asked_for_again_from_where_the_transfer_stopped() -> None:
    net = _compacting_net()
    net.partition({2}, {0, 1})
    _load(net, proposer=1, commands=16)
    net.run(120)
    net.heal()
    lost: list[SnapshotChunk] = []

    def lose_the_second_chunk(src: int, dst: int, msg: Message) -> bool:
        if isinstance(msg, SnapshotChunk) and msg.offset > 0 and not lost:
            lost.append(msg)
            return False
        return True

    _run(net, 200, lose_the_second_chunk)
    assert lost, "the snapshot took a single chunk: the test needs several"
    asks = [
        (dst, m.offset) for src, dst, m in net.sent if src == 2 and isinstance(m, SnapshotRequest)
    ]
    # Asked again, of the same peer, from the same offset: resumed, not restarted.
    assert asks.count((lost[0].src, lost[0].offset)) >= 2
    assert net.replicas[2].stats.snapshots_installed == 1
    assert _payloads(net, 2) == _payloads(net, 0)


def test_a_snapshot_installs_only_whole_and_a_bad_one_changes_nothing() -> None:
    net = _compacting_net()
    rep = net.replicas[2]
    from sdpaxos.core.sessions import Sessions

    cfg = net.config
    sessions = Sessions(cfg.session_lifetime_slots, cfg.sessions_max).dump()
    good = Snapshot(Slot(5), (2, 1, 1), (3, 2, 4), 0, sessions, Register().snapshot())  # type: ignore[arg-type]
    data = encode_snapshot(good)
    last = (len(data) - 1) // 16 * 16  # the offset of the last 16-byte chunk
    before = whole_state(rep)
    for offset in range(0, last, 16):
        chunk = data[offset : offset + 16]
        rep.step(SnapshotChunk(ReplicaId(0), 0, Slot(5), offset, len(data), chunk), 0.0)
    assert rep.snapshots.transfer is not None and len(rep.snapshots.transfer.data) == last
    assert rep.executed_upto == 0 and rep.ctx.olog.base == 0  # nothing installed yet
    # A garbage snapshot of the right size: refused whole, nothing else changes.
    garbage = b"\xc1" * len(data)
    rep2 = net.replicas[1]
    rep2.tick(0.0)
    rep2.ready()
    before2 = whole_state(rep2)
    rep2.step(SnapshotChunk(ReplicaId(0), 0, Slot(5), 0, len(data), garbage[:16]), 0.0)
    for offset in range(16, len(data), 16):
        rep2.step(
            SnapshotChunk(
                ReplicaId(0), 0, Slot(5), offset, len(data), garbage[offset : offset + 16]
            ),
            0.0,
        )
    assert rep2.snapshots.transfer is None and rep2.executed_upto == 0
    rep2.ready()
    assert rep2.stats.rejected == 1
    assert whole_state(rep2) == before2
    # The good one, completed: installed at once.
    rep.step(SnapshotChunk(ReplicaId(0), 0, Slot(5), last, len(data), data[last:]), 0.0)
    assert rep.executed_upto == 5 and rep.ctx.olog.base == 5
    assert rep.ctx.progress.count == [2, 1, 1]
    assert rep.ctx.clog.c_max == [-1, -1, -1]  # what *it* accepted: nothing
    assert rep.command_leader.next_index == 5  # above any index of ours a peer accepted
    assert whole_state(rep) != before
    rd = rep.ready()
    assert rd.snapshot is not None and rd.snapshot.slot == 5 and rd.snapshot_installed


def test_a_snapshot_taken_in_a_batch_that_executes_later_slots_says_it_was_taken() -> None:
    """Replica 1 captures a snapshot at slot 2 and waits for a majority to execute
    that far; in the batch where it learns that, it also executes slot 2. The
    snapshot's slot is at the batch's first executed slot, as an installed one's
    is: only ``Ready.snapshot_installed`` tells the driver it was taken, so that
    it reports it after the executions (``sim/driver.py`` read the slot, and
    reported this one before them, as installed)."""
    net = Net.build(3, sequencer=0, snapshot_slots_min=2)
    rep1 = net.replicas[1]
    net.propose(0, client=1, seq=1, payload=b"a")
    net.deliver_all()
    net.propose(0, client=1, seq=2, payload=b"b")
    net.deliver_all()  # no tick yet: no heartbeat has told anyone a majority point
    assert rep1.snapshots.captured is not None and rep1.snapshots.captured.slot == 2
    assert rep1.snapshots.majority_executed == 0
    net.propose(0, client=1, seq=3, payload=b"c")
    not_to_1 = lambda src, dst, m: dst != 1  # noqa: E731
    for _ in range(120):  # 0 and 2 execute slot 2; heartbeats say a majority did
        net.tick()
        net.deliver_where(not_to_1)
    held = [m for _, dst, m in net.pending if dst == 1]
    net.pending = [p for p in net.pending if p[1] != 1]
    for m in held:  # all of it, then one batch
        rep1.step(m, net.now_ms)
    rd = rep1.ready()
    assert rd.snapshot is not None and rd.snapshot.slot == 2
    assert [e.slot for e in rd.executed] == [2]
    assert rd.snapshot_installed is False
    assert rep1.stats.snapshots_taken == 1 and rep1.stats.snapshots_installed == 0


def test_snapshot_bytes_round_trip_and_refuse_malformed_input() -> None:
    snap = Snapshot(Slot(7), (1, 2, 3), (4, -1, 5), 9, ((1, 2, b"r"),), b"app")  # type: ignore[arg-type]
    assert decode_snapshot(encode_snapshot(snap), 3) == snap
    from sdpaxos.core.errors import PeerMessageError

    for bad in (b"", b"\x00", encode_snapshot(snap)[:-1], encode_snapshot(snap) + b"x"):
        with pytest.raises(PeerMessageError):
            decode_snapshot(bad, 3)
    with pytest.raises(PeerMessageError):
        decode_snapshot(encode_snapshot(snap), 5)  # a cluster of another size


def test_snapshot_bounds_are_validated() -> None:
    with pytest.raises(ConfigError, match="snapshot_slots_min"):
        ClusterConfig(replicas=3, snapshot_slots_min=0)
    with pytest.raises(ConfigError, match="snapshot_chunk_bytes"):
        ClusterConfig(replicas=3, snapshot_chunk_bytes=16 << 20)
    with pytest.raises(ConfigError, match="snapshot_bytes_max"):
        ClusterConfig(replicas=3, snapshot_bytes_max=0)


def test_truncation_keeps_exactly_what_the_storage_contract_lists() -> None:
    """``covered_records`` on a hand-made history (section 16.5, item by item)."""
    from sdpaxos.core.storage import (
        CAccepted,
        CPromised,
        OAccepted,
        ViewEstablished,
        ViewPromised,
        covered_records,
    )
    from sdpaxos.core.types import Ballot, CIndex, Command, View

    cmd = (Command(1, 1, b"x"),)
    r0, r1 = ReplicaId(0), ReplicaId(1)
    records = [
        ViewPromised(View(1)),
        ViewEstablished(View(1), r0, Slot(0), ((r0, 1),) * 8),  # slots 0..7
        OAccepted(View(1), Slot(8), ((r1, 1),) * 4),  # slots 8..11
        CAccepted(r0, CIndex(2), Ballot(0), cmd),  # executed (executed[0] = 3)
        CAccepted(r0, CIndex(3), Ballot(0), cmd),  # not executed
        CPromised(r1, CIndex(0), Ballot(257)),  # executed (executed[1] = 1)
        CPromised(r1, CIndex(1), Ballot(257)),  # not executed
        ViewPromised(View(2)),
        ViewEstablished(View(2), r1, Slot(10), ((r1, 1),) * 2),  # slots 10..11
    ]
    snap = Snapshot(Slot(6), (3, 1, 0), (3, 1, -1), CIndex(4), (), b"")
    kept = covered_records(records, snap)
    assert kept[:2] == [  # the newest promise and range first
        ViewPromised(View(2)),
        ViewEstablished(View(2), r1, Slot(10), ((r1, 1),) * 2),
    ]
    assert len(kept) == 6 and set(kept[2:]) == {  # the rest replays in any order
        OAccepted(View(1), Slot(6), ((r0, 1),) * 2),  # the older range, cut at 6
        OAccepted(View(1), Slot(8), ((r1, 1),) * 4),
        CAccepted(r0, CIndex(3), Ballot(0), cmd),
        CPromised(r1, CIndex(1), Ballot(257)),
    }
    # A range wholly below the snapshot keeps its view, sequencer and base.
    only = [ViewEstablished(View(1), r0, Slot(0), ((r0, 1),) * 4)]
    assert covered_records(only, snap) == [ViewEstablished(View(1), r0, Slot(4), ())]


_leaf = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.binary(max_size=20)
_sessions = st.lists(st.recursive(_leaf, lambda inner: st.tuples(inner, inner), max_leaves=6))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    slot=st.integers(1, 2**40),
    executed=st.tuples(*[st.integers(0, 2**40)] * 3),
    c_max=st.tuples(*[st.integers(-1, 2**40)] * 3),
    next_index=st.integers(0, 2**40),
    sessions=_sessions,
    app=st.binary(max_size=200),
)
def test_any_snapshot_round_trips(
    slot: int,
    executed: tuple[int, ...],
    c_max: tuple[int, ...],
    next_index: int,
    sessions: list[object],
    app: bytes,
) -> None:
    snap = Snapshot(Slot(slot), executed, c_max, next_index, tuple(sessions), app)  # type: ignore[arg-type]
    assert decode_snapshot(encode_snapshot(snap), 3) == snap


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=st.binary(max_size=120), cut=st.integers(0, 400))
def test_any_bytes_decode_to_a_snapshot_or_a_clear_refusal(data: bytes, cut: int) -> None:
    from sdpaxos.core.errors import PeerMessageError

    good = encode_snapshot(Snapshot(Slot(3), (1, 0, 0), (0, -1, -1), 1, ((7, 1, b"r"),), b"s"))  # type: ignore[arg-type]
    for candidate in (data, good[:cut] + data, good[: cut % (len(good) + 1)]):
        try:
            snap = decode_snapshot(candidate, 3)
        except PeerMessageError:
            continue
        assert decode_snapshot(encode_snapshot(snap), 3) == snap  # and it is well formed


def test_a_candidate_whose_start_is_compacted_runs_again() -> None:
    """Found by the CI compaction sweep (seed 150032, N = 3): a candidate took a
    snapshot above its o_from (a heartbeat of the old view still arrived), won,
    and rebuilt its range from slots it had just forgotten."""
    from sdpaxos.core.election import Candidacy
    from sdpaxos.core.replica import Replica

    rep = Replica(ClusterConfig(replicas=3), ReplicaId(1), Register())
    rep.ctx.olog.grow(6)
    rep.ctx.progress.slot = Slot(6)
    rep.election.candidate = Candidacy(1, Slot(5), 0.0)  # type: ignore[arg-type]
    rep.snapshots.take(Snapshot(Slot(4), (0, 0, 0), (), 0, (), b""))  # type: ignore[arg-type]
    assert rep.election.candidate is not None  # it reports from 5: nothing forgotten
    rep.snapshots.take(Snapshot(Slot(6), (0, 0, 0), (), 0, (), b""))  # type: ignore[arg-type]
    assert rep.election.candidate is None


def test_a_snapshot_whose_sessions_do_not_fit_this_cluster_is_refused_whole() -> None:
    """The sessions are checked before anything is replaced: a peer's snapshot
    with other session limits (or a malformed table) installs nothing."""
    from sdpaxos.core.sessions import Sessions

    net = _compacting_net()
    rep = net.replicas[2]
    rep.tick(0.0)
    rep.ready()
    before = whole_state(rep)
    other = Sessions(5, 7).dump()  # this cluster's sessions never expire
    bad = Snapshot(Slot(5), (2, 1, 1), (3, 2, 4), 0, other, b"log")  # type: ignore[arg-type]
    data = encode_snapshot(bad)
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        rep.step(SnapshotChunk(ReplicaId(0), 0, Slot(5), offset, len(data), chunk), 0.0)
    rep.ready()
    assert rep.stats.rejected == 1
    assert whole_state(rep) == before
