"""Kafka request metrics (Kafka's RequestMetrics): requests, errors, times and bytes per api,
connections accepted and refused, SASL failures and quota throttles, read from `STAGES`.

The registry is process-global and other tests record into it too: every check is a delta.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import trio
import trio.testing
from kafka.protocol.consumer import FetchRequest as KPFetchRequest
from kafka.protocol.producer import ProduceRequest as KPProduceRequest

from tests.unit.kafka.kafka_oracle import kp_batch, kp_frame
from vdl.broker.broker import Broker
from vdl.broker.topics import TopicError
from vdl.config import HostPort
from vdl.log.error_codes import ErrorCode
from vdl.metrics.stages import STAGES
from vdl.net.kafka.apis.context import NodeInfo
from vdl.net.kafka.apis.dispatch import HANDLERS
from vdl.net.kafka.apis.sasl import ConnectionAuth
from vdl.net.kafka.connection import KafkaConnection
from vdl.net.kafka.control_codec import encode_response, request_class, response_class
from vdl.net.kafka.header import RequestHeader, kafka_response_classes, parse_request_header
from vdl.net.kafka.quotas import KafkaQuotas
from vdl.net.kafka.request_metrics import (
    ERROR_PATHS,
    MAX_UNNAMED_KEYS,
    api_metrics,
    api_name,
    code_name,
)
from vdl.net.kafka.server import KafkaServer
from vdl.net.kafka.versions import SASL_ADVERTISED, ApiKey
from vdl.net.limits import ConnectionLimits
from vdl.security.service import Security
from vdl.security.users import UserStore

NODE = NodeInfo(node_id=1, host="127.0.0.1", port=9092, cluster_id="c")


def counter(name: str, **labels: str) -> int:
    return STAGES.counter(name, **labels).value


def timed(api: str) -> int:
    return STAGES.histogram("kafka_request_seconds", api=api).count


@dataclass
class _Catalog:
    def get(self, name: str) -> None:
        return None  # no topic exists


@dataclass
class FakeBroker:
    """Just what Produce and Fetch touch before they answer an unknown topic."""

    catalog: _Catalog = field(default_factory=_Catalog)
    draining: bool = False

    def leader_stream(self, topic: str, partition: int) -> Any:
        raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic!r}")


def framed(body: bytes | memoryview) -> bytes:
    return struct.pack(">i", len(body)) + bytes(body)


def api_versions(correlation_id: int) -> bytes:
    request = request_class(ApiKey.API_VERSIONS, 3)(
        client_software_name="t", client_software_version="1", version=3
    )
    return framed(kp_frame(request, correlation_id))


def produce(correlation_id: int, topic: str) -> bytes:
    data = KPProduceRequest.TopicProduceData
    request = KPProduceRequest(
        version=7,
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[
            data(
                name=topic,
                partition_data=[
                    data.PartitionProduceData(index=0, records=kp_batch(1)),
                    data.PartitionProduceData(index=1, records=kp_batch(1)),
                ],
            )
        ],
    )
    return framed(kp_frame(request, correlation_id))


def fetch(correlation_id: int, topic: str) -> bytes:
    part = KPFetchRequest.FetchTopic.FetchPartition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0,
        log_start_offset=-1,
        partition_max_bytes=1000,
    )
    request = KPFetchRequest(
        version=11,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1000,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[KPFetchRequest.FetchTopic(topic=topic, partitions=[part])],
        forgotten_topics_data=[],
        rack_id="",
    )
    return framed(kp_frame(request, correlation_id))


async def read_frames(stream: trio.abc.Stream, count: int) -> bytes:
    """The bytes of the next `count` response frames."""
    data = b""
    while True:
        at, frames = 0, 0
        while len(data) >= at + 4:
            (size,) = struct.unpack_from(">i", data, at)
            if len(data) < at + 4 + size:
                break
            at += 4 + size
            frames += 1
        if frames >= count:
            return data
        chunk = await stream.receive_some()
        assert chunk, "connection closed early"
        data += chunk


async def read_to_end(stream: trio.abc.Stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some():
        data += chunk
    return data


def test_api_and_code_names() -> None:
    assert [api_name(k) for k in (0, 1, 3, 11, 18, 36)] == [
        "Produce",
        "Fetch",
        "Metadata",
        "JoinGroup",
        "ApiVersions",
        "SaslAuthenticate",
    ]
    assert api_name(4242) == "4242"
    assert code_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert code_name(31000) == "31000"


def test_unnamed_api_keys_cannot_make_series_without_bound() -> None:
    labels = {api_metrics(20_000 + i).api for i in range(MAX_UNNAMED_KEYS + 10)}
    assert "other" in labels
    assert len(labels) <= MAX_UNNAMED_KEYS + 1


def _schema_error_paths(fields: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[Any]:
    out: set[tuple[str, ...]] = set()
    for name, fld in fields.items():
        if name == "error_code":
            out.add(prefix)
        nested = getattr(fld, "fields", None)
        if isinstance(nested, dict) and nested:
            assert fld.is_array(), f"{name}: an error code in a plain struct is not walked"
            out |= _schema_error_paths(nested, (*prefix, name))
    return out


def test_error_paths_are_every_error_code_of_the_served_responses() -> None:
    """ERROR_PATHS lists, for every API answered through kafka-python's classes, every
    ErrorCode field of the response's schema (kafka-python's copy of Kafka's JSON)."""
    responses = kafka_response_classes()
    served = set(HANDLERS) | set(SASL_ADVERTISED)
    assert set(ERROR_PATHS) == served - {ApiKey.PRODUCE, ApiKey.FETCH}
    for key, paths in ERROR_PATHS.items():
        assert set(paths) == _schema_error_paths(responses[key].fields), api_name(key)


