"""Key and value layout of one log stream's RocksDB.

Three keyspaces, each a one-byte prefix followed by a big-endian number so that byte
order is numeric order:

    b"e" + raft index (u64)   -> term (u64), entry type (u8), payload
    b"o" + first offset (u64) -> raft index (u64), last offset (u64)   one per DATA entry
    b"m" + name               -> u64 store metadata (see META_*)

Writes touching several keyspaces go in one WriteBatch, so the keyspaces never disagree.
"""

from __future__ import annotations

import struct

from vdl.backends.api import CorruptionError, Entry, EntryType

ENTRY_PREFIX = b"e"
OFFSET_PREFIX = b"o"
META_PREFIX = b"m"

# First index still stored; moves forward only when retention deletes entries.
META_FIRST_INDEX = META_PREFIX + b"first_index"
# Offset of the first record at or after META_FIRST_INDEX: the log start and end offset
# when no DATA entry is stored.
META_FLOOR_OFFSET = META_PREFIX + b"floor_offset"
# Total encoded size of the stored entries, kept so opening does not read the whole log.
META_SIZE = META_PREFIX + b"size"

_U64 = struct.Struct(">Q")
_ENTRY_HEADER = struct.Struct(">QB")
_OFFSET_VALUE = struct.Struct(">QQ")

ENTRY_HEADER_SIZE = _ENTRY_HEADER.size
_U64_MAX = (1 << 64) - 1


def entry_key(index: int) -> bytes:
    return ENTRY_PREFIX + _U64.pack(index)


def offset_key(offset: int) -> bytes:
    # Offsets below zero never name a record; clamping keeps seeks well-defined for them.
    return OFFSET_PREFIX + _U64.pack(min(max(offset, 0), _U64_MAX))


def key_number(key: bytes) -> int:
    """The number after the one-byte prefix of an entry or offset key."""
    return int(_U64.unpack_from(key, 1)[0])


ENTRY_KEYS_END = ENTRY_PREFIX + b"\xff" * _U64.size
OFFSET_KEYS_END = OFFSET_PREFIX + b"\xff" * _U64.size


def encode_entry(entry: Entry) -> bytes:
    return _ENTRY_HEADER.pack(entry.term, EntryType(entry.type)) + entry.payload


def decode_entry(index: int, value: bytes) -> Entry:
    term, kind = decode_entry_header(index, value)
    return Entry(term, index, kind, value[ENTRY_HEADER_SIZE:])


def decode_entry_header(index: int, value: bytes) -> tuple[int, EntryType]:
    if len(value) < ENTRY_HEADER_SIZE:
        raise CorruptionError(f"entry {index}: value of {len(value)} bytes is too short")
    term, kind = _ENTRY_HEADER.unpack_from(value, 0)
    try:
        return int(term), EntryType(kind)
    except ValueError as exc:
        raise CorruptionError(f"entry {index}: unknown entry type {kind}") from exc


def encode_offset_value(index: int, last_offset: int) -> bytes:
    return _OFFSET_VALUE.pack(index, last_offset)


def decode_offset_value(value: bytes) -> tuple[int, int]:
    """(raft index, last offset) of the DATA entry an offset key points to."""
    if len(value) != _OFFSET_VALUE.size:
        raise CorruptionError(f"offset index value of {len(value)} bytes")
    index, last_offset = _OFFSET_VALUE.unpack(value)
    return int(index), int(last_offset)


def encode_u64(value: int) -> bytes:
    return _U64.pack(value)


def decode_u64(value: bytes | None, default: int) -> int:
    if value is None:
        return default
    if len(value) != _U64.size:
        raise CorruptionError(f"metadata value of {len(value)} bytes")
    return int(_U64.unpack(value)[0])
