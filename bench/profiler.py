"""`py-spy record` attached to the node while one benchmark phase runs (optional).

py-spy samples another process without changing it, so the node under test is the same
`python -m vdl.node` a user runs; only the sampling overhead (a few percent) is added.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


class ProfileRecorder:
    """`py-spy record` attached to the node while a phase runs (optional)."""

    def __init__(self, pid: int, output: Path) -> None:
        self.pid = pid
        self.output = output
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("py-spy") or shutil.which(
            "py-spy", path=str(Path(sys.executable).parent)
        )
        if exe is None:
            print("py-spy not found: profiling skipped", file=sys.stderr)
            return
        suffix = self.output.suffix
        fmt = {".svg": "flamegraph", ".json": "speedscope"}.get(suffix, "raw")
        self.process = subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(self.pid),
                "--output",
                str(self.output),
                "--format",
                fmt,
                "--rate",
                "200",
                "--threads",
                # Idle samples too: time the flusher thread spends inside fdatasync and the
                # event loop spends waiting are part of where a produce request's time goes.
                "--idle",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # py-spy needs a moment to attach; samples before that would be lost anyway.
        time.sleep(1.0)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            # SIGINT makes py-spy write its output before exiting.
            self.process.send_signal(signal.SIGINT)
        try:
            _, stderr = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, stderr = self.process.communicate()
        if self.process.returncode not in (0, -signal.SIGINT):
            print(
                f"py-spy exited {self.process.returncode}: {stderr.decode()[-500:]}",
                file=sys.stderr,
            )
