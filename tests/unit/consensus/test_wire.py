from __future__ import annotations

import pytest

from vdl.backends.api import Entry, EntryType
from vdl.consensus import Config, SnapshotMeta
from vdl.consensus.messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    RequestVote,
    TimeoutNow,
    VoteResponse,
)
from vdl.consensus.wire import WireError, decode, encode

MESSAGES: list[Message] = [
    AppendEntries(
        1,
        2,
        7,
        prev_index=10,
        prev_term=6,
        commit=9,
        entries=(
            Entry(7, 11, EntryType.NOOP, b""),
            Entry(7, 12, EntryType.DATA, b"\x00batch" * 20),
            Entry(7, 13, EntryType.CONFIG, b"\x01\x00\x01\x00\x00" + b"\x00" * 7 + b"\x01"),
        ),
    ),
    AppendEntries(1, 2, 7, 0, 0, 0),
    AppendResponse(2, 1, 7, 12),
    AppendResponse(2, 1, 7, 40, reject=True, hint_index=33, hint_term=5),
    Heartbeat(1, 3, 2**61, 12),
    HeartbeatResponse(3, 1, 4),
    RequestVote(4, 5, 9, 100, 8, pre_vote=True),
    RequestVote(4, 5, 9, 100, 8, transfer=True),
    VoteResponse(5, 4, 9, granted=True, pre_vote=True),
    VoteResponse(5, 4, 9, granted=False),
    TimeoutNow(1, 2, 3),
    InstallSnapshot(
        1, 2, 5, SnapshotMeta(1000, 4, Config(frozenset({1, 2, 3}), frozenset({7}))), b"seg-17"
    ),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(message: Message) -> None:
    data = encode(message)
    assert decode(data) == message
    assert decode(memoryview(data)) == message


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_truncated_or_padded_bytes_are_rejected(message: Message) -> None:
    data = encode(message)
    with pytest.raises(WireError):
        decode(data[:-1])
    with pytest.raises(WireError):
        decode(data + b"\x00")


def test_unknown_kind() -> None:
    with pytest.raises(WireError):
        decode(b"\x63" + bytes(24))


def test_a_garbage_config_entry_is_a_wire_error_not_a_core_error() -> None:
    forged = AppendEntries(1, 2, 7, 0, 0, 0, (Entry(7, 1, EntryType.CONFIG, b"\xff" * 5),))
    with pytest.raises(WireError, match="configuration"):
        decode(encode(forged))


@pytest.mark.parametrize(
    "message",
    [
        Heartbeat(1, 3, 2**63, 12),
        Heartbeat(1, 3, 4, 2**64 - 1),
        AppendEntries(1, 2, 7, 2**64 - 2, 0, 0, (Entry(7, 2**64 - 1, EntryType.NOOP, b""),)),
        RequestVote(2**63, 5, 9, 100, 8),
    ],
    ids=["term", "commit", "index", "node"],
)
def test_numbers_no_peer_could_have_sent_are_rejected(message: Message) -> None:
    with pytest.raises(WireError, match="out of range"):
        decode(encode(message))
