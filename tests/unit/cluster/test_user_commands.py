"""Users as metadata-group commands: round trip through the log format, applied into the
replicated table that overrides the users file, and replay never undoing a later change."""

from __future__ import annotations

import pytest

from vdl.cluster.commands import decode_command, encode_command
from vdl.cluster.memory_meta import MemoryMetaStore
from vdl.cluster.metadata import MetadataState
from vdl.cluster.user_commands import ReplicatedUsers, user_put_command, user_remove_command
from vdl.log.error_codes import ErrorCode
from vdl.security.user_table import UserTable, decode_user
from vdl.security.users import User, UsersFileError, UserStore, new_user

ALICE_1 = new_user("alice", "first-pw")
ALICE_2 = new_user("alice", "second-pw")


def _node(meta: MemoryMetaStore) -> tuple[MetadataState, UserTable]:
    state = MetadataState()
    table = UserTable(meta)
    ReplicatedUsers(meta, table).register(state)
    return state, table


def _apply_at(state: MetadataState, index: int, command: dict[str, object]) -> None:
    # What MetadataGroup.apply does for the entry at `index`.
    state.applying_index = index
    assert state.apply(command).error == ErrorCode.NONE


def test_command_round_trip_carries_no_password() -> None:
    command = decode_command(encode_command(user_put_command(ALICE_1), 3))
    assert decode_user(str(command["user"])) == ALICE_1
    assert "first-pw" not in str(command)
    assert decode_command(encode_command(user_remove_command("alice"), 4))["name"] == "alice"


def test_a_plain_password_line_is_refused() -> None:
    with pytest.raises(UsersFileError):
        decode_user("alice:first-pw")
    state, _ = _node(MemoryMetaStore())
    state.applying_index = 1
    assert state.apply({"op": "user_put", "user": "alice:pw"}).error == ErrorCode.INVALID_REQUEST


def test_the_table_overrides_the_users_file() -> None:
    meta = MemoryMetaStore()
    state, table = _node(meta)
    store = UserStore({"alice": ALICE_1, "bob": new_user("bob", "bob-pw")})
    store.table = table
    _apply_at(state, 1, user_put_command(ALICE_2))
    assert store.verify_password("alice", "second-pw")
    assert not store.verify_password("alice", "first-pw")
    # Removal hides a user some node still has in its file.
    _apply_at(state, 2, user_remove_command("bob"))
    assert store.get("bob") is None
    assert store.names() == ["alice"]
    # And survives a restart: the table is read back from the MetaStore.
    reopened = UserTable(meta)
    assert reopened.lookup("bob") == (True, None)
    assert reopened.lookup("alice") == (True, ALICE_2)


def test_replay_does_not_undo_a_later_change() -> None:
    meta = MemoryMetaStore()
    log: list[dict[str, object]] = [
        user_put_command(ALICE_1),
        user_put_command(ALICE_2),
        user_remove_command("alice"),
    ]
    state, table = _node(meta)
    for index, command in enumerate(log[:2], 1):
        _apply_at(state, index, command)
    # A restart replays the log from the start into the same (persistent) table.
    state, table = _node(meta)
    _apply_at(state, 1, log[0])
    # Mid-replay the newer password is still the one in force.
    assert table.lookup("alice") == (True, ALICE_2)
    _apply_at(state, 2, log[1])
    _apply_at(state, 3, log[2])
    assert table.lookup("alice") == (True, None)
    # Another restart: the removed user does not come back while the log replays.
    state, table = _node(meta)
    for index, command in enumerate(log, 1):
        _apply_at(state, index, command)
        assert table.lookup("alice") == (True, None)


def _user(name: str) -> User:
    return new_user(name, f"{name}-pw")


def test_names_merge_file_and_table() -> None:
    state, table = _node(MemoryMetaStore())
    store = UserStore({"bob": _user("bob")})
    store.table = table
    _apply_at(state, 1, user_put_command(_user("carol")))
    assert store.names() == ["bob", "carol"]
