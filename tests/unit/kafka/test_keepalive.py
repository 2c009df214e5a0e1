"""enable_keepalive turns SO_KEEPALIVE on with the requested probe timing."""

from __future__ import annotations

import socket

from vdl.net.kafka.keepalive import enable_keepalive


def test_keepalive_options_are_set() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        enable_keepalive(sock, idle_s=30, interval_s=5, count=4)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 5
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 4
