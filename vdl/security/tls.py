"""Server TLS contexts for the client listeners, with one-line errors for bad files.

TLS 1.2 is the floor (TLS 1.0/1.1 are deprecated by RFC 8996) and the Python defaults
(``create_default_context``) pick modern ciphers. With a client CA, clients must present a
certificate it signed (mTLS); the certificate's common name then names the principal for a
Kafka connection that does not also use SASL.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any


class TlsConfigError(Exception):
    """A certificate, key or CA file cannot be used; the message is one line."""


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        text = exc.reason or str(exc)
        if "KEY_VALUES_MISMATCH" in text:
            return "the key does not match the certificate"
        return text.lower().replace("_", " ")
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def server_context(
    cert: Path, key: Path, *, client_ca: Path | None = None, alpn: list[str] | None = None
) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    for path, what in ((cert, "certificate"), (key, "key")):
        if not path.is_file():
            raise TlsConfigError(f"TLS {what} file {path} does not exist or is not a file")
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise TlsConfigError(
            f"cannot use TLS certificate {cert} with key {key}: {_reason(exc)}"
        ) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(client_ca)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TlsConfigError(f"cannot use client CA file {client_ca}: {_reason(exc)}") from None
        context.verify_mode = ssl.CERT_REQUIRED
    if alpn:
        context.set_alpn_protocols(alpn)
    return context


def common_name(peer_cert: dict[str, Any] | None) -> str | None:
    """The subject CN of a verified peer certificate (``SSLSocket.getpeercert()``)."""
    if not peer_cert:
        return None
    for rdn in peer_cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
