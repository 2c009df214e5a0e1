"""Fixtures shared by the storage tests: stores of every log backend (`open_store`, `store`).

Entries and real RecordBatch v2 payloads are built with `log_helpers`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from vdl.backends.api import LogStore, LogStoreOptions, StorageError
from vdl.backends.registry import LOG_BACKENDS, LogBackend, open_log_store

OpenStore = Callable[..., LogStore]


@pytest.fixture(params=LOG_BACKENDS)
def backend(request: pytest.FixtureRequest) -> LogBackend:
    kind: LogBackend = request.param
    return kind


@pytest.fixture
def open_store(backend: LogBackend, tmp_path: Path) -> Iterator[OpenStore]:
    """`open_store(options=..., name=...)` opens (or reopens) the store kept in
    tmp_path/name with the backend under test; whatever is still open is closed at the end."""
    opened: list[LogStore] = []

    def _open(options: LogStoreOptions | None = None, name: str = "log") -> LogStore:
        store = open_log_store(backend, tmp_path / name, options or LogStoreOptions())
        opened.append(store)
        return store

    yield _open
    for store in opened:
        try:
            store.close()
        except StorageError:
            pass


@pytest.fixture
def store(open_store: OpenStore) -> LogStore:
    return open_store()
