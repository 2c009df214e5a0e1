"""Snapshot plumbing: the stores' reset and retention cap, the pull of a leader's log
(closed segments as files, then entries) over TCP and over memory streams, and the record
of where a log starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.integration.node_process import free_port
from tests.unit.storage.log_helpers import LogWriter, same_entries
from vdl.backends.api import (
    ClosedSegments,
    Entry,
    EntryType,
    LogRetention,
    LogStore,
    LogStoreOptions,
    StorageError,
)
from vdl.backends.registry import LogBackend, open_log_store, open_meta_store
from vdl.consensus.membership import Config
from vdl.consensus.messages import Message
from vdl.consensus.router import GroupRouter
from vdl.consensus.snapshot_transfer import (
    REQUEST,
    SnapshotError,
    delete_snapshot_meta,
    load_snapshot_meta,
    receive_snapshot,
    save_snapshot_meta,
    serve_snapshot,
)
from vdl.consensus.snapshot_wire import (
    SnapshotDecoder,
    decode_request,
    encode_chunk,
    encode_end,
    encode_entries,
    encode_file,
    encode_head,
)
from vdl.consensus.state import SnapshotMeta
from vdl.consensus.transport import RaftTransport
from vdl.log.record_batch import Record, build_batch


def _entry(index: int, offset: int) -> Entry:
    batch = build_batch([Record(None, b"v%d" % index, 1_000, [])], base_offset=offset)
    return Entry(1, index, EntryType.DATA, batch)


def _filled(kind: str, directory: Path, count: int) -> LogStore:
    options = LogStoreOptions(segment_bytes=400, retention=LogRetention(max_bytes=1))
    store = open_log_store(kind, directory, options)  # type: ignore[arg-type]
    for i in range(1, count + 1):
        store.append([_entry(i, i - 1)])
    store.sync()
    return store


@pytest.mark.parametrize("kind", ["segment", "rocks"])
def test_retention_never_passes_keep_from(kind: str, tmp_path: Path) -> None:
    store = _filled(kind, tmp_path, 40)
    store.apply_retention(10**15, keep_from=12)
    assert 1 < store.first_index() <= 12
    store.apply_retention(10**15)
    assert store.first_index() > 12
    store.close()


@pytest.mark.parametrize("kind", ["segment", "rocks"])
def test_reset_empties_the_log_to_go_on_elsewhere(kind: str, tmp_path: Path) -> None:
    store = _filled(kind, tmp_path, 20)
    store.reset(100, 500)
    assert (store.first_index(), store.last_index()) == (100, 99)
    assert store.next_offset() == 500
    store.append([_entry(100, 500), _entry(101, 501)])
    store.sync()
    store.close()
    store = open_log_store(kind, tmp_path, LogStoreOptions(segment_bytes=400))  # type: ignore[arg-type]
    assert (store.first_index(), store.last_index(), store.next_offset()) == (100, 101, 502)
    assert [e.index for e in store.entries(100, 102)] == [100, 101]
    store.close()


def test_the_snapshot_record_round_trips(tmp_path: Path) -> None:
    meta = open_meta_store(tmp_path)
    assert load_snapshot_meta(meta, 5) is None
    snap = SnapshotMeta(42, 3, Config(frozenset({1, 2, 4}), frozenset({5})))
    save_snapshot_meta(meta, 5, snap)
    assert load_snapshot_meta(meta, 5) == snap
    delete_snapshot_meta(meta, 5)
    assert load_snapshot_meta(meta, 5) is None
    meta.close()


class StoreSource:
    """A group that serves its stored log, as a GroupDriver does."""

    def __init__(self, store: LogStore) -> None:
        self.store = store

    def deliver(self, message: Message) -> None:
        pass

    def snapshot_start(self) -> tuple[int, int]:
        return self.store.first_index(), self.store.first_offset()

    def snapshot_files(self, upto: int) -> ClosedSegments:
        return self.store.closed_segments(upto)

    def snapshot_entries(self, lo: int, upto: int, max_bytes: int) -> Iterator[list[Entry]]:
        while lo <= upto:
            try:
                chunk = self.store.entries(lo, upto + 1, max_bytes)
            except StorageError as exc:
                raise SnapshotError(str(exc)) from None
            if not chunk:
                raise SnapshotError(f"entry {lo} is gone")
            yield chunk
            lo = chunk[-1].index + 1


LEADER = LogStoreOptions(segment_bytes=3_000, retention=LogRetention(max_bytes=20_000))
FOLLOWER = LogStoreOptions(segment_bytes=3_000)
CONFIG = Config(frozenset({1, 2, 3}))


def leader_store(directory: Path) -> LogStore:
    """A leader's log of 200 entries in segments, its first ones removed by retention."""
    store = open_log_store("segment", directory, LEADER)
    log = LogWriter(store, term=3)
    for _ in range(200):
        log.data(count=2, value_size=150)
    store.sync()
    assert store.apply_retention(10**15) > 0
    return store


