"""One YDB token secret per cluster: agreed once through group 0, adopted by the signer."""

from __future__ import annotations

from pathlib import Path

import pytest

from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.cluster.metadata import MetadataState
from vdl.cluster.metadata_group import MetadataGroup
from vdl.cluster.token_key_commands import (
    CLUSTER_SECRET_KEY,
    ReplicatedTokenKey,
    load_token_secret,
)
from vdl.config import ConfigError
from vdl.net.ydb.auth import TokenSigner
from vdl.net.ydb.operation import YdbError


def _node(meta: MemoryMetaStore) -> tuple[MetadataState, ReplicatedTokenKey]:
    state = MetadataState({1: ("h", 1)})
    replicated = ReplicatedTokenKey(MetadataGroup(state), meta)
    replicated.register(state)
    return state, replicated


def test_the_first_secret_wins_and_reaches_the_signer() -> None:
    meta = MemoryMetaStore()
    state, replicated = _node(meta)
    signer = TokenSigner(b"local-secret-of-this-node-000000")
    early = signer.issue("alice", now_ms=0)
    replicated.on_secret.append(signer.adopt)
    first, second = bytes(range(32)), bytes(range(1, 33))
    assert state.apply({"op": "token_key", "secret": first.hex()}).error == 0
    assert state.apply({"op": "token_key", "secret": second.hex()}).error == 0
    assert replicated.secret == first == meta.get(CLUSTER_SECRET_KEY)
    assert signer.secret == first
    # A token from before the secret was agreed still works on its node.
    assert signer.verify(early, now_ms=1) == "alice"
    # Restarted: the agreed secret is loaded from the store.
    assert ReplicatedTokenKey(MetadataGroup(MetadataState()), meta).secret == first


def test_a_token_from_one_node_works_on_another_once_both_adopted() -> None:
    shared = bytes(range(32))
    one = TokenSigner(b"a" * 32)
    two = TokenSigner(b"b" * 32)
    token = one.issue("bob", now_ms=0)
    with pytest.raises(YdbError):
        two.verify(token, now_ms=1)
    one.adopt(shared)
    two.adopt(shared)
    assert two.verify(one.issue("bob", now_ms=0), now_ms=1) == "bob"
    forged = TokenSigner(b"c" * 32).issue("bob", now_ms=0)
    with pytest.raises(YdbError):
        two.verify(forged, now_ms=1)


@pytest.mark.parametrize("secret", ["zz", "00" * 16])
def test_a_malformed_secret_is_refused(secret: str) -> None:
    meta = MemoryMetaStore()
    state, replicated = _node(meta)
    # The metadata group skips a command whose handler raises this (metadata_group.py).
    with pytest.raises(ValueError):
        state.apply({"op": "token_key", "secret": secret})
    assert replicated.secret is None and meta.get(CLUSTER_SECRET_KEY) is None


def test_a_token_secret_file_gives_one_key_and_refuses_a_short_or_missing_file(
    tmp_path: Path,
) -> None:
    good = tmp_path / "secret"
    good.write_text("ab" * 16 + "\n")
    key = load_token_secret(good)
    assert len(key) == 32 and key == load_token_secret(good) and b"ab" not in key
    short = tmp_path / "short"
    short.write_text("x" * 31)
    with pytest.raises(ConfigError, match="at least 32"):
        load_token_secret(short)
    with pytest.raises(ConfigError, match="cannot read token-secret-file"):
        load_token_secret(tmp_path / "missing")
