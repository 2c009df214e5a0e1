"""The monitoring files under deploy/: the Grafana dashboard, the Prometheus scrape config
and its alert rules.

A fast test reads them (JSON, and YAML with PyYAML) and checks their structure and every
PromQL expression. A cluster test then asks three real nodes for
every metric name those expressions query: a panel or alert naming a metric no node
exposes (renamed, misspelt, its `_total`/`_bucket` suffix wrong) shows no data, silently.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.admin_support import get
from tests.integration.cluster_support import Cluster
from tests.integration.node_process import NodeProcess
from vdl.net.ydb.operation import StatusIds
from vdl.net.ydb.protos import ydb_topic_pb2

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "vdl-overview.json"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"

METRIC = re.compile(r"\bvdl_[a-z0-9_]+")
DATASOURCE_UID = "${datasource}"

# What the dashboard must show at least (the rows operators coming from Kafka look for).
DASHBOARD_MUST_QUERY = {
    "vdl_cluster_nodes",
    "vdl_active_controller",
    "vdl_node_ready",
    "vdl_under_replicated_partitions",
    "vdl_partitions_led",
    "vdl_kafka_requests_total",
    "vdl_kafka_request_errors_total",
    "vdl_kafka_request_seconds_bucket",
    "vdl_kafka_bytes_in_total",
    "vdl_kafka_bytes_out_total",
    "vdl_raft_propose_to_commit_seconds_bucket",
    "vdl_raft_append_round_trip_seconds_bucket",
    "vdl_raft_write_to_durable_seconds_bucket",
    "vdl_raft_follower_lag_entries",
    "vdl_raft_term",
    "vdl_storage_fdatasync_seconds_bucket",
    "vdl_storage_sync_bytes_bucket",
    "vdl_partition_size_bytes",
    "vdl_kafka_consumer_group_lag",
    "vdl_process_cpu_seconds_total",
    "vdl_process_resident_memory_bytes",
    "vdl_event_loop_lag_seconds_bucket",
    "vdl_connections_open",
}
ROWS = ["Cluster", "Produce", "YDB", "Replication", "Storage", "Consumers", "Process"]
ALERT_NAMES = {
    "VdlUnderReplicatedPartitions",
    "VdlNodeNotReady",
    "VdlNoActiveController",
    "VdlConsumerGroupLagGrowing",
    "VdlEventLoopLagHigh",
}


def load_yaml(text: str) -> Any:
    return yaml.safe_load(text)


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and variable queries."""
    exprs = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        query = var.get("query")
        if var["type"] == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def alert_rules(alerts: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in alerts["groups"] for rule in group["rules"]]


def metric_names(exprs: list[str]) -> set[str]:
    return {name for expr in exprs for name in METRIC.findall(expr)}


def queried_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    alerts = load_yaml(ALERTS.read_text())
    exprs = dashboard_queries(dashboard) + [r["expr"] for r in alert_rules(alerts)]
    return metric_names(exprs)


