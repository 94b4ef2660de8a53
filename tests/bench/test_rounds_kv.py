"""BenchLog as the round driver's key-value store, its order checks, its byte counters,
the NIC model's arithmetic, and EPaxos in the driver: small runs, fixed seeds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from bench.rounds import (
    RoundSpec,
    agree,
    check_orders,
    nic_capacity,
    reply_bytes,
    run_rounds,
    run_with,
    submit_bytes,
)
from bench.runtime_app import GET, PUT, BenchLog, kv_get, kv_put
from bench.workloads import HOT_KEY, OpStream, Workload
from sdpaxos.core.config import ClusterConfig
from sdpaxos.core.ready import Ready, Reply, ReplyKind
from sdpaxos.core.types import Command, ReplicaId, Wait
from sdpaxos.protocols import protocol
from sdpaxos.wire.codec import MessageCodec
from sdpaxos.wire.framing import LENGTH_PREFIX_BYTES

SMALL: dict[str, Any] = {"sessions": 100, "commands": 2_000, "warmup": 400}

# -- the key-value store --------------------------------------------------------------


def test_the_store_puts_and_gets_by_key_and_records_the_order() -> None:
    m = BenchLog(store=True)
    a1, b1, a2 = kv_put(b"a", b"one"), kv_put(b"b", b"two"), kv_put(b"a", b"three")
    assert a1[0] == PUT and a1[1] == 1
    assert m.apply(a1) == b"ok"
    assert m.apply(kv_get(b"a", b"#1")) == b"one"
    assert m.apply(b1) == b"ok" and m.apply(a2) == b"ok"
    get_a = kv_get(b"a", b"#2")
    assert get_a[0] == GET
    assert m.apply(get_a) == b"three"  # the last put of the key wins
    assert m.apply(kv_get(b"never", b"#3")) == b""
    assert m.value(b"b") == b"two" and m.value(b"never") is None
    assert m.applied == 6 and m.count == 0  # not folded into the digests yet
    order = m.take_order()
    assert order[0] == a1 and order[2:4] == [b1, a2] and len(order) == 6
    assert m.take_order() == [] and m.count == m.applied == 6  # taken, folded, counted
    # The digests are a node's (which folds each command as it applies it).
    node = BenchLog()
    for payload in order:
        assert node.apply(payload) == b""
    assert node.query(b"") == m.query(b"") and node.digest() == m.digest()
    assert node.value(b"a") is None and node.take_order() == []
    copy = BenchLog(store=True)
    copy.restore(m.snapshot())
    assert copy.data == m.data and copy.query(b"") == m.query(b"")
    assert copy.value(b"a") == b"three"
    with pytest.raises(ValueError, match="truncated"):
        copy.restore(m.snapshot()[:-1])
    assert copy.data == m.data  # a bad snapshot changes nothing


def test_a_payload_that_is_no_command_is_a_recorded_no_op() -> None:
    m = BenchLog(store=True)
    assert m.apply(b"") == b"" and m.apply(b"P") == b""
    assert m.data == {} and m.take_order() == [b"", b"P"] and m.count == 2


def test_keys_longer_than_a_length_byte_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 255"):
        kv_put(b"k" * 256, b"v")
    with pytest.raises(ValueError, match="at most 255"):
        kv_get(b"k" * 256, b"#")


def test_reads_of_written_keys_follow_the_clients_last_write() -> None:
    plain = OpStream(Workload(read_pct=50.0, seed=3), 7).take(40)
    written = OpStream(Workload(read_pct=50.0, seed=3, read_written=True), 7).take(40)
    # The same draws: the same kinds and writes; only the reads' keys change.
    assert [o.kind for o in plain] == [o.kind for o in written]
    assert [o for o in plain if o.kind == "write"] == [o for o in written if o.kind == "write"]
    last = None
    changed = 0
    for p, w in zip(plain, written, strict=True):
        if w.kind == "write":
            last = w.key
        else:
            assert w.key == (p.key if last is None else last)
            changed += w.key != p.key
    assert changed > 0


# -- the order check ---------------------------------------------------------------------


KEYS = [b"x", b"y", b"x", b"z"]


def _digests(*orders: list[int]) -> list[str]:
    """The order digests of machines that applied the puts of ``KEYS`` in these orders."""
    puts = [kv_put(k, b"v%d" % i) for i, k in enumerate(KEYS)]
    out = []
    for order in orders:
        m = BenchLog(store=True)
        for i in order:
            m.apply(puts[i])
        out.append(m.digest())
    return out


def test_identical_orders_pass_and_a_swap_is_caught() -> None:
    assert agree(4, [4, 4], _digests([0, 1, 2, 3], [0, 1, 2, 3])) == []
    digests = _digests([0, 1, 2, 3], [0, 2, 1, 3])
    assert agree(4, [4, 4], digests) == [
        "executed sequences diverge: replica 1 differs from replica 0 (state-machine digests"
        f" r0={digests[0]}, r1={digests[1]})"
    ]


def test_per_key_a_swap_of_other_keys_passes_and_of_one_key_is_caught() -> None:
    # 1 (y) and 2 (x) commute; 0 and 2 both write x.
    assert check_orders([[0, 1, 2, 3], [0, 2, 1, 3]], KEYS, per_key=True) == []
    problems = check_orders([[0, 1, 2, 3], [2, 1, 0, 3]], KEYS, per_key=True)
    assert len(problems) == 1 and "diverge per key" in problems[0] and "b'x'" in problems[0]


def test_a_missing_command_is_caught() -> None:
    assert agree(4, [4, 3], _digests([0, 1, 2, 3], [0, 1, 2]))[0] == (
        "replica 1 executed 3 commands, expected 4"
    )


@pytest.mark.parametrize(
    ("orders", "says"),
    [
        ([[0, 1, 2, 3], [0, 1, 1, 3]], "replica 1 executed 1 commands twice"),
        ([[0, 1, 2, 3], [0, 1, 2, None]], "replica 1 executed 1 commands that were never"),
    ],
)
def test_twice_or_unknown_commands_are_caught(orders: list[list[int | None]], says: str) -> None:
    for per_key in (False, True):
        problems = check_orders(orders, KEYS, per_key=per_key)
        assert any(says in p for p in problems), problems


# -- the byte counters and the NIC model --------------------------------------------------


@dataclass(frozen=True, slots=True)
class Copy:
    """The one message of the broadcasting double: the leader's batch."""

    commands: tuple[Command, ...]


