"""`MetaStore` on RocksDB: small, strongly durable metadata (topics, Raft hard state, offsets).

Every write goes through the WAL with sync=True, so it is on disk when the call returns,
except batches the caller marks unsynced (state it can rebuild from a durable log).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from rocksdict import Rdict, WriteBatch

from vdl.backends.api import StorageError
from vdl.backends.rocks.db import open_raw, rocks_errors, write_options

_SYNCED = write_options(sync=True)
_UNSYNCED = write_options(sync=False)


class RocksMetaStore:
    def __init__(self, db: Rdict) -> None:
        self._db: Rdict | None = db

    @classmethod
    def open(cls, directory: Path) -> RocksMetaStore:
        return cls(open_raw(directory))

    def get(self, key: bytes) -> bytes | None:
        db = self._open_db()
        with rocks_errors("meta get failed"):
            value: bytes | None = db.get(key)
        return value

    def put(self, key: bytes, value: bytes) -> None:
        db = self._open_db()
        with rocks_errors("meta put failed"):
            db.put(key, value, _SYNCED)

    def delete(self, key: bytes) -> None:
        db = self._open_db()
        with rocks_errors("meta delete failed"):
            db.delete(key, _SYNCED)

    def write_batch(
        self, puts: dict[bytes, bytes], deletes: Sequence[bytes] = (), *, sync: bool = True
    ) -> None:
        db = self._open_db()
        with rocks_errors("meta batch failed"):
            batch = WriteBatch(raw_mode=True)
            for key in deletes:
                batch.delete(key)
            # Puts after deletes: a key named in both ends up present, as `puts` is the
            # state the caller asks for.
            for key, value in puts.items():
                batch.put(key, value)
            db.write(batch, _SYNCED if sync else _UNSYNCED)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        db = self._open_db()
        # The iterator reads an implicit snapshot, so writes made while the caller
        # consumes the scan do not show up half-way through it.
        with rocks_errors("meta scan failed"):
            it = db.iter()
            it.seek(prefix)
            while it.valid():
                key: bytes = it.key()
                if not key.startswith(prefix):
                    break
                value: bytes = it.value()
                yield key, value
                it.next()

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            with rocks_errors("meta close failed"):
                db.close()

    def _open_db(self) -> Rdict:
        if self._db is None:
            raise StorageError("meta store is closed")
        return self._db
