"""The kv-store's native client: the runtime's secure transport, exactly-once writes.

Redis clients reach a node's Redis port and get Redis' guarantees (a command
whose connection dropped may or may not have run). This client talks to the
nodes' peer port instead, over mutual TLS with a client certificate of the
cluster, through :class:`sdpaxos.runtime.client.Client`: every write is
numbered in a session, and a retry after a timeout or a lost connection (at
the same node or another) is answered from the first execution, never run
twice. Results are what redis-py would hand back (``bytes``, ``int``, ``None``,
lists; errors raise :class:`ResponseError`)::

    async with KVClient.for_cluster("cluster.toml", client=0) as kv:
        await kv.set(b"greeting", b"hello")
        assert await kv.get(b"greeting") == b"hello"         # linearizable
        await kv.get(b"greeting", consistency="stale")       # this node's state now
        await kv.execute(b"INCRBY", b"n", b"5")              # any command of the store

:class:`SyncKVClient` is the same for code without an event loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from kvstore.codec import decode_value, encode_command
from kvstore.commands import parse
from kvstore.values import Error, Simple, Value
from sdpaxos.runtime.client import Client
from sdpaxos.runtime.config import TlsFiles
from sdpaxos.runtime.sync import SyncClient

__all__ = ["Consistency", "KVClient", "ResponseError", "SyncKVClient"]

Consistency = Literal["linearizable", "stale"]


class ResponseError(Exception):
    """The store answered a Redis-style error (``ERR ...``, ``WRONGTYPE ...``)."""


def _result(value: Value) -> Any:
    if isinstance(value, Error):
        raise ResponseError(value.text)
    if isinstance(value, Simple):
        return value.text
    return value


def _args(args: tuple[bytes | str | int, ...]) -> list[bytes]:
    out = []
    for a in args:
        if isinstance(a, bytes):
            out.append(a)
        elif isinstance(a, str):
            out.append(a.encode())
        elif isinstance(a, int) and not isinstance(a, bool):
            out.append(str(a).encode())
        else:
            raise TypeError(f"an argument must be bytes, str or int, not {type(a).__name__}")
    return out


class KVClient:
    """An asyncio client of a kv-store cluster (see the module docstring)."""

    def __init__(self, client: Client, *, timeout_s: float = 10.0) -> None:
        self.client = client
        self.timeout_s = timeout_s

    @classmethod
    def for_cluster(
        cls,
        path: Path | str,
        *,
        client: int = 0,
        tls: TlsFiles | None = None,
        timeout_s: float = 10.0,
        **client_kw: Any,
    ) -> KVClient:
        """A client of every node of the cluster file at ``path``, with client
        certificate ``certs/client<N>`` next to the cluster CA unless ``tls`` says."""
        from kvstore.config import load_kv_config
        from sdpaxos.runtime.cli import cluster_client_tls

        config = load_kv_config(path, 0).node
        if tls is None:
            tls = cluster_client_tls(config, client)
        return cls(Client.for_cluster(config, tls, **client_kw), timeout_s=timeout_s)

    async def __aenter__(self) -> KVClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.client.close()

    async def execute(
        self, *args: bytes | str | int, consistency: Consistency = "linearizable"
    ) -> Any:
        """Run one command of the store; a write exactly once, whatever the retries."""
        argv = _args(args)
        parsed = parse(argv)
        if isinstance(parsed, Error):
            raise ResponseError(parsed.text)
        spec, argv = parsed
        payload = encode_command(argv)
        if spec.kind == "write":
            key = argv[1] if spec.single_key else None
            raw = await self.client.submit(
                payload, key=key, wait="executed", timeout_s=self.timeout_s
            )
        else:
            if consistency not in ("linearizable", "stale"):
                raise ValueError(
                    f'consistency must be "linearizable" or "stale", not {consistency!r}'
                )
            key = argv[1] if spec.single_key else None
            raw = await self.client.read(
                key, payload, stale=consistency == "stale", timeout_s=self.timeout_s
            )
        return _result(None if raw is None else decode_value(raw))

    async def get(self, key: bytes | str, *, consistency: Consistency = "linearizable") -> Any:
        return await self.execute(b"GET", key, consistency=consistency)

    async def set(self, key: bytes | str, value: bytes | str | int) -> Any:
        return await self.execute(b"SET", key, value)

    async def delete(self, *keys: bytes | str) -> Any:
        return await self.execute(b"DEL", *keys)

    async def incr(self, key: bytes | str, by: int = 1) -> Any:
        return await self.execute(b"INCRBY", key, by)

    async def cas(self, key: bytes | str, expected: bytes | str, new: bytes | str) -> bool:
        """Set ``key`` to ``new`` if it holds ``expected``; whether it did."""
        return bool(await self.execute(b"CAS", key, expected, new))

    async def mget(self, *keys: bytes | str, consistency: Consistency = "linearizable") -> Any:
        return await self.execute(b"MGET", *keys, consistency=consistency)


class SyncKVClient:
    """:class:`KVClient` for code without an event loop (a loop runs in a thread)."""

    def __init__(self, client: SyncClient, *, timeout_s: float = 10.0) -> None:
        self._sync = client
        self._kv = KVClient(client.client, timeout_s=timeout_s)

    @classmethod
    def for_cluster(
        cls, path: Path | str, *, client: int = 0, timeout_s: float = 10.0
    ) -> SyncKVClient:
        from kvstore.config import load_kv_config
        from sdpaxos.runtime.cli import cluster_client_tls

        config = load_kv_config(path, 0).node
        addresses = [(r.host, r.port) for r in config.replicas]
        return cls(
            SyncClient(addresses, tls=cluster_client_tls(config, client)), timeout_s=timeout_s
        )

    def execute(self, *args: bytes | str | int, consistency: Consistency = "linearizable") -> Any:
        return self._sync.run(self._kv.execute(*args, consistency=consistency))

    def get(self, key: bytes | str, *, consistency: Consistency = "linearizable") -> Any:
        return self.execute(b"GET", key, consistency=consistency)

    def set(self, key: bytes | str, value: bytes | str | int) -> Any:
        return self.execute(b"SET", key, value)

    def incr(self, key: bytes | str, by: int = 1) -> Any:
        return self.execute(b"INCRBY", key, by)

    def close(self) -> None:
        self._sync.close()

    def __enter__(self) -> SyncKVClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
