"""Handlers and a server shared by the in-memory gRPC tests."""

from __future__ import annotations

import trio

from vdl.net.grpc import GrpcServer, ServerContext, ServerStream


async def echo(request: bytes, context: ServerContext) -> bytes:
    return request


async def echo_stream(stream: ServerStream, context: ServerContext) -> None:
    async for message in stream:
        await stream.send(message)


async def sleepy(request: bytes, context: ServerContext) -> bytes:
    await trio.sleep(3600)
    return request


def make_server() -> GrpcServer:
    server = GrpcServer()
    server.add_unary("/test.Echo/Unary", echo)
    server.add_stream("/test.Echo/Stream", echo_stream)
    server.add_unary("/test.Echo/Sleep", sleepy)
    return server
