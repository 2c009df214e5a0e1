"""Writer buffer, flush, close and reconnect semantics against an in-memory fake server whose
acks can be held back; all on MockClock, so waits that must not finish cost no time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from tests.unit.client.fake_topic_server import BAD_REQUEST, FakeTopicServer
from vdl.client import (
    BufferFullError,
    ClientConfig,
    ClosedError,
    CloseTimeoutError,
    Connection,
    Message,
    Writer,
    WriterSettings,
    YdbStatusError,
)


@asynccontextmanager
async def writer_on(
    fake: FakeTopicServer, settings: WriterSettings | None = None, **config: object
) -> AsyncIterator[Writer]:
    """A connection and a writer whose tasks run in this block's nursery; the test closes
    the writer itself (or not) and the block cancels what is left."""
    async with Connection.open(
        ClientConfig(**config),  # type: ignore[arg-type]
        channel_factory=fake.channel,
    ) as connection:
        async with trio.open_nursery() as nursery:
            writer = Writer(connection, "/local/t", settings or WriterSettings(producer_id="p"))
            await nursery.start(writer.run)
            yield writer
            nursery.cancel_scope.cancel()


async def finishes_within(seconds: float, fn: object, *args: object) -> bool:
    with trio.move_on_after(seconds):
        await fn(*args)  # type: ignore[operator]
        return True
    return False


async def test_write_blocks_at_the_message_limit_until_acks_free_space(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer()
    fake.hold_acks()
    async with writer_on(fake, WriterSettings(max_buffer_messages=3)) as writer:
        for i in range(3):
            await writer.write(b"m%d" % i)  # returns at once: buffered
        assert writer.buffered[0] == 3
        assert not await finishes_within(5, writer.write, b"m3")
        fake.release_acks()
        assert await finishes_within(5, writer.write, b"m3")
        await writer.close()
    assert fake.log == [1, 2, 3, 4]


async def test_write_blocks_at_the_byte_limit(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeTopicServer()
    fake.hold_acks()
    settings = WriterSettings(max_buffer_bytes=3_000)
    async with writer_on(fake, settings) as writer:
        await writer.write(b"x" * 1_000)
        await writer.write(b"x" * 1_000)
        assert not await finishes_within(5, writer.write, b"x" * 1_000)
        fake.release_acks()
        await writer.write(b"x" * 1_000)
        await writer.close()
    assert len(fake.log) == 3


async def test_a_call_larger_than_the_buffer_passes_once_it_is_empty(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer()
    fake.hold_acks()
    async with writer_on(fake, WriterSettings(max_buffer_messages=2)) as writer:
        # Empty buffer: five messages in one call go through although the limit is two.
        assert await finishes_within(1, writer.write, [b"a", b"b", b"c", b"d", b"e"])
        # Not empty: the next oversized call waits until everything is acked.
        assert not await finishes_within(5, writer.write, [b"f", b"g", b"h"])
        fake.release_acks()
        assert await finishes_within(5, writer.write, [b"f", b"g", b"h"])
        await writer.close()
    assert fake.log == [1, 2, 3, 4, 5, 6, 7, 8]


async def test_write_timeout_raises_and_leaves_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer()
    fake.hold_acks()
    async with writer_on(fake, WriterSettings(max_buffer_messages=1)) as writer:
        await writer.write(b"first")
        started = trio.current_time()
        with pytest.raises(BufferFullError):
            await writer.write(b"second", timeout=2.5)
        assert trio.current_time() - started == pytest.approx(2.5)
        # The default from the settings applies too.
    async with writer_on(fake, WriterSettings(max_buffer_messages=1, write_timeout=1.0)) as writer:
        await writer.write(b"third")
        with pytest.raises(TimeoutError):
            await writer.write(b"fourth")
        fake.release_acks()
        await writer.close()
    assert fake.log == [1, 2]  # "first" (acked late, on its own stream) and "third"


async def test_flush_returns_only_after_the_acks(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeTopicServer()
    fake.hold_acks()
    async with writer_on(fake) as writer:
        await writer.write([b"a", b"b"])
        assert not await finishes_within(10, writer.flush)
        assert len(fake.log) == 2  # received and appended, not acknowledged
        with pytest.raises(TimeoutError):
            await writer.flush(timeout=1)
        fake.release_acks()
        assert await finishes_within(1, writer.flush)
        assert writer.buffered == (0, 0)
        await writer.close()


async def test_close_waits_for_acks_then_everything_raises_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer()
    fake.hold_acks()
    closed_at: list[float] = []
    async with writer_on(fake) as writer:
        await writer.write(b"a")

        async def close() -> None:
            await writer.close()
            closed_at.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close)
            await trio.sleep(3)
            assert not closed_at
            with pytest.raises(ClosedError):
                await writer.write(b"too late")
            release_time = trio.current_time()
            fake.release_acks()
        assert closed_at and closed_at[0] >= release_time
        assert writer._finished.is_set()  # background tasks ended before close returned
        with pytest.raises(ClosedError):
            await writer.write(b"b")
        with pytest.raises(ClosedError):
            await writer.write_with_ack(b"b")
        with pytest.raises(ClosedError):
            await writer.flush()
        await writer.close()  # a second close is harmless
    assert fake.log == [1]


async def test_close_timeout_cancels_and_reports_what_was_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer()
    fake.hold_acks()
    async with writer_on(fake) as writer:
        await writer.write([b"a", b"b", b"c"])
        with pytest.raises(CloseTimeoutError) as info:
            await writer.close(timeout=2)
        assert info.value.unacked == 3
        assert writer._finished.is_set()


async def test_write_with_ack_continues_the_servers_numbering(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer(last_seq_no=41)
    fake.log = [0] * 10  # ten older messages: offsets continue at 10
    async with writer_on(fake) as writer:
        results = await writer.write_with_ack([b"x", Message(b"y", metadata={"k": b"v"})])
        assert [(r.seq_no, r.partition, r.offset) for r in results] == [(42, 0, 10), (43, 0, 11)]
        assert await writer.wait_init() == 41
        await writer.close()


async def test_requests_stay_under_the_message_size_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer()
    async with writer_on(fake, max_message_size=20_000) as writer:
        await writer.write([b"x" * 1_500] * 60)
        await writer.flush()
        with pytest.raises(ValueError, match="cannot fit"):
            await writer.write(b"y" * 20_000)
        await writer.close()
    assert len(fake.log) == 60
    assert len(fake.request_sizes) > 4
    assert max(fake.request_sizes) <= 20_000


async def test_in_band_unavailable_reconnects_and_resends_without_duplicates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer()
    fake.hold_acks()
    async with writer_on(fake) as writer:
        await writer.write([b"m"] * 5)
        await trio.sleep(1)  # appended by the server, acks held
        fake.fail_after = 1  # the next request kills the stream without acks
        await writer.write([b"n"] * 5)
        fake.release_acks()
        await writer.flush()
        assert writer.sessions == 2
        await writer.close()
    # The first five were resent and skipped; the second five arrived once, in order.
    assert fake.log == list(range(1, 11))
    assert fake.streams == 2


async def test_a_non_retriable_error_surfaces_and_stops_the_writer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fake = FakeTopicServer()
    fake.init_status = BAD_REQUEST
    async with writer_on(fake) as writer:
        with pytest.raises(YdbStatusError, match="refused by the fake"):
            await writer.write_with_ack(b"a")
        with pytest.raises(YdbStatusError):
            await writer.write(b"b")
        with pytest.raises(YdbStatusError):
            await writer.close()
    assert fake.streams == 1  # no retry
