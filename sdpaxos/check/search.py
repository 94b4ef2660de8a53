"""The Wing-Gong-Lowe search for one (sub-)history. Pure: no I/O, no clock of its own.

The algorithm (Wing & Gong 1993, with Lowe's memoisation, "Testing for
linearizability", 2017; the layout follows Porcupine):

* Every operation becomes a *call* entry at its invocation time and, if it
  completed, a *return* entry at its completion time. The entries are sorted by
  time (calls before returns on ties: intervals are closed) into a doubly
  linked list.
* The *candidates* in a configuration are the call entries before the first
  return entry still in the list: the operations that may be linearized next
  without any operation that already returned being left behind.
* Linearizing an operation *lifts* its call and return entries out of the
  list; backtracking puts them back (dancing links, so both are O(1)).
* A configuration is (set of linearized operations, model state). The set is
  an int bitset. Every configuration explored is remembered; meeting it again
  means it already failed (had it succeeded, the search would have stopped).
  The memo has a size cap: past it, new configurations are no longer
  remembered (the search stays correct, only slower, and the deadline bounds it).

Reductions on top of plain WGL, each of which keeps the verdict exact:

* *Read-only commit.* If a completed candidate is read-only (the model's
  :meth:`~sdpaxos.check.Model.read_only`: it never changes any state) and is
  legal in the current state, it is linearized at once and no alternative is
  tried: any linearization from here can be rearranged to do that read first,
  since it changes nothing for the operations it jumps over and every
  operation that returned before its invocation is already placed. (An
  operation that merely leaves *this* state unchanged does not qualify: a
  delete of an absent key would change the state at its later position.)
* *Useless open operations.* An open operation (one that may or may not have
  happened) that would leave the current state unchanged is not tried here:
  not doing it is at least as good, since it stays available for later.
* *Interchangeable open operations.* Open operations with equal inputs are
  tried only in invocation order (the earlier one first): which of two equal
  in-doubt writes took effect cannot be told apart, so the search need not
  try both.
* Open operations are never *required*: the search succeeds as soon as every
  completed operation is placed.

The caller passes a clock and a deadline (any units, compared to each other
only); past the deadline the answer is ``unknown``. Nothing here blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sdpaxos.check.model import ILLEGAL, Model

MEMO_ENTRIES_MAX: Final = 2_000_000
"""Default cap on remembered configurations (the checker shares it among the
searches in flight). About 250 bytes each with short states, so about 500 MB
at the cap. Past it the search continues without adding to the memo."""

DEADLINE_CHECK_EVERY: Final = 256
"""Configurations explored between two looks at the clock."""

OK: Final = "ok"
ILLEGAL_VERDICT: Final = "illegal"
UNKNOWN_VERDICT: Final = "unknown"


class StepError(Exception):
    """The model's ``step`` raised: ``position`` is the operation it was given."""

    def __init__(self, position: int, op: SearchOp, error: Exception) -> None:
        inp, out, invoke, complete = op
        super().__init__(
            f"the model raised {type(error).__name__}: {error} "
            f"(operation {inp!r} -> {out!r}, invoked at {invoke}, completed at {complete})"
        )
        self.position = position


SearchOp = tuple[Any, Any, float, float | None]
"""``(input, output, invoke, complete)`` of one operation, ``complete`` ``None`` if open."""


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    """The result of searching one (sub-)history. Plain data, cheap to send between processes.

    ``verdict`` is ``"ok"``, ``"illegal"`` or ``"unknown"``. ``order`` holds
    positions in the searched sequence: for ``ok``, a linearization (completed
    operations and those open ones that took effect); otherwise the longest
    linearizable prefix found (the one placing the most completed operations).
    ``configs`` counts configurations explored; ``memo_full`` says the memo
    reached its cap; ``reason`` says why the answer is unknown.
    """

    verdict: str
    order: tuple[int, ...]
    configs: int
    memo_size: int
    memo_full: bool
    reason: str = ""


def search(
    model: Model[Any],
    ops: Sequence[SearchOp],
    *,
    clock: Callable[[], float] | None = None,
    deadline: float | None = None,
    memo_entries_max: int = MEMO_ENTRIES_MAX,
) -> SearchOutcome:
    """Decide whether ``ops`` is linearizable with respect to ``model``.

    ``clock`` and ``deadline`` go together: when ``clock() > deadline`` the
    search stops with verdict ``unknown``. Without them the search runs to the
    end (which can take exponential time: pass a deadline for untrusted input).
    """
    steps = search_steps(model, ops, memo_entries_max=memo_entries_max)
    stop = False
    while True:
        try:
            steps.send(stop) if stop else next(steps)
        except StopIteration as done:
            outcome: SearchOutcome = done.value
            return outcome
        stop = clock is not None and deadline is not None and clock() > deadline


