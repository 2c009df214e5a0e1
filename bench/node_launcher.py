"""Start one `python -m vdl.node` for a benchmark and stop it cleanly (SIGTERM, wait).

Kept in bench/ rather than importing the tests package, so a benchmark runs from a plain
checkout with `python bench/produce.py`.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

REPO_ROOT = Path(__file__).resolve().parents[1]


def _node_has_setting(name: str) -> bool:
    """Whether this checkout's node takes a setting (the bench runs across its history)."""
    from vdl.config import NodeConfig

    return name in {f.name for f in dataclasses.fields(NodeConfig)}


class NodeStartError(RuntimeError):
    """The node exited or never listened; the message carries its log tail."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BenchNode:
    def __init__(self, data_dir: Path, log_path: Path, *extra_args: str) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = free_port()
        self.extra_args = list(extra_args)
        if _node_has_setting("grpc_listen"):
            # The built-in gRPC default (2135) would collide with other nodes on the machine.
            self.extra_args[:0] = ["--grpc-listen", f"127.0.0.1:{free_port()}"]
        self.admin_port: int | None = None
        if _node_has_setting("admin_listen") and "--admin-listen" not in self.extra_args:
            # Likewise the admin listener's (9644).
            self.admin_port = free_port()
            self.extra_args[:0] = ["--admin-listen", f"127.0.0.1:{self.admin_port}"]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 30.0) -> BenchNode:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "vdl.node",
                    "--data-dir",
                    str(self.data_dir),
                    "--kafka-listen",
                    self.bootstrap,
                    *self.extra_args,
                ],
                stdout=log,
                stderr=log,
                # The checkout under test, not whatever `vdl` another path might hold.
                cwd=REPO_ROOT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NodeStartError(
                    f"node exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise NodeStartError(f"node did not listen within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40, width: int = 300) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        # Tracebacks can quote huge literals (serialized descriptors); keep lines readable.
        return "\n".join(line[:width] for line in text.splitlines()[-lines:])

    def cpu_seconds(self) -> float | None:
        """User+system CPU time of the node so far (Linux /proc), or None if unavailable."""
        times = self.cpu_times()
        return None if times is None else sum(times)

    def cpu_times(self) -> tuple[float, float] | None:
        """(user, system) CPU time of the node so far (Linux /proc), or None if unavailable:
        system time is the kernel's work for it (copies into sockets and the page cache)."""
        if self.process is None:
            return None
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        except OSError:
            return None
        # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
        fields = stat.rpartition(")")[2].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, wait for a clean exit; kill only if it does not come."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def __enter__(self) -> BenchNode:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
