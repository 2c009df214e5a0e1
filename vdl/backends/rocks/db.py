"""Opening a RocksDB database the way both rocks stores need it, and its error mapping."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rocksdict import BlockBasedOptions, Cache, DBRecoveryMode, Options, Rdict, WriteOptions

from vdl.backends.api import StorageError


def open_raw(directory: Path, *, block_cache_bytes: int | None = None) -> Rdict:
    """Open (creating if needed) a database whose keys and values are plain bytes.

    `block_cache_bytes` sizes this database's own block cache (RocksDB's default if None).
    """
    # raw_mode: rocksdict otherwise pickles values and tags keys with a type byte, which
    # would break byte-wise key order and waste space.
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    # After a crash the WAL may end in a torn record; recover the longest consistent
    # prefix so an unsynced suffix is dropped without leaving a hole before it.
    options.set_wal_recovery_mode(DBRecoveryMode.point_in_time())
    if block_cache_bytes is not None:
        table = BlockBasedOptions()
        if block_cache_bytes > 0:
            table.set_block_cache(Cache(block_cache_bytes))
        else:
            table.disable_cache()
        options.set_block_based_table_factory(table)
    with rocks_errors(f"cannot open RocksDB in {directory}"):
        directory.mkdir(parents=True, exist_ok=True)
        return Rdict(str(directory), options)


def write_options(*, sync: bool) -> WriteOptions:
    options = WriteOptions()
    options.sync = sync
    return options


@contextmanager
def rocks_errors(what: str) -> Iterator[None]:
    """Re-raise rocksdict's untyped exceptions as StorageError.

    rocksdict reports I/O failures, lock conflicts and use-after-close as bare
    `Exception` subclasses, so callers could not otherwise tell them from bugs.
    """
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        raise StorageError(f"{what}: {exc}") from exc
