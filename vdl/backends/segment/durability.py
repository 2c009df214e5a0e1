"""What `sync()` must flush, shared between the owning thread and a sync worker thread.

The owning thread appends, rolls, truncates and deletes segments; a flusher thread may call
`sync()` at any time. Everything they share lives here, under one lock held only for
bookkeeping, never across a write or an fdatasync, so appends do not wait for the disk:

- `sync()` captures, under the lock, the last appended index and the data fds written since
  the previous capture, marks those fds in use, then fdatasyncs them unlocked. Each append
  notes its fds after its write returned, so whatever was appended before `sync()` was
  called is in the captured set.
- The owner closes a data fd only through `retire()`: if a sync holds it, closing waits for
  that sync to let go (a roll or a retention during a sync never pulls an fd away, and the
  number is never reused under it).
- The directory is fsync'ed when segment files were created or removed since the previous
  sync: a new segment's entries are not durable until its name is, and a segment removed by
  truncation must not come back after a crash.
- `durable_index` is the last index known durable. A truncation lowers it and bumps an
  epoch; a sync that started before the truncation does not raise it again, because the
  indexes it captured may now name different entries.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

from vdl.backends.api import StorageError


class SyncTracker:
    def __init__(self, dir_fd: int, durable_index: int) -> None:
        self._lock = threading.Lock()
        self._one_sync_at_a_time = threading.Lock()
        self._dir_fd = dir_fd
        self._unsynced: dict[int, None] = {}  # data fds, insertion-ordered
        self._dir_changed = False
        self._appended = durable_index
        self._durable = durable_index
        self._epoch = 0
        self._in_use: dict[int, int] = {}  # fd -> how many syncs hold it
        self._retired: set[int] = set()  # fds to close when their sync lets go
        self._failure: str | None = None
        self._closed = False

    # -- owning thread ---------------------------------------------------------------

    def written(self, fds: Iterable[int], last_index: int) -> None:
        with self._lock:
            for fd in fds:
                self._unsynced[fd] = None
            self._appended = last_index

    def directory_changed(self) -> None:
        with self._lock:
            self._dir_changed = True

    def truncated(self, last_kept: int) -> None:
        with self._lock:
            self._appended = last_kept
            self._durable = min(self._durable, last_kept)
            self._epoch += 1

    def retire(self, fd: int) -> None:
        """Close a data fd of a segment being deleted, now or when its sync is done."""
        with self._lock:
            self._unsynced.pop(fd, None)
            if self._in_use.get(fd):
                self._retired.add(fd)
                return
        os.close(fd)

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
            with self._lock:
                if self._closed:
                    raise StorageError("log store is closed")
                self.check_healthy()
                target, epoch = self._appended, self._epoch
                fds = list(self._unsynced)
                self._unsynced.clear()
                sync_dir, self._dir_changed = self._dir_changed, False
                for fd in fds:
                    self._in_use[fd] = self._in_use.get(fd, 0) + 1
            try:
                for fd in fds:
                    os.fdatasync(fd)
                if sync_dir:
                    os.fsync(self._dir_fd)
            except OSError as exc:
                # After a failed fdatasync the kernel may have dropped the dirty pages and
                # a retry could "succeed" without them: the store stays failed.
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
        """Refuse further syncs and close the directory fd (the owner closes the rest)."""
        with self._one_sync_at_a_time, self._lock:
            self._closed = True
            os.close(self._dir_fd)
