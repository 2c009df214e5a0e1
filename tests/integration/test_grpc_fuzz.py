"""Fuzzing a real node's gRPC port: seeded random and mutated HTTP/2 connections
(`grpc_fuzz.py`) carrying frames of every kind and YDB messages good and bad. No input
may stop the node or reach a catch-all (a handler or connection that failed in a way
nobody checked for), every connection ends once our end has, and afterwards the YDB SDK
is served.

The default suite sends a few thousand inputs; `-m slow` sends GRPC_FUZZ_INPUTS (default
1,000,000) with GRPC_FUZZ_SEED (default 13) and checks the node's memory stays bounded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

from tests.integration.fuzz_support import send_connection
from tests.integration.grpc_fuzz import GrpcFuzz
from tests.integration.node_process import NodeProcess
from tests.integration.test_grpc_hardening import sdk_served

TOPIC = "fuzzed"
# Lines the catch-alls write (logger.exception): reaching one means some input got past
# every check.
CATCH_ALL = re.compile(r"(handler for \S+ failed|connection from .* failed|precheck for)")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    with NodeProcess(tmp_path_factory.mktemp("grpc-fuzz") / "data") as process:
        yield process


def fuzz(node: NodeProcess, seed: int, inputs: int) -> None:
    hung = 0
    for number, connection in enumerate(GrpcFuzz(seed, TOPIC).connections(inputs)):
        if not send_connection(node.grpc_port, connection.data):
            hung += 1
        if number % 200 == 0:
            assert node.alive(), node.log()[-3000:]
    assert hung == 0, f"{hung} connections were not closed after our end closed"
    assert node.alive(), node.log()[-3000:]
    log = node.log()
    assert "Traceback" not in log, log[-3000:]
    caught = [line for line in log.splitlines() if CATCH_ALL.search(line)]
    assert not caught, caught[:5]
    sdk_served(node)


def test_a_short_fuzz_of_the_grpc_port(node: NodeProcess) -> None:
    fuzz(node, seed=1, inputs=3000)


@pytest.mark.slow
def test_a_long_fuzz_of_the_grpc_port(node: NodeProcess) -> None:
    inputs = int(os.environ.get("GRPC_FUZZ_INPUTS", "1000000"))
    before = node.rss() / 2**20
    fuzz(node, seed=int(os.environ.get("GRPC_FUZZ_SEED", "13")), inputs=inputs)
    after = node.rss() / 2**20
    print(f"gRPC fuzz: {inputs} inputs, node RSS {before:.0f} -> {after:.0f} MiB")
    # Bounded: nothing a connection sent stays behind once it is closed.
    assert after < before + 256, (before, after)
