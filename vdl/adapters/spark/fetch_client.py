"""Raw Fetch for the source's executors: one partition's record batch bytes, as stored.

Client library: kafka-python (a VDL dependency already). Its ``KafkaNetClient`` (the
``KafkaClient`` interface) brings connections with TLS and SASL (PLAIN, SCRAM-SHA-256/512),
ApiVersions negotiation and cluster metadata; its protocol classes build the Fetch and
ListOffsets requests, and a Fetch response's ``records`` field is the RecordBatch v2 bytes
exactly as the log holds them, which ``batch_arrow`` decodes into Arrow columns in bulk.
Nothing here walks individual records.

The executors' settings are librdkafka's (``kafka.*`` options, as Spark's Kafka source takes
them); ``client_settings`` maps the ones that apply onto kafka-python's names and refuses
security settings it cannot honour rather than connecting without them.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kafka.errors as kafka_errors
from kafka.net.compat import KafkaNetClient
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.structs import TopicPartition

# Error codes of the Kafka protocol guide ("Error Codes") that the reader acts on.
NONE = 0
OFFSET_OUT_OF_RANGE = 1
# A leader moved, is being elected, or the metadata is stale: refresh metadata and retry.
RETRIABLE = {
    3,  # UNKNOWN_TOPIC_OR_PARTITION
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    7,  # REQUEST_TIMED_OUT
    13,  # NETWORK_EXCEPTION
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
    78,  # OFFSET_NOT_AVAILABLE (KIP-320)
}
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
# Fetch v12 is the last version that names topics (v13 uses topic ids, KIP-516).
MAX_FETCH_VERSION = 12
FETCH_MAX_BYTES = 16 << 20
PARTITION_MAX_BYTES = 8 << 20
FETCH_MAX_WAIT_MS = 100
RETRY_BACKOFF_S = 0.1

# librdkafka setting -> kafka-python setting, where the value carries over unchanged.
_SAME_VALUE = {
    "client.id": "client_id",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
}
_INT_VALUE = {
    "socket.timeout.ms": "request_timeout_ms",
    "socket.connection.setup.timeout.ms": "socket_connection_setup_timeout_ms",
    "reconnect.backoff.ms": "reconnect_backoff_ms",
    "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
}
# Prefixes of librdkafka's security settings: one of these that is not mapped above is refused,
# never dropped (connecting without a security setting the user asked for is not an option).
# Every other setting tunes librdkafka's own consumer (queues, timeouts, group) and has no
# meaning for this client's one-range fetches; the driver's confluent-kafka still uses it.
_SECURITY_PREFIXES = ("security.", "sasl.", "ssl.", "enable.ssl.")


class FetchClientError(RuntimeError):
    """The broker refused a request in a way retrying cannot fix."""


def client_settings(bootstrap: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python settings for librdkafka-style ``config`` (the source's ``kafka.*``)."""
    out: dict[str, Any] = {"bootstrap_servers": bootstrap.split(",")}
    for key, raw in config.items():
        value = str(raw)
        if key in _SAME_VALUE:
            out[_SAME_VALUE[key]] = value
        elif key in _INT_VALUE:
            out[_INT_VALUE[key]] = int(value)
        elif key == "security.protocol":
            out["security_protocol"] = value.upper()
        elif key in ("sasl.mechanism", "sasl.mechanisms"):
            out["sasl_mechanism"] = value.upper()
        elif key == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = value.lower() == "https"
        elif key == "enable.ssl.certificate.verification":
            if value.lower() in ("false", "0"):
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                out["ssl_context"] = context
        elif key.startswith(_SECURITY_PREFIXES):
            raise ValueError(
                f'option "kafka.{key}" has no equivalent in the source\'s fetch client; '
                "it takes security.protocol, sasl.mechanism(s), sasl.username, sasl.password, "
                "the ssl.*.location files, ssl.key.password, "
                "ssl.endpoint.identification.algorithm and enable.ssl.certificate.verification"
            )
    if "ssl_context" in out and "ssl_cafile" in out:
        out["ssl_context"].load_verify_locations(out["ssl_cafile"])
    # librdkafka's default for ssl.endpoint.identification.algorithm is https (since 2.0).
    out.setdefault("ssl_check_hostname", True)
    return out


