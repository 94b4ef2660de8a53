"""A node's TOML configuration: a good file loads; every mistake names its key."""

from pathlib import Path

import pytest

from sdpaxos.core.errors import ConfigError
from sdpaxos.runtime.config import load_config, node_emulator, parse_config

GOOD = """
[cluster]
sequencer = 1
replicas = [
    { id = 0, address = "10.0.0.1:7000", region = "CA" },
    { id = 1, address = "10.0.0.2:7000", region = "OR" },
    { id = 2, address = "[::1]:7001" },
]

[cluster.protocol]
heartbeat_ms = 400
lease_ms = 400
snapshot_slots_min = 5000

[node]
id = 2
data_dir = "data/two"

[tls]
ca = "ca.pem"
cert = "node.pem"
key = "node.key"
"""


def _write(tmp_path: Path, text: str) -> Path:
    for name in ("ca.pem", "node.pem", "node.key"):
        (tmp_path / name).write_text("-----")
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return path


def test_a_good_file_loads_with_paths_relative_to_it(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, GOOD))
    assert cfg.cluster.replicas == 3 and cfg.cluster.sequencer == 1
    assert cfg.cluster.heartbeat_ms == 400 and cfg.cluster.snapshot_slots_min == 5000
    assert [(r.host, r.port, r.region) for r in cfg.replicas] == [
        ("10.0.0.1", 7000, "CA"),
        ("10.0.0.2", 7000, "OR"),
        ("::1", 7001, "R2"),
    ]
    assert cfg.node_id == 2 and cfg.me.port == 7001
    assert cfg.data_dir == tmp_path / "data/two"
    assert cfg.tls is not None and cfg.tls.ca == tmp_path / "ca.pem"
    assert load_config(tmp_path / "cluster.toml", node_id=0).node_id == 0


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "heartbeat_ms = 400",
            "heartbeat_msec = 400",
            r"cluster\.protocol\.heartbeat_msec: unknown",
        ),
        ("[node]", "[nodes]", r"nodes: unknown key"),
        ('"10.0.0.2:7000"', '"10.0.0.2"', r"cluster\.replicas\[1\]\.address: expected host:port"),
        ('"10.0.0.2:7000"', '"10.0.0.1:7000"', r"replicas\[1\]\.address: same as replica 0"),
        ("{ id = 1,", "{ id = 5,", r"cluster\.replicas\[1\]\.id: expected 1"),
        ("id = 2\ndata_dir", "id = 3\ndata_dir", r"node\.id: expected a replica id in 0\.\.2"),
        (
            "sequencer = 1",
            "sequencer = 7",
            r"cluster\.sequencer: expected a replica id in 0\.\.2, got 7",
        ),
        ("sequencer = 1", 'sequencer = "zero"', r"cluster\.sequencer: expected .* got 'zero'$"),
        ("sequencer = 1", "sequencer = true", r"cluster\.sequencer: expected .* got True$"),
        # Without heartbeat_ms the heartbeat is derived from the lease: a bad lease
        # is named, not the heartbeat the file never set.
        ("heartbeat_ms = 400\nlease_ms = 400", "lease_ms = 0", r"cluster: lease_ms must be > 0$"),
        ("heartbeat_ms = 400\nlease_ms = 400", "lease_ms = -5", r"cluster: lease_ms must be a"),
        ("heartbeat_ms = 400\nlease_ms = 400", "lease_ms = inf", r"cluster: lease_ms must be a"),
        ("heartbeat_ms = 400\nlease_ms = 400", 'lease_ms = "x"', r"cluster: lease_ms must be a"),
        (
            "sequencer = 1",
            'name = "my cluster"\nsequencer = 1',
            r"cluster\.name: expected up to 64",
        ),
        ("sequencer = 1", "name = 7\nsequencer = 1", r"cluster\.name: expected .* got 7$"),
        ("sequencer = 1", f'name = "{"x" * 65}"\nsequencer = 1', r"cluster\.name: expected up to"),
        ("lease_ms = 400", "lease_ms = 100", r"cluster: lease_ms \(100\) must be >= heartbeat_ms"),
        ('key = "node.key"', 'key = "missing.key"', r"tls\.key: no such file"),
        ('key = "node.key"', "", r"tls\.key: missing: TLS is on by default"),
        ("snapshot_slots_min = 5000", "snapshot_slots_min = 0", r"snapshot_slots_min must be"),
        ("[tls]", "[tls]\ninsecure = 1", r"tls\.insecure: expected true or false"),
        ("sequencer = 1", "sequencer = [", r"not valid TOML"),
    ],
)
def test_every_mistake_names_its_key(tmp_path: Path, old: str, new: str, message: str) -> None:
    assert old in GOOD
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, GOOD.replace(old, new, 1)))


def test_the_cluster_name_is_the_files_or_the_default(tmp_path: Path) -> None:
    from sdpaxos.runtime.config import CLUSTER_NAME_DEFAULT

    assert (
        load_config(_write(tmp_path, GOOD)).cluster_name
        == CLUSTER_NAME_DEFAULT
        == "sdpaxos-cluster"
    )
    named = GOOD.replace("sequencer = 1", 'name = "prod-eu.2"\nsequencer = 1')
    assert load_config(_write(tmp_path, named)).cluster_name == "prod-eu.2"


