import pytest

from sdpaxos.sim.scheduler import Scheduler, SchedulerFull


def test_events_come_out_by_time_then_by_scheduling_order() -> None:
    s: Scheduler[str] = Scheduler()
    s.at(20, "c")
    s.at(10, "a")
    s.at(20, "d")
    s.at(10, "b")
    out = [s.pop() for _ in range(4)]
    assert out == [(10, "a"), (10, "b"), (20, "c"), (20, "d")]
    assert s.now_us == 20 and len(s) == 0


def test_events_need_not_be_comparable() -> None:
    s: Scheduler[object] = Scheduler()
    a, b = object(), object()
    s.at(5, a)
    s.at(5, b)  # a tuple compare would fail on object() < object()
    assert s.pop()[1] is a and s.pop()[1] is b


def test_after_is_relative_to_now_and_the_past_is_refused() -> None:
    s: Scheduler[str] = Scheduler()
    s.at(100, "x")
    s.pop()
    s.after(5, "y")
    assert s.peek_time_us() == 105
    with pytest.raises(ValueError, match="before now"):
        s.at(99, "z")


def test_pending_events_are_bounded() -> None:
    s: Scheduler[int] = Scheduler(events_pending_max=2)
    s.at(1, 1)
    s.at(2, 2)
    with pytest.raises(SchedulerFull):
        s.at(3, 3)


def test_advance_to_never_skips_an_event() -> None:
    s: Scheduler[int] = Scheduler()
    s.advance_to(50)
    assert s.now_us == 50
    s.at(60, 1)
    with pytest.raises(AssertionError):
        s.advance_to(70)
