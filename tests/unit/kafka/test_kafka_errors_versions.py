from typing import Any

import kafka.errors as kerrors
import pytest

from vdl.log.error_codes import ErrorCode as LogErrorCode
from vdl.net.kafka.errors import ErrorCode, KafkaError, MalformedRequest, UnsupportedVersion
from vdl.net.kafka.header import kafka_request_classes, kafka_response_classes
from vdl.net.kafka.versions import (
    ADVERTISED,
    SASL_ADVERTISED,
    SERVED_PRODUCE_MIN,
    ApiKey,
    advertised,
    is_served,
)


def kafka_python_codes() -> dict[int, set[str]]:
    codes: dict[int, set[str]] = {}
    for name in dir(kerrors):
        obj = getattr(kerrors, name)
        if isinstance(obj, type) and issubclass(obj, kerrors.BrokerResponseError):
            cls: Any = obj
            if getattr(cls, "errno", None) is not None:
                codes.setdefault(cls.errno, set()).add(cls.message)
    return codes


def test_error_codes_agree_with_kafka_python() -> None:
    known = kafka_python_codes()
    # kafka-python's names differ for a few codes (older Kafka spellings).
    aliases = {
        "NONE": "NO_ERROR",
        "UNKNOWN_SERVER_ERROR": "UNKNOWN",
        "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
        "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
        "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
        "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
    }
    for code in ErrorCode:
        assert aliases.get(code.name, code.name) in known[int(code)], code


def test_one_enum() -> None:
    assert ErrorCode is LogErrorCode


def test_kafka_error_carries_code() -> None:
    err = KafkaError(ErrorCode.NOT_CONTROLLER, "ask node 2")
    assert err.code == 41 and err.message == "ask node 2"
    assert isinstance(MalformedRequest("x"), KafkaError)
    assert MalformedRequest("x").code == ErrorCode.INVALID_REQUEST
    assert UnsupportedVersion(0, 2).code == ErrorCode.UNSUPPORTED_VERSION


def test_advertised_set_is_the_recommended_one() -> None:
    assert ADVERTISED == {
        0: (0, 8), 1: (4, 11), 2: (1, 5), 3: (0, 12), 8: (2, 7), 9: (1, 8), 10: (0, 2),
        11: (0, 5), 12: (0, 3), 13: (0, 3), 14: (0, 3), 15: (0, 4), 16: (0, 2),
        18: (0, 4), 19: (2, 7), 20: (1, 6), 22: (0, 4), 32: (1, 3), 37: (0, 1),
        33: (0, 1), 35: (0, 1), 44: (0, 1), 60: (0, 1),
        21: (0, 1), 23: (2, 3),
        29: (1, 3), 30: (1, 3), 31: (1, 3), 50: (0, 0), 51: (0, 0),
        42: (0, 1), 43: (0, 1), 47: (0, 0),
        24: (0, 3), 25: (0, 3), 26: (0, 3), 28: (0, 3), 65: (0, 0), 66: (0, 1),
        61: (0, 0),
    }  # fmt: skip
    assert set(ADVERTISED) <= {int(k) for k in ApiKey}
    assert advertised(sasl=True) == {**ADVERTISED, 17: (0, 1), 36: (0, 1)}
    assert SASL_ADVERTISED.keys() == {17, 36}


@pytest.mark.parametrize("key", sorted({**ADVERTISED, **SASL_ADVERTISED}))
def test_every_advertised_version_is_known_to_the_library(key: int) -> None:
    _low, high = {**ADVERTISED, **SASL_ADVERTISED}[key]
    assert kafka_request_classes()[key].max_version >= high
    assert kafka_response_classes()[key].max_version >= high


def test_advertised_versions_are_not_flexible_except_api_versions() -> None:
    from vdl.net.kafka.header import is_flexible

    # Besides ApiVersions, the topic-id APIs (KIP-516) go into their flexible versions.
    topic_ids = {ApiKey.METADATA, ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS}
    # IncrementalAlterConfigs v1 is flexible; DescribeCluster has only flexible versions.
    topic_ids |= {ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DESCRIBE_CLUSTER}
    # The ACL APIs go to v3 (flexible from v2); the SCRAM credential APIs are flexible-only.
    topic_ids |= {ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS}
    topic_ids |= {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS}
    # The transaction APIs go to the versions current clients send (KIP-360, KIP-588, KIP-664).
    topic_ids |= {ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.END_TXN}
    topic_ids |= {ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.TXN_OFFSET_COMMIT}
    topic_ids |= {ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS}
    topic_ids |= {ApiKey.DESCRIBE_PRODUCERS}  # flexible-only (KIP-664)
    topic_ids |= {ApiKey.OFFSET_FETCH}  # v7 require_stable (KIP-447), v8 groups (KIP-709)
    for key, (_low, high) in ADVERTISED.items():
        if key == ApiKey.API_VERSIONS or key in topic_ids:
            continue
        assert not is_flexible(key, high), key


def test_produce_v0_2_advertised_but_not_served() -> None:
    assert SERVED_PRODUCE_MIN == 3
    assert not is_served(ApiKey.PRODUCE, 2)
    assert is_served(ApiKey.PRODUCE, 3) and is_served(ApiKey.PRODUCE, 8)
    assert not is_served(ApiKey.PRODUCE, 9)
    assert not is_served(ApiKey.FETCH, 3)
    assert not is_served(ApiKey.SASL_HANDSHAKE, 1)
    assert is_served(ApiKey.SASL_HANDSHAKE, 1, advertised(sasl=True))
