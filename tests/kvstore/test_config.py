"""The kv-store's configuration: the runtime's file plus [kvstore], every mistake named."""

from __future__ import annotations

import tomllib

import pytest

from kvstore.config import load_kv_config, parse_kv_config
from kvstore.local import make_kv_cluster
from sdpaxos.core.errors import ConfigError


def test_a_local_cluster_file_loads_for_every_node(tmp_path):
    path = make_kv_cluster(tmp_path, 3, users={"app": "pw"}, redis_tls=True)
    configs = [load_kv_config(path, k) for k in range(3)]
    addresses = {c.redis_address for c in configs}
    assert len(addresses) == 3
    assert configs[1].node.node_id == 1 and configs[1].tls and configs[1].users == {"app": "pw"}
    assert configs[0].reads == "linearizable"
    assert configs[0].node.emulator is not None  # paper3 by default


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda kv: kv.pop("redis"), "kvstore.redis: expected an array of 3"),
        (lambda kv: kv.update(redis=["a:1", "b:2"]), "kvstore.redis: expected an array of 3"),
        (
            lambda kv: kv["redis"].__setitem__(1, "nohost"),
            r"kvstore.redis\[1\]: expected host:port",
        ),
        (lambda kv: kv["redis"].__setitem__(2, kv["redis"][0]), r"redis\[2\]: same as replica 0"),
        (lambda kv: kv.update(tls="yes"), "kvstore.tls: expected true or false"),
        (lambda kv: kv.update(users={"app": ""}), "kvstore.users.app: expected a non-empty"),
        (lambda kv: kv.update(users={}), "kvstore.users: expected a table"),
        (lambda kv: kv.update(reads="eventual"), "kvstore.reads: expected"),
        (lambda kv: kv.update(clients_max=0), "kvstore.clients_max: expected a positive"),
        (lambda kv: kv.update(colour="blue"), "kvstore.colour: unknown key"),
    ],
)
def test_each_mistake_names_its_key(tmp_path, change, message):
    path = make_kv_cluster(tmp_path, 3, profile=None)
    raw = tomllib.loads(path.read_text())
    change(raw["kvstore"])
    with pytest.raises(ConfigError, match=message):
        parse_kv_config(raw, base_dir=path.parent, node_id=0)


def test_a_missing_section_or_a_redis_port_on_a_peer_address_is_refused(tmp_path):
    path = make_kv_cluster(tmp_path, 3, profile=None)
    raw = tomllib.loads(path.read_text())
    section = raw.pop("kvstore")
    with pytest.raises(ConfigError, match="kvstore: missing"):
        parse_kv_config(raw, base_dir=path.parent, node_id=0)
    peer = raw["cluster"]["replicas"][0]["address"]
    raw["kvstore"] = {**section, "redis": [peer, *section["redis"][1:]]}
    with pytest.raises(ConfigError, match="replica's own"):
        parse_kv_config(raw, base_dir=path.parent, node_id=0)


def test_redis_tls_needs_the_cluster_certificates(tmp_path):
    path = make_kv_cluster(tmp_path, 3, profile=None, insecure=True)
    raw = tomllib.loads(path.read_text())
    raw["kvstore"]["tls"] = True
    with pytest.raises(ConfigError, match=r"kvstore\.tls: needs the"):
        parse_kv_config(raw, base_dir=path.parent, node_id=0)


def test_make_kv_cluster_never_gives_a_redis_port_that_is_also_a_peer_port(tmp_path, monkeypatch):
    """The ports are free when drawn, not reserved: two draws may return the
    same port. The kv-store's Redis ports and the nodes' peer ports are one
    draw, so a cluster file never names one port twice (a CI run once got
    "kvstore.redis[2]: same as the replica's own (peer) address")."""
    import kvstore.local
    import sdpaxos.runtime.local

    def same_ports_each_call(count: int, host: str = "127.0.0.1") -> list[int]:
        return [20000 + k for k in range(count)]  # what two unlucky draws look like

    monkeypatch.setattr(kvstore.local, "free_ports", same_ports_each_call)
    monkeypatch.setattr(sdpaxos.runtime.local, "free_ports", same_ports_each_call)
    path = kvstore.local.make_kv_cluster(tmp_path, 3, profile=None)
    configs = [load_kv_config(path, k) for k in range(3)]
    redis = {c.redis_address[1] for c in configs}
    peers = {c.node.replicas[k].port for k, c in enumerate(configs)}
    assert len(redis) == 3 and len(peers) == 3 and not redis & peers


def test_a_spare_node_finds_its_addresses_and_region_in_the_file(tmp_path):
    path = make_kv_cluster(tmp_path, 3, profile="paper3", spares=2)
    spare = load_kv_config(path, 0).spares[1]
    config = load_kv_config(path, 4)
    assert (spare.id, spare.region) == (4, "OR")  # replica 1's region
    assert config.redis_address == spare.redis
    me = config.node.me
    assert ((me.host, me.port), me.region) == (spare.address, "OR")
    assert (tmp_path / "certs" / "node4.pem").exists() and (tmp_path / "node4").is_dir()
    with pytest.raises(ConfigError, match=r"node\.id"):  # neither a replica nor a spare
        load_kv_config(path, 5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s[0].update(id=1), r"spares\[0\]\.id: node 1 is a replica"),
        (lambda s: s[1].update(id=3), r"spares\[1\]\.id: node 3 is named twice"),
        (lambda s: s[0].update(id=-1), r"spares\[0\]\.id: expected a node id"),
        (lambda s: s[0].update(redis="nowhere"), r"spares\[0\]\.redis: expected host:port"),
        (
            lambda s: s[1].update(redis=s[0]["address"]),
            r"spares\[1\]\.redis: same as spare 3's address",
        ),
        (lambda s: s[0].update(colour="blue"), r"spares\[0\]\.colour: unknown key"),
        (lambda s: s.append(5), r"spares\[2\]: expected a table"),
    ],
)
def test_each_spare_mistake_names_its_key(tmp_path, change, message):
    path = make_kv_cluster(tmp_path, 3, profile=None, spares=2)
    raw = tomllib.loads(path.read_text())
    change(raw["kvstore"]["spares"])
    with pytest.raises(ConfigError, match=message):
        parse_kv_config(raw, base_dir=path.parent, node_id=0)