def test_response_errors_are_counted_at_every_level() -> None:
    header = RequestHeader(ApiKey.METADATA, 8, 1, "c", 0)
    cls = response_class(ApiKey.METADATA, 8)
    topic, partition = (
        cls.MetadataResponseTopic,
        cls.MetadataResponseTopic.MetadataResponsePartition,
    )

    def part(index: int, error: ErrorCode) -> Any:
        return partition(
            error_code=int(error),
            partition_index=index,
            leader_id=-1,
            replica_nodes=[],
            isr_nodes=[],
            offline_replicas=[],
        )

    response = cls(
        brokers=[],
        cluster_id="c",
        controller_id=1,
        topics=[
            topic(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), name="a", partitions=[]),
            topic(
                error_code=0,
                name="b",
                partitions=[
                    part(0, ErrorCode.LEADER_NOT_AVAILABLE),
                    part(1, ErrorCode.NONE),
                    part(2, ErrorCode.LEADER_NOT_AVAILABLE),
                ],
            ),
        ],
    )
    unknown = ("kafka_request_errors", {"api": "Metadata", "code": "UNKNOWN_TOPIC_OR_PARTITION"})
    leaderless = ("kafka_request_errors", {"api": "Metadata", "code": "LEADER_NOT_AVAILABLE"})
    before = [counter(name, **labels) for name, labels in (unknown, leaderless)]
    encode_response(header, response)
    after = [counter(name, **labels) for name, labels in (unknown, leaderless)]
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 2]


class _Deltas:
    """Counter and histogram values before and after a block, by a short name."""

    def __init__(self, **series: tuple[str, dict[str, str]]) -> None:
        self._series = series
        self._before = self._read()

    def _read(self) -> dict[str, int]:
        out = {}
        for key, (name, labels) in self._series.items():
            if name == "kafka_request_seconds":
                out[key] = timed(labels["api"])
            else:
                out[key] = counter(name, **labels)
        return out

    def __call__(self) -> dict[str, int]:
        now = self._read()
        return {key: now[key] - self._before[key] for key in now}


async def test_requests_errors_times_and_bytes_of_a_connection() -> None:
    deltas = _Deltas(
        api_versions=("kafka_requests", {"api": "ApiVersions"}),
        produce=("kafka_requests", {"api": "Produce"}),
        fetch=("kafka_requests", {"api": "Fetch"}),
        describe_cluster=("kafka_requests", {"api": "UpdateFeatures"}),
        produce_unknown=(
            "kafka_request_errors",
            {"api": "Produce", "code": "UNKNOWN_TOPIC_OR_PARTITION"},
        ),
        fetch_unknown=(
            "kafka_request_errors",
            {"api": "Fetch", "code": "UNKNOWN_TOPIC_OR_PARTITION"},
        ),
        unsupported=(
            "kafka_request_errors",
            {"api": "UpdateFeatures", "code": "UNSUPPORTED_VERSION"},
        ),
        api_versions_timed=("kafka_request_seconds", {"api": "ApiVersions"}),
        produce_timed=("kafka_request_seconds", {"api": "Produce"}),
        fetch_timed=("kafka_request_seconds", {"api": "Fetch"}),
        bytes_in=("kafka_bytes_in", {}),
        bytes_out=("kafka_bytes_out", {}),
    )
    client, server_side = trio.testing.memory_stream_pair()
    broker = cast(Broker, FakeBroker())
    connection = KafkaConnection(server_side, "127.0.0.1:1", broker, NODE, 1 << 20)
    requests = api_versions(1) + produce(2, "nope") + fetch(3, "nope")
    # UpdateFeatures v0, which VDL does not serve: the connection is closed.
    unsupported = framed(struct.pack(">hhih", 57, 0, 4, -1) + b"\x00")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.serve)
        await client.send_all(requests)
        answers = await read_frames(client, 3)
        await client.send_all(unsupported)
        answers += await read_to_end(client)
    moved = deltas()
    assert moved == {
        "api_versions": 1,
        "produce": 1,
        "fetch": 1,
        "describe_cluster": 1,
        "produce_unknown": 2,  # both partitions
        "fetch_unknown": 1,
        "unsupported": 1,
        "api_versions_timed": 1,
        "produce_timed": 1,
        "fetch_timed": 1,
        "bytes_in": len(requests) + len(unsupported),
        "bytes_out": len(answers),
    }
    # Never answered, so never timed: no empty histogram for it.
    timed_apis = {h.labels.get("api") for h in STAGES.histograms()}
    assert "UpdateFeatures" not in timed_apis and "Produce" in timed_apis


