"""``Ydb.Scheme.V1/ListDirectory``: the topics of the database.

VDL topics are flat, so the database is the only directory: listing it returns one TOPIC
entry per topic (sorted by name); any other path is a SCHEME_ERROR. This is what
``vdl topic list`` and the SDK's ``scheme_client.list_directory`` call.
"""

from __future__ import annotations

from typing import Any

from vdl.broker.broker import Broker
from vdl.net.grpc import ServerContext
from vdl.net.ydb.operation import StatusIds, YdbError
from vdl.net.ydb.protos import ydb_scheme_pb2


class SchemeService:
    def __init__(self, broker: Broker, database: str) -> None:
        self._broker = broker
        self._database = database.rstrip("/") or "/"

    async def list_directory(self, request: Any, context: ServerContext) -> Any:
        path = request.path.rstrip("/") or "/"
        if path != self._database:
            raise YdbError(
                StatusIds.SCHEME_ERROR,
                f"path {request.path!r} is not a directory; topics live directly in "
                f"{self._database!r}",
            )
        result = ydb_scheme_pb2.ListDirectoryResult(
            self=ydb_scheme_pb2.Entry(
                name=self._database.rsplit("/", 1)[-1], type=ydb_scheme_pb2.Entry.DATABASE
            )
        )
        for topic in sorted(self._broker.catalog.all(), key=lambda t: t.name):
            result.children.add(name=topic.name, type=ydb_scheme_pb2.Entry.TOPIC)
        return result
