"""How a YDB topic message is stored as a Kafka record, and how any record reads as one.

VDL stores Kafka RecordBatch v2 only, so a YDB write is converted once, here, and a YDB read
converts back. The mapping (the only place that defines it):

==========================  =====================================================
YDB message field           Kafka record
==========================  =====================================================
data (after codec decode)   value
created_at                  timestamp (CreateTime, milliseconds; finer parts lost)
message_group_id            key (UTF-8; no key when empty)
metadata_items[k] = v       header ``k`` = ``v`` (user keys may not start ``__ydb.``)
seq_no                      header ``__ydb.seq_no``   (decimal ASCII)
producer_id                 header ``__ydb.producer_id`` (UTF-8)
written_at (server time)    header ``__ydb.written_at`` (decimal milliseconds)
write_session_meta[k] = v   header ``__ydb.meta.k`` = ``v`` (UTF-8)
offset                      offset
uncompressed_size           len(value)
==========================  =====================================================

Codecs: a write in RAW, GZIP or ZSTD is stored decoded (any reader, Kafka or YDB, sees the
original bytes) and reads as RAW. A custom codec (YDB numbers them from 10000) cannot be
decoded by the server: YDB hands such data from writer to reader untouched, and so does
VDL. The value is the data as the writer encoded it, the header ``__ydb.codec`` holds the
codec (decimal ASCII) and ``__ydb.uncompressed_size`` the size the writer declared; a YDB
reader gets that codec and size back, a Kafka consumer the encoded bytes and both headers.

A record written by a Kafka client reads with these defaults: seq_no 0, producer_id "",
message_group_id = the key if it is valid UTF-8 (else ""), created_at = written_at = the
record timestamp, every header a metadata item (a null header value reads as b""), data =
the value (b"" when null).

The batch carries producer id -1 (not a Kafka idempotent producer): YDB deduplication is by
``(producer_id, seq_no)``, kept in :class:`YdbProducerTable`, which is rebuilt from these
headers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vdl.log.record_batch import (
    DecodedRecord,
    InvalidBatch,
    Record,
    UnsupportedCodec,
    iter_records,
    parse_batch_header,
)

RESERVED_PREFIX = "__ydb."
SEQ_NO = "__ydb.seq_no"
PRODUCER_ID = "__ydb.producer_id"
WRITTEN_AT = "__ydb.written_at"
SESSION_META = "__ydb.meta."
CODEC = "__ydb.codec"
UNCOMPRESSED_SIZE = "__ydb.uncompressed_size"
# YDB's Codec enum (ydb_topic.proto): what a write or read batch says its data holds.
CODEC_RAW = 1
CODEC_GZIP = 2
CODEC_LZOP = 3
CODEC_ZSTD = 4
CODEC_CUSTOM = 10000  # this and above: the application's own, passed through untouched


def is_custom_codec(codec: int) -> bool:
    return codec >= CODEC_CUSTOM


def codec_headers(codec: int, uncompressed_size: int) -> tuple[tuple[str, bytes], ...]:
    """The headers a message written with ``codec`` carries beyond its metadata items:
    none for data stored decoded, the codec and declared size for a custom codec."""
    if not is_custom_codec(codec):
        return ()
    return ((CODEC, str(codec).encode()), (UNCOMPRESSED_SIZE, str(uncompressed_size).encode()))


@dataclass(frozen=True, slots=True)
class YdbMessage:
    """A YDB message as the topic API sees it, codec already removed."""

    data: bytes
    seq_no: int = 0
    created_at_ms: int = 0
    message_group_id: str = ""
    metadata_items: tuple[tuple[str, bytes], ...] = ()
    producer_id: str = ""
    written_at_ms: int = 0
    write_session_meta: Mapping[str, str] = field(default_factory=dict)
    offset: int = -1
    # RAW, or a custom codec ``data`` is still encoded with.
    codec: int = CODEC_RAW
    # The writer's declared size for a custom codec; -1: len(data).
    uncompressed_size: int = -1

    @property
    def size(self) -> int:
        return len(self.data) if self.uncompressed_size < 0 else self.uncompressed_size


def is_reserved_key(key: str) -> bool:
    return key.startswith(RESERVED_PREFIX)


def to_record(message: YdbMessage) -> Record:
    headers: list[tuple[str, bytes | None]] = list(message.metadata_items)
    headers.extend(codec_headers(message.codec, message.size))
    headers.append((SEQ_NO, str(message.seq_no).encode()))
    headers.append((PRODUCER_ID, message.producer_id.encode()))
    headers.append((WRITTEN_AT, str(message.written_at_ms).encode()))
    for key, value in message.write_session_meta.items():
        headers.append((SESSION_META + key, value.encode()))
    return Record(
        key=message.message_group_id.encode() if message.message_group_id else None,
        value=message.data,
        timestamp_ms=message.created_at_ms,
        headers=headers,
    )


def _int_header(value: bytes | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def from_record(record: DecodedRecord) -> YdbMessage:
    seq_no = 0
    producer_id = ""
    written_at = record.timestamp_ms
    items: list[tuple[str, bytes]] = []
    session_meta: dict[str, str] = {}
    codec = CODEC_RAW
    uncompressed_size = -1
    for key, value in record.headers:
        if not key.startswith(RESERVED_PREFIX):
            items.append((key, value if value is not None else b""))
        elif key == SEQ_NO:
            seq_no = _int_header(value, 0)
        elif key == PRODUCER_ID:
            producer_id = (value or b"").decode("utf-8", "replace")
        elif key == WRITTEN_AT:
            written_at = _int_header(value, record.timestamp_ms)
        elif key.startswith(SESSION_META):
            session_meta[key[len(SESSION_META) :]] = (value or b"").decode("utf-8", "replace")
        elif key == CODEC:
            # Only a custom codec passes through; anything else was stored decoded.
            number = _int_header(value, CODEC_RAW)
            codec = number if is_custom_codec(number) else CODEC_RAW
        elif key == UNCOMPRESSED_SIZE:
            uncompressed_size = _int_header(value, -1)
    group = ""
    if record.key is not None:
        try:
            group = record.key.decode("utf-8")
        except UnicodeDecodeError:
            group = ""
    return YdbMessage(
        data=record.value if record.value is not None else b"",
        seq_no=seq_no,
        created_at_ms=record.timestamp_ms,
        message_group_id=group,
        metadata_items=tuple(items),
        producer_id=producer_id,
        written_at_ms=written_at,
        write_session_meta=session_meta,
        offset=record.offset,
        codec=codec,
        uncompressed_size=uncompressed_size if codec != CODEC_RAW else -1,
    )


@dataclass(frozen=True, slots=True)
class ProducerSeq:
    seq_no: int
    offset: int  # where that seq_no was written: acks for duplicates wait for it


class YdbProducerTable:
    """Last written ``seq_no`` per YDB ``producer_id`` of one partition.

    Needs no storage of its own: the log's ``__ydb.*`` headers are the source of truth and
    :meth:`scan` rebuilds the table from stored batches.
    """

    def __init__(self) -> None:
        self._producers: dict[str, ProducerSeq] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def last(self, producer_id: str) -> ProducerSeq | None:
        return self._producers.get(producer_id)

    def last_seq_no(self, producer_id: str) -> int:
        entry = self._producers.get(producer_id)
        return entry.seq_no if entry is not None else 0

    def is_duplicate(self, producer_id: str, seq_no: int) -> bool:
        entry = self._producers.get(producer_id)
        return entry is not None and seq_no <= entry.seq_no

    def record(self, producer_id: str, seq_no: int, offset: int) -> None:
        entry = self._producers.get(producer_id)
        if entry is None or seq_no > entry.seq_no:
            self._producers[producer_id] = ProducerSeq(seq_no, offset)

    def scan(self, batches: Iterable[bytes | bytearray | memoryview]) -> None:
        """Fold stored batches (in log order) into the table.

        YDB writes are stored uncompressed, but a Kafka client may carry YDB-written
        records (``__ydb.*`` headers and all) into a compressed batch, as a tool mirroring
        a topic does, so every codec is decoded, as YDB readers see it. A batch whose
        records do not decode is skipped: a Kafka client's bad batch must not stop a replica.
        """
        for batch in batches:
            if parse_batch_header(batch).is_control:
                continue
            try:
                records = list(iter_records(batch))
            except (InvalidBatch, UnsupportedCodec):
                continue
            for record in records:
                producer: str | None = None
                seq_no: int | None = None
                for key, value in record.headers:
                    if key == PRODUCER_ID and value is not None:
                        producer = value.decode("utf-8", "replace")
                    elif key == SEQ_NO:
                        seq_no = _int_header(value, 0)
                if producer is not None and seq_no is not None:
                    self.record(producer, seq_no, record.offset)
