"""The README's embedding example runs as written (docs that cannot rot)."""

import re
from pathlib import Path

from sdpaxos.core import CAccept, CRequest, MemoryStorage


def test_the_readme_embedding_example_runs() -> None:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README.md has a python example"
    scope: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)
    storage = scope["storage"]
    rd = scope["rd"]
    assert isinstance(storage, MemoryStorage) and len(storage) == 1  # the accepted C-instance
    kinds = sorted(type(m).__name__ for _, m in rd.messages)  # type: ignore[attr-defined]
    assert kinds == [CAccept.__name__, CRequest.__name__]


def test_the_core_tables_list_exactly_the_core_modules() -> None:
    """README's "The core, one module per role" names every core module once, and
    only modules that exist; its role modules are the import contract's."""
    import tomllib

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text.split("### The core, one module per role", 1)[1].split("\n## ", 1)[0]
    section = section.split("\n### ", 1)[0]
    listed = re.findall(r"^\| `(\w+)` \|", section, flags=re.M)
    core = Path(__file__).resolve().parent.parent / "sdpaxos" / "core"
    # The facade, the package and the plain value modules are described elsewhere.
    not_in_tables = {
        "__init__",
        "replica",
        "config",
        "errors",
        "messages",
        "ready",
        "storage",
        "types",
        "view_change",
    }
    modules = {p.stem for p in core.glob("*.py")} - not_in_tables
    assert sorted(listed) == sorted(modules)
    pyproject = tomllib.loads((core.parent.parent / "pyproject.toml").read_text())
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    (independent,) = [
        c
        for c in contracts
        if c["type"] == "independence" and c["modules"][0].startswith("sdpaxos.core.")
    ]
    roles = {m.removeprefix("sdpaxos.core.") for m in independent["modules"]}
    first_table = section.split("| shared piece |")[0]
    assert roles == set(re.findall(r"^\| `(\w+)` \|", first_table, flags=re.M))


def test_the_readme_runtime_example_runs(tmp_path, capsys, monkeypatch) -> None:
    """The embedding example of "Running nodes" runs a real three-node cluster."""
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # Counter
    exec(compile(blocks[1], "README.md", "exec"), scope)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "b'6'" and out[1] == "b'6'"
    assert out[2].startswith("NodeStatus(id=2")


def test_the_readme_cluster_file_parses_and_its_commands_exist(tmp_path) -> None:
    from sdpaxos.runtime.cli import main as cli_main
    from sdpaxos.runtime.config import parse_config

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    toml_text, kv_text = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    import tomllib

    certs = tmp_path / "certs"
    certs.mkdir()
    for name in ("ca.pem", "node1.pem", "node1.key"):
        (certs / name).write_text("x")
    cfg = parse_config(tomllib.loads(toml_text), base_dir=tmp_path, node_id=1)
    assert [r.region for r in cfg.replicas] == ["CA", "OR", "OH"]
    assert str(cfg.data_dir) == "/var/lib/sdpaxos/node1"
    assert cfg.cluster.snapshot_slots_min == 100000
    assert cfg.protocol == "sdpaxos"
    # The kv-store's section, added to the same file, parses too.
    from kvstore.config import parse_kv_config

    kv = parse_kv_config(tomllib.loads(toml_text + kv_text), base_dir=tmp_path, node_id=1)
    assert kv.redis_address == ("10.0.0.2", 6379) and kv.tls and kv.users == {"app": "s3cret"}
    commands = set(re.findall(r"python -m sdpaxos (\w+)", text))
    assert commands >= {"local", "status", "admin", "fuzz", "certs", "node"}
    for command in commands - {"certs", "fuzz"}:
        try:
            cli_main([command, "--help"])
        except SystemExit as exc:
            assert exc.code == 0, command


def test_the_readme_kvstore_commands_exist() -> None:
    from kvstore.cli import main as kv_main

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    commands = set(re.findall(r"^kvstore (\w+)", text, flags=re.M))
    commands |= set(re.findall(r"`kvstore (\w+)", text))
    assert commands >= {"local", "status", "serve", "demo"}
    for command in commands:
        try:
            kv_main([command, "--help"])
        except SystemExit as exc:
            assert exc.code == 0, command


def test_the_readme_names_exactly_the_protocols_a_node_runs() -> None:
    """The cluster file's comment and the baselines paragraph list the protocols
    by name; a protocol added to (or dropped from) ``sdpaxos.protocols`` must be
    added to (or dropped from) both."""
    from sdpaxos.protocols import PROTOCOL_NAMES

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    comment = re.search(r"# the protocol: (.*)\n", text)
    assert comment is not None
    listed = [name.replace("(default)", "").strip() for name in comment.group(1).split(",")]
    assert listed == list(PROTOCOL_NAMES)
    start = text.index("The baselines run on the same nodes by name")
    paragraph = text[start : text.index("\n\n", start)]
    assert set(re.findall(r'"(\w+)"', paragraph)) | {"sdpaxos"} == set(PROTOCOL_NAMES)


def test_the_runtime_table_lists_exactly_the_runtime_modules() -> None:
    """README's "The runtime, one module per job" names every runtime module
    once, and only modules that exist; the two files it points newcomers to
    hold what it says they hold."""
    root = Path(__file__).resolve().parent.parent
    text = (root / "README.md").read_text()
    section = text.split("### The runtime, one module per job", 1)[1].split("\n## ", 1)[0]
    section = section.split("\n### ", 1)[0]
    listed = re.findall(r"^\| `(\w+)` \|", section, flags=re.M)
    runtime = root / "sdpaxos" / "runtime"
    assert sorted(listed) == sorted(p.stem for p in runtime.glob("*.py") if p.stem != "__init__")
    assert len(listed) == len(set(listed))
    from sdpaxos.runtime.driver import Driver
    from sdpaxos.runtime.peers import Peers

    assert "`Peers.frame`" in section and "`Peers.peer_frame`" in section
    assert callable(Peers.frame) and callable(Peers.peer_frame)
    for name in ("_flush", "_carry_out", "_written"):
        assert f"`Driver.{name}`" in section or f"`{name}`" in section
        assert callable(getattr(Driver, name))
