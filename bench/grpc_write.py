"""YDB StreamWrite throughput through our gRPC layer against grpcio, in one run.

    .venv/bin/python bench/grpc_write.py [--sizes 1024,65536] [--tls both|on|off] [--repeat N]

Servers, each its own process so its CPU time can be read on its own:

* **ours**: a real VDL node (`python -m vdl.node`, segment backend): our h2 gRPC server, the
  real StreamWrite session (protobuf parse, dedup table, record batches, durable append,
  acks only after the append is committed). It does strictly more than the baseline.
* **grpcio**: `ack_only_server.py --impl grpcio`, grpcio's synchronous server parsing the
  same ``StreamWriteMessage.FromClient`` and acking every message; it stores nothing.
* **layer** (our gRPC layer alone): `ack_only_server.py --impl vdl`, our ``GrpcServer`` with
  exactly the grpcio baseline's handler, so the two gRPC stacks do the same work.

The ratio with a target is node / grpcio; layer / grpcio compares the gRPC stacks alone.

The client is grpcio in both cases (a generic stream_stream call, bytes in and out): an
init request, then write requests carrying many messages each, as the YDB SDK batches what
queued up while the previous request was being sent, with as many un-acked bytes in flight
as the server's flow control allows (the SDK's buffer is unlimited by default). Every ack is
checked (one per message, in order). Plaintext and TLS (trustme certificates) are measured
in the same run.

Targets (from the issue): ours >= 1.0x grpcio with 1 KiB messages and >= 0.8x with 64 KiB.
Each configuration runs ``--repeat`` times alternating the two servers; the best run of each
counts (a shared machine only ever makes a run slower). This is a benchmark, not a test:
it reports, never asserts. Everything it starts is stopped and removed on exit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import trustme
from machine import machine_info, save_result
from node_launcher import REPO_ROOT, BenchNode, NodeStartError, free_port
from profiler import ProfileRecorder

from vdl.net.ydb.protos import ydb_topic_pb2

FromClient = ydb_topic_pb2.StreamWriteMessage.FromClient
FromServer = ydb_topic_pb2.StreamWriteMessage.FromServer
STREAM_WRITE = "/Ydb.Topic.V1.TopicService/StreamWrite"
CREATE_TOPIC = "/Ydb.Topic.V1.TopicService/CreateTopic"
DATABASE = "/local"
METADATA = (("x-ydb-database", DATABASE), ("x-ydb-sdk-build-info", "vdl-bench"))
SUCCESS = 400000
MB = 1_000_000
MAX_MESSAGE = 64_000_000
# What the YDB SDK sets on its channels that matters for throughput.
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
]
TARGETS = {1024: 1.0, 65536: 0.8}
PAYLOAD_POOL = 16


@dataclass(slots=True)
class WriteRun:
    server: str
    tls: bool
    size: int
    messages: int
    per_request: int
    seconds: float
    server_cpu_s: float | None
    client_cpu_s: float

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.messages * self.size / self.seconds / MB

    @property
    def server_us_per_msg(self) -> float | None:
        if self.server_cpu_s is None:
            return None
        return self.server_cpu_s / self.messages * 1e6

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "msgs_per_s": self.msgs_per_s,
            "mb_per_s": self.mb_per_s,
            "server_cpu_us_per_msg": self.server_us_per_msg,
        }


def process_cpu_seconds(pid: int) -> float | None:
    """User+system CPU time of a process so far (Linux /proc), or None if unavailable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class AckOnlyServer:
    """`ack_only_server.py` in a subprocess; stopped with SIGTERM."""

    def __init__(self, impl: str, log_path: Path, cert: Path | None, key: Path | None) -> None:
        self.impl = impl
        self.port = free_port()
        self.log_path = log_path
        self.args = ["--impl", impl, "--port", str(self.port)]
        if cert is not None and key is not None:
            self.args += ["--tls-cert", str(cert), "--tls-key", str(key)]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> AckOnlyServer:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).with_name("ack_only_server.py")),
                    *self.args,
                ],
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=REPO_ROOT,
                # The checkout under test, as for the node, not whatever `vdl` is installed.
                env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
            )
        assert self.process.stdout is not None
        # The server prints one line once it listens; a dead process gives EOF instead.
        line = self.process.stdout.readline()
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(
                f"{self.impl} server did not start: {self.log_path.read_text()[-2000:]}"
            )
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        if self.process.stdout is not None:
            self.process.stdout.close()


