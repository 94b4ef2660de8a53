"""The public API as an embedder's type checker sees it.

``from sdpaxos import Node`` is resolved lazily at run time (importing
``sdpaxos.core`` must not import the runtime), which used to leave every name
``Any`` to mypy and editors. These tests type-check a small embedder program
with ``mypy --strict`` and read what mypy says the names are.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import sdpaxos

ROOT = Path(__file__).resolve().parent.parent

EMBEDDER = """
from sdpaxos import Client, Node, NodeConfig, SessionExpired, SyncClient, SyncNode, load_config


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def apply(self, payload: bytes) -> bytes:
        self.n += int(payload)
        return str(self.n).encode()

    def snapshot(self) -> bytes:
        return str(self.n).encode()

    def restore(self, data: bytes) -> None:
        self.n = int(data)


async def main(config: NodeConfig) -> None:
    async with Node(config, Counter()) as node:
        reveal_type(node)
        reveal_type(node.status())
        result = await node.submit(b"1", wait="executed")
        reveal_type(result)
        try:
            await node.submit(b"1", wait="done")  # not a wait
        except SessionExpired:
            pass
    client = Client([("127.0.0.1", 7000)])
    await client.submit(b"1", wait="done")
    SyncNode(config, Counter()).submit(b"1", wait="done")
    SyncClient([("127.0.0.1", 7000)]).submit(b"1", wait="done")
    reveal_type(load_config)
"""


@pytest.fixture(scope="module")
def mypy_says(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    pytest.importorskip("mypy")
    work = tmp_path_factory.mktemp("embedder")
    (work / "embedder.py").write_text(EMBEDDER.lstrip("\n"))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(work / ".mypy_cache"),
            str(work / "embedder.py"),
        ],
        cwd=ROOT,  # the package is found here, as an editable install is not followed
        capture_output=True,
        text=True,
    )
    assert "embedder.py" in run.stdout, run.stdout + run.stderr
    return [line.split("embedder.py:", 1)[1] for line in run.stdout.splitlines() if line]


def test_the_names_are_their_real_classes_not_any(mypy_says: list[str]) -> None:
    revealed = [line for line in mypy_says if "Revealed type" in line]
    assert any('"sdpaxos.runtime.node.Node"' in line for line in revealed), revealed
    assert any('"sdpaxos.runtime.status.NodeStatus"' in line for line in revealed), revealed
    assert any('"bytes | None"' in line for line in revealed), revealed
    assert any("def (path:" in line and "config.NodeConfig" in line for line in revealed), revealed
    assert not any('"Any"' in line for line in revealed), revealed


def test_wait_is_the_same_literal_on_every_entry_point(mypy_says: list[str]) -> None:
    errors = [line for line in mypy_says if "error:" in line]
    # One error for each wait="done", on the lines that say it, and nothing else.
    lines = EMBEDDER.lstrip("\n").splitlines()
    done = [k for k, line in enumerate(lines, start=1) if 'wait="done"' in line]
    assert len(done) == 4
    assert [int(line.split(":", 1)[0]) for line in errors] == done, errors
    assert all("Literal['ready', 'executed']" in line for line in errors), errors


def test_every_lent_name_is_typed_and_real() -> None:
    source = (ROOT / "sdpaxos" / "__init__.py").read_text()
    for name, module in sdpaxos._RUNTIME_NAMES.items():
        assert f"from {module} import" in source and name in source, name
        assert getattr(sdpaxos, name) is getattr(__import__(module, fromlist=[name]), name)
    assert set(sdpaxos.__all__) == {*sdpaxos._RUNTIME_NAMES, "__version__"}
    assert (ROOT / "sdpaxos" / "py.typed").exists() and (ROOT / "kvstore" / "py.typed").exists()


def test_one_session_expired_for_node_and_client() -> None:
    from sdpaxos.runtime import client, node

    assert node.SessionExpired is client.SessionExpired is sdpaxos.SessionExpired
    assert issubclass(sdpaxos.SessionExpired, sdpaxos.ClientError)
