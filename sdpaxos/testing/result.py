"""What a fuzz run sent and what the node did: :class:`FuzzResult` and its report.

One caveat on the counter: a replica's connection can be replaced by the real
replica reconnecting at any moment (the node keeps the newest connection per
peer), and a frame in flight on the replaced connection is then never read.
So the check is ``expected - replaced <= counted <= expected``, where
``replaced`` is bounded by the number of replica connections.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FuzzResult", "ReasonCounter"]


@dataclass
class FuzzResult:
    """What a run sent and what the node did (see :meth:`FuzzResult.lines`)."""

    frames: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    verdicts: Counter[str] = field(default_factory=Counter)
    roles: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    closed_by_node: int = 0
    #: Connections that should have been closed by the node and were not.
    not_closed: int = 0
    #: Connections whose TLS handshake or first bytes failed on our side.
    connect_failed: int = 0
    replies: int = 0
    #: Replies the node sent where no reply may come (a refused handshake).
    leaks: int = 0
    #: Refusals the node must count, and how many of them were on replica connections.
    expected_rejects: int = 0
    node_expected_rejects: int = 0
    skipped: int = 0
    handshakes_refused: Counter[str] = field(default_factory=Counter)
    handshakes_tried: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    # Filled by :func:`fuzz_cluster`.
    rejected_before: int | None = None
    rejected_after: int | None = None
    commands_committed: int = 0
    commands_failed: int = 0
    final_ok: bool = False
    agree: bool = False
    answers: dict[int, str] = field(default_factory=dict)
    executed: dict[int, int] = field(default_factory=dict)
    reasons: Counter[str] = field(default_factory=Counter)
    node_errors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def check(self) -> None:
        """Fill :attr:`problems` from what was measured."""
        p = self.problems
        p.clear()
        if self.not_closed:
            p.append(f"{self.not_closed} connections not closed after a frame the node must refuse")
        if self.leaks:
            p.append(f"{self.leaks} replies on connections that should have been refused")
        for what, tried in self.handshakes_tried.items():
            if self.handshakes_refused[what] != tried:
                p.append(f"{what}: {tried - self.handshakes_refused[what]} handshakes got through")
        if self.rejected_before is not None and self.rejected_after is not None:
            counted = self.rejected_after - self.rejected_before
            low = self.expected_rejects - self.node_expected_rejects
            if not low <= counted <= self.expected_rejects:
                p.append(
                    f"frames_rejected grew by {counted}, expected {low}..{self.expected_rejects}"
                )
        if self.commands_committed == 0:
            p.append("no command committed while fuzzing")
        if not self.final_ok:
            p.append("the final command did not execute")
        if not self.agree:
            p.append(f"replicas disagree: {self.answers}")
        if self.node_errors:
            p.append(f"{len(self.node_errors)} exceptions in the nodes: {self.node_errors[:3]}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["frames_per_s"] = round(self.frames_per_s, 1)
        d["ok"] = self.ok
        return d

    def lines(self) -> list[str]:
        out = [
            f"frames sent: {self.frames} in {self.elapsed_s:.1f} s "
            f"({self.frames_per_s:.0f} frames/s) on {self.connections} connections",
            "  by verdict: " + ", ".join(f"{k} {v}" for k, v in sorted(self.verdicts.items())),
            "  by role:    " + ", ".join(f"{k} {v}" for k, v in sorted(self.roles.items())),
            "  by kind:",
        ]
        out += [f"    {k:<34} {v}" for k, v in sorted(self.kinds.items())]
        out += [
            f"mutations skipped (would be stepped or carried out): {self.skipped}",
            f"connections closed by the node: {self.closed_by_node}; "
            f"not closed when they should: {self.not_closed}; "
            f"connect failures: {self.connect_failed}",
            f"replies received: {self.replies}",
            "refused handshakes: "
            + ", ".join(
                f"{k} {self.handshakes_refused[k]}/{v}"
                for k, v in sorted(self.handshakes_tried.items())
            ),
        ]
        if self.rejected_before is not None and self.rejected_after is not None:
            out.append(
                f"node frames_rejected: {self.rejected_before} -> {self.rejected_after} "
                f"(+{self.rejected_after - self.rejected_before}; expected "
                f"{self.expected_rejects - self.node_expected_rejects}..{self.expected_rejects})"
            )
        if self.reasons:
            out.append("  logged reasons:")
            out += [f"    {k:<50} {v}" for k, v in self.reasons.most_common(25)]
        out += [
            f"commands committed while fuzzing: {self.commands_committed} "
            f"(failed: {self.commands_failed}); final command executed: {self.final_ok}",
            "replicas agree: "
            + ("yes" if self.agree else "NO")
            + "".join(f"\n  node {k}: {v}" for k, v in sorted(self.answers.items())),
        ]
        if self.executed:
            out.append(
                "executed slots: " + ", ".join(f"{k}:{v}" for k, v in sorted(self.executed.items()))
            )
        out.append("result: " + ("OK" if self.ok else "FAILED: " + "; ".join(self.problems)))
        return out


class ReasonCounter(logging.Handler):
    """Counts the node's logged refusals by reason (``node N: dropped WHO: REASON``)."""

    def __init__(self, result: FuzzResult) -> None:
        super().__init__(logging.WARNING)
        self.result = result

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if record.msg.startswith("node %d: dropped") and isinstance(args, tuple) and len(args) == 3:
            reason = str(args[2])
            self.result.reasons[_reason_key(reason)] += 1


def _reason_key(reason: str) -> str:
    """A reason without its numbers and details, to count alike ones together."""
    head = reason.split(":", 1)[0] if not reason.startswith("hello") else reason[:30]
    return "".join("N" if c.isdigit() else c for c in head)[:50].rstrip()
