"""Seeded inputs for fuzzing a node's raft port: what one connection sends.

Each connection opens with one of: no hello at all (random bytes), a hello naming the
admin client (node 0), a member, a stranger or a random id, a hello of the wrong magic,
or a snapshot request with random fields; then frames, each either random bytes or a
valid frame (every raft message kind, forward and gossip bodies, CONFIG entries good and
bad) put through a few mutations (bit flips, overwritten bytes, cuts, insertions, a
tampered length). The same seed gives the same bytes.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable, Iterator

from tests.integration.fuzz_support import Connection, connections
from vdl.backends.api import Entry, EntryType
from vdl.cluster.leader_gossip import LeaderClaim, encode_claims
from vdl.consensus.frames import encode_forward, encode_frame, encode_gossip, encode_hello
from vdl.consensus.membership import Config, encode_config
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
from vdl.consensus.snapshot_wire import encode_request
from vdl.consensus.state import SnapshotMeta

_NUMBERS = (0, 1, 2, 3, 7, 2**31 - 1, 2**32, 2**61, 2**62, 2**63, 2**64 - 1)


class RaftFuzz:
    def __init__(self, seed: int, target: int, members: tuple[int, ...], groups: int) -> None:
        self.rng = random.Random(seed)
        self.target = target
        self.members = members
        self.groups = groups

    def connections(self, inputs: int) -> Iterator[Connection]:
        """Connections until at least `inputs` inputs have been generated."""
        return connections(self.connection, inputs)

    def connection(self) -> Connection:
        rng = self.rng
        kind = rng.random()
        if kind < 0.05:
            return Connection(self._random_bytes(64), 1)
        if kind < 0.10:
            request = encode_request(
                rng.choice((0, *range(self.groups + 1), self._number())),
                self._number(),
                rng.random() < 0.5,
            )
            return Connection(self._mutate(request) if rng.random() < 0.5 else request, 1)
        if kind < 0.13:
            return Connection(struct.pack(">IQ", rng.getrandbits(32), self._number()), 1)
        sender = rng.choice((0, 0, *self.members, self.target, 99, self._number()))
        hello = encode_hello(sender % 2**64)
        frames = [self._frame(sender) for _ in range(rng.randint(1, 40))]
        return Connection(hello + b"".join(frames), 1 + len(frames))

    # ---- frames ------------------------------------------------------------------------

    def _frame(self, sender: int) -> bytes:
        rng = self.rng
        if rng.random() < 0.15:
            return self._random_bytes(48)
        frame = rng.choice(self._builders)(self, sender)
        if rng.random() < 0.4:
            return frame  # valid: the node must take it or drop the connection cleanly
        return self._mutate(frame)

    def _message(self, sender: int) -> bytes:
        rng = self.rng
        src = sender if rng.random() < 0.9 else self._number() % 2**62
        dst = self.target if rng.random() < 0.9 else self._number() % 2**62
        # Terms a live cluster can still grow from: a term forged just below the wire's
        # limit, once adopted, leaves no room for the next election anywhere (a member's
        # power, which raft TLS keeps to members; mutations still reach the limit).
        term = rng.choice((rng.randint(0, 50), self._number() % 2**40))
        index = rng.randint(0, 200)
        kinds: list[Callable[[], Message]] = [
            lambda: AppendEntries(
                src, dst, term, index, rng.randint(0, 50), rng.randint(0, 300), self._entries(index)
            ),
            lambda: AppendResponse(
                src, dst, term, index, rng.random() < 0.5, rng.randint(0, 200), rng.randint(0, 9)
            ),
            lambda: Heartbeat(src, dst, term, rng.randint(0, 300)),
            lambda: HeartbeatResponse(src, dst, term),
            lambda: RequestVote(
                src, dst, term, index, rng.randint(0, 50), rng.random() < 0.5, rng.random() < 0.2
            ),
            lambda: VoteResponse(src, dst, term, rng.random() < 0.5, rng.random() < 0.5),
            lambda: TimeoutNow(src, dst, term),
            lambda: InstallSnapshot(
                src,
                dst,
                term,
                SnapshotMeta(index, rng.randint(0, 50), Config(frozenset(self.members))),
                self._random_bytes(16),
            ),
        ]
        group = rng.choice((*range(self.groups + 1), self._number() % (2**64 - 2)))
        return encode_frame(group, rng.choice(kinds)())

    def _entries(self, prev_index: int) -> tuple[Entry, ...]:
        rng = self.rng
        entries = []
        for i in range(rng.randint(0, 4)):
            kind = rng.choice(list(EntryType))
            if kind == EntryType.CONFIG:
                voters = frozenset(rng.sample(range(1, 6), rng.randint(1, 3)))
                payload = encode_config(Config(voters))
                if rng.random() < 0.5:
                    payload = self._mutate(payload)
            else:
                payload = self._random_bytes(32)
            entries.append(Entry(rng.randint(0, 50), prev_index + 1 + i, kind, payload))
        return tuple(entries)

    def _forward(self, sender: int) -> bytes:
        rng = self.rng
        ops = ("register", "add_node", "remove_node", "set_replicas", "auto_topic", "acl_add")
        shapes: list[object] = [
            {"op": rng.choice(ops)},
            {"op": rng.choice(ops), "node": rng.choice((None, "x", [], 99, -1))},
            {"op": rng.choice(([], {}, 1, None, True))},
            {"op": "auto_topic", "name": rng.choice((None, 1, [], "t" * rng.randint(0, 300)))},
            [rng.choice(ops)],
            rng.choice(ops),
            None,
        ]
        body = json.dumps(rng.choice(shapes)).encode()
        if rng.random() < 0.2:
            body = b"[" * rng.randint(1, 5000)
        return encode_forward(body)

    def _gossip(self, sender: int) -> bytes:
        rng = self.rng
        claims = [
            LeaderClaim(rng.randint(0, self.groups + 2), rng.randint(0, 50), (1, 2))
            for _ in range(rng.randint(0, 3))
        ]
        return encode_gossip(encode_claims(sender % 2**32, claims))

    _builders: tuple[Callable[[RaftFuzz, int], bytes], ...] = (
        _message,
        _message,
        _message,
        _forward,
        _gossip,
    )

    # ---- bytes -------------------------------------------------------------------------

    def _number(self) -> int:
        rng = self.rng
        return rng.choice(_NUMBERS) if rng.random() < 0.7 else rng.getrandbits(64)

    def _random_bytes(self, most: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, most))

    def _mutate(self, data: bytes) -> bytes:
        rng = self.rng
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            choice = rng.random()
            if not out or choice < 0.15:
                out[rng.randint(0, len(out)) :] = rng.randbytes(rng.randint(0, 8))
            elif choice < 0.45:
                at = rng.randrange(len(out))
                out[at] ^= 1 << rng.randrange(8)
            elif choice < 0.7:
                at = rng.randrange(len(out))
                out[at] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.getrandbits(8)))
            elif choice < 0.85:
                at = rng.randint(0, len(out))
                out[at:at] = rng.randbytes(rng.randint(1, 8))
            elif len(out) >= 4:
                # The frame's length prefix: shorter, longer, or absurd.
                (length,) = struct.unpack_from(">I", out)
                new = rng.choice((0, 7, 8, length - 1, length + 1, 2**26 + 1, 2**32 - 1))
                struct.pack_into(">I", out, 0, max(0, min(new, 2**32 - 1)))
        return bytes(out)
