"""Every nondeterministic decision of a simulation, behind one small interface.

Why an interface and not a bare ``random.Random``: the same simulator must run
under a seed (large sweeps, ``python -m sdpaxos.sim --seed N``) and under
Hypothesis (which shrinks a failing run to a minimal fault schedule). Both only
need :meth:`Chooser.below`. Choice ``0`` is always the benign option (no
jitter, no drop, no duplicate, no fault), so a Hypothesis chooser that shrinks
towards ``0`` shrinks towards a fault-free run rather than towards a
meaningless smaller seed.

The Hypothesis adapter lives in the tests (the sim does not import Hypothesis)::

    class HypothesisChooser:
        def __init__(self, data): self._data = data
        def below(self, n): return self._data.draw(st.integers(0, n - 1))
"""

import random
from typing import Protocol

#: Resolution of probabilities: one draw in ``PROBABILITY_SCALE`` (parts per million).
PROBABILITY_SCALE = 1_000_000


class Chooser(Protocol):
    """The single source of nondeterminism of one simulation run."""

    def below(self, n: int) -> int:
        """An integer in ``0 .. n-1``; ``0`` is the benign choice. ``n >= 1``."""
        ...


class SeededChooser:
    """A :class:`Chooser` driven by one ``random.Random``: a run is its seed."""

    __slots__ = ("_rng",)

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def below(self, n: int) -> int:
        assert n >= 1, n
        return self._rng.randrange(n)


class BenignChooser:
    """Always choose ``0``: no jitter, no faults. Handy for exact latency tests."""

    __slots__ = ()

    def below(self, n: int) -> int:
        assert n >= 1, n
        return 0


def flip(chooser: Chooser, probability: float) -> bool:
    """True with ``probability``; draw ``0`` (benign) is always False.

    A zero probability draws nothing, so a fault that is switched off consumes
    no choices (and Hypothesis sees no irrelevant draws).
    """
    if probability <= 0.0:
        return False
    assert probability <= 1.0, probability
    threshold = PROBABILITY_SCALE - round(probability * PROBABILITY_SCALE)
    return chooser.below(PROBABILITY_SCALE) >= max(threshold, 1)


def derive_rng(chooser: Chooser) -> random.Random:
    """A ``random.Random`` for a replica, seeded from the run's chooser.

    The core takes an injected ``random.Random``; deriving it from the chooser
    keeps the whole run a function of the one seeded source.
    """
    return random.Random(chooser.below(1 << 62))
