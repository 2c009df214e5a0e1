from __future__ import annotations

from pathlib import Path

import pytest

from vdl.config import ConfigError, HostPort, NodeConfig, load_config


def test_defaults_make_a_one_node_cluster() -> None:
    config = load_config([], {})
    assert config == NodeConfig()
    assert config.data_dir == Path("vdl-data")
    assert config.kafka_listen == HostPort("127.0.0.1", 9092)
    assert config.log_backend == "segment"


def test_flags_beat_environment_beat_file(tmp_path: Path) -> None:
    toml = tmp_path / "vdl.toml"
    toml.write_text('data-dir = "from-file"\nlog_backend = "rocks"\ndefault-partitions = 4\n')
    env = {"VDL_DATA_DIR": "from-env", "VDL_KAFKA_LISTEN": "0.0.0.0:9000"}
    config = load_config(["--config", str(toml), "--kafka-listen", "127.0.0.1:9999"], env)
    assert config.data_dir == Path("from-env")
    assert config.kafka_listen == HostPort("127.0.0.1", 9999)
    assert config.log_backend == "rocks"
    assert config.default_partitions == 4


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-backend", "floppy"],
        ["--kafka-listen", "nohost"],
        ["--kafka-listen", "127.0.0.1:70000"],
        ["--default-partitions", "0"],
        ["--segment-bytes", "lots"],
        ["--auto-create-topics", "maybe"],
    ],
)
def test_bad_values_name_the_setting(argv: list[str]) -> None:
    with pytest.raises(ConfigError):
        load_config(argv, {})


def test_unknown_file_key_is_an_error(tmp_path: Path) -> None:
    toml = tmp_path / "vdl.toml"
    toml.write_text("colour = 'blue'\n")
    with pytest.raises(ConfigError, match="colour"):
        load_config(["--config", str(toml)], {})


def test_offset_retention_settings(tmp_path: Path) -> None:
    default = load_config([], {})
    assert default.offsets_retention == 10080 * 60_000
    assert default.offsets_retention_check_interval_ms == 600_000
    toml = tmp_path / "vdl.toml"
    toml.write_text("offsets-retention-minutes = 60\n")
    assert load_config(["--config", str(toml)], {}).offsets_retention == 3_600_000
    # The millisecond setting wins over the minutes, wherever each comes from.
    precise = load_config(
        ["--config", str(toml), "--offsets-retention-check-interval-ms", "250"],
        {"VDL_OFFSETS_RETENTION_MS": "1500"},
    )
    assert (precise.offsets_retention, precise.offsets_retention_check_interval_ms) == (1500, 250)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--offsets-retention-minutes", "0"], "offsets-retention-minutes"),
        (["--offsets-retention-ms", "0"], "offsets-retention-ms"),
        (["--offsets-retention-check-interval-ms", "-5"], "offsets-retention-check-interval-ms"),
        (["--offsets-retention-ms", "soon"], "offsets-retention-ms"),
    ],
)
def test_bad_offset_retention_is_refused(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(argv, {})
