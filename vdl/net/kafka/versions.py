"""The ApiVersions ranges VDL advertises (the Kafka protocol guide's API keys and versions).

Most ranges are capped at the API's last non-flexible version: flexible
versions add obligations (KIP-360 epoch bumps, topic ids, batched layouts)
without helping any of the supported clients. Metadata, CreateTopics and
DeleteTopics go on into their flexible versions (KIP-482) for the topic ids
of KIP-516: by them a client sees that a topic was deleted and created again.
IncrementalAlterConfigs v1 is flexible, and DescribeCluster has no other versions.
The ACL APIs go up to v3 and the SCRAM credential APIs (flexible-only, KIP-554)
are v0, as kafka-python sends them. The transaction APIs go to the flexible versions
current clients send (KIP-360's producer id in InitProducerId v3, KIP-588's
PRODUCER_FENCED), stopping before KIP-890's server-side changes.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


ADVERTISED: dict[int, tuple[int, int]] = {
    # Produce v0-2 are listed only so that librdkafka < 2.11.1 (kcat) keeps
    # compression enabled; they are rejected if they ever arrive (see
    # SERVED_PRODUCE_MIN), exactly as Kafka 4 does.
    ApiKey.PRODUCE: (0, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 5),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (1, 8),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.LIST_GROUPS: (0, 2),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    # v0-1 (v1 only differs in throttling); v2 is flexible.
    ApiKey.DELETE_RECORDS: (0, 1),
    # v0-4: v3 (flexible) carries the producer's id and epoch (KIP-360), v4 lets the
    # answer be PRODUCER_FENCED (KIP-588).
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    # The transaction coordinator's APIs up to v3, the last before KIP-890's changes
    # (vdl/net/kafka/apis/txn_coordinator.py); v3 are flexible.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    # Flexible only (KIP-664); ListTransactions v1 filters by duration (KIP-994).
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    # v1-3 (Kafka 4 dropped v0); librdkafka sends v1, kafka-python up to v3.
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    # v2-3: v0-1 are gone from current Kafka (KIP-896) and v4 is flexible; librdkafka
    # and the Java consumer send v2 or later.
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 3),
    ApiKey.ALTER_CONFIGS: (0, 1),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    # v0 and v1 differ only in throttling; v2 on are flexible.
    ApiKey.DESCRIBE_LOG_DIRS: (0, 1),
    # Flexible only (KIP-700): v1 adds the endpoint type; v2 (fenced brokers) is not served.
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    # Flexible only (KIP-664): what `kafka-transactions describe-producers` sends.
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    # v0-1 (v1 only differs in throttling); librdkafka sends at most v1.
    ApiKey.CREATE_PARTITIONS: (0, 1),
    # v0-1, the last non-flexible versions; kafka-python and librdkafka use them.
    ApiKey.DELETE_GROUPS: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}

# Added to ADVERTISED only when SASL is configured (KIP-43, KIP-152).
SASL_ADVERTISED: dict[int, tuple[int, int]] = {
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 1),
}

# Produce v0-2 carry the old message-set format; VDL stores only RecordBatch v2.
SERVED_PRODUCE_MIN = 3


def advertised(sasl: bool = False) -> dict[int, tuple[int, int]]:
    """The ApiVersions table to send, with the SASL entries when enabled."""
    table = dict(ADVERTISED)
    if sasl:
        table.update(SASL_ADVERTISED)
    return table


def is_served(
    api_key: int, api_version: int, table: Mapping[int, tuple[int, int]] = ADVERTISED
) -> bool:
    """True if a request with this (key, version) may be handled, not just advertised."""
    rng = table.get(api_key)
    if rng is None:
        return False
    low, high = rng
    if api_key == ApiKey.PRODUCE:
        low = max(low, SERVED_PRODUCE_MIN)
    return low <= api_version <= high
