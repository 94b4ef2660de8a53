"""State machines that ship with the runtime, for ``python -m sdpaxos node --app``.

They are what tests, benchmarks and a first try run; an embedder brings its own
(any object with ``apply``, ``snapshot``, ``restore``, and ``query`` for reads).

* :class:`DigestLog` (``--app digest``, the default): keeps a running BLAKE2b
  of every payload in execution order and their count. Two replicas with equal
  digests executed the same commands in the same order, which is what the
  crash tests compare. ``apply`` answers the command's position (8 bytes).
* :class:`PayloadLog` (``--app list``): keeps every payload in execution order;
  ``query`` answers them all (msgpack array). For tests that must show that
  each acknowledged command executed exactly once, in the same order everywhere.
* :class:`KeyValue` (``--app kv``): a dictionary of byte strings. A payload is
  msgpack ``["set", key, value]`` or ``["del", key]``; ``query(key)`` reads.
"""

from __future__ import annotations

import hashlib
import importlib
from typing import Any

import msgpack

__all__ = ["APPS", "DigestLog", "KeyValue", "PayloadLog", "load_app"]

_COUNT_BYTES = 8


class DigestLog:
    """Count and running digest of the payloads applied (see the module docstring)."""

    def __init__(self) -> None:
        self.count = 0
        self.digest = bytes(32)

    def apply(self, payload: bytes) -> bytes:
        self.digest = hashlib.blake2b(self.digest + payload, digest_size=32).digest()
        self.count += 1
        return self.count.to_bytes(_COUNT_BYTES, "big")

    def snapshot(self) -> bytes:
        return self.count.to_bytes(_COUNT_BYTES, "big") + self.digest

    def restore(self, data: bytes) -> None:
        if len(data) != _COUNT_BYTES + 32:
            raise ValueError(f"a DigestLog snapshot is {_COUNT_BYTES + 32} bytes, got {len(data)}")
        self.count = int.from_bytes(data[:_COUNT_BYTES], "big")
        self.digest = data[_COUNT_BYTES:]

    def query(self, request: bytes) -> bytes:
        """Whatever the request: the count (8 bytes) and the digest (32)."""
        return self.snapshot()


class PayloadLog:
    """Every payload applied, in order (see the module docstring)."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []

    def apply(self, payload: bytes) -> bytes:
        self.payloads.append(payload)
        return len(self.payloads).to_bytes(_COUNT_BYTES, "big")

    def snapshot(self) -> bytes:
        return bytes(msgpack.packb(self.payloads, use_bin_type=True))

    def restore(self, data: bytes) -> None:
        self.payloads = [bytes(p) for p in msgpack.unpackb(data, raw=False)]

    def query(self, request: bytes) -> bytes:
        return bytes(msgpack.packb(self.payloads, use_bin_type=True))


class KeyValue:
    """A replicated dictionary (see the module docstring)."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    @staticmethod
    def set(key: bytes, value: bytes) -> bytes:
        """The payload that sets ``key``."""
        return bytes(msgpack.packb(["set", key, value], use_bin_type=True))

    @staticmethod
    def delete(key: bytes) -> bytes:
        return bytes(msgpack.packb(["del", key], use_bin_type=True))

    def apply(self, payload: bytes) -> bytes:
        try:
            op = msgpack.unpackb(payload, raw=False)
        except Exception:
            return b"ERR malformed"
        match op:
            case ["set", bytes() as key, bytes() as value]:
                self.data[key] = value
                return b"OK"
            case ["del", bytes() as key]:
                return b"1" if self.data.pop(key, None) is not None else b"0"
        return b"ERR unknown operation"

    def snapshot(self) -> bytes:
        return bytes(msgpack.packb(sorted(self.data.items()), use_bin_type=True))

    def restore(self, data: bytes) -> None:
        self.data = {bytes(k): bytes(v) for k, v in msgpack.unpackb(data, raw=False)}

    def query(self, key: bytes) -> bytes:
        return self.data.get(key, b"")


APPS: dict[str, type[Any]] = {"digest": DigestLog, "list": PayloadLog, "kv": KeyValue}


def load_app(name: str) -> Any:
    """A new state machine: a built-in name, or ``package.module:Class``."""
    if name in APPS:
        return APPS[name]()
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"unknown app {name!r}: use {', '.join(APPS)} or package.module:Class")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load app {name!r}: {exc}") from None
    return cls()
