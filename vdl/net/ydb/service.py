"""The YDB front end: every YDB service of a node, registered on one :class:`GrpcServer`.

Method paths come from the service descriptors of our own ``*_v1.proto`` files, so a typo
cannot silently make a method UNIMPLEMENTED (which the SDK retries forever).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
from google.protobuf.message import Message

from vdl.backends.api import MetaStore
from vdl.broker.broker import Broker
from vdl.groups.offsets import OffsetStore
from vdl.net.grpc import GrpcServer, ServerContext, ServerStream
from vdl.net.ydb import acl_admin, user_admin
from vdl.net.ydb.access import filter_listing, guarded
from vdl.net.ydb.auth import TOKEN_LIFETIME_MS, Authenticator, TokenSigner, UsersArg
from vdl.net.ydb.cluster import YdbCluster
from vdl.net.ydb.discovery import DiscoveryService, Endpoint
from vdl.net.ydb.offsets import ConsumerOffsets
from vdl.net.ydb.operation import add_unary
from vdl.net.ydb.protos import (
    ydb_auth_pb2,
    ydb_auth_v1_pb2,
    ydb_discovery_pb2,
    ydb_discovery_v1_pb2,
    ydb_scheme_pb2,
    ydb_scheme_v1_pb2,
    ydb_topic_pb2,
    ydb_topic_v1_pb2,
)
from vdl.net.ydb.scheme import SchemeService
from vdl.net.ydb.topic_admin import TopicAdmin
from vdl.net.ydb.topic_read import ReadService
from vdl.net.ydb.topic_write import WriteSession
from vdl.security.service import Security


def method_path(module: Any, service: str, method: str) -> str:
    descriptor = module.DESCRIPTOR.services_by_name[service]
    if method not in descriptor.methods_by_name:
        raise KeyError(f"{descriptor.full_name} has no method {method}")
    return f"/{descriptor.full_name}/{method}"


class YdbFrontEnd:
    def __init__(
        self,
        broker: Broker,
        offset_store: OffsetStore,
        meta: MetaStore,
        *,
        database: str,
        node_id: int,
        users: UsersArg,
        clock_ms: Callable[[], int],
        security: Security | None = None,
        token_lifetime_ms: int = TOKEN_LIFETIME_MS,
        cluster: YdbCluster | None = None,
    ) -> None:
        self.database = database
        self.node_id = node_id
        # Set when the node stops: stream sessions drain and ask their clients to reconnect.
        self.stopping = trio.Event()
        self.auth = Authenticator(
            users,
            TokenSigner.from_meta(meta),
            clock_ms,
            security=security,
            token_lifetime_ms=token_lifetime_ms,
        )
        self._cluster = cluster
        self.offsets = ConsumerOffsets(offset_store, clock_ms, cluster)
        self._broker = broker
        self._clock_ms = clock_ms
        self.admin = TopicAdmin(
            broker,
            self.offsets,
            database,
            node_id,
            lambda name: self.read.topic_changed(name),
            cluster,
        )
        self.scheme = SchemeService(broker, database)
        self.read = ReadService(broker, self.admin, self.auth, self.offsets, self.stopping)
        self.discovery = DiscoveryService(
            database, Endpoint("127.0.0.1", 0, False, node_id), self.auth, cluster
        )

    def set_endpoint(self, host: str, port: int, ssl: bool) -> None:
        """What ListEndpoints returns: known once the listener is bound."""
        self.discovery = DiscoveryService(
            self.database, Endpoint(host, port, ssl, self.node_id), self.auth, self._cluster
        )

    def stop_streams(self) -> None:
        self.stopping.set()

    def register(self, server: GrpcServer) -> None:
        authorize = self.auth.authorize if self.auth.enabled else None
        topic = ydb_topic_pb2

        def add(
            module: Any,
            service: str,
            method: str,
            request: type[Message],
            response: type[Message],
            handler: Any,
            *,
            auth: bool = True,
        ) -> None:
            add_unary(
                server,
                method_path(module, service, method),
                request,
                response,
                handler,
                authorize if auth else None,
            )

        add(
            ydb_auth_v1_pb2,
            "AuthService",
            "Login",
            ydb_auth_pb2.LoginRequest,
            ydb_auth_pb2.LoginResponse,
            self.auth.handle_login,
            auth=False,
        )
        add(
            ydb_discovery_v1_pb2,
            "DiscoveryService",
            "ListEndpoints",
            ydb_discovery_pb2.ListEndpointsRequest,
            ydb_discovery_pb2.ListEndpointsResponse,
            lambda r, c: self.discovery.list_endpoints(r, c),
        )
        add(
            ydb_discovery_v1_pb2,
            "DiscoveryService",
            "WhoAmI",
            ydb_discovery_pb2.WhoAmIRequest,
            ydb_discovery_pb2.WhoAmIResponse,
            lambda r, c: self.discovery.who_am_i(r, c),
        )
        add(
            ydb_scheme_v1_pb2,
            "SchemeService",
            "ListDirectory",
            ydb_scheme_pb2.ListDirectoryRequest,
            ydb_scheme_pb2.ListDirectoryResponse,
            filter_listing(self.scheme.list_directory, self.auth),
        )
        admin = self.admin
        for method, request, response, handler in (
            (
                "CreateTopic",
                topic.CreateTopicRequest,
                topic.CreateTopicResponse,
                admin.create_topic,
            ),
            (
                "DescribeTopic",
                topic.DescribeTopicRequest,
                topic.DescribeTopicResponse,
                admin.describe_topic,
            ),
            (
                "DescribePartition",
                topic.DescribePartitionRequest,
                topic.DescribePartitionResponse,
                admin.describe_partition,
            ),
            (
                "DescribeConsumer",
                topic.DescribeConsumerRequest,
                topic.DescribeConsumerResponse,
                admin.describe_consumer,
            ),
            ("AlterTopic", topic.AlterTopicRequest, topic.AlterTopicResponse, admin.alter_topic),
            ("DropTopic", topic.DropTopicRequest, topic.DropTopicResponse, admin.drop_topic),
            (
                "CommitOffset",
                topic.CommitOffsetRequest,
                topic.CommitOffsetResponse,
                admin.commit_offset,
            ),
            (
                "UpdateOffsetsInTransaction",
                topic.UpdateOffsetsInTransactionRequest,
                topic.UpdateOffsetsInTransactionResponse,
                admin.update_offsets_in_transaction,
            ),
        ):
            checked = guarded(method, handler, self.auth, self.database)
            add(ydb_topic_v1_pb2, "TopicService", method, request, response, checked)
        acl_admin.register(server, self.auth, self.auth.security.acls, self._cluster)
        user_admin.register(server, self.auth, self._cluster)
        server.add_stream(
            method_path(ydb_topic_v1_pb2, "TopicService", "StreamWrite"), self._stream_write
        )
        server.add_stream(
            method_path(ydb_topic_v1_pb2, "TopicService", "StreamRead"), self.read.handle
        )

    async def _stream_write(self, stream: ServerStream, context: ServerContext) -> None:
        session = WriteSession(
            self._broker,
            self.admin,
            self.auth,
            self._clock_ms,
            self.stopping,
            stream,
            context,
            self._cluster,
        )
        await session.run()
