"""Certificates for mutual TLS: a cluster CA, and a certificate per node and client.

``python -m sdpaxos certs --out certs --nodes 3 --clients 1`` writes::

    certs/ca.pem  certs/ca.key                 the cluster CA (keep ca.key offline)
    certs/node0.pem certs/node0.key ...        one per replica
    certs/client0.pem certs/client0.key ...    one per client

A node's identity is in its certificate: the subject's common name is
``node<N>`` (``client<N>`` for clients), which the transport checks against the
``src`` of every message. Keys are ECDSA P-256; private keys are written with
mode 0600. Nothing is downloaded and nothing leaves the machine.

``python -m sdpaxos certs --out certs --node 3`` adds ``certs/node3.pem`` and
``certs/node3.key`` for a node to be added to the cluster (``admin
add-replica``), signed by the CA already in ``certs``.

A directory that already holds one of the files is refused unless ``--force``
(``force=True``): replacing a cluster's CA silently locks every node that
holds the old one out of the cluster.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sdpaxos.core.membership import NODE_ID_MAX
from sdpaxos.core.types import REPLICAS_MAX
from sdpaxos.runtime.tls import CLIENT_PREFIX, NODE_PREFIX, identity_of

__all__ = ["check_host", "identity_of", "issue_node_cert", "make_cluster_certs"]

#: How long the generated certificates are valid.
VALIDITY_DAYS = 3650
#: Most node certificates made at once: a cluster has at most this many replicas.
NODES_MAX = REPLICAS_MAX
#: Most client certificates made at once.
CLIENTS_MAX = 1024
#: Longest host name a certificate is made for (DNS: 253 characters).
HOST_CHARS_MAX = 253
_DNS_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sdpaxos cluster"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def check_host(host: str) -> str:
    """``host`` if it is an IP address or a DNS name a certificate can name,
    else a :class:`ValueError` saying why."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    name = host.removesuffix(".")
    if not name or len(name) > HOST_CHARS_MAX:
        raise ValueError(f"host {host!r}: expected an IP address or a DNS name")
    for label in name.split("."):
        if not _DNS_LABEL.fullmatch(label):
            raise ValueError(
                f"host {host!r}: expected an IP address or a DNS name (labels of letters,"
                " digits and inner hyphens, 1 to 63 characters, joined by dots)"
            )
    return host


