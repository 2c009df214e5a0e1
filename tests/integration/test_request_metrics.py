"""Request metrics of a real node, read from its stage snapshot (SIGUSR1): a confluent-kafka
producer and consumer, and grpcio calls, move the counters of their APIs and methods."""

from __future__ import annotations

import grpc
import pytest

from tests.integration.kafka_clients import (
    confluent_consume_all,
    confluent_create_topic,
    confluent_produce,
)
from tests.integration.node_process import NodeProcess
from vdl.net.ydb.protos import ydb_discovery_pb2

TOPIC = "metered"
LIST_ENDPOINTS = "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints"


def test_kafka_and_grpc_requests_are_counted(node: NodeProcess) -> None:
    confluent_create_topic(node.bootstrap, TOPIC, 1)
    messages = [(b"k%d" % i, b"v" * 100) for i in range(20)]
    acked = confluent_produce(node.bootstrap, TOPIC, messages, **{"linger.ms": 0})
    assert len(acked[0]) == len(messages)
    assert len(confluent_consume_all(node.bootstrap, TOPIC, 1, len(messages))) == len(messages)

    with grpc.insecure_channel(node.grpc_address) as channel:
        list_endpoints = channel.unary_unary(
            LIST_ENDPOINTS,
            request_serializer=ydb_discovery_pb2.ListEndpointsRequest.SerializeToString,
            response_deserializer=ydb_discovery_pb2.ListEndpointsResponse.FromString,
        )
        list_endpoints(ydb_discovery_pb2.ListEndpointsRequest(database="/local"), timeout=10)
        nope = channel.unary_unary("/Ydb.Nope.V1.NopeService/Nope")
        with pytest.raises(grpc.RpcError) as failure:
            nope(b"", timeout=10)
        assert failure.value.code() == grpc.StatusCode.UNIMPLEMENTED

    histograms, counters = node.stage_snapshot()
    for api in ("ApiVersions", "Metadata", "CreateTopics", "Produce", "Fetch"):
        assert counters.get(f"kafka_requests{{api={api}}}", 0) >= 1, api
        assert histograms[f"kafka_request_seconds{{api={api}}}"].count >= 1, api
    # At least one request per message (linger.ms 0 and one in flight at a time is not
    # guaranteed, so batching may join some).
    assert counters["kafka_requests{api=Produce}"] <= len(messages)
    assert counters["kafka_bytes_in"] > sum(len(k) + len(v) for k, v in messages)
    assert counters["kafka_bytes_out"] > sum(len(k) + len(v) for k, v in messages)
    assert counters["kafka_connections_accepted"] >= 1
    assert counters.get("kafka_connections_refused", 0) == 0

    assert counters[f"grpc_requests{{method={LIST_ENDPOINTS}}}"] == 1
    assert histograms[f"grpc_request_seconds{{method={LIST_ENDPOINTS}}}"].count == 1
    assert counters["grpc_requests{method=unknown}"] == 1
    assert counters["grpc_request_errors{code=UNIMPLEMENTED,method=unknown}"] == 1
    assert counters["grpc_connections_accepted"] >= 1
    assert counters["grpc_bytes_in"] > 0 and counters["grpc_bytes_out"] > 0
