"""enable_keepalive turns SO_KEEPALIVE on with the requested probe timing."""

from __future__ import annotations

import socket

from vdl.net.kafka.keepalive import DEFAULT_KEEPALIVE, KeepaliveTiming, enable_keepalive


def _timing(sock: socket.socket) -> KeepaliveTiming:
    return KeepaliveTiming(
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
    )


def test_keepalive_options_are_set() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        enable_keepalive(sock, KeepaliveTiming(idle_s=30, interval_s=5, count=4))
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert _timing(sock) == KeepaliveTiming(30, 5, 4)


def test_default_timing_drops_a_silent_peer_after_two_minutes() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        enable_keepalive(sock)
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert _timing(sock) == DEFAULT_KEEPALIVE == KeepaliveTiming(60, 10, 6)
