"""The README's Spark pipeline on a real Spark standalone cluster, against a 3-node VDL cluster.

A master and a worker run as their own processes on loopback (`spark-class`, which the pyspark
package ships); VDL reaches the executors as the README's "On a real cluster" section says,
as a packed virtualenv built from the wheel and shipped with `--archives`, and the commands
are taken from that section. During the run the node leading the output topic's first
partition is killed -9; the pipeline must still finish, and its Parquet and topic outputs must
hold every closed window exactly once.

Marked slow: building and packing the executors' environment and starting the Spark JVMs take
minutes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.cluster_support import Cluster
from tests.integration.node_process import free_port
from tests.integration.pipeline_windows import (
    expected_windows,
    parquet_windows,
    partitions_of,
    topic_windows,
)
from tests.integration.spark_support import read_topic
from tests.integration.waiting import wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SPARK_CLASS = BIN / "spark-class"
EVENTS = 20_000


def readme_recipe() -> list[list[str]]:
    """The command lines of the README's "On a real cluster" block, split."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### On a real cluster") :]
    start = section.index("```sh\n") + 6
    block = section[start : section.index("\n```", start)]
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line]


def spark_env() -> dict[str, str]:
    """Loopback only; spark-submit finds its Spark home through the venv's bin; no
    PYSPARK_PYTHON, so executors can only use the interpreter the command line names."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def run(argv: list[str], cwd: Path, timeout: float, **env: str) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env={**spark_env(), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


@dataclass(frozen=True)
class Standalone:
    url: str  # the master's
    work: Path  # the worker's work dir: one directory per application and executor


@pytest.fixture(scope="module")
def spark_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A standalone master and one worker (2 cores), each its own process."""
    root = tmp_path_factory.mktemp("spark-standalone")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    logs = [(root / "master.log").open("w"), (root / "worker.log").open("w")]
    conf = ["-Dspark.master.rest.enabled=false"]
    master = subprocess.Popen(
        [
            *(str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"),
            *("--port", str(port), "--webui-port", str(free_port())),
        ],
        env={**spark_env(), "SPARK_MASTER_OPTS": " ".join(conf)},
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [
            *(
                str(SPARK_CLASS),
                "org.apache.spark.deploy.worker.Worker",
                url,
                "--host",
                "127.0.0.1",
            ),
            *("--cores", "2", "--memory", "2g", "--webui-port", str(free_port())),
            *("--work-dir", str(root / "work")),
        ],
        env=spark_env(),
        stdout=logs[1],
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: "Successfully registered with master" in (root / "worker.log").read_text(),
            "the Spark worker registered with its master",
            timeout=120,
        )
        yield Standalone(url, root / "work")
    finally:
        for process in (worker, master):
            process.terminate()
        for process in (worker, master):
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)
        for log in logs:
            log.close()


@pytest.fixture(scope="module")
def vdl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("vdl"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_readme_recipe_runs_the_pipeline_exactly_once_through_a_leader_kill(
    tmp_path: Path, spark_master: Standalone, vdl_cluster: Cluster
) -> None:
    wheel, venv, install, pack, submit = readme_recipe()
    # Build and pack the executors' environment exactly as the README says.
    assert wheel[:3] == [".venv/bin/pip", "wheel", "."]
    run([str(BIN / "pip"), *wheel[1:2], str(REPO), *wheel[3:]], tmp_path, 600)
    assert venv[:3] == ["python3", "-m", "venv"]
    run(venv, tmp_path, 120)
    assert install[0] == "env/bin/pip"
    run([str(tmp_path / install[0]), *install[1:]], tmp_path, 900)
    assert pack[0] == "env/bin/venv-pack"
    run([str(tmp_path / pack[0]), *pack[1:]], tmp_path, 600)

    bootstrap = vdl_cluster.bootstrap
    vdl_cluster.create_topic("events", 2)
    vdl_cluster.create_topic("event-stats", 2)
    run(
        [
            *(sys.executable, str(REPO / "spark" / "generate_events.py")),
            *("--bootstrap", bootstrap, "--events", str(EVENTS), "--rate", "20000"),
        ],
        tmp_path,
        120,
    )

    # spark-submit, from the README's line: the master, the bootstrap and the outputs swapped in.
    env_words, command = submit[:1], submit[1:]
    assert env_words == ["PYSPARK_DRIVER_PYTHON=$PWD/.venv/bin/python"]
    assert command[0] == ".venv/bin/spark-submit"
    argv = [str(BIN / "spark-submit"), *command[1:]]
    argv[argv.index("--master") + 1] = spark_master.url
    argv[argv.index("--bootstrap") + 1] = bootstrap
    app = argv.index("spark/pipeline.py")
    output, checkpoint = tmp_path / "stats", tmp_path / "checkpoints"
    argv[app:] = [
        *("--conf", "spark.ui.enabled=false", str(REPO / "spark" / "pipeline.py")),
        *argv[app + 1 :],
        *("--trigger", "available-now", "--output-path", str(output)),
        *("--checkpoint", str(checkpoint)),
    ]
    log = (tmp_path / "submit.log").open("w")
    pipeline = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env={**spark_env(), "PYSPARK_DRIVER_PYTHON": sys.executable},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # Once the topic query has planned its batch (its offsets are in the checkpoint), kill
        # the node leading the output topic's partition 0: reads and writes meet a new leader.
        wait_until(
            lambda: (checkpoint / "vdl" / "offsets" / "0").exists() or pipeline.poll() is not None,
            "the pipeline planned its batch",
            timeout=600,
        )
        victim = vdl_cluster.leaders("event-stats")[0]
        assert victim > 0
        vdl_cluster.nodes[victim].kill()
        assert pipeline.wait(900) == 0, (tmp_path / "submit.log").read_text()[-8000:]
    finally:
        if pipeline.poll() is None:
            pipeline.kill()
            pipeline.wait(30)
        log.close()
    vdl_cluster.nodes[victim].start()

    alive = vdl_cluster.alive_bootstrap()
    events = [
        json.loads(value or b"")
        for (_, value), _ in read_topic(alive, "events", partitions_of(alive, "events"))
    ]
    assert len(events) == EVENTS
    closed, _ = expected_windows(events)
    assert len({start for start, _ in closed}) >= 5
    stats = read_topic(alive, "event-stats", partitions_of(alive, "event-stats"))
    assert parquet_windows(output) == closed
    assert topic_windows(stats) == closed
    # The executors got the shipped environment: Spark unpacked it in their working dirs.
    assert list(spark_master.work.glob("app-*/*/env/bin/python"))
