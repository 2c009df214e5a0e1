"""A node that cannot start as configured says why in one line and exits 2.

Each listener's port taken by another socket, and a data directory another node holds
(RocksDB's lock): no traceback, one line naming what could not be done."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.node_process import NodeProcess, free_port, refused_start


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("listener", ["Kafka", "gRPC", "raft"])
def test_a_taken_port_is_one_line_and_exit_2(
    tmp_path: Path, taken_port: int, listener: str
) -> None:
    kafka = taken_port if listener == "Kafka" else free_port()
    grpc = taken_port if listener == "gRPC" else free_port()
    flags = ["--kafka-listen", f"127.0.0.1:{kafka}", "--grpc-listen", f"127.0.0.1:{grpc}"]
    if listener == "raft":
        peers = f"1=127.0.0.1:{taken_port},2=127.0.0.1:{free_port()},3=127.0.0.1:{free_port()}"
        flags += ["--node-id", "1", "--peers", peers, "--raft-insecure", "true"]
    line = refused_start(tmp_path / "data", *flags)[-1]
    assert f"cannot listen for {listener} on 127.0.0.1:{taken_port}" in line, line
    assert "in use" in line, line


def test_a_data_directory_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with NodeProcess(tmp_path / "data") as running:
        line = refused_start(running.data_dir, "--kafka-listen", f"127.0.0.1:{free_port()}")[-1]
        assert "LOCK" in line and str(running.data_dir) in line, line
        # The running node was not disturbed.
        with socket.create_connection(("127.0.0.1", running.kafka_port), timeout=10):
            pass
