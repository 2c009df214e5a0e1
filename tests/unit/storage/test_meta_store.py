"""RocksMetaStore: the MetaStore contract on RocksDB."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from vdl.backends.api import StorageError
from vdl.backends.rocks.meta_store import RocksMetaStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RocksMetaStore]:
    s = RocksMetaStore.open(tmp_path / "meta")
    yield s
    s.close()


def test_put_get_delete(store: RocksMetaStore) -> None:
    assert store.get(b"k") is None
    store.put(b"k", b"v1")
    assert store.get(b"k") == b"v1"
    store.put(b"k", b"v2")
    assert store.get(b"k") == b"v2"
    store.delete(b"k")
    assert store.get(b"k") is None
    store.delete(b"never-there")  # deleting a missing key is not an error


def test_empty_value_is_distinct_from_missing(store: RocksMetaStore) -> None:
    store.put(b"k", b"")
    assert store.get(b"k") == b""


def test_keys_and_values_are_raw_bytes(store: RocksMetaStore) -> None:
    key, value = bytes(range(256)), b"\x00\xff" * 100
    store.put(key, value)
    assert store.get(key) == value
    assert list(store.scan(b"\x00\x01")) == [(key, value)]


def test_write_batch_applies_puts_and_deletes(store: RocksMetaStore) -> None:
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    store.write_batch({b"c": b"3", b"a": b"10"}, deletes=[b"b"])
    assert list(store.scan(b"")) == [(b"a", b"10"), (b"c", b"3")]


def test_write_batch_put_wins_over_delete_of_same_key(store: RocksMetaStore) -> None:
    store.write_batch({b"k": b"new"}, deletes=[b"k"])
    assert store.get(b"k") == b"new"


def test_write_batch_is_atomic(store: RocksMetaStore) -> None:
    store.put(b"a", b"1")
    with pytest.raises(StorageError):
        # The bad key fails only after the good put was added to the batch.
        store.write_batch({b"b": b"2", "not-bytes": b"3"})  # type: ignore[dict-item]
    assert store.get(b"b") is None
    assert store.get(b"a") == b"1"


def test_scan_is_in_key_order_and_bounded_by_prefix(store: RocksMetaStore) -> None:
    keys = [b"t/\xff", b"t/b", b"t", b"t/a/2", b"u", b"s/z", b"t/a", b"t0"]
    store.write_batch({k: k.upper() for k in keys})
    assert [k for k, _ in store.scan(b"t/")] == [b"t/a", b"t/a/2", b"t/b", b"t/\xff"]
    assert [k for k, _ in store.scan(b"t")] == [b"t", b"t/a", b"t/a/2", b"t/b", b"t/\xff", b"t0"]
    assert list(store.scan(b"t/a/")) == [(b"t/a/2", b"T/A/2")]
    assert list(store.scan(b"v")) == []
    assert [k for k, _ in store.scan(b"")] == sorted(keys)


def test_scan_of_prefix_ending_in_ff(store: RocksMetaStore) -> None:
    store.write_batch({b"\xff": b"1", b"\xff\xff": b"2", b"\xff\x00": b"3", b"\xfe": b"4"})
    assert [k for k, _ in store.scan(b"\xff")] == [b"\xff", b"\xff\x00", b"\xff\xff"]


def test_big_endian_numbers_scan_in_numeric_order(store: RocksMetaStore) -> None:
    numbers = [300, 2, 1 << 40, 0, 255, 256]
    store.write_batch({b"n" + n.to_bytes(8, "big"): b"" for n in numbers})
    assert [int.from_bytes(k[1:], "big") for k, _ in store.scan(b"n")] == sorted(numbers)


def test_data_survives_reopen(tmp_path: Path) -> None:
    directory = tmp_path / "meta"
    store = RocksMetaStore.open(directory)
    store.put(b"hard/term", b"7")
    store.write_batch({b"hard/vote": b"n2", b"topic/x": b"{}"}, deletes=[b"gone"])
    store.put(b"gone", b"x")
    store.delete(b"gone")
    store.close()
    reopened = RocksMetaStore.open(directory)
    try:
        assert list(reopened.scan(b"")) == [
            (b"hard/term", b"7"),
            (b"hard/vote", b"n2"),
            (b"topic/x", b"{}"),
        ]
    finally:
        reopened.close()


def test_close_is_idempotent_and_use_after_close_fails(tmp_path: Path) -> None:
    store = RocksMetaStore.open(tmp_path / "meta")
    store.put(b"k", b"v")
    store.close()
    store.close()
    with pytest.raises(StorageError):
        store.get(b"k")
    with pytest.raises(StorageError):
        store.put(b"k", b"v")
    with pytest.raises(StorageError):
        list(store.scan(b""))


def test_second_open_of_same_directory_fails(tmp_path: Path) -> None:
    store = RocksMetaStore.open(tmp_path / "meta")
    try:
        with pytest.raises(StorageError):
            RocksMetaStore.open(tmp_path / "meta")
    finally:
        store.close()


def test_unsynced_batches_are_readable_in_order_and_survive_reopen(tmp_path: Path) -> None:
    directory = tmp_path / "meta"
    store = RocksMetaStore.open(directory)
    store.write_batch({b"offsets/a": b"1", b"applied": b"10"}, sync=False)
    store.write_batch({b"offsets/a": b"2", b"applied": b"11"}, sync=False)
    assert store.get(b"offsets/a") == b"2"
    store.put(b"hard/term", b"3")  # a synced write makes the earlier batches durable too
    store.close()
    reopened = RocksMetaStore.open(directory)
    try:
        assert (reopened.get(b"offsets/a"), reopened.get(b"applied")) == (b"2", b"11")
    finally:
        reopened.close()
