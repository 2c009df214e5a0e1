"""The client reader against a real node: start positions, commits, and close() waiting for
commit acks that a paused node (SIGSTOP) holds back."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

import trio

import vdl.client
from tests.integration.node_process import NodeProcess
from vdl.client import ReaderSettings, WriterSettings


@contextlib.contextmanager
def paused(node: NodeProcess) -> Iterator[None]:
    assert node.process is not None
    node.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        node.process.send_signal(signal.SIGCONT)


async def fill(client: vdl.client.Client, topic: str, count: int, partitions: int = 1) -> None:
    await client.admin.create_topic(topic, partitions=partitions, consumers=["c", "other"])
    async with client.writer(topic, WriterSettings(producer_id="p")) as writer:
        await writer.write([b"m%d" % i for i in range(count)])


async def test_close_waits_for_the_acks_of_commits_made_before_it(node: NodeProcess) -> None:
    async with vdl.client.connect(f"grpc://{node.grpc_address}") as client:
        await fill(client, "commits", 20)
        async with trio.open_nursery() as nursery:
            reader = await client.start_reader(nursery, "commits", ReaderSettings("c"))
            seen = 0
            last = None
            while seen < 20:
                last = await reader.receive_batch(timeout=10)
                seen += len(last.messages)
            assert last is not None
            closed = trio.Event()
            with paused(node):
                await reader.commit(last)  # sent; the ack cannot come while paused

                async def close() -> None:
                    await reader.close(timeout=30)
                    closed.set()

                nursery.start_soon(close)
                await trio.sleep(0.5)
                assert not closed.is_set()
            with trio.fail_after(20):
                await closed.wait()
        consumer = await client.admin.describe_consumer("commits", "c")
        assert [p.committed_offset for p in consumer.partitions] == [20]
        assert consumer.lag == 0


async def test_start_positions_and_resume_from_the_committed_offset(node: NodeProcess) -> None:
    async with vdl.client.connect(f"grpc://{node.grpc_address}") as client:
        await fill(client, "positions", 10)
        async with client.reader("positions", "c", start_from=6) as reader:
            batch = await reader.receive_batch(timeout=10)
            assert [m.offset for m in batch.messages] == [6, 7, 8, 9]
            assert batch.messages[0].data == b"m6"
            assert batch.messages[0].producer_id == "p"
            await reader.commit_with_ack(batch, timeout=10)
        async with client.reader("positions", "c", start_from="latest") as reader:
            with contextlib.suppress(TimeoutError):
                extra = await reader.receive_batch(timeout=0.5)
                raise AssertionError(f"unexpected {extra.messages}")
        # "other" never committed: it starts at the beginning; head() commits a prefix.
        async with client.reader("positions", "other") as reader:
            batch = await reader.receive_batch(timeout=10)
            assert batch.messages[0].offset == 0
            await reader.commit_with_ack(batch.head(3), timeout=10)
        async with client.reader("positions", "other") as reader:
            batch = await reader.receive_batch(timeout=10)
            assert batch.messages[0].offset == 3
        consumer = await client.admin.describe_consumer("positions", "c")
        assert consumer.partitions[0].committed_offset == 10


async def test_two_partitions_are_both_read(node: NodeProcess) -> None:
    async with vdl.client.connect(f"grpc://{node.grpc_address}") as client:
        await client.admin.create_topic("parts", partitions=2, consumers=["c"])
        for producer in ("a", "b", "c", "d"):
            async with client.writer("parts", WriterSettings(producer_id=producer)) as writer:
                await writer.write([producer.encode()] * 5)
        got: dict[int, int] = {}
        async with client.reader("parts", "c") as reader:
            while sum(got.values()) < 20:
                batch = await reader.receive_batch(timeout=10)
                got[batch.partition] = got.get(batch.partition, 0) + len(batch.messages)
                await reader.commit(batch)
        info = await client.admin.describe_topic("parts")
        assert got == {p.partition: p.end_offset for p in info.partitions if p.end_offset}
