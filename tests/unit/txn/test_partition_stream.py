"""Transactions in a LogStream over both log backends: markers, the producer table's
epochs, the last stable offset and the aborted index, rebuilt from the log on open."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio

from vdl.backends.api import LogStoreOptions
from vdl.backends.registry import LOG_BACKENDS, open_log_store
from vdl.log.appender import LocalAppender
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.record_batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_control_batch,
    control_type,
    iter_records,
    parse_batch_header,
    validate_produced_batch,
)
from vdl.log.stream import Appended, LogStream, StreamError
from vdl.txn.partition_txns import AbortedTxn

Opener = Callable[[], LogStream]


def _batch(values: list[bytes], pid: int, epoch: int, seq: int, txn: bool = True) -> bytes:
    return build_batch(
        [Record(None, v, 1_000 + i, []) for i, v in enumerate(values)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def _append(stream: LogStream, batch: bytes) -> Appended:
    info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    return stream.append(batch, info)


@pytest.fixture(params=LOG_BACKENDS)
async def env(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    flusher = Flusher()
    streams: list[LogStream] = []

    def open_stream() -> LogStream:
        store = open_log_store(request.param, tmp_path / "stream", LogStoreOptions())
        stream = LogStream("t-0", store, LocalAppender.factory(flusher), lambda: 5_000)
        streams.append(stream)
        return stream

    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        yield open_stream
        for stream in streams:
            await stream.close()
        flusher.stop()


def test_a_control_batch_is_kafkas_marker_format() -> None:
    batch = build_control_batch(1234, 7, True, 3, 99)
    info = parse_batch_header(batch)
    assert info.is_control and info.is_transactional
    assert (info.producer_id, info.producer_epoch, info.base_sequence) == (1234, 7, -1)
    (record,) = list(iter_records(batch))
    # key: version 0, type 1 (commit); value: version 0, coordinator epoch 3.
    assert record.key == b"\x00\x00\x00\x01"
    assert record.value == b"\x00\x00\x00\x00\x00\x03"
    assert control_type(batch) == CONTROL_COMMIT
    assert control_type(build_control_batch(1234, 7, False, 3, 99)) == CONTROL_ABORT
    assert control_type(_batch([b"x"], 1, 0, 0)) is None
    # A producer may never send one.
    with pytest.raises(Exception, match="control"):
        validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)


async def test_lso_aborted_index_and_rebuild_on_open(env: Opener) -> None:
    stream = env()
    plain = _append(stream, _batch([b"p"], -1, -1, -1, txn=False))  # offset 0
    a1 = _append(stream, _batch([b"a1", b"a2"], 1000, 0, 0))  # 1-2, aborted below
    c1 = _append(stream, _batch([b"c1"], 2000, 0, 0))  # 3, committed below
    await stream.wait_committed(c1.last_offset)
    assert (plain.base_offset, a1.base_offset, c1.base_offset) == (0, 1, 3)
    assert stream.high_watermark == 4
    assert stream.last_stable_offset == 1
    abort_at = stream.append_marker(1000, 0, False, 5)
    commit_at = stream.append_marker(2000, 0, True, 5)
    assert (abort_at, commit_at) == (4, 5)
    # Decided, but the markers are not committed yet: the LSO stays.
    assert stream.last_stable_offset == 1
    await stream.wait_committed(commit_at)
    assert stream.last_stable_offset == stream.high_watermark == 6
    open_again = _append(stream, _batch([b"o"], 1000, 0, 2))  # 6, left open
    await stream.wait_committed(open_again.last_offset)
    assert stream.last_stable_offset == 6
    assert stream.txns.aborted(0, 7) == [AbortedTxn(1000, 1, 4)]
    await stream.close()

    reopened = env()
    assert reopened.high_watermark == 7
    assert reopened.last_stable_offset == 6
    assert list(reopened.txns.aborted_index()) == [AbortedTxn(1000, 1, 4)]
    assert reopened.txns.open_transactions() == {1000: 6}
    # The producer's sequences run on across its transactions, also after a reopen.
    entry = reopened.producers.get(1000)
    assert entry is not None and entry.epoch == 0
    nxt = _append(reopened, _batch([b"n"], 1000, 0, 3))
    assert not nxt.duplicate


async def test_a_newer_epoch_in_a_marker_fences_the_older_producer(env: Opener) -> None:
    stream = env()
    first = _append(stream, _batch([b"z"], 1000, 3, 0))
    await stream.wait_committed(first.last_offset)
    # The coordinator aborts with a bumped epoch (a timeout, or a new producer instance).
    await stream.wait_committed(stream.append_marker(1000, 4, False, 1))
    with pytest.raises(StreamError) as caught:
        _append(stream, _batch([b"zombie"], 1000, 3, 1))
    assert caught.value.error == ErrorCode.INVALID_PRODUCER_EPOCH
    # A marker older than the producer's epoch is refused.
    with pytest.raises(StreamError) as refused:
        stream.append_marker(1000, 3, True, 1)
    assert refused.value.error == ErrorCode.INVALID_PRODUCER_EPOCH
    # The new epoch starts at sequence 0 and is served.
    fresh = _append(stream, _batch([b"new"], 1000, 4, 0))
    assert not fresh.duplicate
    await stream.close()
    # The fence survives a reopen: it is in the log.
    reopened = env()
    with pytest.raises(StreamError):
        _append(reopened, _batch([b"zombie"], 1000, 3, 1))


async def test_a_marker_written_again_is_not_appended_twice(env: Opener) -> None:
    stream = env()
    data = _append(stream, _batch([b"x"], 1000, 0, 0))
    marker = stream.append_marker(1000, 0, True, 1)
    await stream.wait_committed(marker)
    end = stream.log_end_offset
    again = stream.append_marker(1000, 0, True, 1)
    assert stream.log_end_offset == end and again == end - 1
    assert (data.base_offset, marker) == (0, 1)
    # A marker for a producer that never wrote here is written (it carries the epoch).
    other = stream.append_marker(3000, 2, False, 1)
    assert other == end
    entry = stream.producers.get(3000)
    assert entry is not None and entry.epoch == 2
    await stream.wait_committed(other)
    assert list(stream.txns.aborted_index()) == []


async def test_a_late_copy_of_an_earlier_marker_never_ends_the_next_transaction(
    env: Opener,
) -> None:
    """A coordinator resends a marker request it got no answer to in time; the first copy
    is written and answered, the transaction completes, the producer begins its next one
    here, and only then is the late copy served. It must not end the new transaction (in
    either direction), before or after a reopen."""
    stream = env()
    _append(stream, _batch([b"first"], 1000, 0, 0))
    await stream.wait_committed(stream.append_marker(1000, 0, False, 1))  # decision 1: abort
    second = _append(stream, _batch([b"second"], 1000, 0, 1))
    end = stream.log_end_offset
    # Decision 1's late copy: not written, the second transaction stays open.
    assert stream.append_marker(1000, 0, False, 1) == end - 1
    assert stream.log_end_offset == end
    assert stream.txns.open_transaction(1000) == second.base_offset
    await stream.wait_committed(stream.append_marker(1000, 0, True, 2))  # decision 2: commit
    assert [a.first_offset for a in stream.txns.aborted_index()] == [0]
    await stream.close()
    reopened = env()
    third = _append(reopened, _batch([b"third"], 1000, 0, 2))
    end = reopened.log_end_offset
    # Decision 2's late copy, after a restart (the number is read back from the log).
    assert reopened.append_marker(1000, 0, True, 2) == end - 1
    assert reopened.txns.open_transaction(1000) == third.base_offset
    assert [a.first_offset for a in reopened.txns.aborted_index()] == [0]


async def test_the_aborted_index_is_trimmed_with_the_log_start(env: Opener) -> None:
    stream = env()
    for i in range(3):
        _append(stream, _batch([b"a"], 1000, 0, i))
        await stream.wait_committed(stream.append_marker(1000, 0, False, i + 1))
    assert [a.first_offset for a in stream.txns.aborted_index()] == [0, 2, 4]
    stream.advance_log_start(2)
    assert [a.first_offset for a in stream.txns.aborted_index()] == [2, 4]


async def test_a_producer_with_an_open_transaction_is_not_expired(tmp_path: Path) -> None:
    flusher = Flusher()
    now = [5_000]
    store = open_log_store("segment", tmp_path / "s", LogStoreOptions())
    stream = LogStream(
        "t-0", store, LocalAppender.factory(flusher), lambda: now[0], producer_expiry_ms=1_000
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        _append(stream, _batch([b"x"], 1000, 0, 0))
        _append(stream, _batch([b"y"], 2000, 0, 0, txn=False))
        now[0] += 24 * 3600 * 1000
        last = _append(stream, _batch([b"z"], 3000, 0, 0, txn=False))
        await stream.wait_committed(last.last_offset)
        assert stream.producers.get(1000) is not None
        assert stream.producers.get(2000) is None
        await stream.close()
        flusher.stop()
