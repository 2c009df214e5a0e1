"""librdkafka-style ``kafka.*`` settings mapped onto the executors' fetch client."""

from __future__ import annotations

import re
import ssl

import pytest

from vdl.adapters.spark.fetch_client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    client_settings,
    isolation_level,
)


def test_security_settings_map_onto_kafka_python_names() -> None:
    settings = client_settings(
        "a:1,b:2",
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "scram-sha-512",
            "sasl.username": "alice",
            "sasl.password": "pw",
            "ssl.ca.location": "/ca.pem",
            "ssl.certificate.location": "/c.pem",
            "ssl.key.location": "/k.pem",
            "client.id": "me",
            "socket.timeout.ms": "5000",
        },
    )
    assert settings == {
        "bootstrap_servers": ["a:1", "b:2"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "pw",
        "ssl_cafile": "/ca.pem",
        "ssl_certfile": "/c.pem",
        "ssl_keyfile": "/k.pem",
        "client_id": "me",
        "request_timeout_ms": 5000,
        "ssl_check_hostname": True,
    }


def test_hostname_and_certificate_checks_can_be_turned_off_as_in_librdkafka() -> None:
    settings = client_settings(
        "a:1",
        {
            "ssl.endpoint.identification.algorithm": "none",
            "enable.ssl.certificate.verification": "false",
        },
    )
    assert settings["ssl_check_hostname"] is False
    assert settings["ssl_context"].verify_mode == ssl.CERT_NONE


def test_consumer_tuning_is_ignored_but_unknown_security_settings_are_refused() -> None:
    tuning = {"fetch.wait.max.ms": "10", "queued.min.messages": "5", "group.id": "g"}
    assert client_settings("a:1", tuning) == {
        "bootstrap_servers": ["a:1"],
        "ssl_check_hostname": True,
    }
    for key in ("ssl.keystore.location", "sasl.oauthbearer.config", "security.providers"):
        with pytest.raises(ValueError, match=re.escape(f'"kafka.{key}"')):
            client_settings("a:1", {key: "x"})


def test_isolation_level_defaults_to_read_committed_as_librdkafka() -> None:
    assert isolation_level({}) == READ_COMMITTED
    assert isolation_level({"isolation.level": "read_uncommitted"}) == READ_UNCOMMITTED
    with pytest.raises(ValueError, match=r"isolation\.level"):
        isolation_level({"isolation.level": "dirty"})
