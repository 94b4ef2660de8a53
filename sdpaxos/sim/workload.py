"""Closed-loop clients co-located with each replica, and latency statistics.

Each client has one command outstanding (``seq`` = 1, 2, 3, ...) and proposes
the next one when the previous is READY (after a think time drawn uniformly
from ``0 .. 2 * think_ms``, 0 by default: a fault sweep paces its clients so
that the load lasts as long as the faults do). Latency is measured *at the command
leader*, from ``propose`` to the READY reply, in virtual time: the client hop
(the profile's diagonal) is left out, as in ``docs/protocol.md`` section 5.6, but
it still spaces a client's commands (reply hop + request hop).

With ``retry_ms`` set a client re-proposes the same ``(client_id, seq)`` when
no READY came in that long (e.g. the replica crashed and restarted); the core's
exactly-once table makes the retry safe. Without it a client whose replica is
down stalls. With ``retry_elsewhere`` half of the retries go to another replica
(a client failing over), so the exactly-once table is exercised across command
leaders: the same command may then sit in two C-logs and must execute once.

Sessions. When the cluster's config sets ``session_lifetime_slots`` (sessions
expire, :mod:`sdpaxos.core.sessions`), a client first registers: it proposes
``registration(nonce)`` (a fresh nonce per registration) and waits for it to be
EXECUTED, takes the session id from the result, then numbers its commands 1, 2,
3, ... in that session. Its commands then wait for EXECUTED whatever ``wait``
says, so that it learns when its session expired (a ``SESSION_EXPIRED``
reply): it counts that command as answered (``sessions_expired``; it may or
may not have executed, and is never sent again) and registers anew. Retries
resend the same command (registrations included), so exactly-once is the
core's to keep. Without ``session_lifetime_slots`` clients use their own ids
(``1 ..``), as always.

Keys and reads. With ``keys`` each command writes one of them or, as often as
any one key, no named object (``key=None``), so the sequencer's history table
and its "unknown object" floor are both exercised. With ``reads`` a client also
asks for a linearizable read each time one of its writes is READY (at most one
read outstanding): at its own replica, at the current sequencer, or at a
random replica, of a key or of everything. Reads never hold up writes; their
results go to the checker (read freshness), and not-``ok`` answers (fall back
to the log) are only counted.

Conflict rate (``conflict_pct``, the EPaxos client's convention): each command
writes the one hot key :data:`HOT_KEY` with probability ``conflict_pct`` %,
otherwise a key of its own (unique per command). When the cluster orders only
interfering commands (``SimCluster.per_key_order``, EPaxos), a command's key
also travels in its payload (:func:`~sdpaxos.sim.statemachine.keyed_payload`),
for the per-key state machine.
"""

import math
from dataclasses import dataclass, field

from sdpaxos.core.ready import ReadResult, Reply, ReplyKind
from sdpaxos.core.sessions import REGISTRATION_SEQ, decode_session_id, registration
from sdpaxos.core.types import Command, Wait
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.statemachine import keyed_payload

#: Most clients per region (a named limit on the workload's size).
CLIENTS_PER_REGION_MAX = 1024
#: Most distinct keys a workload writes.
KEYS_MAX = 1024
#: A read unanswered this long (its replica crashed) no longer blocks the next one.
READ_TIMEOUT_MS = 5_000.0
#: The key a ``conflict_pct`` share of commands write.
HOT_KEY = b"hot"


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (``fraction`` in (0, 1])."""
    assert sorted_values and 0.0 < fraction <= 1.0
    rank = max(1, math.ceil(fraction * len(sorted_values) - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Commit latency of one region, in ms of virtual time."""

    count: int
    mean_ms: float
    p50_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float

    @classmethod
    def of(cls, latencies_us: list[int]) -> "LatencyStats":
        if not latencies_us:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan, nan)
        ms = sorted(v / 1000 for v in latencies_us)
        return cls(
            count=len(ms),
            mean_ms=sum(ms) / len(ms),
            p50_ms=percentile(ms, 0.50),
            p99_ms=percentile(ms, 0.99),
            min_ms=ms[0],
            max_ms=ms[-1],
        )