def wait_listening(port: int, timeout: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class Window:
    """Un-acked messages in flight, bounded like the SDK's write buffer."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0
        self._cond = threading.Condition()
        self.closed = False

    def take(self, n: int) -> bool:
        with self._cond:
            while self.in_flight and self.in_flight + n > self.limit and not self.closed:
                self._cond.wait()
            self.in_flight += n
            return not self.closed

    def give(self, n: int) -> None:
        with self._cond:
            self.in_flight -= n
            self._cond.notify()

    def wait_closed(self) -> None:
        with self._cond:
            while not self.closed:
                self._cond.wait()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


def open_channel(port: int, ca_pem: bytes | None) -> grpc.Channel:
    target = f"127.0.0.1:{port}"
    if ca_pem is None:
        return grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    credentials = grpc.ssl_channel_credentials(root_certificates=ca_pem)
    return grpc.secure_channel(target, credentials, options=CHANNEL_OPTIONS)


def create_topic(channel: grpc.Channel, path: str) -> None:
    request = ydb_topic_pb2.CreateTopicRequest(path=path)
    raw = channel.unary_unary(CREATE_TOPIC)(
        request.SerializeToString(), metadata=METADATA, timeout=30
    )
    response = ydb_topic_pb2.CreateTopicResponse.FromString(raw)
    if response.operation.status != SUCCESS:
        raise RuntimeError(f"CreateTopic {path}: {response.operation}")


def write_stream(
    channel: grpc.Channel,
    topic: str,
    producer_id: str,
    size: int,
    messages: int,
    per_request: int,
    window_bytes: int,
    server_pid: int,
    server: str,
    tls: bool,
) -> WriteRun:
    """One StreamWrite session writing ``messages`` of ``size`` bytes; timed after init."""
    payloads = [os.urandom(size) for _ in range(PAYLOAD_POOL)]
    window = Window(max(per_request, window_bytes // size) if window_bytes else messages)
    initialised = threading.Event()
    created_s = int(time.time())

    def requests() -> Iterator[bytes]:
        init = FromClient()
        init.init_request.path = topic
        init.init_request.producer_id = producer_id
        init.init_request.message_group_id = producer_id
        init.init_request.get_last_seq_no = True
        yield init.SerializeToString()
        initialised.wait()
        seq_no = 0
        while seq_no < messages:
            n = min(per_request, messages - seq_no)
            if not window.take(n):
                return
            request = FromClient()
            write = request.write_request
            write.codec = 1
            for _ in range(n):
                seq_no += 1
                data = write.messages.add(
                    seq_no=seq_no,
                    data=payloads[seq_no % PAYLOAD_POOL],
                    uncompressed_size=size,
                )
                data.created_at.seconds = created_s
            yield request.SerializeToString()
        # The SDK never half-closes a write stream; it cancels it once everything is acked.
        window.wait_closed()

    call = channel.stream_stream(STREAM_WRITE)
    responses = call(requests(), metadata=METADATA, timeout=600)
    acked = 0
    try:
        first = FromServer.FromString(next(responses))
        if first.status != SUCCESS or not first.HasField("init_response"):
            raise RuntimeError(f"{server}: bad init response {first}")
        server_cpu_before, client_cpu_before = process_cpu_seconds(server_pid), _client_cpu_s()
        start = time.perf_counter()
        initialised.set()
        for raw in responses:
            reply = FromServer.FromString(raw)
            if reply.status != SUCCESS:
                raise RuntimeError(f"{server}: status {reply.status}: {reply.issues}")
            acks = reply.write_response.acks
            if not acks:
                continue
            if acks[0].seq_no != acked + 1 or acks[-1].seq_no != acked + len(acks):
                raise RuntimeError(f"{server}: acks out of order after seq_no {acked}")
            acked += len(acks)
            window.give(len(acks))
            if acked >= messages:
                break
        elapsed = time.perf_counter() - start
        server_cpu_after, client_cpu_after = process_cpu_seconds(server_pid), _client_cpu_s()
    finally:
        window.close()
        responses.cancel()  # as the SDK does on close: RST_STREAM(CANCEL)
    if acked < messages:
        raise RuntimeError(
            f"{server}: stream ended after {acked} of {messages} acks: "
            f"{responses.code()} {responses.details()}"
        )
    return WriteRun(
        server=server,
        tls=tls,
        size=size,
        messages=messages,
        per_request=per_request,
        seconds=elapsed,
        server_cpu_s=(
            None
            if server_cpu_before is None or server_cpu_after is None
            else server_cpu_after - server_cpu_before
        ),
        client_cpu_s=client_cpu_after - client_cpu_before,
    )


def issue_certs(ca: trustme.CA, directory: Path) -> tuple[Path, Path]:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(str(cert_file), append=True)
    cert.private_key_pem.write_to_path(str(key_file))
    return cert_file, key_file


def messages_for(size: int, args: argparse.Namespace) -> int:
    return max(1, int(args.mb * MB) // size)


def per_request_for(size: int, args: argparse.Namespace) -> int:
    return max(1, min(int(args.max_per_request), int(args.request_bytes) // size))


def run_mode(
    tls: bool, workdir: Path, ca: trustme.CA, args: argparse.Namespace, counter: list[int]
) -> list[WriteRun]:
    """Start a node and a grpcio server (both with or both without TLS) and measure."""
    mode = "tls" if tls else "plain"
    cert = key = None
    ca_pem: bytes | None = None
    if tls:
        cert, key = issue_certs(ca, workdir)
        ca_pem = ca.cert_pem.bytes()
    grpc_port = free_port()
    node_args = ["--log-level", "WARNING", "--grpc-listen", f"127.0.0.1:{grpc_port}"]
    if tls:
        node_args += ["--tls-cert", str(cert), "--tls-key", str(key)]
    node = BenchNode(workdir / f"node-{mode}", workdir / f"node-{mode}.log", *node_args)
    baseline = AckOnlyServer("grpcio", workdir / f"grpcio-{mode}.log", cert, key)
    layer = AckOnlyServer("vdl", workdir / f"layer-{mode}.log", cert, key)
    runs: list[WriteRun] = []
    try:
        node.start()
        wait_listening(grpc_port)
        baseline.start()
        layer.start()
        with (
            open_channel(grpc_port, ca_pem) as ours_channel,
            open_channel(layer.port, ca_pem) as layer_channel,
            open_channel(baseline.port, ca_pem) as grpcio_channel,
        ):
            servers = [
                ("ours", ours_channel, node.pid),
                ("layer", layer_channel, layer.pid),
                ("grpcio", grpcio_channel, baseline.pid),
            ]
            for size in args.sizes:
                topic = f"{DATABASE}/bench-{size}"
                create_topic(ours_channel, topic)
                messages = messages_for(size, args)
                per_request = per_request_for(size, args)
                for repeat in range(args.repeat):
                    # Alternate who goes first, so drift on a shared machine hits both.
                    order = servers if repeat % 2 == 0 else servers[::-1]
                    for name, channel, pid in order:
                        counter[0] += 1
                        # A short session first: connection, topic load, warm code paths.
                        write_stream(
                            channel,
                            topic,
                            f"warmup-{counter[0]}",
                            size,
                            max(per_request, messages // 20),
                            per_request,
                            args.window_bytes,
                            pid,
                            name,
                            tls,
                        )
                        profile = None
                        if args.py_spy is not None and name == "ours":
                            args.py_spy.mkdir(parents=True, exist_ok=True)
                            profile = ProfileRecorder(
                                pid,
                                args.py_spy / f"ours-{mode}-{size}-{repeat}.{args.py_spy_format}",
                            )
                            profile.start()
                        print(
                            f"{name} {mode} {size} B x {messages} ({per_request}/request)...",
                            file=sys.stderr,
                        )
                        try:
                            run = write_stream(
                                channel,
                                topic,
                                f"bench-{counter[0]}",
                                size,
                                messages,
                                per_request,
                                args.window_bytes,
                                pid,
                                name,
                                tls,
                            )
                        finally:
                            if profile is not None:
                                profile.stop()
                        print(
                            f"  {run.msgs_per_s:9.0f} msg/s {run.mb_per_s:7.1f} MB/s",
                            file=sys.stderr,
                        )
                        runs.append(run)
    except NodeStartError:
        raise
    except BaseException:
        print(f"node log tail:\n{node.log_tail()}", file=sys.stderr)
        raise
    finally:
        baseline.stop()
        layer.stop()
        exit_code = node.stop()
        if exit_code not in (0, None):
            print(f"node exited {exit_code}:\n{node.log_tail()}", file=sys.stderr)
    return runs


def best(runs: list[WriteRun], server: str, tls: bool, size: int) -> WriteRun | None:
    matching = [r for r in runs if (r.server, r.tls, r.size) == (server, tls, size)]
    return max(matching, key=lambda r: r.msgs_per_s) if matching else None


def summarize(runs: list[WriteRun]) -> list[dict[str, Any]]:
    rows = []
    for tls in sorted({r.tls for r in runs}):
        for size in sorted({r.size for r in runs}):
            ours, base = best(runs, "ours", tls, size), best(runs, "grpcio", tls, size)
            layer = best(runs, "layer", tls, size)
            if ours is None or base is None:
                continue
            ratio = ours.msgs_per_s / base.msgs_per_s
            target = TARGETS.get(size)
            rows.append(
                {
                    "tls": tls,
                    "size": size,
                    "ours": ours.as_dict(),
                    "grpcio": base.as_dict(),
                    "layer": None if layer is None else layer.as_dict(),
                    "ratio": ratio,
                    "layer_ratio": None if layer is None else layer.msgs_per_s / base.msgs_per_s,
                    "target": target,
                    "met": None if target is None else ratio >= target,
                }
            )
    return rows


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def render_table(rows: list[dict[str, Any]], args: argparse.Namespace, load: Any) -> str:
    header = (
        "VDL StreamWrite bench: grpcio client -> VDL node (ours) / our gRPC layer (layer) vs "
        f"grpcio sync server (decode+ack only); best of {args.repeat}; MB = 10^6 bytes"
    )
    lines = [
        header,
        "load average at start: " + ", ".join(f"{x:.2f}" for x in load),
        "-" * len(header),
    ]
    cells = [
        (
            "transport",
            "msg size",
            "ours msg/s",
            "ours MB/s",
            "ours srv µs/msg",
            "grpcio msg/s",
            "grpcio MB/s",
            "grpcio srv µs/msg",
            "ratio",
            "target",
            "layer msg/s",
            "layer srv µs/msg",
            "layer ratio",
        )
    ]
    for row in rows:
        ours, base, layer = row["ours"], row["grpcio"], row["layer"]
        target = row["target"]
        verdict = "" if target is None else (" met" if row["met"] else " NOT MET")
        cells.append(
            (
                "TLS" if row["tls"] else "plain",
                f"{row['size']} B x{ours['per_request']}/req",
                f"{ours['msgs_per_s']:.0f}",
                f"{ours['mb_per_s']:.1f}",
                _us(ours["server_cpu_us_per_msg"]),
                f"{base['msgs_per_s']:.0f}",
                f"{base['mb_per_s']:.1f}",
                _us(base["server_cpu_us_per_msg"]),
                f"{row['ratio']:.2f}x",
                ("" if target is None else f">= {target:.1f}x") + verdict,
                "" if layer is None else f"{layer['msgs_per_s']:.0f}",
                "" if layer is None else _us(layer["server_cpu_us_per_msg"]),
                "" if row["layer_ratio"] is None else f"{row['layer_ratio']:.2f}x",
            )
        )
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    for cell in cells:
        lines.append("  ".join(v.rjust(widths[i]) for i, v in enumerate(cell)).rstrip())
    window = f"{args.window_bytes // 1024} KiB" if args.window_bytes else "unlimited (SDK default)"
    lines.append(
        f"client window: {window} un-acked per stream; "
        "ours = python -m vdl.node (segment backend, acks after durable append); "
        "layer = our GrpcServer with the grpcio baseline's decode+ack handler"
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1024, 65536],
        help="message sizes in bytes, comma-separated",
    )
    parser.add_argument("--tls", choices=("both", "on", "off"), default="both")
    parser.add_argument("--mb", type=float, default=100.0, help="MB written per timed session")
    parser.add_argument(
        "--request-bytes",
        type=int,
        default=256 * 1024,
        help="payload bytes per write request (messages per request = this / size)",
    )
    parser.add_argument("--max-per-request", type=int, default=256)
    parser.add_argument(
        "--window-bytes",
        type=int,
        default=0,
        help="un-acked payload bytes per stream; 0 = no limit, the SDK's default, so the "
        "server's flow control decides",
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        help="directory for py-spy flame graphs of the node during its timed sessions",
    )
    parser.add_argument(
        "--py-spy-format",
        choices=("svg", "txt"),
        default="svg",
        help="flame graph, or collapsed stacks (txt) for scripts",
    )
    parser.add_argument("--no-save", action="store_true", help="do not write the JSON result")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="vdl-grpc-bench-"))
    started = dt.datetime.now(dt.UTC)
    machine = machine_info(workdir)
    machine["packages"].update(
        {"grpcio": grpc.__version__, "h2": _version("h2"), "protobuf": _version("protobuf")}
    )
    ca = trustme.CA()
    modes = {"both": [False, True], "on": [True], "off": [False]}[args.tls]
    runs: list[WriteRun] = []
    counter = [0]
    try:
        for tls in modes:
            runs += run_mode(tls, workdir, ca, args, counter)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = summarize(runs)
    print(render_table(rows, args, machine["load_average"]))
    result = {
        "bench": "grpc_write",
        "started_utc": started.isoformat(timespec="seconds"),
        "parameters": {
            "sizes": args.sizes,
            "mb_per_session": args.mb,
            "request_bytes": args.request_bytes,
            "max_per_request": args.max_per_request,
            "window_bytes": args.window_bytes,
            "repeat": args.repeat,
            "ours": "python -m vdl.node, segment backend",
            "baseline": "grpcio sync server, decode + ack",
            "layer": "our GrpcServer, the same decode + ack handler",
            "client": "grpcio generic stream_stream",
        },
        "machine": machine,
        "summary": rows,
        "runs": [r.as_dict() for r in runs],
    }
    if not args.no_save:
        save_result("grpc-write", started, result)
    return 0


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