def check_promql(expr: str) -> None:
    """What a typo breaks: balanced brackets and quotes, histogram quantiles over `le`."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    quoted = False
    for char in expr:
        if char == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif char in "([{":
            stack.append(char)
        elif char in pairs:
            assert stack and stack.pop() == pairs[char], expr
    assert not stack and not quoted, expr
    if "_bucket" in expr:
        assert "histogram_quantile(" in expr, expr
        assert re.search(r"by \([^)]*\ble\b[^)]*\)", expr), f"no `by (le, ...)`: {expr}"
    for name in METRIC.findall(expr):
        if name.endswith("_total"):
            assert re.search(rf"(rate|increase)\({name}\b", expr), f"raw counter: {expr}"


# ---------------------------------------------------------------- the files


def test_the_dashboard_and_prometheus_files_are_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "vdl-overview"
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["instance"]["type"] == "query"
    assert variables["instance"]["datasource"]["uid"] == DATASOURCE_UID

    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert [r.split()[0] for r in rows] == ROWS, rows
    ids: set[int] = set()
    cells: set[tuple[int, int]] = set()
    for panel in panels(dashboard):
        assert panel["id"] not in ids, panel["title"]
        ids.add(panel["id"])
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == DATASOURCE_UID, panel["title"]
        targets = panel["targets"]
        assert targets, panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        for target in targets:
            assert target["datasource"]["uid"] == DATASOURCE_UID, panel["title"]
            check_promql(target["expr"])
    names = metric_names(dashboard_queries(dashboard))
    assert names >= DASHBOARD_MUST_QUERY, DASHBOARD_MUST_QUERY - names

    alerts = load_yaml(ALERTS.read_text())
    rules = alert_rules(alerts)
    assert {r["alert"] for r in rules} >= ALERT_NAMES
    assert len({r["alert"] for r in rules}) == len(rules)
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule
        assert rule["labels"]["severity"] in ("warning", "critical"), rule
        assert rule["annotations"]["summary"], rule
        check_promql(rule["expr"])

    text = PROMETHEUS.read_text()
    config = load_yaml(text)
    assert config["rule_files"] == [ALERTS.name]
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "vdl"
    assert job["scrape_interval"] == "15s"
    assert job["metrics_path"] == "/metrics"
    targets = [t for static in job["static_configs"] for t in static["targets"]]
    assert targets == ["vdl-1:9644", "vdl-2:9644", "vdl-3:9644"]
    # The block for nodes with users and TLS is there, commented out.
    for line in ("# scheme: https", "# basic_auth:", "# tls_config:", "#   ca_file:"):
        assert line in text, line


# ---------------------------------------------------------------- a running cluster

TOPIC = "deploy-metrics"
GROUP = "deploy-metrics-group"


def exposed_names(admin_url: str) -> set[str]:
    """Family and sample names of a node's `/metrics` (a histogram family `x` exposes
    `x_bucket`, `x_sum`, `x_count`; a counter family `x` exposes `x_total`)."""
    status, _, body = get(admin_url + "/metrics")
    assert status == 200, body[:200]
    names: set[str] = set()
    for family in text_string_to_metric_families(body.decode()):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def ask_metadata_of_a_missing_topic(node: NodeProcess) -> None:
    """A Metadata request (v4, no auto-creation) for a topic nobody made, straight to
    `node`: its answer carries UNKNOWN_TOPIC_OR_PARTITION, an error the node counts."""
    request = MetadataRequest(
        version=4,
        topics=[MetadataRequest.MetadataRequestTopic(name="deploy-no-such-topic")],
        allow_auto_topic_creation=False,
    )
    request.with_header(correlation_id=1, client_id="deploy-test")
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        payload = sock.recv(size, socket.MSG_WAITALL)
    response = MetadataResponse.decode(payload[4:], version=4)
    assert [t.error_code for t in response.topics] == [3], response  # UNKNOWN_TOPIC_OR_...


def fail_grpc_calls(node: NodeProcess) -> None:
    """Two failed calls to `node`'s gRPC port, which it counts: one to a path no method is
    registered at (gRPC UNIMPLEMENTED), one DescribeTopic of a missing topic (a YDB
    failure status inside a gRPC OK)."""
    with grpc.insecure_channel(node.grpc_address) as channel:
        unknown = channel.unary_unary("/Deploy.NoSuchService/NoSuchMethod")
        try:
            unknown(b"", timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNIMPLEMENTED, exc
        else:
            raise AssertionError("an unknown method answered")
        describe = channel.unary_unary(
            "/Ydb.Topic.V1.TopicService/DescribeTopic",
            request_serializer=ydb_topic_pb2.DescribeTopicRequest.SerializeToString,
            response_deserializer=ydb_topic_pb2.DescribeTopicResponse.FromString,
        )
        request = ydb_topic_pb2.DescribeTopicRequest(path="/local/deploy-no-such-topic")
        response = describe(request, timeout=10)
        assert response.operation.status != StatusIds.SUCCESS, response


def test_every_metric_the_dashboard_and_alerts_query_is_exposed(tmp_path: Path) -> None:
    wanted = queried_metrics()
    cluster = Cluster(tmp_path)
    try:
        cluster.start()
        cluster.create_topic(TOPIC, 1)
        # The preferred replica: leader balancing would move the partition (and the series
        # only its leader reports) to it otherwise.
        leader = cluster.nodes[cluster.wait_for_preferred_leader(TOPIC)]

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(5):
            producer.produce(TOPIC, value=b"record-%d" % i)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": GROUP,
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.commit(offsets=[TopicPartition(TOPIC, 0, 3)], asynchronous=False)
        finally:
            consumer.close()
        ask_metadata_of_a_missing_topic(leader)
        fail_grpc_calls(leader)

        # Some series appear only once their event has reached the leader's state (the
        # group's committed offset, a follower's first AppendEntries answer): poll.
        deadline = time.monotonic() + 30
        while missing := wanted - exposed_names(leader.admin_url):
            assert time.monotonic() < deadline, f"not exposed by the leader: {sorted(missing)}"
            time.sleep(0.5)
    finally:
        cluster.stop()
