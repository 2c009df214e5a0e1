"""``Ydb.Discovery.V1``: ListEndpoints (where to send data calls) and WhoAmI.

A one-node cluster lists itself. The ``ssl`` flag must match how the listener serves, or
clients discard the endpoint and discovery fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vdl.net.grpc import ServerContext
from vdl.net.ydb.auth import Authenticator
from vdl.net.ydb.operation import StatusIds, YdbError
from vdl.net.ydb.protos import ydb_discovery_pb2

LOCATION = "vdl"


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    ssl: bool
    node_id: int


class DiscoveryService:
    def __init__(self, database: str, endpoint: Endpoint, auth: Authenticator) -> None:
        self._database = database
        self._endpoint = endpoint
        self._auth = auth

    async def list_endpoints(self, request: Any, context: ServerContext) -> Any:
        if request.database and request.database.rstrip("/") != self._database.rstrip("/"):
            raise YdbError(StatusIds.SCHEME_ERROR, f"unknown database {request.database!r}")
        endpoint = self._endpoint
        info = ydb_discovery_pb2.EndpointInfo(
            address=endpoint.host,
            port=endpoint.port,
            ssl=endpoint.ssl,
            location=LOCATION,
            node_id=endpoint.node_id,
            load_factor=0.0,
        )
        return ydb_discovery_pb2.ListEndpointsResult(endpoints=[info], self_location=LOCATION)

    async def who_am_i(self, request: Any, context: ServerContext) -> Any:
        user = self._auth.authorize(context) if self._auth.enabled else "anonymous"
        return ydb_discovery_pb2.WhoAmIResult(user=user)
