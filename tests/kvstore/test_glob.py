"""Redis glob patterns (kvstore.glob), quirks included."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.glob import compile_glob, glob_match


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        (b"h?llo", b"hello", True),
        (b"h?llo", b"hllo", False),
        (b"h*llo", b"hllo", True),
        (b"h*llo", b"heeeello", True),
        (b"h[ae]llo", b"hallo", True),
        (b"h[ae]llo", b"hillo", False),
        (b"h[^e]llo", b"hallo", True),
        (b"h[^e]llo", b"hello", False),
        (b"h[a-b]llo", b"hbllo", True),
        (b"h[a-b]llo", b"hcllo", False),
        (b"h\\*llo", b"h*llo", True),
        (b"h\\*llo", b"hello", False),
        (b"[\\]]", b"]", True),
        (b"[\\-]", b"-", True),
        (b"[a-]x", b"]", True),  # an unclosed class: range a..] plus 'x', to the end
        (b"[a-]x", b"x", True),
        (b"*a*b", b"xaxxb", True),
        (b"*a*b", b"xaxxbx", False),
        (b"a*", b"a", True),
        (b"a**", b"a", True),
        (b"*", b"", True),  # compile_glob alone: the KEYS shortcut is elsewhere
        (b"", b"", True),
        (b"", b"a", False),
        (b"a", b"", False),
        (b"\xff*", b"\xff\x00", True),
        (b"[\x80-\xff]", b"\xc0", True),  # unsigned bytes (Redis on x86 compares signed char)
    ],
)
def test_glob(pattern: bytes, key: bytes, matches: bool) -> None:
    glob = compile_glob(pattern)
    if pattern == b"*" and key == b"":
        assert not glob_match(glob, key)  # Redis' stringmatchlen says no; KEYS * says yes
        return
    assert glob_match(glob, key) == matches


def test_glob_nesting_limit_as_redis() -> None:
    # More than 1000 '*' runs followed by more pattern: Redis gives up (no match).
    assert compile_glob(b"*a" * 1000) is not None
    assert glob_match(compile_glob(b"*a" * 1000), b"a" * 1000)
    assert compile_glob(b"*a" * 1001) is None
    assert not glob_match(compile_glob(b"*a" * 1001), b"a" * 1001)
    assert compile_glob(b"*a" * 1000 + b"*") is not None  # a trailing run does not count


def test_glob_is_not_exponential() -> None:
    glob = compile_glob(b"*a" * 30 + b"b")
    assert not glob_match(glob, b"a" * 2000)


@settings(derandomize=True, max_examples=300)
@given(
    st.text(alphabet="ab*?", max_size=8).map(str.encode),
    st.binary(min_size=1, max_size=8).map(lambda b: bytes(98 - (c & 1) for c in b)),
)
def test_glob_agrees_with_fnmatch_without_classes(pattern: bytes, key: bytes) -> None:
    # Without '[' and '\', Redis globs are plain shell globs on non-empty strings.
    expected = fnmatch.fnmatchcase(key.decode(), pattern.decode())
    assert glob_match(compile_glob(pattern), key) == expected
