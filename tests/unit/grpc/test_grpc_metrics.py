"""gRPC call metrics per method: calls, non-OK statuses, unary times, bytes and connections,
read from `STAGES` (process-global, so every check is a delta)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from tests.unit.grpc.grpc_handlers import make_server
from vdl.metrics.stages import LATENCY_BOUNDS_S, STAGES
from vdl.net.grpc import (
    GrpcError,
    GrpcServer,
    ServerContext,
    StatusCode,
    open_memory_channel,
)
from vdl.net.limits import ConnectionLimits


def _read(name: str, labels: dict[str, str]) -> int:
    if name == "grpc_request_seconds":
        return STAGES.histogram(name, LATENCY_BOUNDS_S, **labels).count
    return STAGES.counter(name, **labels).value


def deltas(**series: tuple[str, dict[str, str]]) -> Callable[[], dict[str, int]]:
    """A function giving how much each series moved since this call."""
    before = {key: _read(name, labels) for key, (name, labels) in series.items()}

    def moved() -> dict[str, int]:
        return {key: _read(name, labels) - before[key] for key, (name, labels) in series.items()}

    return moved


def _has_histogram(method: str) -> bool:
    return any(
        h.name == "grpc_request_seconds" and h.labels == {"method": method}
        for h in STAGES.histograms()
    )


async def test_unary_calls_are_counted_timed_and_their_errors_named() -> None:
    async def aborting(request: bytes, context: ServerContext) -> bytes:
        context.abort(StatusCode.NOT_FOUND, "no such thing")

    server = make_server()
    server.add_unary("/metrics.Test/Abort", aborting)
    moved = deltas(
        calls=("grpc_requests", {"method": "/test.Echo/Unary"}),
        timed=("grpc_request_seconds", {"method": "/test.Echo/Unary"}),
        aborts=("grpc_requests", {"method": "/metrics.Test/Abort"}),
        not_found=(
            "grpc_request_errors",
            {"method": "/metrics.Test/Abort", "code": "NOT_FOUND"},
        ),
        aborts_timed=("grpc_request_seconds", {"method": "/metrics.Test/Abort"}),
        unknown=("grpc_requests", {"method": "unknown"}),
        unimplemented=("grpc_request_errors", {"method": "unknown", "code": "UNIMPLEMENTED"}),
        bytes_in=("grpc_bytes_in", {}),
        bytes_out=("grpc_bytes_out", {}),
    )
    async with open_memory_channel(server) as channel:
        for _ in range(3):
            assert await channel.unary("/test.Echo/Unary", b"hi") == b"hi"
        with pytest.raises(GrpcError):
            await channel.unary("/metrics.Test/Abort", b"")
        with pytest.raises(GrpcError):
            await channel.unary("/metrics.Test/Nope", b"")
    counts = moved()
    assert counts.pop("bytes_in") > 0 and counts.pop("bytes_out") > 0
    assert counts == {
        "calls": 3,
        "timed": 3,
        "aborts": 1,
        "not_found": 1,
        "aborts_timed": 1,
        "unknown": 1,
        "unimplemented": 1,
    }


async def test_streams_are_counted_not_timed() -> None:
    method = "/test.Echo/Stream"
    moved = deltas(
        calls=("grpc_requests", {"method": method}),
        cancelled=("grpc_request_errors", {"method": method, "code": "CANCELLED"}),
    )
    async with open_memory_channel(make_server()) as channel:
        async with channel.stream(method) as call:
            await call.send(b"x")
            assert await call.receive() == b"x"
            await call.close_send()
            assert await call.receive() is None
        assert moved() == {"calls": 1, "cancelled": 0}
        # A stream the client resets ends CANCELLED.
        async with channel.stream(method) as call:
            await call.send(b"y")
            assert await call.receive() == b"y"
            await call.cancel()
        with trio.fail_after(10):
            while moved()["cancelled"] == 0:
                await trio.sleep(0.01)
    assert moved() == {"calls": 2, "cancelled": 1}
    assert not _has_histogram(method)


async def test_precheck_answers_are_counted() -> None:
    async def never(request: bytes, context: ServerContext) -> bytes:
        raise AssertionError("the precheck answers")

    server = GrpcServer()
    server.add_unary("/metrics.Test/Early", never, precheck=lambda context: b"early")
    moved = deltas(
        calls=("grpc_requests", {"method": "/metrics.Test/Early"}),
        timed=("grpc_request_seconds", {"method": "/metrics.Test/Early"}),
    )
    async with open_memory_channel(server) as channel:
        assert await channel.unary("/metrics.Test/Early", b"body") == b"early"
    assert moved() == {"calls": 1, "timed": 1}


async def _wait_for(moved: Callable[[], dict[str, int]], want: dict[str, int]) -> None:
    with trio.fail_after(10):
        while moved() != want:
            await trio.sleep(0.01)


async def test_connections_accepted_and_refused() -> None:
    server = make_server()
    server.limits = ConnectionLimits("gRPC", max_connections=1, max_connections_per_ip=1)
    moved = deltas(
        accepted=("grpc_connections_accepted", {}), refused=("grpc_connections_refused", {})
    )
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        first = await trio.open_tcp_stream("127.0.0.1", port)
        await _wait_for(moved, {"accepted": 1, "refused": 0})
        second = await trio.open_tcp_stream("127.0.0.1", port)
        await _wait_for(moved, {"accepted": 1, "refused": 1})
        await first.aclose()
        await second.aclose()
        await server.shutdown(grace=1)
    assert moved() == {"accepted": 1, "refused": 1}
