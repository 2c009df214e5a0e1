"""Group commit: one flusher per data directory turns many appends into one fdatasync each.

Streams mark themselves dirty after an append; the flusher notes each dirty store's last
index, syncs them all in a worker thread while appends go on, and then reports that index
as durable. An append is acknowledged only after a flush that started after it.
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio

from vdl.backends.api import LogStore

log = logging.getLogger(__name__)


class Flushable(Protocol):
    @property
    def store(self) -> LogStore: ...

    def on_durable(self, index: int) -> None: ...


def _sync_all(stores: list[LogStore]) -> None:
    for store in stores:
        store.sync()


class Flusher:
    def __init__(self) -> None:
        self._dirty: dict[Flushable, None] = {}  # insertion-ordered set
        self._wakeup = trio.Event()
        self._closing = False
        # Held while a sync runs in its thread, so a store is never closed under it.
        self._sync_lock = trio.Lock()
        self.flushes = 0

    def mark_dirty(self, stream: Flushable) -> None:
        self._dirty[stream] = None
        self._wakeup.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            if self._dirty:
                await self._flush_once()
            if self._closing and not self._dirty:
                return

    async def _flush_once(self) -> None:
        async with self._sync_lock:
            streams = list(self._dirty)
            self._dirty.clear()
            marks = [stream.store.last_index() for stream in streams]
            # A failing fdatasync leaves the page cache state unknown: nothing can be
            # acknowledged any more, so the error propagates and stops the node.
            await trio.to_thread.run_sync(_sync_all, [s.store for s in streams])
            self.flushes += 1
        for stream, index in zip(streams, marks, strict=True):
            stream.on_durable(index)

    async def release(self, stream: Flushable) -> None:
        """Wait until no sync of this stream is in flight and forget it (before closing it)."""
        async with self._sync_lock:
            self._dirty.pop(stream, None)

    def stop(self) -> None:
        """Finish flushing what is dirty, then let run() return."""
        self._closing = True
        self._wakeup.set()
