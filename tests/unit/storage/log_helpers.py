"""Building entries for log store tests: real RecordBatch v2 payloads with assigned offsets,
and a writer that keeps track of the next index and offset."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

from vdl.backends.api import Entry, EntryType, LogStore


def record_batch(
    base_offset: int, count: int = 1, timestamp_ms: int = 1_000, value_size: int = 16
) -> bytes:
    """A real RecordBatch v2 of `count` records whose offsets start at `base_offset`.

    The builder numbers records from 0; the base offset is then written into the header,
    which the batch CRC does not cover (exactly what a broker does when it assigns offsets).
    """
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for n in range(count):
        value = bytes([n % 256]) * value_size
        builder.append(n, timestamp=timestamp_ms + n, key=None, value=value, headers=[])
    batch = builder.build()
    batch[0:8] = base_offset.to_bytes(8, "big", signed=True)
    return bytes(batch)


def data_entry(
    index: int,
    base_offset: int,
    count: int = 1,
    term: int = 1,
    timestamp_ms: int = 1_000,
    value_size: int = 16,
) -> Entry:
    payload = record_batch(base_offset, count, timestamp_ms, value_size)
    return Entry(term, index, EntryType.DATA, payload)


def noop_entry(index: int, term: int = 1) -> Entry:
    return Entry(term, index, EntryType.NOOP, b"")


def config_entry(index: int, term: int = 1) -> Entry:
    return Entry(term, index, EntryType.CONFIG, b"members: 1,2,3")


class LogWriter:
    """Appends entries to a store, keeping the next Raft index and offset."""

    def __init__(self, store: LogStore, term: int = 1) -> None:
        self.store = store
        self.term = term
        self.index = store.last_index() + 1
        self.offset = store.next_offset()
        self.appended: list[Entry] = []

    def data(
        self, count: int = 1, timestamp_ms: int = 1_000, value_size: int = 16, n: int = 1
    ) -> list[Entry]:
        """Append `n` DATA entries of `count` records each, in one append() call."""
        entries = []
        for _ in range(n):
            entries.append(
                data_entry(self.index, self.offset, count, self.term, timestamp_ms, value_size)
            )
            self.index += 1
            self.offset += count
        self._append(entries)
        return entries

    def noop(self) -> Entry:
        entry = noop_entry(self.index, self.term)
        self.index += 1
        self._append([entry])
        return entry

    def config(self) -> Entry:
        entry = config_entry(self.index, self.term)
        self.index += 1
        self._append([entry])
        return entry

    def _append(self, entries: list[Entry]) -> None:
        self.store.append(entries)
        self.appended.extend(entries)


def same_entries(got: list[Entry], want: list[Entry]) -> bool:
    """Entries equal in every field, whatever buffer type their payloads come in."""
    return [(e.term, e.index, e.type, bytes(e.payload)) for e in got] == [
        (e.term, e.index, e.type, bytes(e.payload)) for e in want
    ]
