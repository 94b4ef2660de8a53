"""``python -m sdpaxos fuzz``: throw random and mutated frames at a live node.

::

    python -m sdpaxos fuzz --frames 100000 --seed 1              # own 3-node cluster
    python -m sdpaxos fuzz --frames 100000 --config cluster.toml --id 2

Without ``--config`` the command starts a local cluster of three nodes in this
process (TLS on, no fsync, in a temporary directory) and fuzzes node
``--target`` (0). With ``--config`` it fuzzes node ``--id`` of a running
cluster, using that cluster's certificates (the fuzzer holds them all, as an
insider would).

While fuzzing, a normal :class:`~sdpaxos.runtime.client.Client` of the fuzzed
node keeps submitting commands; afterwards one more command is executed and
every node answers a linearizable read. The run passes when the node kept
serving (commands committed during and after, every refusal closed its
connection, the counter matches) and every replica answers the same (for the
built-in ``digest`` app: the same count and digest of commands executed).

The pieces, in :mod:`sdpaxos.testing`: what is sent and why
(:mod:`~sdpaxos.testing.fuzzer`), how each frame is judged before it goes
(:mod:`~sdpaxos.testing.judging`), the frames and their mutations
(:mod:`~sdpaxos.testing.mutations`), and the result with its caveat on the
counter (:mod:`~sdpaxos.testing.result`). This module runs them against a
cluster and is the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sdpaxos
from sdpaxos.runtime.certs import make_cluster_certs
from sdpaxos.runtime.config import NodeConfig, TlsFiles, load_config
from sdpaxos.runtime.status import refusals
from sdpaxos.testing.fuzzer import (
    CONCURRENCY_DEFAULT,
    HANDSHAKE_ATTEMPTS,
    PER_CONNECTION_DEFAULT,
    SILENT_CONNECTIONS,
    Fuzzer,
    Target,
)
from sdpaxos.testing.result import FuzzResult, ReasonCounter

__all__ = ["fuzz_cluster", "fuzz_local", "main"]

logger = logging.getLogger(__name__)

#: Where the library's code is, and where these tools' (an exception in them is not the node's).
_LIBRARY_DIR = Path(sdpaxos.__file__).resolve().parent
_TOOLS_DIR = Path(__file__).resolve().parent


def _in_library(filename: str) -> bool:
    """Whether ``filename`` is the library's code, not these tools': an exception
    through it, reported by the event loop, is a node's error. By directory, not
    by name (a check for ``fuzz`` in the path, from when the fuzzer was one file,
    also skipped the whole library of a checkout whose path had ``fuzz`` in it)."""
    path = Path(filename).resolve()
    return path.is_relative_to(_LIBRARY_DIR) and not path.is_relative_to(_TOOLS_DIR)


async def _load(client: Any, stop: asyncio.Event, res: FuzzResult) -> None:
    """Commands through a normal client of the fuzzed node while the fuzz runs."""
    k = 0
    while not stop.is_set():
        k += 1
        try:
            await client.submit(f"fuzz-load-{k}".encode(), timeout_s=10.0)
            res.commands_committed += 1
        except Exception as exc:
            res.commands_failed += 1
            logger.warning("fuzz: a command failed while fuzzing: %s", exc)
        await asyncio.sleep(0.005)


async def fuzz_cluster(
    path: Path | str,
    target_id: int,
    *,
    frames: int,
    seed: int,
    nodes: Sequence[Any] = (),
    per_connection: int = PER_CONNECTION_DEFAULT,
    concurrency: int = CONCURRENCY_DEFAULT,
    silent: int = SILENT_CONNECTIONS,
    handshakes: int = HANDSHAKE_ATTEMPTS,
    progress: Callable[[FuzzResult], None] | None = None,
) -> FuzzResult:
    """Fuzz node ``target_id`` of the running cluster of ``path`` while a client
    commits commands through it; then check every replica answers the same.

    ``nodes``: the cluster's :class:`~sdpaxos.runtime.node.Node` objects when
    they run in this process (their state machines are compared too).
    """
    from sdpaxos.runtime.client import Client

    target = Target.from_config(path, target_id)
    config: NodeConfig = load_config(path, target_id)
    with tempfile.TemporaryDirectory(prefix="sdpaxos-fuzz-foreign-") as foreign_dir:
        make_cluster_certs(foreign_dir, 1, clients=0)
        foreign = TlsFiles(
            Path(foreign_dir) / "ca.pem",
            Path(foreign_dir) / "node0.pem",
            Path(foreign_dir) / "node0.key",
        )
        fuzzer = Fuzzer(
            target,
            frames=frames,
            seed=seed,
            per_connection=per_connection,
            concurrency=concurrency,
            foreign=foreign,
            silent=silent,
            handshakes=handshakes,
        )
        res = fuzzer.result
        reasons = ReasonCounter(res)
        # The logger of the module that counts and logs every refusal, by the
        # function itself: a fixed name went silent when that moved out of node.py.
        node_logger = refusals
        node_logger.addHandler(reasons)
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()

        def on_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            exc = context.get("exception")
            tb = exc.__traceback__ if exc is not None else None
            files = []
            while tb is not None:
                files.append(tb.tb_frame.f_code.co_filename)
                tb = tb.tb_next
            if any(_in_library(f) for f in files):
                res.node_errors.append(f"{context.get('message')}: {exc!r}")
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(on_error)
        client_files = target.certs[("client", 0)]
        addresses = [(r.host, r.port) for r in config.replicas]
        me = (config.me.host, config.me.port)
        client = Client([me], tls=client_files, rng=random.Random(seed))
        try:
            res.rejected_before = int((await client.status(30.0))["frames_rejected"])
            stop = asyncio.Event()
            load = asyncio.ensure_future(_load(client, stop, res))
            try:
                await fuzzer.run(progress)
            finally:
                stop.set()
                await load
            try:
                await client.submit(b"fuzz-final", wait="executed", timeout_s=30.0)
                res.final_ok = True
            except Exception as exc:
                logger.error("fuzz: the final command failed: %s", exc)
            res.rejected_after = int((await client.status(30.0))["frames_rejected"])
            for k, address in enumerate(addresses):
                reader = Client([address], tls=client_files, rng=random.Random(seed + k))
                try:
                    value = await reader.read(None, b"", timeout_s=30.0)
                    res.answers[k] = value.hex() if isinstance(value, bytes) else repr(value)
                    res.executed[k] = int((await reader.status(30.0))["executed_upto"])
                except Exception as exc:
                    res.answers[k] = f"no answer: {exc!r}"
                finally:
                    await reader.close()
            answers = set(res.answers.values())
            res.agree = len(answers) == 1 and not next(iter(answers)).startswith("no answer")
            states = {
                (n.state_machine.count, n.state_machine.digest)
                for n in nodes
                if hasattr(n.state_machine, "digest")
            }
            if len(states) > 1:
                res.agree = False
        finally:
            await client.close()
            node_logger.removeHandler(reasons)
            loop.set_exception_handler(previous)
    res.check()
    return res


async def fuzz_local(
    directory: Path | str,
    *,
    frames: int,
    seed: int,
    target_id: int = 0,
    replicas: int = 3,
    progress: Callable[[FuzzResult], None] | None = None,
    **kw: Any,
) -> FuzzResult:
    """Start a local cluster in this process (TLS on, no fsync) and fuzz one node."""
    from sdpaxos.runtime.apps import DigestLog
    from sdpaxos.runtime.local import make_local_cluster, node_configs
    from sdpaxos.runtime.node import Node

    path = make_local_cluster(directory, replicas)
    nodes = [
        Node(cfg, DigestLog(), fsync=False, rng=random.Random(seed + cfg.node_id), bootstrap=True)
        for cfg in node_configs(path)
    ]
    started: list[Node] = []
    try:
        for node in nodes:
            await node.start()
            started.append(node)
        return await fuzz_cluster(
            path, target_id, frames=frames, seed=seed, nodes=nodes, progress=progress, **kw
        )
    finally:
        for node in reversed(started):
            await node.stop()


# -------------------------------------------------------------------- CLI


def _progress(total: int) -> Callable[[FuzzResult], None]:
    def show(res: FuzzResult) -> None:
        print(
            f"fuzz: {res.frames}/{total} frames, {res.connections} connections, "
            f"{res.closed_by_node} closed by the node, {res.commands_committed} commands, "
            f"{res.frames_per_s:.0f} frames/s",
            file=sys.stderr,
            flush=True,
        )

    return show


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m sdpaxos fuzz", description=__doc__.split("\n")[0] if __doc__ else None
    )
    p.add_argument("--frames", type=int, default=100_000, help="frames to send (default 100000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config", default=None, help="a running cluster's TOML file")
    p.add_argument("--id", type=int, default=None, help="with --config: the node to fuzz")
    p.add_argument("--target", type=int, default=0, help="without --config: the node to fuzz")
    p.add_argument("--per-connection", type=int, default=PER_CONNECTION_DEFAULT)
    p.add_argument("--concurrency", type=int, default=CONCURRENCY_DEFAULT)
    p.add_argument("--dir", default=None, help="without --config: where the cluster lives")
    p.add_argument("--log", default=None, help="the nodes' log file (default DIR/fuzz.log)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    args = p.parse_args(argv)
    if args.config is not None and args.id is None:
        p.error("--config needs --id (the node to fuzz)")
    if args.frames < 1:
        p.error("--frames must be positive")
    from sdpaxos.runtime.cli import run_loop

    kw: dict[str, Any] = {
        "frames": args.frames,
        "seed": args.seed,
        "per_connection": args.per_connection,
        "concurrency": args.concurrency,
        "progress": _progress(args.frames),
    }
    with tempfile.TemporaryDirectory(prefix="sdpaxos-fuzz-") as tmp:
        root = Path(args.dir) if args.dir else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        # The node logs every refusal: to a file, not the terminal.
        log_path = Path(args.log) if args.log else root / "fuzz.log"
        handler = logging.FileHandler(log_path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
        logging.getLogger().setLevel(logging.INFO)
        print(f"fuzz: logging to {log_path}", file=sys.stderr)
        try:
            if args.config is not None:
                result = run_loop(fuzz_cluster(args.config, args.id, **kw))
            else:
                result = run_loop(fuzz_local(root, target_id=args.target, **kw))
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print("\n".join(result.lines()))
    return 0 if result.ok else 1
