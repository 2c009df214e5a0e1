from __future__ import annotations

from vdl.log.error_codes import ErrorCode
from vdl.log.producer_state import (
    RETAINED_BATCHES,
    Accept,
    Duplicate,
    ProducerStateTable,
    Refuse,
)


def _write(
    table: ProducerStateTable, pid: int, epoch: int, seq: int, count: int, offset: int
) -> None:
    assert table.check(pid, epoch, seq, count - 1) == Accept()
    table.record(pid, epoch, seq, count - 1, offset, -1, now_ms=0)


def test_non_idempotent_batches_are_always_accepted() -> None:
    table = ProducerStateTable()
    assert table.check(-1, -1, -1, 9) == Accept()
    table.record(-1, -1, -1, 9, 0, -1, now_ms=0)
    assert len(table) == 0


def test_unknown_producer_accepts_any_sequence() -> None:
    assert ProducerStateTable().check(7, 0, 1234, 4) == Accept()


def test_in_order_sequences_are_accepted_and_gaps_refused() -> None:
    table = ProducerStateTable()
    _write(table, 7, 0, 0, 5, offset=100)
    _write(table, 7, 0, 5, 5, offset=105)
    verdict = table.check(7, 0, 11, 0)
    assert isinstance(verdict, Refuse)
    assert verdict.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_retry_of_a_retained_batch_is_a_duplicate_with_its_offset() -> None:
    table = ProducerStateTable()
    for i in range(RETAINED_BATCHES):
        _write(table, 7, 0, i * 2, 2, offset=10 * i)
    assert table.check(7, 0, 0, 1) == Duplicate(0, -1)
    assert table.check(7, 0, 8, 1) == Duplicate(40, -1)
    _write(table, 7, 0, 10, 2, offset=50)
    # The oldest batch fell out of the window: its retry is now a sequence error.
    assert isinstance(table.check(7, 0, 0, 1), Refuse)


def test_epochs() -> None:
    table = ProducerStateTable()
    _write(table, 7, 3, 0, 1, offset=0)
    old = table.check(7, 2, 1, 0)
    assert isinstance(old, Refuse) and old.error == ErrorCode.INVALID_PRODUCER_EPOCH
    bumped_mid_sequence = table.check(7, 4, 5, 0)
    assert isinstance(bumped_mid_sequence, Refuse)
    assert bumped_mid_sequence.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # librdkafka bumps the epoch locally and restarts at sequence 0.
    assert table.check(7, 4, 0, 0) == Accept()
    table.record(7, 4, 0, 0, 1, -1, now_ms=0)
    assert table.check(7, 4, 1, 0) == Accept()


def test_sequence_wraps_after_int32_max() -> None:
    table = ProducerStateTable()
    top = 2**31 - 1
    _write(table, 7, 0, top - 1, 2, offset=0)
    assert table.check(7, 0, 0, 0) == Accept()


def test_expiry_forgets_idle_producers_and_then_accepts_them() -> None:
    table = ProducerStateTable()
    table.record(7, 0, 0, 0, 0, -1, now_ms=0)
    table.record(8, 0, 0, 0, 1, -1, now_ms=900)
    assert table.expire(now_ms=1000, idle_ms=500) == 1
    assert table.check(7, 0, 99, 0) == Accept()
    assert isinstance(table.check(8, 0, 99, 0), Refuse)
