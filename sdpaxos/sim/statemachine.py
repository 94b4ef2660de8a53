"""The simulator's default state machine: a register of everything applied.

Why not the key-value store: the simulator sits below applications and must not
import ``kvstore``. A running SHA-256 over the applied payloads is enough to
make any divergence of execution order visible in the results. The hash is
chained (each step hashes the previous digest with the payload) rather than one
running hash object, because a snapshot must hand the state over as bytes and a
``hashlib`` object cannot be serialized.
"""

import hashlib

#: Bytes of digest returned per command; enough to tell orders apart.
DIGEST_BYTES = 8


class DigestRegister:
    """Chains each payload into a hash and returns the digest so far."""

    __slots__ = ("_state", "applied")

    def __init__(self) -> None:
        self._state = b""
        self.applied = 0

    def apply(self, payload: bytes) -> bytes:
        self._state = hashlib.sha256(
            self._state + len(payload).to_bytes(4, "big") + payload
        ).digest()
        self.applied += 1
        return self._state[:DIGEST_BYTES]

    def digest(self) -> bytes:
        return self._state[:DIGEST_BYTES]

    def snapshot(self) -> bytes:
        return self.applied.to_bytes(8, "big") + self._state

    def restore(self, data: bytes) -> None:
        self.applied = int.from_bytes(data[:8], "big")
        self._state = data[8:]
