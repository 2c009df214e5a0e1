"""The records of a snapshot transfer (layout in `snapshot_transfer.py`), without I/O:
encoders for the leader's side, and a decoder that turns the bytes a follower receives
into checked events."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from vdl.backends.api import Buffer, Entry
from vdl.consensus import wire
from vdl.consensus.messages import AppendEntries

SNAPSHOT_MAGIC = 0x56444C53  # "VDLS"
REQUEST = struct.Struct(">IQQI")  # magic, group id, snapshot index, flags
TAKES_FILES = 1  # request flag: the follower takes segment files
_RECORD = struct.Struct(">BI")  # kind, body length
_HEAD = struct.Struct(">QQ")  # first index, first offset
_FILE = struct.Struct(">Q")  # size, then the name
_CHUNK = struct.Struct(">I")  # CRC-32C of the data, then the data
_END = struct.Struct(">QI")  # last index, files sent
HEAD, FILE, CHUNK, ENTRIES, END, FAILED = b"HFCEZX"
MAX_NAME = 255
MAX_CHUNK = 1024 * 1024
# An entries record carries up to about 1 MiB, or one entry of any size (up to a frame's
# worth, as on raft links).
_MAX_BODY = 64 * 1024 * 1024


class SnapshotError(Exception):
    """The transfer failed or its content does not describe the asked snapshot."""


def encode_request(group_id: int, upto: int, takes_files: bool) -> bytes:
    return REQUEST.pack(SNAPSHOT_MAGIC, group_id, upto, TAKES_FILES if takes_files else 0)


def decode_request(data: bytes) -> tuple[int, int, bool]:
    """(group id, snapshot index, whether the follower takes files)."""
    magic, group_id, upto, flags = REQUEST.unpack(data)
    if magic != SNAPSHOT_MAGIC:
        raise SnapshotError("not a snapshot request")
    return group_id, upto, bool(flags & TAKES_FILES)


def _record(kind: int, *parts: Buffer) -> bytes:
    return _RECORD.pack(kind, sum(len(p) for p in parts)) + b"".join(parts)


def encode_head(first_index: int, first_offset: int) -> bytes:
    return _record(HEAD, _HEAD.pack(first_index, first_offset))


def encode_file(name: str, size: int) -> bytes:
    raw = name.encode()
    if not 0 < len(raw) <= MAX_NAME:
        raise ValueError(f"file name {name!r}")
    return _record(FILE, _FILE.pack(size), raw)


def encode_chunk(data: Buffer) -> bytes:
    if len(data) > MAX_CHUNK:
        raise ValueError(f"chunk of {len(data)} bytes")
    return _record(CHUNK, _CHUNK.pack(crc32c(data)), data)


def encode_entries(entries: tuple[Entry, ...]) -> bytes:
    # Raft's own encoding of entries, in a message whose only meaningful field is the
    # index before the first entry.
    message = AppendEntries(0, 0, 0, entries[0].index - 1, 0, 0, entries)
    return _record(ENTRIES, wire.encode(message))


def encode_end(last_index: int, files: int) -> bytes:
    return _record(END, _END.pack(last_index, files))


def encode_failure(reason: str) -> bytes:
    return _record(FAILED, reason.encode()[:1024])


@dataclass(frozen=True, slots=True)
class Head:
    first_index: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class FileStart:
    name: str
    size: int


@dataclass(frozen=True, slots=True)
class FileData:
    data: bytes


@dataclass(frozen=True, slots=True)
class FileEnd:
    pass


@dataclass(frozen=True, slots=True)
class Entries:
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class End:
    last_index: int
    files: int


Event = Head | FileStart | FileData | FileEnd | Entries | End


class SnapshotDecoder:
    """Bytes from the leader in, events out; SnapshotError for anything out of order,
    malformed or failing its CRC, and for the leader's own report of a failure."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._started = False
        self._file_left: int | None = None  # bytes still due for the current file
        self._files = 0
        self._entries_seen = False
        self.end: End | None = None

    def feed(self, data: Buffer) -> list[Event]:
        if self.end is not None and len(data):
            raise SnapshotError("bytes after the end of the snapshot")
        self._buf += data
        out: list[Event] = []
        pos = 0
        buf = self._buf
        while self.end is None and len(buf) - pos >= _RECORD.size:
            kind, length = _RECORD.unpack_from(buf, pos)
            if length > _MAX_BODY:
                raise SnapshotError(f"snapshot record of {length} bytes")
            if len(buf) - pos < _RECORD.size + length:
                break
            body = bytes(buf[pos + _RECORD.size : pos + _RECORD.size + length])
            pos += _RECORD.size + length
            self._decode(kind, body, out)
        if self.end is not None and len(buf) > pos:
            raise SnapshotError("bytes after the end of the snapshot")
        del buf[:pos]
        return out

    def _decode(self, kind: int, body: bytes, out: list[Event]) -> None:
        if kind == FAILED:
            raise SnapshotError(f"the leader failed: {body.decode(errors='replace')}")
        if not self._started:
            if kind != HEAD or len(body) != _HEAD.size:
                raise SnapshotError("the leader did not describe its log first")
            self._started = True
            out.append(Head(*_HEAD.unpack(body)))
            return
        if self._file_left is not None:
            if kind != CHUNK or len(body) < _CHUNK.size:
                raise SnapshotError("a file ended before its size")
            (crc,) = _CHUNK.unpack_from(body)
            data = body[_CHUNK.size :]
            if crc32c(data) != crc:
                raise SnapshotError("a chunk of a file fails its CRC")
            if not data or len(data) > self._file_left:
                raise SnapshotError("a chunk runs past the end of its file")
            self._file_left -= len(data)
            out.append(FileData(data))
            if not self._file_left:
                self._file_left = None
                self._files += 1
                out.append(FileEnd())
            return
        if kind == FILE:
            if self._entries_seen or len(body) <= _FILE.size:
                raise SnapshotError("a file out of place")
            (size,) = _FILE.unpack_from(body)
            try:
                name = body[_FILE.size :].decode()
            except UnicodeDecodeError:
                raise SnapshotError("a file name that is not UTF-8") from None
            if size <= 0:
                raise SnapshotError(f"file {name!r} of {size} bytes")
            self._file_left = size
            out.append(FileStart(name, size))
        elif kind == ENTRIES:
            try:
                message = wire.decode(body)
            except wire.WireError as exc:
                raise SnapshotError(f"bad entries: {exc}") from None
            if not isinstance(message, AppendEntries) or not message.entries:
                raise SnapshotError("an entries record without entries")
            self._entries_seen = True
            out.append(Entries(message.entries))
        elif kind == END and len(body) == _END.size:
            end = End(*_END.unpack(body))
            if end.files != self._files:
                raise SnapshotError(f"{end.files} files announced, {self._files} received")
            self.end = end
            out.append(end)
        else:
            raise SnapshotError(f"unexpected snapshot record {kind!r}")
