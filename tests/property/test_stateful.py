"""Hypothesis explores fault schedules step by step over a real-core ``SimCluster``.

Rules: propose (writes of a key or of no key), retry an unanswered command at
another replica (same ``(client_id, seq)``), read (a key or everything, at any
replica), hand the sequencer role over, deliver the next event, drop or
duplicate an in-flight packet, let time pass (ticks), crash, restart, pause,
resume, partition (symmetric, one-way, isolate-one, majority/minority) and
heal. Clocks drift (up to the core's bound) in some examples. Every read
answered ``ok`` is checked for freshness as it is handed out. Preconditions keep at most
F = (N-1)/2 replicas crashed, so a majority can always be brought back. After
every step the safety checkers hold (``@invariant``; the incremental checks
also raise inside the step that breaks them), and the core raised no invariant
alarm. At the end (``teardown``) every fault is healed, every replica restarted
and resumed, and the run goes on until every proposed command whose leader did
not crash before it was READY has executed on every replica (liveness).

Deterministic under the ``ci`` profile (``derandomize=True``); steps per example
are bounded by ``stateful_step_count`` below.
"""

import os
import random

from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from sdpaxos.core import Command
from sdpaxos.core.ready import Reply
from sdpaxos.profiles import DelayProfile
from sdpaxos.sim import NetworkConfig, SeededChooser, SimCluster

#: Virtual time the final liveness check may take after healing.
DRAIN_MS = 60_000
STEP_COUNT = 40
KEYS = st.sampled_from([None, b"k0", b"k1"])


def line_profile(n: int) -> DelayProfile:
    """Replicas on a line, 20 ms apart (round trips 20, 40, ... ms)."""
    rtt = [[0.5 if i == j else 20.0 * abs(i - j) for j in range(n)] for i in range(n)]
    return DelayProfile.from_lists("line", [f"R{i}" for i in range(n)], rtt)