@dataclass(slots=True)
class _Client:
    client_id: int
    replica: int
    commands_max: int
    seq: int = 0
    proposed_us: int = -1
    done: int = 0
    #: The outstanding read (-1: none) and when it was issued.
    read_id: int = -1
    read_us: int = 0
    #: With registration: the command in flight (a registration or a command of
    #: ``session``), the session id (0 while registering), commands issued.
    outstanding: Command | None = None
    session: int = 0
    issued: int = 0


@dataclass(slots=True)
class ClosedLoopClients:
    """``clients_per_region`` closed-loop clients at each replica in ``regions``.

    ``commands_per_region`` is split between a region's clients as evenly as
    possible. ``payload_bytes`` pads each command's payload. ``keys``,
    ``conflict_pct``, ``reads`` and ``retry_elsewhere``: see the module
    docstring; their choices come from the cluster's chooser.
    """

    cluster: SimCluster
    commands_per_region: int
    clients_per_region: int = 1
    regions: list[int] | None = None
    payload_bytes: int = 16
    wait: Wait = Wait.READY
    retry_ms: float | None = None
    retry_elsewhere: bool = False
    keys: tuple[bytes, ...] = ()
    conflict_pct: int | None = None
    reads: bool = False
    think_ms: float = 0.0
    retries: int = 0
    retries_elsewhere: int = 0
    reads_issued: int = 0
    reads_answered: int = 0
    #: With registration: registrations proposed (retries not counted), and
    #: commands answered "session expired".
    registrations: int = 0
    sessions_expired: int = 0
    latencies_us: dict[int, list[int]] = field(default_factory=dict)
    _clients: dict[int, _Client] = field(default_factory=dict)
    _issued: int = 0
    _completed: int = 0
    #: Outstanding reads: read id -> client id.
    _reading: dict[int, int] = field(default_factory=dict)
    #: Clients register (the cluster's sessions expire); then replies and
    #: proposals are routed by nonce (registrations) and by session id.
    _register: bool = field(default=False, init=False)
    _by_nonce: dict[int, _Client] = field(default_factory=dict)
    _by_session: dict[int, _Client] = field(default_factory=dict)
    _nonces: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.clients_per_region <= CLIENTS_PER_REGION_MAX:
            raise ValueError(f"clients_per_region must be in 1..{CLIENTS_PER_REGION_MAX}")
        if self.retry_ms is not None and not self.retry_ms > 0:
            raise ValueError("retry_ms must be > 0")
        if self.commands_per_region < 0:
            raise ValueError("commands_per_region must be >= 0")
        if len(self.keys) > KEYS_MAX or any(not k for k in self.keys):
            raise ValueError(f"keys: at most {KEYS_MAX}, none empty (None means no key)")
        if self.conflict_pct is not None:
            if type(self.conflict_pct) is not int or not 0 <= self.conflict_pct <= 100:
                raise ValueError("conflict_pct must be an integer percentage in 0..100")
            if self.keys:
                raise ValueError("keys and conflict_pct exclude each other")
        if not self.think_ms >= 0:
            raise ValueError("think_ms must be >= 0")
        if self.retry_elsewhere and self.retry_ms is None:
            raise ValueError("retry_elsewhere needs retry_ms")
        regions = list(range(self.cluster.n)) if self.regions is None else list(self.regions)
        self.regions = regions
        for r in regions:
            self.latencies_us[r] = []
            base, extra = divmod(self.commands_per_region, self.clients_per_region)
            for k in range(self.clients_per_region):
                cid = r * self.clients_per_region + k + 1
                self._clients[cid] = _Client(cid, r, base + (1 if k < extra else 0))
        self._register = self.cluster.config.session_lifetime_slots is not None
        if self._register:
            self.cluster.reply_listeners.append(self._on_session_reply)
            self.cluster.propose_listeners.append(self._on_session_propose)
        else:
            self.cluster.reply_listeners.append(self._on_reply)
            self.cluster.propose_listeners.append(self._on_propose)
        self.cluster.read_listeners.append(self._on_read_result)

    @property
    def total(self) -> int:
        return sum(c.commands_max for c in self._clients.values())

    @property
    def completed(self) -> int:
        return self._completed

    def done(self) -> bool:
        return self._completed >= self.total

    def start(self) -> None:
        """Schedule every client's first command (after the request hop)."""
        for client in self._clients.values():
            hop_us = self.cluster.profile.client_rtt_us(client.replica) // 2
            if self._register:
                self._open_session(client, self.cluster.now_us + hop_us)
            else:
                self._next(client, self.cluster.now_us + hop_us)

    def _next(self, client: _Client, at_us: int) -> None:
        if self._register:
            self._next_in_session(client, at_us)
            return
        if client.seq >= client.commands_max:
            return
        client.seq += 1
        client.proposed_us = -1
        body = f"c{client.client_id}s{client.seq}".encode()
        command = self._command(client.client_id, client.seq, body)
        self._issued += 1
        self.cluster.propose_at(at_us, client.replica, command, self.wait)
        if self.retry_ms is not None:
            self._arm_retry(client, command, at_us)

    def _arm_retry(
        self, client: _Client, command: Command, from_us: int, wait: Wait | None = None
    ) -> None:
        assert self.retry_ms is not None
        at_us = from_us + round(self.retry_ms * 1000)
        wait = self.wait if wait is None else wait

        def retry() -> None:
            if self._register:
                if client.outstanding is not command:
                    return  # answered meanwhile
            elif client.seq != command.seq or client.done >= command.seq:
                return  # answered meanwhile
            self.retries += 1
            where = client.replica
            n = self.cluster.n
            if self.retry_elsewhere and n > 1 and self.cluster.chooser.below(2) == 1:
                where = (client.replica + 1 + self.cluster.chooser.below(n - 1)) % n
                self.retries_elsewhere += 1
            self.cluster.propose_at(self.cluster.now_us, where, command, wait)
            self._arm_retry(client, command, self.cluster.now_us, wait)

        self.cluster.call_at(at_us, retry, "client-retry")

    def _on_propose(self, replica: int, command: Command, now_us: int) -> None:
        client = self._clients.get(command.client_id)
        if (
            client is not None
            and command.seq == client.seq
            and client.proposed_us < 0
            and client.done < command.seq  # a retry queued before the answer came
        ):
            client.proposed_us = now_us

    def _on_reply(self, replica: int, reply: Reply, now_us: int) -> None:
        client = self._clients.get(reply.client_id)
        if client is None or reply.seq != client.seq or client.proposed_us < 0:
            return  # a later reply (EXECUTED after READY) or someone else's command
        if self.wait is Wait.EXECUTED and reply.kind is not ReplyKind.EXECUTED:
            return
        self.latencies_us[client.replica].append(now_us - client.proposed_us)
        client.proposed_us = -1
        client.done += 1
        self._completed += 1
        at_us = now_us + self.cluster.profile.client_rtt_us(client.replica)
        think_us = round(self.think_ms * 1000)
        if think_us > 0:
            at_us += self.cluster.chooser.below(2 * think_us + 1)
        self._next(client, at_us)
        if self.reads:
            self._read(client, at_us)

    # -- with registration (the cluster's sessions expire) ---------------------

    def _open_session(self, client: _Client, at_us: int) -> None:
        """Propose a registration for ``client`` (a fresh nonce) at ``at_us``."""
        if client.issued >= client.commands_max:
            return
        self._nonces += 1
        command = registration(self._nonces)
        self._by_nonce[self._nonces] = client
        client.outstanding, client.session, client.seq = command, 0, 0
        client.proposed_us = -1
        self.registrations += 1
        self.cluster.propose_at(at_us, client.replica, command, Wait.EXECUTED)
        if self.retry_ms is not None:
            self._arm_retry(client, command, at_us, Wait.EXECUTED)

    def _next_in_session(self, client: _Client, at_us: int) -> None:
        if client.issued >= client.commands_max:
            return
        client.issued += 1
        client.seq += 1
        client.proposed_us = -1
        body = f"c{client.client_id}n{client.issued}".encode()
        command = self._command(client.session, client.seq, body)
        client.outstanding = command
        self._issued += 1
        self.cluster.propose_at(at_us, client.replica, command, Wait.EXECUTED)
        if self.retry_ms is not None:
            self._arm_retry(client, command, at_us, Wait.EXECUTED)

    def _session_client(self, client_id: int, seq: int) -> _Client | None:
        routes = self._by_nonce if seq == REGISTRATION_SEQ else self._by_session
        return routes.get(client_id)

    def _on_session_propose(self, replica: int, command: Command, now_us: int) -> None:
        client = self._session_client(command.client_id, command.seq)
        if client is not None and command is client.outstanding and client.proposed_us < 0:
            client.proposed_us = now_us

    def _on_session_reply(self, replica: int, reply: Reply, now_us: int) -> None:
        client = self._session_client(reply.client_id, reply.seq)
        command = None if client is None else client.outstanding
        if (
            client is None
            or command is None
            or (command.client_id, command.seq) != (reply.client_id, reply.seq)
            or client.proposed_us < 0
            or reply.kind is ReplyKind.READY
        ):
            return  # not what this client waits for (any more)
        proposed_us, client.proposed_us = client.proposed_us, -1
        client.outstanding = None
        at_us = now_us + self.cluster.profile.client_rtt_us(client.replica)
        if reply.seq == REGISTRATION_SEQ:
            del self._by_nonce[reply.client_id]
            client.session = decode_session_id(reply.result)
            self._by_session[client.session] = client
            self._next(client, at_us)
            return
        client.done += 1
        self._completed += 1
        think_us = round(self.think_ms * 1000)
        if think_us > 0:
            at_us += self.cluster.chooser.below(2 * think_us + 1)
        if reply.kind is ReplyKind.SESSION_EXPIRED:
            self.sessions_expired += 1
            del self._by_session[client.session]
            self._open_session(client, at_us)
        else:
            self.latencies_us[client.replica].append(now_us - proposed_us)
            self._next(client, at_us)
        if self.reads:
            self._read(client, at_us)

    def _command(self, client_id: int, seq: int, body: bytes) -> Command:
        """The next command of a client: its key, and its payload padded."""
        if self.conflict_pct is None:
            key = self._key()
        elif self.cluster.chooser.below(100) < self.conflict_pct:
            key = HOT_KEY
        else:
            key = b"u" + body  # the body names client and command: unique
        if key is not None and self.cluster.per_key_order:
            body = keyed_payload(key, body)
        return Command(client_id, seq, body.ljust(self.payload_bytes, b"."), key)

    def _key(self) -> bytes | None:
        """A key to write or read: one of ``keys``, or (draw 0) no named object."""
        if not self.keys:
            return None
        k = self.cluster.chooser.below(len(self.keys) + 1)
        return self.keys[k - 1] if k else None

    def _read(self, client: _Client, at_us: int) -> None:
        """Issue a read for ``client`` unless one is still outstanding."""
        if client.read_id >= 0:
            if at_us - client.read_us < round(READ_TIMEOUT_MS * 1000):
                return
            self._reading.pop(client.read_id, None)  # its replica crashed: forget it
        chooser = self.cluster.chooser
        where = chooser.below(3)
        if where == 0:
            replica = client.replica
        elif where == 1:
            seq = self.cluster.believed_sequencer()
            replica = client.replica if seq is None else seq
        else:
            replica = chooser.below(self.cluster.n)
        read_id = self.cluster.new_read_id()
        client.read_id, client.read_us = read_id, at_us
        self._reading[read_id] = client.client_id
        self.reads_issued += 1
        self.cluster.read_at(at_us, replica, read_id, self._key())

    def _on_read_result(self, replica: int, result: ReadResult, now_us: int) -> None:
        cid = self._reading.pop(result.read_id, None)
        if cid is None:
            return
        self.reads_answered += 1
        client = self._clients[cid]
        if client.read_id == result.read_id:
            client.read_id = -1

    def stats(self) -> dict[int, LatencyStats]:
        return {r: LatencyStats.of(v) for r, v in self.latencies_us.items()}
