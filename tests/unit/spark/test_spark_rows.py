"""Sink row conversion, record identity, and offset resolution: pure parts, no JVM."""

from __future__ import annotations

import pytest

from vdl.adapters.spark.options import OptionError
from vdl.adapters.spark.sink import Record, RowConverter, SinkError
from vdl.adapters.spark.source import resolve


def test_rows_convert_by_column_name_like_the_kafka_sink() -> None:
    convert = RowConverter(["Value", "key", "partition", "headers"], topic="out")
    record = convert(("v", b"k", 3, [("h", "x"), ("n", None)]))
    assert record == Record("out", 3, b"k", b"v", [("h", b"x"), ("n", None)])
    by_row = RowConverter(["topic", "value"], topic=None)
    assert by_row(("t1", bytearray(b"v"))) == Record("t1", None, None, b"v", [])


def test_bad_sink_schemas_and_values_are_reported() -> None:
    with pytest.raises(OptionError, match='needs a "value" column'):
        RowConverter(["key"], topic="out")
    with pytest.raises(OptionError, match='"topic" option, or a "topic" column'):
        RowConverter(["value"], topic=None)
    with pytest.raises(SinkError, match='column "value" must be binary or string'):
        RowConverter(["value"], topic="out")((42,))


def test_digest_identifies_content_and_nothing_else() -> None:
    a = Record("t", None, b"k", b"v", [("h", b"1")])
    assert a.digest() == Record("t", None, b"k", b"v", [("h", b"1")]).digest()
    different = [
        Record("u", None, b"k", b"v", [("h", b"1")]),
        Record("t", 0, b"k", b"v", [("h", b"1")]),
        Record("t", None, None, b"v", [("h", b"1")]),
        Record("t", None, b"", b"v", [("h", b"1")]),
        Record("t", None, b"kv", b"", [("h", b"1")]),
        Record("t", None, b"k", b"v", []),
        Record("t", None, b"k", b"v", [("h", None)]),
    ]
    assert len({a.digest(), *(r.digest() for r in different)}) == 1 + len(different)


PARTS = [("t", 0), ("t", 1)]
EARLIEST = {("t", 0): 5, ("t", 1): 0}
LATEST = {("t", 0): 50, ("t", 1): 20}


def test_resolve_earliest_latest_and_json() -> None:
    assert resolve("earliest", PARTS, EARLIEST, LATEST, "startingOffsets") == EARLIEST
    assert resolve("latest", PARTS, EARLIEST, LATEST, "startingOffsets") == LATEST
    spec = {("t", 0): -2, ("t", 1): 7}
    assert resolve(spec, PARTS, EARLIEST, LATEST, "startingOffsets") == {("t", 0): 5, ("t", 1): 7}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({("t", 0): 1}, r"missing: t/1"),
        ({("t", 0): 1, ("t", 1): 1, ("t", 2): 1}, "do not exist: t/2"),
        ({("t", 0): 1, ("t", 1): 21}, "past the end of the log"),
    ],
)
def test_resolve_rejects_json_that_does_not_fit_the_topic(
    spec: dict[tuple[str, int], int], message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        resolve(spec, PARTS, EARLIEST, LATEST, "startingOffsets")
