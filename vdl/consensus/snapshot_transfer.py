"""Moving a snapshot of a log stream to a lagging follower (VDL 5.2.3), and its record.

A replicated stream's "snapshot" is its log itself: once retention has deleted the prefix a
follower still needs, the follower takes everything the leader still holds up to the
snapshot's index, and Raft replication carries on after it. What the leader holds in
closed segments goes as the segment files themselves, byte for byte; entries past them
(in the active segment) go as entries. The follower pulls it over a connection of its own
to the leader's raft port, so the bulk never queues behind, or delays, the small raft
messages of other groups. With raft TLS the pull is TLS too, and the leader must present
its own node's certificate (`peer_tls.py`).

Protocol (big-endian; encoding in `snapshot_wire.py`):

    request (follower -> leader):  u32 magic "VDLS", u64 group id, u64 snapshot index,
                                   u32 flags (1: the follower takes segment files)
    answer (leader -> follower):   records of u8 kind, u32 body length, body:
      'H' head      u64 first index, u64 first offset of the leader's log (first record)
      'F' file      u64 size, UTF-8 name: a segment file follows, as
      'C' chunk     u32 CRC-32C of the data, data (at most 1 MiB) ... until `size` bytes
      'E' entries   a raft AppendEntries (wire.py) whose entries follow prev_index
      'Z' end       u64 last index sent, u32 files sent (last record; the leader closes)
      'X' failed    UTF-8 reason (the leader gave up; the follower retries later)

Files, each complete, come first, in index order from the first index; then entries up to
the snapshot index. A follower that takes no files (a store without segment files) gets
only entries. Each chunk carries its own CRC rather than the file header one for the
whole file, so the leader reads each file once, streaming it, and a corrupted chunk is
caught as soon as it arrives; the entries inside the files carry their CRCs as stored, and
the follower checks those too. Whatever ends without the end record is a failed transfer.

Leader side: the files are read in chunks in a worker thread (the event loop never waits
for the disk), from the store's closed, durable segments, held against retention for the
transfer (`LogStore.closed_segments`). A truncation or snapshot install on the leader's
node that removes or cuts one of them breaks the hold: the leader then stops with 'X'
rather than send bytes that are no longer those entries.

Follower side: every record goes to a `SnapshotStaging` of the follower's store, in a
worker thread: a directory inside the store's, where each file is checked entry by entry
and indexed when complete, and the entries are written as one more segment file; then
`finish` checks that the whole covers the log's first index to the snapshot index without
a gap, ending in the snapshot's term, and syncs it. Nothing is kept in memory but the
record being decoded. The driver then swaps it in (`LogStore.install_snapshot`).

`SnapshotMeta` of the latest snapshot or retention point is kept in the MetaStore so a
restarted node knows the term and membership at the start of its log.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import trio

from vdl.backends.api import (
    ClosedSegments,
    Entry,
    MetaStore,
    SegmentFile,
    SnapshotStaging,
    StorageError,
)
from vdl.consensus.membership import decode_config, encode_config
from vdl.consensus.peer_tls import PeerTls, open_raft_stream
from vdl.consensus.snapshot_wire import (
    MAX_CHUNK,
    REQUEST,
    SNAPSHOT_MAGIC,
    Entries,
    Event,
    FileData,
    FileEnd,
    FileStart,
    Head,
    SnapshotDecoder,
    SnapshotError,
    encode_chunk,
    encode_end,
    encode_entries,
    encode_failure,
    encode_file,
    encode_head,
    encode_request,
)
from vdl.consensus.state import SnapshotMeta

__all__ = [
    "REQUEST",
    "SNAPSHOT_MAGIC",
    "SnapshotData",
    "SnapshotError",
    "SnapshotSource",
    "fetch_snapshot",
    "receive_snapshot",
    "serve_snapshot",
]

_META = struct.Struct(">QQ")
CHUNK_BYTES = MAX_CHUNK
_RECEIVE_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class SnapshotData:
    """What a transfer staged: the log `first_index`..`last_index`, of which `files`
    segment files (`file_bytes` bytes) and then `entries` entries."""

    first_index: int
    last_index: int
    files: int
    file_bytes: int
    entries: int


@runtime_checkable
class SnapshotSource(Protocol):
    """A group that can serve its stored log (a GroupDriver)."""

    def snapshot_start(self) -> tuple[int, int]:
        """(first index, first offset) of the stored log."""
        ...

    def snapshot_files(self, upto: int) -> ClosedSegments:
        """The closed segment files from the first index, none past `upto`, held."""
        ...

    def snapshot_entries(self, lo: int, upto: int, max_bytes: int) -> Iterator[list[Entry]]:
        """Stored entries `lo`..`upto` in chunks; SnapshotError if one is gone."""
        ...


# ---- leader ----------------------------------------------------------------------------


async def serve_snapshot(
    stream: trio.abc.Stream, source: SnapshotSource, upto: int, *, takes_files: bool
) -> None:
    """Send the log up to `upto` (inclusive); SnapshotError (after telling the follower)
    if it cannot be sent whole."""
    # No await between these two: the files start where the head says the log does.
    first_index, first_offset = source.snapshot_start()
    held = source.snapshot_files(upto) if takes_files else ClosedSegments()
    try:
        await stream.send_all(encode_head(first_index, first_offset))
        next_index = first_index
        for file in held.files:
            await _send_file(stream, file, held)
            next_index = file.last_index + 1
        for chunk in source.snapshot_entries(next_index, upto, CHUNK_BYTES):
            await stream.send_all(encode_entries(tuple(chunk)))
        await stream.send_all(encode_end(upto, len(held.files)))
    except SnapshotError as exc:
        with trio.move_on_after(5):
            await stream.send_all(encode_failure(str(exc)))
        raise
    finally:
        held.release()


async def _send_file(stream: trio.abc.Stream, file: SegmentFile, held: ClosedSegments) -> None:
    if held.broken:
        raise SnapshotError(f"segment file {file.name} changed while being sent")
    try:
        fd = await trio.to_thread.run_sync(os.open, file.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SnapshotError(f"segment file {file.name} is gone") from None
    try:
        await stream.send_all(encode_file(file.name, file.size))
        at = 0
        while at < file.size:
            want = min(CHUNK_BYTES, file.size - at)
            record = await trio.to_thread.run_sync(_read_chunk, fd, want, at)
            # Checked after the read: a cut or removal before it returned shows here.
            if held.broken:
                raise SnapshotError(f"segment file {file.name} changed while being sent")
            await stream.send_all(record)
            at += want
    finally:
        os.close(fd)


def _read_chunk(fd: int, n: int, at: int) -> bytes:
    """The chunk record of `n` bytes at `at` (read and CRC'ed in a worker thread)."""
    parts = []
    got = 0
    while got < n:
        data = os.pread(fd, n - got, at + got)
        if not data:
            raise SnapshotError(f"segment file shorter than {at + n} bytes")
        parts.append(data)
        got += len(data)
    return encode_chunk(b"".join(parts))


# ---- follower ------------------------------------------------------------------------


async def fetch_snapshot(
    address: tuple[str, int],
    group_id: int,
    snapshot: SnapshotMeta,
    staging: SnapshotStaging,
    *,
    tls: PeerTls | None = None,
    node_id: int | None = None,
) -> SnapshotData:
    """Pull the leader's log up to `snapshot.index` from `address` (node `node_id`'s raft
    port) into `staging`, finished; SnapshotError if it is incomplete or does not check
    out (the caller discards `staging` then)."""
    try:
        stream = await open_raft_stream(address, tls, node_id)
    except OSError as exc:
        raise SnapshotError(f"cannot reach the leader: {exc}") from None
    try:
        return await receive_snapshot(stream, group_id, snapshot, staging)
    finally:
        await stream.aclose()


async def receive_snapshot(
    stream: trio.abc.Stream, group_id: int, snapshot: SnapshotMeta, staging: SnapshotStaging
) -> SnapshotData:
    """The follower's side of a transfer over a connection to the leader (not closed)."""
    decoder = SnapshotDecoder()
    tally = _Tally()
    try:
        await stream.send_all(encode_request(group_id, snapshot.index, staging.takes_files))
        while decoder.end is None:
            data = await stream.receive_some(_RECEIVE_BYTES)
            if not data:
                raise SnapshotError("the leader closed before the end of the snapshot")
            events = decoder.feed(data)
            if events:
                await trio.to_thread.run_sync(_stage, staging, events, tally)
        if decoder.end.last_index != snapshot.index:
            raise SnapshotError(f"the leader sent up to {decoder.end.last_index}")
        await trio.to_thread.run_sync(staging.finish, snapshot.index, snapshot.term)
    except (trio.BrokenResourceError, OSError) as exc:
        raise SnapshotError(f"snapshot transfer broke: {exc}") from None
    except StorageError as exc:
        raise SnapshotError(f"the snapshot does not check out: {exc}") from None
    return SnapshotData(tally.first_index, snapshot.index, tally.files, tally.bytes, tally.entries)


@dataclass(slots=True)
class _Tally:
    first_index: int = 0
    files: int = 0
    bytes: int = 0
    entries: int = 0


def _stage(staging: SnapshotStaging, events: list[Event], tally: _Tally) -> None:
    for event in events:
        if isinstance(event, FileData):
            staging.write(event.data)
            tally.bytes += len(event.data)
        elif isinstance(event, Entries):
            staging.add_entries(event.entries)
            tally.entries += len(event.entries)
        elif isinstance(event, FileStart):
            _check_name(event.name)
            staging.begin_file(event.name, event.size)
        elif isinstance(event, FileEnd):
            staging.end_file()
            tally.files += 1
        elif isinstance(event, Head):
            staging.start(event.first_index, event.first_offset)
            tally.first_index = event.first_index


def _check_name(name: str) -> None:
    # The name becomes a path in the follower's staging directory.
    if Path(name).name != name or name in (".", ".."):
        raise SnapshotError(f"file name {name!r} from the leader")


# ---- the record of where a log starts --------------------------------------------------


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
