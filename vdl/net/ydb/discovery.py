"""``Ydb.Discovery.V1``: ListEndpoints (where to send data calls) and WhoAmI.

A one-node cluster lists itself; a cluster lists every registered node it believes alive
(always including this one: the SDK closes connections to endpoints no longer listed). The
``ssl`` flag must match how the listener serves, or clients discard the endpoint and
discovery fails; nodes of a cluster are expected to be configured alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vdl.net.grpc import ServerContext
from vdl.net.ydb.auth import Authenticator
from vdl.net.ydb.cluster import YdbCluster
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
    def __init__(
        self,
        database: str,
        endpoint: Endpoint,
        auth: Authenticator,
        cluster: YdbCluster | None = None,
    ) -> None:
        self._database = database
        self._endpoint = endpoint
        self._auth = auth
        self._cluster = cluster

    def endpoints(self) -> list[Endpoint]:
        me = self._endpoint
        listed = [me]
        if self._cluster is not None:
            listed += [
                Endpoint(n.host, n.port, me.ssl, n.node_id)
                for n in self._cluster.grpc_nodes()
                if n.node_id != me.node_id
            ]
        return listed

    async def list_endpoints(self, request: Any, context: ServerContext) -> Any:
        if request.database and request.database.rstrip("/") != self._database.rstrip("/"):
            raise YdbError(StatusIds.SCHEME_ERROR, f"unknown database {request.database!r}")
        infos = [
            ydb_discovery_pb2.EndpointInfo(
                address=endpoint.host,
                port=endpoint.port,
                ssl=endpoint.ssl,
                location=LOCATION,
                node_id=endpoint.node_id,
                load_factor=0.0,
            )
            for endpoint in self.endpoints()
        ]
        return ydb_discovery_pb2.ListEndpointsResult(endpoints=infos, self_location=LOCATION)

    async def who_am_i(self, request: Any, context: ServerContext) -> Any:
        user = self._auth.authorize(context) if self._auth.enabled else "anonymous"
        return ydb_discovery_pb2.WhoAmIResult(user=user)
