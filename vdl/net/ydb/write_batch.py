"""YDB write requests encoded straight into Kafka v2 record batches, for the write hot path.

``ydb_mapping`` defines how a YDB message becomes a Kafka record, and ``record_batch`` how
records become a batch; going through them costs a ``YdbMessage``, a ``Record`` and
per-header encoding for every message, which made that path most of a writer session's CPU
time. Here everything that is the same for all messages of a session (producer id, session
metadata, the message group key) is encoded once, so a message costs its own few fields.

The output is byte for byte what ``build_batch([to_record(m) for m in messages])`` gives;
``tests/unit/ydb/test_ydb_write_batch.py`` pins that, so a change of the mapping or of the
batch format fails there instead of silently writing something else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vdl.log.batch_header import HEADER_SIZE, write_header
from vdl.log.ydb_mapping import PRODUCER_ID, SEQ_NO, SESSION_META, WRITTEN_AT


def _zigzag_varint(value: int) -> bytes:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


# Lengths, deltas and counts are nearly always small: look them up instead of encoding.
_SMALL = tuple(_zigzag_varint(v) for v in range(1 << 13))
_SMALL_LIMIT = len(_SMALL)


def _varint(value: int) -> bytes:
    if 0 <= value < _SMALL_LIMIT:
        return _SMALL[value]
    return _zigzag_varint(value)


def _bytes_field(data: bytes) -> bytes:
    return _varint(len(data)) + data


def _header_field(key: str, value: bytes) -> bytes:
    return _bytes_field(key.encode("utf-8")) + _bytes_field(value)


_SEQ_NO_KEY = _bytes_field(SEQ_NO.encode("utf-8"))
_NO_KEY = _varint(-1)


@dataclass(slots=True)
class PendingMessage:
    """One message of a write request, decoded and checked, waiting for its batch."""

    data: bytes
    seq_no: int
    created_at_ms: int
    # None: the session's message group. Set only when the message names its own.
    message_group_id: str | None = None
    metadata_items: tuple[tuple[str, bytes], ...] = ()


class SessionBatchEncoder:
    """Encodes the messages of one writer session; holds what they all share."""

    def __init__(
        self, producer_id: str, message_group_id: str, session_meta: Mapping[str, str]
    ) -> None:
        self._producer = _header_field(PRODUCER_ID, producer_id.encode("utf-8"))
        self._meta = b"".join(
            _header_field(SESSION_META + key, value.encode("utf-8"))
            for key, value in session_meta.items()
        )
        # seq_no, producer_id and written_at, plus one per session metadata entry.
        self._fixed_headers = 3 + len(session_meta)
        self._group_key = self._key_field(message_group_id)

    @staticmethod
    def _key_field(group: str) -> bytes:
        return _bytes_field(group.encode("utf-8")) if group else _NO_KEY

    def encode(self, messages: Sequence[PendingMessage], written_at_ms: int) -> bytearray:
        """One uncompressed CreateTime batch at base offset 0, as ``build_batch`` makes it."""
        if not messages:
            raise ValueError("a batch needs at least one record")
        # Everything after the seq_no header is the same for every message of this call.
        tail = self._producer + _header_field(WRITTEN_AT, str(written_at_ms).encode()) + self._meta
        fixed_count = _varint(self._fixed_headers)
        first_ts = messages[0].created_at_ms
        max_ts = first_ts
        small, limit = _SMALL, _SMALL_LIMIT
        parts: list[bytes] = [bytes(HEADER_SIZE)]
        append = parts.append
        for delta, message in enumerate(messages):
            ts = message.created_at_ms
            if ts > max_ts:
                max_ts = ts
            ts_delta = ts - first_ts
            ts_field = small[ts_delta] if 0 <= ts_delta < limit else _zigzag_varint(ts_delta)
            key = (
                self._group_key
                if message.message_group_id is None
                else self._key_field(message.message_group_id)
            )
            data = message.data
            size = len(data)
            value_len = small[size] if size < limit else _zigzag_varint(size)
            digits = str(message.seq_no).encode()
            items = message.metadata_items
            if items:
                count = _varint(self._fixed_headers + len(items))
                extra = b"".join(_header_field(k, v) for k, v in items)
            else:
                count, extra = fixed_count, b""
            # Record: attributes, timestampDelta, offsetDelta, key, value, headers.
            head = b"\x00" + ts_field + _varint(delta) + key + value_len
            rest = count + extra + _SEQ_NO_KEY + small[len(digits)] + digits + tail
            append(_varint(len(head) + size + len(rest)))
            append(head)
            append(data)
            append(rest)
        out = bytearray().join(parts)
        write_header(
            out,
            base_offset=0,  # assigned by the log
            partition_leader_epoch=-1,
            attributes=0,  # uncompressed, CreateTime
            last_offset_delta=len(messages) - 1,
            base_timestamp=first_ts,
            max_timestamp=max_ts,
            producer_id=-1,  # YDB dedup is by its own producer table, not Kafka's
            producer_epoch=-1,
            base_sequence=-1,
            record_count=len(messages),
        )
        return out