def test_a_local_cluster_its_nodes_would_refuse_is_refused_and_nothing_written(
    tmp_path: Path,
) -> None:
    from sdpaxos.runtime.local import make_local_cluster

    for bad in [
        {"replicas": 4},  # N must be odd
        {"replicas": 3, "protocol": {"lease_ms": 0}},
        {"replicas": 3, "sequencer": 3},
        {"replicas": 3, "emulator": {"profile": "nope"}},
    ]:
        with pytest.raises(ValueError, match="the local cluster's file: "):
            make_local_cluster(tmp_path / "c", **bad)  # type: ignore[arg-type]
        assert not (tmp_path / "c").exists(), bad
    with pytest.raises(ValueError, match="replicas must be an odd number"):
        make_local_cluster(tmp_path / "c", 4)


def test_insecure_needs_no_certificates(tmp_path: Path) -> None:
    raw = {
        "cluster": {"replicas": [{"address": "127.0.0.1:7000"}]},
        "node": {"id": 0},
        "tls": {"insecure": True},
    }
    cfg = parse_config(raw, base_dir=tmp_path)
    assert cfg.tls is None and cfg.cluster.replicas == 1


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_config(tmp_path / "nope.toml")


def test_id_in_paths_becomes_the_node_id(tmp_path):
    """One file for the whole cluster: ``{id}`` in data_dir and TLS paths is the node's id."""
    for name in ("ca.pem", "node1.pem", "node1.key"):
        (tmp_path / name).write_text("x")
    raw = {
        "cluster": {"replicas": [{"address": f"127.0.0.1:{7000 + k}"} for k in range(3)]},
        "node": {"data_dir": "data/node{id}"},
        "tls": {"ca": "ca.pem", "cert": "node{id}.pem", "key": "node{id}.key"},
    }
    cfg = parse_config(raw, base_dir=tmp_path, node_id=1)
    assert cfg.data_dir == tmp_path / "data/node1"
    assert cfg.tls is not None and cfg.tls.cert == tmp_path / "node1.pem"
    with pytest.raises(ConfigError, match=r"tls\.cert: no such file: .*node2\.pem"):
        parse_config(raw, base_dir=tmp_path, node_id=2)


def _emulated(section, regions=("CA", "OR", "OH")):
    return {
        "cluster": {
            "replicas": [
                {"address": f"127.0.0.1:{7000 + k}", "region": r} for k, r in enumerate(regions)
            ]
        },
        "node": {"id": 0},
        "tls": {"insecure": True},
        "emulator": section,
    }


def test_emulator_section_builds_a_profile_and_settings():
    cfg = parse_config(_emulated({"profile": "paper5", "jitter_ms": 2.5}))
    assert cfg.emulator is not None
    assert cfg.emulator.profile.name == "paper5"
    assert cfg.emulator.settings.jitter_ms == 2.5
    assert parse_config(_emulated({"profile": "paper3"})).emulator.settings.loss_pct == 0


@pytest.mark.parametrize(
    ("section", "regions", "match"),
    [
        ({}, ("CA", "OR", "OH"), r"emulator\.profile: expected"),
        ({"profile": "paper9"}, ("CA", "OR", "OH"), r"emulator\.profile: unknown profile"),
        ({"profile": "paper3"}, ("CA", "OR", "SEL"), r"cluster\.replicas: a region .*SEL"),
        ({"profile": "paper5", "loss_pct": 99}, ("CA", "OR", "OH"), r"emulator\.loss_pct"),
        ({"profile": "paper5", "jitter": 1}, ("CA", "OR", "OH"), r"emulator\.jitter: unknown key"),
    ],
)
def test_emulator_section_errors_name_the_key(section, regions, match):
    with pytest.raises(ConfigError, match=match):
        parse_config(_emulated(section, regions))


def test_the_sequencer_renews_its_lease_three_times_per_lease_unless_the_file_says(tmp_path):
    path = _write(tmp_path, GOOD)
    assert load_config(path).cluster.heartbeat_ms == 400  # the file's own
    path.write_text(GOOD.replace("heartbeat_ms = 400\n", ""))
    cfg = load_config(path).cluster
    assert cfg.lease_ms == 400 and cfg.heartbeat_ms == pytest.approx(400 / 3)
    path.write_text(GOOD.replace("heartbeat_ms = 400\nlease_ms = 400\n", ""))
    cfg = load_config(path).cluster
    assert cfg.lease_ms == 500 and cfg.heartbeat_ms == pytest.approx(500 / 3)


def test_local_ports_are_free_and_below_the_ephemeral_range():
    # Outgoing connections take source ports from the ephemeral range: a local
    # cluster's listening ports must not come from it, or a node dialling a peer
    # can take a port another node is about to listen on.
    import socket

    from sdpaxos.runtime.local import _ephemeral_low, free_ports

    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(p < _ephemeral_low() for p in ports)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


@pytest.mark.parametrize(
    ("region", "delays_ms"),
    [("OR", [10.0, 0.01, 34.0]), ("Atlantis", [0.0, 0.0, 0.0])],
    ids=["in-profile", "unknown-region"],
)
def test_a_new_nodes_emulator_delays_its_links_from_its_region(region, delays_ms):
    """A node outside the file's list (id 5) gets its region's delays to the
    file's replicas; in a region the profile lacks, links without delay, but an
    emulator all the same: its peers' frames come behind DUE marks, which a node
    without one refuses (its connections would close)."""
    raw = _emulated({"profile": "paper3"})
    raw["node"] = {"id": 5, "address": "127.0.0.1:7005", "region": region}
    cfg = parse_config(raw)
    assert not cfg.initial_member
    emu = node_emulator(cfg)
    assert emu is not None and emu.me == 5
    assert [emu.delay_ms(j) for j in range(3)] == delays_ms
    assert node_emulator(parse_config(_emulated({"profile": "paper3"}))).me == 0
    no_profile = _emulated({"profile": "paper3"})
    del no_profile["emulator"]
    assert node_emulator(parse_config(no_profile)) is None
