"""The simulator's default state machine: a register of everything applied.

Why not the key-value store: the simulator sits below applications and must not
import ``kvstore``. A running SHA-256 over the applied payloads is enough to
make any divergence of execution order visible in the results.
"""

import hashlib

#: Bytes of digest returned per command; enough to tell orders apart.
DIGEST_BYTES = 8


class DigestRegister:
    """Appends each payload to a running hash and returns the digest so far."""

    __slots__ = ("_hash", "applied")

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self.applied = 0

    def apply(self, payload: bytes) -> bytes:
        self._hash.update(len(payload).to_bytes(4, "big"))
        self._hash.update(payload)
        self.applied += 1
        return self._hash.digest()[:DIGEST_BYTES]

    def digest(self) -> bytes:
        return self._hash.digest()[:DIGEST_BYTES]
