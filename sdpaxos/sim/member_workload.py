"""Closed-loop clients of a :class:`~sdpaxos.sim.member_cluster.MemberCluster`.

Why not :class:`~sdpaxos.sim.workload.ClosedLoopClients`: those are tied to a
replica per region for the cluster's life. Here the members change, so a client
asks the cluster's directory (the newest membership a live node knows, what a
real client learns from any node) for a member, and moves on when:

* the command was READY (or EXECUTED) at the node it was sent to;
* the node answered ``NOT_MEMBER`` (it was removed, or is a learner, and could
  not carry the command into the next epoch: not applied through it), or
  refused to take it at all: the client retries at another member soon;
* no answer came in ``retry_ms`` (the node crashed or is cut off): it retries
  at another member.

A retry resends the same ``(client_id, seq)``: the session table makes it
exactly-once, which the checker verifies. With ``reads`` (the default) each
READY write is followed by a linearizable read of a key (or of everything) at
the writer's node or another member, judged for freshness by the checker; a
not-``ok`` answer (fall back to the log) is only counted.

:class:`ChangeClient` is the operator: one membership command at a time, sent
and retried the same way until its verdict (an EXECUTED reply) comes back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sdpaxos.core.membership import MembershipOp, decode_result
from sdpaxos.core.ready import Reply, ReplyKind
from sdpaxos.core.types import Command, Wait
from sdpaxos.sim.member_cluster import MemberCluster

__all__ = ["ChangeClient", "MemberClients"]

#: Most clients one workload runs (a named limit on its size).
CLIENTS_MAX = 256
#: A refused or NOT_MEMBER command is sent to another member this much later, in us.
REFUSED_RETRY_US = 20_000
#: Client ids of the operator's change sessions.
CHANGE_CLIENT_ID = 900_000


@dataclass(slots=True)
class _Client:
    client_id: int
    seq: int = 0
    node: int = -1
    outstanding: Command | None = None
    sent_us: int = 0
    attempt: int = 0


class MemberClients:
    """``clients`` closed-loop clients, ``commands`` commands each (keys from ``keys``)."""

    def __init__(
        self,
        cluster: MemberCluster,
        clients: int,
        commands: int,
        *,
        retry_ms: float = 1_500.0,
        keys: tuple[bytes, ...] = (b"k0", b"k1", b"k2"),
        think_ms: float = 0.0,
        reads: bool = True,
    ) -> None:
        if not 1 <= clients <= CLIENTS_MAX:
            raise ValueError(f"clients must be in 1..{CLIENTS_MAX}, got {clients}")
        self.cluster = cluster
        self.commands = commands
        self.retry_us = round(retry_ms * 1000)
        self.keys = keys
        self.think_ms = think_ms
        self.reads = reads
        self.clients = {i: _Client(i) for i in range(1, clients + 1)}
        self.completed = 0
        self.total = clients * commands
        self.retries = 0
        self.not_member = 0
        cluster.reply_listeners.append(self._on_reply)
        cluster.refused_listeners.append(self._on_refused)

    def start(self) -> None:
        for client in self.clients.values():
            self._next(client)

    def done(self) -> bool:
        return self.completed >= self.total

    def _pick(self, avoid: int) -> int:
        ids = list(self.cluster.newest().ids)
        others = [i for i in ids if i != avoid] or ids
        return others[self.cluster.chooser.below(len(others))]

    def _next(self, client: _Client) -> None:
        if client.seq >= self.commands:
            return
        client.seq += 1
        draw = self.cluster.chooser.below(len(self.keys) + 1)
        key = self.keys[draw] if draw < len(self.keys) else None
        payload = b"c%d.%d" % (client.client_id, client.seq)
        client.outstanding = Command(client.client_id, client.seq, payload, key)
        client.node = self._pick(-1)
        self._send(client)

    def _send(self, client: _Client) -> None:
        command = client.outstanding
        if command is None:
            return
        client.attempt += 1
        client.sent_us = self.cluster.now_us
        self.cluster.submit(client.node, command, Wait.READY)
        attempt = client.attempt
        self.cluster.call_after(self.retry_us, lambda: self._timeout(client, attempt))

    def _timeout(self, client: _Client, attempt: int) -> None:
        if client.outstanding is not None and client.attempt == attempt:
            self._retry(client, now=True)

    def _retry(self, client: _Client, *, now: bool) -> None:
        self.retries += 1
        client.node = self._pick(client.node)
        if now:
            self._send(client)
            return
        attempt = client.attempt
        self.cluster.call_after(
            REFUSED_RETRY_US,
            lambda: self._send(client) if client.attempt == attempt else None,
        )

    def _read(self, client: _Client, seq: int) -> None:
        """Read what was just written (or everything), at the writer's node or
        another member: right after a write, and often right across a switch."""
        draw = self.cluster.chooser.below(len(self.keys) + 1)
        key = self.keys[draw] if draw < len(self.keys) else None
        node = client.node if self.cluster.chooser.below(2) == 0 else self._pick(-1)
        self.cluster.read(node, key)

    def _on_refused(self, node: int, command: Command) -> None:
        client = self.clients.get(command.client_id)
        if client is None or client.outstanding != command or client.node != node:
            return
        self.not_member += 1
        self._retry(client, now=False)

    def _on_reply(self, node: int, reply: Reply, now_us: int) -> None:
        client = self.clients.get(reply.client_id)
        if client is None or client.outstanding is None or client.outstanding.seq != reply.seq:
            return
        if reply.kind is ReplyKind.NOT_MEMBER:
            if node == client.node:
                self.not_member += 1
                self._retry(client, now=False)
            return
        if reply.kind not in (ReplyKind.READY, ReplyKind.EXECUTED):
            return
        client.outstanding = None
        client.attempt += 1  # any pending timeout is stale now
        self.completed += 1
        if self.reads:
            self._read(client, reply.seq)
        think_us = round(self.think_ms * 1000)
        delay_us = self.cluster.chooser.below(2 * think_us + 1) if think_us > 0 else 0
        self.cluster.call_after(delay_us, lambda: self._next(client))


#: ``(op, applied, message)`` once a change's verdict is in.
Verdict = Callable[[MembershipOp, bool, str], None]


class ChangeClient:
    """The operator's session: one membership command at a time, retried at
    members until its verdict comes back."""

    def __init__(
        self,
        cluster: MemberCluster,
        *,
        retry_ms: float = 1_500.0,
        client_id: int = CHANGE_CLIENT_ID,
    ) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.retry_us = round(retry_ms * 1000)
        self.seq = 0
        self.op: MembershipOp | None = None
        self.node = -1
        self.attempt = 0
        self.on_verdict: Verdict | None = None
        self.proposed_at: list[int] = []
        cluster.reply_listeners.append(self._on_reply)
        cluster.refused_listeners.append(self._on_refused)

    @property
    def busy(self) -> bool:
        return self.op is not None

    def propose(self, op: MembershipOp, node: int, on_verdict: Verdict) -> None:
        if self.op is not None:
            raise RuntimeError("one change at a time")
        self.seq += 1
        self.op = op
        self.node = node
        self.on_verdict = on_verdict
        self._send()

    def _send(self) -> None:
        op = self.op
        if op is None:
            return
        self.attempt += 1
        self.proposed_at.append(self.node)
        self.cluster.submit_change(self.node, op, self.client_id, self.seq)
        attempt = self.attempt
        self.cluster.call_after(self.retry_us, lambda: self._timeout(attempt))

    def _timeout(self, attempt: int) -> None:
        if self.op is not None and attempt == self.attempt:
            self._elsewhere(now=True)

    def _elsewhere(self, *, now: bool) -> None:
        ids = [i for i in self.cluster.live_members() if i != self.node]
        ids = ids or list(self.cluster.newest().ids)
        self.node = ids[self.cluster.chooser.below(len(ids))]
        if now:
            self._send()
            return
        attempt = self.attempt
        self.cluster.call_after(
            REFUSED_RETRY_US, lambda: self._send() if attempt == self.attempt else None
        )

    def _on_refused(self, node: int, command: Command) -> None:
        if command.client_id == self.client_id and command.seq == self.seq and node == self.node:
            self._elsewhere(now=False)

    def _on_reply(self, node: int, reply: Reply, now_us: int) -> None:
        if reply.client_id != self.client_id or reply.seq != self.seq or self.op is None:
            return
        if reply.kind is ReplyKind.NOT_MEMBER:
            if node == self.node:
                self._elsewhere(now=False)
            return
        if reply.kind is not ReplyKind.EXECUTED:
            return
        op, done = self.op, self.on_verdict
        self.op, self.on_verdict = None, None
        self.attempt += 1
        applied, message = decode_result(reply.result)
        if done is not None:
            done(op, applied, message)