def search_steps(
    model: Model[Any],
    ops: Sequence[SearchOp],
    *,
    memo_entries_max: int = MEMO_ENTRIES_MAX,
    slice_configs: int = DEADLINE_CHECK_EVERY,
) -> Generator[None, bool | None, SearchOutcome]:
    """The search as a resumable generator: it yields after every
    ``slice_configs`` configurations explored, so that a caller can look at a
    clock or interleave several searches. Send ``True`` to stop it: it then
    returns (as ``StopIteration.value``) an outcome with verdict ``unknown``
    and reason ``"deadline"``. The first ``next`` does no work, so that a
    search can be stopped before it has run at all.
    """
    if (yield None):
        return SearchOutcome(UNKNOWN_VERDICT, (), 0, 0, False, "deadline")
    n = len(ops)
    events: list[tuple[float, int, int]] = []
    for i, (_, _, invoke, complete) in enumerate(ops):
        events.append((invoke, 0, i))
        if complete is not None:
            events.append((complete, 1, i))
    events.sort()

    # Entry 0 is the head, entry E + 1 the tail; entries 1..E are the events.
    n_entries = len(events)
    tail = n_entries + 1
    nxt = [*range(1, n_entries + 2), tail]
    prv = [0, *range(n_entries + 1)]
    entry_is_call = [False] * (n_entries + 2)
    entry_op = [-1] * (n_entries + 2)
    call_entry = [0] * n
    ret_entry = [-1] * n
    for e, (_, kind, i) in enumerate(events, start=1):
        entry_op[e] = i
        if kind == 0:
            entry_is_call[e] = True
            call_entry[i] = e
        else:
            ret_entry[i] = e

    inputs = [op[0] for op in ops]
    outputs = [op[1] for op in ops]
    is_open = [op[3] is None for op in ops]
    bit = [1 << i for i in range(n)]
    read_only = model.read_only
    commit = [not is_open[i] and read_only(inputs[i], outputs[i]) for i in range(n)]

    # For each open operation, the previous open operation (in invocation
    # order) with an equal input, or -1: equal open operations are tried in order.
    open_prev = [-1] * n
    last_open_with: dict[Any, int] = {}
    for _, kind, i in events:
        if kind == 0 and is_open[i]:
            try:
                open_prev[i] = last_open_with.get(inputs[i], -1)
                last_open_with[inputs[i]] = i
            except TypeError:  # unhashable input: no symmetry reduction for it
                pass

    step = model.step
    custom_key = type(model).state_key is not Model.state_key
    state_key = model.state_key
    illegal = ILLEGAL

    state: Any = model.init()
    skey: Any = state_key(state) if custom_key else state
    bits = 0
    returns_left = sum(1 for c in is_open if not c)
    completed_total = returns_left

    seen: set[tuple[int, Any]] = set()
    memo_full = False
    path: list[int] = []
    saved: list[tuple[Any, Any]] = []
    best: tuple[int, ...] = ()
    best_done = 0
    configs = 0

    if returns_left == 0:
        return SearchOutcome(OK, (), 0, 0, False)

    # The loop keeps everything in local variables (no helper functions): it
    # runs once per configuration, and this is where the time goes.
    frames: list[list[tuple[int, Any, Any]]] = []
    positions: list[int] = []
    fresh = True  # the current configuration has not been expanded yet
    while True:
        if fresh:
            # Expand: the children worth trying, in invocation order.
            fresh = False
            kids: list[tuple[int, Any, Any]] = []
            e = nxt[0]
            while entry_is_call[e]:
                i = entry_op[e]
                e = nxt[e]
                try:
                    ns = step(state, inputs[i], outputs[i])
                except Exception as exc:  # a bug in the model, or an input it does not know
                    raise StepError(i, ops[i], exc) from exc
                if ns is illegal:
                    continue
                nk = state_key(ns) if custom_key else ns
                if is_open[i]:
                    if nk == skey:
                        continue  # in doubt and no effect here: never needed
                    p = open_prev[i]
                    if p >= 0 and not bits & bit[p]:
                        continue  # an equal in-doubt operation comes first
                    kids.append((i, ns, nk))
                elif commit[i]:
                    # Read-only commit: this child alone decides the configuration.
                    kids = [] if (bits | bit[i], nk) in seen else [(i, ns, nk)]
                    break
                else:
                    kids.append((i, ns, nk))  # the memo is consulted when it is tried
            frames.append(kids)
            positions.append(0)
        kids = frames[-1]
        pos = positions[-1]
        if pos == len(kids):
            frames.pop()
            positions.pop()
            if not path:
                break
            i = path.pop()
            r = ret_entry[i]
            if r >= 0:
                nxt[prv[r]] = r
                prv[nxt[r]] = r
                returns_left += 1
            c = call_entry[i]
            nxt[prv[c]] = c
            prv[nxt[c]] = c
            bits ^= bit[i]
            state, skey = saved.pop()
            continue
        positions[-1] = pos + 1
        i, ns, nk = kids[pos]
        b2 = bits | bit[i]
        key = (b2, nk)
        if key in seen:
            continue
        if len(seen) < memo_entries_max:
            seen.add(key)
        else:
            memo_full = True
        # Linearize operation i: lift its entries.
        c = call_entry[i]
        pn, nn = prv[c], nxt[c]
        nxt[pn] = nn
        prv[nn] = pn
        r = ret_entry[i]
        if r >= 0:
            pn, nn = prv[r], nxt[r]
            nxt[pn] = nn
            prv[nn] = pn
            returns_left -= 1
        path.append(i)
        saved.append((state, skey))
        bits = b2
        state = ns
        skey = nk
        if returns_left == 0:
            return SearchOutcome(OK, tuple(path), configs + 1, len(seen), memo_full)
        done = completed_total - returns_left
        if done > best_done:
            best_done = done
            best = tuple(path)
        configs += 1
        if configs % slice_configs == 0 and (yield None):
            return SearchOutcome(UNKNOWN_VERDICT, best, configs, len(seen), memo_full, "deadline")
        fresh = True
    return SearchOutcome(ILLEGAL_VERDICT, best, configs, len(seen), memo_full)
