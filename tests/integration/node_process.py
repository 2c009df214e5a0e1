"""Real `python -m vdl.node` processes on loopback, for tests that use real clients."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from vdl.metrics.stages import SNAPSHOT_FILE, Histogram, load_snapshot, merged

# Below Linux's default ephemeral range (32768-60999): a port the kernel hands to some
# outgoing client socket between our check and the node's bind would make the node fail
# to start. Each test process starts at its own place so parallel runs rarely meet.
_PORTS = itertools.cycle(range(20000, 32000))
for _ in range(os.getpid() % 12000):
    next(_PORTS)


def free_port() -> int:
    """A loopback port that is free now and outside the ephemeral range."""
    for _ in range(12000):
        port = next(_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port in 20000-31999")


class NodeProcess:
    """One node process; `stop()` sends SIGTERM and returns the exit code."""

    def __init__(
        self,
        data_dir: Path,
        *extra_args: str,
        kafka_port: int | None = None,
        grpc_port: int | None = None,
        admin_port: int | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.kafka_port = kafka_port or free_port()
        # Always a free port: the built-in default (2135) would collide between tests.
        self.grpc_port = grpc_port or free_port()
        # Likewise the admin HTTP listener's (9644).
        self.admin_port = admin_port or free_port()
        self.extra_args = list(extra_args)
        self.log_path = data_dir.parent / f"{data_dir.name}-node.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def start(self, timeout: float = 30.0) -> NodeProcess:
        self.spawn()
        return self.wait_listening(timeout)

    def spawn(self) -> None:
        """Start the process without waiting for it (see `wait_listening`)."""
        log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vdl.node",
                "--data-dir",
                str(self.data_dir),
                "--kafka-listen",
                self.bootstrap,
                "--grpc-listen",
                self.grpc_address,
                "--admin-listen",
                f"127.0.0.1:{self.admin_port}",
                *self.extra_args,
            ],
            stdout=log,
            stderr=log,
            env=env,
        )
        log.close()

    def wait_listening(self, timeout: float = 30.0) -> NodeProcess:
        """Wait until the spawned process listens on its Kafka and gRPC ports."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"node exited with {self.process.returncode}:\n{self.log()}")
            try:
                # The gRPC listener opens after the Kafka one: wait for both.
                for port in (self.kafka_port, self.grpc_port):
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        pass
                return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"node did not listen within {timeout}s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def rss(self) -> int:
        """The node process's resident set size (VmRSS), in bytes."""
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS in /proc status")

    def peak_rss(self) -> int:
        """The node process's peak resident set size so far (VmHWM), in bytes."""
        assert self.process is not None
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc status")

    def stage_snapshot(self, timeout: float = 10.0) -> tuple[dict[str, Histogram], dict[str, int]]:
        """Ask the node for its stage histograms and counters (SIGUSR1, vdl/node.py) and read
        them once written: the histograms merged by name, the counters by labelled name."""
        assert self.process is not None
        path = self.data_dir / SNAPSHOT_FILE
        before = path.stat().st_mtime_ns if path.exists() else -1
        os.kill(self.process.pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while not (path.exists() and path.stat().st_mtime_ns != before):
            assert time.monotonic() < deadline, f"no snapshot written to {path}"
            time.sleep(0.05)
        histograms, counters = load_snapshot(path)
        return merged(histograms), counters

    def stop(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def __enter__(self) -> NodeProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.alive():
            try:
                self.stop(30)
            except subprocess.TimeoutExpired:
                self.kill()


def refused_start(data_dir: Path, *flags: str) -> list[str]:
    """Start `python -m vdl.node` with `flags` expecting it to refuse: exit code 2, no
    traceback, and its stderr lines, of which the last is the one error line (listeners
    opened before the failing one may have said at INFO that they listen)."""
    if "--admin-listen" not in flags:
        # Not the built-in 9644, which a node of the machine may hold.
        flags = ("--admin-listen", "none", *flags)
    done = subprocess.run(
        [sys.executable, "-m", "vdl.node", "--data-dir", str(data_dir), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("vdl-node: "), lines
    assert all(" INFO " in line for line in lines[:-1]), lines
    return lines


def closed_by_node(sock: socket.socket, timeout: float = 10) -> bool:
    """True if the node closes (or resets) `sock` within `timeout` without a byte."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
