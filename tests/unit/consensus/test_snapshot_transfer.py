"""Snapshot plumbing: the stores' reset and retention cap, the TCP pull of a leader's log,
and the record of where a log starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.unit.consensus.test_transport import free_port
from vdl.backends.api import Entry, EntryType, LogRetention, LogStore, LogStoreOptions
from vdl.backends.registry import open_log_store, open_meta_store
from vdl.consensus.membership import Config
from vdl.consensus.messages import Message
from vdl.consensus.router import GroupRouter
from vdl.consensus.snapshot_transfer import (
    SnapshotError,
    delete_snapshot_meta,
    load_snapshot_meta,
    save_snapshot_meta,
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


class _Source:
    """A group that serves a stored log, as a GroupDriver does."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries

    def deliver(self, message: Message) -> None:
        pass

    def snapshot_start(self) -> tuple[int, int]:
        return self.entries[0].index, 70

    def snapshot_chunks(self, upto: int, max_bytes: int) -> Iterator[list[Entry]]:
        wanted = [e for e in self.entries if e.index <= upto]
        for i in range(0, len(wanted), 3):
            yield wanted[i : i + 3]


async def test_a_follower_pulls_the_leaders_log_over_tcp() -> None:
    ports = {1: free_port(), 2: free_port()}
    peers = {n: ("127.0.0.1", p) for n, p in ports.items()}
    routers = {n: GroupRouter() for n in ports}
    entries = [_entry(i, 70 + i - 10) for i in range(10, 30)]
    routers[1].add(9, _Source(entries))
    transports = {n: RaftTransport(n, peers[n], peers, routers[n]) for n in ports}
    async with trio.open_nursery() as nursery:
        for transport in transports.values():
            await nursery.start(transport.serve)
        data = await transports[2].fetch_snapshot(1, 9, 25)
        assert (data.first_index, data.first_offset) == (10, 70)
        assert data.entries == entries[:16]
        # A group the leader does not run, or entries it does not have, fail cleanly.
        with pytest.raises(SnapshotError):
            await transports[2].fetch_snapshot(1, 8, 25)
        with pytest.raises(SnapshotError):
            await transports[2].fetch_snapshot(1, 9, 40)
        nursery.cancel_scope.cancel()
