"""Group commit: one flusher per data directory turns many appends into one fdatasync each.

Streams mark themselves dirty after an append, noting their store's last index. A long-lived
thread takes every dirty stream at once, syncs their stores (which writes what they queued
and fdatasyncs, while appends go on) and reports each noted index as durable back into
Trio. An append is acknowledged only after a sync that started after it: the index is noted
after the append returned, and the thread takes it only before calling `sync()`.

What a durable index releases travels with the data, as etcd raft's asynchronous storage
writes attach their responses to the append (raft/rawnode.go, `MsgStorageAppend`): a mark
may carry a callback (a Raft group's acks and its persisted report), run on the Trio thread
with the report of the first sync that covers everything its stream had appended when it
was marked, before that report; callbacks of one stream run in the order they were marked.
If the sync in flight already covers it (nothing appended since that sync noted its index),
the callback rides on that sync rather than waiting for the next.

One thread for the node's lifetime, fed under a condition and answering through
`TrioToken.run_sync_soon`, rather than `trio.to_thread.run_sync` per round: the hand-off is
one condition notify and one callback, and the thread starts its next round as soon as its
last one ended, without waiting for the event loop to schedule a task.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

import trio

from vdl.backends.api import LogStore
from vdl.metrics.stages import STAGES

_ROUND = STAGES.histogram("flusher_round_seconds")
_HANDOFF = STAGES.histogram("flusher_handoff_seconds")

log = logging.getLogger(__name__)


# Run on the Trio thread once what its mark covers is durable.
Released = Callable[[], None]


class Flushable(Protocol):
    @property
    def store(self) -> LogStore: ...

    def on_durable(self, index: int) -> None: ...


class Flusher:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        # Guarded by _cond: stream -> last index appended when it was marked (insertion-
        # ordered) and the callbacks the marks carry; the same for the round being synced;
        # and what the thread is told.
        self._dirty: dict[Flushable, int] = {}
        self._dirty_then: dict[Flushable, list[Released]] = {}
        self._round: dict[Flushable, int] = {}
        self._round_then: dict[Flushable, list[Released]] = {}
        self._closing = False
        self._abort = False
        # Trio side only.
        self._round_done = trio.Event()
        self._ended = trio.Event()
        self._failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.flushes = 0

    def mark_dirty(self, stream: Flushable, then: Released | None = None) -> None:
        """`stream` appended: sync it, and run `then` (if given) with the first durability
        report that covers everything it has appended so far."""
        mark = stream.store.last_index()
        with self._cond:
            if (
                then is not None
                and stream not in self._dirty
                and self._round.get(stream, -1) >= mark
            ):
                self._round_then.setdefault(stream, []).append(then)
                return
            self._dirty[stream] = mark
            if then is not None:
                self._dirty_then.setdefault(stream, []).append(then)
            self._cond.notify()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the flusher thread until `stop()` has flushed everything; a sync error is
        raised here, so it stops the node (nothing can be acknowledged after it)."""
        self._token = trio.lowlevel.current_trio_token()
        thread = threading.Thread(target=self._thread_main, name="vdl-flusher", daemon=True)
        thread.start()
        task_status.started()
        try:
            await self._ended.wait()
        finally:
            if not self._ended.is_set():
                # Cancelled: the thread finishes the round it is in and ends without more.
                with self._cond:
                    self._abort = True
                    self._cond.notify()
                with trio.CancelScope(shield=True):
                    await self._ended.wait()
            # Cancelled or not: it has posted its last callback, only its return is left.
            thread.join()
        if self._failure is not None:
            raise self._failure

    async def release(self, stream: Flushable) -> list[Released]:
        """Wait until no sync of this stream is in flight and forget it (before closing,
        truncating or replacing its store). What a sync in flight releases is run as
        usual; the callbacks of marks no sync has taken yet are returned, not run: the
        caller syncs itself and runs them, or drops them with the data they were for."""
        owed: list[Released] = []
        while True:
            with self._cond:
                self._dirty.pop(stream, None)
                owed += self._dirty_then.pop(stream, ())
                busy = stream in self._round
            if not busy or self._ended.is_set():
                return owed
            await self._round_done.wait()

    def stop(self) -> None:
        """Finish flushing what is dirty, then let run() return."""
        with self._cond:
            self._closing = True
            self._cond.notify()

    # -- the flusher thread ----------------------------------------------------------------

    def _thread_main(self) -> None:
        token = self._token
        assert token is not None
        try:
            while True:
                with self._cond:
                    while not (self._dirty or self._closing or self._abort):
                        self._cond.wait()
                    if self._abort or not self._dirty:
                        break
                    marks, self._dirty = self._dirty, {}
                    self._round, self._round_then = marks, self._dirty_then
                    self._dirty_then = {}
                started = time.perf_counter()
                try:
                    for stream in marks:
                        stream.store.sync()
                finally:
                    with self._cond:
                        thens = self._round_then
                        self._round, self._round_then = {}, {}
                ended = time.perf_counter()
                _ROUND.observe(ended - started)
                token.run_sync_soon(self._round_ended, marks, thens, ended)
        except BaseException as exc:
            token.run_sync_soon(self._end, exc)
        else:
            token.run_sync_soon(self._end, None)

    # -- callbacks on the Trio thread ---------------------------------------------------------

    def _round_ended(
        self,
        marks: dict[Flushable, int],
        thens: dict[Flushable, list[Released]],
        ended: float,
    ) -> None:
        _HANDOFF.since(ended)
        self.flushes += 1
        self._round_done.set()
        self._round_done = trio.Event()
        try:
            for stream, index in marks.items():
                for then in thens.get(stream, ()):
                    then()
                stream.on_durable(index)
        except Exception as exc:
            # An exception escaping a run_sync_soon callback would crash Trio itself: end
            # the flusher instead and let run() raise it.
            self._failure = exc
            with self._cond:
                self._abort = True
                self._cond.notify()

    def _end(self, failure: BaseException | None) -> None:
        if failure is not None:
            log.critical("log flush failed, nothing more can be acknowledged: %s", failure)
            self._failure = failure
        self._round_done.set()
        self._ended.set()
