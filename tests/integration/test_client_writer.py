"""The client writer against real node processes: acks held by pausing the node (SIGSTOP),
a node restart in the middle of a write stream, and login."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import vdl.client
from tests.integration.node_process import NodeProcess
from vdl.client import ClosedError, ReaderSettings, WriterSettings, YdbStatusError


@contextlib.contextmanager
def paused(node: NodeProcess) -> Iterator[None]:
    """The node stops answering (its sockets stay open) until the block ends."""
    assert node.process is not None
    node.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        node.process.send_signal(signal.SIGCONT)


async def read_all(
    client: vdl.client.Client, topic: str, count: int
) -> list[vdl.client.ReadMessage]:
    messages: list[vdl.client.ReadMessage] = []
    async with client.reader(topic, "check") as reader:
        while len(messages) < count:
            batch = await reader.receive_batch(timeout=20)
            messages.extend(batch.messages)
            await reader.commit(batch)
    return messages


async def test_flush_and_close_wait_for_acks_held_by_a_paused_node(node: NodeProcess) -> None:
    async with vdl.client.connect(f"grpc://{node.grpc_address}") as client:
        await client.admin.create_topic("held", consumers=["check"])
        async with trio.open_nursery() as nursery:
            writer = await client.start_writer(nursery, "held", WriterSettings(producer_id="p"))
            await writer.write_with_ack(b"warm-up")  # the stream is open
            with paused(node):
                await writer.write([b"a", b"b"])  # buffered: returns while nothing is acked
                with pytest.raises(TimeoutError):
                    await writer.flush(timeout=1)
                closed = trio.Event()

                async def close() -> None:
                    await writer.close(timeout=30)
                    closed.set()

                nursery.start_soon(close)
                await trio.sleep(0.5)
                assert not closed.is_set()
                with pytest.raises(ClosedError):
                    await writer.write(b"c")
            with trio.fail_after(20):
                await closed.wait()
            with pytest.raises(ClosedError):
                await writer.flush()
            await writer.close()
        info = await client.admin.describe_topic("held")
        assert info.messages == 3


async def test_node_restart_mid_stream_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    total = 3_000
    node = NodeProcess(tmp_path / "data").start()
    try:
        async with vdl.client.connect(f"grpc://{node.grpc_address}") as client:
            await client.admin.create_topic("restart", consumers=["check"])
            settings = WriterSettings(producer_id="restart-producer", max_buffer_messages=200)
            async with client.writer("restart", settings) as writer:
                for i in range(total):
                    await writer.write(b"%d" % i)
                    if i == total // 3:
                        await writer.flush()
                        # Stops gracefully (in-band UNAVAILABLE, GOAWAY), then comes back.
                        await trio.to_thread.run_sync(node.stop)
                        await trio.to_thread.run_sync(node.start)
                await writer.flush(timeout=60)
                assert writer.sessions >= 2
            messages = await read_all(client, "restart", total)
    finally:
        node.stop()
    assert [m.seq_no for m in messages] == list(range(1, total + 1))
    assert [m.data for m in messages] == [b"%d" % i for i in range(total)]
    assert [m.offset for m in messages] == list(range(total))


async def test_writer_numbering_continues_for_the_same_producer(node: NodeProcess) -> None:
    async with vdl.client.connect(f"grpc://{node.grpc_address}") as client:
        await client.admin.create_topic("numbering", partitions=3, consumers=["check"])
        settings = WriterSettings(producer_id="p7")
        async with client.writer("numbering", settings) as writer:
            first = await writer.write_with_ack([b"1", b"2"])
        async with client.writer("numbering", settings) as writer:
            assert await writer.wait_init() == 2
            [third] = await writer.write_with_ack(b"3")
        assert [r.seq_no for r in first] == [1, 2]
        assert third.seq_no == 3
        assert {r.partition for r in [*first, third]} == {third.partition}
        assert third.offset == 2


async def test_login_failures_surface_and_good_credentials_work(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("alice:secret\n")
    with NodeProcess(tmp_path / "data", "--users", str(users), "--superusers", "alice") as node:
        endpoint = f"grpc://{node.grpc_address}"
        async with vdl.client.connect(endpoint, user="alice", password="wrong") as client:
            with pytest.raises(YdbStatusError, match="UNAUTHORIZED"):
                await client.admin.list_topics()
            with pytest.raises(YdbStatusError, match="UNAUTHORIZED"):
                async with client.writer("t") as writer:
                    await writer.write_with_ack(b"x")
        async with vdl.client.connect(endpoint) as client:  # anonymous
            with pytest.raises(YdbStatusError, match="UNAUTHORIZED"):
                await client.admin.list_topics()
        async with vdl.client.connect(endpoint, user="alice", password="secret") as client:
            await client.admin.create_topic("private", consumers=["c"])
            async with client.writer("private") as writer:
                [result] = await writer.write_with_ack(b"x")
            assert result.offset == 0
            async with trio.open_nursery() as nursery:
                reader = await client.start_reader(nursery, "private", ReaderSettings("c"))
                batch = await reader.receive_batch(timeout=10)
                await reader.commit_with_ack(batch, timeout=10)
                await reader.close()
            assert [m.data for m in batch.messages] == [b"x"]
