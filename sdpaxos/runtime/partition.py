"""Partition specs for the delay emulator: which replicas may talk.

``"0,1|2"`` on the command line (``python -m sdpaxos admin ... partition``) is
groups ``{0, 1}`` and ``{2}``; :meth:`sdpaxos.runtime.emulator.LinkEmulator.partition`
cuts this node's links to every replica outside its own group. Kept apart from
the emulator's scheduling: parsing and checking what an operator typed.
"""

from __future__ import annotations

from collections.abc import Iterable

from sdpaxos.core.types import REPLICAS_MAX

__all__ = ["check_groups", "check_replicas", "parse_partition"]


def check_replicas(replicas: int) -> None:
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise ValueError(f"replicas must be an int, got {replicas!r}")
    if not 1 <= replicas <= REPLICAS_MAX:
        raise ValueError(f"replicas must be in 1..{REPLICAS_MAX}, got {replicas}")


def check_groups(groups: Iterable[Iterable[int]], replicas: int) -> list[frozenset[int]]:
    """Groups as frozensets, each id in ``0..replicas-1`` and in one group only."""
    seen: dict[int, int] = {}
    out: list[frozenset[int]] = []
    for g, group in enumerate(groups):
        members: set[int] = set()
        for r in group:
            if isinstance(r, bool) or not isinstance(r, int):
                raise ValueError(f"partition group {g}: replica id must be an int, got {r!r}")
            if not 0 <= r < replicas:
                raise ValueError(f"partition group {g}: replica {r} out of range 0..{replicas - 1}")
            if r in seen and seen[r] != g:
                raise ValueError(f"partition: replica {r} is in two groups ({seen[r]} and {g})")
            seen[r] = g
            members.add(r)
        if not members:
            raise ValueError(f"partition group {g} is empty")
        out.append(frozenset(members))
    return out


def parse_partition(spec: str, replicas: int) -> list[frozenset[int]]:
    """Parse a command-line partition spec: groups split by ``|``, ids by ``,``.

    ``"0,1|2"`` is groups ``{0, 1}`` and ``{2}``; blanks around ids are
    allowed. A replica named in no group is isolated (module docstring). Every
    mistake is a ``ValueError`` quoting the spec and naming the problem: an
    empty spec or group, an id that is not a decimal number, an id out of
    ``0..replicas-1``, an id in two groups.
    """
    check_replicas(replicas)
    if not spec.strip():
        raise ValueError("partition spec is empty; expected groups like '0,1|2'")
    groups: list[list[int]] = []
    for g, part in enumerate(spec.split("|")):
        ids: list[int] = []
        for tok in part.split(","):
            t = tok.strip()
            if not t:
                raise ValueError(f"partition spec {spec!r}: group {g} has an empty replica id")
            if not (t.isascii() and t.isdecimal()):
                raise ValueError(f"partition spec {spec!r}: {t!r} is not a replica id")
            ids.append(int(t))
        groups.append(ids)
    try:
        return check_groups(groups, replicas)
    except ValueError as exc:
        raise ValueError(f"partition spec {spec!r}: {exc}") from None