def follower_store(kind: LogBackend, directory: Path) -> LogStore:
    store = open_log_store(kind, directory, FOLLOWER)
    LogWriter(store, term=1).data(n=10)
    store.sync()
    return store


def snapshot_of(store: LogStore, upto: int) -> SnapshotMeta:
    return SnapshotMeta(upto, store.term_at(upto), CONFIG)


def same_log(follower: LogStore, leader: LogStore, upto: int) -> bool:
    first = leader.first_index()
    return (follower.first_index(), follower.last_index()) == (first, upto) and same_entries(
        follower.entries(first, upto + 1), leader.entries(first, upto + 1)
    )


@pytest.mark.parametrize("kind", ["segment", "rocks"])
async def test_a_follower_pulls_the_leaders_log_over_tcp(kind: LogBackend, tmp_path: Path) -> None:
    leader = leader_store(tmp_path / "leader")
    follower = follower_store(kind, tmp_path / "follower")
    upto = leader.last_index() - 4  # the last few in the active segment
    ports = {1: free_port(), 2: free_port()}
    peers = {n: ("127.0.0.1", p) for n, p in ports.items()}
    routers = {n: GroupRouter() for n in ports}
    routers[1].add(9, StoreSource(leader))
    transports = {n: RaftTransport(n, peers[n], peers, routers[n]) for n in ports}
    async with trio.open_nursery() as nursery:
        for transport in transports.values():
            await nursery.start(transport.serve)
        staging = follower.stage_snapshot()
        data = await transports[2].fetch_snapshot(1, 9, snapshot_of(leader, upto), staging)
        assert (data.first_index, data.last_index) == (leader.first_index(), upto)
        if kind == "segment":
            # Closed segments as files, then the rest as entries.
            held = leader.closed_segments(upto)
            assert data.files == len(held.files) > 1
            assert data.file_bytes == sum(f.size for f in held.files)
            assert data.entries == upto - held.files[-1].last_index
            held.release()
        else:
            assert (data.files, data.entries) == (0, upto - leader.first_index() + 1)
        follower.install_snapshot(staging)
        assert same_log(follower, leader, upto)
        # A group the leader does not run, or entries it does not have, fail cleanly.
        for group, index in ((8, upto), (9, leader.last_index() + 5)):
            staging = follower.stage_snapshot()
            snapshot = SnapshotMeta(index, 3, CONFIG)
            with pytest.raises(SnapshotError):
                await transports[2].fetch_snapshot(1, group, snapshot, staging)
            staging.discard()
        nursery.cancel_scope.cancel()
    leader.close()
    follower.close()


async def _serve_one(stream: trio.abc.Stream, source: StoreSource) -> None:
    """The leader's end of a pull, as the raft listener runs it."""
    request = bytearray()
    while len(request) < REQUEST.size:
        request += await stream.receive_some(REQUEST.size - len(request))
    _, upto, takes_files = decode_request(bytes(request))
    try:
        await serve_snapshot(stream, source, upto, takes_files=takes_files)
    except SnapshotError:
        pass
    finally:
        await stream.aclose()


async def test_a_pull_over_memory_streams_installs_and_the_log_goes_on(tmp_path: Path) -> None:
    leader = leader_store(tmp_path / "leader")
    follower = follower_store("segment", tmp_path / "follower")
    upto = leader.last_index()
    follower_end, leader_end = trio.testing.memory_stream_pair()
    staging = follower.stage_snapshot()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_one, leader_end, StoreSource(leader))
        data = await receive_snapshot(follower_end, 9, snapshot_of(leader, upto), staging)
        await follower_end.aclose()
    assert data.files > 1
    follower.install_snapshot(staging)
    assert same_log(follower, leader, upto)
    # Entries after the install append where the leader's log would go on.
    log = LogWriter(follower, term=4)
    assert (log.index, log.offset) == (upto + 1, leader.next_offset())
    log.data(count=3, n=5)
    follower.sync()
    assert follower.index_of_offset(leader.next_offset() + 4) == upto + 2
    leader.close()
    follower.close()


