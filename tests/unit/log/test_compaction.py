"""Log compaction's batch rules (vdl/log/compaction.py): the latest record per key, tombstone
lifetime, offsets kept, deterministic output, keyless records refused at produce."""

from __future__ import annotations

import pytest

from vdl.broker.topics import TopicError, topic_config_specs, validate_configs
from vdl.log.batch_header import (
    COMPRESSION_GZIP,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    crc_is_valid,
)
from vdl.log.compaction import (
    KeyMap,
    check_record_keys,
    clean_batch,
    deletes,
    is_compacted,
    raw_records,
)
from vdl.log.error_codes import ErrorCode
from vdl.log.record_batch import (
    InvalidBatch,
    Record,
    build_batch,
    iter_records,
    parse_batch_header,
)

HOUR_MS = 3_600_000


def _valid(batch: bytes) -> bool:
    """Whether `batch` is one whole batch whose CRC checks out."""
    return crc_is_valid(batch) and parse_batch_header(batch).size == len(batch)


def _batch(
    base: int, pairs: list[tuple[bytes | None, bytes | None]], ts: int = 1_000, **kw: int
) -> bytes:
    records = [Record(key, value, ts + n) for n, (key, value) in enumerate(pairs)]
    return build_batch(records, base_offset=base, **kw)  # type: ignore[arg-type]


def _clean(batches: list[bytes], retention_ms: int = HOUR_MS) -> list[bytes]:
    keys = KeyMap()
    keys.add_all(batches)
    return [clean_batch(b, keys, retention_ms) or b for b in batches]


def _contents(batches: list[bytes]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in batches for r in iter_records(b)]


@pytest.mark.parametrize("codec", [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_ZSTD])
def test_the_latest_record_per_key_stays_at_its_offset(codec: int) -> None:
    first = _batch(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], compression=codec)
    second = _batch(3, [(b"c", b"1"), (b"b", b"2")], compression=codec)
    cleaned = _clean([first, second])
    assert _contents(cleaned) == [(2, b"a", b"2"), (3, b"c", b"1"), (4, b"b", b"2")]
    for before, after in zip([first, second], cleaned, strict=True):
        old, new = parse_batch_header(before), parse_batch_header(after)
        # The batch keeps its offset range, codec and timestamps; only length, count, CRC change.
        assert (new.base_offset, new.last_offset_delta) == (old.base_offset, old.last_offset_delta)
        assert (new.compression, new.first_timestamp, new.max_timestamp) == (
            old.compression,
            old.first_timestamp,
            old.max_timestamp,
        )
        # A valid batch: its CRC and length check out.
        assert _valid(after)
    assert parse_batch_header(cleaned[0]).record_count == 1


def test_a_batch_that_keeps_every_record_is_left_as_it_is() -> None:
    batch = _batch(0, [(b"a", b"1"), (b"b", b"1")])
    keys = KeyMap()
    keys.add(batch)
    assert clean_batch(batch, keys, HOUR_MS) is None


def test_an_emptied_batch_stays_with_its_offsets_and_producer_state() -> None:
    # An idempotent producer's batch whose records are all superseded: kept as an empty
    # batch, so its offsets and its producer's last sequence survive (as Kafka keeps it).
    old = _batch(10, [(b"a", b"1"), (b"b", b"1")], producer_id=7, producer_epoch=2, base_sequence=5)
    new = _batch(12, [(b"a", b"2"), (b"b", b"2")], compression=COMPRESSION_GZIP)
    empty = _clean([old, new])[0]
    info, before = parse_batch_header(empty), parse_batch_header(old)
    assert info.record_count == 0 and list(iter_records(empty)) == []
    assert (info.base_offset, info.last_offset, info.last_sequence) == (10, 11, 6)
    assert (info.producer_id, info.producer_epoch) == (before.producer_id, before.producer_epoch)
    assert _valid(empty)


def test_tombstones_last_delete_retention_ms_of_log_time_after_the_cleaned_point() -> None:
    values = _batch(0, [(b"a", b"1"), (b"b", b"1")], ts=1_000)
    tombstone = _batch(2, [(b"a", None)], ts=2_000)
    # The cleaned part reaches 30 minutes of log time past the tombstone: it stays.
    soon = _batch(3, [(b"c", b"1")], ts=2_000 + HOUR_MS // 2)
    kept = _clean([values, tombstone, soon])
    assert _contents(kept) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    # Past delete.retention.ms: the tombstone goes too, and with it every value of its key.
    later = _batch(4, [(b"d", b"1")], ts=2_001 + HOUR_MS)
    gone = _clean([*kept, later])
    assert _contents(gone) == [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"d", b"1")]
    assert parse_batch_header(gone[1]).last_offset == 2  # the emptied batch keeps offset 2


def test_cleaning_is_deterministic_and_a_later_point_removes_a_superset() -> None:
    batches = [
        _batch(
            n * 4,
            [(b"k%d" % (n % 3), b"v%d" % n), (b"x", b"%d" % n)],
            ts=n * 1_000,
            compression=COMPRESSION_GZIP,
        )
        for n in range(8)
    ]
    once = _clean(batches[:5])
    assert once == _clean(batches[:5])  # the same input gives the same bytes
    # Cleaning up to a later point after an earlier one gives what cleaning once gives.
    assert _clean([*once, *batches[5:]]) == _clean(batches)


def test_keyless_records_are_dropped_by_the_cleaner() -> None:
    batch = _batch(0, [(None, b"1"), (b"a", b"1")])
    assert _contents(_clean([batch])) == [(1, b"a", b"1")]


def test_produce_refuses_each_keyless_record_by_its_index() -> None:
    batch = _batch(0, [(b"a", b"1"), (None, b"1"), (b"b", b"1"), (None, None)])
    with pytest.raises(InvalidBatch) as refused:
        check_record_keys(batch)
    assert refused.value.error_code == ErrorCode.INVALID_RECORD
    assert [n for n, _ in refused.value.record_errors] == [1, 3]
    check_record_keys(_batch(0, [(b"a", b"1"), (b"b", None)]))  # keys only: accepted


def test_raw_records_report_keys_offsets_and_tombstones() -> None:
    batch = _batch(5, [(b"a", b"1"), (b"", None)])
    assert [(r.offset, r.key, r.tombstone) for r in raw_records(batch)] == [
        (5, b"a", False),
        (6, b"", True),
    ]


def test_cleanup_policy_values() -> None:
    assert is_compacted("compact") and not deletes("compact")
    assert is_compacted("compact,delete") and deletes("delete, compact")
    assert deletes("delete") and not is_compacted("delete")


def test_the_compaction_settings_are_checked_as_kafka_types_them() -> None:
    specs = topic_config_specs(
        retention_ms=-1, retention_bytes=-1, segment_bytes=1 << 20, max_message_bytes=1 << 20
    )
    validate_configs(
        specs,
        {
            "cleanup.policy": "compact,delete",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "100",
            "min.compaction.lag.ms": "0",
        },
    )
    for key, value in [
        ("cleanup.policy", "shrink"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "half"),
        ("delete.retention.ms", "-1"),
        ("min.compaction.lag.ms", "soon"),
    ]:
        with pytest.raises(TopicError) as refused:
            validate_configs(specs, {key: value})
        assert refused.value.error == ErrorCode.INVALID_CONFIG
