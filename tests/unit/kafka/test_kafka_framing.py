import struct

import pytest

from vdl.net.kafka.framing import FrameDecoder, FrameTooLarge, frame


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_single_frame_in_one_feed() -> None:
    dec = FrameDecoder(1024)
    out = dec.feed(framed(b"hello"))
    assert [bytes(f) for f in out] == [b"hello"]
    assert dec.buffered == 0


def test_coalesced_frames_in_one_feed() -> None:
    dec = FrameDecoder(1024)
    data = framed(b"a") + framed(b"") + framed(b"ccc") + framed(b"dd")[:3]
    out = dec.feed(data)
    assert [bytes(f) for f in out] == [b"a", b"", b"ccc"]
    assert [bytes(f) for f in dec.feed(framed(b"dd")[3:])] == [b"dd"]


def test_byte_by_byte_feed() -> None:
    payloads = [b"x" * 7, b"", b"yz" * 100]
    stream = b"".join(framed(p) for p in payloads)
    dec = FrameDecoder(1024)
    got: list[bytes] = []
    for i in range(len(stream)):
        got.extend(bytes(f) for f in dec.feed(stream[i : i + 1]))
    assert got == payloads


@pytest.mark.parametrize("chunk", [1, 3, 4, 5, 17, 4096])
def test_split_at_every_chunk_size(chunk: int) -> None:
    payloads = [bytes([i]) * (i * 13) for i in range(20)]
    stream = b"".join(framed(p) for p in payloads)
    dec = FrameDecoder(1 << 20)
    got: list[bytes] = []
    for i in range(0, len(stream), chunk):
        got.extend(bytes(f) for f in dec.feed(stream[i : i + chunk]))
    assert got == payloads


def test_frame_within_one_chunk_is_not_copied() -> None:
    data = framed(b"payload")
    out = FrameDecoder(100).feed(data)
    assert out[0].obj is data


def test_large_frame_in_many_chunks() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = framed(payload)
    dec = FrameDecoder(2 << 20)
    got = []
    for i in range(0, len(stream), 65536):
        got.extend(dec.feed(stream[i : i + 65536]))
    assert len(got) == 1 and got[0] == payload


def test_mutable_input_is_copied() -> None:
    buf = bytearray(framed(b"abc"))
    out = FrameDecoder(100).feed(buf)
    buf[4:7] = b"zzz"
    assert bytes(out[0]) == b"abc"


def test_oversize_raises_immediately() -> None:
    dec = FrameDecoder(10)
    with pytest.raises(FrameTooLarge) as info:
        dec.feed(struct.pack(">i", 11))  # no payload needed to refuse
    assert info.value.size == 11


def test_negative_size_raises() -> None:
    with pytest.raises(FrameTooLarge):
        FrameDecoder(10).feed(struct.pack(">i", -5))


def test_oversize_after_good_frames_keeps_them() -> None:
    dec = FrameDecoder(10)
    with pytest.raises(FrameTooLarge) as info:
        dec.feed(framed(b"ok") + struct.pack(">i", 1000))
    assert [bytes(f) for f in info.value.frames] == [b"ok"]


def test_limit_is_inclusive() -> None:
    assert [bytes(f) for f in FrameDecoder(3).feed(framed(b"abc"))] == [b"abc"]


def test_frame_prefixes_total_size() -> None:
    parts: list[bytes | memoryview] = [b"ab", memoryview(b"cde"), b""]
    out = frame(parts)
    assert b"".join(out) == struct.pack(">i", 5) + b"abcde"
    assert out[1:] == parts
