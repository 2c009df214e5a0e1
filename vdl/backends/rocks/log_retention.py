"""Which leading entries of a rocks log retention may delete.

There are no segment files here, so the rule of the segment backend ("delete whole closed
segments, never the active one") becomes: delete a prefix of entries, oldest first, but
never touch the last `segment_bytes` worth of the log nor its last entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from vdl.backends.api import EntryType, LogStoreOptions, batch_offsets
from vdl.backends.rocks.log_keys import ENTRY_HEADER_SIZE, decode_entry_header
from vdl.log.batch_header import max_timestamp


@dataclass(frozen=True, slots=True)
class RetentionCut:
    keep_from: int  # first index that stays
    removed_bytes: int
    next_floor_offset: int | None  # end offset of the last removed DATA entry, if any


def plan_retention(
    entries: Iterable[tuple[int, bytes]],
    *,
    first_index: int,
    last_index: int,
    size: int,
    options: LogStoreOptions,
    now_ms: int,
) -> RetentionCut:
    """Walk `entries` (index, encoded value) from the first one and choose where to cut."""
    max_bytes, max_age_ms = options.retention.max_bytes, options.retention.max_age_ms
    deadline = None if max_age_ms is None else now_ms - max_age_ms
    keep_from, removed, floor = first_index, 0, None
    # NOOP/CONFIG entries carry no timestamp: they go by age together with the next
    # DATA entry, so they are held here until that entry is judged.
    pending = 0
    for index, value in entries:
        rest = size - removed - pending  # bytes from this entry to the end of the log
        if index >= last_index or rest <= options.segment_bytes:
            break
        over_size = max_bytes is not None and size - removed > max_bytes
        _, kind = decode_entry_header(index, value)
        if kind != EntryType.DATA:
            pending += len(value)
            if over_size:
                keep_from, removed, pending = index + 1, removed + pending, 0
            continue
        payload = memoryview(value)[ENTRY_HEADER_SIZE:]
        expired = deadline is not None and max_timestamp(payload) < deadline
        if not (over_size or expired):
            break
        keep_from, removed, pending = index + 1, removed + pending + len(value), 0
        floor = batch_offsets(payload)[1] + 1
    return RetentionCut(keep_from, removed, floor)
