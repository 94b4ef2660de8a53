"""Regression tests for the 13 recovery bugs of the code review (issue 6).

Each test drives the explicit-delivery harness through the interleaving the
review describes (or the nearest one that reproduces on the code at the time of
writing, said so in the docstring) and asserts the SAFE outcome. On that code
every test here fails; each docstring records the failure observed then. They
are expected to pass once recovery is redesigned.

Messages are chosen by type, source and destination only (``where``), never by
their fields, so that the choreography survives a change of message contents.
A few tests also look at one internal counter of the core; that is said where
it happens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sdpaxos.core import messages as M
from sdpaxos.core.messages import Message
from tests.core.harness import Net, uniform_rtt_ms

Pred = Callable[[int, int, Message], bool]


# ----------------------------------------------------------------------- helpers


def _ids(x: int | Iterable[int] | None) -> set[int] | None:
    if x is None:
        return None
    return {x} if isinstance(x, int) else set(x)


def where(
    type_: type | tuple[type, ...] | None = None,
    src: int | Iterable[int] | None = None,
    dst: int | Iterable[int] | None = None,
) -> Pred:
    """A predicate on pending messages, by type, source and destination only."""
    types = None if type_ is None else (type_ if isinstance(type_, tuple) else (type_,))
    srcs, dsts = _ids(src), _ids(dst)

    def pred(s: int, d: int, m: Message) -> bool:
        return (
            (types is None or isinstance(m, types))
            and (srcs is None or s in srcs)
            and (dsts is None or d in dsts)
        )

    return pred


def anyof(*preds: Pred) -> Pred:
    return lambda s, d, m: any(p(s, d, m) for p in preds)


def noneof(*preds: Pred) -> Pred:
    return lambda s, d, m: not any(p(s, d, m) for p in preds)


def deliver_where(net: Net, pred: Pred) -> int:
    """Deliver every pending message ``pred`` accepts (and follow-ups it accepts)."""
    return net.deliver_where(pred)


def drop_where(net: Net, pred: Pred) -> int:
    return net.drop_where(pred)


def run_until(
    net: Net,
    done: Callable[[], bool],
    *,
    drop: Pred | None = None,
    hold: Pred | None = None,
    ticks: int = 600,
) -> None:
    """Tick everyone and deliver everything, except that messages ``drop`` accepts
    are lost and those ``hold`` accepts stay pending, until ``done()``."""
    never: Pred = lambda s, d, m: False  # noqa: E731
    lose, keep_back = drop or never, hold or never
    for _ in range(ticks):
        drop_where(net, lose)
        if done():
            return
        net.tick()
        deliver_where(net, noneof(lose, keep_back))
    drop_where(net, lose)
    assert done(), "the scenario did not reach its next stage"


def build(n: int, **config: object) -> Net:
    """Uniform round trips: proximity is ring order, so quorums are predictable."""
    return Net.build(n, sequencer=0, rtt_ms=uniform_rtt_ms(n), **config)


def live(net: Net) -> list[int]:
    return [r for r in range(len(net.replicas)) if r not in net.down]


def sequencer_among(net: Net, rs: Iterable[int]) -> int | None:
    return next((r for r in rs if net.replicas[r].is_sequencer), None)


def executed_logs(net: Net) -> dict[int, list[tuple[int, int]]]:
    return {r: net.executed_ids(r) for r in live(net)}


def assert_logs_agree(net: Net) -> None:
    """Every live replica's executed log is a prefix of every other's."""
    logs = executed_logs(net)
    for a, la in logs.items():
        for b, lb in logs.items():
            k = min(len(la), len(lb))
            assert la[:k] == lb[:k], f"executed logs diverge: R{a} {la} vs R{b} {lb}"


def assert_before_everywhere(net: Net, first: tuple[int, int], then: tuple[int, int]) -> None:
    """``first`` (READY before ``then`` was proposed) executes before it, everywhere."""
    for r, log in executed_logs(net).items():
        if then in log:
            assert first in log and log.index(first) < log.index(then), (
                f"R{r} executed {then} before READY {first}: {log}"
            )


def assert_executed_everywhere(net: Net, cmd: tuple[int, int]) -> None:
    for r, log in executed_logs(net).items():
        assert cmd in log, f"READY command {cmd} never executed at R{r}: {log}"


# ------------------------------------------------------------------------ bug 1


def test_bug01_rebuilt_range_slot_is_not_ready_after_two_acceptors() -> None:
    """A non-sequencer must not execute a slot of a new view's rebuilt range that
    only it and the new sequencer accepted (``_advance_safe_prefix`` skips the cap
    by the committed prefix when ``safe <= base``).

    As described (N = 5). R3's own O-commit broadcast is lost too, so that nobody
    but R3 learns slot 0 of view 1.

    HEAD: ``AssertionError: executed logs diverge: R0 [(1, 1), (3, 1)] vs R3
    [(3, 1)]`` (R3 also counts 1 invariant alarm, on view 2's NewView).
    """
    net = build(5)
    net.propose(0, 1, 1, b"A")  # R0 (sequencer) allocates O0 = R0 ...
    net.propose(3, 3, 1, b"X")  # ... and O1 = R3 once R3's C-accept reaches it
    # C-instances are chosen, but every O-accept is lost.
    deliver_where(net, noneof(where(M.OAccept)))
    drop_where(net, where(M.OAccept))
    net.crash(0)
    # R1 wins view 1 with R2 and R4 (R3 never hears the V-request): the N = 5
    # inference gives slot 0 to R3, the untraceable replica.
    run_until(
        net,
        lambda: net.replicas[1].is_sequencer,
        drop=where(M.VRequest, dst=3),
        hold=where((M.OAccept, M.NewView, M.Heartbeat)),
    )
    # The range reaches R3 only: R3 commits slot 0, answers READY and executes X.
    drop_where(net, where((M.OAccept, M.Heartbeat), src=1, dst=[0, 2, 4]))
    deliver_where(net, where(None, src=1, dst=3))
    assert net.ready_ids(3) == [(3, 1)] and net.executed_ids(3) == [(3, 1)]
    drop_where(net, where(M.OCommit, src=3))
    # R1 crashes before anyone else accepted the range; R0 comes back and view 2
    # is rebuilt from R0's log (R3 is not asked), with A at slot 0.
    net.crash(1)
    net.restart(0)
    others = [0, 2, 4]
    run_until(
        net,
        lambda: sequencer_among(net, others) is not None,
        drop=where(None, dst=3),
    )
    net.run(300)
    assert_logs_agree(net)
