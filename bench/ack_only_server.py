"""The baseline servers of `grpc_write.py`: StreamWrite that decodes and acks, nothing more.

    .venv/bin/python bench/ack_only_server.py --impl grpcio|vdl --port N [--tls-cert F --tls-key F]

A separate process, like the node, so each server's CPU time can be read from /proc on its
own. Both implementations run the same :func:`ack_reply`: parse every
``StreamWriteMessage.FromClient`` with the generated classes the node uses, answer each write
request with one ``write_response`` holding an ack per message (``written`` with a running
offset); nothing is stored.

* ``grpcio``: grpcio's synchronous server, the faster of grpcio's two servers on this
  machine kind (see the h2/gRPC performance notes).
* ``vdl``: our :class:`GrpcServer` on Trio with the same handler, which isolates our gRPC
  layer from the node's log work.

It prints ``ready`` once it listens and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from types import FrameType
from typing import Any

import grpc
import trio

from vdl.net.grpc import GrpcServer, ServerContext, ServerStream, server_ssl_context
from vdl.net.ydb.protos import ydb_status_codes_pb2, ydb_topic_pb2

FromClient = ydb_topic_pb2.StreamWriteMessage.FromClient
FromServer = ydb_topic_pb2.StreamWriteMessage.FromServer
STREAM_WRITE = "/Ydb.Topic.V1.TopicService/StreamWrite"
SUCCESS = ydb_status_codes_pb2.StatusIds.SUCCESS
MAX_MESSAGE = 64_000_000
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
]


def ack_reply(request: Any, offset: int) -> tuple[Any, int]:
    """The answer to one client message, and the next offset."""
    kind = request.WhichOneof("client_message")
    reply = FromServer(status=SUCCESS)
    if kind == "init_request":
        init = reply.init_response
        init.session_id = "ack-only-bench"
        init.supported_codecs.codecs.append(1)
    elif kind == "write_request":
        acks = reply.write_response.acks
        for message in request.write_request.messages:
            acks.add(seq_no=message.seq_no).written.offset = offset
            offset += 1
    else:
        reply.update_token_response.SetInParent()
    return reply, offset


def grpcio_stream_write(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
    offset = 0
    for request in requests:
        reply, offset = ack_reply(request, offset)
        yield reply


async def vdl_stream_write(stream: ServerStream, context: ServerContext) -> None:
    offset = 0
    async for raw in stream:
        reply, offset = ack_reply(FromClient.FromString(raw), offset)
        await stream.send(reply.SerializeToString())


def serve_grpcio(args: argparse.Namespace) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.workers), options=GRPC_OPTIONS)
    handler = grpc.method_handlers_generic_handler(
        "Ydb.Topic.V1.TopicService",
        {
            "StreamWrite": grpc.stream_stream_rpc_method_handler(
                grpcio_stream_write,
                request_deserializer=FromClient.FromString,
                response_serializer=FromServer.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))
    address = f"127.0.0.1:{args.port}"
    if args.tls_cert is not None and args.tls_key is not None:
        credentials = grpc.ssl_server_credentials(
            [(args.tls_key.read_bytes(), args.tls_cert.read_bytes())]
        )
        server.add_secure_port(address, credentials)
    else:
        server.add_insecure_port(address)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    print("ready", flush=True)
    stop.wait()
    server.stop(grace=2).wait(10)


async def serve_vdl(args: argparse.Namespace) -> None:
    context = None
    if args.tls_cert is not None and args.tls_key is not None:
        context = server_ssl_context(args.tls_cert, args.tls_key)
    server = GrpcServer(ssl_context=context)
    server.add_stream(STREAM_WRITE, vdl_stream_write)
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            await nursery.start(server.serve, "127.0.0.1", args.port)
            print("ready", flush=True)
            async for _ in signals:
                break
        await server.shutdown(grace=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impl", choices=("grpcio", "vdl"), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert", type=Path)
    parser.add_argument("--tls-key", type=Path)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args(argv)
    if args.impl == "grpcio":
        serve_grpcio(args)
    else:
        trio.run(serve_vdl, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
