"""YDB authentication failures and failure statuses, counted in `STAGES` (process-global:
every check is a delta)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from vdl.metrics.stages import STAGES
from vdl.net.grpc import ServerContext
from vdl.net.ydb.auth import AUTH_TICKET_HEADER, Authenticator, StreamAuth, TokenSigner
from vdl.net.ydb.operation import StatusIds, YdbError, refuse_early, unary
from vdl.net.ydb.protos import ydb_auth_pb2, ydb_topic_pb2
from vdl.security.users import UserStore

METHOD = "/Ydb.Topic.V1.TopicService/DescribeTopic"


def _clock_ms() -> int:
    return int(trio.current_time() * 1000)


def _auth() -> Authenticator:
    users = UserStore.from_passwords({"alice": "pw"})
    return Authenticator(users, TokenSigner(b"k" * 32), _clock_ms, token_lifetime_ms=10_000)


def _context(token: str | None = None) -> ServerContext:
    metadata: tuple[tuple[str, str | bytes], ...] = (
        () if token is None else ((AUTH_TICKET_HEADER, token),)
    )
    return ServerContext(METHOD, metadata, "127.0.0.1:1", "x", None)


def _failures() -> dict[str, int]:
    return {
        reason: STAGES.counter("ydb_authentication_failures", reason=reason).value
        for reason in ("login", "token")
    }


def _moved(before: dict[str, int]) -> dict[str, int]:
    return {key: value - before[key] for key, value in _failures().items()}


async def test_failed_logins_are_counted() -> None:
    auth = _auth()
    before = _failures()
    request = ydb_auth_pb2.LoginRequest(user="alice", password="wrong")
    with pytest.raises(YdbError):
        await auth.handle_login(request, _context())
    with pytest.raises(YdbError):
        auth.login("mallory", "pw")
    await auth.handle_login(ydb_auth_pb2.LoginRequest(user="alice", password="pw"), _context())
    assert _moved(before) == {"login": 2, "token": 0}


async def test_bad_tokens_are_counted_once_each() -> None:
    auth = _auth()
    other = Authenticator(auth.users, TokenSigner(b"x" * 32), lambda: 0)
    before = _failures()
    for bad in (None, "", "garbage", other.login("alice", "pw")):
        with pytest.raises(YdbError):
            auth.authorize(_context(bad))
    assert auth.check_token(auth.login("alice", "pw")) == "alice"
    assert _moved(before) == {"login": 0, "token": 4}


async def test_an_expired_stream_token_is_counted(autojump_clock: trio.testing.MockClock) -> None:
    auth = _auth()
    stream = StreamAuth(auth, _context(auth.login("alice", "pw")))
    before = _failures()
    with pytest.raises(YdbError):
        await stream.watch_expiry()
    assert _moved(before) == {"login": 0, "token": 1}


def _errors(status: str) -> int:
    return STAGES.counter("ydb_request_errors", method=METHOD, status=status).value


async def test_failure_statuses_of_unary_calls_are_counted() -> None:
    async def missing(request: Any, context: ServerContext) -> Any:
        raise YdbError(StatusIds.SCHEME_ERROR, "no such topic")

    async def found(request: Any, context: ServerContext) -> Any:
        return ydb_topic_pb2.DescribeTopicResult()

    auth = _auth()
    request = ydb_topic_pb2.DescribeTopicRequest(path="t").SerializeToString()
    response = ydb_topic_pb2.DescribeTopicResponse
    before = (_errors("SCHEME_ERROR"), _errors("UNAUTHORIZED"))
    await unary(ydb_topic_pb2.DescribeTopicRequest, response, missing, None)(request, _context())
    await unary(ydb_topic_pb2.DescribeTopicRequest, response, found, None)(request, _context())
    # Refused from the headers, before the body (operation.refuse_early).
    assert refuse_early(response, auth.authorize)(_context()) is not None
    assert refuse_early(response, auth.authorize)(_context(auth.login("alice", "pw"))) is None
    after = (_errors("SCHEME_ERROR"), _errors("UNAUTHORIZED"))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
