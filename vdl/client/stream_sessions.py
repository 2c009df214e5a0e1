"""Keeping a topic stream open: one session after another until an error that retrying
cannot fix. Writers and readers differ only in what a session does and what they make of
the final error; how they reconnect is the same, so it lives here.

A stream that broke with its connection, or that its node refused in-band with UNAVAILABLE
(on a cluster a node takes a writer only for partitions it leads, and says UNAVAILABLE to
send it on), makes the connection move to the next node of its pool."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from vdl.client import backoff
from vdl.client.connection import Connection
from vdl.client.errors import (
    UNAVAILABLE,
    YdbStatusError,
    breaks_connection,
    is_retriable,
    is_slow_retry,
    root_error,
)
from vdl.net.grpc import GrpcChannel, GrpcError, StatusCode


async def run_sessions(
    connection: Connection,
    session: Callable[[GrpcChannel], Awaitable[None]],
    opened: Callable[[], int],
    *,
    what: str,
    closing: Callable[[], bool] = lambda: False,
) -> BaseException | None:
    """Run `session` on a channel again and again; return the error that ended it for good,
    or None once `closing()` says the owner is shutting down.

    `opened()` counts sessions that got past their handshake: the back-off starts over
    after one did, so a stream that breaks now and then reconnects at once, while one that
    cannot get through backs off. A session that ends without an error is retried too (the
    server closed the stream, say on its shutdown)."""
    attempt = 0
    while not closing():
        try:
            channel = await connection.channel()
        except Exception as exc:  # closed connection, or it can never connect
            return exc
        before = opened()
        try:
            await session(channel)
            error: BaseException = GrpcError(StatusCode.UNAVAILABLE, f"{what} stream ended")
        except Exception as exc:
            error = root_error(exc)
        if closing():
            # Whatever the stream was doing belongs to the one that ended.
            return None
        if not is_retriable(error):
            return error
        if breaks_connection(error) or _sent_elsewhere(error, connection):
            connection.report_broken(channel)
        if opened() > before:
            attempt = 0
        policy = backoff.SLOW if is_slow_retry(error) else backoff.FAST
        await trio.sleep(policy.delay(attempt))
        attempt += 1
    return None


def _sent_elsewhere(error: BaseException, connection: Connection) -> bool:
    """The node answered UNAVAILABLE in-band: another node of the pool may serve us."""
    return (
        isinstance(error, YdbStatusError)
        and error.status == UNAVAILABLE
        and len(connection.endpoints) > 1
    )
