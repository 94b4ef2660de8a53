"""A digest of everything a simulated run's replicas did: the behaviour recorder.

A refactor of the core that claims to change no behaviour must leave every
observable effect of every replica as it was: each message sent (who to whom,
what, when), each record persisted, each client reply and read result, each
trace event, each crash. :class:`RunDigest` hashes that stream in order, so two
runs of the same seed agree on the digest exactly when they agree on all of it.

``tests/sim/test_digest.py`` keeps the digests of the latency runs and of a
fixed set of fault-sweep seeds at N = 3, 5 and 7 in ``tests/sim/digests.json``.
A deliberate change of behaviour rewrites that file (``python -m
sdpaxos.sim.digest --write tests/sim/digests.json``) and says in its commit which
digests changed and why.
"""

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from typing import Any

from sdpaxos.core.ready import ReadResult, Reply
from sdpaxos.core.storage import Record
from sdpaxos.core.types import Command
from sdpaxos.profiles import PAPER3, PAPER5
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.faults import ALL_FAULTS
from sdpaxos.sim.run import run_closed_loop
from sdpaxos.sim.sweep import run_faulty


class RunDigest:
    """Hashes every observable effect of a cluster's replicas, in the order they happen."""

    def __init__(self, cluster: SimCluster) -> None:
        self._cluster = cluster
        self._hash = hashlib.sha256()
        #: Effects hashed so far (a digest of an empty run says nothing).
        self.effects = 0
        cluster.send_listeners.append(self._on_send)
        cluster.persist_listeners.append(self._on_persist)
        cluster.reply_listeners.append(self._on_reply)
        cluster.read_listeners.append(self._on_read)
        cluster.trace_listeners.append(self._on_trace)
        cluster.propose_listeners.append(self._on_propose)
        cluster.crash_listeners.append(self._on_crash)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def _feed(self, *parts: object) -> None:
        self.effects += 1
        self._hash.update(repr(_plain((self._cluster.now_us, *parts))).encode())
        self._hash.update(b"\n")

    def _on_send(self, src: int, dst: int, message: Any) -> None:
        self._feed("send", src, dst, message)

    def _on_persist(self, replica: int, records: Sequence[Record]) -> None:
        self._feed("persist", replica, tuple(records))

    def _on_reply(self, replica: int, reply: Reply, now_us: int) -> None:
        self._feed("reply", replica, reply)

    def _on_read(self, replica: int, result: ReadResult, now_us: int) -> None:
        self._feed("read", replica, result)

    def _on_trace(self, replica: int, event: str, fields: dict[str, Any]) -> None:
        self._feed("trace", replica, event, fields)

    def _on_propose(self, replica: int, command: Command, now_us: int) -> None:
        self._feed("propose", replica, command)

    def _on_crash(self, replica: int) -> None:
        self._feed("crash", replica)


def _plain(value: object) -> object:
    """``value`` with its meaning only: named tuples as tuples, dataclasses as
    (type name, fields), so that a refactor may name a tuple's fields."""
    if isinstance(value, Command | Reply):
        # Once frozen dataclasses, now named tuples for speed: kept in their
        # dataclass form so that the kept digests still compare behaviour.
        return (type(value).__name__, *(_plain(v) for v in value))
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return sorted(((_plain(k), _plain(v)) for k, v in value.items()), key=repr)
    if isinstance(value, set | frozenset):
        return sorted((_plain(v) for v in value), key=repr)
    if is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(_plain(getattr(value, f.name)) for f in fields(value)))
    if isinstance(value, Enum):
        return value.value
    return value


@dataclass(frozen=True, slots=True)
class DigestRun:
    """One run whose digest is kept: a name and how to run it with a cluster hook."""

    name: str
    run: Callable[[Callable[[SimCluster], None]], None]


def _latency(profile_name: str, seed: int) -> DigestRun:
    profile = {"paper3": PAPER3, "paper5": PAPER5}[profile_name]

    def run(hook: Callable[[SimCluster], None]) -> None:
        result = run_closed_loop(
            profile, seed=seed, commands_per_region=40, clients_per_region=2, cluster_hook=hook
        )
        if not result.ok:
            raise AssertionError(f"latency run {profile_name} seed {seed}: {result.verdict}")

    return DigestRun(f"latency-{profile_name}-seed{seed}", run)


def _faulty(replicas: int, seed: int) -> DigestRun:
    def run(hook: Callable[[SimCluster], None]) -> None:
        result = run_faulty(seed, replicas, ALL_FAULTS, cluster_hook=hook)
        if not result.ok:
            raise AssertionError(f"fault run N={replicas} seed {seed}: {result.verdict}")

    return DigestRun(f"faults-all-n{replicas}-seed{seed}", run)


#: The runs whose digests ``tests/sim/digests.json`` keeps.
DIGEST_RUNS: tuple[DigestRun, ...] = (
    *(_latency(profile, seed) for profile in ("paper3", "paper5") for seed in (1, 2)),
    *(_faulty(3, seed) for seed in range(1, 25)),
    *(_faulty(5, seed) for seed in range(1, 17)),
    *(_faulty(7, seed) for seed in range(1, 9)),
)


def digest_of(run: DigestRun) -> tuple[str, int]:
    """The digest of one run and how many effects it hashed."""
    digests: list[RunDigest] = []

    def hook(cluster: SimCluster) -> None:
        digests.append(RunDigest(cluster))

    run.run(hook)
    if len(digests) != 1:
        raise AssertionError(f"{run.name}: the run built {len(digests)} clusters, not one")
    return digests[0].hexdigest(), digests[0].effects


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sdpaxos.sim.digest",
        description="Digest every kept run (behaviour recorder for refactors of the core).",
    )
    parser.add_argument("--write", metavar="FILE", help="write the digests as JSON to FILE")
    args = parser.parse_args(argv)
    out: dict[str, dict[str, object]] = {}
    for k, run in enumerate(DIGEST_RUNS, 1):
        digest, effects = digest_of(run)
        out[run.name] = {"sha256": digest, "effects": effects}
        print(f"[{k}/{len(DIGEST_RUNS)}] {run.name}: {digest[:16]} ({effects} effects)")
    if args.write:
        with open(args.write, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=2, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
