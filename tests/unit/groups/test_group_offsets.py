"""Committed offsets in the MetaStore: keys, encoding, one synced batch per commit."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from vdl.backends.rocks.meta_store import RocksMetaStore
from vdl.groups.offsets import (
    MAX_METADATA_BYTES,
    CommittedOffset,
    OffsetStore,
    check_metadata,
    decode_value,
    encode_value,
    offset_key,
)
from vdl.log.error_codes import ErrorCode


class CountingMeta:
    """An in-memory MetaStore that records how it was written to."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.batches = 0
        self.puts = 0

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.puts += 1
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)

    def write_batch(
        self, puts: dict[bytes, bytes], deletes: Sequence[bytes] = (), *, sync: bool = True
    ) -> None:
        self.batches += 1
        for key in deletes:
            self.data.pop(key, None)
        self.data.update(puts)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key in sorted(self.data):
            if key.startswith(prefix):
                yield key, self.data[key]

    def close(self) -> None:
        pass


def test_value_round_trip() -> None:
    committed = CommittedOffset(42, "meta ü", 7, 1_700_000_000_000)
    assert decode_value(encode_value(committed)) == committed


def test_one_batch_per_commit_and_fetch() -> None:
    meta = CountingMeta()
    store = OffsetStore(meta)
    store.commit("g", {("t", 0): CommittedOffset(5), ("t", 1): CommittedOffset(9, "x", 2, 10)})
    assert (meta.batches, meta.puts) == (1, 0)
    got = store.fetch("g", [("t", 0), ("t", 1), ("t", 2), ("u", 0)])
    assert got == {
        ("t", 0): CommittedOffset(5),
        ("t", 1): CommittedOffset(9, "x", 2, 10),
        ("t", 2): None,
        ("u", 0): None,
    }
    store.commit("g", {("t", 0): CommittedOffset(6)})
    assert store.fetch("g", [("t", 0)])[("t", 0)] == CommittedOffset(6)


def test_fetch_all_is_per_group_even_with_prefix_names() -> None:
    store = OffsetStore(CountingMeta())
    store.commit("a", {("t", 1): CommittedOffset(1), ("s", 0): CommittedOffset(2)})
    store.commit("ab", {("t", 0): CommittedOffset(3)})
    store.commit("a/b", {("t", 0): CommittedOffset(4)})
    assert store.fetch_all("a") == {("s", 0): CommittedOffset(2), ("t", 1): CommittedOffset(1)}
    assert store.fetch_all("ab") == {("t", 0): CommittedOffset(3)}
    assert store.fetch_all("nobody") == {}


def test_keys_are_protocol_neutral() -> None:
    # A YDB consumer "c" reading topic "t" partition 3 finds the same cursor.
    assert offset_key("c", "t", 3) == b"offset/\x00\x01c\x00\x01t\x00\x00\x00\x03"


def test_metadata_limit() -> None:
    assert check_metadata(None) == ErrorCode.NONE
    assert check_metadata("x" * MAX_METADATA_BYTES) == ErrorCode.NONE
    assert check_metadata("x" * (MAX_METADATA_BYTES + 1)) == ErrorCode.OFFSET_METADATA_TOO_LARGE


def test_commits_survive_reopening_the_store(tmp_path: Path) -> None:
    meta = RocksMetaStore.open(tmp_path / "meta")
    OffsetStore(meta).commit("g", {("t", 0): CommittedOffset(11, "m", 1, 5)})
    meta.close()
    meta = RocksMetaStore.open(tmp_path / "meta")
    try:
        assert OffsetStore(meta).fetch_all("g") == {("t", 0): CommittedOffset(11, "m", 1, 5)}
    finally:
        meta.close()
