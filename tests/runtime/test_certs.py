"""Cluster certificates: issued by the cluster CA, accepted by TLS both ways,
refused when another CA issued them; the identity is read from the subject."""

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from sdpaxos.__main__ import main as sdpaxos_main
from sdpaxos.runtime.certs import identity_of, main, make_cluster_certs


def _server_ctx(d: Path, who: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / f"{who}.pem", d / f"{who}.key")
    ctx.load_verify_locations(d / "ca.pem")
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _client_ctx(ca_dir: Path, cert_dir: Path, who: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_cert_chain(cert_dir / f"{who}.pem", cert_dir / f"{who}.key")
    ctx.load_verify_locations(ca_dir / "ca.pem")
    return ctx


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> str | None:
    """Mutual TLS over a loopback socket pair; the peer's common name the server
    saw, or None if the handshake failed."""
    a, b = socket.socketpair()
    seen: list[str | None] = [None]

    def serve() -> None:
        try:
            with server.wrap_socket(a, server_side=True) as s:
                cert = s.getpeercert()
                subject = dict(x[0] for x in cert["subject"]) if cert else {}
                seen[0] = subject.get("commonName")
        except (ssl.SSLError, OSError):
            pass

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client.wrap_socket(b, server_hostname="localhost"):
            pass
    except (ssl.SSLError, OSError):
        pass
    t.join(timeout=10)
    return seen[0]


def test_nodes_and_clients_authenticate_each_other(tmp_path: Path) -> None:
    files = make_cluster_certs(tmp_path, nodes=3, clients=1)
    assert tmp_path / "node2.pem" in files and tmp_path / "client0.key" in files
    assert stat.S_IMODE((tmp_path / "node0.key").stat().st_mode) == 0o600
    server = _server_ctx(tmp_path, "node0")
    assert _handshake(server, _client_ctx(tmp_path, tmp_path, "node1")) == "node1"
    assert _handshake(server, _client_ctx(tmp_path, tmp_path, "client0")) == "client0"


def test_a_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    make_cluster_certs(ours, nodes=2, clients=0)
    make_cluster_certs(theirs, nodes=2, clients=0)
    server = _server_ctx(ours, "node0")
    # A client trusting our CA but holding a certificate of another CA.
    assert _handshake(server, _client_ctx(ours, theirs, "node1")) is None


def test_the_identity_is_in_the_subject(tmp_path: Path) -> None:
    make_cluster_certs(tmp_path, nodes=2, clients=0)
    cert = x509.load_pem_x509_certificate((tmp_path / "node1.pem").read_bytes())
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert identity_of(str(common)) == ("node", 1)
    assert identity_of("client12") == ("client", 12)
    for bad in ("node", "node01", "nodex", "admin0", "node-1"):
        assert identity_of(bad) is None


def test_the_command_writes_the_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path), "--nodes", "1", "--clients", "0"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ca.key",
        "ca.pem",
        "node0.key",
        "node0.pem",
    ]
    assert "node0.pem" in capsys.readouterr().out


def test_python_m_sdpaxos_certs_is_the_same_command(tmp_path: Path) -> None:
    assert sdpaxos_main(["certs", "--out", str(tmp_path), "--nodes", "2", "--clients", "0"]) == 0
    assert (tmp_path / "node1.pem").is_file()
    assert sdpaxos_main(["nonsense"]) == 2