class _Meddling(trio.abc.Stream):
    """The leader's end of a memory stream that runs `meddle` once, after the first chunk
    of a file went out."""

    def __init__(self, inner: trio.abc.Stream, meddle: object) -> None:
        self.inner = inner
        self.meddle = meddle
        self.chunks = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)
        if bytes(data[:1]) == b"C":
            self.chunks += 1
            if self.chunks == 1:
                assert callable(self.meddle)
                self.meddle()

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_held_segment_cut_on_the_leader_fails_the_pull(tmp_path: Path) -> None:
    leader = leader_store(tmp_path / "leader")
    follower = follower_store("segment", tmp_path / "follower")
    old = follower.entries(1, 11)
    upto = leader.last_index()
    first_file = leader.closed_segments(upto)
    cut_at = first_file.files[0].last_index  # inside the first file being sent
    first_file.release()
    follower_end, leader_end = trio.testing.memory_stream_pair()
    meddling = _Meddling(leader_end, lambda: leader.truncate_suffix(cut_at))
    staging = follower.stage_snapshot()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_one, meddling, StoreSource(leader))
        with pytest.raises(SnapshotError, match="changed while being sent"):
            await receive_snapshot(follower_end, 9, snapshot_of(leader, upto), staging)
        await follower_end.aclose()
    staging.discard()
    assert same_entries(follower.entries(1, 11), old)
    leader.close()
    follower.close()


async def test_retention_waits_for_a_pull(tmp_path: Path) -> None:
    leader = leader_store(tmp_path / "leader")
    LogWriter(leader, term=3).data(count=2, value_size=150, n=100)
    leader.sync()
    first = leader.first_index()
    removed: list[int] = []
    follower = follower_store("segment", tmp_path / "follower")
    upto = leader.last_index()
    follower_end, leader_end = trio.testing.memory_stream_pair()
    meddling = _Meddling(leader_end, lambda: removed.append(leader.apply_retention(10**15)))
    staging = follower.stage_snapshot()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_one, meddling, StoreSource(leader))
        await receive_snapshot(follower_end, 9, snapshot_of(leader, upto), staging)
        await follower_end.aclose()
    assert removed == [0] and leader.first_index() == first
    follower.install_snapshot(staging)
    assert same_log(follower, leader, upto)
    assert leader.apply_retention(10**15) > 0  # once the pull let go
    leader.close()
    follower.close()


async def _fake_leader(stream: trio.abc.Stream, records: list[bytes]) -> None:
    await stream.receive_some(REQUEST.size)
    try:
        for record in records:
            await stream.send_all(record)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the follower hung up on a damaged transfer, as it should
    await stream.aclose()


def _corrupt_chunk(data: bytes) -> bytes:
    record = bytearray(encode_chunk(data))
    record[-10] ^= 0x01  # the data changed on the way; its CRC did not
    return bytes(record)


@pytest.mark.parametrize("damage", ["chunk", "file", "short", "no end", "wrong end"])
async def test_a_damaged_transfer_fails_and_the_old_log_stays(tmp_path: Path, damage: str) -> None:
    leader = leader_store(tmp_path / "leader")
    follower = follower_store("segment", tmp_path / "follower")
    old = follower.entries(1, 11)
    upto = leader.last_index()
    held = leader.closed_segments(upto)
    files = held.files
    held.release()
    records = [encode_head(leader.first_index(), leader.first_offset())]
    for n, file in enumerate(files):
        data = file.path.read_bytes()
        if damage == "file" and n == 1:
            # Damaged on the leader's disk: every chunk CRC matches, an entry's does not.
            changed = bytearray(data)
            changed[len(changed) // 2] ^= 0x01
            data = bytes(changed)
        records.append(encode_file(file.name, file.size))
        chunks = [data[at : at + 1000] for at in range(0, len(data), 1000)]
        if damage == "chunk" and n == 1:
            chunks[1] = _corrupt_chunk(chunks[1])
            records += [encode_chunk(c) if i != 1 else c for i, c in enumerate(chunks)]
        elif damage == "short" and n == len(files) - 1:
            records += [encode_chunk(c) for c in chunks[:-1]]
            break
        else:
            records += [encode_chunk(c) for c in chunks]
    if damage == "wrong end":
        records.append(encode_end(files[-1].last_index, len(files)))
    elif damage != "no end":
        records.append(encode_end(upto, len(files)))
    follower_end, leader_end = trio.testing.memory_stream_pair()
    staging = follower.stage_snapshot()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_fake_leader, leader_end, records)
        with pytest.raises(SnapshotError):
            await receive_snapshot(follower_end, 9, snapshot_of(leader, upto), staging)
        await follower_end.aclose()
    staging.discard()
    assert same_entries(follower.entries(1, 11), old)
    follower.close()
    reopened = open_log_store("segment", tmp_path / "follower", FOLLOWER)
    assert same_entries(reopened.entries(1, 11), old)
    assert list((tmp_path / "follower").glob("*.staging")) == []
    reopened.close()
    leader.close()


def test_an_entries_record_with_a_garbage_config_entry_is_a_snapshot_error() -> None:
    decoder = SnapshotDecoder()
    decoder.feed(encode_head(1, 0))
    garbage = (Entry(1, 1, EntryType.CONFIG, b"\x01\xff\xff"),)
    with pytest.raises(SnapshotError, match="bad configuration"):
        decoder.feed(encode_entries(garbage))
