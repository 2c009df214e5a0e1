"""The README's Spark pipeline, run as written: its commands, a real node, both outputs checked.

The generator and the pipeline are started exactly as the README's "The pipeline in `spark/`"
section gives them (only the node address and the output paths added), the input topic is read
back, and what Spark's append mode must have written is computed from it: a window is written
once the watermark (latest event time - 2 minutes) passes its end; the rest stay open.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

from tests.integration.node_process import NodeProcess
from tests.integration.pipeline_windows import (
    TYPES,
    Windows,
    expected_windows,
    parquet_windows,
    partitions_of,
    topic_windows,
)
from tests.integration.spark_support import SPARK_ENV, read_topic

REPO = Path(__file__).resolve().parents[2]


def readme_commands() -> list[list[str]]:
    """The `.venv/bin/python spark/...` lines of the README's pipeline section, split."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### The pipeline in `spark/`") :]
    block = section[section.index("```sh\n") + 6 : section.index("\n```", section.index("```sh"))]
    return [
        shlex.split(line, comments=True)
        for line in block.splitlines()
        if line.startswith(".venv/bin/python spark/")
    ]


def printed_table(stdout: str, heading: str) -> Windows:
    """A table the pipeline printed under a line starting with ``heading``."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    assert lines[start + 1].split() == ["window", "(UTC)", *TYPES, "total"]
    out: Windows = Counter()
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        day, span, *numbers = line.split()
        counts = [int(n) for n in numbers]
        assert len(counts) == len(TYPES) + 1 and sum(counts[:-1]) == counts[-1], line
        begin = datetime.fromisoformat(f"{day}T{span.split('-')[0]}:00+00:00")
        for kind, count in zip(TYPES, counts, strict=False):
            if count:
                out[(round(begin.timestamp() * 1000), kind)] = count
    return out


def test_readme_pipeline_writes_closed_windows_to_parquet_and_a_topic(tmp_path: Path) -> None:
    generate, run_pipeline = readme_commands()
    assert generate[:2] == [".venv/bin/python", "spark/generate_events.py"]
    assert run_pipeline[:2] == [".venv/bin/python", "spark/pipeline.py"]
    generated = int(generate[generate.index("--events") + 1])
    output_path, checkpoint = tmp_path / "stats", tmp_path / "checkpoints"

    with NodeProcess(tmp_path / "data") as node:

        def run(command: list[str], *extra: str, timeout: float) -> str:
            argv = [sys.executable, str(REPO / command[1]), *command[2:], *extra]
            done = subprocess.run(
                [*argv, "--bootstrap", node.bootstrap],
                cwd=tmp_path,
                env={**os.environ, **SPARK_ENV},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr[-5000:]}"
            return done.stdout

        run(generate, timeout=120)
        printed = run(
            run_pipeline,
            "--output-path",
            str(output_path),
            "--checkpoint",
            str(checkpoint),
            timeout=300,
        )

        # What Spark must have done, from the events as stored in the input topic.
        events = [
            json.loads(value or b"")
            for (_, value), _ in read_topic(
                node.bootstrap, "events", partitions_of(node.bootstrap, "events")
            )
        ]
        assert len(events) == generated
        closed, still_open = expected_windows(events)
        # The README's default event time spans several windows plus the watermark.
        assert len({start for start, _ in closed}) >= 5
        assert still_open

        stats_partitions = partitions_of(node.bootstrap, "event-stats")
        stats = read_topic(node.bootstrap, "event-stats", stats_partitions)

    assert parquet_windows(output_path) == closed
    assert topic_windows(stats) == closed

    # What the pipeline printed: the same windows, and every event accounted for. All events
    # come in one micro-batch whose watermark is the initial one, so none is dropped as late.
    assert printed_table(printed, "Windows written by this run") == closed
    assert printed_table(printed, "Still open") == still_open
    accounting = re.search(
        r"^(\d+) events read \+ (\d+) held in open windows before = (\d+) in (\d+) windows "
        r"written \+ (\d+) in (\d+) windows still open \+ (-?\d+) dropped as late$",
        printed,
        re.MULTILINE,
    )
    assert accounting is not None, printed
    assert [int(n) for n in accounting.groups()] == [
        generated,
        0,
        closed.total(),
        len({start for start, _ in closed}),
        still_open.total(),
        len({start for start, _ in still_open}),
        0,
    ]
    assert closed.total() + still_open.total() == generated
