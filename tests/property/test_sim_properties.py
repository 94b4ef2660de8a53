"""Property tests over whole simulated clusters.

Under random delays, jitter (with or without per-link FIFO), duplication and
loss, the safety checkers never fail; once the faults stop (the network heals)
and the run goes on, every proposed command executes on every replica.

Two ways of exploring: a Hypothesis-drawn configuration run under a seeded
chooser (cheap, many messages), and a :class:`HypothesisChooser` that lets
Hypothesis make every single network decision itself (it shrinks a failure to
a minimal fault schedule, since choice 0 is always benign).
"""

import random

from hypothesis import given
from hypothesis import strategies as st

from sdpaxos.sim import DelayProfile, NetworkConfig, SeededChooser, run_closed_loop


class HypothesisChooser:
    """A :class:`~sdpaxos.sim.chooser.Chooser` whose every choice is a Hypothesis draw."""

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    def below(self, n: int) -> int:
        return self._data.draw(st.integers(0, n - 1))


@st.composite
def profiles(draw: st.DrawFn) -> DelayProfile:
    n = draw(st.sampled_from([1, 3, 5]))
    rtt = [[0.0] * n for _ in range(n)]
    for i in range(n):
        rtt[i][i] = draw(st.floats(0.0, 2.0))
        for j in range(i + 1, n):
            rtt[i][j] = rtt[j][i] = float(draw(st.integers(1, 250)))
    return DelayProfile.from_lists("drawn", [f"R{i}" for i in range(n)], rtt)


networks = st.builds(
    NetworkConfig,
    jitter_ms_max=st.sampled_from([0.0, 5.0, 50.0, 200.0]),
    fifo=st.booleans(),
    drop_probability=st.sampled_from([0.0, 0.01, 0.1, 0.3]),
    duplicate_probability=st.sampled_from([0.0, 0.05, 0.3]),
)


@given(
    profile=profiles(),
    network=networks,
    sequencer_pick=st.integers(0, 4),
    commands=st.integers(1, 12),
    clients=st.integers(1, 3),
    tick_ms=st.sampled_from([1.0, 10.0, 25.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_checkers_hold_and_everything_executes_after_healing(
    profile: DelayProfile,
    network: NetworkConfig,
    sequencer_pick: int,
    commands: int,
    clients: int,
    tick_ms: float,
    seed: int,
) -> None:
    result = run_closed_loop(
        profile,
        chooser=SeededChooser(random.Random(seed)),
        seed=seed,
        sequencer=sequencer_pick % profile.size,
        commands_per_region=commands,
        clients_per_region=clients,
        network=network,
        tick_ms=tick_ms,
        drain_ms=120_000.0,
        catch=False,  # a violation raises with its message; Hypothesis shrinks it
    )
    assert result.ok, result.verdict
    assert all(s.count == commands for s in result.stats.values())


@given(
    data=st.data(),
    n=st.sampled_from([3, 5]),
    fifo=st.booleans(),
    drop=st.sampled_from([0.0, 0.2]),
    dup=st.sampled_from([0.0, 0.2]),
)
def test_hypothesis_chooses_every_fault(
    data: st.DataObject, n: int, fifo: bool, drop: float, dup: float
) -> None:
    rtt = [[0.5 if i == j else 20.0 + 10 * abs(i - j) for j in range(n)] for i in range(n)]
    profile = DelayProfile.from_lists("line", [f"R{i}" for i in range(n)], rtt)
    network = NetworkConfig(
        jitter_ms_max=30.0, fifo=fifo, drop_probability=drop, duplicate_probability=dup
    )
    result = run_closed_loop(
        profile,
        chooser=HypothesisChooser(data),
        seed=None,
        commands_per_region=2,
        network=network,
        catch=False,
    )
    assert result.ok, result.verdict
