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
