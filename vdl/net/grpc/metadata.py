"""gRPC metadata (HTTP/2 headers): conversion, reserved names, ``grpc-message`` escaping.

Metadata is an ordered tuple of ``(key, value)`` pairs because keys may repeat. Keys are
lower-case ASCII; values are ``str``, except for keys ending in ``-bin`` whose values are
``bytes`` and travel base64-encoded.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence

MetadataValue = str | bytes
Metadata = tuple[tuple[str, MetadataValue], ...]
MetadataLike = Sequence[tuple[str, MetadataValue]] | None

# Header names the transport owns; user metadata may not set them and handlers do not see
# them as metadata (pseudo-headers are filtered separately by their leading colon).
_RESERVED = frozenset(
    {
        "content-type",
        "te",
        "grpc-timeout",
        "grpc-encoding",
        "grpc-accept-encoding",
        "grpc-status",
        "grpc-message",
        "grpc-status-details-bin",
        "connection",
        "host",
    }
)

# grpc-message is percent-encoded: printable ASCII except '%' goes as is, every other
# UTF-8 byte as %XX (grpc/doc/PROTOCOL-HTTP2.md).
_PLAIN = frozenset(range(0x20, 0x7F)) - {ord("%")}


def encode_grpc_message(message: str) -> bytes:
    """Percent-encode a status message for the ``grpc-message`` trailer."""
    raw = message.encode("utf-8")
    if all(b in _PLAIN for b in raw):
        return raw
    return b"".join(bytes((b,)) if b in _PLAIN else b"%%%02X" % b for b in raw)


def decode_grpc_message(value: bytes) -> str:
    """Undo :func:`encode_grpc_message`; malformed escapes are kept literally, as gRPC does."""
    if b"%" not in value:
        return value.decode("utf-8", "replace")
    out = bytearray()
    i = 0
    while i < len(value):
        byte = value[i]
        if byte == 0x25 and _is_hex(value[i + 1 : i + 3]):
            out.append(int(value[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(byte)
            i += 1
    return out.decode("utf-8", "replace")


def _is_hex(pair: bytes) -> bool:
    return len(pair) == 2 and all(c in b"0123456789abcdefABCDEF" for c in pair)


def metadata_from_headers(headers: Iterable[tuple[bytes, bytes]]) -> Metadata:
    """User-visible metadata from received headers (pseudo and reserved headers dropped)."""
    result: list[tuple[str, MetadataValue]] = []
    for raw_key, raw_value in headers:
        if raw_key.startswith(b":"):
            continue
        key = raw_key.decode("ascii", "replace")
        if key in _RESERVED:
            continue
        if key.endswith("-bin"):
            try:
                result.append((key, base64.b64decode(raw_value + b"=" * (-len(raw_value) % 4))))
            except (binascii.Error, ValueError):
                continue
        else:
            result.append((key, raw_value.decode("utf-8", "replace")))
    return tuple(result)


def headers_from_metadata(metadata: MetadataLike) -> list[tuple[bytes, bytes]]:
    """Headers for user metadata; raises ValueError on names we must not send."""
    headers: list[tuple[bytes, bytes]] = []
    if not metadata:
        return headers
    for key, value in metadata:
        name = key.lower()
        if not name or name.startswith(":") or name in _RESERVED or not name.isascii():
            raise ValueError(f"metadata key {key!r} is reserved or invalid")
        if name.endswith("-bin"):
            raw = value if isinstance(value, bytes) else value.encode("utf-8")
            # gRPC sends binary headers unpadded; decoders accept both.
            headers.append((name.encode("ascii"), base64.b64encode(raw).rstrip(b"=")))
        else:
            text = value.decode("ascii") if isinstance(value, bytes) else value
            headers.append((name.encode("ascii"), text.encode("utf-8")))
    return headers


def header_value(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower-case), or None."""
    for key, value in headers:
        if key == name:
            return value
    return None
