"""DescribeCluster (KIP-700) and DescribeLogDirs: the cluster and this node's log dir.

DescribeCluster names the brokers and the controller exactly as Metadata does
(`metadata.brokers_and_controller`), with the KIP-430 bitfield of what the principal may
do on the cluster when asked. DescribeLogDirs describes the one log dir a node has, its
data directory, with every partition replica the node holds: its size (the bytes its
store holds) and its lag (log end offset minus high watermark). Kafka's rule: DESCRIBE on
the cluster, else no log dirs (v0-2 have no top-level error).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeClusterResponse, DescribeLogDirsResponse

from vdl.net.kafka.apis.context import Pending, RequestContext, ready
from vdl.net.kafka.apis.metadata import brokers_and_controller, cluster_operations
from vdl.net.kafka.control_codec import decode_request, encode_response
from vdl.security.acl import Operation

ENDPOINT_BROKERS = 1
# Kafka's UNSUPPORTED_ENDPOINT_TYPE (KIP-919): a broker asked to describe controllers.
UNSUPPORTED_ENDPOINT_TYPE = 119

_Broker = DescribeClusterResponse.DescribeClusterBroker
_Dir = DescribeLogDirsResponse.DescribeLogDirsResult
_Topic = _Dir.DescribeLogDirsTopic
_Partition = _Topic.DescribeLogDirsPartition


def handle_describe_cluster(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    brokers, controller = brokers_and_controller(ctx)
    fields: dict[str, Any] = {}
    if ctx.version >= 1:
        # Only brokers are described (1); controllers (2) are not separate nodes here.
        endpoint = int(request.endpoint_type)
        fields["endpoint_type"] = ENDPOINT_BROKERS
        if endpoint != ENDPOINT_BROKERS:
            response = DescribeClusterResponse(
                throttle_time_ms=0,
                error_code=UNSUPPORTED_ENDPOINT_TYPE,
                error_message=f"endpoint type {endpoint} is not supported: only brokers (1)",
                cluster_id=ctx.node.cluster_id,
                controller_id=-1,
                brokers=[],
                version=ctx.version,
                **fields,
            )
            return ready(encode_response(ctx.header, response))
    # None is encoded as INT32_MIN: "not requested" (KIP-430).
    operations = None
    if request.include_cluster_authorized_operations:
        operations = cluster_operations(ctx)
    response = DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        cluster_id=ctx.node.cluster_id,
        controller_id=controller,
        brokers=[
            _Broker(broker_id=b.node_id, host=b.host, port=b.port, rack=None) for b in brokers
        ],
        authorized_operations=operations,
        version=ctx.version,
        **fields,
    )
    return ready(encode_response(ctx.header, response))


def handle_describe_log_dirs(ctx: RequestContext) -> Pending:
    request = decode_request(ctx.header, ctx.frame)
    results = []
    if ctx.may_cluster(Operation.DESCRIBE):
        wanted: dict[str, set[int]] | None = None
        if request.topics is not None:
            wanted = {}
            for topic in request.topics:
                wanted.setdefault(topic.topic, set()).update(int(p) for p in topic.partitions)
        topics: dict[str, list[Any]] = {}
        for name, partition, stream in ctx.broker.hosted_streams():
            if wanted is not None and partition not in wanted.get(name, ()):
                continue
            topics.setdefault(name, []).append(
                _Partition(
                    partition_index=partition,
                    partition_size=stream.store.size_bytes(),
                    offset_lag=max(0, stream.log_end_offset - stream.high_watermark),
                    is_future_key=False,
                )
            )
        results.append(
            _Dir(
                error_code=0,
                log_dir=str(ctx.broker.data_dir),
                topics=[_Topic(name=n, partitions=parts) for n, parts in topics.items()],
            )
        )
    response = DescribeLogDirsResponse(throttle_time_ms=0, results=results, version=ctx.version)
    return ready(encode_response(ctx.header, response))
