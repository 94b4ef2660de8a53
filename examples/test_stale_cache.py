"""Example: Hypothesis + threads (and asyncio tasks) catch a cache that serves stale reads.

Two in-memory key-value stores with the same interface. ``LockedStore`` is
correct. ``StaleCacheStore`` answers reads from a cache that it refreshes
only every third read and that writes do not invalidate: a client can write a
value and then read an older one. Each test draws a few clients' scripts of
puts and gets, runs them concurrently against a store while a recorder takes
invocation and completion times, and checks the history against the
key-value model.

Run with ``python -m pytest examples/test_stale_cache.py``; the stale cache
test shows what a failure looks like (``pytest.raises`` around the check
keeps this file green). ``python examples/test_stale_cache.py`` prints the
failure message: the witness, the path of a picture, and a replay command.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdpaxos.check import KeyValue
from sdpaxos.check.testing import (
    NotLinearizable,
    assert_linearizable,
    record_tasks,
    record_threads,
    scripts,
)

REFRESH_EVERY_READS = 3
"""The broken cache is refreshed from the store on every third read."""


class LockedStore:
    """A correct store: one lock around a dict."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._data.get(key)

    def put(self, key: str, value: str) -> None:
        with self._lock:
            self._data[key] = value


class StaleCacheStore(LockedStore):
    """Broken: reads come from a cache that writes do not invalidate."""

    def __init__(self) -> None:
        super().__init__()
        self._cache: dict[str, str] = {}
        self._reads = 0

    def get(self, key: str) -> str | None:
        with self._lock:
            self._reads += 1
            if self._reads % REFRESH_EVERY_READS == 0:
                self._cache = dict(self._data)
            return self._cache.get(key)


def apply_to(store: LockedStore) -> Any:
    """One operation of a script against ``store`` (what the recorder times)."""

    def apply(client: int, op: tuple[str, ...]) -> Any:
        if op[0] == "get":
            return store.get(op[1])
        store.put(op[1], op[2])
        return None

    return apply


KEYS = st.sampled_from(["x", "y"])
OPERATIONS = st.one_of(
    st.tuples(st.just("put"), KEYS, st.sampled_from(["1", "2", "3"])),
    st.tuples(st.just("get"), KEYS),
)
SCRIPTS = scripts(OPERATIONS, clients_min=1, clients_max=3, ops_max=5)
EXAMPLES = settings(derandomize=True, max_examples=40, deadline=None, database=None)


@EXAMPLES
@given(SCRIPTS)
def test_the_locked_store_is_linearizable(client_scripts: list[list[tuple[str, ...]]]) -> None:
    history = record_threads(client_scripts, apply_to(LockedStore()))
    assert_linearizable(history, KeyValue())


@EXAMPLES
@given(SCRIPTS)
def _stale_cache_property(client_scripts: list[list[tuple[str, ...]]]) -> None:
    history = record_threads(client_scripts, apply_to(StaleCacheStore()))
    assert_linearizable(history, KeyValue())  # on failure: a picture in a temporary directory


def test_the_stale_cache_is_caught() -> None:
    with pytest.raises(NotLinearizable) as failure:
        _stale_cache_property()
    assert "not linearizable" in str(failure.value)
    assert failure.value.picture is not None and failure.value.picture.exists()


class AsyncStore:
    """A correct asyncio store; each call yields to the loop so tasks interleave."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}

    async def get(self, key: str) -> str | None:
        await asyncio.sleep(0)
        return self._data.get(key)

    async def put(self, key: str, value: str) -> None:
        await asyncio.sleep(0)
        self._data[key] = value


@EXAMPLES
@given(SCRIPTS)
def test_an_asyncio_store_is_linearizable(client_scripts: list[list[tuple[str, ...]]]) -> None:
    store = AsyncStore()

    async def apply(client: int, op: tuple[str, ...]) -> Any:
        if op[0] == "get":
            return await store.get(op[1])
        return await store.put(op[1], op[2])

    history = asyncio.run(record_tasks(client_scripts, apply))
    assert_linearizable(history, KeyValue())


if __name__ == "__main__":
    test_the_locked_store_is_linearizable()
    print("LockedStore: linearizable in every example")
    try:
        _stale_cache_property()
    except NotLinearizable as e:
        print("StaleCacheStore: caught\n" + str(e))
        sys.exit(0)
    print("StaleCacheStore: NOT caught (unexpected)")
    sys.exit(1)
