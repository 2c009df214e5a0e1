"""``Vdl.Security.V1.UserService``: add, change, remove and list users (what
``vdl user ... --endpoint`` calls), carried like ``AclService`` (a ``Struct`` request and
the ``{operation = 1}`` envelope).

The client derives the pbkdf2 hash and the SCRAM salted keys itself and sends only those
(``{"user": "<users-file line>"}``), so no password crosses the wire or reaches a log;
a line without a hash is refused. Changes need ALTER on the cluster (or a superuser),
listing DESCRIBE on the cluster, as for ACLs.

On a cluster a change is a metadata-group command (``vdl.cluster.user_commands``) applied
into every node's user table, and is answered once this node has applied it too; on one
node it goes into the table directly.
"""

from __future__ import annotations

import logging
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict

from vdl.net.grpc import GrpcServer, ServerContext
from vdl.net.ydb.acl_admin import ENVELOPE
from vdl.net.ydb.auth import Authenticator, ticket
from vdl.net.ydb.cluster import YdbCluster
from vdl.net.ydb.operation import StatusIds, YdbError, add_unary
from vdl.security.acl import CLUSTER_NAME, Operation, ResourceType
from vdl.security.user_table import UserTable, decode_user
from vdl.security.users import User, UsersFileError, UserStore, check_user_name

log = logging.getLogger(__name__)

SERVICE = "/Vdl.Security.V1.UserService/"


class UserAdmin:
    def __init__(self, auth: Authenticator, cluster: YdbCluster | None = None) -> None:
        self._auth = auth
        self._cluster = cluster

    def _check(self, context: ServerContext, operation: Operation) -> tuple[str, UserStore]:
        store = self._auth.users
        if store is None or store.table is None:
            raise YdbError(
                StatusIds.PRECONDITION_FAILED, "authentication is off (the node has no users file)"
            )
        who = self._auth.identify(ticket(context))
        self._auth.require(who, operation, ResourceType.CLUSTER, CLUSTER_NAME)
        return (who.principal if who is not None else "anonymous"), store

    @staticmethod
    def _user(request: Any) -> User:
        raw = MessageToDict(request).get("user")
        if not isinstance(raw, str):
            raise YdbError(StatusIds.BAD_REQUEST, "request needs a 'user' line")
        try:
            user = decode_user(raw)
            check_user_name(user.name)
        except UsersFileError as exc:
            raise YdbError(StatusIds.BAD_REQUEST, str(exc)) from None
        return user

    async def _put(self, table: UserTable, user: User) -> None:
        if self._cluster is not None:
            await self._cluster.put_user(user)
        else:
            table.put(user)

    async def add(self, request: Any, context: ServerContext) -> Any:
        who, store = self._check(context, Operation.ALTER)
        user = self._user(request)
        if store.get(user.name) is not None:
            raise YdbError(StatusIds.ALREADY_EXISTS, f"user {user.name!r} already exists")
        assert store.table is not None
        await self._put(store.table, user)
        log.info("user %s added by %s", user.name, who)
        return _result({"name": user.name})

    async def passwd(self, request: Any, context: ServerContext) -> Any:
        who, store = self._check(context, Operation.ALTER)
        user = self._user(request)
        if store.get(user.name) is None:
            raise YdbError(StatusIds.NOT_FOUND, f"no user {user.name!r}")
        assert store.table is not None
        await self._put(store.table, user)
        log.info("password of user %s changed by %s", user.name, who)
        return _result({"name": user.name})

    async def remove(self, request: Any, context: ServerContext) -> Any:
        who, store = self._check(context, Operation.ALTER)
        name = MessageToDict(request).get("name")
        if not isinstance(name, str) or store.get(name) is None:
            raise YdbError(StatusIds.NOT_FOUND, f"no user {name!r}")
        assert store.table is not None
        if self._cluster is not None:
            await self._cluster.remove_user(name)
        else:
            store.table.remove(name)
        log.info("user %s removed by %s", name, who)
        return _result({"name": name})

    async def list(self, request: Any, context: ServerContext) -> Any:
        _, store = self._check(context, Operation.DESCRIBE)
        return _result({"names": store.names()})


def register(server: GrpcServer, auth: Authenticator, cluster: YdbCluster | None = None) -> None:
    admin = UserAdmin(auth, cluster)
    authorize = auth.authorize if auth.enabled else None
    for method, handler in (
        ("AddUser", admin.add),
        ("ChangePassword", admin.passwd),
        ("RemoveUser", admin.remove),
        ("ListUsers", admin.list),
    ):
        add_unary(server, SERVICE + method, struct_pb2.Struct, ENVELOPE, handler, authorize)


def _result(value: dict[str, Any]) -> Any:
    result = struct_pb2.Struct()
    result.update(value)
    return result
