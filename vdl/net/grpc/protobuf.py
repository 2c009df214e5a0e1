"""Small helpers to write handlers and calls with protobuf messages over the bytes API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from google.protobuf.message import DecodeError, Message

from .server import ServerContext, ServerStream, StreamHandler, UnaryHandler
from .status import GrpcError, StatusCode

RequestT = TypeVar("RequestT", bound=Message)
ResponseT = TypeVar("ResponseT", bound=Message)


def decode(message_type: type[RequestT], data: bytes) -> RequestT:
    """Parse ``data``; a malformed message becomes INTERNAL, as grpcio reports it."""
    message: RequestT = message_type()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise GrpcError(
            StatusCode.INTERNAL, f"cannot decode {message_type.__name__}: {exc}"
        ) from None
    return message


def encode(message: Message) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def unary_handler(
    request_type: type[RequestT],
    handler: Callable[[RequestT, ServerContext], Awaitable[Message]],
) -> UnaryHandler:
    """Adapt ``async def handler(request: RequestT, context) -> Message`` to bytes."""

    async def wrapped(request: bytes, context: ServerContext) -> bytes:
        return encode(await handler(decode(request_type, request), context))

    return wrapped


class MessageStream(Generic[RequestT]):
    """A :class:`ServerStream` that speaks protobuf messages."""

    def __init__(self, stream: ServerStream, request_type: type[RequestT]) -> None:
        self._stream = stream
        self._request_type = request_type

    async def receive(self) -> RequestT | None:
        data = await self._stream.receive()
        return None if data is None else decode(self._request_type, data)

    async def send(self, message: Message) -> None:
        await self._stream.send(encode(message))

    def __aiter__(self) -> AsyncIterator[RequestT]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[RequestT]:
        while (message := await self.receive()) is not None:
            yield message


def stream_handler(
    request_type: type[RequestT],
    handler: Callable[[MessageStream[RequestT], ServerContext], Awaitable[None]],
) -> StreamHandler:
    """Adapt ``async def handler(stream: MessageStream[RequestT], context)`` to bytes."""

    async def wrapped(stream: ServerStream, context: ServerContext) -> None:
        await handler(MessageStream(stream, request_type), context)

    return wrapped
