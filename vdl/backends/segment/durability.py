"""Writing and syncing, shared between the owning thread and a sync worker thread.

The owning thread appends, rolls, truncates and deletes segments; a flusher thread may call
`sync()` at any time. Appends do no I/O: each entry is queued here as (fd, position, header,
payload), and `sync()` writes everything queued (one gathered `pwritev` per run of adjacent
entries, no copy of the payloads) and then fdatasyncs. The event loop that owns the store
thus never waits for the disk on the append path; the writes happen in the thread that was
going to wait for fdatasync anyway. Everything the two threads share lives here:

- `_lock` guards the bookkeeping and is never held across I/O.
- `_write_lock` is held by `sync()` from taking the queue until the queued entries are in
  the files, and by the owner around a truncation (`writes_paused`). So a truncation sees
  every entry either still queued (and drops those it removes) or already written (and cuts
  them with ftruncate); a write of a removed entry can never land after the cut and bring
  an entry back, nor overwrite whatever is appended at that position afterwards.
- `sync()` captures, under both locks, the last appended index, the queued writes and the
  data fds written or cut since the previous capture, marks those fds in use, writes, and
  then fdatasyncs with only the per-fd claims held. Each append queues its writes before it
  returns, so whatever was appended before `sync()` was called is in the capture.
- `written_index` is the last index whose bytes have reached the OS. Entries after it exist
  only in memory, so the store's recent-entries cache keeps them (see `recent_cache.py`).
- The owner closes a data fd only through `retire()`: queued writes to it are dropped (its
  segment is being deleted) and, if a sync holds it, closing waits for that sync to let go
  (a roll or a retention during a sync never pulls an fd away, and the number is never
  reused under it).
- The directory is fsync'ed when segment files were created or removed since the previous
  sync: a new segment's entries are not durable until its name is, and a segment removed by
  truncation must not come back after a crash.
- `durable_index` is the last index known durable. A truncation lowers it and bumps an
  epoch; a sync that started before the truncation does not raise it again, because the
  indexes it captured may now name different entries.
- A failed write or fdatasync leaves the store failed for good: after a failed fdatasync the
  kernel may have dropped the dirty pages and a retry could "succeed" without them, and
  after a failed write the queued entries behind it can no longer be written in order.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from vdl.backends.api import Buffer, StorageError
from vdl.backends.segment.file_io import pwritev_all
from vdl.metrics.stages import BYTES_BOUNDS, STAGES

_SYNC_WRITE = STAGES.histogram("storage_sync_write_seconds")
_FDATASYNC = STAGES.histogram("storage_fdatasync_seconds")
_SYNC_BYTES = STAGES.histogram("storage_sync_bytes", BYTES_BOUNDS)


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """One encoded entry waiting to be written at `position` of the segment file `fd`."""

    fd: int
    position: int
    index: int
    header: bytes
    payload: Buffer

    @property
    def end(self) -> int:
        return self.position + len(self.header) + len(self.payload)


class SyncTracker:
    def __init__(self, dir_fd: int, durable_index: int) -> None:
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._one_sync_at_a_time = threading.Lock()
        self._dir_fd = dir_fd
        self._queue: list[PendingWrite] = []  # in index order
        self._unsynced: dict[int, None] = {}  # data fds, insertion-ordered
        self._dir_changed = False
        self._appended = durable_index
        self._written = durable_index
        self._durable = durable_index
        self._epoch = 0
        self._in_use: dict[int, int] = {}  # fd -> how many syncs hold it
        self._retired: set[int] = set()  # fds to close when their sync lets go
        self._failure: str | None = None
        self._closed = False

    # -- owning thread ---------------------------------------------------------------

    def queue(self, writes: Iterable[PendingWrite], last_index: int) -> None:
        """Queue the entries of one append, up to `last_index`, for the next sync."""
        with self._lock:
            self._queue.extend(writes)
            self._appended = last_index

    def cut(self, fd: int) -> None:
        """`fd`'s file was shortened: the next sync must make its new length durable."""
        with self._lock:
            self._unsynced[fd] = None

    def directory_changed(self) -> None:
        with self._lock:
            self._dir_changed = True

    @contextmanager
    def writes_paused(self) -> Iterator[None]:
        """Wait for a sync that is writing to finish its writes, and keep the next one
        from starting its writes until the block ends (a truncation runs in it)."""
        with self._write_lock:
            yield

    def truncated(self, last_kept: int) -> None:
        """Entries after `last_kept` are gone; call within `writes_paused()`."""
        with self._lock:
            self._queue = [w for w in self._queue if w.index <= last_kept]
            self._appended = last_kept
            self._written = min(self._written, last_kept)
            self._durable = min(self._durable, last_kept)
            self._epoch += 1

    def restart_at(self, index: int) -> None:
        """The log was emptied to go on after `index`; call within `writes_paused()` after
        retiring every data fd."""
        with self._lock:
            self._queue = []
            self._appended = self._written = self._durable = index
            self._epoch += 1

    def retire(self, fd: int) -> None:
        """Close a data fd of a segment being deleted, now or when its sync is done."""
        with self._lock:
            self._unsynced.pop(fd, None)
            if any(w.fd == fd for w in self._queue):
                self._queue = [w for w in self._queue if w.fd != fd]
            if self._in_use.get(fd):
                self._retired.add(fd)
                return
        os.close(fd)

    @property
    def written_index(self) -> int:
        with self._lock:
            return self._written

    @property
    def durable_index(self) -> int:
        with self._lock:
            return self._durable

    def sync_directory(self) -> None:
        os.fsync(self._dir_fd)

    def healthy(self) -> bool:
        return self._failure is None

    def check_healthy(self) -> None:
        if self._failure is not None:
            raise StorageError(self._failure)

    # -- any thread ------------------------------------------------------------------

    def sync(self) -> None:
        # Two concurrent syncs must not both claim the first one's capture: the second
        # waits, then captures what is still unsynced.
        with self._one_sync_at_a_time:
            with self._write_lock:
                with self._lock:
                    if self._closed:
                        raise StorageError("log store is closed")
                    self.check_healthy()
                    target, epoch = self._appended, self._epoch
                    writes, self._queue = self._queue, []
                    for write in writes:
                        self._unsynced[write.fd] = None
                    fds = list(self._unsynced)
                    self._unsynced.clear()
                    sync_dir, self._dir_changed = self._dir_changed, False
                    for fd in fds:
                        self._in_use[fd] = self._in_use.get(fd, 0) + 1
                started = time.perf_counter()
                try:
                    _write_all(writes)
                except OSError as exc:
                    self._failure = f"write failed, log store unusable: {exc}"
                    self._release(fds)
                    raise StorageError(self._failure) from exc
                with self._lock:
                    # No truncation ran since the capture (it needs the write lock).
                    self._written = max(self._written, target)
                written = time.perf_counter()
                if fds:
                    _SYNC_WRITE.observe(written - started)
                    _SYNC_BYTES.observe(sum(w.end - w.position for w in writes))
            try:
                for fd in fds:
                    os.fdatasync(fd)
                if sync_dir:
                    os.fsync(self._dir_fd)
                if fds:
                    _FDATASYNC.since(written)
            except OSError as exc:
                self._failure = f"fdatasync failed, log store unusable: {exc}"
                raise StorageError(self._failure) from exc
            finally:
                self._release(fds)
            with self._lock:
                if epoch == self._epoch:
                    self._durable = max(self._durable, target)

    def _release(self, fds: list[int]) -> None:
        to_close = []
        with self._lock:
            for fd in fds:
                left = self._in_use[fd] - 1
                if left:
                    self._in_use[fd] = left
                    continue
                del self._in_use[fd]
                if fd in self._retired:
                    self._retired.discard(fd)
                    to_close.append(fd)
        for fd in to_close:
            os.close(fd)

    def close(self) -> None:
        """Refuse further syncs, drop what is still queued (the owner synced first if it
        could) and close the directory fd (the owner closes the rest)."""
        with self._one_sync_at_a_time, self._lock:
            self._closed = True
            self._queue = []
            os.close(self._dir_fd)


def _write_all(writes: list[PendingWrite]) -> None:
    """Write queued entries, one pwritev per run of entries adjacent in one file."""
    run: list[Buffer] = []
    fd = at = end = -1
    for write in writes:
        if write.fd != fd or write.position != end:
            if run:
                pwritev_all(fd, run, at)
            run, fd, at = [], write.fd, write.position
        run.append(write.header)
        run.append(write.payload)
        end = write.end
    if run:
        pwritev_all(fd, run, at)