def isolation_level(config: Mapping[str, Any]) -> int:
    """librdkafka's ``isolation.level`` (default read_committed) as the protocol's int8."""
    value = str(config.get("isolation.level", "read_committed")).lower()
    if value not in ("read_committed", "read_uncommitted"):
        raise ValueError(f'option "kafka.isolation.level" must be read_committed or '
                         f"read_uncommitted, not {value!r}")  # fmt: skip
    return READ_COMMITTED if value == "read_committed" else READ_UNCOMMITTED


@dataclass
class PartitionFetch:
    """One partition's part of a Fetch response."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    records: bytes
    aborted: list[tuple[int, int]]  # (producer id, first offset)


class FetchClient:
    """Fetches and offset look-ups for one partition, following its leader."""

    def __init__(
        self,
        bootstrap: str,
        config: Mapping[str, Any],
        topic: str,
        partition: int,
        timeout_ms: int,
    ) -> None:
        settings = client_settings(bootstrap, config)
        self.isolation = isolation_level(config)
        self.topic, self.partition = topic, partition
        self.timeout_ms = timeout_ms
        self._tp = TopicPartition(topic, partition)
        # A Fetch response holds up to FETCH_MAX_BYTES of records, plus its framing.
        settings["receive_message_max_bytes"] = FETCH_MAX_BYTES + (1 << 20)
        self._client = KafkaNetClient(**settings)
        self._check_login()
        self._client.cluster.set_topics([topic])

    def close(self) -> None:
        self._client.close()

    def _leader(self, deadline: float) -> int:
        """The partition's leader, refreshing metadata until it is known."""
        while True:
            leader = self._client.cluster.leader_for_partition(self._tp)
            if leader is not None and leader >= 0:
                return int(leader)
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                raise FetchClientError(
                    f'"{self.topic}" partition {self.partition}: no leader known after '
                    f"{self.timeout_ms} ms"
                )
            update = self._client.cluster.request_update()
            self._client.poll(timeout_ms=min(remaining_ms, 1000), future=update)

    def _check_login(self) -> None:
        """Connect to a bootstrap server first: a refused login (SASL) or authorization is
        final, so report it now rather than when the timeout runs out.

        kafka-python's metadata bootstrap retries such a failure with backoff like any
        other; the outcome of one connection attempt is in its ``init_future``. A node that
        refuses a login closes the connection, and the client may see the close before the
        answer, so a plain disconnect is tried again (until the timeout, then the metadata
        steps report what is wrong).
        """
        broker = self._client.cluster.bootstrap_brokers()[0]
        deadline = time.monotonic() + self.timeout_ms / 1000
        while time.monotonic() < deadline:
            try:
                conn = self._client._manager.get_connection(broker.node_id)
            except kafka_errors.NodeNotReadyError:
                self._client.poll(timeout_ms=int(RETRY_BACKOFF_S * 1000))  # backing off
                continue
            except kafka_errors.KafkaError:
                return
            remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
            self._client.poll(timeout_ms=remaining_ms, future=conn.init_future)
            if not conn.init_future.failed():
                return
            failure = conn.init_future.exception
            if isinstance(
                failure,
                kafka_errors.SaslAuthenticationFailedError | kafka_errors.AuthorizationError,
            ):
                self._client.close()
                raise FetchClientError(
                    f'"{self.topic}" partition {self.partition}: the log refused the '
                    f"connection: {failure}"
                )

    def _call(self, build: Any) -> Any:
        """Send ``build()`` to the leader, following leader changes until the deadline.

        ``build`` returns the request; the answer's partition error code decides: retriable
        codes refresh metadata and retry, anything else is for the caller.
        """
        deadline = time.monotonic() + self.timeout_ms / 1000
        while True:
            leader = self._leader(deadline)
            try:
                response = self._client.send_and_receive(
                    leader, build(), timeout_ms=max(1, int((deadline - time.monotonic()) * 1000))
                )
            except (
                kafka_errors.SaslAuthenticationFailedError,
                kafka_errors.AuthorizationError,
                kafka_errors.UnsupportedVersionError,
            ) as exc:
                raise FetchClientError(
                    f'"{self.topic}" partition {self.partition}: {exc}'
                ) from None
            except kafka_errors.KafkaError as exc:
                if time.monotonic() >= deadline:
                    raise FetchClientError(
                        f'"{self.topic}" partition {self.partition}: request failed: {exc}'
                    ) from None
                self._client.cluster.request_update()
                self._client.poll(timeout_ms=int(RETRY_BACKOFF_S * 1000))  # back off
                continue
            code = self._partition_code(response)
            if code in RETRIABLE and time.monotonic() < deadline:
                self._client.cluster.request_update()
                self._client.poll(timeout_ms=int(RETRY_BACKOFF_S * 1000))
                continue
            return response

    def _partition_code(self, response: Any) -> int:
        if isinstance(response, FetchResponse):
            return int(response.responses[0].partitions[0].error_code)
        return int(response.topics[0].partitions[0].error_code)

    def list_offset(self, timestamp: int) -> int:
        """The earliest (-2) or latest (-1) offset; latest is the last stable offset under
        read_committed, as ListOffsets v2+ answers (KIP-98)."""

        def build() -> Any:
            return ListOffsetsRequest(
                replica_id=-1,
                isolation_level=self.isolation,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=self.topic,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                                partition_index=self.partition,
                                current_leader_epoch=-1,
                                timestamp=timestamp,
                            )
                        ],
                    )
                ],
                min_version=ListOffsetsRequest.min_version_for_isolation_level(self.isolation),
            )

        response = self._call(build)
        assert isinstance(response, ListOffsetsResponse)
        answer = response.topics[0].partitions[0]
        if answer.error_code != NONE:
            raise FetchClientError(
                f'"{self.topic}" partition {self.partition}: ListOffsets failed: '
                f"{kafka_errors.for_code(answer.error_code).__name__}"
            )
        return int(answer.offset)

    def fetch(self, offset: int, max_wait_ms: int = FETCH_MAX_WAIT_MS) -> PartitionFetch:
        def build() -> Any:
            return FetchRequest(
                replica_id=-1,
                max_wait_ms=max_wait_ms,
                min_bytes=1,
                max_bytes=FETCH_MAX_BYTES,
                isolation_level=self.isolation,
                session_id=0,
                session_epoch=-1,
                topics=[
                    FetchRequest.FetchTopic(
                        topic=self.topic,
                        partitions=[
                            FetchRequest.FetchTopic.FetchPartition(
                                partition=self.partition,
                                current_leader_epoch=-1,
                                fetch_offset=offset,
                                log_start_offset=-1,
                                partition_max_bytes=PARTITION_MAX_BYTES,
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
                min_version=FetchRequest.min_version_for_isolation_level(self.isolation),
                max_version=MAX_FETCH_VERSION,
            )

        response = self._call(build)
        assert isinstance(response, FetchResponse)
        data = response.responses[0].partitions[0]
        records = data.records  # the partition's record batches, as the log stores them
        return PartitionFetch(
            error_code=int(data.error_code),
            high_watermark=int(data.high_watermark),
            last_stable_offset=int(data.last_stable_offset),
            records=records if isinstance(records, bytes) else bytes(records or b""),
            aborted=[
                (int(a.producer_id), int(a.first_offset)) for a in data.aborted_transactions or []
            ],
        )
