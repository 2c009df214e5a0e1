"""Log compaction on SegmentLogStore (vdl/backends/segment/cleaning.py and the store's
hold_for_cleaning / replace_segment): Raft entries keep their index, term and type, batches
their offsets, the result is the same bytes for the same input, it survives a reopen, and a
segment being sent in a snapshot is left alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vdl.backends.api import Entry, EntryType, LogStoreOptions
from vdl.backends.segment import log_swap
from vdl.backends.segment.cleaning import clean_files, remove_staging
from vdl.backends.segment.store import SegmentLogStore
from vdl.log.compaction import KeyMap
from vdl.log.record_batch import Record, build_batch, iter_records, parse_batch_header

OPTIONS = LogStoreOptions(segment_bytes=1_500)
HOUR_MS = 3_600_000
NEVER = 1 << 62


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[list[SegmentLogStore]]:
    opened: list[SegmentLogStore] = []
    yield opened
    for store in opened:
        store.close()


def _open(path: Path, opened: list[SegmentLogStore]) -> SegmentLogStore:
    store = SegmentLogStore.open(path, OPTIONS, preallocate=False)
    opened.append(store)
    return store


def _fill(store: SegmentLogStore, updates: int = 60) -> None:
    """Keyed batches of an idempotent producer (key k<n % 5>), a NOOP now and then."""
    index, offset = store.last_index() + 1, store.next_offset()
    for n in range(updates):
        if n % 7 == 3:
            store.append([Entry(2, index, EntryType.NOOP, b"")])
            index += 1
            continue
        value = None if n == 40 else b"v%03d" % n  # one tombstone, for k0
        records = [Record(b"k%d" % (n % 5), value, 1_000 + n), Record(b"u%d" % n, b"x", 1_000 + n)]
        payload = build_batch(
            records, base_offset=offset, producer_id=9, producer_epoch=0, base_sequence=offset
        )
        store.append([Entry(2, index, EntryType.DATA, payload)])
        index += 1
        offset += 2
    store.sync()


def _clean(store: SegmentLogStore) -> int:
    pin = store.hold_for_cleaning(store.last_index(), NEVER)
    try:
        staged = clean_files(pin.files, store.directory, HOUR_MS)
        try:
            return sum(store.replace_segment(pin, copy) for copy in staged)
        finally:
            remove_staging(staged)
    finally:
        pin.release()


def _records(store: SegmentLogStore) -> list[tuple[int, bytes | None, bytes | None]]:
    batches = store.read_batches(0, 1 << 30, store.last_index())
    return [(r.offset, r.key, r.value) for b in batches for r in iter_records(b)]


def _shape(store: SegmentLogStore) -> list[tuple[int, int, EntryType, object]]:
    """Every entry's term, index and type, and a DATA entry's header fields but the sizes."""
    out: list[tuple[int, int, EntryType, object]] = []
    for entry in store.entries(store.first_index(), store.last_index() + 1):
        header = None
        if entry.type == EntryType.DATA:
            info = parse_batch_header(entry.payload)
            header = (
                info.base_offset,
                info.last_offset_delta,
                info.producer_id,
                info.base_sequence,
                info.max_timestamp,
            )
        out.append((entry.term, entry.index, entry.type, header))
    return out


def test_closed_segments_keep_the_latest_record_per_key_and_every_entry(
    tmp_path: Path, stores: list[SegmentLogStore]
) -> None:
    store = _open(tmp_path / "a", stores)
    _fill(store)
    before, shape = _records(store), _shape(store)
    hold = store.hold_for_cleaning(store.last_index(), NEVER)
    closed_last = hold.files[-1].last_index  # the segments after it are not cleanable
    hold.release()
    closed = [bytes(b) for b in store.read_batches(0, 1 << 30, closed_last)]
    closed_end = parse_batch_header(closed[-1]).next_offset
    keys = KeyMap()
    keys.add_all(closed)
    assert store.segment_count() > 3
    assert _clean(store) > 0
    # Every Raft entry is still there with its term and type; batches keep their offsets
    # and their producer's id and sequences (the producer state rebuilt from the headers).
    assert _shape(store) == shape
    after = _records(store)
    for offset, key, value in before:
        kept = (offset, key, value) in after
        if offset >= closed_end:
            assert kept  # the active segment is never cleaned
        elif key is not None and keys.last.get(key) != offset:
            assert not kept, (offset, key)
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    # The tombstone of k0 is kept: the log's time is not an hour past it.
    assert any(key == b"k0" and value is None for _, key, value in after)
    # A second pass has nothing left to do.
    assert _clean(store) == 0


def test_the_same_segments_clean_to_the_same_bytes_and_reopen(
    tmp_path: Path, stores: list[SegmentLogStore]
) -> None:
    one, two = _open(tmp_path / "one", stores), _open(tmp_path / "two", stores)
    _fill(one)
    _fill(two)
    _clean(one)
    _clean(two)
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "two").iterdir())
    for name in names:
        if name.endswith(".log"):
            assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    records, shape = _records(one), _shape(one)
    one.close()
    stores.remove(one)
    again = _open(tmp_path / "one", stores)
    assert (_records(again), _shape(again)) == (records, shape)


def test_a_segment_being_sent_in_a_snapshot_is_not_replaced(
    tmp_path: Path, stores: list[SegmentLogStore]
) -> None:
    store = _open(tmp_path / "a", stores)
    _fill(store)
    sent = store.closed_segments(store.last_index())
    pin = store.hold_for_cleaning(store.last_index(), NEVER)
    staged = clean_files(pin.files, store.directory, HOUR_MS)
    assert staged and not any(store.replace_segment(pin, copy) for copy in staged)
    for file in sent.files:  # the files being copied are still the ones handed out
        assert file.path.stat().st_size == file.size
    pin.release()
    sent.release()
    assert _clean(store) > 0


def test_a_truncated_or_reset_log_breaks_the_hold(
    tmp_path: Path, stores: list[SegmentLogStore]
) -> None:
    store = _open(tmp_path / "a", stores)
    _fill(store)
    pin = store.hold_for_cleaning(store.last_index(), NEVER)
    staged = clean_files(pin.files, store.directory, HOUR_MS)
    store.truncate_suffix(pin.files[-1].first_index)
    assert pin.broken and not any(store.replace_segment(pin, copy) for copy in staged)
    pin.release()


def test_min_compaction_lag_holds_only_segments_old_enough(
    tmp_path: Path, stores: list[SegmentLogStore]
) -> None:
    store = _open(tmp_path / "a", stores)
    _fill(store)
    everything = store.hold_for_cleaning(store.last_index(), NEVER)
    newest_of_first = max(
        parse_batch_header(b).max_timestamp
        for b in store.read_batches(0, 1 << 30, everything.files[0].last_index)
    )
    some = store.hold_for_cleaning(store.last_index(), newest_of_first)
    assert [f.name for f in some.files] == [everything.files[0].name]
    everything.release()
    some.release()


def test_a_staging_left_by_a_crash_is_removed_on_open(
    tmp_path: Path, stores: list[SegmentLogStore]
) -> None:
    store = _open(tmp_path / "a", stores)
    _fill(store)
    pin = store.hold_for_cleaning(store.last_index(), NEVER)
    staged = clean_files(pin.files, store.directory, HOUR_MS)
    pin.release()
    records = _records(store)
    store.close()
    stores.remove(store)
    assert staged[0].directory.exists()
    again = _open(tmp_path / "a", stores)
    assert not list((tmp_path / "a").glob("*" + log_swap.STAGING_SUFFIX))
    assert _records(again) == records


@pytest.mark.parametrize("step", ["indexes removed", "log renamed"])
def test_a_swap_cut_short_by_a_crash_reopens_whole(
    tmp_path: Path, stores: list[SegmentLogStore], step: str
) -> None:
    # The directory as a crash may leave it during replace_segment: the old index files
    # gone and the log not yet replaced, or the new log in place without its index files.
    store = _open(tmp_path / "a", stores)
    _fill(store)
    before, shape = _records(store), _shape(store)
    pin = store.hold_for_cleaning(store.last_index(), NEVER)
    staged = clean_files(pin.files, store.directory, HOUR_MS)
    pin.release()
    store.close()
    stores.remove(store)
    for copy in staged:
        stem = copy.file.name.removesuffix(".log")
        for suffix in (".raft_index", ".log_index"):
            (tmp_path / "a" / (stem + suffix)).unlink()
        if step == "log renamed":
            (copy.directory / copy.file.name).rename(tmp_path / "a" / copy.file.name)
    again = _open(tmp_path / "a", stores)
    after = _records(again)
    assert _shape(again) == shape
    if step == "indexes removed":
        assert after == before
    else:
        assert set(after) < set(before)
        assert _clean(again) == 0  # what a finished swap would hold: nothing left to clean
