"""On-disk format of one Raft log entry inside a segment file.

    crc32c  u32   CRC-32C of every byte after this field (rest of header + payload)
    length  u32   payload length
    term    u64
    index   u64
    type    u8    EntryType
    payload       `length` bytes; for DATA one Kafka RecordBatch v2

Little-endian, no padding, no segment header: a segment is just entries back to back, so a
record's position in the file is all the indexes need. The CRC covers the index and term as
well as the payload, and recovery also requires each entry to carry the next index, so a
block of zeros or bytes misread from the wrong position never pass as an entry.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from vdl.backends.api import EntryType

HEADER = struct.Struct("<IIQQB")
HEADER_SIZE = HEADER.size  # 25
_AFTER_CRC = struct.Struct("<IQQB")  # the header without its CRC field
_CRC = struct.Struct("<I")
MAX_PAYLOAD = 0xFFFF_FFFF
_VALID_TYPES = frozenset(int(t) for t in EntryType)


def encode_header(
    term: int, index: int, kind: int, payload: bytes | bytearray | memoryview
) -> bytes:
    """The header of one entry, CRC included; the payload is written after it as is (the
    write gathers both, so a batch of MiBs is never copied into a write buffer)."""
    length = len(payload)
    if length > MAX_PAYLOAD:
        raise ValueError(f"entry {index}: payload of {length} bytes does not fit a u32 length")
    rest = _AFTER_CRC.pack(length, term, index, kind)
    return _CRC.pack(crc32c(payload, crc32c(rest))) + rest


def entry_is_intact(buf: bytes | bytearray | memoryview, at: int, length: int) -> bool:
    """Whether the entry at `at` (its header and `length` payload bytes all inside `buf`)
    matches its CRC."""
    stored: int = _CRC.unpack_from(buf, at)[0]
    return crc32c(memoryview(buf)[at + 4 : at + HEADER_SIZE + length]) == stored


def valid_kind(kind: int) -> bool:
    return kind in _VALID_TYPES
