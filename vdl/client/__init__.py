"""A Trio-native client for VDL over the YDB topic protocol (gRPC).

::

    async with vdl.client.connect("grpc://127.0.0.1:2135") as client:
        await client.admin.create_topic("orders", consumers=["billing"])
        async with client.writer("orders") as writer:
            await writer.write(b"hello")
            await writer.flush()
        async with client.reader("orders", "billing") as reader:
            batch = await reader.receive_batch()
            await reader.commit(batch)
"""

from vdl.client.admin import (
    Admin,
    ConsumerInfo,
    ConsumerPartition,
    NodeInfo,
    PartitionInfo,
    TopicInfo,
)
from vdl.client.client import Client, connect
from vdl.client.connection import ClientConfig, Connection, Endpoint
from vdl.client.errors import (
    BufferFullError,
    ClientError,
    ClosedError,
    CloseTimeoutError,
    CommitError,
    ConnectError,
    ProtocolError,
    YdbStatusError,
)
from vdl.client.messages import Message, ReadMessage, WriteResult
from vdl.client.reader import Batch, Reader, ReaderSettings
from vdl.client.writer import Writer, WriterSettings

__all__ = [
    "Admin",
    "Batch",
    "BufferFullError",
    "Client",
    "ClientConfig",
    "ClientError",
    "CloseTimeoutError",
    "ClosedError",
    "CommitError",
    "ConnectError",
    "Connection",
    "ConsumerInfo",
    "ConsumerPartition",
    "Endpoint",
    "Message",
    "NodeInfo",
    "PartitionInfo",
    "ProtocolError",
    "ReadMessage",
    "Reader",
    "ReaderSettings",
    "TopicInfo",
    "WriteResult",
    "Writer",
    "WriterSettings",
    "YdbStatusError",
    "connect",
]
