"""``vdl.client.aio`` from a plain asyncio program (``asyncio.run``) against a real node:
admin, a writer and a reader through trio-asyncio, next to ordinary asyncio tasks.

The program runs in a process of its own: importing trio-asyncio installs its event loop
policy for the whole process, which this test suite's other asyncio clients must not get."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.node_process import NodeProcess

PROGRAM = textwrap.dedent(
    """
    import asyncio
    import json
    import sys

    import vdl.client.aio as vdl_aio
    from vdl.client import WriterSettings

    COUNT = 300


    async def ticker(ticks: list[int], done: asyncio.Event) -> None:
        while not done.is_set():
            ticks.append(1)
            await asyncio.sleep(0.001)


    async def main(endpoint: str) -> dict[str, object]:
        loop = type(asyncio.get_running_loop()).__name__
        ticks: list[int] = []
        done = asyncio.Event()
        tick_task = asyncio.create_task(ticker(ticks, done))
        async with vdl_aio.connect(endpoint) as client:
            await client.admin.create_topic("aio", partitions=2, consumers=["app"])
            settings = WriterSettings(producer_id="aio-producer")
            async with client.writer("aio", settings) as writer:
                await writer.write([f"m{i}".encode() for i in range(COUNT - 1)])
                results = await writer.write_with_ack(b"last")
                await writer.flush(timeout=30)
            received: list[str] = []
            async with client.reader("aio", "app") as reader:
                while len(received) < COUNT:
                    batch = await reader.receive_batch(timeout=30)
                    received.extend(m.data.decode() for m in batch.messages)
                    await reader.commit_with_ack(batch, timeout=30)
            described = await client.admin.describe_consumer("aio", "app")
        done.set()
        await tick_task
        return {
            "loop": loop,
            "received": received,
            "last_seq_no": results[0].seq_no,
            "committed": sum(p.committed_offset for p in described.partitions),
            "ticks": len(ticks),
        }


    print(json.dumps(asyncio.run(main(sys.argv[1]))))
    """
)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("aio") / "data") as process:
        yield process


def test_asyncio_program_writes_and_reads(node: NodeProcess, tmp_path: Path) -> None:
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    done = subprocess.run(
        [sys.executable, str(script), f"grpc://{node.grpc_address}"],
        capture_output=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr.decode()
    result = json.loads(done.stdout)
    assert result["loop"] == "SyncTrioEventLoop"
    expected = [f"m{i}" for i in range(299)] + ["last"]
    assert result["received"] == expected
    assert result["last_seq_no"] == 300
    assert result["committed"] == 300
    # The asyncio task kept running while the client worked.
    assert result["ticks"] > 1
