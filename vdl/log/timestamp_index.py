"""Finding the first record at or after a time (Kafka's ListOffsets by timestamp), without
reading the log from its start.

Record timestamps need not grow with offsets (CreateTime is the producer's clock), so the
log cannot be bisected by time. What does grow is the running maximum: `TimestampIndex`
keeps, every CHECKPOINT_BYTES of batches, the offset of a batch boundary and the newest
timestamp of everything before it. If that maximum is older than the target, no record
before the boundary can be the answer, so a search starts at the last such boundary and
reads at most a checkpoint interval (plus one batch) before it meets a batch reaching the
target: the next boundary's maximum reaches it, so some batch in between does.

The index is what a log stream learns from every batch header it sees anyway (on open, and
per append or replicated entry), so it costs no reads of its own and works over any
LogStore. Like Kafka's time index it is sparse; unlike it, it lives in memory: 16 bytes per
interval, 64 KiB for a 1 GiB log.

Sans-I/O: the stream feeds batch headers and reads the batches this module asks for.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

from vdl.backends.api import Buffer
from vdl.log.record_batch import (
    TIMESTAMP_LOG_APPEND_TIME,
    InvalidBatch,
    UnsupportedCodec,
    iter_records,
    parse_batch_header,
)

CHECKPOINT_BYTES = 256 * 1024
NO_TIMESTAMP = -1  # what Kafka answers (with offset -1) when no record is that new


class TimestampIndex:
    def __init__(self, checkpoint_bytes: int = CHECKPOINT_BYTES) -> None:
        self._checkpoint_bytes = checkpoint_bytes
        self._offsets = array("q")  # batch boundaries, increasing
        self._newest_before = array("q")  # newest timestamp before each; non-decreasing
        self._newest = NO_TIMESTAMP
        self._since_checkpoint = 0

    def __len__(self) -> int:
        return len(self._offsets)

    def add(self, base_offset: int, max_timestamp: int, size: int) -> None:
        """One batch, in log order (appended, replicated or read back on open)."""
        if self._since_checkpoint >= self._checkpoint_bytes:
            self._offsets.append(base_offset)
            self._newest_before.append(self._newest)
            self._since_checkpoint = 0
        self._newest = max(self._newest, max_timestamp)
        self._since_checkpoint += size

    def start_for(self, timestamp_ms: int) -> int | None:
        """An offset no later than the first record at or after timestamp_ms, as late as
        the index allows (0: from the log's start); None if no batch is that new."""
        if self._newest < timestamp_ms:
            return None
        # The last checkpoint whose past is entirely older than the target.
        k = bisect_left(self._newest_before, timestamp_ms) - 1
        return self._offsets[k] if k >= 0 else 0

    def drop_before(self, offset: int) -> None:
        """Forget checkpoints below the log start offset (retention removed that part);
        the maxima of those that remain still bound what is left."""
        k = bisect_left(self._offsets, offset)
        if k:
            del self._offsets[:k]
            del self._newest_before[:k]


def first_record_at(batch: Buffer, timestamp_ms: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record of `batch` at or after timestamp_ms, for a
    batch whose max timestamp reaches it.

    Decodes the records (CPU work, and decompression: callers off the event loop run it in
    a worker thread). A LogAppendTime batch stamps every record with its max timestamp, so
    its first record is the answer. Every Kafka codec is decoded (``vdl.log.codecs``); a
    batch that still cannot be (corrupt, or expanding beyond the decompression limit)
    leaves its first offset, the best answer without its records.
    """
    info = parse_batch_header(batch)
    if info.timestamp_type != TIMESTAMP_LOG_APPEND_TIME:
        try:
            for record in iter_records(batch):
                if record.timestamp_ms >= timestamp_ms:
                    return record.offset, record.timestamp_ms
        except (InvalidBatch, UnsupportedCodec):
            pass
    return info.base_offset, info.max_timestamp
