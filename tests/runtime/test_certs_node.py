"""``python -m sdpaxos certs --node ID``: a certificate for a node to be added,
from the cluster's CA already on disk; refusals change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from sdpaxos.runtime.certs import issue_node_cert, main, make_cluster_certs
from sdpaxos.runtime.tls import identity_of


def _common_name(path: Path) -> str:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    value = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
    return str(value)


def test_a_new_node_certificate_is_signed_by_the_existing_ca(tmp_path: Path) -> None:
    make_cluster_certs(tmp_path, 3)
    ca_before = (tmp_path / "ca.pem").read_bytes()
    assert main(["--out", str(tmp_path), "--node", "7"]) == 0
    assert identity_of(_common_name(tmp_path / "node7.pem")) == ("node", 7)
    ca = x509.load_pem_x509_certificate(ca_before)
    cert = x509.load_pem_x509_certificate((tmp_path / "node7.pem").read_bytes())
    cert.verify_directly_issued_by(ca)  # raises if another CA signed it
    assert (tmp_path / "ca.pem").read_bytes() == ca_before
    assert (tmp_path / "node7.key").stat().st_mode & 0o777 == 0o600


def test_refusals_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match=r"ca\.pem: no such file"):
        issue_node_cert(tmp_path, 3)
    assert list(tmp_path.iterdir()) == []
    make_cluster_certs(tmp_path, 3)
    before = (tmp_path / "node2.pem").read_bytes()
    assert main(["--out", str(tmp_path), "--node", "2"]) == 2
    assert "exists" in capsys.readouterr().err
    assert (tmp_path / "node2.pem").read_bytes() == before
    with pytest.raises(ValueError, match="node id"):
        issue_node_cert(tmp_path, 70000)
