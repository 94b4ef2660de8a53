"""Redis glob patterns (``stringmatchlen`` in Redis' ``util.c``), for KEYS and
SCAN ... MATCH, compiled once per call so that the per-key match is a plain loop.

Pure: no I/O. Patterns compare bytes unsigned (Redis compares ``char``, signed
on x86, so its ranges over bytes >= 0x80 differ); everything else, including
Redis' quirks (``*`` alone matches the empty key but ``**`` does not, an
unclosed ``[`` runs to the end of the pattern, ``[a-]`` is the range a..]), is
reproduced.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Glob", "compile_glob", "glob_match", "matcher"]

#: A compiled pattern: one entry per position, ``None`` for a ``*`` run, else the
#: set of bytes that position accepts.
Glob = list[frozenset[int] | None]

_ANY = frozenset(range(256))


def compile_glob(pattern: bytes) -> Glob | None:
    """Compile a Redis glob pattern; ``None`` if it can match nothing because of
    Redis' nesting limit.

    The class parser follows Redis step by step, quirks included: ``\\`` escapes
    inside and outside classes (a trailing ``\\`` is literal), ``^`` negates, a
    range ``x-y`` may run backwards, ``-`` before ``]`` makes a range ending in
    ``]``, and an unclosed ``[`` takes the rest of the pattern as its class.
    Redis gives up (no match) past 1000 nested ``*`` recursions; that happens
    exactly when more than 1000 ``*`` runs are followed by more pattern.
    """
    tokens: Glob = []
    p = 0
    n = len(pattern)
    while p < n:
        c = pattern[p]
        if c == 42:  # '*'
            if not tokens or tokens[-1] is not None:
                tokens.append(None)
            p += 1
        elif c == 63:  # '?'
            tokens.append(_ANY)
            p += 1
        elif c == 91:  # '['
            p += 1
            negate = p < n and pattern[p] == 94  # '^'
            if negate:
                p += 1
            members: set[int] = set()
            while True:
                if p < n and pattern[p] == 92 and n - p >= 2:  # '\' escapes
                    p += 1
                    members.add(pattern[p])
                elif p < n and pattern[p] == 93:  # ']' closes
                    p += 1
                    break
                elif p >= n:  # unclosed: the class ends with the pattern
                    break
                elif n - p >= 3 and pattern[p + 1] == 45:  # 'a-z'
                    lo, hi = pattern[p], pattern[p + 2]
                    if lo > hi:
                        lo, hi = hi, lo
                    members.update(range(lo, hi + 1))
                    p += 2
                else:
                    members.add(pattern[p])
                p += 1
            tokens.append(_ANY - members if negate else frozenset(members))
        else:
            if c == 92 and n - p >= 2:  # '\' escapes the next byte
                p += 1
            tokens.append(frozenset((pattern[p],)))
            p += 1
    runs = tokens.count(None) - (1 if tokens and tokens[-1] is None else 0)
    if runs > 1000:
        return None
    return tokens


def glob_match(glob: Glob | None, s: bytes) -> bool:
    """Whether ``s`` matches a compiled pattern.

    Greedy with one backtrack point (the last ``*``), which decides the same
    as Redis' recursion with its "skip longer matches" cut, in O(len * len).
    As in Redis, the empty string matches only the empty pattern (``KEYS *``
    and ``SCAN`` without MATCH list every key without calling this).
    """
    if glob is None:
        return False
    if not s:
        return not glob
    n = len(glob)
    m = len(s)
    p = i = 0
    star = -1
    star_i = 0
    while i < m:
        if p < n:
            token = glob[p]
            if token is None:
                star = p
                star_i = i
                p += 1
                continue
            if s[i] in token:
                p += 1
                i += 1
                continue
        if star < 0:
            return False
        star_i += 1
        i = star_i
        p = star + 1
    while p < n and glob[p] is None:
        p += 1
    return p == n


def matcher(pattern: bytes | None) -> Callable[[bytes], bool] | None:
    """A predicate for MATCH/KEYS, or ``None`` when everything matches (``*``)."""
    if pattern is None or pattern == b"*":
        return None
    glob = compile_glob(pattern)
    return lambda key: glob_match(glob, key)
