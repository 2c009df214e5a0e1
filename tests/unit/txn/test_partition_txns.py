"""A partition's transactions: open ones, the last stable offset, the aborted index."""

from __future__ import annotations

from vdl.txn.partition_txns import AbortedTxn, PartitionTxns


def test_no_transaction_means_the_lso_is_the_high_watermark() -> None:
    txns = PartitionTxns()
    assert txns.last_stable_offset(7) == 7
    assert txns.aborted(0, 100) == []


def test_an_open_transaction_holds_the_lso_at_its_first_offset() -> None:
    txns = PartitionTxns()
    txns.on_data(1000, 5)
    txns.on_data(1000, 9)  # a later batch of the same transaction
    txns.on_data(2000, 7)
    assert txns.open_transaction(1000) == 5
    assert txns.last_stable_offset(12) == 5
    assert txns.open_producers() == frozenset({1000, 2000})


def test_a_marker_releases_the_lso_only_once_it_is_below_the_high_watermark() -> None:
    txns = PartitionTxns()
    txns.on_data(1000, 5)
    txns.on_marker(1000, True, 10)
    assert txns.open_transaction(1000) is None
    # The marker at 10 is not committed while the high watermark is 10 or less.
    assert txns.last_stable_offset(10) == 5
    assert txns.last_stable_offset(11) == 11
    # Released as the high watermark moves past the marker, also without a question.
    txns.on_data(1000, 12)
    txns.on_marker(1000, True, 13)
    txns.release(14)
    assert txns.last_stable_offset(14) == 14


def test_an_abort_goes_to_the_index_and_a_commit_does_not() -> None:
    txns = PartitionTxns()
    txns.on_data(1, 0)
    txns.on_marker(1, False, 3)
    txns.on_data(2, 4)
    txns.on_marker(2, True, 6)
    txns.on_data(1, 7)
    txns.on_marker(1, False, 9)
    assert list(txns.aborted_index()) == [AbortedTxn(1, 0, 3), AbortedTxn(1, 7, 9)]
    # Those that may have records in [start, end): marker at/after start, first before end.
    assert txns.aborted(0, 1) == [AbortedTxn(1, 0, 3)]
    assert txns.aborted(4, 7) == []
    assert txns.aborted(4, 8) == [AbortedTxn(1, 7, 9)]
    assert txns.aborted(3, 100) == [AbortedTxn(1, 0, 3), AbortedTxn(1, 7, 9)]


def test_a_marker_without_an_open_transaction_changes_nothing() -> None:
    txns = PartitionTxns()
    txns.on_marker(1, False, 0)
    assert list(txns.aborted_index()) == []
    assert txns.last_stable_offset(1) == 1


def test_the_aborted_index_is_trimmed_with_the_log_start() -> None:
    txns = PartitionTxns()
    for first in (0, 10, 20):
        txns.on_data(1, first)
        txns.on_marker(1, False, first + 5)
    txns.drop_before(15)
    assert [a.first_offset for a in txns.aborted_index()] == [10, 20]
    txns.drop_before(16)
    assert [a.first_offset for a in txns.aborted_index()] == [20]
