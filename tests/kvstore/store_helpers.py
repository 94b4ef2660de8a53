"""What the state machine's tests share: one command through the log path
(``run``) or the local read path (``ask``), and Redis' common error replies."""

from __future__ import annotations

from kvstore.codec import decode_value, encode_command
from kvstore.machine import KVStore
from kvstore.values import Error, Value

INT_MAX = 2**63 - 1
INT_MIN = -(2**63)

NOT_INT = Error("ERR value is not an integer or out of range")
OVERFLOW = Error("ERR increment or decrement would overflow")
SYNTAX = Error("ERR syntax error")
EXPIRY = Error("ERR expiry is not supported by this store")


def run(store: KVStore, *args: bytes) -> Value:
    """One command through the log path: encode, apply, decode."""
    return decode_value(store.apply(encode_command(list(args))))


def ask(store: KVStore, *args: bytes) -> Value:
    """One command through the local read path."""
    return decode_value(store.query(encode_command(list(args))))
