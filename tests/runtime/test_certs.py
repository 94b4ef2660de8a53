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


def _bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_an_existing_ca_is_never_replaced_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(tmp_path), "--nodes", "2"]) == 0
    capsys.readouterr()
    before = _bytes(tmp_path)
    assert main(["--out", str(tmp_path), "--nodes", "2"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {tmp_path / 'ca.pem'} exists: refusing to replace the cluster's CA and keys"
        " (--force replaces them)\n"
    )
    assert _bytes(tmp_path) == before  # not a byte changed
    # A directory with other files is fine; --force replaces the CA.
    assert main(["--out", str(tmp_path), "--nodes", "2", "--force"]) == 0
    assert _bytes(tmp_path)["ca.pem"] != before["ca.pem"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "not a host!!"], "argument --host: host 'not a host!!': expected an IP"),
        (["--host=-bad.example"], "argument --host: host '-bad.example'"),
        (["--host", "bad-.example"], "argument --host: host 'bad-.example'"),
        (["--host", "a..b"], "argument --host: host 'a..b'"),
        (["--host", "a" * 64 + ".example"], "argument --host: host 'aaaa"),
        (["--nodes", "100000"], "argument --nodes: expected an integer in 1..256, got 100000"),
        (["--nodes", "0"], "argument --nodes: expected an integer in 1..256, got 0"),
        (["--clients", "-1"], "argument --clients: expected an integer in 0..1024, got -1"),
        (["--clients", "5000"], "argument --clients: expected an integer in 0..1024"),
    ],
)
def test_bad_arguments_are_one_line_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "certs"
    with pytest.raises(SystemExit) as exited:
        main(["--out", str(out), *args])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_an_out_that_cannot_be_made_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", "/proc/x"]) == 2
    assert capsys.readouterr().err == "error: /proc/x: No such file or directory\n"


def test_good_hosts_are_names_or_addresses(tmp_path: Path) -> None:
    from sdpaxos.runtime.certs import check_host

    for good in ("localhost", "node-1.example.com", "example.com.", "10.0.0.1", "::1", "fe80::1"):
        assert check_host(good) == good
    make_cluster_certs(tmp_path, 1, 0, hosts=["db.internal", "10.0.0.7"])
    cert = x509.load_pem_x509_certificate((tmp_path / "node0.pem").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["db.internal"]
