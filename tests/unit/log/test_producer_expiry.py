"""Producer-state expiry in a stream: a long-idle producer is forgotten by the sweep and
then accepted whatever its sequence, never answered OUT_OF_ORDER_SEQUENCE_NUMBER."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from vdl.backends.api import LogStoreOptions
from vdl.backends.registry import open_log_store
from vdl.log.appender import LocalAppender
from vdl.log.error_codes import ErrorCode
from vdl.log.flusher import Flusher
from vdl.log.record_batch import Record, build_batch, validate_produced_batch
from vdl.log.stream import Appended, LogStream, StreamError

EXPIRY_MS = 60_000


def _append(stream: LogStream, pid: int, seq: int) -> Appended:
    batch = build_batch(
        [Record(None, b"v", 0, [])], producer_id=pid, producer_epoch=0, base_sequence=seq
    )
    info = validate_produced_batch(batch, max_batch_bytes=1 << 20, allow_zstd=True)
    return stream.append(batch, info)


async def test_idle_producer_is_forgotten_and_then_accepted(tmp_path: Path) -> None:
    now = [0]
    flusher = Flusher()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        store = open_log_store("segment", tmp_path / "s", LogStoreOptions())
        stream = LogStream(
            "t-0",
            store,
            LocalAppender.factory(flusher),
            lambda: now[0],
            producer_expiry_ms=EXPIRY_MS,
        )
        try:
            _append(stream, 7, 0)
            _append(stream, 7, 1)
            # Still remembered: a gap is refused, a retry is a duplicate.
            with pytest.raises(StreamError) as refused:
                _append(stream, 7, 5)
            assert refused.value.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert _append(stream, 7, 1).duplicate
            # Long silence; another producer's append runs the sweep.
            now[0] = EXPIRY_MS * 3
            _append(stream, 8, 0)
            assert len(stream.producers) == 1
            # The idle producer comes back past a gap (its state is gone): accepted.
            back = _append(stream, 7, 5)
            assert not back.duplicate and back.base_offset == 3
            await stream.wait_committed(back.last_offset)
        finally:
            await stream.close()
            flusher.stop()
