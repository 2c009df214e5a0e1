"""Pure pieces of the write and read sessions: partition choice, codecs, response building."""

from __future__ import annotations

import gzip
import uuid

import cramjam
import pytest
from ydb._grpc.v6.protos import ydb_topic_pb2 as sdk_topic

from vdl.broker.topics import Topic
from vdl.log.ydb_mapping import YdbMessage
from vdl.net.ydb.operation import StatusIds, YdbError, wire
from vdl.net.ydb.protos import ydb_topic_pb2
from vdl.net.ydb.topic_read import batches_of, fill_partition_data
from vdl.net.ydb.topic_write import advertised_codecs, choose_partition, decode_payload


def test_a_producer_is_pinned_to_one_partition() -> None:
    chosen = {choose_partition(8, "producer-7", "", None) for _ in range(3)}
    assert len(chosen) == 1
    assert choose_partition(8, "p", "group", None) == choose_partition(8, "other", "group", None)
    spread = {choose_partition(8, f"p{i}", "", None) for i in range(100)}
    assert len(spread) == 8
    assert choose_partition(8, "p", "", 5) == 5
    with pytest.raises(YdbError) as failure:
        choose_partition(2, "p", "", 2)
    assert failure.value.status == StatusIds.BAD_REQUEST


def test_codecs() -> None:
    topic = Topic("t", 1, uuid.uuid4())
    assert advertised_codecs(topic) == [1]
    assert advertised_codecs(Topic("t", 1, uuid.uuid4(), supported_codecs=(1, 2))) == [1, 2]
    assert decode_payload(1, b"raw", 10) == b"raw"
    assert decode_payload(2, gzip.compress(b"zipped"), 100) == b"zipped"
    assert decode_payload(4, bytes(cramjam.zstd.compress(b"zstd data")), 100) == b"zstd data"
    # Inflation stops past the limit: None, and the caller names the message.
    assert decode_payload(2, gzip.compress(bytes(10_000)), 100) is None
    assert decode_payload(4, bytes(cramjam.zstd.compress(bytes(10_000))), 100) is None
    # A custom codec's payload is the server's to keep as it is, never to decode.
    assert decode_payload(10001, b"\x01opaque", 100) == b"\x01opaque"
    for codec, data in [(2, b"not gzip"), (4, b"not zstd"), (3, b"lzop"), (5, b"?"), (999, b"")]:
        with pytest.raises(YdbError) as failure:
            decode_payload(codec, data, 100)
        assert failure.value.status == StatusIds.BAD_REQUEST


def test_custom_codec_messages_go_out_in_their_own_batch() -> None:
    messages = [
        YdbMessage(b"a", 1, 1000, "g", (), "p1", 2000, {}, offset=10),
        YdbMessage(
            b"enc", 2, 1001, "g", (), "p1", 2000, {}, offset=11, codec=10001, uncompressed_size=42
        ),
    ]
    reply = ydb_topic_pb2.StreamReadMessage.FromServer(status=wire(StatusIds.SUCCESS))
    fill_partition_data(reply.read_response.partition_data.add(partition_session_id=7), messages)
    parsed = sdk_topic.StreamReadMessage.FromServer.FromString(reply.SerializeToString())
    plain, custom = parsed.read_response.partition_data[0].batches
    assert (plain.codec, plain.message_data[0].uncompressed_size) == (1, 1)
    assert (custom.codec, custom.message_data[0].data) == (10001, b"enc")
    assert custom.message_data[0].uncompressed_size == 42


def test_read_response_as_the_sdk_parses_it() -> None:
    messages = [
        YdbMessage(b"a", 1, 1000, "g", (("k", b"v"),), "p1", 2000, {"s": "1"}, offset=10),
        YdbMessage(b"b", 2, 1001, "g", (), "p1", 2000, {"s": "1"}, offset=11),
        YdbMessage(b"c", 0, 1002, "", (), "", 1002, {}, offset=12),
    ]
    assert [len(b) for b in batches_of(messages)] == [2, 1]
    reply = ydb_topic_pb2.StreamReadMessage.FromServer(status=wire(StatusIds.SUCCESS))
    fill_partition_data(reply.read_response.partition_data.add(partition_session_id=7), messages)
    parsed = sdk_topic.StreamReadMessage.FromServer.FromString(reply.SerializeToString())
    data = parsed.read_response.partition_data[0]
    assert data.partition_session_id == 7
    first, second = data.batches
    assert (first.producer_id, first.codec, dict(first.write_session_meta)) == ("p1", 1, {"s": "1"})
    assert first.written_at.ToMilliseconds() == 2000
    assert [m.offset for m in first.message_data] == [10, 11]
    assert first.message_data[0].metadata_items[0].value == b"v"
    assert first.message_data[0].created_at.ToMilliseconds() == 1000
    assert second.codec == 1 and second.message_data[0].data == b"c"
