"""Compact binary encoding of consensus messages, for the driver's TCP transport.

Layout (big-endian): u8 kind, u64 src, u64 dst, u64 term, then per kind:

    AppendEntries      u64 prev_index, u64 prev_term, u64 commit, u32 count,
                       count * (u64 term, u8 type, u32 length, payload)
                       (entry indexes are implicit: prev_index + 1, + 2, ...)
    AppendResponse     u64 index, u8 reject, u64 hint_index, u64 hint_term
    Heartbeat          u64 commit, u8 flags (1 quiesce)
    HeartbeatResponse  -
    RequestVote        u64 last_index, u64 last_term, u8 flags (1 pre-vote, 2 transfer)
    VoteResponse       u8 flags (1 granted, 2 pre-vote)
    TimeoutNow         -
    InstallSnapshot    u64 index, u64 term, u32 length + config (membership encoding),
                       u32 length + handle

Framing (length prefix, group id for multi-raft) belongs to the transport, not here.
"""

from __future__ import annotations

import struct

from vdl.backends.api import Buffer, Entry, EntryType
from vdl.consensus.membership import Config, decode_config, encode_config
from vdl.consensus.messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    RequestVote,
    TimeoutNow,
    VoteResponse,
)
from vdl.consensus.state import SnapshotMeta


class WireError(ValueError):
    """Bytes that do not decode to a message."""


# Terms and indexes a real peer sends stay far below this; the core adds one to terms and
# indexes it receives, and the encoder packs them as u64 again, so a larger value from the
# wire could only end in an exception far from the connection that brought it.
MAX_NUMBER = 2**62


_HEAD = struct.Struct(">BQQQ")
_U8 = struct.Struct(">B")
_U32 = struct.Struct(">I")
_APPEND = struct.Struct(">QQQI")
_ENTRY = struct.Struct(">QBI")
_APPEND_RESP = struct.Struct(">QBQQ")
_VOTE = struct.Struct(">QQB")
_SNAP = struct.Struct(">QQ")
_HEARTBEAT = struct.Struct(">QB")

_KINDS: dict[type, int] = {
    AppendEntries: 1,
    AppendResponse: 2,
    Heartbeat: 3,
    HeartbeatResponse: 4,
    RequestVote: 5,
    VoteResponse: 6,
    TimeoutNow: 7,
    InstallSnapshot: 8,
}


def encode(m: Message) -> bytes:
    return b"".join(encode_parts(m))


def encode_parts(m: Message) -> list[Buffer]:
    """The message's encoding in pieces, to be joined once (with a frame head, say):
    entry payloads are not copied until then."""
    head = _HEAD.pack(_KINDS[type(m)], m.src, m.dst, m.term)
    if isinstance(m, AppendEntries):
        count = len(m.entries)
        parts: list[Buffer] = [head, _APPEND.pack(m.prev_index, m.prev_term, m.commit, count)]
        pack = _ENTRY.pack
        index = m.prev_index
        for entry in m.entries:
            index += 1
            if entry.index != index:
                raise ValueError("AppendEntries entries must follow prev_index contiguously")
            payload = entry.payload
            parts.append(pack(entry.term, entry.type, len(payload)))
            parts.append(payload)
        return parts
    out = bytearray(head)
    if isinstance(m, AppendResponse):
        out += _APPEND_RESP.pack(m.index, m.reject, m.hint_index, m.hint_term)
    elif isinstance(m, Heartbeat):
        out += _HEARTBEAT.pack(m.commit, m.quiesce)
    elif isinstance(m, RequestVote):
        out += _VOTE.pack(m.last_index, m.last_term, m.pre_vote | (m.transfer << 1))
    elif isinstance(m, VoteResponse):
        out += _U8.pack(m.granted | (m.pre_vote << 1))
    elif isinstance(m, InstallSnapshot):
        config = encode_config(m.snapshot.config)
        out += _SNAP.pack(m.snapshot.index, m.snapshot.term)
        out += _U32.pack(len(config)) + config
        out += _U32.pack(len(m.handle)) + m.handle
    return [out]


