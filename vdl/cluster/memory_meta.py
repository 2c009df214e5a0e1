"""A MetaStore in memory, for state rebuilt on every start (the cluster's topic catalog
mirrors the metadata group, whose log is the durable copy)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


class MemoryMetaStore:
    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        self._data.pop(key, None)

    def write_batch(
        self, puts: dict[bytes, bytes], deletes: Sequence[bytes] = (), *, sync: bool = True
    ) -> None:
        for key in deletes:
            self._data.pop(key, None)
        self._data.update(puts)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in sorted(k for k in self._data if k.startswith(prefix)):
            yield key, self._data[key]

    def close(self) -> None:
        pass
