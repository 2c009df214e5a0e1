"""Seeded inputs for fuzzing a node's gRPC (HTTP/2) port: what one connection sends.

A connection opens with the client preface and SETTINGS (sometimes a damaged or missing
preface), then frames, each either random bytes or a valid HTTP/2 frame (HEADERS of the
node's real methods and of unknown paths, DATA carrying gRPC messages of the YDB
protocol or random ones, SETTINGS, PING, WINDOW_UPDATE, RST_STREAM, PRIORITY, GOAWAY,
CONTINUATION, frames of unknown types) put through a few mutations (bit flips,
overwritten bytes, cuts, insertions, a tampered length, type or stream id). The same
seed gives the same bytes.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator

from hpack import Encoder
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from tests.integration.fuzz_support import Connection, connections
from tests.unit.grpc.h2_frames import PREFACE
from vdl.net.grpc.framing import encode_message
from vdl.net.ydb.protos import ydb_discovery_pb2, ydb_topic_pb2

DATABASE = "/local"
PATHS = (
    "/Ydb.Discovery.V1.DiscoveryService/ListEndpoints",
    "/Ydb.Discovery.V1.DiscoveryService/WhoAmI",
    "/Ydb.Topic.V1.TopicService/StreamWrite",
    "/Ydb.Topic.V1.TopicService/StreamRead",
    "/Ydb.Topic.V1.TopicService/DescribeTopic",
    "/Ydb.Topic.V1.TopicService/CreateTopic",
    "/Ydb.Topic.V1.TopicService/CommitOffset",
    "/Ydb.Scheme.V1.SchemeService/ListDirectory",
    "/Ydb.Auth.V1.AuthService/Login",
    "/No.Such/Method",
    "",
)
_NUMBERS = (0, 1, 2, 3, 7, 2**14, 2**24 - 1, 2**31 - 1, 2**31, 2**32 - 1)


class GrpcFuzz:
    def __init__(self, seed: int, topic: str) -> None:
        self.rng = random.Random(seed)
        self.topic = topic
        self.encoder = Encoder()

    def connections(self, inputs: int) -> Iterator[Connection]:
        """Connections until at least `inputs` inputs have been generated."""
        return connections(self.connection, inputs)

    def connection(self) -> Connection:
        rng = self.rng
        # A fresh HPACK context per connection, as the node's decoder has one.
        self.encoder = Encoder()
        self._next_stream = 1
        self._opened: list[int] = []
        opening = PREFACE + SettingsFrame(0).serialize()
        if rng.random() < 0.05:
            opening = self._mutate(opening)
        parts = [opening]
        for _ in range(rng.randrange(1, 24)):
            parts.append(self._frame())
        return Connection(b"".join(parts), len(parts))

    def _frame(self) -> bytes:
        rng = self.rng
        if rng.random() < 0.1:
            return rng.randbytes(rng.randrange(0, 64))
        makers: list[Callable[[], Frame]] = [
            self._headers,
            self._headers,
            self._data,
            self._data,
            self._data,
            lambda: SettingsFrame(0, settings=self._settings()),
            lambda: PingFrame(0, opaque_data=rng.randbytes(8)),
            lambda: WindowUpdateFrame(self._stream(), window_increment=rng.randrange(1, 2**31)),
            lambda: RstStreamFrame(self._stream(), error_code=rng.choice(_NUMBERS)),
            lambda: PriorityFrame(
                self._stream(), depends_on=self._stream(), stream_weight=rng.randrange(256)
            ),
            lambda: GoAwayFrame(0, last_stream_id=self._stream(), error_code=rng.randrange(14)),
            lambda: ContinuationFrame(self._stream(), data=rng.randbytes(rng.randrange(32))),
        ]
        frame = rng.choice(makers)()
        data = frame.serialize()
        if rng.random() < 0.03:
            # A frame type HTTP/2 does not define (must be ignored, RFC 9113 §4.1).
            data = data[:3] + bytes([rng.randrange(10, 256)]) + data[4:]
        if rng.random() < 0.2:
            data = self._mutate(data)
        return data

    def _stream(self) -> int:
        """Mostly a stream this connection opened, so frames reach the calls; sometimes
        one never opened, even, or the largest. (Never 0: hyperframe insists; mutations
        put 0 there too.)"""
        rng = self.rng
        if self._opened and rng.random() < 0.8:
            return rng.choice(self._opened)
        return rng.choice((1, 3, 2, 2**31 - 1, self._next_stream + 2))

    def _new_stream(self) -> int:
        if self.rng.random() < 0.9:
            stream = self._next_stream
            self._next_stream += 2
            self._opened.append(stream)
            return stream
        return self._stream()

    def _settings(self) -> dict[int, int]:
        rng = self.rng
        return {rng.randrange(1, 10): rng.choice(_NUMBERS) for _ in range(rng.randrange(4))}

    def _headers(self) -> Frame:
        rng = self.rng
        headers = [
            (":method", rng.choice(("POST", "POST", "GET", "PUT"))),
            (":scheme", "http"),
            (":path", rng.choice(PATHS)),
            (":authority", "127.0.0.1"),
            ("content-type", rng.choice(("application/grpc", "application/grpc+proto", "x"))),
            ("te", "trailers"),
            ("x-ydb-database", rng.choice((DATABASE, "/other", ""))),
        ]
        if rng.random() < 0.2:
            headers.append(("grpc-timeout", rng.choice(("1S", "10m", "99999999H", "x", "-1n"))))
        if rng.random() < 0.2:
            headers.append(("x-ydb-auth-ticket", rng.randbytes(16).hex()))
        if rng.random() < 0.2:
            headers.append(("grpc-encoding", rng.choice(("identity", "gzip", "zstd"))))
        if rng.random() < 0.05:
            rng.shuffle(headers)
        if rng.random() < 0.05:
            headers = headers[: rng.randrange(len(headers))]
        frame = HeadersFrame(self._new_stream(), data=self.encoder.encode(headers))
        frame.flags.add("END_HEADERS")
        if rng.random() < 0.3:
            frame.flags.add("END_STREAM")
        return frame

    def _data(self) -> Frame:
        rng = self.rng
        payload = encode_message(self._message())
        if rng.random() < 0.1:
            # A message prefix that promises more (or less) than follows, or compression.
            flag = rng.choice((0, 1, 2, 255))
            payload = struct.pack(">BI", flag, rng.choice(_NUMBERS)) + payload[5:]
        frame = DataFrame(self._stream(), data=payload)
        if rng.random() < 0.5:
            frame.flags.add("END_STREAM")
        return frame

    def _message(self) -> bytes:
        rng = self.rng
        choice = rng.randrange(6)
        if choice == 0:
            init = ydb_topic_pb2.StreamWriteMessage.InitRequest(
                path=self.topic, producer_id=rng.randbytes(4).hex()
            )
            return ydb_topic_pb2.StreamWriteMessage.FromClient(
                init_request=init
            ).SerializeToString()
        if choice == 1:
            write = ydb_topic_pb2.StreamWriteMessage.WriteRequest(
                codec=rng.choice((0, 1, 2, 10001)),
                messages=[
                    ydb_topic_pb2.StreamWriteMessage.WriteRequest.MessageData(
                        seq_no=rng.choice(_NUMBERS), data=rng.randbytes(rng.randrange(64))
                    )
                ],
            )
            return ydb_topic_pb2.StreamWriteMessage.FromClient(
                write_request=write
            ).SerializeToString()
        if choice == 2:
            init_read = ydb_topic_pb2.StreamReadMessage.InitRequest(
                consumer=rng.choice(("", "c")),
                topics_read_settings=[
                    ydb_topic_pb2.StreamReadMessage.InitRequest.TopicReadSettings(path=self.topic)
                ],
            )
            return ydb_topic_pb2.StreamReadMessage.FromClient(
                init_request=init_read
            ).SerializeToString()
        if choice == 3:
            return ydb_discovery_pb2.ListEndpointsRequest(
                database=rng.choice((DATABASE, ""))
            ).SerializeToString()
        if choice == 4:
            return ydb_topic_pb2.DescribeTopicRequest(path=self.topic).SerializeToString()
        return rng.randbytes(rng.randrange(48))

    def _mutate(self, data: bytes) -> bytes:
        rng = self.rng
        out = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            kind = rng.randrange(6)
            if kind == 0 and out:
                i = rng.randrange(len(out))
                out[i] ^= 1 << rng.randrange(8)
            elif kind == 1 and out:
                i = rng.randrange(len(out))
                out[i] = rng.randrange(256)
            elif kind == 2 and len(out) > 1:
                del out[rng.randrange(len(out)) :]
            elif kind == 3:
                i = rng.randrange(len(out) + 1)
                out[i:i] = rng.randbytes(rng.randrange(1, 16))
            elif kind == 4 and len(out) >= 9:
                # The frame's 24-bit length: shorter, longer, or the most a frame may say.
                length = int.from_bytes(out[:3], "big")
                new = rng.choice((0, length - 1, length + 1, 2**14 + 1, 2**24 - 1))
                out[:3] = min(max(0, new), 2**24 - 1).to_bytes(3, "big")
            elif kind == 5 and len(out) >= 9:
                # Type and stream id.
                out[3] = rng.randrange(256)
                out[5:9] = struct.pack(">I", rng.choice(_NUMBERS) & 0xFFFFFFFF)
        return bytes(out)