class _Reader:
    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def unpack(self, fmt: struct.Struct) -> tuple[int, ...]:
        if self.pos + fmt.size > len(self.data):
            raise WireError("message truncated")
        values = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return values

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise WireError("message truncated")
        chunk = bytes(self.data[self.pos : self.pos + n])
        self.pos += n
        return chunk


def decode(data: bytes | bytearray | memoryview) -> Message:
    r = _Reader(data)
    kind, src, dst, term = r.unpack(_HEAD)
    _check_numbers(src, dst, term)
    m: Message
    if kind == 1:
        prev_index, prev_term, commit, count = r.unpack(_APPEND)
        _check_numbers(prev_index + count, prev_term, commit)
        entries = _decode_entries(r, prev_index, count)
        m = AppendEntries(src, dst, term, prev_index, prev_term, commit, entries)
    elif kind == 2:
        index, reject, hint_index, hint_term = r.unpack(_APPEND_RESP)
        _check_numbers(index, hint_index, hint_term)
        m = AppendResponse(src, dst, term, index, bool(reject), hint_index, hint_term)
    elif kind == 3:
        commit, flags = r.unpack(_HEARTBEAT)
        _check_numbers(commit)
        m = Heartbeat(src, dst, term, commit, bool(flags & 1))
    elif kind == 4:
        m = HeartbeatResponse(src, dst, term)
    elif kind == 5:
        last_index, last_term, flags = r.unpack(_VOTE)
        _check_numbers(last_index, last_term)
        m = RequestVote(src, dst, term, last_index, last_term, bool(flags & 1), bool(flags & 2))
    elif kind == 6:
        (flags,) = r.unpack(_U8)
        m = VoteResponse(src, dst, term, bool(flags & 1), bool(flags & 2))
    elif kind == 7:
        m = TimeoutNow(src, dst, term)
    elif kind == 8:
        index, snap_term = r.unpack(_SNAP)
        _check_numbers(index, snap_term)
        (config_len,) = r.unpack(_U32)
        config = _decode_config(r.take(config_len))
        (handle_len,) = r.unpack(_U32)
        handle = r.take(handle_len)
        m = InstallSnapshot(src, dst, term, SnapshotMeta(index, snap_term, config), handle)
    else:
        raise WireError(f"unknown message kind {kind}")
    if r.pos != len(r.data):
        raise WireError("trailing bytes after message")
    return m


_ENTRY_TYPES = {int(t): t for t in EntryType}


def _decode_entries(r: _Reader, prev_index: int, count: int) -> tuple[Entry, ...]:
    """`count` entries from `r`, indexes from prev_index + 1 (the per-entry loop of a
    follower's every append: struct and slice calls only, no per-entry helper calls)."""
    data, pos, end = r.data, r.pos, len(r.data)
    size, unpack = _ENTRY.size, _ENTRY.unpack_from
    entries: list[Entry] = []
    index = prev_index
    for _ in range(count):
        if pos + size > end:
            raise WireError("message truncated")
        entry_term, entry_type, length = unpack(data, pos)
        pos += size
        if entry_term >= MAX_NUMBER:
            raise WireError("a node id, term or index out of range")
        etype = _ENTRY_TYPES.get(entry_type)
        if etype is None:
            raise WireError(f"unknown entry type {entry_type}")
        stop = pos + length
        if stop > end:
            raise WireError("message truncated")
        payload = bytes(data[pos:stop])
        pos = stop
        if etype is EntryType.CONFIG:
            # Checked here, where the connection that sent it can still be dropped: the
            # core decodes it again when the entry is appended.
            _decode_config(payload)
        index += 1
        entries.append(Entry(entry_term, index, etype, payload))
    r.pos = pos
    return tuple(entries)


def _check_numbers(*values: int) -> None:
    if any(v >= MAX_NUMBER for v in values):
        raise WireError("a node id, term or index out of range")


def _decode_config(payload: bytes) -> Config:
    try:
        return decode_config(payload)
    except ValueError as exc:
        raise WireError(f"bad configuration: {exc}") from exc