def make_cluster_certs(
    out: Path | str,
    nodes: int,
    clients: int = 1,
    hosts: Sequence[str] = ("localhost", "127.0.0.1", "::1"),
    now: datetime.datetime | None = None,
    *,
    force: bool = False,
) -> list[Path]:
    """Write a CA and ``nodes`` node and ``clients`` client certificates to ``out``.

    ``hosts``: the names and addresses every node certificate is valid for.
    Returns the files written. Bad arguments, and files already there (unless
    ``force``), are a :class:`ValueError` before anything is written.
    """
    if not 1 <= nodes <= NODES_MAX:
        raise ValueError(f"nodes must be in 1..{NODES_MAX}, got {nodes}")
    if not 0 <= clients <= CLIENTS_MAX:
        raise ValueError(f"clients must be in 0..{CLIENTS_MAX}, got {clients}")
    if not hosts:
        raise ValueError("need at least one host for the node certificates")
    for host in hosts:
        check_host(host)
    directory = Path(out)
    people = [f"{NODE_PREFIX}{k}" for k in range(nodes)]
    people += [f"{CLIENT_PREFIX}{k}" for k in range(clients)]
    if not force:
        for name in ["ca", *people]:
            for suffix in (".pem", ".key"):
                if (directory / (name + suffix)).exists():
                    raise FileExistsError(
                        f"{directory / (name + suffix)} exists: refusing to replace the"
                        " cluster's CA and keys (--force replaces them)"
                    )
    directory.mkdir(parents=True, exist_ok=True)
    start = (now or datetime.datetime.now(datetime.UTC)) - datetime.timedelta(minutes=5)
    end = start + datetime.timedelta(days=VALIDITY_DAYS)
    ca_key = _key()
    ca_name = _name("sdpaxos cluster CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    written = [directory / "ca.pem", directory / "ca.key"]
    written[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(written[1], ca_key)
    for who in people:
        written += _issue(directory, who, ca_key, ca_name, start, end, hosts)
    return written


def _issue(
    directory: Path,
    who: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    start: datetime.datetime,
    end: datetime.datetime,
    hosts: Sequence[str],
) -> list[Path]:
    """Write ``who``'s certificate (signed by the CA) and key; the two paths."""
    key = _key()
    is_node = who.startswith(NODE_PREFIX)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    if is_node:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(who))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    if is_node:
        builder = builder.add_extension(_san(hosts), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pem, key_path = directory / f"{who}.pem", directory / f"{who}.key"
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key_path, key)
    return [pem, key_path]


def issue_node_cert(
    directory: Path | str,
    node_id: int,
    hosts: Sequence[str] = ("localhost", "127.0.0.1", "::1"),
    now: datetime.datetime | None = None,
    *,
    force: bool = False,
) -> list[Path]:
    """A certificate and key for node ``node_id`` (a node to be added to a
    changing membership), signed by the CA already in ``directory``
    (``ca.pem``, ``ca.key``). Refuses (:class:`ValueError`, nothing written) a
    bad id or host, a missing or unreadable CA, and files already there
    unless ``force``."""
    if type(node_id) is not int or not 0 <= node_id <= NODE_ID_MAX:
        raise ValueError(f"node id must be in 0..{NODE_ID_MAX}, got {node_id!r}")
    if not hosts:
        raise ValueError("need at least one host for the node certificate")
    for host in hosts:
        check_host(host)
    directory = Path(directory)
    try:
        ca_cert = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
        ca_key = serialization.load_pem_private_key(
            (directory / "ca.key").read_bytes(), password=None
        )
    except FileNotFoundError as exc:
        raise ValueError(
            f"{exc.filename}: no such file: the CA (ca.pem, ca.key) must be in {directory}"
        ) from None
    except ValueError as exc:
        raise ValueError(f"the CA in {directory} cannot be read: {exc}") from None
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{directory / 'ca.key'} is not an ECDSA key of this tool's")
    who = f"{NODE_PREFIX}{node_id}"
    if not force:
        for suffix in (".pem", ".key"):
            if (directory / (who + suffix)).exists():
                raise FileExistsError(
                    f"{directory / (who + suffix)} exists: refusing to replace it (--force does)"
                )
    start = (now or datetime.datetime.now(datetime.UTC)) - datetime.timedelta(minutes=5)
    end = start + datetime.timedelta(days=VALIDITY_DAYS)
    return _issue(directory, who, ca_key, ca_cert.subject, start, end, hosts)


def _host(text: str) -> str:
    try:
        return check_host(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    from sdpaxos.runtime.cliargs import OneLineParser, bounded_int, one_line

    p = OneLineParser(
        prog="python -m sdpaxos certs",
        description="Make a cluster CA and node and client certificates for mutual TLS.",
    )
    p.add_argument("--out", type=Path, default=Path("certs"), help="directory (default certs)")
    p.add_argument(
        "--nodes",
        type=bounded_int(1, NODES_MAX),
        default=3,
        help=f"node certificates (default 3, at most {NODES_MAX})",
    )
    p.add_argument(
        "--clients",
        type=bounded_int(0, CLIENTS_MAX),
        default=1,
        help=f"client certificates (default 1, at most {CLIENTS_MAX})",
    )
    p.add_argument(
        "--host",
        action="append",
        dest="hosts",
        type=_host,
        help="a name or address the node certificates are valid for (repeat;"
        " default localhost, 127.0.0.1, ::1)",
    )
    p.add_argument("--force", action="store_true", help="replace the CA and keys already in --out")
    p.add_argument(
        "--node",
        type=bounded_int(0, NODE_ID_MAX),
        default=None,
        metavar="ID",
        help="only a certificate for node ID (one to be added), from the CA already in --out",
    )
    args = p.parse_args(argv)
    hosts = args.hosts or ["localhost", "127.0.0.1", "::1"]
    try:
        if args.node is not None:
            written = issue_node_cert(args.out, args.node, hosts, force=args.force)
        else:
            written = make_cluster_certs(
                args.out, args.nodes, args.clients, hosts, force=args.force
            )
    except (ValueError, OSError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0
