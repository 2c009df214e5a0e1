"""Framing of consensus messages between nodes: many groups share one connection.

    hello (once, by the dialing side):  u32 magic "VDLR", u64 node id (0: an admin client,
                                         whose forward frames are metadata commands)
    frame:                               u32 length, u64 group id, wire-encoded message
                                         (length counts the group id and the message)

Group id FORWARD_GROUP marks a frame whose body is not a raft message but a metadata
command a node asks the metadata group's leader to propose for it (registration), and
GOSSIP_GROUP one whose body is node-to-node cluster gossip (which groups a node leads);
the consensus layer hands both bodies up as bytes without reading them.
"""

from __future__ import annotations

import struct

from vdl.consensus import wire
from vdl.consensus.messages import Message

MAGIC = 0x56444C52  # "VDLR"
HELLO = struct.Struct(">IQ")
_FRAME_HEAD = struct.Struct(">IQ")
_LENGTH = struct.Struct(">I")
MAX_FRAME_BYTES = 64 * 1024 * 1024
FORWARD_GROUP = 2**64 - 1
GOSSIP_GROUP = 2**64 - 2
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
    body = wire.encode(message)
    return _FRAME_HEAD.pack(8 + len(body), group_id) + body


def encode_forward(command: bytes) -> bytes:
    return _FRAME_HEAD.pack(8 + len(command), FORWARD_GROUP) + command


def encode_gossip(body: bytes) -> bytes:
    return _FRAME_HEAD.pack(8 + len(body), GOSSIP_GROUP) + body


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
                if group_id in (FORWARD_GROUP, GOSSIP_GROUP):
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
