"""One log compaction pass over a stream (the rules: vdl/log/compaction.py).

The broker's retention loop runs it for the partitions of compacted topics, on every
replica. The store holds the cleanable segments, a worker thread reads them and writes the
cleaned copies (vdl/backends/segment/cleaning.py), and the event loop swaps the copies in,
each only if its segment is still the one held; meanwhile appends, reads and replication
go on, and a truncation, snapshot install or close breaks the hold, leaving the log as it
is. Only the segment backend cleans; with another backend a compacted topic keeps every
record (keyless records are still refused at produce).

When a pass runs: when the part no earlier pass cleaned is at least
min.cleanable.dirty.ratio of the cleanable bytes, or (KIP-354) when its first batch is
older than max.compaction.lag.ms by this node's clock, however small that part is. The
clock only decides when a replica cleans, never what a pass writes.
"""

from __future__ import annotations

import logging

import trio

from vdl.backends.api import StorageError
from vdl.backends.segment.cleaning import StagedSegment, clean_files, remove_staging
from vdl.backends.segment.store import SegmentLogStore
from vdl.log.compaction import CompactionSettings
from vdl.log.stream import LogStream

log = logging.getLogger(__name__)


async def clean_stream(stream: LogStream, settings: CompactionSettings, now_ms: int) -> int:
    """Clean `stream`'s cleanable segments if enough of them is dirty; the number of
    segments rewritten."""
    store = stream.store
    if not isinstance(store, SegmentLogStore):
        return 0
    pin = store.hold_for_cleaning(stream.commit_index, now_ms - settings.min_compaction_lag_ms)
    staged: list[StagedSegment] = []
    try:
        files = pin.files
        if not files:
            return 0
        total = sum(file.size for file in files)
        dirty = sum(file.size for file in files if file.last_index > stream.cleaned_through)
        if dirty == 0:
            return 0
        if dirty < settings.min_cleanable_dirty_ratio * total and not _overdue(
            store, stream.cleaned_through, settings, now_ms
        ):
            return 0
        try:
            staged = await trio.to_thread.run_sync(
                clean_files, files, store.directory, settings.delete_retention_ms
            )
        except (OSError, StorageError, ValueError) as exc:
            if not pin.broken:
                log.error("log compaction of %s failed: %s", stream.name, exc)
            return 0
        replaced = 0
        for copy in staged:
            if pin.broken:
                break
            if store.replace_segment(pin, copy):
                replaced += 1
        if not pin.broken:
            stream.cleaned_through = files[-1].last_index
        return replaced
    finally:
        pin.release()
        remove_staging(staged)


def _overdue(
    store: SegmentLogStore, cleaned_through: int, settings: CompactionSettings, now_ms: int
) -> bool:
    """max.compaction.lag.ms (KIP-354): whether the first batch no pass has cleaned yet was
    written longer ago than that, so the pass must run whatever the dirty ratio."""
    first = store.first_timestamp_after(cleaned_through)
    # The default, Kafka's Long.MAX_VALUE, means never; a batch without timestamps (-1)
    # never makes a pass overdue.
    return first is not None and first >= 0 and now_ms - first > settings.max_compaction_lag_ms
