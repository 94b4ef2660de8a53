"""Observing execution changes nothing but the observation.

A replica built with ``observe=False`` (as the runtime builds it) reports no
``Executed`` records, and its executor then runs a batch of commands through
the session table in one call, without per-command outcomes, unless a client
waits here for one of them. The same seeded run with and without observation
must give every client the same replies at the same times, every state machine
the same state and every replica the same counters: for SDPaxos and for the
baselines that share the session table (Multi-Paxos, Mencius).
"""

import dataclasses
import random
from typing import Any

import pytest

from sdpaxos.core.types import Wait
from sdpaxos.profiles import PAPER3
from sdpaxos.sim.chooser import SeededChooser
from sdpaxos.sim.cluster import SimCluster
from sdpaxos.sim.network import NetworkConfig
from sdpaxos.sim.workload import ClosedLoopClients

#: Drops make clients retry, duplicates deliver a message twice: both put
#: duplicate commands in the log, which the session table must not apply.
FAULTY = NetworkConfig(drop_probability=0.1, duplicate_probability=0.1)


def _run(
    protocol: str, observe: bool, limits: tuple[int, int] | None, wait: Wait
) -> dict[str, Any]:
    overrides = {"c_batch_max": 4}
    if limits is not None:
        overrides |= {"session_lifetime_slots": limits[0], "sessions_max": limits[1]}
    cluster = SimCluster(
        PAPER3,
        SeededChooser(random.Random(7)),
        network=FAULTY,
        protocol=protocol,
        observe=observe,
        config_overrides=overrides,
    )
    replies: list[tuple[int, int, Any]] = []
    cluster.reply_listeners.append(lambda r, reply, now_us: replies.append((now_us, r, reply)))
    clients = ClosedLoopClients(cluster, 12, clients_per_region=2, wait=wait, retry_ms=300.0)
    clients.start()
    cluster.run_until(30_000_000)
    assert clients.done()
    executed = [cluster.checker.executed_count(r) for r in range(PAPER3.size)]
    return {
        "replies": replies,
        "states": [sm.snapshot() for sm in cluster.state_machines if sm is not None],
        "stats": [dataclasses.asdict(r.stats) for r in cluster.replicas if r is not None],
        "retries": clients.retries,
        "expired": clients.sessions_expired,
        "executed": executed,
    }


@pytest.mark.parametrize("wait", [Wait.READY, Wait.EXECUTED], ids=lambda w: w.name)
@pytest.mark.parametrize("limits", [None, (3, 3)], ids=["no-expiry", "expiring"])
@pytest.mark.parametrize("protocol", ["sdpaxos", "multipaxos", "mencius"])
def test_a_run_without_observation_is_the_same_run(
    protocol: str, limits: tuple[int, int] | None, wait: Wait
) -> None:
    seen = _run(protocol, True, limits, wait)
    unseen = _run(protocol, False, limits, wait)
    assert seen["retries"] > 0  # the faults did make duplicates
    assert all(seen.pop("executed"))  # observed: every replica's records came
    assert not any(unseen.pop("executed"))  # not observed: none
    assert unseen == seen
