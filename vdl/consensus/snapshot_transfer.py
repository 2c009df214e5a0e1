"""Moving a snapshot of a log stream to a lagging follower (VDL 5.2.3), and its record.

A replicated stream's "snapshot" is its log itself: once retention has deleted the prefix a
follower still needs, the follower takes everything the leader still holds up to the
snapshot's index, and Raft replication carries on after it. The follower pulls it over a
connection of its own to the leader's raft port (so the bulk never queues behind, or
delays, the small raft messages of other groups):

    request (follower -> leader):  u32 magic "VDLS", u64 group id, u64 snapshot index
    answer (leader -> follower):   a frame of FORWARD_GROUP whose body is u64 first index,
                                   u64 first offset of the leader's log; then frames of
                                   AppendEntries (entries first index .. snapshot index,
                                   about 1 MiB each); then the leader closes.

The entries are read from the leader's closed segments and sent as they are stored (one
record batch per entry, never re-encoded). The follower gathers them in memory before it
swaps its log for them, so a snapshot is bounded by memory (a limit worth lifting by
staging segment files on disk). With raft TLS the pull is TLS too, and the leader must
present its own node's certificate (`peer_tls.py`).

`SnapshotMeta` of the latest snapshot or retention point is kept in the MetaStore so a
restarted node knows the term and membership at the start of its log.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import trio

from vdl.backends.api import Entry, MetaStore
from vdl.consensus.frames import FORWARD_GROUP, FrameError, FrameReader, encode_frame
from vdl.consensus.membership import decode_config, encode_config
from vdl.consensus.messages import AppendEntries
from vdl.consensus.peer_tls import PeerTls, open_raft_stream
from vdl.consensus.state import SnapshotMeta

SNAPSHOT_MAGIC = 0x56444C53  # "VDLS"
REQUEST = struct.Struct(">IQQ")
_HEAD = struct.Struct(">QQ")
_META = struct.Struct(">QQ")
CHUNK_BYTES = 1024 * 1024


class SnapshotError(Exception):
    """The transfer failed or its content does not describe the asked snapshot."""


@dataclass(frozen=True, slots=True)
class SnapshotData:
    first_index: int
    first_offset: int
    entries: list[Entry]


@runtime_checkable
class SnapshotSource(Protocol):
    """A group that can serve its stored log (a GroupDriver)."""

    def snapshot_chunks(self, upto: int, max_bytes: int) -> Iterator[list[Entry]]: ...

    def snapshot_start(self) -> tuple[int, int]:
        """(first index, first offset) of the stored log."""
        ...


async def serve_snapshot(
    stream: trio.abc.Stream, node_id: int, group_id: int, source: SnapshotSource, upto: int
) -> None:
    first_index, first_offset = source.snapshot_start()
    head = _HEAD.pack(first_index, first_offset)
    await stream.send_all(struct.pack(">IQ", 8 + len(head), FORWARD_GROUP) + head)
    for chunk in source.snapshot_chunks(upto, CHUNK_BYTES):
        message = AppendEntries(node_id, 0, 0, chunk[0].index - 1, 0, 0, tuple(chunk))
        await stream.send_all(encode_frame(group_id, message))


async def fetch_snapshot(
    address: tuple[str, int],
    group_id: int,
    upto: int,
    *,
    tls: PeerTls | None = None,
    node_id: int | None = None,
) -> SnapshotData:
    """Pull the leader's log up to `upto` (inclusive) from `address` (node `node_id`'s
    raft port); SnapshotError if it is incomplete."""
    try:
        stream = await open_raft_stream(address, tls, node_id)
    except OSError as exc:
        raise SnapshotError(f"cannot reach the leader: {exc}") from None
    reader = FrameReader()
    head: tuple[int, int] | None = None
    entries: list[Entry] = []
    try:
        await stream.send_all(REQUEST.pack(SNAPSHOT_MAGIC, group_id, upto))
        while data := await stream.receive_some(256 * 1024):
            for _, body in reader.feed(data):
                if isinstance(body, bytes):
                    head = _HEAD.unpack(body)
                elif isinstance(body, AppendEntries):
                    entries.extend(body.entries)
    except (FrameError, trio.BrokenResourceError, OSError) as exc:
        raise SnapshotError(f"snapshot transfer broke: {exc}") from None
    finally:
        await stream.aclose()
    if head is None:
        raise SnapshotError("the leader did not describe its log")
    first_index, first_offset = head
    expected = list(range(first_index, upto + 1))
    if [e.index for e in entries] != expected:
        raise SnapshotError(f"snapshot entries do not cover {first_index}..{upto}")
    return SnapshotData(first_index, first_offset, entries)


def _key(group_id: int) -> bytes:
    return b"raft/%d/snapshot" % group_id


def save_snapshot_meta(meta: MetaStore, group_id: int, snapshot: SnapshotMeta) -> None:
    meta.put(
        _key(group_id), _META.pack(snapshot.index, snapshot.term) + encode_config(snapshot.config)
    )


def load_snapshot_meta(meta: MetaStore, group_id: int) -> SnapshotMeta | None:
    raw = meta.get(_key(group_id))
    if raw is None:
        return None
    index, term = _META.unpack_from(raw, 0)
    return SnapshotMeta(index, term, decode_config(raw[_META.size :]))


def delete_snapshot_meta(meta: MetaStore, group_id: int) -> None:
    meta.delete(_key(group_id))
