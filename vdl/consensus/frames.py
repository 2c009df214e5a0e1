"""Framing of consensus messages between nodes: many groups share one connection.

    hello (once, by the dialing side):  u32 magic "VDLR", u64 node id (0: an admin client,
                                         whose forward frames are metadata commands)
    frame:                               u32 length, u64 group id, wire-encoded message
                                         (length counts the group id and the message)

Group id FORWARD_GROUP marks a frame whose body is not a raft message but a metadata
command a node asks the metadata group's leader to propose for it (registration), and
GOSSIP_GROUP one whose body is node-to-node cluster gossip (which groups a node leads);
the consensus layer hands both bodies up as bytes without reading them.

BEAT_GROUP marks a node's liveness beat, which also carries the heartbeats of all its
groups for that peer (one message per node pair, see clock.py):

    u64 incarnation (random per process start), then per group:
    u64 group id, u8 kind (1 heartbeat, 2 quiescing heartbeat, 3 response), u64 term,
    u64 commit (0 in a response)

Source and destination are the link's two nodes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from vdl.consensus import wire
from vdl.consensus.messages import Heartbeat, HeartbeatResponse, Message

MAGIC = 0x56444C52  # "VDLR"
HELLO = struct.Struct(">IQ")
_FRAME_HEAD = struct.Struct(">IQ")
_LENGTH = struct.Struct(">I")
MAX_FRAME_BYTES = 64 * 1024 * 1024
FORWARD_GROUP = 2**64 - 1
GOSSIP_GROUP = 2**64 - 2
BEAT_GROUP = 2**64 - 3
_RESERVED = (FORWARD_GROUP, GOSSIP_GROUP, BEAT_GROUP)
_BEAT_ITEM = struct.Struct(">QBQQ")
_U64 = struct.Struct(">Q")
Beat = Heartbeat | HeartbeatResponse
Inbound = Message | bytes  # a raft message, or the body of a forward or gossip frame


class FrameError(ValueError):
    """Bytes from a peer that break the framing; the connection is dropped."""


def encode_hello(node_id: int) -> bytes:
    return HELLO.pack(MAGIC, node_id)


def decode_hello(data: bytes) -> int:
    magic, node_id = HELLO.unpack(data)
    if magic != MAGIC:
        raise FrameError("not a VDL raft connection")
    return int(node_id)


def encode_frame(group_id: int, message: Message) -> bytes:
    parts = wire.encode_parts(message)
    length = 8 + sum(len(part) for part in parts)
    return b"".join([_FRAME_HEAD.pack(length, group_id), *parts])


def encode_forward(command: bytes) -> bytes:
    return _FRAME_HEAD.pack(8 + len(command), FORWARD_GROUP) + command


def encode_gossip(body: bytes) -> bytes:
    return _FRAME_HEAD.pack(8 + len(body), GOSSIP_GROUP) + body


def encode_beat(incarnation: int, items: Sequence[tuple[int, Beat]]) -> bytes:
    body = bytearray(_U64.pack(incarnation))
    for group_id, m in items:
        if isinstance(m, Heartbeat):
            body += _BEAT_ITEM.pack(group_id, 2 if m.quiesce else 1, m.term, m.commit)
        else:
            body += _BEAT_ITEM.pack(group_id, 3, m.term, 0)
    return _FRAME_HEAD.pack(8 + len(body), BEAT_GROUP) + body


def decode_beat(body: bytes, src: int, dst: int) -> tuple[int, list[tuple[int, Beat]]]:
    """A beat's incarnation and heartbeats, from `src` to `dst`; FrameError if malformed."""
    if len(body) < _U64.size or (len(body) - _U64.size) % _BEAT_ITEM.size:
        raise FrameError(f"a beat of {len(body)} bytes")
    (incarnation,) = _U64.unpack_from(body)
    items: list[tuple[int, Beat]] = []
    for group_id, kind, term, commit in _BEAT_ITEM.iter_unpack(memoryview(body)[_U64.size :]):
        if term >= wire.MAX_NUMBER or commit >= wire.MAX_NUMBER or group_id in _RESERVED:
            raise FrameError("a beat with a term, commit or group out of range")
        m: Beat
        if kind in (1, 2):
            m = Heartbeat(src, dst, term, commit, kind == 2)
        elif kind == 3:
            m = HeartbeatResponse(src, dst, term)
        else:
            raise FrameError(f"a beat item of kind {kind}")
        items.append((group_id, m))
    return incarnation, items


class FrameReader:
    """Accumulates received bytes and yields whole (group id, message) frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray) -> list[tuple[int, Inbound]]:
        self._buf += data
        out: list[tuple[int, Inbound]] = []
        pos = 0
        buf = self._buf
        while len(buf) - pos >= _FRAME_HEAD.size:
            (length,) = _LENGTH.unpack_from(buf, pos)
            if length < 8 or length > MAX_FRAME_BYTES:
                raise FrameError(f"bad frame length {length}")
            if len(buf) - pos < 4 + length:
                break
            (group_id,) = struct.unpack_from(">Q", buf, pos + 4)
            body = memoryview(buf)[pos + 12 : pos + 4 + length]
            try:
                if group_id in _RESERVED:
                    out.append((group_id, bytes(body)))
                else:
                    out.append((group_id, wire.decode(body)))
            except wire.WireError as exc:
                raise FrameError(str(exc)) from exc
            finally:
                body.release()
            pos += 4 + length
        if pos:
            del buf[:pos]
        return out
