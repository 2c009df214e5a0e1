"""Zero-filled spare files, prepared in the background to become the next segment.

Why preallocate: an fdatasync after a write that grows the file must commit the ext4
journal (new blocks, new size); after overwriting blocks that are already allocated and
written it only flushes the data. Measured on the development machine (ext4, shared disk),
fdatasync after one 4 KiB write, p50 / p99:

    appending to the file                          0.23-0.28 ms / 0.9-4 ms
    into posix_fallocate'd space (size changed)    0.25-0.27 ms / 1.6-2.1 ms
    over zeros written (and synced) beforehand     0.14-0.15 ms / 0.4-0.7 ms

posix_fallocate leaves *unwritten* extents: the first write into each one converts it,
which is a metadata change and needs the journal commit all the same. Only zeros really
written once make later writes plain overwrites; the journal commit they avoid is also the
one that gets tangled with other tenants' IO on a shared disk (stalls of 0.4-1.85 s were
seen with appends). With 1 MiB rounds (throughput) a round took 0.47-0.48 ms over written
zeros vs 0.83-0.96 ms appending.

Why in the background and whole: writing 64 MiB of zeros and syncing them takes 35-55 ms;
done in the flusher thread that time would delay a round of acknowledgements (growing the
active segment 8 MiB at a time in the rounds gave 27 ms spikes). One shared worker thread
prepares every store's spare in turn (disk-bound work gains nothing from more threads);
the store adopts a spare only once it is complete and synced, on the owning thread, by
renaming it: a roll never waits for it (without a ready spare it creates an empty file and
appends, exactly as before).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path

SPARE_SUFFIX = ".spare"
_CHUNK = bytes(1 << 20)
# Segments may be configured up to 4 GiB; beyond this much a segment grows by appends
# rather than keep gigabytes of zeros per stream on disk.
MAX_PREALLOCATED = 1 << 30
# Bound here, not looked up per call: these syncs are the worker's own, independent of the
# store's commit syncs (which tests observe by patching `os`).
_fdatasync = os.fdatasync
_pwrite = os.pwrite


class SpareFile:
    """One file of `size` zero bytes at `path`, written by the worker; `take()` hands its fd
    over once it is complete and durable."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self._lock = threading.Lock()
        self._finished = threading.Event()  # the worker is done with it, whatever the outcome
        self._fd: int | None = None
        self._ready = False
        self._cancelled = False

    def ready(self) -> bool:
        with self._lock:
            return self._ready and not self._cancelled

    def take(self) -> int | None:
        """The open fd of the finished file (the caller now owns fd and file), or None."""
        with self._lock:
            if not self._ready or self._cancelled:
                return None
            fd, self._fd, self._cancelled = self._fd, None, True
            return fd

    def discard(self) -> None:
        """Stop preparing, wait for the worker to let go, and remove the file."""
        with self._lock:
            self._cancelled = True
            queued = not self._finished.is_set() and self._fd is None and not self._ready
        if queued:
            _the_worker.forget(self)
        self._finished.wait()
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        self.path.unlink(missing_ok=True)

    # -- worker side -------------------------------------------------------------------

    def _prepare(self) -> None:
        try:
            with self._lock:
                if self._cancelled:
                    return
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                self._fd = fd
            at = 0
            while at < self.size:
                if self._cancelled:  # a plain read: the next chunk sees it at the latest
                    return
                chunk = memoryview(_CHUNK)[: min(len(_CHUNK), self.size - at)]
                at += _pwrite(fd, chunk, at)
            _fdatasync(fd)
            with self._lock:
                self._ready = True
        except OSError:
            # A spare is an optimisation: without one the store appends as before. The
            # directory may also be gone (the stream was deleted).
            with self._lock:
                opened, self._fd = self._fd, None
                self._cancelled = True
            if opened is not None:
                os.close(opened)
            self.path.unlink(missing_ok=True)
        finally:
            self._finished.set()


class _Worker:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._jobs: deque[SpareFile] = deque()
        self._thread: threading.Thread | None = None

    def submit(self, spare: SpareFile) -> None:
        with self._cond:
            self._jobs.append(spare)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="vdl-segment-prealloc", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def forget(self, spare: SpareFile) -> None:
        """Drop a spare not started yet (it is finished at once)."""
        with self._cond:
            try:
                self._jobs.remove(spare)
            except ValueError:
                return  # the worker has taken it and will finish it
        spare._finished.set()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs:
                    self._cond.wait()
                spare = self._jobs.popleft()
            spare._prepare()


_the_worker = _Worker()


def prepare_spare(directory: Path, size: int) -> SpareFile:
    """Start preparing a spare of `size` zero bytes in `directory`."""
    spare = SpareFile(directory / ("next" + SPARE_SUFFIX), min(size, MAX_PREALLOCATED))
    _the_worker.submit(spare)
    return spare


def remove_spares(directory: Path) -> None:
    """Spares left by an earlier run: whether their zeros reached the disk is unknown."""
    for path in directory.glob("*" + SPARE_SUFFIX):
        path.unlink(missing_ok=True)
