"""Opening a stream walks its batch headers once: a Raft replica restarted with entries past
its saved commit point finds its high watermark and the entries waiting for their commit
in the same pass that rebuilds the producer table, the transactions, the leader epochs and
the timestamp index, and gets the same state as a stream whose whole log is committed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import trio

from tests.unit.consensus.driver_cluster import RAFT, MemoryNet
from tests.unit.consensus.stream_nodes import STREAM_OPTIONS
from vdl.backends.api import LogStore, LogStoreOptions
from vdl.backends.registry import open_log_store, open_meta_store
from vdl.consensus.driver import GroupDriver
from vdl.consensus.hard_state_store import save_hard_state
from vdl.consensus.state import HardState
from vdl.consensus.stream_replica import StreamMachine, raft_appender
from vdl.log.appender import LocalAppender
from vdl.log.flusher import Flusher
from vdl.log.record_batch import (
    Record,
    build_batch,
    parse_batch_header,
    validate_produced_batch,
)
from vdl.log.stream import LogStream

GROUP = 7
PRODUCER = 4242


class _CountingStore:
    """A real LogStore that counts the walks over its batch headers."""

    def __init__(self, real: LogStore) -> None:
        self._real = real
        self.header_scans = 0

    def data_headers(self) -> Iterator[tuple[int, bytes]]:
        self.header_scans += 1
        return self._real.data_headers()

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


def _append(stream: LogStream, n: int, *, transactional: bool = False) -> int:
    records = [Record(None, b"v%d" % n, 1_000 + 7 * n, [])]
    batch = build_batch(
        records,
        producer_id=PRODUCER,
        producer_epoch=0,
        base_sequence=n,
        is_transactional=transactional,
    )
    info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    return stream.append(batch, info).last_offset


def _state(stream: LogStream) -> tuple[object, ...]:
    """What the open rebuilds from the headers, as readers of the stream see it."""
    entry = stream.producers.get(PRODUCER)
    return (
        stream.epochs.entries(),
        None if entry is None else (entry.epoch, list(entry.batches), entry.coordinator_epoch),
        stream.txns.open_transactions(),
        list(stream.txns.aborted_index()),
        [stream._timestamps.start_for(t) for t in (0, 1_000, 1_200, 1_500, 10_000)],
    )


async def test_a_replica_restarted_past_its_commit_point_walks_the_headers_once(
    tmp_path: Path,
) -> None:
    flusher = Flusher()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        # A log of 60 batches of one idempotent producer, an aborted transaction among them.
        store = open_log_store("segment", tmp_path / "log", LogStoreOptions())
        stream = LogStream("t-0", store, LocalAppender.factory(flusher), lambda: 5_000)
        for n in range(40):
            _append(stream, n)
        for n in range(40, 50):
            _append(stream, n, transactional=True)
        stream.append_marker(PRODUCER, 0, False, 3)
        for n in range(50, 60):
            last = _append(stream, n)
        await stream.wait_committed(last)
        await stream.close()
        # Opened again with the whole log committed: the state to get.
        counting = _CountingStore(open_log_store("segment", tmp_path / "log", LogStoreOptions()))
        whole = LogStream("t-0", counting, LocalAppender.factory(flusher), lambda: 5_000)  # type: ignore[arg-type]
        assert counting.header_scans == 1
        want = _state(whole)
        ends = [parse_batch_header(h).next_offset for _, h in whole.store.data_headers()]
        assert whole.high_watermark == ends[-1] == 61
        await whole.close()
        flusher.stop()

    # Opened as a Raft replica whose saved commit point is entry 25: offsets from entry
    # 26 on wait for their commit.
    meta = open_meta_store(tmp_path / "meta")
    save_hard_state(meta, GROUP, HardState(term=1, vote=1, commit=25))
    counting = _CountingStore(open_log_store("segment", tmp_path / "log", LogStoreOptions()))
    drivers: list[GroupDriver] = []

    def build_driver(store: LogStore, machine: StreamMachine, applied: int) -> GroupDriver:
        driver = GroupDriver(
            GROUP,
            1,
            frozenset({1, 2, 3}),
            store,
            meta,
            Flusher(),
            MemoryNet().outbox(1),
            machine,
            raft=RAFT,
            options=STREAM_OPTIONS,
            applied=applied,
        )
        drivers.append(driver)
        return driver

    replica = LogStream("t-0", counting, raft_appender(build_driver, meta, GROUP), lambda: 5_000)  # type: ignore[arg-type]
    try:
        assert counting.header_scans == 1
        assert replica.commit_index == 25
        assert replica.high_watermark == ends[24]
        assert _state(replica) == want
        # The entries after the commit point become visible one by one as they commit.
        replica.on_commit(26)
        assert replica.high_watermark == ends[25]
        replica.on_commit(len(ends))
        assert replica.high_watermark == ends[-1]
        assert counting.header_scans == 1
    finally:
        await replica.close()
        meta.close()
