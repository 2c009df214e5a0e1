"""A YDB read session's ``max_lag`` without a timestamp search on every read.

``max_lag`` (ydb_topic.proto, ``TopicReadSettings``) skips the messages written longer ago
than it: before each read the session moves its read offset up to the first record at or
after ``now - max_lag`` (`LogStream.offset_for_timestamp`; for a partition read from another
node's replica that search is a round trip). The search stops in the first batch whose
maxTimestamp reaches the time asked for (the timestamp index only skips batches older than
it, and `LogStream.batch_for_timestamp` takes the first batch that reaches it), so it
answers an offset inside that batch or before it.

Hence a search moves nothing while the session has already read past a whole batch whose
maxTimestamp reaches ``now - max_lag``: its answer lies at or before that batch, below the
read offset. `LagWitness` remembers the batch read past with the newest maxTimestamp, and
the session searches only once the lag window has moved past it (or it is gone). The
answer is exactly that of the search: a batch keeps its offsets and maxTimestamp for as
long as it is stored (log compaction rewrites a batch's records but keeps every header
field but its length, count and CRC, and keeps emptied batches: `vdl/log/compaction.py`),
so the witness holds until retention or DeleteRecords moves the log start past it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vdl.backends.api import Buffer
from vdl.log.record_batch import parse_batch_header


@dataclass(slots=True)
class LagWitness:
    """The batch a partition session read past whose maxTimestamp is the newest."""

    newest: int | None = None  # its maxTimestamp; None: no batch read past yet
    base: int = 0  # its first offset
    end: int = 0  # the offset after it

    def passed(self, batches: Sequence[Buffer], read_to: int) -> None:
        """The session read `batches` (in log order) up to offset `read_to`: those wholly
        below it are read past."""
        for batch in batches:
            info = parse_batch_header(batch)
            if info.next_offset > read_to:
                return
            if self.newest is None or info.max_timestamp >= self.newest:
                self.newest = info.max_timestamp
                self.base, self.end = info.base_offset, info.next_offset

    def covers(self, oldest_ms: int, read_offset: int, log_start: int) -> bool:
        """Whether the first record at or after `oldest_ms` lies below `read_offset`
        (so a search for it would not move the read offset): a batch wholly below the
        read offset, still stored, reaches that time."""
        return (
            self.newest is not None
            and self.newest >= oldest_ms
            and self.end <= read_offset
            and self.base >= log_start
        )
