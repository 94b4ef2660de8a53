import random

from sdpaxos.sim.chooser import PROBABILITY_SCALE, BenignChooser, SeededChooser, flip


class Recording:
    """Returns scripted choices and records every request."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = answers
        self.asked: list[int] = []

    def below(self, n: int) -> int:
        self.asked.append(n)
        return self.answers.pop(0)


def test_seeded_chooser_is_reproducible() -> None:
    a = SeededChooser(random.Random(7))
    b = SeededChooser(random.Random(7))
    assert [a.below(1000) for _ in range(50)] == [b.below(1000) for _ in range(50)]
    assert all(0 <= SeededChooser(random.Random(1)).below(3) < 3 for _ in range(100))


def test_choice_zero_is_benign() -> None:
    assert not flip(Recording([0]), 1.0)
    assert not flip(BenignChooser(), 0.5)
    assert flip(Recording([PROBABILITY_SCALE - 1]), 0.01)


def test_switched_off_faults_draw_nothing() -> None:
    rec = Recording([])
    assert not flip(rec, 0.0)
    assert rec.asked == []


def test_flip_probability_is_roughly_right() -> None:
    c = SeededChooser(random.Random(3))
    hits = sum(flip(c, 0.25) for _ in range(20_000))
    assert 4_500 < hits < 5_500
