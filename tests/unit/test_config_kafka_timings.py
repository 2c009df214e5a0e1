"""The Kafka listener's TCP keepalive timing and the idempotent producers' expiry are node
settings: flags, VDL_* variables and TOML keys, with Kafka's defaults and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from vdl.config import ConfigError, load_config


def test_defaults_are_kafka_like() -> None:
    config = load_config([], {})
    assert config.producer_id_expiration_ms == 86_400_000  # Kafka's producer.id.expiration.ms
    assert (config.tcp_keepalive_idle_s, config.tcp_keepalive_interval_s) == (60, 10)
    assert config.tcp_keepalive_count == 6


def test_flags_environment_and_file(tmp_path: Path) -> None:
    toml = tmp_path / "vdl.toml"
    toml.write_text(
        "producer-id-expiration-ms = 3600000\ntcp_keepalive_idle_s = 30\ntcp-keepalive-count = 3\n"
    )
    env = {"VDL_TCP_KEEPALIVE_INTERVAL_S": "4", "VDL_TCP_KEEPALIVE_COUNT": "9"}
    config = load_config(["--config", str(toml), "--tcp-keepalive-idle-s", "45"], env)
    assert config.producer_id_expiration_ms == 3_600_000  # file
    assert config.tcp_keepalive_idle_s == 45  # flag over file
    assert config.tcp_keepalive_interval_s == 4  # environment
    assert config.tcp_keepalive_count == 9  # environment over file
    assert load_config([], {"VDL_PRODUCER_ID_EXPIRATION_MS": "1000"}).producer_id_expiration_ms == (
        1000
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tcp-keepalive-idle-s", "0"], "tcp-keepalive-idle-s must be between 1 and 32767"),
        (["--tcp-keepalive-idle-s", "40000"], "tcp-keepalive-idle-s must be between 1 and 32767"),
        (["--tcp-keepalive-interval-s", "-5"], "tcp-keepalive-interval-s must be between 1"),
        (["--tcp-keepalive-count", "128"], "tcp-keepalive-count must be between 1 and 127"),
        (["--tcp-keepalive-count", "often"], "bad value 'often' for tcp-keepalive-count"),
        (["--producer-id-expiration-ms", "0"], "producer-id-expiration-ms must be at least 1"),
        (["--producer-id-expiration-ms", "1d"], "bad value '1d' for producer-id-expiration-ms"),
    ],
)
def test_bad_values_name_the_setting(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(argv, {})
