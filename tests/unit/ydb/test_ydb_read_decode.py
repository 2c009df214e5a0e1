"""What a YDB read session takes from stored batches: the messages, and where its next read
starts, which must pass batches that hold nothing for a reader (a compacted topic's emptied
batches) so a reader never stalls behind them."""

from __future__ import annotations

from vdl.log.compaction import KeyMap, clean_batch
from vdl.log.record_batch import Record, build_batch
from vdl.net.ydb.topic_read import decode_messages


def _batch(base: int, *keys: bytes) -> bytes:
    records = [Record(key=k, value=b"v-" + k, timestamp_ms=1_000 + i) for i, k in enumerate(keys)]
    return build_batch(records, base_offset=base)


def test_emptied_batches_are_read_past() -> None:
    first = _batch(0, b"a", b"b")
    second = _batch(2, b"a", b"b")
    # Cleaning keeps the latest record of each key: the first batch is emptied, and stays
    # as an empty batch with its offset range (0-1).
    keys = KeyMap()
    keys.add_all([first, second])
    emptied = clean_batch(first, keys, delete_retention_ms=0)
    assert emptied is not None
    messages, _, next_offset = decode_messages([emptied], 0, 1 << 20)
    assert messages == [] and next_offset == 2
    messages, _, next_offset = decode_messages([emptied, second], 0, 1 << 20)
    assert [m.offset for m in messages] == [2, 3] and next_offset == 4


def test_a_budget_stop_resumes_at_the_next_message() -> None:
    batch = _batch(10, b"a", b"b", b"c")
    messages, _, next_offset = decode_messages([batch], 10, 1)
    assert [m.offset for m in messages] == [10] and next_offset == 11
    messages, _, next_offset = decode_messages([batch], 11, 1 << 20)
    assert [m.offset for m in messages] == [11, 12] and next_offset == 13
