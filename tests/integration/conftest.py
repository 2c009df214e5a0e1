from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster_support import Cluster
from tests.integration.node_process import NodeProcess


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A one-node VDL process with embedded defaults on a free loopback port."""
    with NodeProcess(tmp_path / "data") as process:
        yield process


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three VDL nodes on loopback (RF 3 by default), stopped after the test."""
    c = Cluster(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.stop()