class ClusterMachine(RuleBasedStateMachine):
    cluster: SimCluster

    def __init__(self) -> None:
        super().__init__()
        self.started = False
        #: Client sessions whose last command was answered: client id -> its next seq.
        #: A session has at most one command outstanding (the core's exactly-once
        #: contract): a command retried elsewhere may overtake an earlier one of
        #: the same client, which would then be taken for a duplicate.
        self.idle_clients: dict[int, int] = {}
        self.clients = 0
        #: Proposed commands not yet answered (candidates for a retry elsewhere).
        self.unanswered: dict[tuple[int, int], Command] = {}

    @initialize(
        n=st.sampled_from([3, 5]),
        seed=st.integers(0, 2**16),
        sequencer=st.integers(0, 4),
        drift_ppm=st.sampled_from([0, 1000]),
    )
    def setup(self, n: int, seed: int, sequencer: int, drift_ppm: int) -> None:
        self.cluster = SimCluster(
            line_profile(n),
            SeededChooser(random.Random(seed)),
            sequencer=sequencer % n,
            network=NetworkConfig(),
            processing_us=0,
            clock_drift_ppm=drift_ppm,
        )
        self.cluster.reply_listeners.append(self._answered)
        self.started = True

    def _answered(self, replica: int, reply: Reply, now_us: int) -> None:
        if self.unanswered.pop((reply.client_id, reply.seq), None) is not None:
            self.idle_clients[reply.client_id] = reply.seq + 1

    # -- helpers ----------------------------------------------------------------

    @property
    def n(self) -> int:
        return self.cluster.n

    def down(self) -> list[int]:
        return [r for r in range(self.n) if not self.cluster.alive(r)]

    # -- client and network -------------------------------------------------------

    @rule(replica=st.integers(0, 4), commands=st.integers(1, 3), key=KEYS)
    def propose(self, replica: int, commands: int, key: bytes | None) -> None:
        r = replica % self.n
        for _ in range(commands):
            if self.idle_clients:
                cid = min(self.idle_clients)
                seq = self.idle_clients.pop(cid)
            else:
                self.clients += 1
                cid, seq = self.clients, 1
            command = Command(cid, seq, f"c{cid}s{seq}".encode(), key=key)
            self.unanswered[(command.client_id, command.seq)] = command
            self.cluster.propose_at(self.cluster.now_us, r, command)

    @precondition(lambda self: self.unanswered)
    @rule(pick=st.integers(0, 1000), replica=st.integers(0, 4))
    def retry_elsewhere(self, pick: int, replica: int) -> None:
        """A client that got no answer tries the same command at another replica."""
        commands = sorted(self.unanswered.items())
        _, command = commands[pick % len(commands)]
        self.cluster.propose_at(self.cluster.now_us, replica % self.n, command)

    @rule(replica=st.integers(0, 4), key=KEYS)
    def read(self, replica: int, key: bytes | None) -> None:
        r = replica % self.n
        self.cluster.read_at(self.cluster.now_us, r, self.cluster.new_read_id(), key)

    @rule(offset=st.integers(1, 4))
    def hand_over(self, offset: int) -> None:
        seq = self.cluster.believed_sequencer()
        if seq is not None:
            self.cluster.transfer_sequencer(seq, (seq + offset) % self.n)

    @rule(events=st.integers(1, 20))
    def deliver_next(self, events: int) -> None:
        for _ in range(events):
            self.cluster.step()

    @rule(ms=st.sampled_from([1, 10, 50, 200, 700]))
    def tick(self, ms: int) -> None:
        self.cluster.run_for(ms * 1000)

    @precondition(lambda self: self.cluster.in_flight())
    @rule(pick=st.integers(0, 1000))
    def drop(self, pick: int) -> None:
        packets = self.cluster.in_flight()
        self.cluster.drop_in_flight(packets[pick % len(packets)][1])

    @precondition(lambda self: self.cluster.in_flight())
    @rule(pick=st.integers(0, 1000))
    def duplicate(self, pick: int) -> None:
        packets = self.cluster.in_flight()
        self.cluster.duplicate_in_flight(packets[pick % len(packets)][1])

    # -- nodes ----------------------------------------------------------------------

    @precondition(lambda self: len(self.down()) < (self.n - 1) // 2)
    @rule(replica=st.integers(0, 4))
    def crash(self, replica: int) -> None:
        self.cluster.crash(replica % self.n)

    @precondition(lambda self: self.down())
    @rule(pick=st.integers(0, 4))
    def restart(self, pick: int) -> None:
        down = self.down()
        self.cluster.restart(down[pick % len(down)])

    @rule(replica=st.integers(0, 4))
    def pause(self, replica: int) -> None:
        self.cluster.pause(replica % self.n)

    @precondition(lambda self: any(self.cluster.paused))
    @rule()
    def resume_all(self) -> None:
        for r in range(self.n):
            self.cluster.resume(r)

    # -- partitions -------------------------------------------------------------------

    @rule(a=st.integers(0, 4), b=st.integers(1, 4), one_way=st.booleans())
    def cut(self, a: int, b: int, one_way: bool) -> None:
        src = a % self.n
        dst = (src + 1 + b % (self.n - 1)) % self.n  # never src
        self.cluster.network.block(src, dst, both_ways=not one_way)

    @rule(replica=st.integers(0, 4), direction=st.sampled_from(["both", "in", "out"]))
    def isolate(self, replica: int, direction: str) -> None:
        r = replica % self.n
        if direction == "both":
            self.cluster.network.isolate(r)
        else:
            self.cluster.network.isolate_one_way(r, inbound=direction == "in")

    @rule(members=st.sets(st.integers(0, 4), min_size=1, max_size=2))
    def split(self, members: set[int]) -> None:
        group = sorted({m % self.n for m in members})[: (self.n - 1) // 2]
        self.cluster.network.split(group)

    @rule()
    def heal(self) -> None:
        self.cluster.network.heal()

    # -- checks -----------------------------------------------------------------------

    @invariant()
    def safe(self) -> None:
        if not self.started:
            return
        self.cluster.checker.check_safety()
        assert self.cluster.core_counters().get("invariant_alarms", 0) == 0

    def teardown(self) -> None:
        if not self.started:
            return
        cluster = self.cluster
        cluster.network.heal()
        for r in range(self.n):
            cluster.resume(r)
            cluster.restart(r)
        end_us = cluster.now_us + DRAIN_MS * 1000
        while cluster.now_us < end_us and not cluster.checker.executed_everywhere(
            cluster.live_replicas()
        ):
            cluster.run_for(100_000)
        cluster.checker.check_liveness(cluster.live_replicas())
        cluster.checker.check_safety()


#: Shrinking a failing run of this machine can take Hypothesis its full five
#: minutes; CI reports the unshrunk falsifying steps (still exact and replayable
#: with the printed blob) and leaves shrinking to the ``dev``/``nightly`` profiles.
_PHASES = (
    (Phase.explicit, Phase.reuse, Phase.generate)
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci"
    else tuple(Phase)
)

ClusterMachine.TestCase.settings = settings(
    settings.default, stateful_step_count=STEP_COUNT, deadline=None, phases=_PHASES
)
TestClusterMachine = ClusterMachine.TestCase
