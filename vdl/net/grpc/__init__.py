"""gRPC over HTTP/2 on ``h2`` and Trio: one sans-I/O core (``connection.py``) under a
server (``server.py``) and a client (``client.py``)."""

from .client import ClientStream, GrpcChannel
from .connection import GrpcConnection, GrpcSettings
from .framing import DEFAULT_MAX_MESSAGE_SIZE, MessageDecoder
from .memory import open_memory_channel
from .metadata import Metadata
from .server import GrpcServer, ServerContext, ServerStream
from .status import GrpcError, StatusCode
from .tls import client_ssl_context, server_ssl_context

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "ClientStream",
    "GrpcChannel",
    "GrpcConnection",
    "GrpcError",
    "GrpcServer",
    "GrpcSettings",
    "MessageDecoder",
    "Metadata",
    "ServerContext",
    "ServerStream",
    "StatusCode",
    "client_ssl_context",
    "open_memory_channel",
    "server_ssl_context",
]
