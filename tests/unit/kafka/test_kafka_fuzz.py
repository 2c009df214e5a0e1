"""Random and mutated bytes must only ever raise the codec's own exception types.

The server maps those to a clean answer or a clean close; anything else would
be an unhandled crash of the connection task.  (hypothesis is not installed,
so this uses seeded random inputs: deterministic and reproducible.)
"""

import random
import struct

import pytest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest

from tests.unit.kafka.kafka_oracle import kp_batch, kp_frame
from vdl.log.record_batch import InvalidBatch, iter_records, validate_produced_batch
from vdl.net.kafka.control_codec import decode_request
from vdl.net.kafka.errors import KafkaError, MalformedRequest
from vdl.net.kafka.fetch_codec import decode_fetch_request
from vdl.net.kafka.framing import FrameDecoder, FrameTooLarge
from vdl.net.kafka.header import parse_request_header
from vdl.net.kafka.produce_codec import decode_produce_request
from vdl.net.kafka.versions import ADVERTISED

ITERATIONS = 3000


def mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.5 and buf:
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op < 0.7 and buf:
            del buf[rng.randrange(len(buf)) :]
        elif op < 0.85 and len(buf) > 4:
            # Lengths are big-endian int16/int32: bump a random aligned word.
            i = rng.randrange(len(buf) - 4)
            struct.pack_into(">i", buf, i, rng.choice([-2, -1, 0, 1, 0x7FFFFFFF, 1 << 20]))
        else:
            buf[rng.randrange(len(buf) + 1) : 0] = rng.randbytes(rng.randint(1, 8))
    return bytes(buf)


def seeds() -> list[bytes]:
    produce = ProduceRequest(
        version=8,
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(
                        index=0, records=kp_batch(2)
                    )
                ],
            )
        ],
    )
    fetch = FetchRequest(
        version=11,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1000,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=100,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return [bytes(kp_frame(produce)), bytes(kp_frame(fetch))]


def exercise(frame: bytes) -> None:
    view = memoryview(frame)
    try:
        header = parse_request_header(view)
    except MalformedRequest:
        return
    body = view[header.body_offset :]
    for version in (3, 5, 8):
        try:
            req = decode_produce_request(body, version)
        except KafkaError:
            continue
        for topic in req.topics:
            for part in topic.partitions:
                try:
                    validate_produced_batch(part.records, max_batch_bytes=1 << 20, allow_zstd=True)
                except InvalidBatch:
                    pass
    for version in (4, 7, 11):
        try:
            decode_fetch_request(body, version)
        except KafkaError:
            pass
    if header.api_key in ADVERTISED:
        low, high = ADVERTISED[header.api_key]
        if low <= header.api_version <= high:
            try:
                decode_request(header, view)
            except KafkaError:
                pass


@pytest.mark.parametrize("seed", range(4))
def test_random_frames(seed: int) -> None:
    rng = random.Random(seed)
    bases = seeds()
    for _ in range(ITERATIONS):
        if rng.random() < 0.2:
            frame = rng.randbytes(rng.randint(0, 64))
        else:
            frame = mutate(rng, rng.choice(bases))
        if rng.random() < 0.3 and len(frame) >= 4:
            # Aim at a valid advertised (key, version) so the library decoders get garbage too.
            key = rng.choice(list(ADVERTISED))
            low, high = ADVERTISED[key]
            frame = struct.pack(">hh", key, rng.randint(low, high)) + frame[4:]
        exercise(frame)


@pytest.mark.parametrize("seed", range(4))
def test_random_batches(seed: int) -> None:
    rng = random.Random(seed)
    base = kp_batch(3)
    for _ in range(ITERATIONS):
        data = mutate(rng, base) if rng.random() < 0.8 else rng.randbytes(rng.randint(0, 80))
        try:
            validate_produced_batch(memoryview(data), max_batch_bytes=1 << 20, allow_zstd=False)
        except InvalidBatch:
            pass
        try:
            list(iter_records(data))
        except (InvalidBatch, NotImplementedError):
            pass


@pytest.mark.parametrize("seed", range(4))
def test_random_stream_into_frame_decoder(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        dec = FrameDecoder(rng.choice([0, 10, 1000]))
        try:
            for _ in range(20):
                for frame in dec.feed(rng.randbytes(rng.randint(0, 50))):
                    assert len(frame) <= 1000
        except FrameTooLarge:
            pass
