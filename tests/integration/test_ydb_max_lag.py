"""A YDB read session's ``max_lag`` (ydb_topic.proto ``TopicReadSettings``): messages
written longer ago than it are skipped where the session starts reading, and later only
once the lag window has moved past everything the session already read (the search the
session spares while a batch it read past still reaches the window: vdl.net.ydb.max_lag).
The official YDB SDK against a real node.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
import ydb

from tests.integration.node_process import NodeProcess
from tests.integration.waiting import wait_until

DATABASE = "/local"


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ydb.Driver]:
    with NodeProcess(tmp_path_factory.mktemp("ydb-max-lag") / "data") as node:
        config = ydb.DriverConfig(endpoint=f"grpc://{node.grpc_address}", database=DATABASE)
        d = ydb.Driver(driver_config=config)
        try:
            d.wait(timeout=10, fail_fast=True)
            yield d
        finally:
            d.stop(timeout=10)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _messages(prefix: str, count: int, created_at: datetime.datetime) -> list[Any]:
    return [
        ydb.TopicWriterMessage(b"%s%d" % (prefix.encode(), i), created_at=created_at)
        for i in range(count)
    ]


def _receive(reader: Any, count: int) -> list[bytes]:
    got: list[bytes] = []

    def enough() -> bool:
        with contextlib.suppress(TimeoutError):
            got.extend(m.data for m in reader.receive_batch(timeout=1).messages)
        return len(got) >= count

    wait_until(enough, f"{count} messages", every=0)
    return got


def test_old_messages_are_skipped_only_until_the_session_reads_recent_ones(
    driver: ydb.Driver,
) -> None:
    topics = driver.topic_client
    path = f"{DATABASE}/max-lag-window"
    topics.create_topic(path, consumers=["c"])
    hour_ago = _now() - datetime.timedelta(hours=1)
    selector = ydb.TopicReaderSelector(path=path, max_lag=datetime.timedelta(minutes=10))
    try:
        with topics.writer(path, producer_id="p", partition_id=0, auto_created_at=False) as writer:
            writer.write_with_ack(_messages("old", 3, hour_ago))
            writer.write_with_ack(_messages("new", 3, _now()))
            reader = topics.reader(selector, consumer="c")
            try:
                assert _receive(reader, 3) == [b"new0", b"new1", b"new2"]
                # The session read past recent messages: a message created long ago that
                # comes after them is read (the first message in the window lies before it).
                writer.write_with_ack(_messages("late", 1, hour_ago))
                writer.write_with_ack(_messages("more", 2, _now()))
                assert _receive(reader, 3) == [b"late0", b"more0", b"more1"]
            finally:
                reader.close(timeout=10)
    finally:
        topics.drop_topic(path)


@pytest.mark.slow  # waits for the lag window to pass
def test_once_the_window_moves_past_what_was_read_old_messages_are_skipped_again(
    driver: ydb.Driver,
) -> None:
    topics = driver.topic_client
    path = f"{DATABASE}/max-lag-moves"
    topics.create_topic(path, consumers=["c"])
    lag = datetime.timedelta(seconds=3)
    selector = ydb.TopicReaderSelector(path=path, max_lag=lag)
    try:
        with topics.writer(path, producer_id="p", partition_id=0, auto_created_at=False) as writer:
            reader = topics.reader(selector, consumer="c")
            try:
                # Created a little ahead, so that they are in the window however long the
                # session takes to start.
                written = _now() + datetime.timedelta(seconds=2)
                writer.write_with_ack(_messages("first", 2, written))
                assert _receive(reader, 2) == [b"first0", b"first1"]
                # Everything the session read is now older than max_lag.
                wait_until(lambda: _now() > written + lag, "the window passing", every=0.05)
                writer.write_with_ack(_messages("stale", 2, _now() - datetime.timedelta(hours=1)))
                writer.write_with_ack(_messages("fresh", 1, _now() + datetime.timedelta(hours=1)))
                assert _receive(reader, 1) == [b"fresh0"]
            finally:
                reader.close(timeout=10)
    finally:
        topics.drop_topic(path)
