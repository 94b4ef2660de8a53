"""Mutual TLS contexts for nodes and clients, and who a connection's peer is.

Both ends present a certificate signed by the cluster CA
(:mod:`sdpaxos.runtime.certs`) and require one from the other
(``CERT_REQUIRED`` on both sides). Identity is the certificate's common name
(``node3``, ``client0``), read by :func:`peer_identity`; host names are not
checked, because a replica is named by its certificate, not by the address it
was dialled at (a node behind NAT, or a config that says ``127.0.0.1``, is
still the node its certificate says). A peer without a certificate of the
cluster CA fails the handshake and never sends a frame.
"""

from __future__ import annotations

import ssl
from typing import Any

from sdpaxos.core.errors import ConfigError
from sdpaxos.runtime.config import TlsFiles

__all__ = [
    "CLIENT_PREFIX",
    "NODE_PREFIX",
    "check_tls_files",
    "client_context",
    "identity_of",
    "peer_identity",
    "server_context",
]

#: A certificate's common name says who holds it: ``node<N>`` or ``client<N>``
#: (:mod:`sdpaxos.runtime.certs` issues them so).
NODE_PREFIX, CLIENT_PREFIX = "node", "client"


def identity_of(common_name: str) -> tuple[str, int] | None:
    """``("node", 2)`` for ``node2``, ``("client", 0)`` for ``client0``, else None:
    how the transport reads who a peer is from its certificate."""
    for prefix in (NODE_PREFIX, CLIENT_PREFIX):
        rest = common_name.removeprefix(prefix)
        if rest != common_name and rest.isdigit() and str(int(rest)) == rest:
            return prefix, int(rest)
    return None


def _context(purpose: int, files: TlsFiles) -> ssl.SSLContext:
    ctx = ssl.SSLContext(purpose)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(files.cert, files.key)
    ctx.load_verify_locations(files.ca)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def check_tls_files(files: TlsFiles) -> None:
    """Load the certificate, key and CA as a node will, or raise a
    :class:`ConfigError` that says which file is wrong and how.

    The commands call it before a node touches its data directory, so that a
    key that does not match its certificate (or a file that is not PEM) is a
    one-line error that changes nothing, not a traceback from the listener.
    """
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(files.cert, files.key)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"tls: the key {files.key} does not belong to the certificate {files.cert}"
            ) from None
        raise ConfigError(
            f"tls: cannot load the certificate {files.cert} with the key {files.key}:"
            f" not a PEM certificate and its PEM key ({exc.reason or 'unreadable PEM'})"
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"tls: cannot read {files.cert} or {files.key} ({exc.strerror})"
        ) from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(files.ca)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"tls: {files.ca} is not a CA certificate ({exc.reason or exc})"
        ) from None
    except OSError as exc:
        raise ConfigError(f"tls: cannot read {files.ca} ({exc.strerror})") from None


def server_context(files: TlsFiles) -> ssl.SSLContext:
    """For the listening side: requires the dialer's certificate from the cluster CA."""
    return _context(ssl.PROTOCOL_TLS_SERVER, files)


def client_context(files: TlsFiles) -> ssl.SSLContext:
    """For the dialling side (a node dialling a peer, or a client)."""
    return _context(ssl.PROTOCOL_TLS_CLIENT, files)


def peer_identity(ssl_object: Any) -> tuple[str, int] | None:
    """``("node", 2)`` or ``("client", 7)`` from the peer's verified certificate,
    or None (no TLS, no certificate, or a common name that names nobody)."""
    if ssl_object is None:
        return None
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and isinstance(value, str):
                return identity_of(value)
    return None