class _Broadcast:
    """A leader that sends every batch to each of the N-1 others and answers READY
    at once; the others apply what they get. One copy per peer, nothing else."""

    def __init__(self, config: ClusterConfig, r: int, sm: Any, *_: Any) -> None:
        self.n, self.id, self.sm = config.replicas, r, sm
        self.queue: list[Command] = []

    def propose(self, command: Command, wait: Wait) -> None:
        self.queue.append(command)

    def step(self, message: Copy, now_ms: float) -> None:
        for c in message.commands:
            self.sm.apply(c.payload)

    def tick(self, now_ms: float) -> None:
        pass

    def ready(self) -> Ready:
        batch, self.queue = tuple(self.queue), []
        if not batch:
            return Ready()
        for c in batch:
            self.sm.apply(c.payload)
        peers = [ReplicaId(p) for p in range(self.n) if p != self.id]
        return Ready(
            messages=[(p, Copy(batch)) for p in peers],
            replies=[Reply(c.client_id, c.seq, ReplyKind.READY) for c in batch],
        )


class _Counting:
    """The codec, noting the size of every frame it encodes (with its prefix)."""

    def __init__(self, codec: MessageCodec) -> None:
        self.codec = codec
        self.sizes: list[int] = []

    def encode_batch(self, msgs: Any, packed: Any = None) -> bytes:
        frame = self.codec.encode_batch(msgs, packed)
        self.sizes.append(len(frame) + LENGTH_PREFIX_BYTES)
        return frame

    def decode_batch(self, data: bytes) -> Any:
        return self.codec.decode_batch(data)


