"""``Vdl.Security.V1.AclService``: add, remove and list ACL entries (what ``vdl acl`` calls).

Not a YDB service, but carried the same way so the CLI reuses its connection and login:
the request is a ``google.protobuf.Struct`` and the answer the usual ``{operation = 1}``
envelope with a Struct result. Changing ACLs needs ALTER on the cluster (or a superuser),
listing them DESCRIBE on the cluster, as Kafka requires for CreateAcls/DescribeAcls.

On a cluster a change is a metadata-group command (``vdl.cluster.acl_commands``) applied
by every node, and is answered once this node has applied it too.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict

from vdl.net.grpc import GrpcServer, ServerContext
from vdl.net.ydb.auth import Authenticator, ticket
from vdl.net.ydb.cluster import YdbCluster
from vdl.net.ydb.operation import StatusIds, YdbError, add_unary
from vdl.net.ydb.protos import ydb_topic_pb2
from vdl.security.acl import CLUSTER_NAME, AclEntry, AclError, Operation, ResourceType
from vdl.security.acl_store import AclStore

log = logging.getLogger(__name__)

SERVICE = "/Vdl.Security.V1.AclService/"
# Every YDB response is the wire form of {Operation operation = 1}; any such type will do.
ENVELOPE = ydb_topic_pb2.DropTopicResponse


class AclAdmin:
    def __init__(
        self, auth: Authenticator, store: AclStore | None, cluster: YdbCluster | None = None
    ) -> None:
        self._auth = auth
        self._store = store
        self._cluster = cluster

    def _check(self, context: ServerContext, operation: Operation) -> str:
        if self._store is None:
            raise YdbError(
                StatusIds.PRECONDITION_FAILED, "authorization is off (the node has no users file)"
            )
        who = self._auth.identify(ticket(context))
        self._auth.require(who, operation, ResourceType.CLUSTER, CLUSTER_NAME)
        return who.principal if who is not None else "anonymous"

    @staticmethod
    def _entry(request: Any) -> AclEntry:
        raw = MessageToDict(request).get("entry")
        if not isinstance(raw, dict):
            raise YdbError(StatusIds.BAD_REQUEST, "request needs an 'entry' object")
        try:
            return AclEntry.from_json(json.dumps(raw))
        except AclError as exc:
            raise YdbError(StatusIds.BAD_REQUEST, str(exc)) from None

    async def add(self, request: Any, context: ServerContext) -> Any:
        who = self._check(context, Operation.ALTER)
        entry = self._entry(request)
        assert self._store is not None
        if self._cluster is not None:
            added = entry not in self._store.entries()
            await self._cluster.change_acl("acl_add", entry)
        else:
            added = self._store.add(entry)
        log.info("ACL added by %s: %s", who, entry.describe())
        return _result({"changed": added})

    async def remove(self, request: Any, context: ServerContext) -> Any:
        who = self._check(context, Operation.ALTER)
        entry = self._entry(request)
        assert self._store is not None
        if self._cluster is not None:
            removed = entry in self._store.entries()
            await self._cluster.change_acl("acl_remove", entry)
        else:
            removed = self._store.remove(entry)
        log.info("ACL removed by %s: %s", who, entry.describe())
        return _result({"changed": removed})

    async def list(self, request: Any, context: ServerContext) -> Any:
        self._check(context, Operation.DESCRIBE)
        assert self._store is not None

        entries = [json.loads(e.to_json()) for e in self._store.entries()]
        return _result({"entries": entries})


def register(
    server: GrpcServer,
    auth: Authenticator,
    store: AclStore | None,
    cluster: YdbCluster | None = None,
) -> None:
    admin = AclAdmin(auth, store, cluster)
    authorize = auth.authorize if auth.enabled else None
    for method, handler in (
        ("AddAcl", admin.add),
        ("RemoveAcl", admin.remove),
        ("ListAcls", admin.list),
    ):
        add_unary(server, SERVICE + method, struct_pb2.Struct, ENVELOPE, handler, authorize)


def _result(value: dict[str, Any]) -> Any:
    result = struct_pb2.Struct()
    result.update(value)
    return result
