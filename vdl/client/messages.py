"""What applications hand to a writer and get back from writers and readers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC)


@dataclass(frozen=True, slots=True)
class Message:
    """A message to write; plain ``bytes`` are accepted wherever a Message is."""

    data: bytes
    #: Milliseconds since the epoch; the time of ``write()`` when None.
    created_at_ms: int | None = None
    metadata: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WriteResult:
    """The server's acknowledgement of one message."""

    seq_no: int
    partition: int
    #: The message's offset; None when the server skipped it as a duplicate of a message
    #: already written by this producer (after a reconnect, or a restarted producer).
    offset: int | None

    @property
    def skipped(self) -> bool:
        return self.offset is None


@dataclass(frozen=True, slots=True)
class ReadMessage:
    data: bytes
    offset: int
    seq_no: int
    created_at_ms: int
    written_at_ms: int
    producer_id: str
    message_group_id: str
    metadata: Mapping[str, bytes]
    topic: str
    partition: int
    #: 1 (RAW): ``data`` is the message as written. A custom codec (10000 and above): the
    #: writer encoded ``data`` with it and the server passed it through untouched.
    codec: int = 1

    @property
    def created_at(self) -> dt.datetime:
        return _utc(self.created_at_ms)

    @property
    def written_at(self) -> dt.datetime:
        return _utc(self.written_at_ms)
