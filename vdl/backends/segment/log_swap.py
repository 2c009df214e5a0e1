"""Swapping a store's whole log for a staged one (a snapshot), safe against crashes.

A snapshot is received into a staging directory inside the store's directory
(`snapshot-*.staging`, see `staging.py`); once its files are checked and synced, it lists
them in a MANIFEST, synced too. The swap then:

1. renames the staging directory to `snapshot.ready` and fsyncs the store's directory:
   the commit point. Before it the old log is the log (and opening the store removes
   staging directories), after it the new one is;
2. removes every segment file of the store's directory the manifest does not name;
3. moves every file the manifest names from `snapshot.ready` into the store's directory
   (replacing an old file of the same name), fsyncs the directory and removes
   `snapshot.ready`.

Steps 2 and 3 can be run again from any point they stopped at (a file named by the
manifest and no longer in `snapshot.ready` was moved already), and opening a store that
still has `snapshot.ready` does so (`recover`) before it reads the segments.
"""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

from vdl.backends.api import CorruptionError, StorageError
from vdl.backends.segment import log_index, raft_index
from vdl.backends.segment.segment import LOG_SUFFIX

STAGING_SUFFIX = ".staging"
READY = "snapshot.ready"
MANIFEST = "MANIFEST"
_SEGMENT_SUFFIXES = (LOG_SUFFIX, raft_index.SUFFIX, log_index.SUFFIX)
_names = itertools.count(1)


def new_staging_path(directory: Path) -> Path:
    """A name for a new staging directory in `directory` (not created here)."""
    while True:
        path = directory / f"snapshot-{os.getpid()}-{next(_names)}{STAGING_SUFFIX}"
        if not path.exists():
            return path


def write_manifest(staging: Path, names: list[str]) -> None:
    """List the staged files and make the staging directory durable (before `commit`)."""
    fd = os.open(staging / MANIFEST, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, "".join(name + "\n" for name in names).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(staging)


def commit(directory: Path, staging: Path) -> None:
    """Make the staged log the store's (step 1); the caller then runs `roll_forward`."""
    ready = directory / READY
    if ready.exists():
        raise StorageError(f"{ready} exists: an earlier swap was not finished")
    os.rename(staging, ready)
    fsync_directory(directory)


def roll_forward(directory: Path) -> bool:
    """Finish a committed swap (steps 2 and 3); False if there is none."""
    ready = directory / READY
    if not ready.is_dir():
        return False
    try:
        listed = (ready / MANIFEST).read_text().split()
    except FileNotFoundError:
        raise CorruptionError(f"{ready} has no {MANIFEST}") from None
    names = set(listed)
    if not names or any(not _plain(name) for name in names):
        raise CorruptionError(f"{ready / MANIFEST} does not list segment files")
    for path in directory.iterdir():
        if path.suffix in _SEGMENT_SUFFIXES and path.name not in names and path.is_file():
            path.unlink()
    for name in listed:
        source = ready / name
        if source.exists():
            os.rename(source, directory / name)
    fsync_directory(directory)
    shutil.rmtree(ready)
    fsync_directory(directory)
    return True


def recover(directory: Path) -> None:
    """On open: finish a committed swap, drop snapshots that were still being staged."""
    roll_forward(directory)
    for path in directory.glob("*" + STAGING_SUFFIX):
        shutil.rmtree(path, ignore_errors=True)


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _plain(name: str) -> bool:
    return name not in (".", "..") and "/" not in name and Path(name).suffix in _SEGMENT_SUFFIXES