async def test_malformed_header_counts_as_an_invalid_request() -> None:
    deltas = _Deltas(
        requests=("kafka_requests", {"api": "Metadata"}),
        invalid=("kafka_request_errors", {"api": "Metadata", "code": "INVALID_REQUEST"}),
    )
    client, server_side = trio.testing.memory_stream_pair()
    broker = cast(Broker, FakeBroker())
    connection = KafkaConnection(server_side, "127.0.0.1:1", broker, NODE, 1 << 20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.serve)
        await client.send_all(framed(b"\x00\x03\x00"))  # api key 3, then nothing whole
        assert await read_to_end(client) == b""
    assert deltas() == {"requests": 1, "invalid": 1}


def _sasl_auth() -> ConnectionAuth:
    users = UserStore.from_passwords({"alice": "secret"})
    security = Security(users=users, sasl_mechanisms=("PLAIN",))
    return ConnectionAuth(security, "127.0.0.1:5000", None)


def _sasl_request(key: ApiKey, correlation_id: int, **fields: Any) -> tuple[Any, memoryview]:
    frame = kp_frame(request_class(key, 1)(**fields, version=1), correlation_id)
    return parse_request_header(frame), frame


async def test_sasl_failures_are_counted() -> None:
    failures = _Deltas(
        auth=("kafka_authentication_failures", {}),
        mechanism=(
            "kafka_request_errors",
            {"api": "SaslHandshake", "code": "UNSUPPORTED_SASL_MECHANISM"},
        ),
        password=(
            "kafka_request_errors",
            {"api": "SaslAuthenticate", "code": "SASL_AUTHENTICATION_FAILED"},
        ),
    )
    # An unsupported mechanism.
    auth = _sasl_auth()
    pending = auth.handle(*_sasl_request(ApiKey.SASL_HANDSHAKE, 1, mechanism="GSSAPI"))
    assert pending is not None
    await pending()
    assert failures() == {"auth": 1, "mechanism": 1, "password": 0}
    # A wrong password.
    auth = _sasl_auth()
    pending = auth.handle(*_sasl_request(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))
    assert pending is not None
    await pending()
    token = b"\x00alice\x00wrong"
    pending = auth.handle(*_sasl_request(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=token))
    assert pending is not None
    with trio.fail_after(30):
        await pending()
    assert auth.failed
    assert failures() == {"auth": 2, "mechanism": 1, "password": 1}


def test_throttles_are_observed() -> None:
    produce_hist = STAGES.histogram("kafka_throttle_seconds", api="Produce")
    fetch_hist = STAGES.histogram("kafka_throttle_seconds", api="Fetch")
    before = (produce_hist.count, produce_hist.sum, fetch_hist.count)
    quotas = KafkaQuotas(1000, 100)
    assert quotas.record_produce("a", 1000, now=0.0) == 0  # the burst: no throttle
    assert quotas.record_produce("a", 500, now=0.0) == 500
    assert quotas.admit_fetch("a", 100, now=0.0) == 0
    assert quotas.admit_fetch("a", 50, now=0.0) == 500
    assert produce_hist.count - before[0] == 1
    assert abs(produce_hist.sum - before[1] - 0.5) < 1e-9
    assert fetch_hist.count - before[2] == 1


async def _connect_and_wait(port: int, moved: Iterator[bool]) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    with trio.fail_after(10):
        while not next(moved):
            await trio.sleep(0.01)
    return stream


async def test_connections_accepted_and_refused() -> None:
    limits = ConnectionLimits("Kafka", max_connections=1, max_connections_per_ip=1)
    server = KafkaServer(
        cast(Broker, FakeBroker()), 1, "c", HostPort("127.0.0.1", 0), None, 1 << 20, limits=limits
    )
    deltas = _Deltas(
        accepted=("kafka_connections_accepted", {}), refused=("kafka_connections_refused", {})
    )

    def until(accepted: int, refused: int) -> Iterator[bool]:
        while True:
            yield deltas() == {"accepted": accepted, "refused": refused}

    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        first = await _connect_and_wait(port, until(1, 0))
        second = await _connect_and_wait(port, until(1, 1))
        try:  # closed at once (a reset, as likely as not)
            assert await second.receive_some() == b""
        except trio.BrokenResourceError:
            pass
        await first.send_all(api_versions(1))
        assert await read_frames(first, 1)
        await first.aclose()
        await second.aclose()
        server.shutdown()
    assert deltas() == {"accepted": 1, "refused": 1}