@pytest.mark.parametrize("n", [3, 5])
def test_a_leader_sending_n_minus_1_copies_counts_n_minus_1_times_the_bytes(n: int) -> None:
    counting = _Counting(MessageCodec((Copy,)))
    spec = RoundSpec("double", replicas=n, clients_at="leader", payload_bytes=1024, **SMALL)
    res = run_with(spec, _Broadcast, counting)
    assert res.ok, res.problems
    leader, *others = res.bytes
    assert leader["peer_in"] == 0 and all(b["peer_out"] == 0 for b in others)
    assert {b["peer_in"] for b in others} == {leader["peer_out"] // (n - 1)}
    assert leader["peer_out"] == (n - 1) * others[0]["peer_in"]
    # Every frame counted with its length prefix, and each carries the 1 KB payloads.
    assert res.wire_bytes == sum(counting.sizes)
    assert others[0]["peer_in"] / res.measured > 1024
    # Clients: every request in at the leader and every answer out of it.
    assert leader["client_in"] / res.measured == pytest.approx(
        submit_bytes(1, 1, b"x" * 1024, b"u1-1"), abs=8
    )
    assert leader["client_out"] / res.measured == pytest.approx(reply_bytes(1, 1, None), abs=3)
    assert all(b["client_in"] == b["client_out"] == 0 for b in others)
    # The NIC model: the leader's egress sets the capacity.
    cap, r, direction = res.nic_bound()
    assert (r, direction) == (0, "egress")
    egress = (leader["peer_out"] + leader["client_out"]) / res.measured
    assert cap == pytest.approx(res.spec.nic_mbps * 1e6 / 8 / egress)


def test_nic_capacity_is_the_tightest_direction_of_any_replica() -> None:
    # 100 Mbit/s = 12.5 MB/s each way.
    assert nic_capacity([(1250.0, 100.0), (100.0, 100.0)], 100.0) == (10_000.0, 0, "egress")
    assert nic_capacity([(100.0, 100.0), (100.0, 2500.0)], 100.0) == (5_000.0, 1, "ingress")
    cap, _, _ = nic_capacity([(0.0, 0.0)], 100.0)
    assert cap == float("inf")
    with pytest.raises(ValueError, match="nic_mbps"):
        nic_capacity([(1.0, 1.0)], 0.0)


def test_the_capacity_with_a_nic_is_the_lower_of_cpu_and_link() -> None:
    res = run_rounds(RoundSpec("sdpaxos", replicas=3, payload_bytes=1024, **SMALL))
    assert res.ok, res.problems
    slow_link = run_rounds(
        RoundSpec("sdpaxos", replicas=3, payload_bytes=1024, nic_mbps=1.0, **SMALL)
    )
    assert slow_link.bytes == res.bytes  # the model does not change the run
    assert slow_link.nic_capacity_per_s == pytest.approx(res.nic_capacity_per_s / 445.0)
    assert slow_link.capacity_both_per_s == slow_link.nic_capacity_per_s
    assert slow_link.bound.startswith(("egress", "ingress"))
    fast_link = run_rounds(
        RoundSpec("sdpaxos", replicas=3, payload_bytes=1024, nic_mbps=1e9, **SMALL)
    )
    assert fast_link.capacity_both_per_s == fast_link.capacity_per_s
    assert fast_link.bound == f"cpu r{fast_link.busiest}"


def test_multipaxos_leader_sends_n_minus_1_copies_sdpaxos_spreads_them() -> None:
    """At 1 KB the leader's egress per command is about N-1 payloads; an SDPaxos
    replica's about (N-1)/N: the ratio the NIC model turns into capacity."""
    n = 5
    mp = run_rounds(
        RoundSpec("multipaxos", replicas=n, payload_bytes=1024, clients_at="leader", **SMALL)
    )
    sd = run_rounds(RoundSpec("sdpaxos", replicas=n, payload_bytes=1024, **SMALL))
    assert mp.ok and sd.ok, (mp.problems, sd.problems)
    leader_out = mp.bytes_per_op(clients=False)[0][0]
    assert (n - 1) * 1024 < leader_out < (n - 1) * 1100
    sd_out = [e for e, _ in sd.bytes_per_op(clients=False)]
    assert sum(sd_out) / n == pytest.approx((n - 1) / n * 1050, rel=0.15)
    assert leader_out / max(sd_out) > 0.7 * n


# -- EPaxos in the driver -------------------------------------------------------------------


@pytest.mark.parametrize("conflict_pct", [0.0, 5.0, 100.0])
def test_epaxos_runs_with_conflicts_and_verifies_per_key(conflict_pct: float) -> None:
    res = run_rounds(RoundSpec("epaxos", replicas=5, conflict_pct=conflict_pct, **SMALL))
    assert res.ok, res.problems
    assert res.commands_per_instance > 1.5  # instances counted from its own records
    assert all(c == res.proposed for c in res.executed)


def test_epaxos_reads_go_through_the_log_and_return_written_values() -> None:
    res = run_rounds(RoundSpec("epaxos", replicas=3, read_pct=50.0, read_written=True, **SMALL))
    assert res.ok, res.problems
    assert res.reads_ok == 0 and res.reads_via_log > 0
    # Each read's answer carries the 16 B value its client wrote before.
    out = sum(b["client_out"] for b in res.bytes) / res.measured
    assert out > reply_bytes(1, 1, None) + 4


def test_an_epaxos_replica_reordering_one_key_is_caught() -> None:
    """Two writes of the hot key swapped at one replica: per-key order differs."""
    spec = protocol("epaxos")
    hot = bytes((PUT, len(HOT_KEY))) + HOT_KEY

    def make(config: Any, r: int, sm: Any, rng: Any, observe: bool, records: Any) -> Any:
        from tests.bench.test_rounds import _Swapper

        machine = _Swapper(sm, 3, lambda p: p.startswith(hot)) if r == 1 else sm
        return spec.make_replica(config, r, machine, rng, False, None)

    res = run_with(RoundSpec("epaxos", replicas=3, conflict_pct=50.0, **SMALL), make, spec.codec)
    assert any("diverge per key: replica 1" in p for p in res.problems), res.problems


# -- reads: what they return is checked -------------------------------------------------------


class _Forgetful:
    """Records every command but stores no put: reads here miss completed writes."""

    def __init__(self, inner: BenchLog) -> None:
        self.inner = inner

    def apply(self, payload: bytes) -> bytes:
        if payload[0] == PUT:
            self.inner.order.append(payload)
            return b"ok"
        return self.inner.apply(payload)

    def snapshot(self) -> bytes:
        return self.inner.snapshot()

    def restore(self, data: bytes) -> None:
        self.inner.restore(data)


@pytest.mark.parametrize(
    ("name", "where"),
    [("sdpaxos", "local reads at the sequencer"), ("epaxos", "reads through the log")],
)
def test_a_read_that_misses_a_completed_write_is_caught(name: str, where: str) -> None:
    spec = protocol(name)
    base = RoundSpec(name, replicas=3, read_pct=50.0, read_written=True, **SMALL)
    good = run_rounds(base)
    assert good.ok, good.problems
    assert good.reads_checked > 500  # every read here is of the session's own key

    def make(config: Any, r: int, sm: Any, rng: Any, observe: bool, records: Any) -> Any:
        return spec.make_replica(config, r, _Forgetful(sm) if r == 0 else sm, rng, False, None)

    res = run_with(base, make, spec.codec)
    assert any("reads missed a completed write" in p for p in res.problems), (where, res.problems)
