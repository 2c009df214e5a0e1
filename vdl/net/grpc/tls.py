"""TLS contexts for gRPC: HTTP/2 over TLS needs ALPN ``h2`` and TLS >= 1.2 (RFC 9113 §9.2).

grpcio drops a connection whose handshake did not select ``h2``, so both helpers always set
it.
"""

from __future__ import annotations

import ssl
from os import PathLike

StrPath = str | PathLike[str]


def _harden(context: ssl.SSLContext) -> ssl.SSLContext:
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # RFC 9113 §9.2.1: no TLS compression, no renegotiation.
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.set_alpn_protocols(["h2"])
    return context


def server_ssl_context(
    cert_file: StrPath,
    key_file: StrPath,
    *,
    client_ca_file: StrPath | None = None,
) -> ssl.SSLContext:
    """A server context from PEM files; with ``client_ca_file`` clients must present a
    certificate signed by it (mTLS)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.load_verify_locations(client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return _harden(context)


def client_ssl_context(
    ca_file: StrPath | None = None,
    *,
    ca_data: str | bytes | None = None,
    cert_file: StrPath | None = None,
    key_file: StrPath | None = None,
) -> ssl.SSLContext:
    """A client context trusting ``ca_file``/``ca_data`` (system roots if neither)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file, cadata=ca_data)
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return _harden(context)
