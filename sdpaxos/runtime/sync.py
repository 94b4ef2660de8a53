"""Synchronous facades: :class:`SyncNode` and :class:`SyncClient`, for code
without an event loop (a Flask view, a script, a notebook).

Each runs its own event loop in one background thread and hands every call to
it (``asyncio.run_coroutine_threadsafe``), so the node's driver loop keeps
running between calls. Calls block the calling thread only; many threads may
call at once. The loop is the default asyncio loop (the library installs no
policy); close the facade (or use ``with``) to stop the node and the thread.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Collection, Coroutine, Sequence
from typing import Any, TypeVar

from sdpaxos.core.app import StateMachine
from sdpaxos.runtime.client import ATTEMPT_TIMEOUT_S, Client
from sdpaxos.runtime.config import NodeConfig, TlsFiles
from sdpaxos.runtime.driver import READ_TIMEOUT_S
from sdpaxos.runtime.emulator import LinkEmulator
from sdpaxos.runtime.errors import NodeError, WaitName
from sdpaxos.runtime.metrics import Metrics
from sdpaxos.runtime.node import SNAPSHOT_LOG_BYTES_DEFAULT, Node, NodeStatus

__all__ = ["SyncClient", "SyncNode"]

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        if self.loop.is_closed():
            coro.close()
            raise NodeError("closed: this facade's node or client was closed")
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a sync facade cannot be called from its own event loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class SyncNode:
    """A :class:`~sdpaxos.runtime.node.Node`, started at construction, with blocking calls."""

    def __init__(
        self,
        config: NodeConfig,
        state_machine: StateMachine,
        *,
        fsync: bool = True,
        emulator: LinkEmulator | None = None,
        metrics: Metrics | None = None,
        listen_host: str | None = None,
        snapshot_log_bytes: int | None = SNAPSHOT_LOG_BYTES_DEFAULT,
        rng: random.Random | None = None,
        trace_events: Collection[str] = (),
        bootstrap: bool = False,
    ) -> None:
        """The arguments of :class:`~sdpaxos.runtime.node.Node`."""
        self._thread = _LoopThread(f"sdpaxos-node-{config.node_id}")
        self.node = Node(
            config,
            state_machine,
            fsync=fsync,
            emulator=emulator,
            metrics=metrics,
            listen_host=listen_host,
            snapshot_log_bytes=snapshot_log_bytes,
            rng=rng,
            trace_events=trace_events,
            bootstrap=bootstrap,
        )
        try:
            self._thread.call(self.node.start())
        except BaseException:
            self._thread.stop()
            raise
        self._closed = False

    def submit(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        wait: WaitName = "ready",
        timeout_s: float | None = None,
    ) -> bytes | None:
        """See :meth:`Node.submit`."""
        return self._thread.call(self.node.submit(payload, key=key, wait=wait, timeout_s=timeout_s))

    def read(
        self,
        key: bytes | None = None,
        request: bytes | None = None,
        *,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> bytes | None:
        """See :meth:`Node.read`."""
        return self._thread.call(self.node.read(key, request, timeout_s=timeout_s))

    def status(self) -> NodeStatus:
        async def status() -> NodeStatus:
            return self.node.status()

        return self._thread.call(status())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.call(self.node.stop())
        finally:
            self._thread.stop()

    def __enter__(self) -> SyncNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncClient:
    """A :class:`~sdpaxos.runtime.client.Client` with blocking calls (same arguments)."""

    def __init__(
        self,
        addresses: Sequence[tuple[str, int]],
        *,
        tls: TlsFiles | None = None,
        client_name: int = 0,
        attempt_timeout_s: float = ATTEMPT_TIMEOUT_S,
        rng: random.Random | None = None,
    ) -> None:
        """The arguments of :class:`~sdpaxos.runtime.client.Client`."""
        self._thread = _LoopThread("sdpaxos-client")
        self.client = Client(
            addresses,
            tls=tls,
            client_name=client_name,
            attempt_timeout_s=attempt_timeout_s,
            rng=rng,
        )
        self._closed = False

    def submit(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        wait: WaitName = "ready",
        timeout_s: float | None = None,
    ) -> bytes | None:
        """See :meth:`Client.submit`."""
        return self._thread.call(
            self.client.submit(payload, key=key, wait=wait, timeout_s=timeout_s)
        )

    def read(
        self,
        key: bytes | None = None,
        request: bytes | None = None,
        *,
        stale: bool = False,
        timeout_s: float = 10.0,
    ) -> bytes | None:
        """See :meth:`Client.read`."""
        return self._thread.call(self.client.read(key, request, stale=stale, timeout_s=timeout_s))

    def status(self, timeout_s: float = 5.0) -> dict[str, Any]:
        return self._thread.call(self.client.status(timeout_s))

    def admin(self, operation: str, argument: Any = None) -> Any:
        return self._thread.call(self.client.admin(operation, argument))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the client's loop and wait for it (for wrappers such
        as the kv-store's synchronous client)."""
        return self._thread.call(coro)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._thread.call(self.client.close())
        finally:
            self._thread.stop()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
