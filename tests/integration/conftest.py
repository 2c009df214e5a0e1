from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.node_process import NodeProcess


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A one-node VDL process with embedded defaults on a free loopback port."""
    with NodeProcess(tmp_path / "data") as process:
        yield process
