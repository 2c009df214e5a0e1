"""LogStream with the flusher over both real log backends: offsets, visibility, waiting."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from vdl.backends.api import LogStoreOptions
from vdl.backends.registry import LOG_BACKENDS, open_log_store
from vdl.log.appender import LocalAppender
from vdl.log.batch_header import HEADER_SIZE
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.record_batch import (
    Record,
    build_batch,
    iter_records,
    parse_batch_header,
    validate_produced_batch,
)
from vdl.log.stream import LogStream, StreamError

Opener = Callable[[], LogStream]


def _batch(values: list[bytes], pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    return build_batch(
        [Record(None, v, 1_000 + i, []) for i, v in enumerate(values)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def _append(stream: LogStream, batch: bytes):  # type: ignore[no-untyped-def]
    info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    return stream.append(batch, info)


@pytest.fixture(params=LOG_BACKENDS)
async def env(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Flusher, Opener]]:
    flusher = Flusher()
    streams: list[LogStream] = []

    def open_stream() -> LogStream:
        store = open_log_store(request.param, tmp_path / "stream", LogStoreOptions())
        stream = LogStream("t-0", store, LocalAppender.factory(flusher), lambda: 5_000)
        streams.append(stream)
        return stream

    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        yield flusher, open_stream
        for stream in streams:
            await stream.close()
        flusher.stop()


async def test_offsets_are_assigned_and_visible_only_after_flush(
    env: tuple[Flusher, Opener],
) -> None:
    flusher, open_stream = env
    stream = open_stream()
    first = _append(stream, _batch([b"a", b"b", b"c"]))
    second = _append(stream, _batch([b"d"]))
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 3)
    # Appended, not yet durable: readers see nothing.
    assert stream.high_watermark == 0
    assert stream.read(0, 1 << 20) == []
    await stream.wait_committed(second.last_offset)
    assert stream.high_watermark == 4
    batches = stream.read(0, 1 << 20)
    values = [r.value for b in batches for r in iter_records(bytes(b))]
    assert values == [b"a", b"b", b"c", b"d"]
    assert flusher.flushes >= 1


async def test_many_appends_share_one_flush(env: tuple[Flusher, Opener]) -> None:
    flusher, open_stream = env
    stream = open_stream()
    before = flusher.flushes
    last = None
    for i in range(50):
        last = _append(stream, _batch([b"x%d" % i]))
    assert last is not None
    await stream.wait_committed(last.last_offset)
    assert flusher.flushes - before <= 2


async def test_idempotent_retry_gets_original_offset(env: tuple[Flusher, Opener]) -> None:
    _, open_stream = env
    stream = open_stream()
    _append(stream, _batch([b"a"]))
    original = _append(stream, _batch([b"p0", b"p1"], pid=42, epoch=0, seq=0))
    retry = _append(stream, _batch([b"p0", b"p1"], pid=42, epoch=0, seq=0))
    assert retry.duplicate and retry.base_offset == original.base_offset == 1
    with pytest.raises(StreamError) as gap:
        _append(stream, _batch([b"p5"], pid=42, epoch=0, seq=5))
    assert gap.value.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    await stream.wait_committed(retry.last_offset)
    assert stream.log_end_offset == 3


async def test_producer_state_survives_reopen(env: tuple[Flusher, Opener]) -> None:
    _, open_stream = env
    stream = open_stream()
    written = _append(stream, _batch([b"p0"], pid=9, epoch=1, seq=0))
    await stream.wait_committed(written.last_offset)
    await stream.close()
    reopened = open_stream()
    assert reopened.high_watermark == 1
    retry = _append(reopened, _batch([b"p0"], pid=9, epoch=1, seq=0))
    assert retry.duplicate and retry.base_offset == 0


async def test_watchers_wake_on_commit_and_close_fails_waiters(
    env: tuple[Flusher, Opener],
) -> None:
    _, open_stream = env
    stream = open_stream()
    event = trio.Event()
    stream.watch(event)
    appended = _append(stream, _batch([b"a"]))
    with trio.fail_after(5):
        await event.wait()
    assert stream.high_watermark == 1

    never = appended.last_offset + 10
    outcome: list[ErrorCode] = []

    async def waiter() -> None:
        try:
            await stream.wait_committed(never)
        except StreamError as exc:
            outcome.append(exc.error)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        await stream.close()
    assert outcome == [ErrorCode.NOT_LEADER_OR_FOLLOWER]


async def test_timestamp_lookup_and_log_append_time(tmp_path: Path) -> None:
    flusher = Flusher()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        store = open_log_store("segment", tmp_path / "s", LogStoreOptions())
        stream = LogStream(
            "t-0", store, LocalAppender.factory(flusher), lambda: 77_000, log_append_time=True
        )
        appended = _append(stream, _batch([b"a", b"b"]))
        assert appended.timestamp_ms == 77_000
        await stream.wait_committed(appended.last_offset)
        header = parse_batch_header(bytes(stream.read(0, 1 << 20)[0])[:HEADER_SIZE])
        assert header.timestamp_type == 1 and header.max_timestamp == 77_000
        assert stream.offset_for_timestamp(50_000) == 0
        assert stream.offset_for_timestamp(90_000) is None
        await stream.close()
        flusher.stop()
