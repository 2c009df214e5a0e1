"""The flusher thread: group commit, shutdown, release, sync errors."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import trio

from vdl.backends.api import LogStore, StorageError
from vdl.log.flusher import Flusher


class FakeStore:
    """Counts appends and syncs; a sync can be held until the test lets it go."""

    def __init__(self) -> None:
        self.appended = 0
        self.synced_through = 0
        self.syncs = 0
        self.hold = threading.Event()
        self.hold.set()
        self.in_sync = threading.Event()
        self.fail: str | None = None

    def last_index(self) -> int:
        return self.appended

    def sync(self) -> None:
        target = self.appended  # everything appended before the call
        self.in_sync.set()
        assert self.hold.wait(5)
        self.in_sync.clear()
        if self.fail is not None:
            raise StorageError(self.fail)
        self.syncs += 1
        self.synced_through = max(self.synced_through, target)


class FakeStream:
    def __init__(self) -> None:
        self.fake = FakeStore()
        self.durable: list[int] = []

    @property
    def store(self) -> LogStore:
        return self.fake  # type: ignore[return-value]

    def on_durable(self, index: int) -> None:
        # Acknowledged only if a sync that started after the append covered it.
        assert index <= self.fake.synced_through
        self.durable.append(index)


async def wait_for(predicate: object, seconds: float = 5) -> None:
    with trio.fail_after(seconds):
        while not predicate():  # type: ignore[operator]
            await trio.sleep(0.001)


async def test_appends_during_a_sync_wait_for_the_next_one() -> None:
    flusher = Flusher()
    stream = FakeStream()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        stream.fake.hold.clear()
        stream.fake.appended = 1
        flusher.mark_dirty(stream)
        await wait_for(stream.fake.in_sync.is_set)
        for _ in range(5):  # all land while the first sync runs: one more sync covers them
            stream.fake.appended += 1
            flusher.mark_dirty(stream)
        stream.fake.hold.set()
        await wait_for(lambda: stream.durable[-1:] == [6])
        assert stream.durable == [1, 6]
        assert stream.fake.syncs == 2
        assert flusher.flushes == 2
        flusher.stop()


async def test_stop_flushes_what_is_dirty_and_ends_the_thread() -> None:
    flusher = Flusher()
    streams = [FakeStream() for _ in range(3)]
    threads_before = threading.active_count()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        assert threading.active_count() == threads_before + 1
        for stream in streams:
            stream.fake.hold.clear()
            stream.fake.appended = 3
            flusher.mark_dirty(stream)
        flusher.stop()
        for stream in streams:
            stream.fake.hold.set()
    assert [s.durable for s in streams] == [[3], [3], [3]]
    assert threading.active_count() == threads_before


async def test_release_waits_for_the_sync_in_flight() -> None:
    flusher = Flusher()
    stream = FakeStream()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        stream.fake.hold.clear()
        stream.fake.appended = 1
        flusher.mark_dirty(stream)
        await wait_for(stream.fake.in_sync.is_set)
        released = trio.Event()

        async def release() -> None:
            await flusher.release(stream)
            released.set()

        nursery.start_soon(release)
        await trio.sleep(0.05)
        assert not released.is_set()
        stream.fake.hold.set()
        with trio.fail_after(5):
            await released.wait()
        flusher.stop()


async def test_a_sync_error_is_raised_by_run() -> None:
    flusher = Flusher()
    stream = FakeStream()
    stream.fake.fail = "fdatasync failed"
    with pytest.RaisesGroup(pytest.RaisesExc(StorageError, match="fdatasync failed")):
        async with trio.open_nursery() as nursery:
            await nursery.start(flusher.run)
            stream.fake.appended = 1
            flusher.mark_dirty(stream)
            await trio.sleep_forever()
    assert stream.durable == []


async def test_cancelling_run_ends_the_thread() -> None:
    flusher = Flusher()
    threads_before = threading.active_count()
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        nursery.cancel_scope.cancel()
    assert threading.active_count() == threads_before


async def test_what_a_mark_carries_runs_with_the_report_that_covers_it() -> None:
    flusher = Flusher()
    stream = FakeStream()
    seen: list[str] = []
    stream_on_durable = stream.on_durable

    def on_durable(index: int) -> None:
        seen.append(f"durable {index}")
        stream_on_durable(index)

    stream.on_durable = on_durable  # type: ignore[method-assign]

    def carried(name: str) -> Callable[[], None]:
        marked = stream.fake.appended

        def then() -> None:
            # Everything appended when it was marked is on disk by now.
            assert stream.fake.synced_through >= marked
            seen.append(name)

        return then

    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        stream.fake.hold.clear()
        stream.fake.appended = 1
        flusher.mark_dirty(stream, carried("a"))
        await wait_for(stream.fake.in_sync.is_set)
        # Nothing appended since the sync in flight noted its index: it rides on that sync.
        flusher.mark_dirty(stream, carried("b"))
        stream.fake.appended = 2
        # Appended after that sync started: it waits for the next one.
        flusher.mark_dirty(stream, carried("c"))
        stream.fake.hold.set()
        await wait_for(lambda: stream.durable[-1:] == [2])
        flusher.stop()
    assert seen == ["a", "b", "durable 1", "c", "durable 2"]
    assert stream.fake.syncs == 2


async def test_release_hands_back_what_no_sync_has_taken() -> None:
    flusher = Flusher()
    stream = FakeStream()
    ran: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(flusher.run)
        stream.fake.hold.clear()
        stream.fake.appended = 1
        flusher.mark_dirty(stream, lambda: ran.append(1))
        await wait_for(stream.fake.in_sync.is_set)
        stream.fake.appended = 2
        flusher.mark_dirty(stream, lambda: ran.append(2))
        released: list[list[Callable[[], None]]] = []

        async def release() -> None:
            released.append(await flusher.release(stream))

        nursery.start_soon(release)
        await trio.sleep(0.05)
        stream.fake.hold.set()
        await wait_for(lambda: bool(released))
        # The sync in flight released its own; the next mark was never synced: handed back.
        assert ran == [1]
        assert stream.durable == [1]
        owed = released[0]
        assert len(owed) == 1
        owed[0]()
        assert ran == [1, 2]
        flusher.stop()
    assert stream.fake.syncs == 1
