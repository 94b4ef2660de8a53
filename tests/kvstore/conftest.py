"""The kv-store tests' fixtures."""

from __future__ import annotations

import pytest

from kvstore.machine import KVStore


@pytest.fixture
def kv() -> KVStore:
    """An empty store."""
    return KVStore()
