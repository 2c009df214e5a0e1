"""What a benchmark result needs to be comparable later: machine, filesystem, versions."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from confluent_kafka import libversion as librdkafka_version
from node_launcher import REPO_ROOT


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _filesystem_of(path: Path) -> str | None:
    """Filesystem type holding `path`, from the longest matching mount point."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    target = str(path.resolve())
    best, fstype = "", None
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and (
            target == parts[1] or target.startswith(parts[1].rstrip("/") + "/")
        ):
            if len(parts[1]) > len(best):
                best, fstype = parts[1], parts[2]
    return fstype


def _git_revision() -> str | None:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("-dirty" if dirty else "")


def machine_info(workdir: Path) -> dict[str, Any]:
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        # The machine is shared: the load at the start says how much to trust the numbers.
        "load_average": os.getloadavg(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "filesystem": _filesystem_of(workdir),
        "git": _git_revision(),
        "packages": {
            "confluent-kafka": _package_version("confluent-kafka"),
            "librdkafka": librdkafka_version()[0],
            "kafka-python": _package_version("kafka-python"),
            "trio": _package_version("trio"),
            "rocksdict": _package_version("rocksdict"),
            "vdl": _package_version("vdl"),
        },
    }


RESULTS_DIR = Path(__file__).resolve().parent / "results"


def save_result(name: str, started: dt.datetime, result: dict[str, Any]) -> Path:
    """Write a bench's result as bench/results/<name>-<UTC start>.json and say so."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {path.relative_to(REPO_ROOT)}")
    return path
