"""Our hand-written .proto files agree, field by field, with the descriptors the official SDK
ships: same names, numbers, types and labels, so both sides read each other's bytes."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pool
from ydb._grpc.v6.protos import (  # noqa: F401  (registers the SDK's descriptors)
    ydb_auth_pb2,
    ydb_discovery_pb2,
    ydb_operation_pb2,
    ydb_scheme_pb2,
    ydb_topic_pb2,
)

from vdl.net.ydb.protos import _pool
from vdl.net.ydb.protos import (
    ydb_auth_pb2 as our_auth,
)
from vdl.net.ydb.protos import (
    ydb_discovery_pb2 as our_discovery,
)
from vdl.net.ydb.protos import (
    ydb_operation_pb2 as our_operation,
)
from vdl.net.ydb.protos import (
    ydb_topic_pb2 as our_topic,
)


def _messages(descriptor: Any) -> list[Any]:
    found = [descriptor]
    for nested in descriptor.nested_types:
        if not nested.GetOptions().map_entry:
            found.extend(_messages(nested))
    return found


def _all_ours() -> list[Any]:
    result = []
    for module in (our_auth, our_discovery, our_operation, our_topic):
        for message in module.DESCRIPTOR.message_types_by_name.values():
            result.extend(_messages(message))
    return result


def _shape(field: Any) -> tuple[Any, ...]:
    target = field.message_type or field.enum_type
    return (field.number, field.type, field.is_repeated, target.full_name if target else "")


@pytest.mark.parametrize("ours", _all_ours(), ids=lambda d: d.full_name)
def test_message_matches_the_sdk(ours: Any) -> None:
    theirs = descriptor_pool.Default().FindMessageTypeByName(ours.full_name)
    their_fields = {f.name: _shape(f) for f in theirs.fields}
    for field in ours.fields:
        assert field.name in their_fields, f"{ours.full_name}.{field.name} unknown to the SDK"
        assert _shape(field) == their_fields[field.name], f"{ours.full_name}.{field.name}"


def test_enums_match_the_sdk() -> None:
    for name in (
        "Ydb.StatusIds.StatusCode",
        "Ydb.Topic.Codec",
        "Ydb.Topic.MeteringMode",
        "Ydb.Topic.AutoPartitioningStrategy",
    ):
        ours = {v.name: v.number for v in _pool.POOL.FindEnumTypeByName(name).values}
        theirs = {
            v.name: v.number for v in descriptor_pool.Default().FindEnumTypeByName(name).values
        }
        assert ours == theirs, name


def test_service_paths() -> None:
    from vdl.net.ydb.protos import ydb_topic_v1_pb2
    from vdl.net.ydb.service import method_path

    assert (
        method_path(ydb_topic_v1_pb2, "TopicService", "StreamWrite")
        == "/Ydb.Topic.V1.TopicService/StreamWrite"
    )
    with pytest.raises(KeyError):
        method_path(ydb_topic_v1_pb2, "TopicService", "StreamDirectRead")
