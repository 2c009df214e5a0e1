"""YDB stream tokens: checked at start, renewed by UpdateTokenRequest, fatal on expiry."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from vdl.net.grpc import ServerContext
from vdl.net.ydb.auth import AUTH_TICKET_HEADER, Authenticator, StreamAuth, TokenSigner
from vdl.net.ydb.operation import StatusIds, YdbError
from vdl.security.acl import Operation, ResourceType
from vdl.security.acl_store import AclStore
from vdl.security.service import Security
from vdl.security.users import UserStore


def _clock_ms() -> int:
    return int(trio.current_time() * 1000)


def _auth(security: Security | None = None) -> Authenticator:
    users = UserStore.from_passwords({"alice": "pw", "bob": "pw2"})
    return Authenticator(
        users, TokenSigner(b"k" * 32), _clock_ms, security=security, token_lifetime_ms=10_000
    )


def _context(token: str | None) -> ServerContext:
    metadata: tuple[tuple[str, str | bytes], ...] = (
        () if token is None else ((AUTH_TICKET_HEADER, token),)
    )
    return ServerContext("/m", metadata, "127.0.0.1:1", "x", None)


async def test_stream_ends_when_its_token_expires(autojump_clock: trio.testing.MockClock) -> None:
    auth = _auth()
    stream = StreamAuth(auth, _context(auth.login("alice", "pw")))
    start = trio.current_time()
    with pytest.raises(YdbError) as failure:
        await stream.watch_expiry()
    assert failure.value.status == StatusIds.UNAUTHORIZED
    assert trio.current_time() - start == pytest.approx(10.0, abs=0.01)


async def test_update_token_extends_the_stream(autojump_clock: trio.testing.MockClock) -> None:
    auth = _auth()
    stream = StreamAuth(auth, _context(auth.login("alice", "pw")))
    start = trio.current_time()

    async def renew() -> None:
        await trio.sleep(8)
        stream.update(auth.login("alice", "pw"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(renew)
        with pytest.raises(YdbError):
            await stream.watch_expiry()
    assert trio.current_time() - start == pytest.approx(18.0, abs=0.01)
    with pytest.raises(YdbError, match="cannot change its user"):
        fresh = StreamAuth(auth, _context(auth.login("alice", "pw")))
        fresh.update(auth.login("bob", "pw2"))


async def test_missing_or_bad_tokens_are_refused(autojump_clock: trio.testing.MockClock) -> None:
    auth = _auth()
    for token in (None, "", "v1.x.1.y"):
        with pytest.raises(YdbError) as failure:
            StreamAuth(auth, _context(token))
        assert failure.value.status == StatusIds.UNAUTHORIZED


class _Meta:
    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)

    def scan(self, prefix: bytes):  # type: ignore[no-untyped-def]
        return iter(sorted((k, v) for k, v in self.data.items() if k.startswith(prefix)))


async def test_acls_from_the_store_apply(autojump_clock: trio.testing.MockClock) -> None:
    from vdl.security.acl import AclEntry

    users = UserStore.from_passwords({"alice": "pw"})
    acls = AclStore(_Meta(), ["admin"], enabled=True)  # type: ignore[arg-type]
    auth = _auth(Security(users=users, acls=acls))
    who = auth.identify(auth.login("alice", "pw"))
    with pytest.raises(YdbError):
        auth.require(who, Operation.READ, ResourceType.TOPIC, "t")
    assert acls.add(AclEntry("User:alice", ResourceType.TOPIC, "t", Operation.READ))
    auth.require(who, Operation.READ, ResourceType.TOPIC, "t")
    assert acls.remove(AclEntry("User:alice", ResourceType.TOPIC, "t", Operation.READ))
    with pytest.raises(YdbError):
        auth.require(who, Operation.DESCRIBE, ResourceType.TOPIC, "t")
