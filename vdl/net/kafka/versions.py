"""The ApiVersions ranges VDL advertises (the Kafka protocol guide's API keys and versions).

Every range is capped at the API's last non-flexible version: flexible
versions add obligations (KIP-360 epoch bumps, topic ids, batched layouts)
without helping any of the supported clients.
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
    INIT_PRODUCER_ID = 22
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37


ADVERTISED: dict[int, tuple[int, int]] = {
    # Produce v0-2 are listed only so that librdkafka < 2.11.1 (kcat) keeps
    # compression enabled; they are rejected if they ever arrive (see
    # SERVED_PRODUCE_MIN), exactly as Kafka 4 does.
    ApiKey.PRODUCE: (0, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 5),
    ApiKey.METADATA: (0, 8),
    ApiKey.OFFSET_COMMIT: (2, 7),
    ApiKey.OFFSET_FETCH: (1, 5),
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.LIST_GROUPS: (0, 2),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 4),
    ApiKey.DELETE_TOPICS: (1, 3),
    ApiKey.INIT_PRODUCER_ID: (0, 1),
    ApiKey.DESCRIBE_CONFIGS: (1, 3),
    # v0-1 (v1 only differs in throttling); librdkafka sends at most v1.
    ApiKey.CREATE_PARTITIONS: (0, 1),
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
