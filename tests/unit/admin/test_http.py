"""The admin HTTP shell over an in-memory stream: h11 parses, the shell bounds and answers."""

from __future__ import annotations

import base64

import trio
import trio.testing

from vdl.admin.app import _basic_credentials
from vdl.admin.http import HttpServer, Request, Response


async def _hello(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("handler failed")
    return Response(200, f"hello {request.path} {dict(request.query)}".encode())


async def _exchange(data: bytes, *, server: HttpServer | None = None, close: bool = True) -> bytes:
    """Send `data` to a served connection, read until the server closes it."""
    server = server or HttpServer(_hello, request_timeout=5, idle_timeout=5)
    client, side = trio.testing.memory_stream_pair()
    out = bytearray()
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            await server._serve_connection(side, "127.0.0.1:5000")
            await side.aclose()

        nursery.start_soon(serve)
        await client.send_all(data)
        if close:
            await client.send_eof()
        while chunk := await client.receive_some(65536):
            out += chunk
    return bytes(out)


async def test_get_and_keep_alive() -> None:
    answer = await _exchange(
        b"GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n"
    )
    assert answer.count(b"HTTP/1.1 200 OK\r\n") == 2
    assert b"hello /a {'x': ['1']}" in answer and b"hello /b {}" in answer


async def test_head_has_no_body() -> None:
    answer = await _exchange(b"HEAD /a HTTP/1.1\r\nHost: h\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"Content-Length: 11" in head
    assert body == b""


async def test_only_get_and_head() -> None:
    answer = await _exchange(b"DELETE /a HTTP/1.1\r\nHost: h\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 405 Method Not Allowed")
    assert b"Connection: close" in answer or answer.count(b"HTTP/1.1") == 1


async def test_a_request_body_is_refused() -> None:
    answer = await _exchange(b"GET /a HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbody")
    assert answer.startswith(b"HTTP/1.1 413")


async def test_garbage_gets_400_and_the_connection_ends() -> None:
    answer = await _exchange(b"\x00\x01\x02 not http\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 Bad Request")
    assert answer.count(b"HTTP/1.1") == 1


async def test_a_head_over_the_limit_gets_431() -> None:
    server = HttpServer(_hello, max_head_bytes=1024)
    answer = await _exchange(
        b"GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n", server=server
    )
    assert answer.startswith(b"HTTP/1.1 431")


async def test_a_failing_handler_is_a_500_and_the_connection_serves_on() -> None:
    answer = await _exchange(
        b"GET /boom HTTP/1.1\r\nHost: h\r\n\r\nGET /ok HTTP/1.1\r\nHost: h\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 500")
    assert b"hello /ok" in answer


async def test_a_silent_client_is_dropped_after_the_request_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server = HttpServer(_hello, request_timeout=3, idle_timeout=60)
    start = trio.current_time()
    answer = await _exchange(b"GET / HTTP/1.1\r\n", server=server, close=False)
    assert answer == b""
    assert 3 <= trio.current_time() - start < 4


def test_basic_credentials() -> None:
    token = base64.b64encode(b"alice:pa:ss").decode()
    assert _basic_credentials(f"Basic {token}") == ("alice", "pa:ss")
    assert _basic_credentials(f"basic {token}") == ("alice", "pa:ss")
    assert _basic_credentials("Bearer abc") == (None, None)
    assert _basic_credentials("Basic !!!") == (None, None)
    assert _basic_credentials("Basic " + base64.b64encode(b"nocolon").decode()) == (None, None)
