"""Large Kafka responses are sent in pieces, never joined whole."""

from __future__ import annotations

import random

from vdl.net.kafka.connection import SEND_CHUNK, _chunks


def test_pieces_keep_the_bytes_and_stay_small() -> None:
    rng = random.Random(7)
    parts: list[bytes | memoryview] = []
    for _ in range(300):
        size = rng.choice([4, 61, 1000, 70_000, SEND_CHUNK, 3 * SEND_CHUNK])
        data = rng.randbytes(size)
        parts.append(memoryview(data) if rng.random() < 0.5 else data)
    pieces = list(_chunks(parts))
    originals = {id(part) for part in parts}
    assert b"".join(bytes(p) for p in pieces) == b"".join(bytes(p) for p in parts)
    for piece in pieces:
        size = memoryview(piece).nbytes
        # Joined groups stop once they reach SEND_CHUNK; large parts go as they are.
        assert size < 2 * SEND_CHUNK or id(piece) in originals
    assert list(_chunks(b"whole")) == [b"whole"]
