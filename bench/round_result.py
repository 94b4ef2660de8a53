"""What a run of the round driver (:mod:`bench.rounds`) measured, and the checks of it.

The capacity model: CPU (one core per replica, the busiest sets it) and the
NIC (``nic_mbps`` each way per replica, the busiest link direction sets it);
the sizes of the clients' frames as the runtime sends them; and the checks
that the replicas agree (:func:`agree`: counts and state-machine digests,
:func:`check_orders`: each command once, and per key for EPaxos).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from bench.round_spec import RoundSpec
from sdpaxos.wire.framing import LENGTH_PREFIX_BYTES

_pack = msgpack.Packer(use_bin_type=True, autoreset=True).pack


#: Byte counters per replica, in the order :attr:`RoundResult.bytes` holds them.
BYTE_COUNTERS = ("peer_out", "peer_in", "client_in", "client_out")


@dataclass(slots=True)
class RoundResult:
    spec: RoundSpec
    #: Per replica, per timed call: CPU seconds in the measured window.
    seconds: list[dict[str, float]]
    #: Per replica, per :data:`BYTE_COUNTERS` name: bytes in the measured window.
    bytes: list[dict[str, int]] = field(default_factory=list)
    measured: int = 0
    rounds: int = 0
    measured_rounds: int = 0
    wall_s: float = 0.0
    proposed: int = 0
    executed: list[int] = field(default_factory=list)
    reads_ok: int = 0
    reads_via_log: int = 0
    #: Reads whose answer was checked against the session's last write.
    reads_checked: int = 0
    instances: int = 0
    instance_commands: int = 0
    frames: int = 0
    wire_bytes: int = 0
    #: Mean size of the writes' payloads (the nominal size unless a payload
    #: needed more room to stay unique).
    write_payload_bytes: float = 0.0
    leaders: list[Any] = field(default_factory=list)
    #: Rounds in which each replica took its turn.
    turns: list[int] = field(default_factory=list)
    #: The process that ran it (:class:`bench.rounds.ProtocolWorkers`).
    pid: int = 0
    #: Messages stepped and sent, over every replica.
    steps: int = 0
    messages_sent: int = 0
    #: Frames' bytes without their length prefixes (what the codec produced).
    codec_bytes: int = 0
    #: Records handed to the storages to persist, over every replica.
    persist_records: int = 0
    #: Per replica, the ticks it took.
    ticks: list[int] = field(default_factory=list)
    #: Per replica, its state machine's order digest.
    digests: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def cpu_s(self, replica: int) -> float:
        return sum(self.seconds[replica].values())

    @property
    def factors(self) -> list[int]:
        f = [1] * self.spec.replicas
        if self.spec.slow is not None:
            f[self.spec.slow[0]] = self.spec.slow[1]
        return f

    def cpu_s_per_1000(self) -> list[float]:
        m = self.measured or 1
        return [self.cpu_s(r) / m * 1000 for r in range(self.spec.replicas)]

    @property
    def busiest(self) -> int:
        per = self.cpu_s_per_1000()
        f = self.factors
        return max(range(len(per)), key=lambda r: per[r] * f[r])

    @property
    def capacity_per_s(self) -> float:
        """Operations/s with one core per replica (a straggler's core a fraction)."""
        b = self.busiest
        cost = self.cpu_s_per_1000()[b] * self.factors[b]
        return 1000 / cost if cost > 0 else float("nan")

    def bytes_per_op(self, clients: bool = True) -> list[tuple[float, float]]:
        """Per replica, (egress, ingress) bytes per completed operation."""
        m = self.measured or 1
        out = []
        for b in self.bytes:
            egress = b["peer_out"] + (b["client_out"] if clients else 0)
            ingress = b["peer_in"] + (b["client_in"] if clients else 0)
            out.append((egress / m, ingress / m))
        return out

    def nic_bound(self, clients: bool = True) -> tuple[float, int, str]:
        """(capacity ops/s, replica, "egress"/"ingress") with ``spec.nic_mbps`` each way."""
        return nic_capacity(self.bytes_per_op(clients), self.spec.nic_mbps)

    @property
    def nic_capacity_per_s(self) -> float:
        return self.nic_bound()[0]

    @property
    def bound(self) -> str:
        """What sets :attr:`capacity_both_per_s`: ``"cpu r0"``, ``"egress r0"``, ..."""
        cap, r, direction = self.nic_bound()
        if self.capacity_per_s <= cap:
            return f"cpu r{self.busiest}"
        return f"{direction} r{r}"

    @property
    def capacity_both_per_s(self) -> float:
        """Capacity with one core and a ``nic_mbps`` NIC per replica: the lower bound."""
        return min(self.capacity_per_s, self.nic_capacity_per_s)

    @property
    def commands_per_instance(self) -> float:
        return self.instance_commands / self.instances if self.instances else 0.0

    @property
    def ops_per_round(self) -> float:
        return self.measured / self.measured_rounds if self.measured_rounds else 0.0

    def to_json(self) -> dict[str, Any]:
        per = self.cpu_s_per_1000()
        nic, nic_r, nic_dir = self.nic_bound()
        peers, peers_r, peers_dir = self.nic_bound(clients=False)
        return {
            "completed": self.measured,
            "cpu_s_per_1000": [round(v, 6) for v in per],
            "busiest": self.busiest,
            "capacity_per_s": round(self.capacity_per_s, 1),
            "busiest_breakdown_s": {
                k: round(v, 6) for k, v in self.seconds[self.busiest].items() if v
            },
            "bytes_per_op": [[round(e, 1), round(i, 1)] for e, i in self.bytes_per_op()],
            "peer_bytes_per_op": [
                [round(e, 1), round(i, 1)] for e, i in self.bytes_per_op(clients=False)
            ],
            "nic_mbps": self.spec.nic_mbps,
            "nic_capacity_per_s": round(nic, 1),
            "nic_bound": f"{nic_dir} r{nic_r}",
            "nic_peers_only_capacity_per_s": round(peers, 1),
            "nic_peers_only_bound": f"{peers_dir} r{peers_r}",
            "capacity_both_per_s": round(self.capacity_both_per_s, 1),
            "bound": self.bound,
            "commands_per_instance": round(self.commands_per_instance, 2),
            "ops_per_round": round(self.ops_per_round, 2),
            "rounds": self.rounds,
            "reads_ok": self.reads_ok,
            "reads_via_log": self.reads_via_log,
            "reads_checked": self.reads_checked,
            "frames": self.frames,
            "wire_bytes": self.wire_bytes,
            "write_payload_bytes": round(self.write_payload_bytes, 1),
            "wall_s": round(self.wall_s, 3),
            "leaders_at_end": self.leaders,
            "pid": self.pid,
            "problems": self.problems,
        }


def nic_capacity(per_op: list[tuple[float, float]], nic_mbps: float) -> tuple[float, int, str]:
    """Operations/s that a ``nic_mbps`` link each way per replica carries.

    ``per_op``: per replica, (egress, ingress) bytes per operation. Each
    direction of each replica is a bound ``bandwidth / bytes per op``; the
    lowest one sets the capacity. Returns (capacity, replica, direction);
    ``inf`` if nothing was sent.
    """
    if not nic_mbps > 0:
        raise ValueError(f"nic_mbps must be > 0, got {nic_mbps}")
    bytes_per_s = nic_mbps * 1e6 / 8
    best = (math.inf, 0, "egress")
    for r, (egress, ingress) in enumerate(per_op):
        for direction, load in (("egress", egress), ("ingress", ingress)):
            if load > 0 and bytes_per_s / load < best[0]:
                best = (bytes_per_s / load, r, direction)
    return best


def submit_bytes(client_id: int, seq: int, payload: bytes, key: bytes | None) -> int:
    """A command as a client sends it to a node: one ``SUBMIT_MANY`` item
    (:mod:`sdpaxos.runtime.frames`), request id as large as its sequence number."""
    return len(_pack((client_id * 1_000_003 + seq, client_id, seq, payload, key, 0)))


def read_bytes(client_id: int, seq: int, key: bytes) -> int:
    """A ``READ`` frame for ``key`` with its length prefix."""
    return len(_pack((11, client_id * 1_000_003 + seq, key, None, False))) + LENGTH_PREFIX_BYTES


def reply_bytes(client_id: int, seq: int, value: bytes | None) -> int:
    """An answer as a node sends it: one ``REPLY_MANY`` item."""
    return len(_pack((client_id * 1_000_003 + seq, 0, value)))


def agree(
    expected: int,
    executed: Sequence[int],
    digests: Sequence[str],
    what: str = "executed sequences",
) -> list[str]:
    """Every replica executed ``expected`` commands, and their state machines'
    digests are equal (the order chain: the same order; an order-free sum for
    a protocol that orders interfering commands only: ``what`` names the
    command sets then). What failed, in words."""
    problems = [
        f"replica {r} executed {count} commands, expected {expected}"
        for r, count in enumerate(executed)
        if count != expected
    ]
    if len(set(digests)) > 1:
        r = next(r for r, d in enumerate(digests) if d != digests[0])
        problems.append(
            f"{what} diverge: replica {r} differs from replica 0 (state-machine"
            " digests " + ", ".join(f"r{i}={d}" for i, d in enumerate(digests)) + ")"
        )
    return problems


def check_orders(orders: list[list[int | None]], id_keys: list[bytes], per_key: bool) -> list[str]:
    """The executed orders (operation ids per replica), beyond :func:`agree`.

    Every replica executed each command at most once and nothing the driver
    never proposed (``None``); with ``per_key`` the subsequence of every key
    (``id_keys[i]`` is command ``i``'s key) is the same at every replica. The
    whole sequences are compared by the machines' order digests (:func:`agree`).
    """
    problems: list[str] = []
    for r, seq in enumerate(orders):
        unknown = sum(1 for i in seq if i is None)
        if unknown:
            problems.append(f"replica {r} executed {unknown} commands that were never proposed")
        distinct = len(set(seq))
        if distinct != len(seq):
            problems.append(f"replica {r} executed {len(seq) - distinct} commands twice")
    if problems or not orders or not per_key:
        return problems
    by_key = [_by_key(seq, id_keys) for seq in orders]
    first_keys = by_key[0]
    for r, keyed in enumerate(by_key[1:], start=1):
        if keyed != first_keys:
            bad = [k for k in first_keys if keyed.get(k) != first_keys[k]]
            problems.append(
                f"executed sequences diverge per key: replica {r} differs from replica 0"
                f" on {len(bad)} keys (first {bad[0]!r})"
                if bad
                else f"executed sequences diverge per key: replica {r} has other keys"
            )
    return problems


def _by_key(seq: list[int | None], id_keys: list[bytes]) -> dict[bytes, list[int]]:
    out: dict[bytes, list[int]] = {}
    for i in seq:
        if i is None:
            continue
        k = id_keys[i]
        lst = out.get(k)
        if lst is None:
            out[k] = [i]
        else:
            lst.append(i)
    return out
