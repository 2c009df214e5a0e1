"""The Operation envelope as the official SDK decodes it, and the in-band error mapping."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from ydb._grpc.v6.protos import ydb_operation_pb2 as sdk_operation
from ydb._grpc.v6.protos import ydb_topic_pb2 as sdk_topic

from vdl.broker.topics import TopicError
from vdl.log.error_codes import ErrorCode
from vdl.log.stream import StreamError
from vdl.net.grpc import ServerContext
from vdl.net.ydb.operation import (
    StatusIds,
    YdbError,
    as_ydb_error,
    leaf_error,
    operation,
    unary,
)
from vdl.net.ydb.protos import ydb_status_codes_pb2, ydb_topic_pb2


def _context() -> ServerContext:
    return ServerContext("/m", (), "peer", "host", None)


def test_status_ids_match_the_proto() -> None:
    enum = ydb_status_codes_pb2.StatusIds.StatusCode
    assert {s.name: int(s) for s in StatusIds} == {name: enum.Value(name) for name in enum.keys()}


def test_result_is_packed_under_its_full_name() -> None:
    result = ydb_topic_pb2.DescribeTopicResult()
    result.partitions.add(partition_id=3, active=True)
    data = operation(result=result).SerializeToString()
    parsed = sdk_operation.Operation.FromString(data)
    assert parsed.status == 400000 and parsed.ready
    assert parsed.result.type_url == "type.googleapis.com/Ydb.Topic.DescribeTopicResult"
    unpacked = sdk_topic.DescribeTopicResult()
    assert parsed.result.Unpack(unpacked)
    assert unpacked.partitions[0].partition_id == 3


async def _call(handler: Any, request: bytes, authorize: Any = None) -> Any:
    wrapped = unary(
        ydb_topic_pb2.DescribeTopicRequest,
        ydb_topic_pb2.DescribeTopicResponse,
        handler,
        authorize,
    )
    return sdk_topic.DescribeTopicResponse.FromString(await wrapped(request, _context()))


async def test_errors_become_statuses_with_issues() -> None:
    async def missing(request: Any, context: ServerContext) -> Any:
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {request.path!r}")

    request = ydb_topic_pb2.DescribeTopicRequest(path="/local/x").SerializeToString()
    response = await _call(missing, request)
    assert response.operation.status == StatusIds.SCHEME_ERROR
    assert response.operation.issues[0].message == "no topic '/local/x'"

    def deny(context: ServerContext) -> str:
        raise YdbError(StatusIds.UNAUTHORIZED, "who are you")

    response = await _call(missing, request, deny)
    assert response.operation.status == StatusIds.UNAUTHORIZED


def test_in_band_errors_are_found_inside_groups() -> None:
    error = YdbError(StatusIds.BAD_REQUEST, "bad")
    group = BaseExceptionGroup("g", [trio.Cancelled._create(), ExceptionGroup("h", [error])])
    assert leaf_error(group) is error
    two = ExceptionGroup("g", [ValueError(), KeyError()])
    assert leaf_error(two) is two
    stream = as_ydb_error(StreamError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "closed"))
    assert stream is not None and stream.status == StatusIds.UNAVAILABLE
    assert as_ydb_error(ValueError()) is None


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ErrorCode.TOPIC_ALREADY_EXISTS, StatusIds.ALREADY_EXISTS),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, StatusIds.SCHEME_ERROR),
        (ErrorCode.INVALID_CONFIG, StatusIds.BAD_REQUEST),
    ],
)
def test_broker_errors_map_to_ydb_statuses(error: ErrorCode, status: StatusIds) -> None:
    mapped = as_ydb_error(TopicError(error, "x"))
    assert mapped is not None and mapped.status == status
