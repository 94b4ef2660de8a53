"""The simulator's default state machine: a register of everything applied.

Why not the key-value store: the simulator sits below applications and must not
import ``kvstore``. A running SHA-256 over the applied payloads is enough to
make any divergence of execution order visible in the results. The hash is
chained (each step hashes the previous digest with the payload) rather than one
running hash object, because a snapshot must hand the state over as bytes and a
``hashlib`` object cannot be serialized.

:class:`KeyedDigestRegister` is its per-key variant, for protocols that order
only interfering commands (EPaxos): the simulator uses it for those.
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


#: Marks a payload that names the key it writes (:func:`keyed_payload`).
KEY_MARK = b"\x00key:"
#: Longest key a keyed payload may name (two length bytes).
KEY_BYTES_MAX = 0xFFFF


def keyed_payload(key: bytes, body: bytes) -> bytes:
    """A payload that tells :class:`KeyedDigestRegister` which key it writes.

    Why: a state machine sees only payloads (``StateMachine.apply``), and a
    protocol that orders only interfering commands (EPaxos) applies commands on
    different keys in different orders on different replicas; per-key state is
    then the only state whose results agree, so the key must travel in the payload
    (as it does in any real application's command encoding).
    """
    if len(key) > KEY_BYTES_MAX:
        raise ValueError(f"key of {len(key)} bytes; at most {KEY_BYTES_MAX}")
    return KEY_MARK + len(key).to_bytes(2, "big") + key + body


def payload_key(payload: bytes) -> bytes | None:
    """The key a :func:`keyed_payload` names, or ``None`` (an unnamed object)."""
    if not payload.startswith(KEY_MARK):
        return None
    start = len(KEY_MARK) + 2
    if len(payload) < start:
        return None
    end = start + int.from_bytes(payload[len(KEY_MARK) : start], "big")
    return payload[start:end] if len(payload) >= end else None


def _fingerprint(key: bytes, digest: bytes) -> int:
    return int.from_bytes(hashlib.sha256(len(key).to_bytes(2, "big") + key + digest).digest())


class KeyedDigestRegister:
    """One chained digest per key, for protocols that order per key (EPaxos).

    A payload naming a key (:func:`keyed_payload`) chains into that key's digest
    (together with the digest of the unnamed object, see below) and returns it.
    A payload naming none writes "every object": it chains into the unnamed
    object's digest together with a fingerprint of every key's digest (kept as an
    XOR, so it costs O(1)), and returns that. So a result depends only on the
    commands it interferes with and their order, which every replica of such a
    protocol agrees on; :meth:`digest` depends on nothing but the final state.
    """

    __slots__ = ("_global", "_keys", "_mix", "applied")

    def __init__(self) -> None:
        self._global = b""
        self._keys: dict[bytes, bytes] = {}
        self._mix = 0
        self.applied = 0

    def apply(self, payload: bytes) -> bytes:
        self.applied += 1
        framed = len(payload).to_bytes(4, "big") + payload
        key = payload_key(payload)
        if key is None:
            self._global = hashlib.sha256(
                self._global + self._mix.to_bytes(32, "big") + framed
            ).digest()
            return self._global[:DIGEST_BYTES]
        old = self._keys.get(key)
        new = hashlib.sha256((old or b"") + self._global + framed).digest()
        if old is not None:
            self._mix ^= _fingerprint(key, old)
        self._mix ^= _fingerprint(key, new)
        self._keys[key] = new
        return new[:DIGEST_BYTES]

    def digest(self) -> bytes:
        return hashlib.sha256(self._global + self._mix.to_bytes(32, "big")).digest()[:DIGEST_BYTES]

    def snapshot(self) -> bytes:
        parts = [
            self.applied.to_bytes(8, "big"),
            len(self._global).to_bytes(1, "big"),
            self._global,
            len(self._keys).to_bytes(8, "big"),
        ]
        for key in sorted(self._keys):
            parts += [len(key).to_bytes(2, "big"), key, self._keys[key]]
        return b"".join(parts)

    def restore(self, data: bytes) -> None:
        self.applied = int.from_bytes(data[:8], "big")
        glen = data[8]
        self._global = data[9 : 9 + glen]
        at = 9 + glen
        count = int.from_bytes(data[at : at + 8], "big")
        at += 8
        self._keys, self._mix = {}, 0
        for _ in range(count):
            klen = int.from_bytes(data[at : at + 2], "big")
            key = data[at + 2 : at + 2 + klen]
            digest = data[at + 2 + klen : at + 34 + klen]
            at += 34 + klen
            self._keys[key] = digest
            self._mix ^= _fingerprint(key, digest)
