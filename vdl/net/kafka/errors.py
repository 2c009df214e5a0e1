"""Kafka error codes and the exceptions the Kafka front end raises.

``ErrorCode`` is defined once, in ``vdl.log.error_codes`` (the record-batch
layer needs the same numbers and may not import from ``vdl.net``); it is
re-exported here so protocol code has a single import.
"""

from __future__ import annotations

from vdl.log.error_codes import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "MalformedRequest", "UnsupportedVersion"]


class KafkaError(Exception):
    """An error that maps to one Kafka error code on the wire."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{code.name}({int(code)}): {message}" if message else code.name)
        self.code = code
        self.message = message


class MalformedRequest(KafkaError):
    """A request frame could not be parsed (truncated, bad lengths, bad encoding).

    Kafka closes the connection on such input; the server decides, but the
    codec guarantees it is the only thing raised for garbage bytes.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message)


class UnsupportedVersion(KafkaError):
    """The (api_key, api_version) is outside what this codec serves."""

    def __init__(self, api_key: int, api_version: int, message: str = "") -> None:
        super().__init__(
            ErrorCode.UNSUPPORTED_VERSION,
            message or f"api_key {api_key} version {api_version} is not supported",
        )
        self.api_key = api_key
        self.api_version = api_version
